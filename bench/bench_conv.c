/* Time of resnet20's convolutions for one training step (batch 128, 1x28x28, 1 thread):
 * forward, backward data (not for the first layer) and backward weights.
 * Build: cmake --build build && gcc -O2 -Iinclude -Isrc bench/bench_conv.c build/libherd.a \
 *            -ldnnl -lcjson -lz -fopenmp -lm -o /tmp/bench_conv
 * Run:   OMP_NUM_THREADS=1 HERD_CONV_LAYOUT=blocked|plain /tmp/bench_conv */
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

typedef struct { int c_in, hw, c_out, k, stride, pad, count; } layer;

int main(int argc, char **argv)
{
    int batch = argc > 1 ? atoi(argv[1]) : 128, steps = argc > 2 ? atoi(argv[2]) : 5;
    const layer layers[] = {
        {1, 28, 16, 3, 1, 1, 1},  {16, 28, 16, 3, 1, 1, 6}, {16, 28, 32, 3, 2, 1, 1},
        {16, 28, 32, 1, 2, 0, 1}, {32, 14, 32, 3, 1, 1, 5}, {32, 14, 64, 3, 2, 1, 1},
        {32, 14, 64, 1, 2, 0, 1}, {64, 7, 64, 3, 1, 1, 5},
    };
    const herd_backend *be = herd_backend_cpu();
    be->set_threads(1);
    double total = 0, t_fwd = 0, t_bd = 0, t_bw = 0;
    for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++) {
        const layer *L = &layers[l];
        herd_conv_desc d = {.n = batch, .c_in = L->c_in, .h_in = L->hw, .w_in = L->hw,
                            .c_out = L->c_out, .kh = L->k, .kw = L->k, .stride = L->stride,
                            .pad = L->pad};
        herd_conv_plan *p;
        if (herd_conv_desc_finish(&d) || be->conv2d_plan(&d, &p)) {
            fprintf(stderr, "%s\n", herd_last_error());
            return 1;
        }
        size_t nx = (size_t)batch * d.c_in * d.h_in * d.w_in, ny = (size_t)batch * d.c_out * d.h_out * d.w_out;
        float *x = be->alloc(nx * 4), *dx = be->alloc(nx * 4), *y = be->alloc(ny * 4),
              *w = be->alloc((size_t)d.c_out * d.c_in * d.kh * d.kw * 4),
              *dw = be->alloc((size_t)d.c_out * d.c_in * d.kh * d.kw * 4);
        double best[3] = {1e9, 1e9, 1e9};
        for (int s = 0; s < steps + 1; s++) {
            double t0 = now();
            be->conv2d_fwd(p, x, w, NULL, y);
            double t1 = now();
            if (l > 0)
                be->conv2d_bwd_data(p, y, w, dx);
            double t2 = now();
            be->conv2d_bwd_weights(p, x, y, dw, NULL, 0);
            double t3 = now();
            double t[3] = {t1 - t0, t2 - t1, t3 - t2};
            for (int i = 0; i < 3; i++)
                if (t[i] < best[i])
                    best[i] = t[i];
        }
        double layer_ms = (best[0] + best[1] + best[2]) * 1e3 * L->count;
        printf("%2d->%2d %2dx%2d k%d s%d x%d: fwd %6.2f  bwd_data %6.2f  bwd_w %6.2f  ms (x count: %7.2f)\n",
               L->c_in, L->c_out, L->hw, L->hw, L->k, L->stride, L->count, best[0] * 1e3,
               best[1] * 1e3, best[2] * 1e3, layer_ms);
        total += layer_ms;
        t_fwd += best[0] * 1e3 * L->count, t_bd += best[1] * 1e3 * L->count, t_bw += best[2] * 1e3 * L->count;
        be->conv2d_plan_free(p);
        be->free(x), be->free(dx), be->free(y), be->free(w), be->free(dw);
    }
    printf("total conv per step: %.1f ms (fwd %.1f, bwd_data %.1f, bwd_w %.1f)\n", total, t_fwd, t_bd, t_bw);
    return 0;
}
