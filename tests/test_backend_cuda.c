/* The CUDA backend against the CPU backend: every op on the same random inputs,
 * results copied back and compared (fp32, no TF32). Each check prints its largest
 * relative error. Without a GPU, or in a build without CUDA, the program exits 77,
 * which ctest counts as skipped (SKIP_RETURN_CODE); a GPU that is there but fails to
 * initialise fails the test. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "herd_config.h"

#include "backend/backend.h"

#if HERD_HAVE_CUDA
#include <cuda_runtime.h>

#define TOL 1e-4

static const herd_backend *cpu, *gpu;

/* Device copy of a host array (bytes). */
static void *up(const void *h, size_t bytes)
{
    void *d = gpu->alloc(bytes);
    if (!d)
        fail_msg("gpu alloc of %zu bytes: %s", bytes, herd_last_error());
    if (cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
        fail_msg("cudaMemcpy to device failed");
    return d;
}

static float *upf(const float *h, size_t n) { return up(h, n * sizeof(float)); }

static void *down(const void *d, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 1);
    cudaError_t e = cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        fail_msg("cudaMemcpy to host failed: %s (a kernel may have faulted)",
                 cudaGetErrorString(e));
    return h;
}

/* Compares a device float array with the CPU result and prints the error. */
static void check(const char *what, const float *dev, const float *ref, size_t n, double tol)
{
    float *h = down(dev, n * sizeof(float));
    double err = tu_max_rel_err(h, ref, n);
    printf("  %-36s max rel err %.3g\n", what, err);
    if (!(err <= tol))
        fail_msg("%s: max rel err %g > %g", what, err, tol);
    free(h);
}

static void check_d(const char *what, const double *dev, const double *ref, size_t n)
{
    double *h = down(dev, n * sizeof(double)), err = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(h[i] - ref[i]) / (fabs(ref[i]) > 1 ? fabs(ref[i]) : 1);
        err = d > err ? d : err;
    }
    printf("  %-36s max rel err %.3g\n", what, err);
    if (!(err <= TOL))
        fail_msg("%s: max rel err %g", what, err);
    free(h);
}

static int setup(void **state)
{
    (void)state;
    cpu = herd_backend_cpu();
    if (cpu->set_threads(1) != HERD_OK)
        return -1;
    struct cudaDeviceProp prop;
    int dev = 0;
    cudaGetDevice(&dev);
    if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
        printf("GPU %d: %s (sm_%d%d)\n", dev, prop.name, prop.major, prop.minor);
    printf("%s\n", herd_build_info());
    return 0;
}

/* ------------------------------------------------------------------ memory */

static void test_alloc(void **state)
{
    (void)state;
    float *a = gpu->alloc(1000 * sizeof(float));
    assert_non_null(a);
    assert_herd_ok(gpu->fill(1000, 3.0f, a));
    gpu->free(a);
    /* The same size class comes back from the cache, zeroed again. */
    float *b = gpu->alloc(900 * sizeof(float));
    assert_ptr_equal(a, b);
    float *h = down(b, 900 * sizeof(float));
    for (int i = 0; i < 900; i++)
        assert_true(h[i] == 0.0f);
    free(h);
    gpu->free(b);
    void *big = gpu->alloc((size_t)3 << 20);
    assert_non_null(big);
    gpu->free(big);
    assert_herd_ok(gpu->set_threads(0));
    assert_true(gpu->supports_op(HERD_OP_CONV2D));
}

/* ------------------------------------------------------------------ gemm */

