/* How fast --check-replicas hashes the parameters: herd_hash_floats over 64 MiB of
 * floats (resnet20 holds 1 MiB, resnet50 100 MiB), best of 10 runs, as GB/s. It was
 * part of tests/test_replica.c, which cannot assert a speed on a shared machine.
 * Build: gcc -O2 -Iinclude -Isrc bench/bench_hash.c build/libherd.a -ldnnl -lcjson -lz \
 *            -lprotobuf-c -lplplot -lhwloc -fopenmp -lm $(pkg-config --libs ompi-c 2>/dev/null) \
 *            -o /tmp/bench_hash */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dist/replica.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void)
{
    const size_t n = (size_t)16 << 20; /* 64 MiB */
    float *x = malloc(n * sizeof *x);
    if (!x) {
        fprintf(stderr, "bench_hash: cannot allocate %zu bytes\n", n * sizeof *x);
        return 1;
    }
    uint64_t s = 5;
    for (size_t i = 0; i < n; i++) { /* any bits will do: the hash reads them all */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)(s >> 40) / (float)(1 << 24) - 0.5f;
    }
    double best = 1e9;
    volatile uint64_t h = 0;
    for (int r = 0; r < 10; r++) {
        double t0 = now();
        h ^= herd_hash_floats(x, n);
        double t = now() - t0;
        best = t < best ? t : best;
    }
    printf("herd_hash_floats: %zu MiB in %.2f ms, %.2f GB/s (best of 10)\n", n * sizeof *x >> 20,
           best * 1e3, (double)(n * sizeof *x) / best / 1e9);
    free(x);
    return 0;
}
