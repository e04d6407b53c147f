/* GPU time of the CUDA backend's ops at resnet20 (batch 512, 16x32x32) and resnet50
 * (batch 64, 64x56x56) activation sizes, fp32, timed with CUDA events (best of 20).
 * bench/torch_cuda_ops.py times the same ops in PyTorch for comparison.
 * Build (a CUDA build of herd in build/):
 *   gcc -O2 -Iinclude -Isrc -I/usr/local/cuda/include bench/bench_cuda_ops.c build/libherd.a \
 *       -L/usr/local/cuda/lib64 -lcudnn -lcublas -lcudart -lstdc++ -ldnnl -lcjson -lz -fopenmp -lm \
 *       -o /tmp/bench_cuda_ops */
#include <stdio.h>

#include <cuda_runtime.h>

#include "backend/backend.h"

static const herd_backend *g;
static cudaEvent_t e0, e1;

/* Milliseconds per call, best of 20 after 3 warm-ups; the status of the last call. */
#define TIME(ms, call)                                                     \
    do {                                                                   \
        ms = 1e9f;                                                         \
        for (int r_ = 0; r_ < 23; r_++) {                                  \
            cudaEventRecord(e0, 0);                                        \
            if ((call) != HERD_OK) {                                       \
                fprintf(stderr, "%s: %s\n", #call, herd_last_error());    \
                return 1;                                                  \
            }                                                              \
            cudaEventRecord(e1, 0);                                        \
            cudaEventSynchronize(e1);                                      \
            float t_;                                                      \
            cudaEventElapsedTime(&t_, e0, e1);                             \
            if (r_ >= 3 && t_ < ms)                                        \
                ms = t_;                                                   \
        }                                                                  \
    } while (0)

static void row(const char *what, float ms, double bytes, double flops)
{
    printf("%-34s %8.3f ms", what, ms);
    if (bytes > 0)
        printf("  %7.1f GB/s", bytes / ms / 1e6);
    if (flops > 0)
        printf("  %7.2f TFLOP/s", flops / ms / 1e9);
    printf("\n");
}

static int bench(const char *tag, int n, int c, int hw_side)
{
    int hw = hw_side * hw_side;
    size_t nx = (size_t)n * c * hw;
    float *x = g->alloc(nx * 4), *y = g->alloc(nx * 4), *dy = g->alloc(nx * 4),
          *dx = g->alloc(nx * 4), *m = g->alloc(nx * 4);
    float *gam = g->alloc(c * 4), *bet = g->alloc(c * 4), *sm = g->alloc(c * 4),
          *si = g->alloc(c * 4), *rm = g->alloc(c * 4), *rv = g->alloc(c * 4),
          *w = g->alloc((size_t)c * c * 9 * 4), *dw = g->alloc((size_t)c * c * 9 * 4);
    if (!x || !y || !dy || !dx || !m || !w || !dw) {
        fprintf(stderr, "alloc: %s\n", herd_last_error());
        return 1;
    }
    g->fill(nx, 0.5f, x), g->fill(nx, 0.1f, dy), g->fill(c, 1.0f, gam), g->fill(c, 1.0f, rv);
    g->fill((size_t)c * c * 9, 0.01f, w);
    double b = (double)nx * 4;
    float ms;
    char what[80];
    printf("%s: n=%d c=%d %dx%d (%.1f MB per tensor)\n", tag, n, c, hw_side, hw_side, b / 1e6);
    TIME(ms, g->relu_fwd(nx, x, y));
    row("relu_fwd", ms, 2 * b, 0);
    TIME(ms, g->add(nx, x, dy, y));
    row("add", ms, 3 * b, 0);
    TIME(ms, g->dropout_fwd(nx, x, y, m, 0.5f, 7));
    row("dropout_fwd", ms, 3 * b, 0);
    TIME(ms, g->bn_fwd_train(n, c, hw, x, gam, bet, y, sm, si, rm, rv, 0.1f, 1e-5f));
    row("bn_fwd_train", ms, 4 * b, 0); /* sum, sqdev, read + write */
    TIME(ms, g->bn_bwd(n, c, hw, x, dy, gam, sm, si, dx, gam, bet, 0.0f));
    row("bn_bwd", ms, 5 * b, 0);
    TIME(ms, g->global_avgpool_fwd(n, c, hw, x, sm));
    row("global_avgpool_fwd", ms, b, 0);
    herd_conv_desc d = {.n = n, .c_in = c, .h_in = hw_side, .w_in = hw_side, .c_out = c,
                        .kh = 3, .kw = 3, .stride = 1, .pad = 1};
    herd_conv_plan *p;
    if (g->conv2d_plan(&d, &p) != HERD_OK) {
        fprintf(stderr, "conv plan: %s\n", herd_last_error());
        return 1;
    }
    double fl = 2.0 * n * c * hw * c * 9;
    snprintf(what, sizeof what, "conv3x3 %d->%d fwd", c, c);
    TIME(ms, g->conv2d_fwd(p, x, w, NULL, y));
    row(what, ms, 0, fl);
    TIME(ms, g->conv2d_bwd_data(p, dy, w, dx));
    row("conv3x3 bwd data", ms, 0, fl);
    TIME(ms, g->conv2d_bwd_weights(p, x, dy, dw, NULL, 0.0f));
    row("conv3x3 bwd weights", ms, 0, fl);
    g->conv2d_plan_free(p);
    herd_pool_desc pd = {.n = n, .c = c, .h_in = hw_side, .w_in = hw_side, .k = 2, .stride = 2,
                         .is_max = true};
    herd_pool_plan *pp;
    if (g->pool_plan(&pd, &pp) != HERD_OK)
        return 1;
    TIME(ms, g->pool_fwd(pp, x, y, true));
    row("maxpool 2x2 fwd", ms, 1.25 * b, 0);
    TIME(ms, g->pool_bwd(pp, dy, dx));
    row("maxpool 2x2 bwd", ms, 1.25 * b, 0);
    g->pool_plan_free(pp);
    void *bufs[] = {x, y, dy, dx, m, gam, bet, sm, si, rm, rv, w, dw};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        g->free(bufs[i]);
    return 0;
}

int main(void)
{
    if (!(g = herd_backend_cuda())) {
        fprintf(stderr, "%s\n", herd_last_error());
        return 1;
    }
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    printf("%s\n", herd_build_info());
    if (bench("resnet20-like", 512, 16, 32) || bench("resnet50-like", 64, 64, 56))
        return 1;
    size_t np = 25557032; /* resnet50's parameters */
    float *w = g->alloc(np * 4), *gr = g->alloc(np * 4), *mb = g->alloc(np * 4),
          *v = g->alloc(np * 4), ms;
    herd_sgd_args sa = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 5e-4f};
    TIME(ms, g->sgd_update(np, w, gr, mb, &sa));
    row("sgd_update 25.6M params", ms, 5.0 * np * 4, 0);
    herd_adamw_args aa = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 1};
    TIME(ms, g->adamw_update(np, w, gr, mb, v, &aa));
    row("adamw_update 25.6M params", ms, 7.0 * np * 4, 0);
    g->free(w), g->free(gr), g->free(mb), g->free(v);
    herd_backend_cuda_shutdown();
    return 0;
}