static void gemm_case(int m, int n, int k, int ta, int tb, float beta)
{
    int lda = ta ? m : k, ldb = tb ? k : n;
    float *a = tu_randv((size_t)m * k, 1), *b = tu_randv((size_t)k * n, 2), *c = tu_randv((size_t)m * n, 3);
    float *da = upf(a, (size_t)m * k), *db = upf(b, (size_t)k * n), *dc = upf(c, (size_t)m * n);
    assert_herd_ok(cpu->gemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, beta, c, n));
    assert_herd_ok(gpu->gemm(ta, tb, m, n, k, 0.5f, da, lda, db, ldb, beta, dc, n));
    char what[64];
    snprintf(what, sizeof what, "gemm %dx%dx%d ta=%d tb=%d beta=%g", m, n, k, ta, tb, beta);
    check(what, dc, c, (size_t)m * n, TOL);
    gpu->free(da), gpu->free(db), gpu->free(dc);
    free(a), free(b), free(c);
}

static void test_gemm(void **state)
{
    (void)state;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int beta = 0; beta < 2; beta++)
                gemm_case(13, 17, 11, ta, tb, (float)beta);
    gemm_case(128, 256, 800, 0, 1, 0.0f); /* a linear layer's forward */
    gemm_case(256, 800, 128, 1, 0, 1.0f); /* its weight gradient, accumulated */
    float x = 0;
    assert_int_equal(gpu->gemm(false, false, 2, 2, 2, 1, &x, 1, &x, 2, 0, &x, 2),
                     HERD_ERR_INVALID_ARG);
}

static void test_bias_ops(void **state)
{
    (void)state;
    const int rows = 37, cols = 70;
    size_t n = (size_t)rows * cols;
    float *y = tu_randv(n, 4), *bias = tu_randv(cols, 5), *db = tu_randv(cols, 6);
    float *dy = upf(y, n), *dbias = upf(bias, cols), *ddb = upf(db, cols);
    assert_herd_ok(cpu->bias_add(rows, cols, y, bias));
    assert_herd_ok(gpu->bias_add(rows, cols, dy, dbias));
    check("bias_add", dy, y, n, TOL);
    for (int beta = 0; beta < 2; beta++) {
        assert_herd_ok(cpu->bias_grad(rows, cols, y, db, (float)beta));
        assert_herd_ok(gpu->bias_grad(rows, cols, dy, ddb, (float)beta));
        check(beta ? "bias_grad beta=1" : "bias_grad beta=0", ddb, db, cols, TOL);
    }
    gpu->free(dy), gpu->free(dbias), gpu->free(ddb);
    free(y), free(bias), free(db);
}

/* ------------------------------------------------------------------ conv */

static void conv_case(herd_conv_desc d)
{
    assert_herd_ok(herd_conv_desc_finish(&d));
    size_t nx = (size_t)d.n * d.c_in * d.h_in * d.w_in, nw = (size_t)d.c_out * d.c_in * d.kh * d.kw;
    size_t ny = (size_t)d.n * d.c_out * d.h_out * d.w_out;
    float *x = tu_randv(nx, 10), *w = tu_randv(nw, 11), *b = tu_randv(d.c_out, 12), *dy = tu_randv(ny, 13);
    float *y = calloc(ny, 4), *dx = calloc(nx, 4), *dw = tu_randv(nw, 14), *db = tu_randv(d.c_out, 15);
    float *gx = upf(x, nx), *gw = upf(w, nw), *gb = upf(b, d.c_out), *gdy = upf(dy, ny);
    float *gy = upf(y, ny), *gdx = upf(dx, nx), *gdw = upf(dw, nw), *gdb = upf(db, d.c_out);
    herd_conv_plan *pc, *pg;
    assert_herd_ok(cpu->conv2d_plan(&d, &pc));
    assert_herd_ok(gpu->conv2d_plan(&d, &pg));
    char what[96];
    snprintf(what, sizeof what, "conv n%d c%d %dx%d->c%d k%d s%d p%d%s", d.n, d.c_in, d.h_in,
             d.w_in, d.c_out, d.kh, d.stride, d.pad, d.bias ? " bias" : "");
    printf(" %s\n", what);
    assert_herd_ok(cpu->conv2d_fwd(pc, x, w, d.bias ? b : NULL, y));
    assert_herd_ok(gpu->conv2d_fwd(pg, gx, gw, d.bias ? gb : NULL, gy));
    check("conv fwd", gy, y, ny, TOL);
    assert_herd_ok(cpu->conv2d_bwd_data(pc, dy, w, dx));
    assert_herd_ok(gpu->conv2d_bwd_data(pg, gdy, gw, gdx));
    check("conv bwd data", gdx, dx, nx, TOL);
    for (int beta = 1; beta >= 0; beta--) { /* accumulate onto random values, then overwrite */
        assert_herd_ok(cpu->conv2d_bwd_weights(pc, x, dy, dw, d.bias ? db : NULL, (float)beta));
        assert_herd_ok(gpu->conv2d_bwd_weights(pg, gx, gdy, gdw, d.bias ? gdb : NULL, (float)beta));
        check(beta ? "conv bwd weights beta=1" : "conv bwd weights beta=0", gdw, dw, nw, TOL);
        if (d.bias)
            check(beta ? "conv bwd bias beta=1" : "conv bwd bias beta=0", gdb, db, d.c_out, TOL);
    }
    cpu->conv2d_plan_free(pc);
    gpu->conv2d_plan_free(pg);
    float *dev[] = {gx, gw, gb, gdy, gy, gdx, gdw, gdb};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        gpu->free(dev[i]);
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db);
}

