/* Global average pooling: N x C x H x W -> N x C x 1 x 1. */
#include "nn/layers/common.h"

static herd_status gap_setup(herd_layer *l, herd_model *m)
{
    (void)m;
    l->out_shape = (herd_shape){1, l->in_shape[0].c, 1, 1};
    return HERD_OK;
}

static herd_status gap_forward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                               float *y)
{
    herd_shape in = l->in_shape[0];
    if (l->in_format[0] == HERD_ACT_BF16)
        return ctx->be->bf16_acts->global_avgpool_fwd(l->batch, in.c, in.h * in.w,
                                                      herd_bf16(x[0]), y);
    return ctx->be->global_avgpool_fwd(l->batch, in.c, in.h * in.w, x[0], y);
}

static herd_status gap_backward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                const float *y, const float *dy, float *const *dx)
{
    (void)x, (void)y;
    herd_shape in = l->in_shape[0];
    if (dx[0] && l->in_format[0] == HERD_ACT_BF16)
        return ctx->be->bf16_acts->global_avgpool_bwd(l->batch, in.c, in.h * in.w, dy,
                                                      (uint16_t *)dx[0]);
    return dx[0] ? ctx->be->global_avgpool_bwd(l->batch, in.c, in.h * in.w, dy, dx[0]) : HERD_OK;
}

static double gap_flops(const herd_layer *l) { return (double)herd_shape_per_sample(l->in_shape[0]); }

static const char *const global_avgpool_keys[] = {NULL};

const herd_layer_ops herd_layer_global_avgpool = {
    .type = "global_avgpool", .n_inputs = 1, .setup = gap_setup, .forward = gap_forward,
    .backward = gap_backward, .flops = gap_flops,
    .keys = global_avgpool_keys, .bf16 = HERD_BF16_CONSUMES,
};
