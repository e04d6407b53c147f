/* bf16 activations in oneDNN's nChw16c layout (herd_bf16_act_ops, backend.h).
 * Block k = s*(c/16) + channel block: hw pixels of 16 lanes at k*hw*16 (in NCHW, the
 * same channels are the 16 x hw floats at k*16*hw). Loops run over blocks, across
 * threads, and read each block as 32-bit words of two lanes (2i low, 2i+1 high): bf16
 * <-> fp32 is a shift, a mask, a rounding and an OR, no shuffles, in flat runs of 2
 * pixels, which gcc vectorises 2-2.5x faster than 16-lane rows in a pixel loop.
 * The arithmetic is cpu_bn.c's, expression for expression, on values widened exactly
 * and rounded to nearest even: given the same sums, outputs are the fp32 op's, rounded,
 * bit for bit. Reductions sum per block into a per-sample buffer, then over samples
 * in order: the same bits for any thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "core/half.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "cpu_act_bf16.c reads lanes 2i and 2i+1 as the low and high half of a word"
#endif

#define L 16 /* channels per block */
#define W 16 /* words per run: 2 pixels */

/* f rounded to bf16 (nearest, ties to even), in the word's high half. A NaN keeps its
 * sign and top payload and is made quiet (the carry could turn it into inf); overflow
 * gives inf, as it should. Branch-free, so loops vectorise (half.h's has a branch). */
static inline uint32_t rne(float f)
{
    uint32_t x = herd_float_bits(f);
    uint32_t r = x + 0x7fffu + ((x >> 16) & 1u);
    return ((x & 0x7fffffffu) > 0x7f800000u ? x | 0x400000u : r) & 0xffff0000u;
}

static inline float b2f(uint16_t b) { return herd_bits_float((uint32_t)b << 16); }
static inline uint16_t f2b(float f) { return (uint16_t)(rne(f) >> 16); }
static inline uint32_t ld(const uint16_t *p)
{
    uint32_t w;
    memcpy(&w, p, sizeof w);
    return w;
}
static inline void st(uint16_t *p, uint32_t w) { memcpy(p, &w, sizeof w); }
static inline float lo(uint32_t w) { return herd_bits_float(w << 16); }
static inline float hi(uint32_t w) { return herd_bits_float(w & 0xffff0000u); }
static inline uint32_t pack(float a, float b) { return rne(a) >> 16 | rne(b); } /* a low */

/* BODY for each word i of a block of hw pixels, j = i's place in its run: runs of W
 * words, then the odd pixel's 8. */
#define WORD_LOOP(hw, BODY)                                                                \
    do {                                                                                   \
        size_t m_ = (size_t)(hw) * (L / 2), i0_ = 0;                                       \
        for (; i0_ + W <= m_; i0_ += W)                                                    \
            _Pragma("omp simd") for (int j = 0; j < W; j++) { size_t i = i0_ + j; BODY; }  \
        for (; i0_ < m_; i0_ += L / 2)                                                     \
            _Pragma("omp simd") for (int j = 0; j < L / 2; j++) { size_t i = i0_ + j; BODY; } \
    } while (0)

/* A per-lane value in run order: e[j], o[j] for the low and high half of word j. */
typedef struct { float e[W], o[W]; } lanes;

static inline void split(lanes *r, const float *v)
{
    for (int j = 0; j < W; j++)
        r->e[j] = v[2 * (j % 8)], r->o[j] = v[2 * (j % 8) + 1];
}

/* Per-lane sums from run-order accumulators (the run's two pixels added last). */
static inline void unsplit(const double *e, const double *o, double *out)
{
    for (int j = 0; j < L / 2; j++)
        out[2 * j] = e[j] + e[j + 8], out[2 * j + 1] = o[j] + o[j + 8];
}

/* x > 0 on bf16 bits, as the fp32 ops compare: +denormal .. +inf; not zeros or NaNs. */
static inline int positive(uint16_t v) { return (uint16_t)(v - 1u) < 0x7f80u; }

/* Sizes, and unless count is NULL the batch's values per channel: training statistics
 * need more than one (as backend.c checks). */