static void test_conv(void **state)
{
    (void)state;
    conv_case((herd_conv_desc){.n = 4, .c_in = 3, .h_in = 16, .w_in = 16, .c_out = 8, .kh = 3,
                               .kw = 3, .stride = 1, .pad = 1, .bias = true});
    conv_case((herd_conv_desc){.n = 3, .c_in = 6, .h_in = 14, .w_in = 14, .c_out = 16, .kh = 5,
                               .kw = 5, .stride = 1, .pad = 0, .bias = true});
    conv_case((herd_conv_desc){.n = 8, .c_in = 16, .h_in = 9, .w_in = 9, .c_out = 32, .kh = 3,
                               .kw = 3, .stride = 2, .pad = 1, .bias = false});
    conv_case((herd_conv_desc){.n = 8, .c_in = 16, .h_in = 8, .w_in = 8, .c_out = 32, .kh = 1,
                               .kw = 1, .stride = 2, .pad = 0, .bias = false});
    herd_conv_desc bad = {.n = 1, .c_in = 1, .h_in = 2, .w_in = 2, .c_out = 1, .kh = 5, .kw = 5,
                          .stride = 1};
    herd_conv_plan *p;
    assert_int_equal(gpu->conv2d_plan(&bad, &p), HERD_ERR_INVALID_ARG);
}

/* ------------------------------------------------------------------ pooling */

static void pool_case(herd_pool_desc d)
{
    assert_herd_ok(herd_pool_desc_finish(&d));
    size_t nx = (size_t)d.n * d.c * d.h_in * d.w_in, ny = (size_t)d.n * d.c * d.h_out * d.w_out;
    float *x = tu_randv(nx, 20), *dy = tu_randv(ny, 21), *y = calloc(ny, 4), *dx = calloc(nx, 4);
    float *gx = upf(x, nx), *gdy = upf(dy, ny), *gy = upf(y, ny), *gdx = upf(dx, nx);
    herd_pool_plan *pc, *pg;
    assert_herd_ok(cpu->pool_plan(&d, &pc));
    assert_herd_ok(gpu->pool_plan(&d, &pg));
    if (d.is_max) /* backward before any training forward is refused */
        assert_int_equal(gpu->pool_bwd(pg, gdy, gdx), HERD_ERR_INVALID_ARG);
    char what[96];
    snprintf(what, sizeof what, "%s pool k%d s%d p%d fwd", d.is_max ? "max" : "avg", d.k,
             d.stride, d.pad);
    assert_herd_ok(cpu->pool_fwd(pc, x, y, true));
    assert_herd_ok(gpu->pool_fwd(pg, gx, gy, true));
    check(what, gy, y, ny, TOL);
    assert_herd_ok(cpu->pool_bwd(pc, dy, dx));
    assert_herd_ok(gpu->pool_bwd(pg, gdy, gdx));
    memcpy(what + strlen(what) - 3, "bwd", 3);
    check(what, gdx, dx, nx, TOL);
    cpu->pool_plan_free(pc);
    gpu->pool_plan_free(pg);
    gpu->free(gx), gpu->free(gdy), gpu->free(gy), gpu->free(gdx);
    free(x), free(dy), free(y), free(dx);
}

