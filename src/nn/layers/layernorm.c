/* Layer norm over the width of each position (PyTorch's nn.LayerNorm(width)), with a
 * gain ("weight") and a bias. */
#include <stdlib.h>

#include "nn/layers/tokens.h"

typedef struct layernorm_state {
    float *mean, *rstd; /* per row, saved by the forward for the backward */
} layernorm_state;

static herd_status layernorm_setup(herd_layer *l, herd_model *m)
{
    HERD_TRY(herd_token_input(l, 0));
    int64_t shape[1] = {l->in_shape[0].w};
    herd_model_add_tensor(m, l, "weight", 1, shape, 0, 1);
    herd_model_add_tensor(m, l, "bias", 1, shape, 0, 1);
    if (!(l->state = herd_xcalloc(1, sizeof(layernorm_state))))
        return HERD_ERR_NOMEM;
    l->out_shape = l->in_shape[0];
    return HERD_OK;
}

static void layernorm_init(herd_layer *l, herd_model *m, herd_rng *rng)
{
    (void)rng;
    float *g = herd_view_data(m, l, 0);
    for (int j = 0; j < l->in_shape[0].w; j++)
        g[j] = 1.0f; /* the bias stays zero */
}

static herd_status layernorm_reshape(herd_layer *l, const herd_backend *be, int batch)
{
    layernorm_state *st = l->state;
    be->free(st->mean);
    be->free(st->rstd);
    size_t bytes = (size_t)batch * l->in_shape[0].h * sizeof(float);
    st->mean = be->alloc(bytes);
    st->rstd = be->alloc(bytes);
    return st->mean && st->rstd ? HERD_OK : HERD_ERR_NOMEM; /* the allocator said why */
}

static herd_status layernorm_forward(herd_layer *l, const herd_run_ctx *ctx,
                                     const float *const *x, float *y)
{
    layernorm_state *st = l->state;
    HERD_TRY(herd_token_op(l, ctx->be, ctx->be->layernorm_fwd != NULL, "layer norm"));
    return ctx->be->layernorm_fwd(l->batch * l->in_shape[0].h, l->in_shape[0].w, x[0],
                                  herd_layer_param(l, ctx, 0), herd_layer_param(l, ctx, 1),
                                  l->spec.eps, y, st->mean, st->rstd);
}

static herd_status layernorm_backward(herd_layer *l, const herd_run_ctx *ctx,
                                      const float *const *x, const float *y, const float *dy,
                                      float *const *dx)
{
    (void)y;
    layernorm_state *st = l->state;
    HERD_TRY(herd_token_op(l, ctx->be, ctx->be->layernorm_bwd != NULL, "layer norm"));
    return ctx->be->layernorm_bwd(l->batch * l->in_shape[0].h, l->in_shape[0].w, x[0], dy,
                                  herd_layer_param(l, ctx, 0), st->mean, st->rstd, dx[0],
                                  herd_layer_grad(l, ctx, 0), herd_layer_grad(l, ctx, 1),
                                  ctx->grad_beta);
}

static void layernorm_destroy(herd_layer *l, const herd_backend *be)
{
    layernorm_state *st = l->state;
    if (st) {
        be->free(st->mean);
        be->free(st->rstd);
    }
    free(st);
    l->state = NULL;
}

static double layernorm_flops(const herd_layer *l)
{
    return 8.0 * (double)herd_shape_per_sample(l->out_shape);
}

static const char *const layernorm_keys[] = {"eps", NULL};

const herd_layer_ops herd_layer_layernorm = {
    .type = "layernorm", .n_inputs = 1, .setup = layernorm_setup, .init_params = layernorm_init,
    .reshape = layernorm_reshape, .forward = layernorm_forward, .backward = layernorm_backward,
    .destroy = layernorm_destroy, .flops = layernorm_flops, .keys = layernorm_keys,
};
