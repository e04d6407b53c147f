/* Max and average pooling over plain NCHW planes, and global average pooling, as
 * herd's own loops. oneDNN 2.6 has no JIT pooling for plain NCHW without AVX-512: its
 * reference kernel took 40% of lenet5's training CPU on an AVX2 machine (perf, 2026-11-27),
 * 0.36 ms per forward of a 6x28x28 batch of 8. The arithmetic is that kernel's: windows
 * read row by row, the first maximum wins, backward adds into the input gradient in
 * output order, so the weights of a run are the same bits as with oneDNN. */
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

struct herd_pool_plan {
    herd_pool_desc d;
    /* Max pooling's argmax of the last training forward: the position inside its window
     * (row * k + column), one byte when a window has at most 256 positions. */
    void *argmax;
    bool wide_argmax;
    bool have_argmax; /* a training forward ran since the plan was made */
};

void herd_cpu_pool_plan_free(herd_pool_plan *p)
{
    if (!p)
        return;
    herd_cpu_free(p->argmax);
    free(p);
}

herd_status herd_cpu_pool_plan(const herd_pool_desc *d, herd_pool_plan **plan)
{
    herd_pool_desc fin;
    HERD_TRY(herd_check_pool_plan(d, plan, &fin));
    herd_pool_plan *p = calloc(1, sizeof *p);
    if (!p)
        return HERD_NOMEM(sizeof *p);
    p->d = fin;
    if (fin.is_max) {
        p->wide_argmax = fin.k * fin.k > 256;
        size_t outputs = (size_t)fin.n * fin.c * fin.h_out * fin.w_out;
        p->argmax = herd_cpu_alloc(outputs * (p->wide_argmax ? sizeof(int32_t) : 1));
        if (!p->argmax) {
            free(p);
            return HERD_ERR_NOMEM; /* the allocator said why */
        }
    }
    *plan = p;
    return HERD_OK;
}

/* The rows and columns of a window that lie inside the input (padding never counts
 * for the maximum and adds zero to the average). */
typedef struct window {
    int h0, w0;         /* the window's top-left corner, in input coordinates */
    int r0, r1, q0, q1; /* its rows [r0, r1) and columns [q0, q1) inside the input */
} window;

static window window_at(const herd_pool_desc *d, int oh, int ow)
{
    window w = {.h0 = oh * d->stride - d->pad, .w0 = ow * d->stride - d->pad};
    w.r0 = w.h0 < 0 ? -w.h0 : 0;
    w.q0 = w.w0 < 0 ? -w.w0 : 0;
    w.r1 = w.h0 + d->k > d->h_in ? d->h_in - w.h0 : d->k;
    w.q1 = w.w0 + d->k > d->w_in ? d->w_in - w.w0 : d->k;
    return w;
}

static void max_plane(const herd_pool_desc *d, const float *x, float *y, uint8_t *arg8,
                      int32_t *arg32)
{
    int k = d->k;
    for (int oh = 0; oh < d->h_out; oh++)
        for (int ow = 0; ow < d->w_out; ow++) {
            window w = window_at(d, oh, ow);
            /* oneDNN's start: the lowest float, replaced by any greater value */
            float best = -FLT_MAX;
            int at = w.r0 * k + w.q0;
            for (int r = w.r0; r < w.r1; r++) {
                const float *row = x + (size_t)(w.h0 + r) * d->w_in + w.w0;
                for (int q = w.q0; q < w.q1; q++)
                    if (row[q] > best)
                        best = row[q], at = r * k + q;
            }
            size_t o = (size_t)oh * d->w_out + ow;
            y[o] = best;
            if (arg32)
                arg32[o] = at;
            else if (arg8)
                arg8[o] = (uint8_t)at;
        }
}

/* 2x2 windows at stride 2 without padding (lenet5's and most CNNs' pooling): the same
 * comparisons in the same order as max_plane, without its window arithmetic per output
 * or a branch on which input wins: 3-4x faster on lenet5's planes, forward and backward
 * (bench/results/2026-12-05-suite-waits.txt). */
