/* bf16 activations in nChw16c on the CPU backend (herd_cpu_bf16_act_ops, backend.h).
 *
 * Every op against its fp32 CPU op run on the same values in NCHW fp32 (inputs
 * rounded to bf16 first): bf16 outputs against the fp32 result rounded to nearest
 * even, within 1 bf16 ulp and mostly the same bits (the ops use cpu_bn.c's
 * arithmetic, so given the same sums they match bit for bit); fp32 and double
 * outputs (statistics, parameter gradients, pooled means) within 1e-5. Element
 * (s, ch, p) is looked for at ((s*(c/16) + ch/16)*hw + p)*16 + ch%16, computed here
 * independently of the library. Also: the round trip through the layout, rounding
 * and special values, the same bits with 1 and 2 threads, beta = 1 accumulating,
 * in_use following the precision, and bad arguments refused. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "core/half.h"
#include "testutil.h"

static const herd_bf16_act_ops *ops;

static int setup(void **state)
{
    (void)state;
    const herd_backend *be = herd_backend_cpu();
    ops = be->bf16_acts;
    return ops == &herd_cpu_bf16_act_ops && be->set_threads(1) == HERD_OK ? 0 : -1;
}

static size_t blk(int c, int hw, int s, int ch, int p)
{
    return (((size_t)s * (c / 16) + ch / 16) * hw + p) * 16 + ch % 16;
}

static float rbf(float f) { return herd_bf16_to_float(herd_float_to_bf16(f)); }

/* An activation: random values rounded to bf16, in NCHW fp32 (f) and blocked (b). */
typedef struct {
    float *f;
    uint16_t *b;
} act;

static act act_rand(int n, int c, int hw, float lo, float hi, uint64_t seed)
{
    size_t total = (size_t)n * c * hw;
    act a = {malloc(total * sizeof(float)), malloc(total * sizeof(uint16_t))};
    assert_non_null(a.f);
    assert_non_null(a.b);
    tu_fill_uniform(a.f, total, lo, hi, seed);
    for (int s = 0; s < n; s++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < hw; p++) {
                float *v = &a.f[((size_t)s * c + ch) * hw + p];
                *v = rbf(*v);
                a.b[blk(c, hw, s, ch, p)] = herd_float_to_bf16(*v);
            }
    return a;
}

static void act_free(act a) { free(a.f), free(a.b); }

/* A blocked bf16 result against the NCHW fp32 reference rounded to bf16: each value
 * within 1 bf16 ulp (or 1e-6 of the largest, where cancellation leaves a value far
 * below its terms), NaN where the reference is NaN, and at least min_exact of them
 * (a fraction) the very same bits. Measured 2026-11-26 (gcc 12 -O3, clang 14 -O1):
 * every value of every op the same bits, own sums included. */
static void check_bf16(const char *what, const uint16_t *got, const float *ref, int n, int c,
                       int hw, double min_exact)
{
    size_t total = (size_t)n * c * hw, exact = 0;
    double big = 0.0, worst = 0.0;
    for (size_t i = 0; i < total; i++)
        big = fmax(big, fabs(ref[i]));
    for (int s = 0; s < n; s++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < hw; p++) {
                uint16_t r = herd_float_to_bf16(ref[((size_t)s * c + ch) * hw + p]);
                uint16_t g = got[blk(c, hw, s, ch, p)];
                if (g == r) {
                    exact++;
                    continue;
                }
                float gf = herd_bf16_to_float(g), rf = herd_bf16_to_float(r);
                if (isnan(rf) || isnan(gf))
                    fail_msg("%s (s=%d ch=%d p=%d): %g, expected %g", what, s, ch, p, (double)gf,
                             (double)rf);
                double ulp = ldexp(1.0, (rf != 0.0f ? ilogb(rf) : -126) - 7);
                if (gf != 0.0f)
                    ulp = fmax(ulp, ldexp(1.0, ilogb(gf) - 7));
                double err = fabs((double)gf - rf);
                worst = fmax(worst, err / ulp);
                if (err > ulp && err > 1e-6 * big)
                    fail_msg("%s (n=%d c=%d hw=%d) at s=%d ch=%d p=%d: %.9g, expected %.9g "
                             "(%.2f bf16 ulp)",
                             what, n, c, hw, s, ch, p, (double)gf, (double)rf, err / ulp);
            }
    if ((double)exact < min_exact * (double)total)
        fail_msg("%s (n=%d c=%d hw=%d): only %zu of %zu values exact (worst %.2f ulp)", what, n,
                 c, hw, exact, total, worst);
}

