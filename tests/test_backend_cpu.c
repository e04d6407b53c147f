/* CPU backend ops against naive references written here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "backend/backend.h"

#define TOL 1e-4

static const herd_backend *be;

static int setup(void **state)
{
    (void)state;
    be = herd_backend_cpu();
    return be->set_threads(1) == HERD_OK ? 0 : -1;
}

/* ------------------------------------------------------------------ gemm */

static void test_gemm(void **state)
{
    (void)state;
    const int m = 13, n = 17, k = 11;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int beta = 0; beta < 2; beta++) {
                float *a = tu_randv((size_t)m * k, 1), *b = tu_randv((size_t)k * n, 2);
                float *c = tu_randv((size_t)m * n, 3), *ref = malloc(sizeof(float) * m * n);
                int lda = ta ? m : k, ldb = tb ? k : n;
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        double s = 0;
                        for (int p = 0; p < k; p++)
                            s += (double)(ta ? a[p * lda + i] : a[i * lda + p]) *
                                 (tb ? b[j * ldb + p] : b[p * ldb + j]);
                        ref[i * n + j] = (float)(0.5 * s + beta * c[i * n + j]);
                    }
                assert_herd_ok(be->gemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, (float)beta, c, n));
                assert_true(tu_max_rel_err(c, ref, (size_t)m * n) < TOL);
                free(a), free(b), free(c), free(ref);
            }
    float x = 0;
    assert_int_equal(be->gemm(false, false, 2, 2, 2, 1, &x, 1, &x, 2, 0, &x, 2),
                     HERD_ERR_INVALID_ARG);
}

static void test_bias_ops(void **state)
{
    (void)state;
    const int rows = 5, cols = 7;
    float *y = tu_randv(rows * cols, 4), *bias = tu_randv(cols, 5), *y0 = malloc(sizeof(float) * rows * cols);
    memcpy(y0, y, sizeof(float) * rows * cols);
    assert_herd_ok(be->bias_add(rows, cols, y, bias));
    for (int i = 0; i < rows * cols; i++)
        assert_float_equal(y[i], y0[i] + bias[i % cols], 1e-6);
    float db[7], ref[7] = {0};
    for (int i = 0; i < rows * cols; i++)
        ref[i % cols] += y[i];
    assert_herd_ok(be->bias_grad(rows, cols, y, db, 0.0f));
    assert_true(tu_max_rel_err(db, ref, cols) < TOL);
    assert_herd_ok(be->bias_grad(rows, cols, y, db, 1.0f));
    for (int j = 0; j < cols; j++)
        ref[j] *= 2;
    assert_true(tu_max_rel_err(db, ref, cols) < TOL);
    free(y), free(bias), free(y0);
}

/* ------------------------------------------------------------------ conv */

#define X4(t, a, b, c, d, B, C, D) t[(((size_t)(a) * (B) + (b)) * (C) + (c)) * (D) + (d)]

