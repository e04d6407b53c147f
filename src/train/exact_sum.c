#include "train/exact_sum.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/half.h"
#include "core/par.h"

/* Bits of a slice value below its tensor's largest (fp32 keeps 24). */
#define GRID_BITS 30

/* The sums: the gradients, then the buffers (batch-norm running statistics, each at
 * acc + n_param_floats + its offset). */
static size_t n_sums(const herd_model *m) { return m->n_param_floats + m->n_buffer_floats; }
static double *view_acc(const herd_exact_sum *e, const herd_model *m, const herd_tensor_view *tv)
{
    return e->acc + (tv->is_buffer ? m->n_param_floats : 0) + tv->offset;
}

herd_status herd_exact_sum_init(herd_exact_sum *e, const herd_model *m, int ranks)
{
    memset(e, 0, sizeof *e);
    size_t nv = (size_t)m->n_views, n = n_sums(m);
    e->ranks = ranks;
    /* malloc(0) may return NULL: one value at least. */
    e->acc = aligned_alloc(64, ((n + 1) * sizeof *e->acc + 63) / 64 * 64);
    e->view_max = calloc(nv, sizeof *e->view_max);
    e->all_max = calloc(nv * (size_t)ranks, sizeof *e->all_max);
    e->grid = calloc(nv, sizeof *e->grid);
    e->counts = calloc(3 * (size_t)ranks, sizeof *e->counts);
    e->step_buffers = malloc((m->n_buffer_floats + 1) * sizeof *e->step_buffers);
    /* A device's gradients and buffers are read and written through host copies. */
    if (!m->be->host_memory)
        e->host = malloc((n + 1) * sizeof *e->host);
    if (!e->acc || !e->view_max || !e->all_max || !e->grid || !e->counts || !e->step_buffers ||
        (!m->be->host_memory && !e->host)) {
        herd_exact_sum_free(e);
        return HERD_NOMEM((n + 1) * sizeof(double));
    }
    return HERD_OK;
}

void herd_exact_sum_free(herd_exact_sum *e)
{
    free(e->acc);
    free(e->view_max);
    free(e->all_max);
    free(e->grid);
    free(e->counts);
    free(e->step_buffers);
    free(e->host);
    free(e->group_max);
    memset(e, 0, sizeof *e);
}

herd_status herd_exact_sum_set_tensor_group(herd_exact_sum *e, const herd_model *m, herd_comm *g)
{
    size_t n = (size_t)m->n_views * (size_t)g->size;
    free(e->group_max);
    if (!(e->group_max = calloc(n ? n : 1, sizeof *e->group_max)))
        return HERD_NOMEM(n * sizeof *e->group_max);
    e->tensor_group = g;
    return HERD_OK;
}

void herd_exact_sum_begin(herd_exact_sum *e, const herd_model *m, long slices, bool written_first)
{
    if (!written_first)
        memset(e->acc, 0, n_sums(m) * sizeof *e->acc);
    memset(e->view_max, 0, (size_t)m->n_views * sizeof *e->view_max);
    e->slices = slices;
}

/* The largest integer a slice may add: the sum of all slices stays below 2^53. */
static double slice_bound(const herd_exact_sum *e) { return ldexp(1.0, 53) / (double)e->slices; }

/* x as --compress puts it on the wire (round16), or as it is. */
static float rounded(float x, int round16)
{
    if (round16 == HERD_EXACT_ROUND_FP16)
        return herd_half_to_float(herd_float_to_half(x));
    return round16 == HERD_EXACT_ROUND_BF16 ? herd_bf16_to_float(herd_float_to_bf16(x)) : x;
}

/* The larger of two maxima, NaN if either is (a value that was not finite). */
static float max_or_nan(float a, float b) { return a != a || b != b ? NAN : a > b ? a : b; }

/* A run of one view: acc += g rounded to the grid (when there is one), the largest |g|
 * into *mx, the values not finite counted. A value past the headroom adds nothing: its
 * tensor's maximum says so (the finish redoes the step). Inlined with a constant round16,
 * so the loop vectorises (a runtime rounding and double counters kept it scalar: 3% of
 * make test's CPU). */