/* fp32 or double results: |got - ref| <= tol * max(1, |ref|). */
#define CHECK_CLOSE(what, got, ref, count, tol)                                                \
    do {                                                                                       \
        for (size_t i_ = 0; i_ < (size_t)(count); i_++) {                                      \
            double g_ = (got)[i_], r_ = (ref)[i_];                                             \
            if (!(fabs(g_ - r_) <= (tol) * fmax(1.0, fabs(r_))))                               \
                fail_msg("%s[%zu]: %.10g, expected %.10g", what, i_, g_, r_);                  \
        }                                                                                      \
    } while (0)

typedef struct {
    int n, c, hw;
} shape;

static const shape shapes[] = {{3, 16, 1}, {3, 48, 49}, {2, 16, 784}, {3, 32, 49}, {4, 32, 196}};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

/* ------------------------------------------------------------------ layout */

static void test_layout(void **state)
{
    (void)state;
    for (size_t t = 0; t < N_SHAPES; t++) {
        int n = shapes[t].n, c = shapes[t].c, hw = shapes[t].hw;
        size_t total = (size_t)n * c * hw;
        act a = act_rand(n, c, hw, -4.0f, 4.0f, 100 + t);
        uint16_t *b = malloc(total * sizeof *b);
        float *f = malloc(total * sizeof *f), *raw = malloc(total * sizeof *raw);
        /* bf16 values go in and come back exactly, each at its blocked index. */
        assert_herd_ok(ops->from_f32(n, c, hw, a.f, b));
        assert_memory_equal(b, a.b, total * sizeof *b);
        assert_herd_ok(ops->to_f32(n, c, hw, b, f));
        assert_memory_equal(f, a.f, total * sizeof *f);
        /* Other values round to nearest even. */
        tu_fill_uniform(raw, total, -4.0f, 4.0f, 200 + t);
        assert_herd_ok(ops->from_f32(n, c, hw, raw, b));
        check_bf16("from_f32", b, raw, n, c, hw, 1.0);
        free(b), free(f), free(raw);
        act_free(a);
    }
    /* Rounding: ties to even, carries, overflow to inf, NaN kept, -0 kept. */
    float in[16] = {1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 1.0f + 0x1.8p-8f, -1.0f - 0x1p-8f,
                    0x1.ffp127f,    INFINITY,       -INFINITY,       NAN,
                    -0.0f,          0x1p-133f,      0x1p-134f,       0.0f /* NaN */,
                    3.0f,           65504.0f,       0x1.fffffep127f, 0.1f};
    uint16_t want[16] = {0x3f80, 0x3f82, 0x3f81, 0xbf80, 0x7f80, 0x7f80, 0xff80, 0,
                         0x8000, 0x0001, 0x0000, 0,      0x4040, 0x4780, 0x7f80, 0x3dcd};
    uint32_t low_nan = 0xff800001u; /* a NaN whose top 16 bits alone would read as -inf */
    memcpy(&in[11], &low_nan, sizeof low_nan);
    uint16_t out[16];
    float back[16];
    assert_herd_ok(ops->from_f32(1, 16, 1, in, out));
    for (int i = 0; i < 16; i++) {
        if (isnan(in[i])) {
            assert_true(isnan(herd_bf16_to_float(out[i])));
            assert_int_equal(out[i] & 0x8000, signbit(in[i]) ? 0x8000 : 0);
        } else if (out[i] != want[i]) {
            fail_msg("from_f32(%a) = 0x%04x, expected 0x%04x", (double)in[i], out[i], want[i]);
        }
    }
    assert_herd_ok(ops->to_f32(1, 16, 1, out, back));
    assert_true(back[0] == 1.0f && back[1] == 1.0f + 0x4p-8f && signbit(back[8]));
}

/* ------------------------------------------------------------------ elementwise */