static void conv_case(herd_conv_desc d)
{
    assert_herd_ok(herd_conv_desc_finish(&d));
    size_t nx = (size_t)d.n * d.c_in * d.h_in * d.w_in, nw = (size_t)d.c_out * d.c_in * d.kh * d.kw;
    size_t ny = (size_t)d.n * d.c_out * d.h_out * d.w_out;
    float *x = tu_randv(nx, 10), *w = tu_randv(nw, 11), *b = tu_randv(d.c_out, 12), *dy = tu_randv(ny, 13);
    float *y = calloc(ny, 4), *yr = calloc(ny, 4), *dx = calloc(nx, 4), *dxr = calloc(nx, 4);
    float *dw = tu_randv(nw, 14), *dwr = calloc(nw, 4), *db = tu_randv(d.c_out, 15),
          *dbr = calloc(d.c_out, 4);
    double *dxa = calloc(nx, sizeof(double)), *dwa = calloc(nw, sizeof(double));
    for (int n = 0; n < d.n; n++)
        for (int o = 0; o < d.c_out; o++)
            for (int oh = 0; oh < d.h_out; oh++)
                for (int ow = 0; ow < d.w_out; ow++) {
                    double s = d.bias ? b[o] : 0;
                    double g = X4(dy, n, o, oh, ow, d.c_out, d.h_out, d.w_out);
                    for (int i = 0; i < d.c_in; i++)
                        for (int r = 0; r < d.kh; r++)
                            for (int q = 0; q < d.kw; q++) {
                                int ih = oh * d.stride - d.pad + r, iw = ow * d.stride - d.pad + q;
                                if (ih < 0 || iw < 0 || ih >= d.h_in || iw >= d.w_in)
                                    continue;
                                double xv = X4(x, n, i, ih, iw, d.c_in, d.h_in, d.w_in);
                                double wv = X4(w, o, i, r, q, d.c_in, d.kh, d.kw);
                                s += xv * wv;
                                X4(dxa, n, i, ih, iw, d.c_in, d.h_in, d.w_in) += g * wv;
                                X4(dwa, o, i, r, q, d.c_in, d.kh, d.kw) += g * xv;
                            }
                    X4(yr, n, o, oh, ow, d.c_out, d.h_out, d.w_out) = (float)s;
                    dbr[o] += (float)g;
                }
    for (size_t i = 0; i < nx; i++)
        dxr[i] = (float)dxa[i];
    /* beta = 1 accumulates onto the random initial dw / db. */
    for (size_t i = 0; i < nw; i++)
        dwr[i] = (float)dwa[i] + dw[i];
    for (int o = 0; o < d.c_out; o++)
        dbr[o] += db[o];

    herd_conv_plan *p;
    assert_herd_ok(be->conv2d_plan(&d, &p));
    for (int rep = 0; rep < 2; rep++) { /* plans are reused across steps */
        assert_herd_ok(be->conv2d_fwd(p, x, w, d.bias ? b : NULL, y));
        assert_true(tu_max_rel_err(y, yr, ny) < TOL);
        assert_herd_ok(be->conv2d_bwd_data(p, dy, w, dx));
        assert_true(tu_max_rel_err(dx, dxr, nx) < TOL);
    }
    assert_herd_ok(be->conv2d_bwd_weights(p, x, dy, dw, d.bias ? db : NULL, 1.0f));
    assert_true(tu_max_rel_err(dw, dwr, nw) < TOL);
    if (d.bias)
        assert_true(tu_max_rel_err(db, dbr, d.c_out) < TOL);
    memset(dw, 0x7f, nw * 4); /* beta = 0 must overwrite garbage */
    assert_herd_ok(be->conv2d_bwd_weights(p, x, dy, dw, d.bias ? db : NULL, 0.0f));
    for (size_t i = 0; i < nw; i++)
        dwr[i] = (float)dwa[i];
    assert_true(tu_max_rel_err(dw, dwr, nw) < TOL);
    be->conv2d_plan_free(p);
    free(x), free(w), free(b), free(dy), free(y), free(yr), free(dx), free(dxr);
    free(dw), free(dwr), free(db), free(dbr), free(dxa), free(dwa);
}

/* Plans of one shape reading the same weights share one reordered copy of them
 * (cpu_shared_weights.c): the same bits as a plan alone, and weights changed in place
 * reach every plan, however many share. */
static void test_conv_shared_weights(void **state)
{
    (void)state;
    herd_conv_desc d = {.n = 2, .c_in = 16, .h_in = 8, .w_in = 8, .c_out = 32, .kh = 3, .kw = 3,
                        .stride = 1, .pad = 1};
    assert_herd_ok(herd_conv_desc_finish(&d));
    size_t nx = (size_t)d.n * d.c_in * d.h_in * d.w_in, nw = (size_t)d.c_out * d.c_in * d.kh * d.kw;
    size_t ny = (size_t)d.n * d.c_out * d.h_out * d.w_out;
    float *x = tu_randv(nx, 20), *w = tu_randv(nw, 21), *dy = tu_randv(ny, 22);
    float *w_alone = malloc(nw * 4), *y[3], *dx[3];
    for (int i = 0; i < 3; i++)
        y[i] = calloc(ny, 4), dx[i] = calloc(nx, 4);
    herd_conv_plan *p[3]; /* p[0], p[1] read w; p[2] reads its own copy, alone */
    for (int i = 0; i < 3; i++)
        assert_herd_ok(be->conv2d_plan(&d, &p[i]));
    for (int step = 0; step < 3; step++) {
        memcpy(w_alone, w, nw * 4);
        for (int i = 0; i < 3; i++) {
            const float *wi = i == 2 ? w_alone : w;
            assert_herd_ok(be->conv2d_fwd(p[i], x, wi, NULL, y[i]));
            assert_herd_ok(be->conv2d_bwd_data(p[i], dy, wi, dx[i]));
        }
        for (int i = 0; i < 2; i++) {
            assert_memory_equal(y[i], y[2], ny * 4);
            assert_memory_equal(dx[i], dx[2], nx * 4);
        }
        w[(size_t)step * 97 % nw] += 0.5f; /* an update in place, one value */
    }
    be->conv2d_plan_free(p[0]); /* p[1] reads alone from now on */
    memcpy(w_alone, w, nw * 4);
    assert_herd_ok(be->conv2d_fwd(p[1], x, w, NULL, y[1]));
    assert_herd_ok(be->conv2d_fwd(p[2], x, w_alone, NULL, y[2]));
    assert_memory_equal(y[1], y[2], ny * 4);
    be->conv2d_plan_free(p[1]);
    be->conv2d_plan_free(p[2]);
    for (int i = 0; i < 3; i++)
        free(y[i]), free(dx[i]);
    free(x), free(w), free(w_alone), free(dy);
}

