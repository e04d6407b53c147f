/* Inverted dropout: in training, zero each value with probability p and scale the
 * rest by 1/(1-p); identity in evaluation. The mask comes from the step's seed. */
#include <stdlib.h>

#include "nn/layers/common.h"

typedef struct dropout_state {
    float *mask;
    int layer_index;
} dropout_state;

static herd_status dropout_setup(herd_layer *l, herd_model *m)
{
    dropout_state *st = herd_xcalloc(1, sizeof *st);
    if (!st)
        return HERD_ERR_NOMEM;
    st->layer_index = m->layer_offset + (int)(l - m->layers); /* the whole model's, in a stage too */
    l->state = st;
    l->out_shape = l->in_shape[0];
    return HERD_OK;
}

static herd_status dropout_reshape(herd_layer *l, const herd_backend *be, int batch)
{
    (void)batch;
    dropout_state *st = l->state;
    be->free(st->mask);
    size_t bytes = herd_shape_numel(l->out_shape) * sizeof(float);
    st->mask = be->alloc(bytes);
    return st->mask ? HERD_OK : HERD_ERR_NOMEM; /* the allocator said why */
}

static herd_status dropout_forward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                   float *y)
{
    dropout_state *st = l->state;
    size_t n = herd_shape_numel(l->out_shape);
    if (!ctx->training || l->spec.p == 0.0f)
        return ctx->be->copy(n, x[0], y);
    if (ctx->seed_dev)
        return ctx->be->dropout_fwd_seeded(n, x[0], y, st->mask, l->spec.p, ctx->seed_dev,
                                           (uint64_t)st->layer_index);
    return ctx->be->dropout_fwd(n, x[0], y, st->mask, l->spec.p,
                                herd_mix64(ctx->seed, (uint64_t)st->layer_index));
}

static herd_status dropout_backward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                    const float *y, const float *dy, float *const *dx)
{
    (void)x, (void)y;
    dropout_state *st = l->state;
    size_t n = herd_shape_numel(l->out_shape);
    if (!dx[0])
        return HERD_OK;
    if (l->spec.p == 0.0f)
        return ctx->be->copy(n, dy, dx[0]);
    return ctx->be->mul(n, dy, st->mask, dx[0]);
}

static void dropout_destroy(herd_layer *l, const herd_backend *be)
{
    dropout_state *st = l->state;
    if (st)
        be->free(st->mask);
    free(st);
    l->state = NULL;
}

static const char *const dropout_keys[] = {"p", NULL};

const herd_layer_ops herd_layer_dropout = {
    .type = "dropout", .n_inputs = 1, .setup = dropout_setup, .reshape = dropout_reshape,
    .forward = dropout_forward, .backward = dropout_backward, .destroy = dropout_destroy,
    .keys = dropout_keys,
};
