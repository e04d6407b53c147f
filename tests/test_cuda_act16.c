/* The CUDA backend's 16-bit paths (--precision bf16 and fp16) against the CPU backend in
 * fp32: the 16-bit activation ops (layout conversions, elementwise, pooling, batch norm),
 * convolutions with every mix of fp32 and 16-bit input and output, and gemm. Inputs are
 * rounded to 16 bits once and the CPU computes on the rounded values, so what differs is
 * the GPU's own rounding: of each 16-bit result (2^-8 of max(1, |value|) for bf16,
 * 2^-11 for fp16) and the order of fp32 sums. Exits 77 without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "herd_config.h"

#include "backend/backend.h"

#if HERD_HAVE_CUDA
#include <cuda_runtime.h>

static const herd_backend *cpu, *gpu;
static const herd_bf16_act_ops *A;
static double g_tol;     /* a 16-bit result against fp32, relative to max(1, |ref|) */
static const char *g_prec;

static float *upf(const float *h, size_t n)
{
    float *d = gpu->alloc(n * sizeof(float));
    if (!d || cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
        fail_msg("upload of %zu floats failed: %s", n, herd_last_error());
    return d;
}

static float *down(const void *d, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof(float));
    cudaError_t e = cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        fail_msg("download failed: %s (a kernel may have faulted)", cudaGetErrorString(e));
    return h;
}

static void check(const char *what, const float *dev, const float *ref, size_t n, double tol)
{
    float *h = down(dev, n);
    double err = tu_max_rel_err(h, ref, n);
    printf("  %s %-34s max rel err %.3g\n", g_prec, what, err);
    if (!(err <= tol))
        fail_msg("%s %s: max rel err %g > %g", g_prec, what, err, tol);
    free(h);
}

/* A 16-bit device copy of host NCHW x; *rounded gets (host) the fp32 values it holds. */
static uint16_t *up16(const float *x, int n, int c, int hw, float **rounded)
{
    size_t cnt = (size_t)n * c * hw;
    float *d = upf(x, cnt), *back = gpu->alloc(cnt * sizeof(float));
    uint16_t *d16 = gpu->alloc(cnt * 2);
    assert_herd_ok(A->from_f32(n, c, hw, d, d16));
    assert_herd_ok(A->to_f32(n, c, hw, d16, back));
    *rounded = down(back, cnt);
    gpu->free(d), gpu->free(back);
    return d16;
}

static void check16(const char *what, const uint16_t *d16, int n, int c, int hw, const float *ref,
                    double tol)
{
    size_t cnt = (size_t)n * c * hw;
    float *d = gpu->alloc(cnt * sizeof(float));
    assert_herd_ok(A->to_f32(n, c, hw, d16, d));
    check(what, d, ref, cnt, tol);
    gpu->free(d);
}