static void test_conv(void **state)
{
    (void)state;
    const char *layouts[] = {"blocked", "plain"};
    for (int l = 0; l < 2; l++) {
        setenv("HERD_CONV_LAYOUT", layouts[l], 1);
        conv_case((herd_conv_desc){.n = 2, .c_in = 3, .h_in = 7, .w_in = 6, .c_out = 4, .kh = 3,
                                   .kw = 3, .stride = 1, .pad = 1, .bias = true});
        conv_case((herd_conv_desc){.n = 3, .c_in = 16, .h_in = 9, .w_in = 9, .c_out = 32,
                                   .kh = 3, .kw = 3, .stride = 2, .pad = 1, .bias = false});
        conv_case((herd_conv_desc){.n = 2, .c_in = 16, .h_in = 8, .w_in = 8, .c_out = 32,
                                   .kh = 1, .kw = 1, .stride = 2, .pad = 0, .bias = false});
        conv_case((herd_conv_desc){.n = 2, .c_in = 1, .h_in = 12, .w_in = 12, .c_out = 6,
                                   .kh = 5, .kw = 5, .stride = 1, .pad = 0, .bias = true});
    }
    unsetenv("HERD_CONV_LAYOUT");
    /* A value that is neither is refused, naming it, not taken as the default. */
    herd_conv_desc d = {.n = 1, .c_in = 1, .h_in = 8, .w_in = 8, .c_out = 2, .kh = 3, .kw = 3,
                        .stride = 1, .pad = 1};
    const char *vars[][2] = {{"HERD_CONV_LAYOUT", "nchw"}, {"HERD_CONV_ALGO", "Winograd"}};
    for (int v = 0; v < 2; v++) {
        setenv(vars[v][0], vars[v][1], 1);
        herd_conv_plan *p = NULL;
        assert_int_equal(be->conv2d_plan(&d, &p), HERD_ERR_INVALID_ARG);
        assert_null(p);
        char want[64];
        snprintf(want, sizeof want, "%s='%s' is not one of", vars[v][0], vars[v][1]);
        assert_non_null(strstr(herd_last_error(), want));
        unsetenv(vars[v][0]);
    }
}

static void test_desc_finish(void **state)
{
    (void)state;
    herd_conv_desc c = {.n = 1, .c_in = 1, .h_in = 28, .w_in = 28, .c_out = 1, .kh = 1, .kw = 1,
                        .stride = 2, .pad = 0};
    assert_herd_ok(herd_conv_desc_finish(&c));
    assert_int_equal(c.h_out, 14);
    c.kh = c.kw = 3, c.pad = 1;
    assert_herd_ok(herd_conv_desc_finish(&c));
    assert_int_equal(c.h_out, 14);
    c.kh = c.kw = 31, c.pad = 1;
    assert_int_equal(herd_conv_desc_finish(&c), HERD_ERR_INVALID_ARG);
    assert_non_null(strstr(herd_last_error(), "too small"));
    c.kh = c.kw = 3, c.stride = 0;
    assert_int_equal(herd_conv_desc_finish(&c), HERD_ERR_INVALID_ARG);
    herd_pool_desc p = {.n = 1, .c = 1, .h_in = 7, .w_in = 7, .k = 2, .stride = 2};
    assert_herd_ok(herd_pool_desc_finish(&p));
    assert_int_equal(p.h_out, 3);
    p.k = 3, p.pad = 2;
    assert_int_equal(herd_pool_desc_finish(&p), HERD_ERR_INVALID_ARG);
}

/* ------------------------------------------------------------------ pool */

/* ties: inputs rounded to a few values (-0 and +0 among them), so windows hold equal
 * maxima; the first one in row order takes the gradient (oneDNN's and PyTorch's rule).
 * Max pooling is checked exactly, ties or not: the reference makes the same comparisons
 * and additions, so any other order or a dropped signed zero shows. */
