/* ReLU; backward uses the output (y > 0), so the input need not be kept. */
#include "nn/layers/common.h"

static herd_status relu_setup(herd_layer *l, herd_model *m)
{
    (void)m;
    l->out_shape = l->in_shape[0];
    return HERD_OK;
}

static herd_status relu_forward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                float *y)
{
    if (l->out_format == HERD_ACT_BF16)
        return ctx->be->bf16_acts->relu_fwd(herd_shape_numel(l->out_shape), herd_bf16(x[0]),
                                            (uint16_t *)y);
    return ctx->be->relu_fwd(herd_shape_numel(l->out_shape), x[0], y);
}

static herd_status relu_backward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                 const float *y, const float *dy, float *const *dx)
{
    (void)x;
    if (dx[0] && l->out_format == HERD_ACT_BF16)
        return ctx->be->bf16_acts->relu_bwd(herd_shape_numel(l->out_shape), herd_bf16(y),
                                            herd_bf16(dy), (uint16_t *)dx[0]);
    return dx[0] ? ctx->be->relu_bwd(herd_shape_numel(l->out_shape), y, dy, dx[0]) : HERD_OK;
}

static double relu_flops(const herd_layer *l) { return (double)herd_shape_per_sample(l->out_shape); }

static const char *const relu_keys[] = {NULL};

const herd_layer_ops herd_layer_relu = {
    .type = "relu", .n_inputs = 1, .setup = relu_setup, .forward = relu_forward,
    .backward = relu_backward, .flops = relu_flops,
    .keys = relu_keys, .bf16 = HERD_BF16_KEEPS, .backward_reads_y = true,
};