static void test_elementwise(void **state)
{
    (void)state;
    for (size_t t = 0; t < N_SHAPES; t++) {
        int n = shapes[t].n, c = shapes[t].c, hw = shapes[t].hw;
        size_t total = (size_t)n * c * hw;
        act x = act_rand(n, c, hw, -2.0f, 2.0f, 300 + t);
        act d = act_rand(n, c, hw, -1.0f, 1.0f, 400 + t);
        /* Special values through relu and add: NaN, infinities, signed zeros, denormals. */
        uint16_t special[] = {0x7fc0, 0xffc0, 0x7f80, 0xff80, 0x0000,
                              0x8000, 0x0001, 0x8001, 0x7f81};
        for (int i = 0; i < 9; i++) {
            x.b[blk(c, hw, 0, (5 * i) % c, 0)] = special[i];
            x.f[(size_t)((5 * i) % c) * hw] = herd_bf16_to_float(special[i]);
        }
        uint16_t *y = malloc(total * 2), *dx = malloc(total * 2), *acc = malloc(total * 2);
        float *ry = malloc(total * 4), *rdx = malloc(total * 4);

        assert_herd_ok(ops->relu_fwd(total, x.b, y));
        assert_herd_ok(herd_cpu_relu_fwd(total, x.f, ry));
        check_bf16("relu_fwd", y, ry, n, c, hw, 1.0);
        for (size_t i = 0; i < total; i++) /* +0, never -0 */
            assert_true(y[i] != 0x8000);
        /* NaN passes (both formats), as PyTorch's relu: it must reach the loss. */
        int nans = 0;
        for (int ch = 0; ch < c; ch++)
            if (isnan(x.f[(size_t)ch * hw])) {
                nans++;
                assert_true(isnan(ry[(size_t)ch * hw]));
                assert_true((y[blk(c, hw, 0, ch, 0)] & 0x7fffu) > 0x7f80u);
            }
        assert_true(nans > 0);
        assert_herd_ok(ops->relu_bwd(total, y, d.b, dx));
        assert_herd_ok(herd_cpu_relu_bwd(total, ry, d.f, rdx));
        check_bf16("relu_bwd", dx, rdx, n, c, hw, 1.0);

        assert_herd_ok(ops->add(total, x.b, d.b, y));
        assert_herd_ok(herd_cpu_add(total, x.f, d.f, ry));
        check_bf16("add", y, ry, n, c, hw, 1.0);
        /* accumulate: y += x, rounded; the same as add into a copy of y. */
        assert_herd_ok(ops->copy(total, d.b, acc));
        assert_memory_equal(acc, d.b, total * 2);
        assert_herd_ok(ops->accumulate(total, x.b, acc));
        assert_memory_equal(acc, y, total * 2);
        assert_herd_ok(ops->accumulate(total, x.b, acc)); /* y + 2x, rounded twice */
        for (size_t i = 0; i < total; i++)
            ry[i] = rbf(ry[i]) + x.f[i];
        check_bf16("accumulate twice", acc, ry, n, c, hw, 1.0);
        free(y), free(dx), free(acc), free(ry), free(rdx);
        act_free(x), act_free(d);
    }
    /* Layout-free: any count (the last of an odd one alone), in place. */
    uint16_t a[7], b[7], y[7];
    for (int i = 0; i < 7; i++)
        a[i] = herd_float_to_bf16(1.0f + 0.37f * i), b[i] = herd_float_to_bf16(-0.011f * i * i);
    memcpy(y, a, sizeof y);
    assert_herd_ok(ops->accumulate(7, b, y)); /* y = a + b */
    assert_herd_ok(ops->add(7, y, b, y));     /* y = a + 2b */
    for (int i = 0; i < 7; i++) {
        float bi = herd_bf16_to_float(b[i]);
        assert_int_equal(y[i], herd_float_to_bf16(rbf(herd_bf16_to_float(a[i]) + bi) + bi));
    }
    assert_herd_ok(ops->relu_fwd(7, b, b));
    for (int i = 0; i < 7; i++)
        assert_int_equal(b[i], 0);
}

/* ------------------------------------------------------------------ global average pool */

static void test_global_avgpool(void **state)
{
    (void)state;
    for (size_t t = 0; t < N_SHAPES; t++) {
        int n = shapes[t].n, c = shapes[t].c, hw = shapes[t].hw;
        size_t total = (size_t)n * c * hw, nc = (size_t)n * c;
        act x = act_rand(n, c, hw, -1.0f, 3.0f, 500 + t);
        float *y = malloc(nc * 4), *ry = malloc(nc * 4), *dy = tu_randv(nc, 600 + t);
        uint16_t *dx = malloc(total * 2);
        float *rdx = malloc(total * 4);
        assert_herd_ok(ops->global_avgpool_fwd(n, c, hw, x.b, y));
        assert_herd_ok(herd_cpu_global_avgpool_fwd(n, c, hw, x.f, ry));
        CHECK_CLOSE("global_avgpool_fwd", y, ry, nc, 1e-5);
        assert_herd_ok(ops->global_avgpool_bwd(n, c, hw, dy, dx));
        assert_herd_ok(herd_cpu_global_avgpool_bwd(n, c, hw, dy, rdx));
        check_bf16("global_avgpool_bwd", dx, rdx, n, c, hw, 1.0);
        free(y), free(ry), free(dy), free(dx), free(rdx);
        act_free(x);
    }
}