static herd_status check(const char *op, int n, int c, int hw, const int64_t *count)
{
    if (n <= 0 || c <= 0 || hw <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bf16 %s: sizes must be positive (n=%d c=%d hw=%d)",
                        op, n, c, hw);
    if (c % L)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "bf16 %s: channels must be a multiple of 16 for nChw16c, got c=%d", op, c);
    if (count && *count < 2)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "bf16 %s: training needs more than 1 value per channel (%lld in the "
                        "batch); use a larger batch",
                        op, (long long)*count);
    return HERD_OK;
}

#define BLOCKS ((size_t)n * (size_t)(c / L))
#define BLK(p, k) ((p) + (k) * (size_t)hw * L)    /* block k of a blocked tensor */
#define CH0(k) ((int)((k) % (size_t)(c / L)) * L) /* its first channel */
#define PAR herd_cpu_par(BLOCKS * (size_t)hw * L)    /* the team for a whole tensor's blocks */

static bool act_in_use(void) { return herd_cpu_bf16() == HERD_CPU_BF16_NATIVE; }

/* ---- layout conversions: a 16 x hw transpose per block (model edges only) */

static herd_status act_from_f32(int n, int c, int hw, const float *x, uint16_t *y)
{
    HERD_TRY(check("from_f32", n, c, hw, NULL));
    HERD_CHECK_ARRAYS("bf16 from_f32", 1, x, y);
    HERD_CPU_FOR(PAR, size_t, k, BLOCKS,
        const float *xb = x + k * L * hw;
        uint16_t *yb = BLK(y, k);
        for (int p = 0; p < hw; p++)
            _Pragma("omp simd")
            for (int l = 0; l < L; l++)
                yb[(size_t)p * L + l] = f2b(xb[(size_t)l * hw + p]);
    );
    return HERD_OK;
}

static herd_status act_to_f32(int n, int c, int hw, const uint16_t *x, float *y)
{
    HERD_TRY(check("to_f32", n, c, hw, NULL));
    HERD_CHECK_ARRAYS("bf16 to_f32", 1, x, y);
    HERD_CPU_FOR(PAR, size_t, k, BLOCKS,
        const uint16_t *xb = BLK(x, k);
        float *yb = y + k * L * hw;
        for (int l = 0; l < L; l++)
            _Pragma("omp simd")
            for (int p = 0; p < hw; p++)
                yb[(size_t)l * hw + p] = b2f(xb[(size_t)p * L + l]);
    );
    return HERD_OK;
}

/* ---- elementwise: layout-free, over n values */

static herd_status act_relu_fwd(size_t n, const uint16_t *x, uint16_t *y)
{
    HERD_CHECK_ARRAYS("bf16 relu_fwd", n, x, y);
    HERD_CPU_FOR_SIMD(herd_cpu_par(n), size_t, i, n,
        /* negatives and -0 give +0, NaN passes (quieted, as a conversion of fp32's) */
        y[i] = positive(x[i]) ? x[i] : (x[i] & 0x7fffu) > 0x7f80u ? (uint16_t)(x[i] | 0x40u) : 0;
    );
    return HERD_OK;
}

static herd_status act_relu_bwd(size_t n, const uint16_t *y, const uint16_t *dy, uint16_t *dx)
{
    HERD_CHECK_ARRAYS("bf16 relu_bwd", n, y, dy, dx);
    HERD_CPU_FOR_SIMD(herd_cpu_par(n), size_t, i, n,
        dx[i] = positive(y[i]) ? dy[i] : 0;
    );
    return HERD_OK;
}

/* In words of two values, and the odd last one. */
static herd_status act_add(size_t n, const uint16_t *a, const uint16_t *b, uint16_t *y)
{
    HERD_CHECK_ARRAYS("bf16 add", n, a, b, y);
    HERD_CPU_FOR_SIMD(herd_cpu_par(n), size_t, i, n / 2,
        uint32_t wa = ld(a + 2 * i), wb = ld(b + 2 * i);
        st(y + 2 * i, pack(lo(wa) + lo(wb), hi(wa) + hi(wb)));
    );
    if (n % 2)
        y[n - 1] = f2b(b2f(a[n - 1]) + b2f(b[n - 1]));
    return HERD_OK;
}

