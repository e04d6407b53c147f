/* Time of the hand-written ops at resnet20's largest activation (128x16x28x28, 1 thread).
 * Build: gcc -O2 -Iinclude -Isrc bench/bench_ops.c build/libherd.a -ldnnl -lcjson -lz \
 *            -fopenmp -lm -o /tmp/bench_ops */
#include <stdio.h>
#include <time.h>

#include "backend/backend.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define TIME(label, bytes, call)                                                         \
    do {                                                                                 \
        double best = 1e9;                                                               \
        for (int r = 0; r < 10; r++) {                                                   \
            double t0 = now();                                                           \
            call;                                                                        \
            double t = now() - t0;                                                       \
            best = t < best ? t : best;                                                  \
        }                                                                                \
        printf("%-14s %7.3f ms  %6.1f GB/s\n", label, best * 1e3, (bytes) / best * 1e-9); \
    } while (0)

int main(void)
{
    const int n = 128, c = 16, hw = 784;
    const size_t sz = (size_t)n * c * hw, B = sz * 4;
    const herd_backend *be = herd_backend_cpu();
    be->set_threads(1);
    float *x = be->alloc(B), *y = be->alloc(B), *dy = be->alloc(B), *dx = be->alloc(B);
    float g[16], b[16], m[16], is[16], rm[16], rv[16], dg[16], db[16];
    for (int i = 0; i < 16; i++)
        g[i] = 1, b[i] = 0, rm[i] = 0, rv[i] = 1;
    for (size_t i = 0; i < sz; i++)
        x[i] = (float)(i % 13) - 6, dy[i] = (float)(i % 7) - 3;
    TIME("bn_fwd_train", 3.0 * B, be->bn_fwd_train(n, c, hw, x, g, b, y, m, is, rm, rv, 0.1f, 1e-5f));
    TIME("bn_bwd", 5.0 * B, be->bn_bwd(n, c, hw, x, dy, g, m, is, dx, dg, db, 0));
    TIME("relu_fwd", 2.0 * B, be->relu_fwd(sz, x, y));
    TIME("relu_bwd", 3.0 * B, be->relu_bwd(sz, y, dy, dx));
    TIME("add", 3.0 * B, be->add(sz, x, dy, y));
    TIME("copy", 2.0 * B, be->copy(sz, x, y));
    return 0;
}
