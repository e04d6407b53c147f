/* Where activations live, and their recomputation (recompute.h). */
#include "nn/recompute.h"

#include <stdlib.h>

#include "core/error.h"
#include "core/trace.h"
#include "nn/partition.h"

/* Offsets in the pool in whole cache lines. */
static size_t line_up(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

size_t herd_act_bytes(const herd_layer *l)
{
    size_t elem = l->out_format == HERD_ACT_BF16 ? sizeof(uint16_t) : sizeof(float);
    return herd_shape_numel(l->out_shape) * elem;
}

static size_t stash_bytes(const herd_layer *l)
{
    return l->ops->stash_bytes ? l->ops->stash_bytes(l, l->batch) : 0;
}

static size_t buffer_floats(const herd_model *m, const herd_layer *l)
{
    size_t n = 0;
    for (int k = 0; k < l->n_tensors; k++)
        if (m->views[l->first_tensor + k].is_buffer)
            n += m->views[l->first_tensor + k].numel;
    return n;
}

/* rc->pool: the model's shared pool, grown to rc->pool_bytes if smaller (it moves: the
 * other models sharing it see a new generation and reshape), or a pool of its own. */
static herd_status take_pool(herd_model *m, herd_recompute *rc)
{
    herd_recompute_pool *p = m->shared_pool;
    if (!p && !(p = herd_xcalloc(1, sizeof *p)))
        return HERD_ERR_NOMEM;
    rc->pool = p;
    if (p->bytes < rc->pool_bytes) {
        m->be->free(p->mem);
        p->bytes = 0;
        p->holder = NULL;
        p->generation++;
        if (!(p->mem = m->be->alloc(rc->pool_bytes)))
            return HERD_ERR_NOMEM; /* the allocator said why */
        p->bytes = rc->pool_bytes;
    }
    rc->pool_generation = p->generation;
    return HERD_OK;
}

herd_status herd_recompute_share(herd_model *const *models, int n)
{
    herd_recompute_pool *p = herd_xcalloc(1, sizeof *p);
    if (!p)
        return HERD_ERR_NOMEM;
    p->users = n;
    for (int i = 0; i < n; i++) {
        herd_recompute_free(models[i]); /* their next reshape takes the shared pool */
        models[i]->batch = 0;
        models[i]->shared_pool = p;
    }
    return HERD_OK;
}

void herd_recompute_unshare(herd_model *m)
{
    herd_recompute_pool *p = m->shared_pool;
    m->shared_pool = NULL;
    if (p && --p->users == 0) {
        m->be->free(p->mem);
        free(p);
    }
}

/* The runs between cuts whose inside is pooled (two or more layers, not the last run),
 * into rc when not NULL; returns how many. */
static int plan_runs(const herd_model *m, herd_recompute *rc)
{
    int n = m->n_layers, first = 0, runs = 0;
    for (int b = 1; b <= n; b++) {
        if (b < n && !herd_partition_can_cut(m, b))
            continue;
        int last = b - 1; /* the run is first..last */
        if (last > first && last < n - 1) {
            int r = runs++;
            if (rc) {
                rc->run_first[r] = first;
                rc->run_last[r] = last - 1;
                for (int i = first; i < last; i++)
                    rc->inside_of[i] = r;
                rc->last_of[last] = r;
            }
        }
        first = b;
    }
    return runs;
}

int herd_recompute_runs(const herd_model *m) { return plan_runs(m, NULL); }

herd_status herd_recompute_alloc(herd_model *m)
{
    int n = m->n_layers;
    herd_recompute *rc = herd_xcalloc(1, sizeof *rc);
    if (!(m->rc = rc))
        return HERD_ERR_NOMEM;
    rc->n_layers = n;
    rc->recompute = m->recompute;
    rc->inside_of = herd_xcalloc((size_t)n, sizeof *rc->inside_of);
    rc->last_of = herd_xcalloc((size_t)n, sizeof *rc->last_of);
    rc->run_first = herd_xcalloc((size_t)n, sizeof *rc->run_first);
    rc->run_last = herd_xcalloc((size_t)n, sizeof *rc->run_last);
    rc->own_act = herd_xcalloc((size_t)n, sizeof *rc->own_act);
    rc->own_stash = herd_xcalloc((size_t)n, sizeof *rc->own_stash);
    if (!rc->inside_of || !rc->last_of || !rc->run_first || !rc->run_last || !rc->own_act ||
        !rc->own_stash)
        return HERD_ERR_NOMEM;
    for (int i = 0; i < n; i++)
        rc->inside_of[i] = rc->last_of[i] = -1;
    rc->n_runs = m->recompute ? plan_runs(m, rc) : 0;

    /* Each pooled run's inside laid out from the pool's start: outputs, then stashes. */
    for (int r = 0; r < rc->n_runs; r++) {
        size_t at = 0, saved = 0;
        for (int i = rc->run_first[r]; i <= rc->run_last[r]; i++) {
            at += line_up(herd_act_bytes(&m->layers[i])) + line_up(stash_bytes(&m->layers[i]));
            saved += buffer_floats(m, &m->layers[i]);
        }
        rc->pool_bytes = at > rc->pool_bytes ? at : rc->pool_bytes;
        rc->saved_floats = saved > rc->saved_floats ? saved : rc->saved_floats;
    }
    const herd_backend *be = m->be;
    size_t scratch = 0;
    for (int i = 0; i < n; i++) {
        const herd_layer *l = &m->layers[i];
        size_t b = l->ops->scratch_bytes ? l->ops->scratch_bytes(l, l->batch) : 0;
        scratch = b > scratch ? b : scratch;
    }
    if (scratch) {
        herd_mem_category was = herd_mem_category_set(HERD_MEM_WORKSPACE);
        rc->scratch = be->alloc(scratch);
        herd_mem_category_set(was);
        if (!rc->scratch)
            return HERD_ERR_NOMEM; /* the allocator said why */
    }
    for (int i = 0; i < n; i++)
        m->layers[i].scratch = rc->scratch;
    HERD_TRY(take_pool(m, rc));
    if (rc->saved_floats && !(rc->saved = be->alloc(rc->saved_floats * sizeof(float))))
        return HERD_ERR_NOMEM;
    int run = -1;
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        herd_layer *l = &m->layers[i];
        size_t act = herd_act_bytes(l), stash = stash_bytes(l);
        int r = rc->inside_of[i];
        if (r != run)
            at = 0;
        run = r;
        if (r >= 0) {
            m->acts[i] = (float *)((char *)rc->pool->mem + at);
            at += line_up(act);
            l->stash = stash ? (char *)rc->pool->mem + at : NULL;
            at += line_up(stash);
            continue;
        }
        if (!(m->acts[i] = be->alloc(act)))
            return HERD_ERR_NOMEM;
        rc->own_act[i] = true;
        l->stash = NULL;
        if (stash && !(l->stash = be->alloc(stash)))
            return HERD_ERR_NOMEM;
        rc->own_stash[i] = stash > 0;
    }
    return HERD_OK;
}