static inline void add_run(const float *restrict g, size_t n, bool grid, double scale,
                           double bound, int round16, double *restrict acc, float *mx_out,
                           size_t *bad_out)
{
    size_t bad = 0;
    float mx = 0.0f;
#pragma omp simd reduction(max : mx) reduction(+ : bad)
    for (size_t i = 0; i < n; i++) {
        float v = rounded(g[i], round16), a = fabsf(v);
        mx = a > mx ? a : mx;
        bad += !(a <= 3.402823466e38f);
        if (grid) {
            double q = rint((double)v * scale); /* scale is a power of two: exact */
            acc[i] += fabs(q) <= bound ? q : 0.0; /* false for inf and NaN too */
        }
    }
    *mx_out = mx;
    *bad_out = bad;
}

/* Runs [r0, r1) of RUN values of a view of n: add_run on each, into the maxima and counts. */
enum { RUN = 16384 };
static void add_runs(const float *g, size_t n, size_t r0, size_t r1, bool grid, double scale,
                     double bound, int round16, double *acc, float *mx, size_t *bad)
{
    for (size_t r = r0; r < r1; r++) {
        size_t lo = r * RUN, len = n - lo < RUN ? n - lo : RUN, b;
        float m;
        if (round16 == HERD_EXACT_ROUND_FP16)
            add_run(g + lo, len, grid, scale, bound, HERD_EXACT_ROUND_FP16, acc + lo, &m, &b);
        else if (round16 == HERD_EXACT_ROUND_BF16)
            add_run(g + lo, len, grid, scale, bound, HERD_EXACT_ROUND_BF16, acc + lo, &m, &b);
        else
            add_run(g + lo, len, grid, scale, bound, HERD_EXACT_ROUND_NONE, acc + lo, &m, &b);
        *mx = m > *mx ? m : *mx;
        *bad += b;
    }
}

/* One view of a slice (add_run), inf or NaN anywhere making the maximum NaN, so the step
 * is not finite whatever the grid. Every element is its own sum, and the max and the
 * count have no order, so threads may split the view; a view too small for them stays
 * outside any parallel region (herd_par_team). */
static void add_view(const float *g, size_t n, bool grid, double scale, double bound,
                     int round16, double *acc, float *mx_out)
{
    size_t bad = 0, runs = (n + RUN - 1) / RUN;
    float mx = 0.0f;
    if (!herd_par_team(n, 65536)) {
        add_runs(g, n, 0, runs, grid, scale, bound, round16, acc, &mx, &bad);
    } else {
#pragma omp parallel for reduction(max : mx) reduction(+ : bad)
        for (size_t r = 0; r < runs; r++)
            add_runs(g, n, r, r + 1, grid, scale, bound, round16, acc, &mx, &bad);
    }
    *mx_out = bad > 0 ? NAN : mx;
}

herd_status herd_exact_sum_keep_buffers(herd_exact_sum *e, const herd_model *m)
{
    size_t bytes = m->n_buffer_floats * sizeof *m->buffers;
    if (!m->be->host_memory)
        return bytes ? m->be->memcpy_d2h(e->step_buffers, m->buffers, bytes) : HERD_OK;
    memcpy(e->step_buffers, m->buffers, bytes);
    return HERD_OK;
}

herd_status herd_exact_sum_restore_buffers(const herd_exact_sum *e, herd_model *m)
{
    size_t bytes = m->n_buffer_floats * sizeof *m->buffers;
    if (!m->be->host_memory)
        return bytes ? m->be->memcpy_h2d(m->buffers, e->step_buffers, bytes) : HERD_OK;
    memcpy(m->buffers, e->step_buffers, bytes);
    return HERD_OK;
}

/* Where view tv's values are in host memory: the model's own, or (a device's) the host
 * copy at the same place as in the sums. */
static float *host_at(const herd_exact_sum *e, const herd_model *m, const herd_tensor_view *tv)
{
    if (m->be->host_memory)
        return (tv->is_buffer ? m->buffers : m->grads) + tv->offset;
    return e->host + (tv->is_buffer ? m->n_param_floats : 0) + tv->offset;
}

/* The same, read back from the device now. */
static herd_status host_values(herd_exact_sum *e, const herd_model *m, const herd_tensor_view *tv,
                               const float **out)
{
    float *host = host_at(e, m, tv);
    *out = host;
    if (m->be->host_memory)
        return HERD_OK;
    const float *dev = (tv->is_buffer ? m->buffers : m->grads) + tv->offset;
    return m->be->memcpy_d2h(host, dev, tv->numel * sizeof(float));
}

