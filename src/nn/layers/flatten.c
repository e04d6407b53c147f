/* Flatten: C x H x W -> (C*H*W) x 1 x 1. The memory layout is unchanged, so this
 * is a copy; it keeps the graph simple (every layer owns its output). */
#include "nn/layers/common.h"

static herd_status flatten_setup(herd_layer *l, herd_model *m)
{
    (void)m;
    herd_shape in = l->in_shape[0];
    int64_t n;
    HERD_TRY(herd_layer_checked_size(l, "output", 3, (int64_t[]){in.c, in.h, in.w}, &n));
    l->out_shape = (herd_shape){1, (int)n, 1, 1};
    return HERD_OK;
}

static herd_status flatten_forward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                   float *y)
{
    return ctx->be->copy(herd_shape_numel(l->out_shape), x[0], y);
}

static herd_status flatten_backward(herd_layer *l, const herd_run_ctx *ctx,
                                    const float *const *x, const float *y, const float *dy,
                                    float *const *dx)
{
    (void)x, (void)y;
    return dx[0] ? ctx->be->copy(herd_shape_numel(l->out_shape), dy, dx[0]) : HERD_OK;
}

static const char *const flatten_keys[] = {NULL};

const herd_layer_ops herd_layer_flatten = {
    .type = "flatten", .n_inputs = 1, .setup = flatten_setup, .forward = flatten_forward,
    .backward = flatten_backward,
    .keys = flatten_keys,
};
