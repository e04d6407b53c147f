/* --deterministic's linear layer on the CPU (backend.h's exact_linear_*): every output is
 * one fixed sequence of fp32 operations, so a row's result does not depend on how many
 * rows a call holds, on the blocking or on the threads, and a slice's weight gradient is
 * the same whether its slice came alone or with the others of a micro-batch. That lets a
 * model of linear layers run a whole micro-batch at once and add each slice's gradient to
 * the exact sums while it is still in registers (docs/determinism.md), where oneDNN's
 * GEMMs, whose blocking follows the shapes, made each slice run alone and its gradient
 * pass through memory. The AVX-512 kernels and the portable loops compute the same
 * sequences (tests/test_exact_linear.c compares their bits). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

#if defined(__AVX512F__) && defined(__AVX512DQ__)
#include <immintrin.h>
#define EXACT_AVX512 1
#endif

static bool generic_only;
void herd_cpu_exact_force_generic(bool on) { generic_only = on; }

enum { CHAINS = 16 };

/* The forward's fixed tree over its 16 chains. */
static float tree16(const float p[CHAINS])
{
    float p1[8], p2[4], p3[2];
    for (int l = 0; l < 8; l++)
        p1[l] = p[l] + p[l + 8];
    for (int l = 0; l < 4; l++)
        p2[l] = p1[l] + p1[l + 4];
    for (int l = 0; l < 2; l++)
        p3[l] = p2[l] + p2[l + 2];
    return p3[0] + p3[1];
}

static uint32_t abs_bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u & 0x7fffffffu;
}

/* One value of a slice into its tensor's side (herd_exact_grad_out). */
static void emit(herd_exact_grad_out *o, size_t at, float v)
{
    uint32_t a = abs_bits(v);
    o->max_bits = a > o->max_bits ? a : o->max_bits;
    if (o->plain)
        o->plain[at] = v;
    else if (o->grid)
        o->sums[at] += rint((double)v * o->scale); /* a power of two: exact */
}

static void fwd_generic(int rows, int in, int out, const float *x, const float *w,
                        const float *b, float *y)
{
    int chunks = (in + CHAINS - 1) / CHAINS;
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < out; o++) {
            float p[CHAINS] = {0};
            for (int c = 0; c < chunks; c++)
                for (int l = 0; l < CHAINS; l++) {
                    int k = c * CHAINS + l; /* past the end: zeros, as a masked load gives */
                    float xv = k < in ? x[(size_t)r * in + k] : 0.0f;
                    float wv = k < in ? w[(size_t)o * in + k] : 0.0f;
                    p[l] = fmaf(xv, wv, p[l]);
                }
            float s = tree16(p);
            y[(size_t)r * out + o] = b ? s + b[o] : s;
        }
}

static void bwd_data_generic(int rows, int in, int out, const float *dy, const float *w,
                             float *dx)
{
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < in; k++) {
            float acc = 0.0f;
            for (int o = 0; o < out; o++)
                acc = fmaf(dy[(size_t)r * out + o], w[(size_t)o * in + k], acc);
            dx[(size_t)r * in + k] = acc;
        }
}

/* A fresh call's sums start at zero (the kernels below store where these loops add). */
static void clear_fresh(const herd_exact_wgrad *j)
{
    if (!j->fresh)
        return;
    if (j->w.grid && !j->w.plain)
        memset(j->w.sums, 0, (size_t)j->out * j->in * sizeof *j->w.sums);
    if (j->b.grid && !j->b.plain && j->b.sums)
        memset(j->b.sums, 0, (size_t)j->out * sizeof *j->b.sums);
}

