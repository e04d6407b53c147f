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
 * acc + n_param_floats + its offset), then the count of values past the headroom. */
static size_t n_sums(const herd_model *m) { return m->n_param_floats + m->n_buffer_floats; }
static double *view_acc(const herd_exact_sum *e, const herd_model *m, const herd_tensor_view *tv)
{
    return e->acc + (tv->is_buffer ? m->n_param_floats : 0) + tv->offset;
}

herd_status herd_exact_sum_init(herd_exact_sum *e, const herd_model *m, int ranks)
{
    memset(e, 0, sizeof *e);
    size_t nv = (size_t)m->n_views;
    e->acc = malloc((n_sums(m) + 1) * sizeof *e->acc);
    e->view_max = calloc(nv, sizeof *e->view_max);
    e->all_max = calloc(nv * (size_t)ranks, sizeof *e->all_max);
    e->grid = calloc(nv, sizeof *e->grid);
    /* malloc(0) may return NULL: one float at least. */
    e->step_buffers = malloc((m->n_buffer_floats + 1) * sizeof *e->step_buffers);
    /* A device's gradients and buffers are read and written through host copies. */
    if (!m->be->host_memory)
        e->host = malloc((m->n_param_floats + m->n_buffer_floats + 1) * sizeof *e->host);
    if (!e->acc || !e->view_max || !e->all_max || !e->grid || !e->step_buffers ||
        (!m->be->host_memory && !e->host)) {
        herd_exact_sum_free(e);
        return HERD_NOMEM((n_sums(m) + 1) * sizeof(double));
    }
    return HERD_OK;
}

void herd_exact_sum_free(herd_exact_sum *e)
{
    free(e->acc);
    free(e->view_max);
    free(e->all_max);
    free(e->grid);
    free(e->step_buffers);
    free(e->host);
    memset(e, 0, sizeof *e);
}