static void check_d(const char *what, const double *dev, const double *ref, size_t n)
{
    double *h = malloc(n * sizeof *h), err = 0;
    assert_true(cudaMemcpy(h, dev, n * sizeof *h, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (size_t i = 0; i < n; i++)
        err = fmax(err, fabs(h[i] - ref[i]) / fmax(1.0, fabs(ref[i])));
    printf("  %s %-34s max rel err %.3g\n", g_prec, what, err);
    if (!(err <= 1e-5))
        fail_msg("%s %s: max rel err %g", g_prec, what, err);
    free(h);
}

static void set_precision(herd_precision p)
{
    assert_herd_ok(gpu->set_precision(p));
    assert_true(A->in_use());
    g_prec = herd_precision_name(p);
    /* Up to two roundings of a result (a 16-bit output, then its bias) at 2^-8 (bf16) or
     * 2^-11 (fp16) of max(1, |value|) each, and some room. */
    g_tol = p == HERD_PRECISION_BF16 ? 1.2e-2 : 1.5e-3;
}

/* ------------------------------------------------------------------ layout, elementwise */

static void layout_and_elementwise(void)
{
    int n = 3, c = 24, hw = 13; /* c: whole packs of 8, not of 32 */
    size_t cnt = (size_t)n * c * hw;
    float *x = tu_randv(cnt, 1), *x2 = tu_randv(cnt, 2), *xr, *x2r;
    uint16_t *a = up16(x, n, c, hw, &xr), *b = up16(x2, n, c, hw, &x2r);
    printf("  %s %-34s max rel err %.3g\n", g_prec, "rounding on the way in",
           tu_max_rel_err(xr, x, cnt));
    assert_true(tu_max_rel_err(xr, x, cnt) <= g_tol / 2);
    float *xr2;
    uint16_t *again = up16(xr, n, c, hw, &xr2); /* rounded values go through unchanged */
    assert_true(tu_max_rel_err(xr2, xr, cnt) == 0);

    float *ref = malloc(cnt * sizeof *ref);
    uint16_t *y = gpu->alloc(cnt * 2);
    assert_herd_ok(cpu->relu_fwd(cnt, xr, ref));
    assert_herd_ok(A->relu_fwd(cnt, a, y));
    check16("relu_fwd", y, n, c, hw, ref, 0); /* exact: a relu rounds nothing */
    assert_herd_ok(cpu->relu_bwd(cnt, xr, x2r, ref));
    assert_herd_ok(A->relu_bwd(cnt, a, b, y));
    check16("relu_bwd", y, n, c, hw, ref, 0);
    assert_herd_ok(cpu->add(cnt, xr, x2r, ref));
    assert_herd_ok(A->add(cnt, a, b, y));
    check16("add", y, n, c, hw, ref, g_tol);
    assert_herd_ok(A->copy(cnt, b, y));
    assert_herd_ok(A->accumulate(cnt, a, y)); /* y = x2 + x */
    check16("copy, accumulate", y, n, c, hw, ref, g_tol);
    /* An odd count from an odd offset: the loops without 16-byte packs. */
    assert_herd_ok(A->add(cnt - 3, a + 1, b + 1, y + 1));
    check16("add (unaligned)", y, n, c, hw, ref, g_tol);

    /* Global average pooling: [n][c][hw] 16-bit -> [n][c] fp32 and back. */
    float *p = malloc((size_t)n * c * sizeof *p), *dp = tu_randv((size_t)n * c, 3);
    float *gp = gpu->alloc((size_t)n * c * sizeof(float)), *gdp = upf(dp, (size_t)n * c);
    assert_herd_ok(cpu->global_avgpool_fwd(n, c, hw, xr, p));
    assert_herd_ok(A->global_avgpool_fwd(n, c, hw, a, gp));
    check("global_avgpool_fwd", gp, p, (size_t)n * c, 1e-5);
    assert_herd_ok(cpu->global_avgpool_bwd(n, c, hw, dp, ref));
    assert_herd_ok(A->global_avgpool_bwd(n, c, hw, gdp, y));
    check16("global_avgpool_bwd", y, n, c, hw, ref, g_tol);

    void *dev[] = {a, b, again, y, gp, gdp};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        gpu->free(dev[i]);
    free(x), free(x2), free(xr), free(x2r), free(xr2), free(ref), free(p), free(dp);
}

/* ------------------------------------------------------------------ batch norm */

static void bn_case(int n, int c, int hw)
{
    printf(" bn n%d c%d hw%d\n", n, c, hw);
    size_t cnt = (size_t)n * c * hw;
    int64_t count = (int64_t)n * hw;
    float *x = tu_randv(cnt, 4), *dy = tu_randv(cnt, 5), *xr, *dyr;
    for (size_t i = 0; i < cnt; i++)
        x[i] = 3.0f * x[i] + 0.5f; /* a mean away from 0 */
    uint16_t *gx = up16(x, n, c, hw, &xr), *gdy = up16(dy, n, c, hw, &dyr);
    float *gamma = tu_randv(c, 6), *beta = tu_randv(c, 7), *rm = tu_randv(c, 8), *rv = tu_randv(c, 9);
    for (int i = 0; i < c; i++)
        rv[i] = 1.0f + rv[i] * rv[i];
    float *ggamma = upf(gamma, c), *gbeta = upf(beta, c), *grm = upf(rm, c), *grv = upf(rv, c);
    double *sum = malloc(2 * c * sizeof *sum), *gsum = gpu->alloc(2 * c * sizeof(double));
    /* Forward: the split ops of synchronised BN, then apply. */
    assert_herd_ok(cpu->bn_stats(n, c, hw, xr, NULL, count, sum));
    assert_herd_ok(A->bn_stats(n, c, hw, gx, NULL, count, gsum));
    check_d("bn_stats sum", gsum, sum, c);
    assert_herd_ok(cpu->bn_stats(n, c, hw, xr, sum, count, sum + c));
    assert_herd_ok(A->bn_stats(n, c, hw, gx, gsum, count, gsum + c));
    check_d("bn_stats sqdev", gsum + c, sum + c, c);
    float *y = malloc(cnt * sizeof *y), *sm = malloc(c * 4), *si = malloc(c * 4);
    float *gsm = gpu->alloc(c * 4), *gsi = gpu->alloc(c * 4);
    uint16_t *gy = gpu->alloc(cnt * 2);
    assert_herd_ok(cpu->bn_apply_train(n, c, hw, xr, gamma, beta, sum, sum + c, count, y, sm, si,
                                       rm, rv, 0.1f, 1e-5f));
    assert_herd_ok(A->bn_apply_train(n, c, hw, gx, ggamma, gbeta, gsum, gsum + c, count, gy, gsm,
                                     gsi, grm, grv, 0.1f, 1e-5f));
    check16("bn_apply_train y", gy, n, c, hw, y, g_tol);
    check("bn_apply_train save_mean", gsm, sm, c, 1e-5);
    check("bn_apply_train save_invstd", gsi, si, c, 1e-5);
    check("bn_apply_train running_mean", grm, rm, c, 1e-5);
    check("bn_apply_train running_var", grv, rv, c, 1e-5);
    assert_herd_ok(cpu->bn_fwd_infer(n, c, hw, xr, gamma, beta, y, rm, rv, 1e-5f));
    assert_herd_ok(A->bn_fwd_infer(n, c, hw, gx, ggamma, gbeta, gy, grm, grv, 1e-5f));
    check16("bn_fwd_infer y", gy, n, c, hw, y, g_tol);
    /* Backward: reduce (parameter gradients accumulated, then overwritten), apply. */
    float *dg = tu_randv(c, 10), *db = tu_randv(c, 11), *gdg = upf(dg, c), *gdb = upf(db, c);
    for (int beta_acc = 1; beta_acc >= 0; beta_acc--) {
        assert_herd_ok(cpu->bn_bwd_reduce(n, c, hw, xr, dyr, sm, si, sum, sum + c, dg, db,
                                          (float)beta_acc));
        assert_herd_ok(A->bn_bwd_reduce(n, c, hw, gx, gdy, gsm, gsi, gsum, gsum + c, gdg, gdb,
                                        (float)beta_acc));
    }
    check_d("bn_bwd_reduce sum dy", gsum, sum, c);
    check_d("bn_bwd_reduce sum dy*(x-mean)", gsum + c, sum + c, c);
    check("bn_bwd_reduce dgamma", gdg, dg, c, 1e-5);
    check("bn_bwd_reduce dbeta", gdb, db, c, 1e-5);
    assert_herd_ok(cpu->bn_bwd_apply(n, c, hw, xr, dyr, gamma, sm, si, sum, sum + c, count, y));
    assert_herd_ok(A->bn_bwd_apply(n, c, hw, gx, gdy, ggamma, gsm, gsi, gsum, gsum + c, count, gy));
    check16("bn_bwd_apply dx", gy, n, c, hw, y, g_tol);
    void *dev[] = {gx, gdy, ggamma, gbeta, grm, grv, gsum, gsm, gsi, gy, gdg, gdb};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        gpu->free(dev[i]);
    void *host[] = {x, dy, xr, dyr, gamma, beta, rm, rv, sum, y, sm, si, dg, db};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
}

/* ------------------------------------------------------------------ convolution */

/* One shape with input and output each fp32 or 16-bit (in16, out16). */
static void conv_case(herd_conv_desc d, bool in16, bool out16)
{
    d.bf16_in = in16, d.bf16_out = out16;
    assert_herd_ok(herd_conv_desc_finish(&d));
    int xhw = d.h_in * d.w_in, yhw = d.h_out * d.w_out, khw = d.kh * d.kw;
    size_t nx = (size_t)d.n * d.c_in * xhw, ny = (size_t)d.n * d.c_out * yhw;
    size_t nw = (size_t)d.c_out * d.c_in * khw;
    printf(" conv n%d c%d %dx%d->c%d k%d s%d p%d%s, %s in, %s out\n", d.n, d.c_in, d.h_in, d.w_in,
           d.c_out, d.kh, d.stride, d.pad, d.bias ? " bias" : "", in16 ? "16-bit" : "fp32",
           out16 ? "16-bit" : "fp32");
    float *x = tu_randv(nx, 20), *w = tu_randv(nw, 21), *b = tu_randv(d.c_out, 22);
    float *dy = tu_randv(ny, 23), *xr, *wr, *dyr;
    uint16_t *x16 = up16(x, d.n, d.c_in, xhw, &xr), *dy16 = up16(dy, d.n, d.c_out, yhw, &dyr);
    uint16_t *w16 = up16(w, d.c_out, d.c_in, khw, &wr);
    float *gx = upf(x, nx), *gw = upf(w, nw), *gb = upf(b, d.c_out), *gdy = upf(dy, ny);
    float *y = malloc(ny * 4), *dx = malloc(nx * 4), *dw = tu_randv(nw, 24), *db = tu_randv(d.c_out, 25);
    float *gdw = upf(dw, nw), *gdb = upf(db, d.c_out);
    float *gy = gpu->alloc(ny * 4), *gdx = gpu->alloc(nx * 4); /* fp32 or 16-bit results */
    herd_conv_desc d32 = d;
    d32.bf16_in = d32.bf16_out = false;
    herd_conv_plan *pc, *pg;
    assert_herd_ok(cpu->conv2d_plan(&d32, &pc));
    assert_herd_ok(gpu->conv2d_plan(&d, &pg));
    const float *in = in16 ? (const float *)x16 : gx, *grad = out16 ? (const float *)dy16 : gdy;

    assert_herd_ok(cpu->conv2d_fwd(pc, xr, wr, d.bias ? b : NULL, y));
    assert_herd_ok(gpu->conv2d_fwd(pg, in, gw, d.bias ? gb : NULL, gy));
    if (out16)
        check16("conv fwd", (uint16_t *)gy, d.n, d.c_out, yhw, y, g_tol);
    else
        check("conv fwd", gy, y, ny, g_tol); /* the output is rounded before widening */
    assert_herd_ok(cpu->conv2d_bwd_data(pc, dyr, wr, dx));
    assert_herd_ok(gpu->conv2d_bwd_data(pg, grad, gw, gdx));
    if (in16)
        check16("conv bwd data", (uint16_t *)gdx, d.n, d.c_in, xhw, dx, g_tol);
    else
        check("conv bwd data", gdx, dx, nx, g_tol);
    /* Each reference call's own (unchecked) other half: the CPU computes both gradients
     * of a conv with bias in one call, but they sum different dy (below). */
    float *dw_bias = calloc(nw, 4), *db_weights = calloc((size_t)d.c_out, 4);
    for (int beta = 1; beta >= 0; beta--) {
        assert_herd_ok(cpu->conv2d_bwd_weights(pc, xr, dyr, dw, d.bias ? db_weights : NULL,
                                               (float)beta));
        /* The bias gradient sums dy as the GPU holds it: rounded when 16-bit, else not. */
        if (d.bias)
            assert_herd_ok(cpu->conv2d_bwd_weights(pc, xr, out16 ? dyr : dy, dw_bias, db,
                                                   (float)beta));
        assert_herd_ok(gpu->conv2d_bwd_weights(pg, in, grad, gdw, d.bias ? gdb : NULL, (float)beta));
        check(beta ? "conv bwd weights beta=1" : "conv bwd weights beta=0", gdw, dw, nw, g_tol);
        if (d.bias)
            check(beta ? "conv bwd bias beta=1" : "conv bwd bias beta=0", gdb, db, d.c_out, 1e-4);
    }
    free(dw_bias);
    free(db_weights);
    cpu->conv2d_plan_free(pc);
    gpu->conv2d_plan_free(pg);
    void *dev[] = {x16, dy16, w16, gx, gw, gb, gdy, gdw, gdb, gy, gdx};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        gpu->free(dev[i]);
    void *host[] = {x, w, b, dy, xr, wr, dyr, y, dx, dw, db};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
}

static void convs(void)
{
    herd_conv_desc mid = {.n = 4, .c_in = 16, .h_in = 8, .w_in = 8, .c_out = 32, .kh = 3,
                          .kw = 3, .stride = 1, .pad = 1};
    for (int in16 = 0; in16 < 2; in16++)
        for (int out16 = 0; out16 < 2; out16++)
            conv_case(mid, in16, out16);
    /* A stem (3 channels in, stride 2, bias) and a strided 1x1 shortcut. */
    conv_case((herd_conv_desc){.n = 2, .c_in = 3, .h_in = 17, .w_in = 17, .c_out = 16, .kh = 3,
                               .kw = 3, .stride = 2, .pad = 1, .bias = true}, false, true);
    conv_case((herd_conv_desc){.n = 2, .c_in = 3, .h_in = 17, .w_in = 17, .c_out = 16, .kh = 3,
                               .kw = 3, .stride = 2, .pad = 1, .bias = true}, false, false);
    conv_case((herd_conv_desc){.n = 4, .c_in = 32, .h_in = 8, .w_in = 8, .c_out = 64, .kh = 1,
                               .kw = 1, .stride = 2, .pad = 0}, true, true);
}

/* ------------------------------------------------------------------ gemm */

static void gemm_case(int m, int n, int k, int ta, int tb)
{
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    float *a = tu_randv(na, 30), *b = tu_randv(nb, 31), *c = tu_randv(nc, 32), *ar, *br;
    uint16_t *a16 = up16(a, 1, 1, (int)na, &ar), *b16 = up16(b, 1, 1, (int)nb, &br);
    float *ga = upf(a, na), *gb = upf(b, nb), *gc = upf(c, nc);
    assert_herd_ok(cpu->gemm(ta, tb, m, n, k, 0.5f, ar, ta ? m : k, br, tb ? k : n, 1.0f, c, n));
    assert_herd_ok(gpu->gemm(ta, tb, m, n, k, 0.5f, ga, ta ? m : k, gb, tb ? k : n, 1.0f, gc, n));
    char what[64];
    snprintf(what, sizeof what, "gemm %dx%dx%d ta=%d tb=%d", m, n, k, ta, tb);
    check(what, gc, c, nc, 1e-4); /* operands rounded, sums and result fp32 */
    void *dev[] = {a16, b16, ga, gb, gc};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        gpu->free(dev[i]);
    free(a), free(b), free(c), free(ar), free(br);
}

/* ------------------------------------------------------------------ per precision */

static void run_precision(herd_precision p)
{
    set_precision(p);
    layout_and_elementwise();
    bn_case(4, 64, 49);
    bn_case(3, 20, 25); /* channels not in packs of 8 */
    bn_case(2, 40, 300);
    convs();
    gemm_case(64, 48, 96, 0, 0);
    gemm_case(33, 17, 40, 1, 1);
}

static void test_bf16(void **state)
{
    (void)state;
    run_precision(HERD_PRECISION_BF16);
}

static void test_fp16(void **state)
{
    (void)state;
    run_precision(HERD_PRECISION_FP16);
}

/* fp32 and tf32 keep fp32 activations: the model asks in_use() at every reshape. */
static void test_in_use(void **state)
{
    (void)state;
    assert_non_null(gpu->bf16_acts);
    A = gpu->bf16_acts;
    assert_herd_ok(gpu->set_precision(HERD_PRECISION_FP32));
    assert_false(A->in_use());
    assert_herd_ok(gpu->set_precision(HERD_PRECISION_TF32));
    assert_false(A->in_use());
    herd_conv_desc d = {.n = 1, .c_in = 16, .h_in = 4, .w_in = 4, .c_out = 16, .kh = 3, .kw = 3,
                        .stride = 1, .pad = 1, .bf16_in = true};
    herd_conv_plan *p;
    assert_herd_ok(herd_conv_desc_finish(&d));
    assert_herd_ok(gpu->conv2d_plan(&d, &p));
    float *buf = gpu->alloc(1024 * sizeof(float));
    tu_expect_error(gpu->conv2d_fwd(p, buf, buf, NULL, buf), HERD_ERR_INVALID_ARG,
                    "16-bit activations", "tf32");
    gpu->conv2d_plan_free(p);
    gpu->free(buf);
}

static int teardown(void **state)
{
    (void)state;
    return gpu->set_precision(HERD_PRECISION_FP32) == HERD_OK ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_use),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_fp16),
    };
    gpu = tu_cuda_or_exit();
    cpu = herd_backend_cpu();
    if (cpu->set_threads(1) != HERD_OK)
        return 1;
    int failed = cmocka_run_group_tests(tests, NULL, teardown);
    if (failed == 0 && cudaDeviceSynchronize() != cudaSuccess)
        failed = 1;
    herd_backend_cuda_shutdown();
    return failed;
}

#else /* built without CUDA */

int main(void)
{
    tu_cuda_or_exit();
    return 1;
}

#endif