/* Views first..first+count-1 of one kind (gradients, or buffers) into the sums: the
 * model's own, or from src (host memory laid out as the model's, NULL: the model's). */
static herd_status add_views_from(herd_exact_sum *e, const herd_model *m, bool buffers, int first,
                                  int count, const float *src)
{
    const double bound = slice_bound(e);
    for (int v = first; v < first + count; v++) {
        const herd_tensor_view *tv = &m->views[v];
        if (tv->is_buffer != buffers)
            continue;
        const float *x = src ? src + tv->offset : NULL;
        if (!src)
            HERD_TRY(host_values(e, m, tv, &x));
        /* Buffers are not gradients: --compress does not round them. */
        int round16 = tv->is_buffer ? HERD_EXACT_ROUND_NONE : (int)e->round16;
        float mx, was = e->view_max[v];
        add_view(x, tv->numel, e->have_grid, ldexp(1.0, -e->grid[v]), bound, round16,
                 view_acc(e, m, tv), &mx);
        e->view_max[v] = max_or_nan(was, mx);
    }
    return HERD_OK;
}

static herd_status add_views(herd_exact_sum *e, const herd_model *m, bool buffers, int first,
                             int count)
{
    return add_views_from(e, m, buffers, first, count, NULL);
}

herd_status herd_exact_sum_add_grad_views(herd_exact_sum *e, const herd_model *m, int first,
                                          int count, const float *grads)
{
    return add_views_from(e, m, false, first, count, grads == m->grads ? NULL : grads);
}

herd_status herd_exact_sum_add_grads(herd_exact_sum *e, const herd_model *m)
{
    return add_views(e, m, false, 0, m->n_views);
}

herd_status herd_exact_sum_add_buffers(herd_exact_sum *e, const herd_model *m)
{
    return e->buffers_synced ? HERD_OK : add_views(e, m, true, 0, m->n_views);
}

herd_status herd_exact_sum_add(herd_exact_sum *e, const herd_model *m)
{
    HERD_TRY(herd_exact_sum_add_grads(e, m));
    return herd_exact_sum_add_buffers(e, m);
}

herd_status herd_exact_sum_add_host(herd_exact_sum *e, const herd_model *m, const float *grads,
                                    const float *buffers)
{
    HERD_TRY(add_views_from(e, m, false, 0, m->n_views, grads));
    return e->buffers_synced ? HERD_OK : add_views_from(e, m, true, 0, m->n_views, buffers);
}

void herd_exact_sum_take_max(herd_exact_sum *e, const herd_model *m, const uint32_t *max_bits)
{
    for (int v = 0; v < m->n_views; v++) {
        if (m->views[v].is_buffer)
            continue;
        float mx = NAN, was = e->view_max[v];
        if (max_bits[v] < 0x7f800000u)
            memcpy(&mx, &max_bits[v], sizeof mx);
        e->view_max[v] = max_or_nan(was, mx);
    }
}

/* E for a tensor whose largest slice value is mx: mx lands just below 2^GRID_BITS. */
static int grid_for(float mx, int previous)
{
    if (!(mx > 0.0f) || !isfinite(mx))
        return previous; /* all zero (any grid is exact), or not finite (the step fails) */
    return ilogbf(mx) + 1 - GRID_BITS;
}

/* Every rank's per-view maxima, combined exactly (a max has no order). */
static herd_status gather_max(herd_exact_sum *e, const herd_model *m, herd_comm *c)
{
    size_t nv = (size_t)m->n_views;
    if (c->size > 1)
        HERD_TRY(c->ops->allgather(c, e->view_max, e->all_max, nv * sizeof(float)));
    else
        memcpy(e->all_max, e->view_max, nv * sizeof(float));
    for (int r = 1; r < c->size; r++)
        for (size_t v = 0; v < nv; v++) {
            float x = e->all_max[(size_t)r * nv + v];
            if (x > e->all_max[v] || x != x)
                e->all_max[v] = x;
        }
    return HERD_OK;
}

/* The tensor parts' maxima (after the ranks'): a split tensor's becomes the whole
 * tensor's, a whole one's is the same on every part already. */