/* ------------------------------------------------------------------ batch norm */

/* Forward and backward through the split ops, each bf16 op against the fp32 one. The
 * ops after a reduction get the fp32 op's sums on both sides (they must then agree
 * bit for bit, up to the rare value rounding differently), and once their own. */
static void bn_case(int n, int c, int hw, uint64_t seed)
{
    size_t total = (size_t)n * c * hw;
    int64_t count = (int64_t)n * hw;
    const float momentum = 0.1f, eps = 1e-5f;
    act x = act_rand(n, c, hw, -1.0f, 3.0f, seed), dy = act_rand(n, c, hw, -1.0f, 1.0f, seed + 1);
    float *gamma = tu_randv(c, seed + 2), *beta = tu_randv(c, seed + 3);
    float *rm = tu_randv(c, seed + 4), *rv = malloc(c * 4), *rm2 = malloc(c * 4),
          *rv2 = malloc(c * 4);
    tu_fill_uniform(rv, c, 0.5f, 2.0f, seed + 5);
    memcpy(rm2, rm, c * 4), memcpy(rv2, rv, c * 4);
    double *d = malloc(12 * c * sizeof *d);
    double *sum = d, *sq = d + c, *rsum = d + 2 * c, *rsq = d + 3 * c, *sdy = d + 4 * c,
           *sdyx = d + 5 * c, *rsdy = d + 6 * c, *rsdyx = d + 7 * c;
    float *p = malloc(12 * c * 4);
    float *sm = p, *si = p + c, *rsm = p + 2 * c, *rsi = p + 3 * c, *dg = p + 4 * c,
          *db = p + 5 * c, *rdg = p + 6 * c, *rdb = p + 7 * c, *dg0 = p + 8 * c, *db0 = p + 9 * c;
    uint16_t *y = malloc(total * 2), *dx = malloc(total * 2);
    float *ry = malloc(total * 4), *rdx = malloc(total * 4);

    /* Statistics. */
    assert_herd_ok(ops->bn_stats(n, c, hw, x.b, NULL, count, sum));
    assert_herd_ok(herd_cpu_bn_stats(n, c, hw, x.f, NULL, count, rsum));
    CHECK_CLOSE("bn_stats sum", sum, rsum, c, 1e-5);
    assert_herd_ok(ops->bn_stats(n, c, hw, x.b, rsum, count, sq));
    assert_herd_ok(herd_cpu_bn_stats(n, c, hw, x.f, rsum, count, rsq));
    CHECK_CLOSE("bn_stats sqdev", sq, rsq, c, 1e-5);

    /* Training forward, with the reference's sums. */
    assert_herd_ok(ops->bn_apply_train(n, c, hw, x.b, gamma, beta, rsum, rsq, count, y, sm, si, rm,
                                       rv, momentum, eps));
    assert_herd_ok(herd_cpu_bn_apply_train(n, c, hw, x.f, gamma, beta, rsum, rsq, count, ry, rsm,
                                           rsi, rm2, rv2, momentum, eps));
    check_bf16("bn_apply_train", y, ry, n, c, hw, 0.99);
    CHECK_CLOSE("save_mean", sm, rsm, c, 1e-5);
    CHECK_CLOSE("save_invstd", si, rsi, c, 1e-5);
    CHECK_CLOSE("running_mean", rm, rm2, c, 1e-5);
    CHECK_CLOSE("running_var", rv, rv2, c, 1e-5);
    /* ... and with its own (local batch norm). */
    assert_herd_ok(ops->bn_stats(n, c, hw, x.b, sum, count, sq));
    assert_herd_ok(ops->bn_apply_train(n, c, hw, x.b, gamma, beta, sum, sq, count, y, sm, si, rm,
                                       rv, momentum, eps));
    check_bf16("bn_apply_train, own sums", y, ry, n, c, hw, 0.9);
    CHECK_CLOSE("save_invstd, own sums", si, rsi, c, 1e-5);

    /* Inference. */
    assert_herd_ok(ops->bn_fwd_infer(n, c, hw, x.b, gamma, beta, y, rm2, rv2, eps));
    assert_herd_ok(herd_cpu_bn_fwd_infer(n, c, hw, x.f, gamma, beta, ry, rm2, rv2, eps));
    check_bf16("bn_fwd_infer", y, ry, n, c, hw, 0.99);

    /* Backward: sums and parameter gradients, overwritten (beta 0) then accumulated. */
    assert_herd_ok(ops->bn_bwd_reduce(n, c, hw, x.b, dy.b, rsm, rsi, sdy, sdyx, dg, db, 0.0f));
    assert_herd_ok(herd_cpu_bn_bwd_reduce(n, c, hw, x.f, dy.f, rsm, rsi, rsdy, rsdyx, rdg, rdb,
                                          0.0f));
    CHECK_CLOSE("bn_bwd_reduce sum_dy", sdy, rsdy, c, 1e-5);
    CHECK_CLOSE("bn_bwd_reduce sum_dy_xc", sdyx, rsdyx, c, 1e-5);
    CHECK_CLOSE("dgamma", dg, rdg, c, 1e-5);
    CHECK_CLOSE("dbeta", db, rdb, c, 1e-5);
    memcpy(dg0, dg, c * 4), memcpy(db0, db, c * 4);
    assert_herd_ok(ops->bn_bwd_reduce(n, c, hw, x.b, dy.b, rsm, rsi, sdy, sdyx, dg, db, 1.0f));
    for (int ch = 0; ch < c; ch++)
        rdg[ch] = 2.0f * dg0[ch], rdb[ch] = 2.0f * db0[ch];
    CHECK_CLOSE("dgamma accumulated", dg, rdg, c, 1e-6);
    CHECK_CLOSE("dbeta accumulated", db, rdb, c, 1e-6);

    /* Input gradient, with the reference's sums and with its own. */
    assert_herd_ok(ops->bn_bwd_apply(n, c, hw, x.b, dy.b, gamma, rsm, rsi, rsdy, rsdyx, count, dx));
    assert_herd_ok(herd_cpu_bn_bwd_apply(n, c, hw, x.f, dy.f, gamma, rsm, rsi, rsdy, rsdyx, count,
                                         rdx));
    check_bf16("bn_bwd_apply", dx, rdx, n, c, hw, 0.99);
    assert_herd_ok(ops->bn_bwd_apply(n, c, hw, x.b, dy.b, gamma, rsm, rsi, sdy, sdyx, count, dx));
    check_bf16("bn_bwd_apply, own sums", dx, rdx, n, c, hw, 0.9);

    act_free(x), act_free(dy);
    free(gamma), free(beta), free(rm), free(rv), free(rm2), free(rv2), free(d), free(p);
    free(y), free(dx), free(ry), free(rdx);
}