static void pool_case(herd_pool_desc d, bool ties)
{
    assert_herd_ok(herd_pool_desc_finish(&d));
    size_t nx = (size_t)d.n * d.c * d.h_in * d.w_in, ny = (size_t)d.n * d.c * d.h_out * d.w_out;
    float *x = tu_randv(nx, 20), *dy = tu_randv(ny, 21), *y = calloc(ny, 4), *yr = calloc(ny, 4);
    for (size_t i = 0; ties && i < nx; i++)
        x[i] = roundf(x[i] * 2.0f);
    for (size_t i = 0; ties && i < ny; i++) /* -0 gradients: an input gets 0 + -0 = +0 */
        dy[i] = roundf(dy[i] * 2.0f);
    float *dx = calloc(nx, 4), *dxr = calloc(nx, 4);
    for (int nc = 0; nc < d.n * d.c; nc++)
        for (int oh = 0; oh < d.h_out; oh++)
            for (int ow = 0; ow < d.w_out; ow++) {
                const float *xp = x + (size_t)nc * d.h_in * d.w_in;
                float *dxp = dxr + (size_t)nc * d.h_in * d.w_in;
                size_t o = ((size_t)nc * d.h_out + oh) * d.w_out + ow;
                float best = -INFINITY, sum = 0;
                int arg = -1;
                for (int r = 0; r < d.k; r++)
                    for (int q = 0; q < d.k; q++) {
                        int ih = oh * d.stride - d.pad + r, iw = ow * d.stride - d.pad + q;
                        if (ih < 0 || iw < 0 || ih >= d.h_in || iw >= d.w_in)
                            continue;
                        float v = xp[ih * d.w_in + iw];
                        sum += v;
                        if (v > best)
                            best = v, arg = ih * d.w_in + iw;
                        if (!d.is_max)
                            dxp[ih * d.w_in + iw] += dy[o] / (float)(d.k * d.k);
                    }
                yr[o] = d.is_max ? best : sum / (float)(d.k * d.k);
                if (d.is_max)
                    dxp[arg] += dy[o];
            }
    herd_pool_plan *p;
    assert_herd_ok(be->pool_plan(&d, &p));
    if (d.is_max) /* backward before any training forward has no argmax to use */
        assert_int_equal(be->pool_bwd(p, dy, dx), HERD_ERR_INVALID_ARG);
    assert_herd_ok(be->pool_fwd(p, x, y, true));
    assert_true(tu_max_rel_err(y, yr, ny) < TOL);
    assert_herd_ok(be->pool_bwd(p, dy, dx));
    assert_true(tu_max_rel_err(dx, dxr, nx) < TOL);
    if (d.is_max) {
        assert_memory_equal(y, yr, ny * sizeof *y);
        assert_memory_equal(dx, dxr, nx * sizeof *dx);
    }
    /* An evaluation forward keeps no argmax: backward is refused until the next training one. */
    assert_herd_ok(be->pool_fwd(p, x, y, false));
    if (d.is_max)
        assert_int_equal(be->pool_bwd(p, dy, dx), HERD_ERR_INVALID_ARG);
    be->pool_plan_free(p);
    free(x), free(dy), free(y), free(yr), free(dx), free(dxr);
}

static void test_pool(void **state)
{
    (void)state;
    for (int ties = 0; ties < 2; ties++) {
        pool_case((herd_pool_desc){.n = 2, .c = 3, .h_in = 8, .w_in = 8, .k = 2, .stride = 2, .is_max = true}, ties);
        /* 2x2 at stride 2 has its own loops (cpu_pool.c): rows and columns no window
         * covers get a zero gradient; rows longer than a vector */
        pool_case((herd_pool_desc){.n = 2, .c = 3, .h_in = 9, .w_in = 7, .k = 2, .stride = 2, .is_max = true}, ties);
        pool_case((herd_pool_desc){.n = 1, .c = 2, .h_in = 6, .w_in = 70, .k = 2, .stride = 2, .is_max = true}, ties);
        pool_case((herd_pool_desc){.n = 2, .c = 3, .h_in = 9, .w_in = 7, .k = 3, .stride = 2, .pad = 1, .is_max = true}, ties);
        /* overlapping windows and a window of more than 256 positions (a wider argmax) */
        pool_case((herd_pool_desc){.n = 1, .c = 2, .h_in = 20, .w_in = 19, .k = 17, .stride = 1, .pad = 0, .is_max = true}, ties);
    }
    pool_case((herd_pool_desc){.n = 2, .c = 3, .h_in = 8, .w_in = 8, .k = 2, .stride = 2, .is_max = false}, false);
    pool_case((herd_pool_desc){.n = 2, .c = 3, .h_in = 7, .w_in = 7, .k = 3, .stride = 1, .pad = 1, .is_max = false}, false);
}

static void test_global_avgpool(void **state)
{
    (void)state;
    const int n = 3, c = 4, hw = 10;
    float *x = tu_randv(n * c * hw, 30), y[12], ref[12], dy[12], *dx = malloc(sizeof(float) * n * c * hw);
    for (int r = 0; r < n * c; r++) {
        double s = 0;
        for (int i = 0; i < hw; i++)
            s += x[r * hw + i];
        ref[r] = (float)(s / hw);
        dy[r] = (float)r;
    }
    assert_herd_ok(be->global_avgpool_fwd(n, c, hw, x, y));
    assert_true(tu_max_rel_err(y, ref, n * c) < TOL);
    assert_herd_ok(be->global_avgpool_bwd(n, c, hw, dy, dx));
    for (int i = 0; i < n * c * hw; i++)
        assert_float_equal(dx[i], dy[i / hw] / hw, 1e-6);
    free(x), free(dx);
}