static herd_status tensor_group_max(herd_exact_sum *e, const herd_model *m)
{
    herd_comm *g = e->tensor_group ? herd_comm_host_side(e->tensor_group) : NULL;
    if (!g || g->size < 2)
        return HERD_OK;
    size_t nv = (size_t)m->n_views;
    HERD_TRY(g->ops->allgather(g, e->all_max, e->group_max, nv * sizeof(float)));
    for (int t = 0; t < g->size; t++)
        for (size_t v = 0; v < nv; v++)
            e->all_max[v] = max_or_nan(e->all_max[v], e->group_max[(size_t)t * nv + v]);
    return HERD_OK;
}

static void set_grids(herd_exact_sum *e, const herd_model *m)
{
    for (int v = 0; v < m->n_views; v++)
        e->grid[v] = grid_for(e->all_max[v], e->grid[v]);
    e->have_grid = true;
}

/* Whether a value of this step left the headroom of its tensor's grid on some rank:
 * rint is monotone, so the largest is the first to (a NaN maximum counts too). */
static bool past_headroom(const herd_exact_sum *e, const herd_model *m)
{
    const double bound = slice_bound(e);
    bool past = false;
    for (int v = 0; v < m->n_views && e->have_grid; v++)
        past = past || !(fabs(rint((double)e->all_max[v] * ldexp(1.0, -e->grid[v]))) <= bound);
    return past;
}

/* The means of the sums [lo, hi) into grads and buffers (host memory laid out as the
 * model's): integer × 2^E is exact, and the one division by the slices rounds the same
 * wherever it is done. A buffer's mean over the slices is the running statistic updated
 * once with the slices' mean statistic (not with --sync-bn: the same bytes on every rank
 * already); a view whose maximum is not finite becomes that maximum, so that the step's
 * usual checks (divergence, loss scaling) see it. */
static void means_of_part(const herd_exact_sum *e, const herd_model *m, size_t lo, size_t hi,
                          float *grads, float *buffers)
{
    const double slices = (double)e->slices;
    for (int v = 0; v < m->n_views; v++) {
        const herd_tensor_view *tv = &m->views[v];
        if (tv->is_buffer && e->buffers_synced)
            continue;
        size_t at = (size_t)(view_acc(e, m, tv) - e->acc);
        size_t from = at > lo ? at : lo, to = at + tv->numel < hi ? at + tv->numel : hi;
        if (from >= to)
            continue;
        float *out = (tv->is_buffer ? buffers : grads) + tv->offset + (from - at);
        const double *acc = e->acc + from, p2 = ldexp(1.0, e->grid[v]);
        if (!isfinite(e->all_max[v])) {
            for (size_t i = 0; i < to - from; i++)
                out[i] = e->all_max[v];
            continue;
        }
        for (size_t i = 0; i < to - from; i++)
            out[i] = (float)(acc[i] * p2 / slices);
    }
}

/* counts[r]: how much of [lo, lo + n) lies in rank r's part of the sums. */
static void region_counts(const herd_exact_sum *e, int ranks, size_t lo, size_t n, int *counts)
{
    for (size_t r = 0, at = 0; r < (size_t)ranks; at += (size_t)e->counts[r], r++) {
        size_t from = at > lo ? at : lo, to = at + (size_t)e->counts[r];
        to = to < lo + n ? to : lo + n;
        counts[r] = to > from ? (int)(to - from) : 0;
    }
}

/* The sums over the ranks of c, as means into the model: each rank sums its part of them
 * (a reduce-scatter of the doubles), makes that part's means, and the fp32 means travel
 * (an all-gather): 12 bytes a value on the wire where an allreduce of the doubles moves
 * 16, and each rank converts only its part. */
