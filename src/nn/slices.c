#include "nn/slices.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "nn/recompute.h"

herd_status herd_slices_reshape(herd_slices *s, herd_model *whole, int n, int size)
{
    if (s->whole && s->whole != whole)
        return HERD_ERR(HERD_ERR_INTERNAL, "slices of model '%s' asked to run '%s'",
                        s->whole->name, whole->name);
    s->whole = whole;
    int widest = 1;
    for (int l = 0; l < whole->n_layers; l++) {
        const herd_layer *layer = &whole->layers[l];
        if (layer->grad_shared)
            return HERD_ERR(HERD_ERR_UNSUPPORTED, "model '%s' ties weights (layer '%s'), which "
                            "running a batch as slices layer by layer does not cover; drop "
                            "--sync-bn or --deterministic", whole->name, layer->spec.name);
        if (herd_layer_is_batchnorm(layer) && 2 * layer->in_shape[0].c + 1 > widest)
            widest = 2 * layer->in_shape[0].c + 1;
    }
    if (n > s->capacity) {
        herd_model **more = realloc(s->slice, (size_t)n * sizeof *more);
        if (more)
            s->slice = more;
        free(s->io), free(s->bn), free(s->bn_x), free(s->bn_dy), free(s->bn_y);
        s->io = malloc((size_t)n * sizeof *s->io);
        s->bn = malloc((size_t)n * sizeof *s->bn);
        s->bn_x = malloc((size_t)n * sizeof *s->bn_x);
        s->bn_dy = malloc((size_t)n * sizeof *s->bn_dy);
        s->bn_y = malloc((size_t)n * sizeof *s->bn_y);
        if (!more || !s->io || !s->bn || !s->bn_x || !s->bn_dy || !s->bn_y)
            return HERD_NOMEM((size_t)n * sizeof *s->io);
        for (; s->capacity < n; s->capacity++) {
            herd_model *m = herd_xcalloc(1, sizeof *m);
            if (!m)
                return HERD_ERR_NOMEM;
            m->tp = whole->tp; /* a tensor part's slices: split as it is */
            /* A pipeline stage's slices give the gradient of their input, as it does. */
            herd_status st = herd_model_build_stage(m, whole, 0, whole->n_layers, false,
                                                    whole->input_grad, 0);
            if (st != HERD_OK) {
                herd_model_free(m);
                return st;
            }
            s->slice[s->capacity] = m;
        }
    }
    /* Each slice's row, and one more for the sums. */
    size_t rows = (size_t)(n + 1) * (size_t)widest;
    if (rows > s->rows_capacity) {
        free(s->rows);
        s->rows_capacity = 0;
        if (!(s->rows = malloc(rows * sizeof *s->rows)))
            return HERD_NOMEM(rows * sizeof *s->rows);
        s->rows_capacity = rows;
    }
    s->n = n;
    s->size = size;
    for (int i = 0; i < n; i++)
        HERD_TRY(herd_model_reshape(s->slice[i], size));
    return HERD_OK;
}

void herd_slices_free(herd_slices *s)
{
    for (int i = 0; i < s->capacity; i++)
        herd_model_free(s->slice[i]);
    free(s->slice);
    free(s->io), free(s->bn), free(s->bn_x), free(s->bn_dy), free(s->bn_y);
    free(s->rows);
    memset(s, 0, sizeof *s);
}

const float *herd_slices_logits(const herd_slices *s, int i)
{
    const herd_model *m = s->slice[i];
    return m->acts[m->n_layers - 1];
}

/* Layer l of slice i: forward (io NULL), or backward from io[i] with its gradients
 * handed to sums->grads_ready (serialised by the caller when on threads). */
static herd_status one_slice(herd_slices *s, const herd_run_ctx *ctx, const uint64_t *seeds,
                             const float *const *x, const herd_layer_io *io, float *grads, int i,
                             int l)
{
    herd_model *m = s->slice[i];
    herd_layer *li = &m->layers[l];
    herd_run_ctx mine = *ctx;
    mine.seed = seeds[i];
    if (!io) {
        const float *inputs[HERD_MAX_INPUTS] = {0};
        for (int k = 0; k < li->spec.n_inputs; k++)
            inputs[k] = herd_model_layer_input(m, x[i], l, k);
        return li->ops->forward(li, &mine, inputs, m->acts[l]);
    }
    mine.grads = grads;
    return li->ops->backward(li, &mine, io[i].in, io[i].y, io[i].dy, io[i].din);
}

/* Layer l of every slice: one after another, or on s->threads threads at once, each
 * slice whole on one (its kernels see one thread), gradients into the thread's own
 * buffer and handed on one slice at a time. */
static herd_status each_slice(herd_slices *s, int n, const herd_run_ctx *ctx, const uint64_t *seeds,
                              const float *const *x, const herd_layer_io *io, herd_slice_sums *sums, int l)
{
    if (s->threads < 2) {
        herd_status st = HERD_OK;
        for (int i = 0; i < n && st == HERD_OK; i++) {
            st = one_slice(s, ctx, seeds, x, io, ctx->grads, i, l);
            if (st == HERD_OK && io)
                st = sums->grads_ready(sums->user, i, l, ctx->grads);
        }
        return st;
    }
    herd_first_error failed = {0};
#pragma omp parallel for num_threads(s->threads) schedule(dynamic, 1)
    for (int i = 0; i < n; i++) {
        float *grads = s->thread_grads[omp_get_thread_num()];
        herd_status mine = one_slice(s, ctx, seeds, x, io, grads, i, l);
        if (mine == HERD_OK && io) {
#pragma omp critical(herd_slices_grads)
            mine = sums->grads_ready(sums->user, i, l, grads);
        }
        herd_first_error_keep(&failed, mine);
    }
    return herd_first_error_status(&failed);
}