static inline float max_of_window(float a, float b, float c, float e, uint8_t *at)
{
    /* Selects, not branches: which input wins is data, which branch predictors miss. */
    float best = a > -FLT_MAX ? a : -FLT_MAX;
    uint8_t where = 0;
    bool t = b > best;
    where = t ? 1 : where, best = t ? b : best;
    t = c > best;
    where = t ? 2 : where, best = t ? c : best;
    t = e > best;
    where = t ? 3 : where, best = t ? e : best;
    *at = where;
    return best;
}

static bool is_2x2_stride_2(const herd_pool_desc *d)
{
    return d->is_max && d->k == 2 && d->stride == 2 && d->pad == 0;
}

static void max_plane_2x2(const herd_pool_desc *d, const float *x, float *y, uint8_t *arg8)
{
    for (int oh = 0; oh < d->h_out; oh++) {
        const float *r0 = x + (size_t)2 * oh * d->w_in, *r1 = r0 + d->w_in;
        float *yo = y + (size_t)oh * d->w_out;
        uint8_t *ao = arg8 ? arg8 + (size_t)oh * d->w_out : NULL;
        _Pragma("omp simd")
        for (int ow = 0; ow < d->w_out; ow++) {
            uint8_t at;
            yo[ow] = max_of_window(r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1], &at);
            if (ao)
                ao[ow] = at;
        }
    }
}

/* Backward of max_plane_2x2: windows do not overlap, so each input gets its window's
 * gradient or zero, written once. 0.0f + g keeps the generic path's bits (a zeroed
 * buffer plus g: -0 becomes +0). Rows and columns no window covers get zero. */
static void max_plane_2x2_bwd(const herd_pool_desc *d, const float *gy, const uint8_t *arg8, float *g)
{
    for (int oh = 0; oh < d->h_out; oh++) {
        float *g0 = g + (size_t)2 * oh * d->w_in, *g1 = g0 + d->w_in;
        const float *go = gy + (size_t)oh * d->w_out;
        const uint8_t *ao = arg8 + (size_t)oh * d->w_out;
        _Pragma("omp simd")
        for (int ow = 0; ow < d->w_out; ow++) {
            float v = 0.0f + go[ow];
            int at = ao[ow];
            g0[2 * ow] = at == 0 ? v : 0.0f;
            g0[2 * ow + 1] = at == 1 ? v : 0.0f;
            g1[2 * ow] = at == 2 ? v : 0.0f;
            g1[2 * ow + 1] = at == 3 ? v : 0.0f;
        }
        for (int w = 2 * d->w_out; w < d->w_in; w++)
            g0[w] = g1[w] = 0.0f;
    }
    if (2 * d->h_out < d->h_in)
        memset(g + (size_t)2 * d->h_out * d->w_in, 0,
               (size_t)(d->h_in - 2 * d->h_out) * d->w_in * sizeof *g);
}

static void avg_plane(const herd_pool_desc *d, const float *x, float *y)
{
    float count = (float)(d->k * d->k); /* padding included, as PyTorch's default */
    for (int oh = 0; oh < d->h_out; oh++)
        for (int ow = 0; ow < d->w_out; ow++) {
            window w = window_at(d, oh, ow);
            float sum = 0.0f;
            for (int r = w.r0; r < w.r1; r++) {
                const float *row = x + (size_t)(w.h0 + r) * d->w_in + w.w0;
                for (int q = w.q0; q < w.q1; q++)
                    sum += row[q];
            }
            y[(size_t)oh * d->w_out + ow] = sum / count;
        }
}

