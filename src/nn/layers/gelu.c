/* GELU, tanh approximation (GPT-2's); the backward reads the input. */
#include "nn/layers/tokens.h"

static herd_status gelu_setup(herd_layer *l, herd_model *m)
{
    (void)m;
    l->out_shape = l->in_shape[0];
    return HERD_OK;
}

static herd_status gelu_forward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                float *y)
{
    HERD_TRY(herd_token_op(l, ctx->be, ctx->be->gelu_fwd != NULL, "GELU"));
    return ctx->be->gelu_fwd(herd_shape_numel(l->out_shape), x[0], y);
}

static herd_status gelu_backward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                 const float *y, const float *dy, float *const *dx)
{
    (void)y;
    HERD_TRY(herd_token_op(l, ctx->be, ctx->be->gelu_bwd != NULL, "GELU"));
    return dx[0] ? ctx->be->gelu_bwd(herd_shape_numel(l->out_shape), x[0], dy, dx[0]) : HERD_OK;
}

static double gelu_flops(const herd_layer *l)
{
    return 8.0 * (double)herd_shape_per_sample(l->out_shape);
}

static const char *const gelu_keys[] = {NULL};

const herd_layer_ops herd_layer_gelu = {
    .type = "gelu", .n_inputs = 1, .setup = gelu_setup, .forward = gelu_forward,
    .backward = gelu_backward, .flops = gelu_flops, .keys = gelu_keys,
};