static herd_status act_accumulate(size_t n, const uint16_t *x, uint16_t *y)
{
    HERD_CHECK_ARRAYS("bf16 accumulate", n, x, y);
    return act_add(n, y, x, y);
}

#define COPY_CHUNK ((size_t)1 << 16) /* values per memcpy */

static herd_status act_copy(size_t n, const uint16_t *x, uint16_t *y)
{
    HERD_CHECK_ARRAYS("bf16 copy", n, x, y);
    if (x == y)
        return HERD_OK;
    if (!herd_cpu_par(n)) { /* no parallel region for one thread's copy (herd_cpu_par) */
        memcpy(y, x, n * sizeof *y);
        return HERD_OK;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i += COPY_CHUNK)
        memcpy(y + i, x + i, (n - i < COPY_CHUNK ? n - i : COPY_CHUNK) * sizeof *y);
    return HERD_OK;
}

/* ---- per-block reductions into 16 per-lane doubles; products in float, as cpu_bn.c */

static inline void block_sum(const uint16_t *x, int hw, double *out)
{
    double e[W] = {0}, o[W] = {0};
    WORD_LOOP(hw, uint32_t w = ld(x + 2 * i); e[j] += lo(w); o[j] += hi(w));
    unsplit(e, o, out);
}

/* Second pass over deviations (ch_sqdev in cpu_bn.c). */
static inline void block_sqdev(const uint16_t *x, int hw, const lanes *mean, double *out)
{
    double e[W] = {0}, o[W] = {0};
    WORD_LOOP(hw, uint32_t w = ld(x + 2 * i); float de = lo(w) - mean->e[j];
              float dd = hi(w) - mean->o[j]; e[j] += de * de; o[j] += dd * dd);
    unsplit(e, o, out);
}

/* out[ch] = sum over samples 0..n-1, in order, of part[s*c + ch]. */
static void fold_samples(const double *part, int n, int c, double *out)
{
    for (int ch = 0; ch < c; ch++)
        out[ch] = 0.0;
    for (int s = 0; s < n; s++)
        for (int ch = 0; ch < c; ch++)
            out[ch] += part[(size_t)s * c + ch];
}

static herd_status act_global_avgpool_fwd(int n, int c, int hw, const uint16_t *x, float *y)
{
    HERD_TRY(check("global_avgpool_fwd", n, c, hw, NULL));
    HERD_CHECK_ARRAYS("bf16 global_avgpool_fwd", 1, x, y);
    float inv = 1.0f / (float)hw; /* as herd_cpu_global_avgpool_fwd: sum * (1/hw) */
    HERD_CPU_FOR(PAR, size_t, k, BLOCKS,
        double s[L];
        block_sum(BLK(x, k), hw, s);
        for (int l = 0; l < L; l++) /* y[s*c + ch] is y[k*16 + lane] */
            y[k * L + l] = (float)(s[l] * inv);
    );
    return HERD_OK;
}

static herd_status act_global_avgpool_bwd(int n, int c, int hw, const float *dy, uint16_t *dx)
{
    HERD_TRY(check("global_avgpool_bwd", n, c, hw, NULL));
    HERD_CHECK_ARRAYS("bf16 global_avgpool_bwd", 1, dy, dx);
    float inv = 1.0f / (float)hw;
    HERD_CPU_FOR(PAR, size_t, k, BLOCKS,
        uint16_t g[L];
        for (int l = 0; l < L; l++)
            g[l] = f2b(dy[k * L + l] * inv);
        for (int p = 0; p < hw; p++)
            memcpy(BLK(dx, k) + (size_t)p * L, g, sizeof g);
    );
    return HERD_OK;
}

/* ---- batch norm: cpu_bn.c's split ops on this layout */

static herd_status act_bn_stats(int n, int c, int hw, const uint16_t *x, const double *sum,
                                int64_t count, double *out)
{
    HERD_TRY(check("bn_stats", n, c, hw, sum ? &count : NULL));
    HERD_CHECK_ARRAYS("bf16 bn_stats", 1, x, out);
    double *part = malloc(BLOCKS * L * sizeof *part);
    if (!part)
        return HERD_NOMEM(BLOCKS * L * sizeof *part);
    HERD_CPU_FOR(PAR, size_t, k, BLOCKS,
        if (!sum) {
            block_sum(BLK(x, k), hw, part + k * L);
            continue;
        }
        float m[L];
        lanes mean;
        for (int l = 0; l < L; l++)
            m[l] = (float)(sum[CH0(k) + l] / (double)count);
        split(&mean, m);
        block_sqdev(BLK(x, k), hw, &mean, part + k * L);
    );
    fold_samples(part, n, c, out);
    free(part);
    return HERD_OK;
}