static void test_batchnorm(void **state)
{
    (void)state;
    for (size_t t = 0; t < N_SHAPES; t++)
        bn_case(shapes[t].n, shapes[t].c, shapes[t].hw, 700 + 10 * t);
    bn_case(3, 16, 784, 800); /* 28x28 with an odd batch */
}

/* ------------------------------------------------------------------ threads */

/* The reductions give the same bits on 1 and 2 threads (large enough to fork). */
static void test_threads(void **state)
{
    (void)state;
    int n = 8, c = 32, hw = 784;
    int64_t count = (int64_t)n * hw;
    act x = act_rand(n, c, hw, -1.0f, 3.0f, 900), dy = act_rand(n, c, hw, -1.0f, 1.0f, 901);
    float *mean = malloc(c * 4), *invstd = malloc(c * 4), *pool[2], *dg[2], *db[2];
    double *out[2][4];
    tu_fill_uniform(mean, c, 0.5f, 1.5f, 902);
    tu_fill_uniform(invstd, c, 0.5f, 1.5f, 903);
    for (int r = 0; r < 2; r++) {
        omp_set_num_threads(r + 1);
        assert_int_equal(omp_get_max_threads(), r + 1);
        for (int j = 0; j < 4; j++)
            out[r][j] = malloc(c * sizeof(double));
        pool[r] = malloc((size_t)n * c * 4), dg[r] = malloc(c * 4), db[r] = malloc(c * 4);
        assert_herd_ok(ops->bn_stats(n, c, hw, x.b, NULL, count, out[r][0]));
        assert_herd_ok(ops->bn_stats(n, c, hw, x.b, out[r][0], count, out[r][1]));
        assert_herd_ok(ops->bn_bwd_reduce(n, c, hw, x.b, dy.b, mean, invstd, out[r][2], out[r][3],
                                          dg[r], db[r], 0.0f));
        assert_herd_ok(ops->global_avgpool_fwd(n, c, hw, x.b, pool[r]));
    }
    omp_set_num_threads(1);
    for (int j = 0; j < 4; j++)
        assert_memory_equal(out[0][j], out[1][j], c * sizeof(double));
    assert_memory_equal(pool[0], pool[1], (size_t)n * c * 4);
    assert_memory_equal(dg[0], dg[1], c * 4);
    assert_memory_equal(db[0], db[1], c * 4);
    for (int r = 0; r < 2; r++) {
        for (int j = 0; j < 4; j++)
            free(out[r][j]);
        free(pool[r]), free(dg[r]), free(db[r]);
    }
    free(mean), free(invstd);
    act_free(x), act_free(dy);
}