static void wgrad_generic(herd_exact_wgrad *j)
{
    clear_fresh(j);
    for (int s0 = 0; s0 < j->rows; s0 += j->slice) {
        const float *dy = j->dy + (size_t)s0 * j->out, *x = j->x + (size_t)s0 * j->in;
        for (int o = 0; o < j->out; o++) {
            for (int i = 0; i < j->in; i++) {
                float v = 0.0f;
                for (int r = 0; r < j->slice; r++)
                    v = fmaf(dy[(size_t)r * j->out + o], x[(size_t)r * j->in + i], v);
                emit(&j->w, (size_t)o * j->in + i, v);
            }
            if (j->b.plain || j->b.sums) {
                float v = 0.0f;
                for (int r = 0; r < j->slice; r++)
                    v = v + dy[(size_t)r * j->out + o];
                emit(&j->b, (size_t)o, v);
            }
        }
    }
}

#ifdef EXACT_AVX512
static __mmask16 tail16(int n)
{
    return n >= 16 ? 0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* 16 accumulators into one vector whose lane q is accumulator q's tree16. */
static __m512 reduce16(const __m512 v[16])
{
    __m512 t[8], u[4], w[2];
    for (int i = 0; i < 8; i++) /* lanes l and l + 8 */
        t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 4; i++) /* l and l + 4 */
        u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int i = 0; i < 2; i++) /* l and l + 2 */
        w[i] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 z = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* z's lane 4i + j holds accumulator i + 4j. */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, z);
}

/* y for rows r0.. (up to 4) and outputs o0.. (up to 4). */
static void fwd_tile(int in, int out, int nr, int no, const float *x, const float *w,
                     const float *b, float *y)
{
    const float *xr[4], *wr[4];
    for (int i = 0; i < 4; i++) { /* missing rows and outputs repeat the last: not stored */
        xr[i] = x + (size_t)(i < nr ? i : nr - 1) * in;
        wr[i] = w + (size_t)(i < no ? i : no - 1) * in;
    }
    /* Named accumulators: GCC keeps an array of them on the stack. Accumulator 4r + c is
     * row r's dot product with output c. */
    __m512 a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15;
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = a8 = a9 = a10 = a11 = a12 = a13 = a14 = a15 =
        _mm512_setzero_ps();
    for (int k = 0; k < in; k += 16) {
        __mmask16 m = tail16(in - k);
        __m512 x0 = _mm512_maskz_loadu_ps(m, xr[0] + k), x1 = _mm512_maskz_loadu_ps(m, xr[1] + k);
        __m512 x2 = _mm512_maskz_loadu_ps(m, xr[2] + k), x3 = _mm512_maskz_loadu_ps(m, xr[3] + k);
        __m512 w0 = _mm512_maskz_loadu_ps(m, wr[0] + k), w1 = _mm512_maskz_loadu_ps(m, wr[1] + k);
        __m512 w2 = _mm512_maskz_loadu_ps(m, wr[2] + k), w3 = _mm512_maskz_loadu_ps(m, wr[3] + k);
        a0 = _mm512_fmadd_ps(x0, w0, a0), a1 = _mm512_fmadd_ps(x0, w1, a1);
        a2 = _mm512_fmadd_ps(x0, w2, a2), a3 = _mm512_fmadd_ps(x0, w3, a3);
        a4 = _mm512_fmadd_ps(x1, w0, a4), a5 = _mm512_fmadd_ps(x1, w1, a5);
        a6 = _mm512_fmadd_ps(x1, w2, a6), a7 = _mm512_fmadd_ps(x1, w3, a7);
        a8 = _mm512_fmadd_ps(x2, w0, a8), a9 = _mm512_fmadd_ps(x2, w1, a9);
        a10 = _mm512_fmadd_ps(x2, w2, a10), a11 = _mm512_fmadd_ps(x2, w3, a11);
        a12 = _mm512_fmadd_ps(x3, w0, a12), a13 = _mm512_fmadd_ps(x3, w1, a13);
        a14 = _mm512_fmadd_ps(x3, w2, a14), a15 = _mm512_fmadd_ps(x3, w3, a15);
    }
    const __m512 done[16] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15};
    __m512 sums = reduce16(done);
    if (nr == 4 && no == 4) { /* row r's four outputs are the sums' 128-bit lane r */
        __m128 bias = b ? _mm_loadu_ps(b) : _mm_setzero_ps();
        __m128 rows[4] = {_mm512_extractf32x4_ps(sums, 0), _mm512_extractf32x4_ps(sums, 1),
                          _mm512_extractf32x4_ps(sums, 2), _mm512_extractf32x4_ps(sums, 3)};
        for (int r = 0; r < 4; r++)
            _mm_storeu_ps(y + (size_t)r * out, b ? _mm_add_ps(rows[r], bias) : rows[r]);
        return;
    }
    float s[16];
    _mm512_storeu_ps(s, sums);
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < no; c++)
            y[(size_t)r * out + c] = b ? s[4 * r + c] + b[c] : s[4 * r + c];
}