static void test_pool(void **state)
{
    (void)state;
    pool_case((herd_pool_desc){.n = 4, .c = 6, .h_in = 28, .w_in = 28, .k = 2, .stride = 2, .is_max = true});
    pool_case((herd_pool_desc){.n = 3, .c = 5, .h_in = 13, .w_in = 11, .k = 3, .stride = 2, .pad = 1, .is_max = true});
    pool_case((herd_pool_desc){.n = 3, .c = 5, .h_in = 12, .w_in = 12, .k = 3, .stride = 1, .pad = 1, .is_max = false});
    pool_case((herd_pool_desc){.n = 2, .c = 4, .h_in = 10, .w_in = 10, .k = 2, .stride = 2, .is_max = false});
}

static void test_global_avgpool(void **state)
{
    (void)state;
    const int n = 5, c = 7, hw = 49;
    size_t nx = (size_t)n * c * hw;
    float *x = tu_randv(nx, 30), *dy = tu_randv((size_t)n * c, 31), *y = calloc((size_t)n * c, 4),
          *dx = calloc(nx, 4);
    float *gx = upf(x, nx), *gdy = upf(dy, (size_t)n * c), *gy = upf(y, (size_t)n * c),
          *gdx = upf(dx, nx);
    assert_herd_ok(cpu->global_avgpool_fwd(n, c, hw, x, y));
    assert_herd_ok(gpu->global_avgpool_fwd(n, c, hw, gx, gy));
    check("global_avgpool fwd", gy, y, (size_t)n * c, TOL);
    assert_herd_ok(cpu->global_avgpool_bwd(n, c, hw, dy, dx));
    assert_herd_ok(gpu->global_avgpool_bwd(n, c, hw, gdy, gdx));
    check("global_avgpool bwd", gdx, dx, nx, TOL);
    gpu->free(gx), gpu->free(gdy), gpu->free(gy), gpu->free(gdx);
    free(x), free(dy), free(y), free(dx);
}

/* ------------------------------------------------------------------ batch norm */

#define BN_MAX_C 64