void herd_exact_sum_begin(herd_exact_sum *e, const herd_model *m, long slices)
{
    memset(e->acc, 0, (n_sums(m) + 1) * sizeof *e->acc);
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
 * into *mx, the values outside the headroom and those not finite counted. Inlined with a
 * constant round16, so the loop vectorises (a runtime rounding and double counters kept it
 * scalar: 3% of make test's CPU). */
static inline void add_run(const float *restrict g, size_t n, bool grid, double scale,
                           double bound, int round16, double *restrict acc, float *mx_out,
                           size_t *outside_out, size_t *bad_out)
{
    size_t outside = 0, bad = 0;
    float mx = 0.0f;
#pragma omp simd reduction(max : mx) reduction(+ : outside, bad)
    for (size_t i = 0; i < n; i++) {
        float v = rounded(g[i], round16), a = fabsf(v);
        mx = a > mx ? a : mx;
        bad += !(a <= 3.402823466e38f);
        if (grid) {
            double q = rint((double)v * scale); /* scale is a power of two: exact */
            bool in = fabs(q) <= bound;           /* false for inf and NaN too */
            acc[i] += in ? q : 0.0;
            outside += !in;
        }
    }
    *mx_out = mx;
    *outside_out = outside;
    *bad_out = bad;
}

/* Runs [r0, r1) of RUN values of a view of n: add_run on each, into the maxima and counts. */
enum { RUN = 16384 };
static void add_runs(const float *g, size_t n, size_t r0, size_t r1, bool grid, double scale,
                     double bound, int round16, double *acc, float *mx, size_t *outside, size_t *bad)
{
    for (size_t r = r0; r < r1; r++) {
        size_t lo = r * RUN, len = n - lo < RUN ? n - lo : RUN, o, b;
        float m;
        if (round16 == HERD_EXACT_ROUND_FP16)
            add_run(g + lo, len, grid, scale, bound, HERD_EXACT_ROUND_FP16, acc + lo, &m, &o, &b);
        else if (round16 == HERD_EXACT_ROUND_BF16)
            add_run(g + lo, len, grid, scale, bound, HERD_EXACT_ROUND_BF16, acc + lo, &m, &o, &b);
        else
            add_run(g + lo, len, grid, scale, bound, HERD_EXACT_ROUND_NONE, acc + lo, &m, &o, &b);
        *mx = m > *mx ? m : *mx;
        *outside += o;
        *bad += b;
    }
}

/* One view of a slice (add_run), inf or NaN anywhere making the maximum NaN, so the step
 * is not finite whatever the grid. Returns how many values fell outside the headroom:
 * their place gets nothing, and the step is redone on another grid. Every element is its
 * own sum, and the max and the counts have no order, so threads may split the view; a view
 * too small for them stays outside any parallel region (herd_par_team). */
static double add_view(const float *g, size_t n, bool grid, double scale, double bound,
                       int round16, double *acc, float *mx_out)
{
    size_t outside = 0, bad = 0, runs = (n + RUN - 1) / RUN;
    float mx = 0.0f;
    if (!herd_par_team(n, 65536)) {
        add_runs(g, n, 0, runs, grid, scale, bound, round16, acc, &mx, &outside, &bad);
    } else {
#pragma omp parallel for reduction(max : mx) reduction(+ : outside, bad)
        for (size_t r = 0; r < runs; r++)
            add_runs(g, n, r, r + 1, grid, scale, bound, round16, acc, &mx, &outside, &bad);
    }
    *mx_out = bad > 0 ? NAN : mx;
    return (double)outside;
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
    double outside = 0;
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
        outside += add_view(x, tv->numel, e->have_grid, ldexp(1.0, -e->grid[v]), bound, round16,
                            view_acc(e, m, tv), &mx);
        e->view_max[v] = max_or_nan(was, mx);
    }
    e->acc[n_sums(m)] += outside;
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
    const double bound = slice_bound(e);
    for (int v = 0; v < m->n_views; v++) {
        if (m->views[v].is_buffer)
            continue;
        float mx = NAN, was = e->view_max[v];
        if (max_bits[v] < 0x7f800000u)
            memcpy(&mx, &max_bits[v], sizeof mx);
        e->view_max[v] = max_or_nan(was, mx);
        /* rint is monotone: the largest value is the first to leave the headroom. */
        if (e->have_grid && !(fabs(rint((double)mx * ldexp(1.0, -e->grid[v]))) <= bound))
            e->acc[n_sums(m)] += 1;
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

static void set_grids(herd_exact_sum *e, const herd_model *m)
{
    for (int v = 0; v < m->n_views; v++)
        e->grid[v] = grid_for(e->all_max[v], e->grid[v]);
    e->have_grid = true;
}

herd_status herd_exact_sum_finish_agreed(herd_exact_sum *e, herd_model *m, herd_comm *c,
                                         herd_comm *agree, bool *redo)
{
    *redo = false;
    HERD_TRY(gather_max(e, m, c));
    size_t n = n_sums(m);
    if (n + 1 > (size_t)INT32_MAX)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "--deterministic: %zu parameters and buffers are "
                        "more than one exact reduction takes (2^31 - 1)", n);
    /* The first step (no grid yet) only measured: nothing to sum. */
    if (e->have_grid && c->size > 1)
        HERD_TRY(c->ops->allreduce_f64(c, e->acc, (int)(n + 1)));
    bool finite = true;
    for (int v = 0; v < m->n_views; v++)
        finite = finite && isfinite(e->all_max[v]);
    /* no grid, a slice past the grid's headroom (on some rank), any value not finite */
    double verdict[3] = {!e->have_grid, e->have_grid && e->acc[n] > 0, !finite};
    if (agree && agree->size > 1) /* the parts of one model (pipeline stages) decide as one */
        HERD_TRY(agree->ops->allreduce_f64(agree, verdict, 3));
    /* A redo measures the grid on this step's values; not finite: no grid holds it, and the
     * mean is made non-finite below so the step's usual checks (divergence, loss scaling)
     * see it. */
    if (verdict[0] > 0 || (verdict[1] > 0 && verdict[2] == 0)) {
        set_grids(e, m);
        *redo = true;
        return HERD_OK;
    }
    for (int v = 0; v < m->n_views; v++) {
        const herd_tensor_view *tv = &m->views[v];
        /* integer × 2^E is exact; the division by the slices rounds once, the same on
         * every rank. A buffer's mean over the slices is the running statistic updated
         * once with the slices' mean statistic. */
        if (tv->is_buffer && e->buffers_synced) /* the same bytes on every rank already */
            continue;
        double p2 = ldexp(1.0, e->grid[v]), slices = (double)e->slices;
        bool bad = !isfinite(e->all_max[v]);
        float *g = host_at(e, m, tv);
        const double *acc = view_acc(e, m, tv);
        for (size_t i = 0; i < tv->numel; i++)
            g[i] = bad ? e->all_max[v] : (float)(acc[i] * p2 / slices);
        if (!m->be->host_memory) /* a device's: written back */
            HERD_TRY(m->be->memcpy_h2d((tv->is_buffer ? m->buffers : m->grads) + tv->offset, g,
                                       tv->numel * sizeof *g));
    }
    set_grids(e, m); /* the next step's, from this one's values */
    return HERD_OK;
}

herd_status herd_exact_sum_finish(herd_exact_sum *e, herd_model *m, herd_comm *c, bool *redo)
{
    return herd_exact_sum_finish_agreed(e, m, c, NULL, redo);
}

herd_status herd_exact_sum_squares(const herd_model *m, int first_view, int whole_views,
                                   herd_comm *job, bool contribute, double *out)
{
    int n = whole_views > 0 ? whole_views : m->n_views;
    double *part = calloc((size_t)n, sizeof *part);
    if (!part)
        return HERD_NOMEM((size_t)n * sizeof *part);
    herd_status st = HERD_OK;
    for (int v = 0; v < m->n_views && st == HERD_OK && contribute; v++) {
        const herd_tensor_view *tv = &m->views[v];
        if (!tv->is_buffer)
            st = m->be->sum_squares(tv->numel, m->grads + tv->offset, &part[first_view + v]);
    }
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