herd_status herd_cpu_pool_fwd(herd_pool_plan *p, const float *x, float *y, bool training)
{
    HERD_TRY(herd_check_pool_fwd(p, x, y));
    const herd_pool_desc *d = &p->d;
    size_t planes = (size_t)d->n * d->c, in = (size_t)d->h_in * d->w_in;
    size_t out = (size_t)d->h_out * d->w_out;
    /* An evaluation pass keeps no argmax: backward is refused until the next training
     * forward, as it would be against a stale one. */
    bool keep = d->is_max && training;
    uint8_t *arg8 = keep && !p->wide_argmax ? p->argmax : NULL;
    int32_t *arg32 = keep && p->wide_argmax ? p->argmax : NULL;
    bool two_by_two = is_2x2_stride_2(d);
    HERD_CPU_FOR(herd_cpu_par(planes * in), size_t, i, planes,
        if (two_by_two)
            max_plane_2x2(d, x + i * in, y + i * out, arg8 ? arg8 + i * out : NULL);
        else if (d->is_max)
            max_plane(d, x + i * in, y + i * out, arg8 ? arg8 + i * out : NULL,
                      arg32 ? arg32 + i * out : NULL);
        else
            avg_plane(d, x + i * in, y + i * out);
    );
    p->have_argmax = keep;
    return HERD_OK;
}

herd_status herd_cpu_pool_bwd(herd_pool_plan *p, const float *dy, float *dx)
{
    HERD_TRY(herd_check_pool_bwd(p, dy, dx, p && p->have_argmax));
    const herd_pool_desc *d = &p->d;
    size_t planes = (size_t)d->n * d->c, in = (size_t)d->h_in * d->w_in;
    size_t out = (size_t)d->h_out * d->w_out;
    const uint8_t *arg8 = p->wide_argmax ? NULL : p->argmax;
    const int32_t *arg32 = p->wide_argmax ? p->argmax : NULL;
    float count = (float)(d->k * d->k);
    bool two_by_two = is_2x2_stride_2(d);
    HERD_CPU_FOR(herd_cpu_par(planes * in), size_t, i, planes,
        float *g = dx + i * in;
        const float *gy = dy + i * out;
        if (two_by_two) {
            max_plane_2x2_bwd(d, gy, arg8 + i * out, g);
            continue;
        }
        memset(g, 0, in * sizeof *g);
        /* In output order: where windows overlap, each input's sum is the same sequence
         * of additions on every run. */
        for (int oh = 0; oh < d->h_out; oh++)
            for (int ow = 0; ow < d->w_out; ow++) {
                size_t o = (size_t)oh * d->w_out + ow;
                window w = window_at(d, oh, ow);
                if (d->is_max) {
                    int at = arg32 ? arg32[i * out + o] : arg8[i * out + o];
                    g[(size_t)(w.h0 + at / d->k) * d->w_in + w.w0 + at % d->k] += gy[o];
                    continue;
                }
                float share = gy[o] / count;
                for (int r = w.r0; r < w.r1; r++)
                    for (int q = w.q0; q < w.q1; q++)
                        g[(size_t)(w.h0 + r) * d->w_in + w.w0 + q] += share;
            }
    );
    return HERD_OK;
}

herd_status herd_cpu_global_avgpool_fwd(int n, int c, int hw, const float *x, float *y)
{
    HERD_TRY(herd_check_global_avgpool("global_avgpool_fwd", n, c, hw, x, y));
    size_t rows = (size_t)n * c;
    float inv = 1.0f / (float)hw;
    HERD_CPU_FOR(herd_cpu_par(rows * hw), size_t, r, rows,
        const float *xr = x + r * hw;
        double s = 0.0; /* see row_sum in cpu_bn.c */
        _Pragma("omp simd reduction(+ : s)")
        for (int i = 0; i < hw; i++)
            s += xr[i];
        y[r] = s * inv;
    );
    return HERD_OK;
}

herd_status herd_cpu_global_avgpool_bwd(int n, int c, int hw, const float *dy, float *dx)
{
    HERD_TRY(herd_check_global_avgpool("global_avgpool_bwd", n, c, hw, dy, dx));
    size_t rows = (size_t)n * c;
    float inv = 1.0f / (float)hw;
    HERD_CPU_FOR(herd_cpu_par(rows * hw), size_t, r, rows,
        float g = dy[r] * inv;
        float *dxr = dx + r * hw;
        for (int i = 0; i < hw; i++)
            dxr[i] = g;
    );
    return HERD_OK;
}