static herd_status finish_means(herd_exact_sum *e, herd_model *m, herd_comm *c)
{
    size_t n = n_sums(m), part = (n + (size_t)c->size - 1) / (size_t)c->size, lo = 0;
    if (c->size > e->ranks)
        return HERD_ERR(HERD_ERR_INTERNAL, "--deterministic: exact sums made for %d ranks "
                        "finished over %d", e->ranks, c->size);
    for (int r = 0; r < c->size; r++) { /* equal parts, the last ones shorter or empty */
        size_t at = (size_t)r * part < n ? (size_t)r * part : n;
        e->counts[r] = (int)(n - at < part ? n - at : part);
        lo += r < c->rank ? (size_t)e->counts[r] : 0;
    }
    if (c->size > 1)
        HERD_TRY(c->ops->reduce_scatter_f64(c, e->acc, e->counts));
    size_t grads = m->n_param_floats, buffers = e->buffers_synced ? 0 : m->n_buffer_floats;
    float *to_grads = m->be->host_memory ? m->grads : e->host;
    float *to_buffers = m->be->host_memory ? m->buffers : e->host + grads;
    means_of_part(e, m, lo, lo + (size_t)e->counts[c->rank], to_grads, to_buffers);
    if (c->size > 1) {
        int *grads_counts = e->counts + c->size, *buffers_counts = grads_counts + c->size;
        region_counts(e, c->size, 0, grads, grads_counts);
        region_counts(e, c->size, grads, buffers, buffers_counts);
        HERD_TRY(c->ops->allgatherv_f32(c, to_grads, grads_counts));
        if (buffers)
            HERD_TRY(c->ops->allgatherv_f32(c, to_buffers, buffers_counts));
    }
    if (m->be->host_memory)
        return HERD_OK;
    HERD_TRY(m->be->memcpy_h2d(m->grads, e->host, grads * sizeof *e->host));
    return buffers ? m->be->memcpy_h2d(m->buffers, e->host + grads, buffers * sizeof *e->host)
                   : HERD_OK;
}

herd_status herd_exact_sum_finish_agreed(herd_exact_sum *e, herd_model *m, herd_comm *c,
                                         herd_comm *agree, bool *redo)
{
    *redo = false;
    HERD_TRY(gather_max(e, m, c));
    HERD_TRY(tensor_group_max(e, m));
    size_t n = n_sums(m);
    if (n > (size_t)INT32_MAX)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "--deterministic: %zu parameters and buffers are "
                        "more than one exact reduction takes (2^31 - 1)", n);
    bool finite = true;
    for (int v = 0; v < m->n_views; v++)
        finite = finite && isfinite(e->all_max[v]);
    /* no grid, a slice past the grid's headroom (on some rank), any value not finite */
    double verdict[3] = {!e->have_grid, past_headroom(e, m), !finite};
    if (agree && agree->size > 1) /* the parts of one model (pipeline stages) decide as one */
        HERD_TRY(agree->ops->allreduce_f64(agree, verdict, 3));
    /* A redo measures the grid on this step's values; not finite: no grid holds it, and the
     * mean is made non-finite so the step's usual checks see it. */
    if (verdict[0] > 0 || (verdict[1] > 0 && verdict[2] == 0)) {
        set_grids(e, m);
        *redo = true;
        return HERD_OK;
    }
    HERD_TRY(finish_means(e, m, c));
    set_grids(e, m); /* the next step's, from this one's values */
    return HERD_OK;
}

herd_status herd_exact_sum_finish(herd_exact_sum *e, herd_model *m, herd_comm *c, bool *redo)
{
    return herd_exact_sum_finish_agreed(e, m, c, NULL, redo);
}

/* Each split tensor's sum of squares over the tensor parts, added in part order; a whole
 * tensor's is the same bits on every part and counts once (part 0's). */
static herd_status squares_over_parts(const herd_model *m, int first_view, int n, herd_comm *g,
                                      double *part)
{
    double *all = malloc((size_t)n * (size_t)g->size * sizeof *all);
    if (!all)
        return HERD_NOMEM((size_t)n * (size_t)g->size * sizeof *all);
    herd_status st = g->ops->allgather(g, part, all, (size_t)n * sizeof *all);
    for (int v = 0; v < m->n_views && first_view + v < n && st == HERD_OK; v++) {
        if (m->views[v].split_parts <= 1) {
            part[first_view + v] = all[first_view + v];
            continue;
        }
        double sum = 0;
        for (int t = 0; t < g->size; t++)
            sum += all[(size_t)t * (size_t)n + (size_t)(first_view + v)];
        part[first_view + v] = sum;
    }
    free(all);
    return st;
}