/* -------------------------------------------------------------- batchnorm */

/* Double-precision training forward; returns sum(y * r). */
static double bn_ref_loss(int n, int c, int hw, const double *x, const double *g,
                          const double *b, const float *r, double eps)
{
    double loss = 0;
    for (int ch = 0; ch < c; ch++) {
        double mean = 0, var = 0, cnt = (double)n * hw;
        for (int s = 0; s < n; s++)
            for (int i = 0; i < hw; i++)
                mean += x[((size_t)s * c + ch) * hw + i];
        mean /= cnt;
        for (int s = 0; s < n; s++)
            for (int i = 0; i < hw; i++) {
                double dd = x[((size_t)s * c + ch) * hw + i] - mean;
                var += dd * dd;
            }
        var /= cnt;
        for (int s = 0; s < n; s++)
            for (int i = 0; i < hw; i++) {
                size_t k = ((size_t)s * c + ch) * hw + i;
                loss += ((x[k] - mean) / sqrt(var + eps) * g[ch] + b[ch]) * r[k];
            }
    }
    return loss;
}

static void test_batchnorm(void **state)
{
    (void)state;
    const int n = 4, c = 3, hw = 5;
    const size_t nx = (size_t)n * c * hw;
    const float eps = 1e-5f, mom = 0.1f;
    float *x = tu_randv(nx, 40), *r = tu_randv(nx, 41), *y = calloc(nx, 4), *dx = calloc(nx, 4);
    float gamma[3] = {0.5f, 1.5f, -1.0f}, beta[3] = {0.1f, -0.2f, 0.3f};
    float mean[3], invstd[3], rmean[3] = {0.5f, 0.5f, 0.5f}, rvar[3] = {2, 2, 2};
    for (size_t i = 0; i < nx; i++)
        x[i] = x[i] * 3 + (float)((i / hw) % c); /* distinct means per channel */
    assert_herd_ok(be->bn_fwd_train(n, c, hw, x, gamma, beta, y, mean, invstd, rmean, rvar, mom, eps));
    double *xd = malloc(nx * sizeof(double)), gd[3], bd[3];
    for (size_t i = 0; i < nx; i++)
        xd[i] = x[i];
    for (int ch = 0; ch < c; ch++) {
        double m = 0, v = 0, cnt = (double)n * hw;
        for (int s = 0; s < n; s++)
            for (int i = 0; i < hw; i++)
                m += xd[((size_t)s * c + ch) * hw + i];
        m /= cnt;
        for (int s = 0; s < n; s++)
            for (int i = 0; i < hw; i++)
                v += pow(xd[((size_t)s * c + ch) * hw + i] - m, 2);
        assert_float_equal(mean[ch], m, 1e-5);
        assert_float_equal(invstd[ch], 1 / sqrt(v / cnt + eps), 1e-4 * invstd[ch]);
        assert_float_equal(rmean[ch], 0.9 * 0.5 + 0.1 * m, 1e-5);
        assert_float_equal(rvar[ch], 0.9 * 2 + 0.1 * v / (cnt - 1), 1e-5); /* unbiased */
        for (int s = 0; s < n; s++)
            for (int i = 0; i < hw; i++) {
                size_t k = ((size_t)s * c + ch) * hw + i;
                assert_float_equal(y[k], (xd[k] - m) / sqrt(v / cnt + eps) * gamma[ch] + beta[ch], 1e-4);
            }
        gd[ch] = gamma[ch], bd[ch] = beta[ch];
    }
    /* Inference uses the running statistics. */
    assert_herd_ok(be->bn_fwd_infer(n, c, hw, x, gamma, beta, y, rmean, rvar, eps));
    for (size_t k = 0; k < nx; k++) {
        int ch = (int)((k / hw) % c);
        assert_float_equal(y[k], (x[k] - rmean[ch]) / sqrt(rvar[ch] + eps) * gamma[ch] + beta[ch], 1e-4);
    }
    /* Backward against central differences of sum(y * r); dgamma/dbeta accumulate with beta 1. */
    float dgamma[3] = {1, 1, 1}, dbeta[3] = {1, 1, 1};
    assert_herd_ok(be->bn_bwd(n, c, hw, x, r, gamma, mean, invstd, dx, dgamma, dbeta, 1.0f));
    const double h = 1e-5;
    for (size_t k = 0; k < nx; k++) {
        double keep = xd[k];
        xd[k] = keep + h;
        double lp = bn_ref_loss(n, c, hw, xd, gd, bd, r, eps);
        xd[k] = keep - h;
        double lm = bn_ref_loss(n, c, hw, xd, gd, bd, r, eps);
        xd[k] = keep;
        assert_float_equal(dx[k], (lp - lm) / (2 * h), 1e-3);
    }
    for (int ch = 0; ch < c; ch++) {
        double keep = gd[ch];
        gd[ch] = keep + h;
        double lp = bn_ref_loss(n, c, hw, xd, gd, bd, r, eps);
        gd[ch] = keep - h;
        double lm = bn_ref_loss(n, c, hw, xd, gd, bd, r, eps);
        gd[ch] = keep;
        assert_float_equal(dgamma[ch] - 1, (lp - lm) / (2 * h), 1e-3);
        keep = bd[ch];
        bd[ch] = keep + h;
        lp = bn_ref_loss(n, c, hw, xd, gd, bd, r, eps);
        bd[ch] = keep - h;
        lm = bn_ref_loss(n, c, hw, xd, gd, bd, r, eps);
        bd[ch] = keep;
        assert_float_equal(dbeta[ch] - 1, (lp - lm) / (2 * h), 1e-3);
    }
    /* One value per channel cannot be normalised in training. */
    assert_int_equal(be->bn_fwd_train(1, c, 1, x, gamma, beta, y, mean, invstd, rmean, rvar, mom, eps),
                     HERD_ERR_INVALID_ARG);
    free(x), free(r), free(y), free(dx), free(xd);
}