static void bn_case(int n, int c, int hw)
{
    printf(" batchnorm n%d c%d hw%d\n", n, c, hw);
    const size_t nx = (size_t)n * c * hw;
    const int64_t count = (int64_t)n * hw;
    float *x = tu_randv(nx, 40), *dy = tu_randv(nx, 41), *gamma = tu_randv(c, 42), *beta = tu_randv(c, 43);
    for (size_t i = 0; i < nx; i++)
        x[i] = 3.0f + 2.0f * x[i]; /* an offset mean, as real activations have */
    float *rm = tu_randv(c, 44), *rv = tu_randv(c, 45);
    for (int i = 0; i < c; i++)
        rv[i] = 1.0f + 0.5f * rv[i];
    float *y = calloc(nx, 4), *dx = calloc(nx, 4), *sm = calloc(c, 4), *si = calloc(c, 4);
    float *dg = tu_randv(c, 46), *dbt = tu_randv(c, 47);
    float *gx = upf(x, nx), *gdy = upf(dy, nx), *ggamma = upf(gamma, c), *gbeta = upf(beta, c);
    float *grm = upf(rm, c), *grv = upf(rv, c), *gy = upf(y, nx), *gdx = upf(dx, nx);
    float *gsm = upf(sm, c), *gsi = upf(si, c), *gdg = upf(dg, c), *gdbt = upf(dbt, c);
    const float mom = 0.1f, eps = 1e-5f;

    assert_herd_ok(cpu->bn_fwd_train(n, c, hw, x, gamma, beta, y, sm, si, rm, rv, mom, eps));
    assert_herd_ok(gpu->bn_fwd_train(n, c, hw, gx, ggamma, gbeta, gy, gsm, gsi, grm, grv, mom, eps));
    check("bn_fwd_train y", gy, y, nx, TOL);
    check("bn_fwd_train save_mean", gsm, sm, c, TOL);
    check("bn_fwd_train save_invstd", gsi, si, c, TOL);
    check("bn_fwd_train running_mean", grm, rm, c, TOL);
    check("bn_fwd_train running_var", grv, rv, c, TOL);

    assert_herd_ok(cpu->bn_fwd_infer(n, c, hw, x, gamma, beta, y, rm, rv, eps));
    assert_herd_ok(gpu->bn_fwd_infer(n, c, hw, gx, ggamma, gbeta, gy, grm, grv, eps));
    check("bn_fwd_infer", gy, y, nx, TOL);

    for (int b = 1; b >= 0; b--) {
        assert_herd_ok(cpu->bn_bwd(n, c, hw, x, dy, gamma, sm, si, dx, dg, dbt, (float)b));
        assert_herd_ok(gpu->bn_bwd(n, c, hw, gx, gdy, ggamma, gsm, gsi, gdx, gdg, gdbt, (float)b));
        check(b ? "bn_bwd dx" : "bn_bwd dx (beta 0)", gdx, dx, nx, TOL);
        check(b ? "bn_bwd dgamma beta=1" : "bn_bwd dgamma beta=0", gdg, dg, c, TOL);
        check(b ? "bn_bwd dbeta beta=1" : "bn_bwd dbeta beta=0", gdbt, dbt, c, TOL);
    }
    assert_herd_ok(gpu->bn_bwd(n, c, hw, gx, gdy, ggamma, gsm, gsi, NULL, gdg, gdbt, 0.0f));

    /* The split ops of synchronised BN, one "rank" holding the whole batch. */
    double sum[BN_MAX_C], sq[BN_MAX_C], sdy[BN_MAX_C], sdyxc[BN_MAX_C];
    assert_true(c <= BN_MAX_C);
    double *gsum = up(sum, sizeof sum), *gsq = up(sq, sizeof sq), *gsdy = up(sdy, sizeof sdy),
           *gsdyxc = up(sdyxc, sizeof sdyxc);
    assert_herd_ok(cpu->bn_stats(n, c, hw, x, NULL, count, sum));
    assert_herd_ok(gpu->bn_stats(n, c, hw, gx, NULL, count, gsum));
    check_d("bn_stats sum", gsum, sum, c);
    assert_herd_ok(cpu->bn_stats(n, c, hw, x, sum, count, sq));
    assert_herd_ok(gpu->bn_stats(n, c, hw, gx, gsum, count, gsq));
    check_d("bn_stats sqdev", gsq, sq, c);
    assert_herd_ok(cpu->bn_apply_train(n, c, hw, x, gamma, beta, sum, sq, count, y, sm, si, rm,
                                       rv, mom, eps));
    assert_herd_ok(gpu->bn_apply_train(n, c, hw, gx, ggamma, gbeta, gsum, gsq, count, gy, gsm,
                                       gsi, grm, grv, mom, eps));
    check("bn_apply_train y", gy, y, nx, TOL);
    check("bn_apply_train running_var", grv, rv, c, TOL);
    assert_herd_ok(cpu->bn_bwd_reduce(n, c, hw, x, dy, sm, si, sdy, sdyxc, dg, dbt, 1.0f));
    assert_herd_ok(gpu->bn_bwd_reduce(n, c, hw, gx, gdy, gsm, gsi, gsdy, gsdyxc, gdg, gdbt, 1.0f));
    check_d("bn_bwd_reduce sum_dy", gsdy, sdy, c);
    check_d("bn_bwd_reduce sum_dy_xc", gsdyxc, sdyxc, c);
    check("bn_bwd_reduce dgamma", gdg, dg, c, TOL);
    check("bn_bwd_reduce dbeta", gdbt, dbt, c, TOL);
    assert_herd_ok(cpu->bn_bwd_apply(n, c, hw, x, dy, gamma, sm, si, sdy, sdyxc, count, dx));
    assert_herd_ok(gpu->bn_bwd_apply(n, c, hw, gx, gdy, ggamma, gsm, gsi, gsdy, gsdyxc, count, gdx));
    check("bn_bwd_apply dx", gdx, dx, nx, TOL);
    assert_int_equal(gpu->bn_fwd_train(1, c, 1, gx, ggamma, gbeta, gy, gsm, gsi, grm, grv, mom, eps),
                     HERD_ERR_INVALID_ARG);

    void *dev[] = {gx, gdy, ggamma, gbeta, grm, grv, gy, gdx, gsm, gsi, gdg, gdbt,
                   gsum, gsq, gsdy, gsdyxc};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        gpu->free(dev[i]);
    free(x), free(dy), free(gamma), free(beta), free(rm), free(rv), free(y), free(dx);
    free(sm), free(si), free(dg), free(dbt);
}

