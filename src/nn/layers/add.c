/* Residual add of two outputs of the same shape. */
#include "nn/layers/common.h"

static herd_status add_setup(herd_layer *l, herd_model *m)
{
    (void)m;
    herd_shape a = l->in_shape[0], b = l->in_shape[1];
    if (a.c != b.c || a.h != b.h || a.w != b.w)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "add layer '%s' adds %dx%dx%d to %dx%dx%d; both inputs need the same "
                        "shape (use a 1x1 conv shortcut where the shape changes)",
                        l->spec.name, a.c, a.h, a.w, b.c, b.h, b.w);
    if (l->spec.inputs[0] == l->spec.inputs[1])
        return HERD_ERR(HERD_ERR_INVALID_ARG, "add layer '%s' reads the same layer twice",
                        l->spec.name);
    l->out_shape = a;
    return HERD_OK;
}

static herd_status add_forward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                               float *y)
{
    if (l->out_format == HERD_ACT_BF16)
        return ctx->be->bf16_acts->add(herd_shape_numel(l->out_shape), herd_bf16(x[0]),
                                       herd_bf16(x[1]), (uint16_t *)y);
    return ctx->be->add(herd_shape_numel(l->out_shape), x[0], x[1], y);
}

static herd_status add_backward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                const float *y, const float *dy, float *const *dx)
{
    (void)x, (void)y;
    size_t n = herd_shape_numel(l->out_shape);
    for (int k = 0; k < 2; k++) {
        if (dx[k] && l->out_format == HERD_ACT_BF16)
            HERD_TRY(ctx->be->bf16_acts->copy(n, herd_bf16(dy), (uint16_t *)dx[k]));
        else if (dx[k])
            HERD_TRY(ctx->be->copy(n, dy, dx[k]));
    }
    return HERD_OK;
}

static double add_flops(const herd_layer *l) { return (double)herd_shape_per_sample(l->out_shape); }

static const char *const add_keys[] = {NULL};

const herd_layer_ops herd_layer_add = {
    .type = "add", .n_inputs = 2, .setup = add_setup, .forward = add_forward,
    .backward = add_backward, .flops = add_flops,
    .keys = add_keys, .bf16 = HERD_BF16_KEEPS,
};