static void fwd_avx512(int rows, int in, int out, const float *x, const float *w, const float *b,
                       float *y)
{
    /* Outputs in blocks whose weights stay in the caches while every row passes. */
    enum { OB = 32 };
    int oblocks = (out + OB - 1) / OB, rblocks = (rows + 3) / 4;
    HERD_CPU_FOR(herd_cpu_par((size_t)rows * out * in), int, t, oblocks * rblocks,
        int ob = t / rblocks, r0 = (t % rblocks) * 4, nr = rows - r0 < 4 ? rows - r0 : 4;
        for (int o0 = ob * OB; o0 < out && o0 < (ob + 1) * OB; o0 += 4)
            fwd_tile(in, out, nr, out - o0 < 4 ? out - o0 : 4, x + (size_t)r0 * in,
                     w + (size_t)o0 * in, b ? b + o0 : NULL, y + (size_t)r0 * out + o0);
    );
}

/* dx for up to MR rows and 32 columns from k0: one chain over the outputs. */
enum { MR = 12 };
static inline __attribute__((always_inline)) void bwd_tile(int nr, int in, int out, int k0,
                                                           const float *dy, const float *w,
                                                           float *dx)
{
    __m512 acc[MR][2];
    for (int r = 0; r < MR; r++)
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    __mmask16 m0 = tail16(in - k0), m1 = tail16(in - k0 - 16);
    for (int o = 0; o < out; o++) {
        const float *wo = w + (size_t)o * in + k0;
        __m512 b0 = _mm512_maskz_loadu_ps(m0, wo), b1 = _mm512_maskz_loadu_ps(m1, wo + 16);
        for (int r = 0; r < nr; r++) {
            __m512 d = _mm512_set1_ps(dy[(size_t)r * out + o]);
            acc[r][0] = _mm512_fmadd_ps(d, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(d, b1, acc[r][1]);
        }
    }
    for (int r = 0; r < nr; r++) {
        _mm512_mask_storeu_ps(dx + (size_t)r * in + k0, m0, acc[r][0]);
        _mm512_mask_storeu_ps(dx + (size_t)r * in + k0 + 16, m1, acc[r][1]);
    }
}

static void bwd_data_avx512(int rows, int in, int out, const float *dy, const float *w, float *dx)
{
    int kblocks = (in + 31) / 32, rblocks = (rows + MR - 1) / MR;
    HERD_CPU_FOR(herd_cpu_par((size_t)rows * out * in), int, t, kblocks * rblocks,
        int k0 = (t / rblocks) * 32, r0 = (t % rblocks) * MR;
        const float *d = dy + (size_t)r0 * out;
        float *o = dx + (size_t)r0 * in;
        int nr = rows - r0 < MR ? rows - r0 : MR;
        if (nr == MR) /* constant counts: the loops unroll, the accumulators stay in registers */
            bwd_tile(MR, in, out, k0, d, w, o);
        else if (nr == 8)
            bwd_tile(8, in, out, k0, d, w, o);
        else if (nr == 4)
            bwd_tile(4, in, out, k0, d, w, o);
        else
            bwd_tile(nr, in, out, k0, d, w, o);
    );
}

/* Where a slice's 16 values go: into plain, or rounded to the grid into the int64 lanes
 * lo (values 0-7) and hi (8-15); the largest |value| into *mx either way. */
typedef enum { MODE_PLAIN, MODE_MAX, MODE_SUMS } out_mode;

static inline __attribute__((always_inline)) void take16(out_mode mode, __m512 v, __mmask16 m,
                                                         float *plain, __m512 scale,
                                                         __m512i *lo, __m512i *hi, __m512i *mx)
{
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    /* Masked lanes hold zeros: they add nothing. */
    *mx = _mm512_max_epu32(*mx, _mm512_and_si512(_mm512_castps_si512(v), abs_mask));
    if (mode == MODE_PLAIN) {
        _mm512_mask_storeu_ps(plain, m, v);
    } else if (mode == MODE_SUMS) {
        /* v * scale is exact in fp32 (scale is a normal power of two: see exact_scale_ok),
         * then rounded to nearest even as rint does. */
        __m512 q = _mm512_mul_ps(v, scale);
        __m256 q_hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(q), 1));
        *lo = _mm512_add_epi64(*lo, _mm512_cvt_roundps_epi64(_mm512_castps512_ps256(q),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        *hi = _mm512_add_epi64(*hi, _mm512_cvt_roundps_epi64(q_hi,
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
}

/* The int64 lanes into the double sums (exact: below 2^53 by the headroom), or (fresh)
 * as the sums: whole aligned lines then bypass the caches (a fresh call writes every
 * sum, megabytes that a normal store would first read in: mlp's first layer's weight
 * gradient took 1.7x as long); the kernel fences them before it returns. */
static void flush8(double *sums, int n, __m512i v, bool fresh)
{
    if (n <= 0)
        return;
    __mmask8 m = n >= 8 ? 0xff : (__mmask8)((1u << n) - 1);
    __m512d add = _mm512_cvtepi64_pd(v);
    if (fresh && n >= 8 && ((uintptr_t)sums & 63) == 0)
        _mm512_stream_pd(sums, add);
    else
        _mm512_mask_storeu_pd(sums, m, fresh ? add : _mm512_add_pd(_mm512_maskz_loadu_pd(m, sums), add));
}

/* The weight gradient of WR outputs from o0 and 32 inputs from i0 over every slice
 * (the job's fields copied to locals: the stores would make the compiler read them again). */
enum { WR = 4 };
static inline __attribute__((always_inline)) void wgrad_tile(const herd_exact_wgrad *j,
                                                             out_mode mode, int wr, int o0,
                                                             int i0, __m512i *mx)
{
    const int in = j->in, out = j->out, rows = j->rows, slice = j->slice;
    float *const plain = j->w.plain;
    double *const sums_at = j->w.sums;
    __mmask16 m0 = tail16(in - i0), m1 = tail16(in - i0 - 16);
    const __m512 scale = _mm512_set1_ps((float)j->w.scale);
    __m512i sums[WR][4];
    for (int r = 0; r < WR; r++)
        for (int h = 0; h < 4; h++)
            sums[r][h] = _mm512_setzero_si512();
    __m512i top = *mx;
    const float *xp = j->x + i0, *dp = j->dy + o0;
    for (int s0 = 0; s0 < rows; s0 += slice) {
        __m512 f[WR][2];
        for (int r = 0; r < WR; r++)
            f[r][0] = f[r][1] = _mm512_setzero_ps();
        for (int k = 0; k < slice; k++, xp += in, dp += out) {
            __m512 b0 = _mm512_maskz_loadu_ps(m0, xp), b1 = _mm512_maskz_loadu_ps(m1, xp + 16);
            for (int r = 0; r < wr; r++) {
                __m512 d = _mm512_set1_ps(dp[r]);
                f[r][0] = _mm512_fmadd_ps(d, b0, f[r][0]);
                f[r][1] = _mm512_fmadd_ps(d, b1, f[r][1]);
            }
        }
        for (int r = 0; r < wr; r++) {
            float *row = plain ? plain + (size_t)(o0 + r) * in + i0 : NULL;
            take16(mode, f[r][0], m0, row, scale, &sums[r][0], &sums[r][1], &top);
            take16(mode, f[r][1], m1, row ? row + 16 : NULL, scale, &sums[r][2], &sums[r][3],
                   &top);
        }
    }
    *mx = top;
    if (mode != MODE_SUMS)
        return;
    for (int r = 0; r < wr; r++)
        for (int h = 0; h < 4; h++)
            flush8(sums_at + (size_t)(o0 + r) * in + i0 + 8 * h, in - i0 - 8 * h, sums[r][h],
                   j->fresh);
}

static void wgrad_rows(const herd_exact_wgrad *j, out_mode mode, uint32_t *max_bits)
{
    int iblocks = (j->in + 31) / 32, oblocks = (j->out + WR - 1) / WR;
    /* Few rows (x and dy stay in L1 whatever the order): along each output's inputs, so
     * the sums pass as four streams; many: down the outputs, so x's 32 columns stay. */
    bool along = (size_t)j->rows * (size_t)(j->in + j->out) * sizeof(float) <= 64 * 1024;
    uint32_t mx_all = 0;
#pragma omp parallel reduction(max : mx_all) if (herd_cpu_par((size_t)j->rows * j->in * j->out))
    {
#pragma omp for schedule(static) nowait
    for (int t = 0; t < iblocks * oblocks; t++) {
        int i0 = (along ? t % iblocks : t / oblocks) * 32;
        int o0 = (along ? t / iblocks : t % oblocks) * WR;
        __m512i mx = _mm512_setzero_si512();
        if (j->out - o0 >= WR) { /* a constant count: the loops unroll */
            if (mode == MODE_SUMS)
                wgrad_tile(j, MODE_SUMS, WR, o0, i0, &mx);
            else
                wgrad_tile(j, mode, WR, o0, i0, &mx);
        } else {
            wgrad_tile(j, mode, j->out - o0, o0, i0, &mx);
        }
        uint32_t m = _mm512_reduce_max_epu32(mx);
        mx_all = m > mx_all ? m : mx_all;
    }
    _mm_sfence(); /* this thread's streamed sums, before the region's end publishes them */
    }
    *max_bits = mx_all > *max_bits ? mx_all : *max_bits;
}

/* Rows in chunks of whole slices, about 256 (the most a whole pass gives a call): each
 * chunk reads and writes every sum once, which in training (sums out of the caches)
 * costs more than a tile's 32 columns of x leaving L1 (mlp at micro-batches of 32, 1
 * rank: 1.2-1.5x the samples/s of chunks of 128; at 512 rows a call, 4% slower alone). */
static void wgrad_weights(const herd_exact_wgrad *j, out_mode mode, uint32_t *max_bits)
{
    int chunk = j->slice >= 256 ? j->slice : 256 / j->slice * j->slice;
    for (int r0 = 0; r0 < j->rows; r0 += chunk) {
        herd_exact_wgrad part = *j;
        part.fresh = j->fresh && r0 == 0;
        part.rows = j->rows - r0 < chunk ? j->rows - r0 : chunk;
        part.dy = j->dy + (size_t)r0 * j->out;
        part.x = j->x + (size_t)r0 * j->in;
        wgrad_rows(&part, mode, max_bits);
    }
}

/* The bias: each slice's sum of its rows, 16 outputs at a time. */
static void wgrad_bias(herd_exact_wgrad *j, out_mode mode)
{
    __m512 scale = _mm512_set1_ps((float)j->b.scale);
    __m512i mx = _mm512_setzero_si512();
    for (int o0 = 0; o0 < j->out; o0 += 16) {
        __mmask16 m = tail16(j->out - o0);
        __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
        for (int s0 = 0; s0 < j->rows; s0 += j->slice) {
            __m512 v = _mm512_setzero_ps();
            for (int r = s0; r < s0 + j->slice; r++)
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, j->dy + (size_t)r * j->out + o0));
            take16(mode, v, m, j->b.plain ? j->b.plain + o0 : NULL, scale, &lo, &hi, &mx);
        }
        if (mode == MODE_SUMS) {
            flush8(j->b.sums + o0, j->out - o0, lo, j->fresh);
            flush8(j->b.sums + o0 + 8, j->out - o0 - 8, hi, j->fresh);
        }
    }
    uint32_t m = _mm512_reduce_max_epu32(mx);
    j->b.max_bits = m > j->b.max_bits ? m : j->b.max_bits;
}

static out_mode mode_of(const herd_exact_grad_out *o)
{
    return o->plain ? MODE_PLAIN : o->grid ? MODE_SUMS : MODE_MAX;
}

/* Whether scale is a normal float, so that v * scale in fp32 is rint's exact product (or
 * below 2^-126, which rounds to zero either way, or beyond the headroom either way). */
static bool exact_scale_ok(const herd_exact_grad_out *o)
{
    return !o->grid || o->plain || (o->scale >= 0x1p-126 && o->scale <= 0x1p127);
}
#endif

herd_status herd_cpu_exact_linear_fwd(int rows, int in, int out, const float *x, const float *w,
                                      const float *b, float *y)
{
    HERD_CHECK_ARRAYS("exact_linear_fwd", (size_t)rows * in, x, w, y);
    if (rows <= 0 || out <= 0)
        return HERD_OK;
#ifdef EXACT_AVX512
    if (!generic_only && in > 0) {
        fwd_avx512(rows, in, out, x, w, b, y);
        return HERD_OK;
    }
#endif
    fwd_generic(rows, in, out, x, w, b, y);
    return HERD_OK;
}

herd_status herd_cpu_exact_linear_bwd_data(int rows, int in, int out, const float *dy,
                                           const float *w, float *dx)
{
    HERD_CHECK_ARRAYS("exact_linear_bwd_data", (size_t)rows * in, dy, w, dx);
    if (rows <= 0 || in <= 0)
        return HERD_OK;
#ifdef EXACT_AVX512
    if (!generic_only) {
        bwd_data_avx512(rows, in, out, dy, w, dx);
        return HERD_OK;
    }
#endif
    bwd_data_generic(rows, in, out, dy, w, dx);
    return HERD_OK;
}

herd_status herd_cpu_exact_linear_wgrad(herd_exact_wgrad *j)
{
    HERD_CHECK_ARRAYS("exact_linear_wgrad", (size_t)j->rows * j->in, j->dy, j->x);
    if (j->slice <= 0 || j->rows % j->slice != 0 || j->in <= 0 || j->out <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "exact_linear_wgrad: %d rows are not whole slices "
                        "of %d (in %d, out %d)", j->rows, j->slice, j->in, j->out);
    if ((j->w.plain || j->b.plain) && j->slice != j->rows)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "exact_linear_wgrad: plain gradients are one "
                        "slice, not %d rows in slices of %d", j->rows, j->slice);
    if ((!j->w.plain && j->w.grid && !j->w.sums) || (!j->b.plain && j->b.grid && !j->b.sums))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "exact_linear_wgrad: a grid without sums");
#ifdef EXACT_AVX512
    if (!generic_only && exact_scale_ok(&j->w) && exact_scale_ok(&j->b)) {
        wgrad_weights(j, mode_of(&j->w), &j->w.max_bits);
        if (j->b.plain || j->b.sums)
            wgrad_bias(j, mode_of(&j->b));
        _mm_sfence();
        return HERD_OK;
    }
#endif
    wgrad_generic(j);
    return HERD_OK;
}