/* ------------------------------------------------------------ elementwise */

static void test_elementwise(void **state)
{
    (void)state;
    const size_t n = 100003; /* above the threading threshold, odd for vector tails */
    float *a = tu_randv(n, 50), *b = tu_randv(n, 51), *y = calloc(n, 4), *dx = calloc(n, 4);
    assert_herd_ok(be->relu_fwd(n, a, y));
    for (size_t i = 0; i < n; i++)
        assert_true(y[i] == (a[i] > 0 ? a[i] : 0));
    assert_herd_ok(be->relu_bwd(n, y, b, dx));
    for (size_t i = 0; i < n; i++)
        assert_true(dx[i] == (y[i] > 0 ? b[i] : 0));
    assert_herd_ok(be->mul(n, a, b, y));
    for (size_t i = 0; i < n; i += 97)
        assert_true(y[i] == a[i] * b[i]);
    assert_herd_ok(be->add(n, a, b, y));
    for (size_t i = 0; i < n; i += 97)
        assert_true(y[i] == a[i] + b[i]);
    assert_herd_ok(be->copy(n, a, y));
    assert_memory_equal(y, a, n * 4);
    assert_herd_ok(be->axpy(n, 2.0f, b, y));
    for (size_t i = 0; i < n; i += 97)
        assert_float_equal(y[i], a[i] + 2 * b[i], 1e-6);
    assert_herd_ok(be->fill(n, 3.5f, y));
    for (size_t i = 0; i < n; i++)
        assert_true(y[i] == 3.5f);
    assert_int_equal(be->copy(n, NULL, y), HERD_ERR_INVALID_ARG);
    free(a), free(b), free(y), free(dx);
}

static void test_dropout(void **state)
{
    (void)state;
    const size_t n = 200000;
    const float p = 0.3f;
    float *x = tu_randv(n, 60), *y = calloc(n, 4), *mask = calloc(n, 4), *mask2 = calloc(n, 4);
    assert_herd_ok(be->dropout_fwd(n, x, y, mask, p, 1234));
    size_t zeros = 0;
    double kept_sum = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(mask[i] == 0.0f || fabsf(mask[i] - 1.0f / (1.0f - p)) < 1e-6f);
        assert_true(y[i] == x[i] * mask[i]);
        zeros += mask[i] == 0.0f;
        kept_sum += mask[i];
    }
    assert_true(fabs((double)zeros / n - p) < 0.005);
    assert_true(fabs(kept_sum / n - 1.0) < 0.01); /* inverted dropout keeps the mean */
    assert_herd_ok(be->dropout_fwd(n, x, y, mask2, p, 1234));
    assert_memory_equal(mask, mask2, n * 4);
    /* The mask does not depend on the thread count. */
    assert_herd_ok(be->set_threads(2));
    assert_herd_ok(be->dropout_fwd(n, x, y, mask2, p, 1234));
    assert_herd_ok(be->set_threads(1));
    assert_memory_equal(mask, mask2, n * 4);
    assert_herd_ok(be->dropout_fwd(n, x, y, mask2, p, 1235));
    assert_true(memcmp(mask, mask2, n * 4) != 0);
    assert_int_equal(be->dropout_fwd(n, x, y, mask, 1.5f, 1), HERD_ERR_INVALID_ARG);
    free(x), free(y), free(mask), free(mask2);
}

