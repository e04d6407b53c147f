/* --deterministic's linear ops against the GEMMs plain training uses (1 thread, GFLOP/s):
 * forward (y = x W^T), input gradient (dx = dy W) and weight gradient (dW = dy^T x; the
 * exact op rounding each slice of SLICE rows to the grid and adding it to double sums),
 * at mlp's shapes or ROWS IN OUT [SLICE] given.
 * Build: gcc -O2 -Iinclude -Isrc bench/bench_exact_linear.c build/libherd.a -ldnnl -lcjson \
 *            -lhwloc -lxxhash -lprotobuf-c -lz -fopenmp -lm -o /tmp/bench_exact_linear
 * Run:   OMP_NUM_THREADS=1 /tmp/bench_exact_linear [ROWS IN OUT [SLICE]] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/backend.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define TIME(label, flop, call)                                                  \
    do {                                                                         \
        double best = 1e9;                                                       \
        for (int r = 0; r < 50; r++) {                                           \
            double t0 = now();                                                   \
            if ((call) != HERD_OK)                                               \
                return 1;                                                        \
            double t = now() - t0;                                               \
            best = t < best ? t : best;                                          \
        }                                                                        \
        printf("%-34s %7.1f GFLOP/s\n", label, (flop) / best * 1e-9);            \
    } while (0)

static float *filled(const herd_backend *be, size_t n, unsigned seed)
{
    float *p = be->alloc(n * sizeof *p);
    srand(seed);
    for (size_t i = 0; p && i < n; i++)
        p[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    return p;
}

static int one_shape(const herd_backend *be, int rows, int in, int out, int slice)
{
    float *x = filled(be, (size_t)rows * in, 1), *w = filled(be, (size_t)out * in, 2);
    float *y = filled(be, (size_t)rows * out, 3), *dy = filled(be, (size_t)rows * out, 4);
    float *dx = filled(be, (size_t)rows * in, 5), *dw = filled(be, (size_t)out * in, 6);
    double *sums = calloc((size_t)out * in, sizeof *sums);
    if (!x || !w || !y || !dy || !dx || !dw || !sums)
        return 1;
    double flop = 2.0 * rows * in * out;
    printf("rows %d, in %d, out %d, slices of %d\n", rows, in, out, slice);
    TIME("forward, gemm", flop, be->gemm(false, true, rows, out, in, 1, x, in, w, in, 0, y, out));
    TIME("forward, exact", flop, be->exact_linear_fwd(rows, in, out, x, w, NULL, y));
    TIME("input gradient, gemm", flop,
         be->gemm(false, false, rows, in, out, 1, dy, out, w, in, 0, dx, in));
    TIME("input gradient, exact", flop, be->exact_linear_bwd_data(rows, in, out, dy, w, dx));
    TIME("weight gradient, gemm (beta 1)", flop,
         be->gemm(true, false, out, in, rows, 1, dy, out, x, in, 1, dw, in));
    herd_exact_wgrad j = {.rows = rows, .slice = slice, .in = in, .out = out, .dy = dy, .x = x,
                          .w = {.sums = sums, .grid = true, .scale = 0x1p20}};
    TIME("weight gradient, exact, into sums", flop, be->exact_linear_wgrad(&j));
    j.w.grid = false;
    TIME("weight gradient, exact, maximum only", flop, be->exact_linear_wgrad(&j));
    be->free(x), be->free(w), be->free(y), be->free(dy), be->free(dx), be->free(dw);
    free(sums);
    return 0;
}

int main(int argc, char **argv)
{
    const herd_backend *be = herd_backend_cpu();
    if (be->set_threads(1) != HERD_OK)
        return 1;
    if (argc >= 4)
        return one_shape(be, atoi(argv[1]), atoi(argv[2]), atoi(argv[3]),
                         argc > 4 ? atoi(argv[4]) : 8);
    /* mlp's three layers at micro-batches of 128 and 8. */
    static const int shapes[][3] = {{784, 512}, {512, 512}, {512, 10}};
    for (int rows = 128; rows >= 8; rows /= 16)
        for (int s = 0; s < 3; s++)
            if (one_shape(be, rows, shapes[s][0], shapes[s][1], 8))
                return 1;
    return 0;
}