/* y = x*scale + shift over one block, per-lane scale and shift. */
static inline void block_affine(const uint16_t *x, uint16_t *y, int hw, const float *scale16,
                                const float *shift16)
{
    lanes sc, sh;
    split(&sc, scale16), split(&sh, shift16);
    WORD_LOOP(hw, uint32_t w = ld(x + 2 * i);
              st(y + 2 * i, pack(lo(w) * sc.e[j] + sh.e[j], hi(w) * sc.o[j] + sh.o[j])));
}

static herd_status act_bn_apply_train(int n, int c, int hw, const uint16_t *x, const float *gamma,
                                      const float *beta, const double *sum, const double *sqdev,
                                      int64_t count, uint16_t *y, float *save_mean,
                                      float *save_invstd, float *running_mean, float *running_var,
                                      float momentum, float eps)
{
    HERD_TRY(check("bn_apply_train", n, c, hw, &count));
    HERD_CHECK_ARRAYS("bf16 bn_apply_train", 1, x, gamma, beta, sum, sqdev, y, save_mean,
                      save_invstd, running_mean, running_var);
    for (int ch = 0; ch < c; ch++) { /* as ch_apply in cpu_bn.c */
        save_mean[ch] = (float)(sum[ch] / (double)count);
        save_invstd[ch] = (float)(1.0 / sqrt(sqdev[ch] / (double)count + (double)eps));
        double unbiased = sqdev[ch] / (double)(count - 1);
        running_mean[ch] = (1.0f - momentum) * running_mean[ch] + momentum * save_mean[ch];
        running_var[ch] = (1.0f - momentum) * running_var[ch] + momentum * (float)unbiased;
    }
    HERD_CPU_FOR(PAR, size_t, k, BLOCKS,
        float scale[L], shift[L];
        for (int l = 0, ch = CH0(k); l < L; l++, ch++) {
            scale[l] = gamma[ch] * save_invstd[ch];
            shift[l] = beta[ch] - save_mean[ch] * scale[l];
        }
        block_affine(BLK(x, k), BLK(y, k), hw, scale, shift);
    );
    return HERD_OK;
}

static herd_status act_bn_fwd_infer(int n, int c, int hw, const uint16_t *x, const float *gamma,
                                    const float *beta, uint16_t *y, const float *running_mean,
                                    const float *running_var, float eps)
{
    HERD_TRY(check("bn_fwd_infer", n, c, hw, NULL));
    HERD_CHECK_ARRAYS("bf16 bn_fwd_infer", 1, x, gamma, beta, y, running_mean, running_var);
    HERD_CPU_FOR(PAR, size_t, k, BLOCKS,
        float scale[L], shift[L];
        for (int l = 0, ch = CH0(k); l < L; l++, ch++) {
            scale[l] = gamma[ch] / sqrtf(running_var[ch] + eps);
            shift[l] = beta[ch] - running_mean[ch] * scale[l];
        }
        block_affine(BLK(x, k), BLK(y, k), hw, scale, shift);
    );
    return HERD_OK;
}