static void test_batchnorm(void **state)
{
    (void)state;
    bn_case(6, 5, 37);
    bn_case(64, 16, 1024); /* 65536 values per channel: many passes per thread */
    bn_case(128, 64, 1);   /* batch norm after a linear layer */
}

/* ------------------------------------------------------------------ elementwise */

static void test_elementwise(void **state)
{
    (void)state;
    const size_t n = 100003; /* not a multiple of any block size */
    float *a = tu_randv(n, 50), *b = tu_randv(n, 51), *y = calloc(n, 4), *y2 = calloc(n, 4);
    float *ga = upf(a, n), *gb = upf(b, n), *gy = upf(y, n), *gy2 = upf(y2, n);
    assert_herd_ok(cpu->relu_fwd(n, a, y));
    assert_herd_ok(gpu->relu_fwd(n, ga, gy));
    check("relu_fwd", gy, y, n, 0);
    assert_herd_ok(cpu->relu_bwd(n, y, b, y2));
    assert_herd_ok(gpu->relu_bwd(n, gy, gb, gy2));
    check("relu_bwd", gy2, y2, n, 0);
    assert_herd_ok(cpu->mul(n, a, b, y));
    assert_herd_ok(gpu->mul(n, ga, gb, gy));
    check("mul", gy, y, n, 0);
    assert_herd_ok(cpu->add(n, a, b, y));
    assert_herd_ok(gpu->add(n, ga, gb, gy));
    check("add", gy, y, n, 0);
    assert_herd_ok(cpu->axpy(n, 0.3f, a, y));
    assert_herd_ok(gpu->axpy(n, 0.3f, ga, gy));
    check("axpy", gy, y, n, 1e-6);
    assert_herd_ok(cpu->copy(n, b, y));
    assert_herd_ok(gpu->copy(n, gb, gy));
    check("copy", gy, y, n, 0);
    assert_herd_ok(cpu->fill(n, -2.5f, y));
    assert_herd_ok(gpu->fill(n, -2.5f, gy));
    check("fill", gy, y, n, 0);
    assert_int_equal(gpu->relu_fwd(n, NULL, gy), HERD_ERR_INVALID_ARG);
    assert_herd_ok(gpu->relu_fwd(0, NULL, NULL));
    gpu->free(ga), gpu->free(gb), gpu->free(gy), gpu->free(gy2);
    free(a), free(b), free(y), free(y2);
}

