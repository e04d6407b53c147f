/* What the checks at --resume cost on a checkpoint's files: the checksum
 * (herd_st_checksum over each whole file) and the finite scan (herd_first_nonfinite,
 * what checkpoint.c's check_finite runs) over each file's data, best of 5, in ms. Set against
 * the wall time of the --resume itself (docs/reliability.md, "Checkpoint integrity").
 * Build: gcc -O2 -D_GNU_SOURCE -Iinclude -Isrc bench/bench_ckpt_verify.c build/libherd.a -ldnnl \
 *            -lcjson -lz -lxxhash -lprotobuf-c -lplplot -lhwloc -fopenmp -lm \
 *            $(pkg-config --libs ompi-c 2>/dev/null) -o /tmp/bench_ckpt_verify
 * Run:   /tmp/bench_ckpt_verify DIR/ckpt-N.safetensors DIR/ckpt-N.state.safetensors */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/finite.h"
#include "core/safetensors.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    double sum_ms = 0, fin_ms = 0;
    for (int a = 1; a < argc; a++) {
        FILE *f = fopen(argv[a], "rb");
        if (!f || fseek(f, 0, SEEK_END) != 0)
            return 1;
        size_t n = (size_t)ftell(f);
        rewind(f);
        unsigned char *b = malloc(n);
        if (!b || fread(b, 1, n, f) != n)
            return 1;
        fclose(f);
        uint64_t hlen = 0;
        for (int i = 0; i < 8; i++)
            hlen |= (uint64_t)b[i] << (8 * i);
        size_t slot;
        if (herd_st_checksum_slot(b + 8, hlen, &slot) != 0)
            return fprintf(stderr, "%s: no checksum\n", argv[a]), 1;
        double best_sum = 1e9, best_fin = 1e9;
        volatile uint64_t sink = 0;
        for (int r = 0; r < 5; r++) {
            double t0 = now();
            sink ^= herd_st_checksum(b, n, slot + 8);
            double t1 = now();
            size_t nf = (n - 8 - hlen) / 4;
            uint32_t bad = herd_first_nonfinite((const float *)(const void *)(b + 8 + hlen), nf) != nf;
            sink ^= bad;
            double t2 = now();
            best_sum = t1 - t0 < best_sum ? t1 - t0 : best_sum;
            best_fin = t2 - t1 < best_fin ? t2 - t1 : best_fin;
        }
        printf("%s: %zu bytes: checksum %.1f ms, finite scan %.1f ms (best of 5)\n", argv[a], n,
               best_sum * 1e3, best_fin * 1e3);
        sum_ms += best_sum * 1e3;
        fin_ms += best_fin * 1e3;
        free(b);
    }
    printf("total: checksum %.1f ms + finite scan %.1f ms = %.1f ms\n", sum_ms, fin_ms, sum_ms + fin_ms);
    return 0;
}