/* ------------------------------------------------------------------ loss */

static double xent_ref(int n, int k, const double *z, const int32_t *lab, double eps)
{
    double total = 0;
    for (int i = 0; i < n; i++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < k; j++)
            mx = fmax(mx, z[i * k + j]);
        for (int j = 0; j < k; j++)
            s += exp(z[i * k + j] - mx);
        for (int j = 0; j < k; j++) {
            double t = (1 - eps) * (j == lab[i]) + eps / k;
            total -= t * (z[i * k + j] - mx - log(s));
        }
    }
    return total;
}

static void test_softmax_xent(void **state)
{
    (void)state;
    const int n = 6, k = 5;
    float *z = tu_randv(n * k, 70), dz[30];
    int32_t lab[6] = {0, 4, 2, 2, 1, 3};
    double zd[30];
    for (int i = 0; i < n * k; i++)
        z[i] *= 4, zd[i] = z[i];
    z[0] = 50.0f, zd[0] = 50.0; /* large logits must not overflow */
    for (int sm = 0; sm < 2; sm++) {
        double eps = sm ? 0.1 : 0.0, loss;
        long correct, expect = 0;
        assert_herd_ok(be->softmax_xent(n, k, z, lab, (float)eps, dz, &loss, &correct));
        assert_float_equal(loss, xent_ref(n, k, zd, lab, eps), 1e-4 * fabs(loss) + 1e-5);
        for (int i = 0; i < n; i++) {
            int best = 0;
            for (int j = 1; j < k; j++)
                if (z[i * k + j] > z[i * k + best])
                    best = j;
            expect += best == lab[i];
        }
        assert_int_equal(correct, expect);
        const double h = 1e-6;
        for (int i = 0; i < n * k; i++) {
            double keep = zd[i];
            zd[i] = keep + h;
            double lp = xent_ref(n, k, zd, lab, eps) / n;
            zd[i] = keep - h;
            double lm = xent_ref(n, k, zd, lab, eps) / n;
            zd[i] = keep;
            assert_float_equal(dz[i], (lp - lm) / (2 * h), 1e-5);
        }
        double loss2;
        assert_herd_ok(be->softmax_xent(n, k, z, lab, (float)eps, NULL, &loss2, NULL));
        assert_float_equal(loss2, loss, 1e-9);
        /* In place (xent_in_place: the trainer writes the gradient over the logits): the
         * same bits of gradient, loss and hits. */
        assert_true(be->xent_in_place);
        float inplace[30];
        memcpy(inplace, z, sizeof inplace);
        double loss3;
        long correct3;
        assert_herd_ok(be->softmax_xent(n, k, inplace, lab, (float)eps, inplace, &loss3, &correct3));
        assert_memory_equal(inplace, dz, sizeof inplace);
        assert_true(loss3 == loss);
        assert_int_equal(correct3, correct);
    }
    lab[2] = 5;
    assert_int_equal(be->softmax_xent(n, k, z, lab, 0, dz, NULL, NULL), HERD_ERR_INVALID_ARG);
    assert_non_null(strstr(herd_last_error(), "label"));
    free(z);
}

static void test_table(void **state)
{
    (void)state;
    assert_string_equal(be->name, "cpu");
    for (int op = 0; op < HERD_OP_COUNT; op++)
        assert_true(be->supports_op((herd_op)op));
    void *p = be->alloc(1000);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 64, 0);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(((unsigned char *)p)[i], 0);
    be->free(p);
    assert_int_equal(be->set_threads(-1), HERD_ERR_INVALID_ARG);
    herd_conv_plan *cp;
    herd_conv_desc bad = {.n = 1, .c_in = 1, .h_in = 2, .w_in = 2, .c_out = 1, .kh = 5, .kw = 5, .stride = 1};
    assert_int_equal(be->conv2d_plan(&bad, &cp), HERD_ERR_INVALID_ARG);
}

/* A bad call fails with INVALID_ARG and a message containing `what`. */
static void expect_invalid(herd_status st, const char *what)
{
    assert_int_equal(st, HERD_ERR_INVALID_ARG);
    if (!strstr(herd_last_error(), what))
        fail_msg("expected '%s' in: %s", what, herd_last_error());
}

/* The argument checks every backend shares (backend.c), through the CPU table: each
 * refuses what it should, with the op named, and passes empty calls. */