static void test_dropout(void **state)
{
    (void)state;
    const size_t n = 3 * 4096 + 77;
    float *x = tu_randv(n, 60), *y = calloc(n, 4), *m = calloc(n, 4);
    float *gx = upf(x, n), *gy = upf(y, n), *gm = upf(m, n);
    const float ps[] = {0.0f, 0.3f, 1.0f};
    for (int i = 0; i < 3; i++) {
        assert_herd_ok(cpu->dropout_fwd(n, x, y, m, ps[i], 1234));
        assert_herd_ok(gpu->dropout_fwd(n, gx, gy, gm, ps[i], 1234));
        /* The same random stream as the CPU: identical masks, bit for bit. */
        check("dropout mask (exact)", gm, m, n, 0);
        check("dropout y (exact)", gy, y, n, 0);
    }
    assert_int_equal(gpu->dropout_fwd(n, gx, gy, gm, 1.5f, 1), HERD_ERR_INVALID_ARG);
    gpu->free(gx), gpu->free(gy), gpu->free(gm);
    free(x), free(y), free(m);
}

/* ------------------------------------------------------------------ loss */

static void xent_case(int n, int classes, float smoothing)
{
    float *z = tu_randv((size_t)n * classes, 70), *d = calloc((size_t)n * classes, 4);
    for (size_t i = 0; i < (size_t)n * classes; i++)
        z[i] *= 4.0f;
    int32_t *labels = malloc(n * sizeof *labels);
    for (int i = 0; i < n; i++)
        labels[i] = (i * 7 + 3) % classes;
    float *gz = upf(z, (size_t)n * classes), *gd = upf(d, (size_t)n * classes);
    int32_t *gl = up(labels, n * sizeof *labels);
    double lc = 0, lg = 0;
    long cc = 0, cg = 0;
    assert_herd_ok(cpu->softmax_xent(n, classes, z, labels, smoothing, d, &lc, &cc));
    assert_herd_ok(gpu->softmax_xent(n, classes, gz, gl, smoothing, gd, &lg, &cg));
    char what[80];
    snprintf(what, sizeof what, "softmax_xent n%d c%d ls%.1f dlogits", n, classes, smoothing);
    check(what, gd, d, (size_t)n * classes, TOL);
    double err = fabs(lg - lc) / (fabs(lc) > 1 ? fabs(lc) : 1);
    printf("  %-36s max rel err %.3g (loss %.6f vs %.6f, correct %ld vs %ld)\n",
           "softmax_xent loss_sum", err, lg, lc, cg, cc);
    assert_true(err < TOL);
    assert_int_equal(cg, cc);
    /* Evaluation: no gradient. */
    assert_herd_ok(gpu->softmax_xent(n, classes, gz, gl, smoothing, NULL, &lg, &cg));
    assert_int_equal(cg, cc);
    /* A label out of range is reported with the sample. */
    labels[n / 2] = classes;
    cudaMemcpy(gl, labels, n * sizeof *labels, cudaMemcpyHostToDevice);
    assert_int_equal(gpu->softmax_xent(n, classes, gz, gl, smoothing, gd, &lg, &cg),
                     HERD_ERR_INVALID_ARG);
    printf("  bad label -> %s\n", herd_last_error());
    gpu->free(gz), gpu->free(gd), gpu->free(gl);
    free(z), free(d), free(labels);
}

static void test_softmax_xent(void **state)
{
    (void)state;
    xent_case(128, 10, 0.0f);
    xent_case(37, 1000, 0.1f);
}

/* ------------------------------------------------------------------ optimizers */