/* ------------------------------------------------------------------ table, checks */

static void expect_invalid(herd_status st, const char *what)
{
    assert_int_equal(st, HERD_ERR_INVALID_ARG);
    if (!strstr(herd_last_error(), what))
        fail_msg("expected '%s' in: %s", what, herd_last_error());
}

static void test_table_and_checks(void **state)
{
    (void)state;
    const herd_backend *be = herd_backend_cpu();
    assert_herd_ok(be->set_precision(HERD_PRECISION_FP32));
    assert_false(ops->in_use());
    setenv("HERD_CPU_BF16", "emulate", 1);
    assert_herd_ok(be->set_precision(HERD_PRECISION_BF16));
    assert_false(ops->in_use()); /* emulation keeps fp32 activations */
    unsetenv("HERD_CPU_BF16");
    if (herd_cpu_native_bf16()) {
        assert_herd_ok(be->set_precision(HERD_PRECISION_BF16));
        assert_true(ops->in_use());
    }
    assert_herd_ok(be->set_precision(HERD_PRECISION_FP32));
    assert_false(ops->in_use());

    float f[64] = {0}, g[64] = {0};
    uint16_t b[64] = {0}, b2[64] = {0};
    double d[64] = {0};
    expect_invalid(ops->from_f32(1, 20, 1, f, b), "multiple of 16");
    expect_invalid(ops->to_f32(1, 20, 1, b, f), "bf16 to_f32: channels must be a multiple of 16");
    expect_invalid(ops->bn_stats(1, 20, 1, b, NULL, 1, d), "bf16 bn_stats: channels");
    expect_invalid(ops->bn_stats(0, 16, 1, b, NULL, 1, d), "sizes must be positive");
    expect_invalid(ops->global_avgpool_fwd(1, 16, 0, b, f), "sizes must be positive");
    expect_invalid(ops->global_avgpool_bwd(1, 16, 1, NULL, b), "global_avgpool_bwd: NULL array");
    expect_invalid(ops->bn_stats(1, 16, 1, NULL, NULL, 1, d), "bf16 bn_stats: NULL array");
    expect_invalid(ops->bn_stats(1, 16, 1, b, d, 1, d + 16), "more than 1 value per channel");
    assert_herd_ok(ops->bn_stats(1, 16, 1, b, NULL, 1, d)); /* the plain sum needs no count */
    expect_invalid(ops->bn_apply_train(1, 16, 2, b, f, f, d, d, 2, b, g, g, g, NULL, 0.1f, 1e-5f),
                   "bn_apply_train: NULL array");
    expect_invalid(ops->bn_fwd_infer(1, 32, 1, b, f, NULL, b, f, f, 1e-5f), "NULL array");
    expect_invalid(ops->bn_bwd_reduce(1, 16, 2, b, b, f, f, d, d + 16, f, g, 0.5f),
                   "beta must be 0 or 1");
    expect_invalid(ops->bn_bwd_apply(1, 16, 1, b, b, f, f, f, d, d, 1, b2), "more than 1 value");
    expect_invalid(ops->relu_fwd(4, NULL, b), "bf16 relu_fwd: NULL array");
    expect_invalid(ops->relu_bwd(4, b, NULL, b2), "relu_bwd: NULL array");
    expect_invalid(ops->add(4, b, b, NULL), "add: NULL array");
    expect_invalid(ops->accumulate(4, NULL, b), "accumulate: NULL array");
    expect_invalid(ops->copy(4, b, NULL), "copy: NULL array");
    assert_herd_ok(ops->relu_fwd(0, NULL, NULL)); /* empty calls pass */
    assert_herd_ok(ops->copy(0, NULL, NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),     cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_global_avgpool), cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_threads),    cmocka_unit_test(test_table_and_checks),
    };
    return tu_run(tests, setup, NULL);
}