/* Layer l's forward on every slice (batch norm over all of them), as `kind` on the
 * timeline. */
static herd_status forward_layer(herd_slices *s, const herd_run_ctx *ctx, const uint64_t *seeds,
                                 const float *const *x, herd_slice_sums *sums, int l,
                                 herd_tl_kind kind)
{
    int n = s->n;
    herd_status st = HERD_OK;
    double t0 = herd_trace_start(ctx->trace);
    const herd_layer *layer = &s->whole->layers[l];
    bool bn = herd_layer_is_batchnorm(layer) && ctx->training;
    if (bn) {
        for (int i = 0; i < n; i++) {
            s->bn[i] = &s->slice[i]->layers[l];
            s->bn_x[i] = herd_model_layer_input(s->slice[i], x[i], l, 0);
            s->bn_y[i] = s->slice[i]->acts[l];
        }
        st = herd_batchnorm_slices_forward(s->bn, n, ctx, s->bn_x, s->bn_y, sums);
    } else {
        st = each_slice(s, n, ctx, seeds, x, NULL, NULL, l);
    }
    for (int i = 0; i < n; i++)
        herd_recompute_forward_done(s->slice[i], l);
    herd_trace_end(ctx->trace, kind, layer->spec.name, t0);
    if (ctx->between_layers)
        ctx->between_layers(ctx->between_user);
    return st;
}

herd_status herd_slices_forward(herd_slices *s, const herd_run_ctx *ctx, const uint64_t *seeds,
                                const float *const *x, herd_slice_sums *sums)
{
    sums->rows = s->rows;
    herd_status st = HERD_OK;
    for (int l = 0; l < s->whole->n_layers && st == HERD_OK; l++) {
        if (ctx->before_forward)
            st = ctx->before_forward(ctx->before_user, l);
        if (st == HERD_OK)
            st = forward_layer(s, ctx, seeds, x, sums, l, HERD_TL_FWD_LAYER);
    }
    return st;
}

/* --recompute (recompute.h): before layer l's backward, the inside of the run l ends runs
 * forward again on every slice, layer by layer as the forward ran it (batch norm over
 * all the slices, its sums collective as there), the running statistics put back after.
 * The slices' models share one plan, so slice 0's says what to do for all. */
static herd_status rerun(herd_slices *s, const herd_run_ctx *ctx, const uint64_t *seeds,
                         const float *const *x, herd_slice_sums *sums, int l)
{
    herd_model *m0 = s->slice[0];
    herd_recompute *rc = m0->rc;
    int r = rc ? rc->last_of[l] : -1;
    if (r < 0 || (rc->pool->holder == m0 && rc->pool->run == r))
        return HERD_OK;
    int first = rc->run_first[r], last = rc->run_last[r];
    HERD_TRY(herd_recompute_move_buffers(m0, ctx, first, last, true));
    for (int j = first; j <= last; j++)
        HERD_TRY(forward_layer(s, ctx, seeds, x, sums, j, HERD_TL_RECOMPUTE_LAYER));
    return herd_recompute_move_buffers(m0, ctx, first, last, false);
}

herd_status herd_slices_backward(herd_slices *s, const herd_run_ctx *ctx, const uint64_t *seeds,
                                 const float *const *x, const float *const *dlogits,
                                 herd_slice_sums *sums)
{
    sums->rows = s->rows;
    int n = s->n;
    herd_status st = HERD_OK;
    for (int i = 0; i < n; i++)
        herd_model_backward_begin(s->slice[i]);
    for (int l = s->whole->n_layers - 1; l >= 0 && st == HERD_OK; l--) {
        const herd_layer *layer = &s->whole->layers[l];
        bool bn = herd_layer_is_batchnorm(layer);
        st = rerun(s, ctx, seeds, x, sums, l);
        if (st != HERD_OK)
            break;
        for (int i = 0; i < n; i++)
            herd_model_backward_io(s->slice[i], l, x[i], dlogits[i], &s->io[i]);
        double t0 = herd_trace_start(ctx->trace);
        if (bn) {
            for (int i = 0; i < n; i++) {
                s->bn[i] = &s->slice[i]->layers[l];
                s->bn_x[i] = s->io[i].in[0];
                s->bn_dy[i] = s->io[i].dy;
                s->bn_y[i] = s->io[i].din[0]; /* the input gradient */
            }
            st = herd_batchnorm_slices_backward(s->bn, n, ctx, s->bn_x, s->bn_dy, s->bn_y, sums, l);
        }
        if (st == HERD_OK && !bn)
            st = each_slice(s, n, ctx, seeds, x, s->io, sums, l);
        herd_trace_end(ctx->trace, HERD_TL_BWD_LAYER, layer->spec.name, t0);
        if (ctx->between_layers)
            ctx->between_layers(ctx->between_user);
        for (int i = 0; i < n && st == HERD_OK; i++)
            st = herd_model_backward_done(s->slice[i], l, &s->io[i]);
    }
    return st;
}