static void test_optim(void **state)
{
    (void)state;
    const size_t n = 50001;
    float *w = tu_randv(n, 80), *g = tu_randv(n, 81), *m = tu_randv(n, 82), *v = tu_randv(n, 83);
    for (size_t i = 0; i < n; i++)
        v[i] = fabsf(v[i]);
    float *gw = upf(w, n), *gg = upf(g, n), *gm = upf(m, n), *gv = upf(v, n);
    herd_sgd_args sgd[] = {{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 5e-4f},
                           {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 5e-4f, .nesterov = true},
                           {.lr = 0.05f, .momentum = 0.0f, .weight_decay = 1e-2f, .decoupled = true}};
    for (int i = 0; i < 3; i++) {
        for (int step = 0; step < 3; step++) {
            assert_herd_ok(cpu->sgd_update(n, w, g, m, &sgd[i]));
            assert_herd_ok(gpu->sgd_update(n, gw, gg, gm, &sgd[i]));
        }
        check(i == 0 ? "sgd momentum w" : i == 1 ? "sgd nesterov w" : "sgd plain decoupled w",
              gw, w, n, TOL);
        check("sgd momentum buffer", gm, m, n, TOL);
    }
    herd_adamw_args adam = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                            .weight_decay = 0.01f};
    for (long step = 1; step <= 3; step++) {
        adam.step = step;
        assert_herd_ok(cpu->adamw_update(n, w, g, m, v, &adam));
        assert_herd_ok(gpu->adamw_update(n, gw, gg, gm, gv, &adam));
    }
    check("adamw w", gw, w, n, TOL);
    check("adamw m", gm, m, n, TOL);
    check("adamw v", gv, v, n, TOL);
    adam.step = 0;
    assert_int_equal(gpu->adamw_update(n, gw, gg, gm, gv, &adam), HERD_ERR_INVALID_ARG);
    gpu->free(gw), gpu->free(gg), gpu->free(gm), gpu->free(gv);
    free(w), free(g), free(m), free(v);
}

/* Loss scaling's one pass: scale, then whether anything is inf or NaN. */
static void test_grad_unscale_check(void **state)
{
    (void)state;
    const size_t n = 300001;
    float *x = tu_randv(n, 90);
    float *gx = upf(x, n);
    bool found = true;
    assert_herd_ok(cpu->grad_unscale_check(n, x, 0.125f, &found));
    assert_false(found);
    assert_herd_ok(gpu->grad_unscale_check(n, gx, 0.125f, &found));
    assert_false(found);
    check("grad_unscale_check x 1/8", gx, x, n, 0.0); /* a power of two: exact */
    const float bad[] = {INFINITY, -INFINITY, NAN, 3e38f};
    for (int i = 0; i < 4; i++) {
        cudaMemcpy(gx + (i + 1) * 1000, &bad[i], sizeof(float), cudaMemcpyHostToDevice);
        assert_herd_ok(gpu->grad_unscale_check(n, gx, 2.0f, &found)); /* 3e38 x 2 overflows */
        assert_true(found);
        cudaMemcpy(gx + (i + 1) * 1000, &x[0], sizeof(float), cudaMemcpyHostToDevice);
    }
    assert_herd_ok(gpu->grad_unscale_check(n, gx, 1.0f, NULL)); /* no flag: no wait */
    assert_herd_ok(gpu->grad_unscale_check(0, NULL, 1.0f, &found));
    assert_false(found);
    gpu->free(gx);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_unscale_check),
        cmocka_unit_test(test_alloc),        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_bias_ops),     cmocka_unit_test(test_conv),
        cmocka_unit_test(test_pool),         cmocka_unit_test(test_global_avgpool),
        cmocka_unit_test(test_batchnorm),    cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_dropout),      cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_optim),
    };
    gpu = tu_cuda_or_exit();
    int failed = cmocka_run_group_tests(tests, setup, NULL);
    if (failed == 0 && cudaDeviceSynchronize() != cudaSuccess)
        failed = 1; /* a kernel faulted after its last check */
    /* Everything the backend holds goes back, so a leak check sees the tests' own. */
    herd_backend_cuda_shutdown();
    return failed;
}

#else /* built without CUDA */

int main(void)
{
    /* The stub reports why instead of crashing; then there is nothing to test (exit 77). */
    if (herd_backend_cuda() || !strstr(herd_last_error(), "built without CUDA")) {
        printf("FAILED: the CPU-only build's cuda stub did not say why: %s\n", herd_last_error());
        return 1;
    }
    tu_cuda_or_exit();
    return 1;
}

#endif