static void test_shared_checks(void **state)
{
    (void)state;
    float v[64] = {0}, *x = v, *y = v + 16, *z = v + 32;
    expect_invalid(be->bias_add(-1, 2, y, x), "bias_add: bad arguments");
    expect_invalid(be->bias_grad(2, 2, x, y, 0.5f), "bias_grad: beta must be 0 or 1");
    assert_herd_ok(be->bias_add(0, 0, NULL, NULL));

    herd_conv_plan *cp = (herd_conv_plan *)v;
    expect_invalid(be->conv2d_plan(NULL, &cp), "conv2d_plan: NULL argument");
    herd_conv_desc cd = {.n = 1, .c_in = 1, .h_in = 3, .w_in = 3, .c_out = 1, .kh = 2, .kw = 2,
                         .stride = 1, .bias = true};
    assert_herd_ok(be->conv2d_plan(&cd, &cp));
    expect_invalid(be->conv2d_fwd(cp, NULL, x, x, y), "conv2d_fwd: NULL argument");
    expect_invalid(be->conv2d_fwd(cp, x, x, NULL, y), "has a bias but b is NULL");
    expect_invalid(be->conv2d_bwd_data(cp, x, x, NULL), "conv2d_bwd_data: NULL argument");
    expect_invalid(be->conv2d_bwd_weights(cp, x, y, z, z, 2.0f), "beta must be 0 or 1");
    expect_invalid(be->conv2d_bwd_weights(cp, x, y, z, NULL, 0.0f), "NULL gradient");
    be->conv2d_plan_free(cp);

    herd_pool_plan *pp = (herd_pool_plan *)v;
    herd_pool_desc pd = {.n = 1, .c = 1, .h_in = 4, .w_in = 4, .k = 2, .stride = 2, .is_max = true};
    expect_invalid(be->pool_plan(NULL, &pp), "pool_plan: NULL argument");
    assert_herd_ok(be->pool_plan(&pd, &pp));
    expect_invalid(be->pool_fwd(pp, x, NULL, true), "pool_fwd: NULL argument");
    expect_invalid(be->pool_bwd(pp, x, y), "needs a training forward pass first");
    be->pool_plan_free(pp);
    expect_invalid(be->global_avgpool_fwd(0, 1, 4, x, y), "global_avgpool_fwd: bad arguments");
    expect_invalid(be->global_avgpool_bwd(1, 1, 4, x, NULL), "global_avgpool_bwd: bad arguments");

    expect_invalid(be->bn_fwd_train(1, 2, 1, x, x, x, y, z, z, z, z, 0.1f, 1e-5f),
                   "more than 1 value per channel");
    expect_invalid(be->bn_fwd_infer(2, 2, 2, x, NULL, x, y, z, z, 1e-5f), "bn_fwd_infer: NULL array");
    expect_invalid(be->bn_bwd(2, 0, 2, x, x, x, x, x, y, z, z, 0.0f), "sizes must be positive");
    expect_invalid(be->bn_bwd(2, 2, 2, x, x, x, x, x, NULL, z, z, 3.0f), "bn_bwd: beta");
    double d[8] = {0};
    expect_invalid(be->bn_stats(1, 2, 1, x, d, 1, d + 4), "more than 1 value per channel");
    assert_herd_ok(be->bn_stats(1, 2, 1, x, NULL, 1, d + 4)); /* the plain sum needs no count */
    expect_invalid(be->bn_bwd_reduce(2, 2, 2, x, x, x, x, d, NULL, y, z, 0.0f),
                   "bn_bwd_reduce: NULL array");

    expect_invalid(be->relu_fwd(4, NULL, y), "relu_fwd: NULL array");
    assert_herd_ok(be->relu_fwd(0, NULL, NULL));
    expect_invalid(be->dropout_fwd(4, x, y, z, -0.5f, 1), "dropout: p must be in [0, 1]");
    int32_t labels[2] = {0, 1};
    expect_invalid(be->softmax_xent(2, 2, x, labels, 2.0f, y, NULL, NULL), "label smoothing");

    herd_sgd_args sgd = {.lr = 0.1f, .momentum = 0.9f};
    expect_invalid(be->sgd_update(4, x, y, NULL, &sgd), "needs a momentum buffer");
    assert_herd_ok(be->sgd_update(0, NULL, NULL, NULL, NULL));
    herd_adamw_args adam = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    expect_invalid(be->adamw_update(4, x, y, z, z, &adam), "1-based");
    expect_invalid(be->grad_unscale_check(4, NULL, 1.0f, NULL), "grad_unscale_check: NULL buffer");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),       cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_bias_ops),    cmocka_unit_test(test_desc_finish),
        cmocka_unit_test(test_conv),        cmocka_unit_test(test_conv_shared_weights),        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_global_avgpool), cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_elementwise), cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_softmax_xent), cmocka_unit_test(test_shared_checks),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