static herd_status act_bn_bwd_reduce(int n, int c, int hw, const uint16_t *x, const uint16_t *dy,
                                     const float *save_mean, const float *save_invstd,
                                     double *sum_dy, double *sum_dy_xc, float *dgamma,
                                     float *dbeta, float beta)
{
    HERD_TRY(check("bn_bwd_reduce", n, c, hw, NULL));
    HERD_CHECK_ARRAYS("bf16 bn_bwd_reduce", 1, x, dy, save_mean, save_invstd, sum_dy, sum_dy_xc,
                      dgamma, dbeta);
    HERD_TRY(herd_check_grad_beta("bf16 bn_bwd_reduce", beta));
    size_t vals = BLOCKS * L;
    double *part = malloc(2 * vals * sizeof *part);
    if (!part)
        return HERD_NOMEM(2 * vals * sizeof *part);
    /* Sums of dy and dy*(x - mean), as ch_bwd_sums. */
    HERD_CPU_FOR(PAR, size_t, k, BLOCKS,
        const uint16_t *xb = BLK(x, k), *dyb = BLK(dy, k);
        lanes mean;
        split(&mean, save_mean + CH0(k));
        double ae[W] = {0}, ao[W] = {0}, be[W] = {0}, bo[W] = {0};
        WORD_LOOP(hw, uint32_t g = ld(dyb + 2 * i); uint32_t v = ld(xb + 2 * i);
                  ae[j] += lo(g); ao[j] += hi(g); be[j] += lo(g) * (lo(v) - mean.e[j]);
                  bo[j] += hi(g) * (hi(v) - mean.o[j]));
        unsplit(ae, ao, part + k * L);
        unsplit(be, bo, part + vals + k * L);
    );
    fold_samples(part, n, c, sum_dy);
    fold_samples(part + vals, n, c, sum_dy_xc);
    free(part);
    for (int ch = 0; ch < c; ch++) { /* this batch's only: see ch_param_grads */
        float dg = (float)(sum_dy_xc[ch] * save_invstd[ch]), db = (float)sum_dy[ch];
        dgamma[ch] = beta == 0.0f ? dg : dgamma[ch] + dg;
        dbeta[ch] = beta == 0.0f ? db : dbeta[ch] + db;
    }
    return HERD_OK;
}

static herd_status act_bn_bwd_apply(int n, int c, int hw, const uint16_t *x, const uint16_t *dy,
                                    const float *gamma, const float *save_mean,
                                    const float *save_invstd, const double *sum_dy,
                                    const double *sum_dy_xc, int64_t count, uint16_t *dx)
{
    HERD_TRY(check("bn_bwd_apply", n, c, hw, &count));
    HERD_CHECK_ARRAYS("bf16 bn_bwd_apply", 1, x, dy, gamma, save_mean, save_invstd, sum_dy,
                      sum_dy_xc, dx);
    /* dx = g*(dy - mean_dy - (x - mean)*proj): ch_dx. */
    HERD_CPU_FOR(PAR, size_t, k, BLOCKS,
        float v[4][L];
        for (int l = 0, ch = CH0(k); l < L; l++, ch++) {
            float invstd = save_invstd[ch];
            v[0][l] = gamma[ch] * invstd;
            v[1][l] = (float)(sum_dy[ch] / (double)count);
            v[2][l] = (float)(sum_dy_xc[ch] / (double)count) * invstd * invstd;
            v[3][l] = save_mean[ch];
        }
        lanes g, mdy, proj, mean;
        split(&g, v[0]), split(&mdy, v[1]), split(&proj, v[2]), split(&mean, v[3]);
        const uint16_t *xb = BLK(x, k), *dyb = BLK(dy, k);
        uint16_t *dxb = BLK(dx, k);
        WORD_LOOP(hw, uint32_t d = ld(dyb + 2 * i); uint32_t u = ld(xb + 2 * i);
                  st(dxb + 2 * i,
                     pack(g.e[j] * (lo(d) - mdy.e[j] - (lo(u) - mean.e[j]) * proj.e[j]),
                          g.o[j] * (hi(d) - mdy.o[j] - (hi(u) - mean.o[j]) * proj.o[j]))));
    );
    return HERD_OK;
}

const herd_bf16_act_ops herd_cpu_bf16_act_ops = {
    .in_use = act_in_use,
    .from_f32 = act_from_f32,
    .to_f32 = act_to_f32,
    .relu_fwd = act_relu_fwd,
    .relu_bwd = act_relu_bwd,
    .add = act_add,
    .accumulate = act_accumulate,
    .copy = act_copy,
    .global_avgpool_fwd = act_global_avgpool_fwd,
    .global_avgpool_bwd = act_global_avgpool_bwd,
    .bn_stats = act_bn_stats,
    .bn_apply_train = act_bn_apply_train,
    .bn_fwd_infer = act_bn_fwd_infer,
    .bn_bwd_reduce = act_bn_bwd_reduce,
    .bn_bwd_apply = act_bn_bwd_apply,
};