void herd_recompute_free(herd_model *m)
{
    herd_recompute *rc = m->rc;
    if (!rc)
        return;
    for (int i = 0; i < rc->n_layers; i++) {
        if (rc->own_act && rc->own_act[i])
            m->be->free(m->acts[i]);
        if (rc->own_stash && rc->own_stash[i])
            m->be->free(m->layers[i].stash);
        if (m->acts)
            m->acts[i] = NULL;
        m->layers[i].stash = m->layers[i].scratch = NULL;
    }
    m->be->free(rc->scratch);
    if (rc->pool && !rc->pool->users) { /* the model's own */
        m->be->free(rc->pool->mem);
        free(rc->pool);
    }
    m->be->free(rc->saved);
    free(rc->inside_of);
    free(rc->last_of);
    free(rc->run_first);
    free(rc->run_last);
    free(rc->own_act);
    free(rc->own_stash);
    free(rc);
    m->rc = NULL;
}

herd_status herd_recompute_move_buffers(herd_model *m, const herd_run_ctx *ctx, int first,
                                        int last, bool save)
{
    size_t at = 0;
    for (int i = first; i <= last; i++) {
        const herd_layer *l = &m->layers[i];
        for (int k = 0; k < l->n_tensors; k++) {
            const herd_tensor_view *v = &m->views[l->first_tensor + k];
            if (!v->is_buffer)
                continue;
            float *b = ctx->buffers + v->offset, *s = m->rc->saved + at;
            HERD_TRY(save ? m->be->copy(v->numel, b, s) : m->be->copy(v->numel, s, b));
            at += v->numel;
        }
    }
    return HERD_OK;
}

herd_status herd_recompute_before_backward(herd_model *m, const herd_run_ctx *ctx, const float *x,
                                           int i)
{
    herd_recompute *rc = m->rc;
    int r = rc ? rc->last_of[i] : -1;
    if (r < 0 || (rc->pool->holder == m && rc->pool->run == r))
        return HERD_OK;
    if (herd_recompute_stale(m)) /* another model grew the shared pool mid-step */
        return HERD_ERR(HERD_ERR_INTERNAL, "--recompute: the pool of '%s' moved between the "
                        "forward and the backward of a micro-batch", m->name);
    /* The forward's context without its hooks into the step (ZeRO's wait for parameters
     * the forward already had): the same seed, training mode and groups. */
    herd_run_ctx again = *ctx;
    again.before_forward = NULL;
    int first = rc->run_first[r], last = rc->run_last[r];
    HERD_TRY(herd_recompute_move_buffers(m, ctx, first, last, true));
    for (int j = first; j <= last; j++) {
        herd_layer *l = &m->layers[j];
        const float *in[HERD_MAX_INPUTS] = {0};
        for (int k = 0; k < l->spec.n_inputs; k++)
            in[k] = herd_model_layer_input(m, x, j, k);
        double t0 = herd_trace_start(ctx->trace);
        HERD_TRY(l->ops->forward(l, &again, in, m->acts[j]));
        herd_trace_end(ctx->trace, HERD_TL_RECOMPUTE_LAYER, l->spec.name, t0);
        if (ctx->between_layers)
            ctx->between_layers(ctx->between_user);
    }
    HERD_TRY(herd_recompute_move_buffers(m, ctx, first, last, false));
    rc->pool->holder = m;
    rc->pool->run = r;
    return HERD_OK;
}