herd_status herd_exact_sum_squares(const herd_model *m, int first_view, int whole_views,
                                   herd_comm *tensor_group, herd_comm *job, bool contribute,
                                   double *out)
{
    int n = whole_views > 0 ? whole_views : m->n_views;
    double *part = calloc((size_t)n, sizeof *part);
    if (!part)
        return HERD_NOMEM((size_t)n * sizeof *part);
    herd_status st = HERD_OK;
    /* A stage's views past the whole model's: the last stage's copy of a tied token
     * table, counted on the embedding's stage. */
    int views = first_view + m->n_views <= n ? m->n_views : n - first_view;
    for (int v = 0; v < views && st == HERD_OK && contribute; v++) {
        const herd_tensor_view *tv = &m->views[v];
        if (!tv->is_buffer)
            st = m->be->sum_squares(tv->numel, m->grads + tv->offset, &part[first_view + v]);
    }
    herd_comm *g = tensor_group ? herd_comm_host_side(tensor_group) : NULL;
    if (st == HERD_OK && g && g->size > 1) /* every part of a contributing stage contributes */
        st = squares_over_parts(m, first_view, n, g, part);
    if (st == HERD_OK && job && job->size > 1) /* each view written by one rank: the sum is it */
        st = job->ops->allreduce_f64(job, part, n);
    double total = 0;
    for (int v = 0; v < n; v++)
        total += part[v];
    free(part);
    *out = total;
    return st;
}

double herd_exact_loss(double slice_loss) { return ldexp(rint(ldexp(slice_loss, 28)), -28); }

void herd_exact_grid_format(const int *grid, int n, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int v = 0; v < n; v++) {
        int k = snprintf(buf + used, size - used, "%s%d", v ? "," : "", grid[v]);
        if (k < 0 || (size_t)k >= size - used) { /* no room: no grid, the resume measures */
            buf[0] = '\0';
            return;
        }
        used += (size_t)k;
    }
}

herd_status herd_exact_grid_parse(const char *text, int n, const char *model, int *grid)
{
    const char *p = text;
    for (int v = 0; v < n; v++) {
        char *end;
        long x = strtol(p, &end, 10);
        /* fp32 values span 2^-149 .. 2^128: their grids lie within a few hundred of 0. */
        if (end == p || x < -400 || x > 400 || *end != (v + 1 < n ? ',' : '\0'))
            return HERD_ERR(HERD_ERR_FORMAT, "the checkpoint's exact_grid does not fit model '%s' "
                            "(%d tensors) at tensor %d ('%.20s'); resume without --deterministic "
                            "or from a checkpoint of this model", model, n, v, p);
        grid[v] = (int)x;
        p = end + (*end == ',');
    }
    return HERD_OK;
}

void herd_exact_sum_grid_text(const herd_exact_sum *e, const herd_model *m, char *buf, size_t size)
{
    buf[0] = '\0';
    if (e->have_grid)
        herd_exact_grid_format(e->grid, m->n_views, buf, size);
}

herd_status herd_exact_sum_set_grid_text(herd_exact_sum *e, const herd_model *m, const char *text)
{
    HERD_TRY(herd_exact_grid_parse(text, m->n_views, m->name, e->grid));
    e->have_grid = true;
    return HERD_OK;
}

herd_status herd_exact_sum_rows(herd_comm *c, const double *rows, int n_local, int per_micro,
                                int width, double **scratch, size_t *cap, double *out)
{
    int ranks = c->size;
    size_t mine = (size_t)n_local * (size_t)width, all = mine * (size_t)ranks;
    const double *gathered = rows;
    if (ranks > 1) {
        if (all > *cap) {
            free(*scratch);
            *cap = 0;
            if (!(*scratch = malloc(all * sizeof **scratch)))
                return HERD_NOMEM(all * sizeof **scratch);
            *cap = all;
        }
        HERD_TRY(c->ops->allgather(c, rows, *scratch, mine * sizeof *rows));
        gathered = *scratch;
    }
    for (int w = 0; w < width; w++)
        out[w] = 0.0;
    /* Rank k's local slice j * per_micro + i is the global batch's slice
     * (j * ranks + k) * per_micro + i: micro-batch outermost, then the rank, then the slice. */
    for (int j = 0; j < n_local / per_micro; j++)
        for (int k = 0; k < ranks; k++)
            for (int i = 0; i < per_micro; i++) {
                size_t at = (size_t)k * n_local + (size_t)j * per_micro + i;
                const double *row = gathered + at * width;
                for (int w = 0; w < width; w++)
                    out[w] += row[w];
            }
    return HERD_OK;
}
