/* 2-D convolution (cross-correlation, as in PyTorch); weight [out, in, kh, kw].
 * The backend builds a plan per batch size (oneDNN primitives, cuDNN descriptors),
 * for the formats of its input and output (fp32, or bf16 activations). */
#include <stdlib.h>

#include "nn/layers/common.h"

typedef struct conv_state {
    herd_conv_desc desc;
    herd_conv_plan *plan;
} conv_state;

static herd_status conv_setup(herd_layer *l, herd_model *m)
{
    herd_shape in = l->in_shape[0];
    const herd_layer_spec *s = &l->spec;
    if (s->out <= 0 || s->kernel <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "conv2d layer '%s' needs \"out\" and \"kernel\"",
                        s->name);
    int64_t wshape[4] = {s->out, in.c, s->kernel, s->kernel};
    HERD_TRY(herd_layer_checked_size(l, "weight", 4, wshape, NULL));
    conv_state *st = herd_xcalloc(1, sizeof *st);
    if (!st)
        return HERD_ERR_NOMEM;
    l->state = st;
    st->desc = (herd_conv_desc){
        .n = 1, .c_in = in.c, .h_in = in.h, .w_in = in.w, .c_out = s->out, .kh = s->kernel,
        .kw = s->kernel, .stride = s->stride, .pad = s->pad, .bias = s->bias,
    };
    herd_status rc = herd_conv_desc_finish(&st->desc);
    if (rc != HERD_OK)
        return HERD_ERR(rc, "conv2d layer '%s': %s", s->name, herd_last_error());
    int64_t bshape[1] = {s->out};
    herd_model_add_tensor(m, l, "weight", 4, wshape, 0, 0);
    if (s->bias)
        herd_model_add_tensor(m, l, "bias", 1, bshape, 0, 1);
    l->out_shape = (herd_shape){1, s->out, st->desc.h_out, st->desc.w_out};
    return HERD_OK; /* setup_layers (model.c) checks every layer's output size */
}

static void conv_init(herd_layer *l, herd_model *m, herd_rng *rng)
{
    const herd_layer_spec *s = &l->spec;
    int fan_in = l->in_shape[0].c * s->kernel * s->kernel;
    herd_init_uniform_fan_in(herd_view_data(m, l, 0), (size_t)s->out * fan_in, fan_in, rng);
    if (s->bias)
        herd_init_uniform_fan_in(herd_view_data(m, l, 1), (size_t)s->out, fan_in, rng);
}

static herd_status conv_reshape(herd_layer *l, const herd_backend *be, int batch)
{
    conv_state *st = l->state;
    if (st->plan)
        be->conv2d_plan_free(st->plan);
    st->plan = NULL;
    st->desc.n = batch;
    st->desc.bf16_in = l->in_format[0] == HERD_ACT_BF16;
    st->desc.bf16_out = l->out_format == HERD_ACT_BF16;
    return be->conv2d_plan(&st->desc, &st->plan);
}

static herd_status conv_forward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                float *y)
{
    conv_state *st = l->state;
    const float *b = l->spec.bias ? herd_layer_param(l, ctx, 1) : NULL;
    return ctx->be->conv2d_fwd(st->plan, x[0], herd_layer_param(l, ctx, 0), b, y);
}

static herd_status conv_backward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                 const float *y, const float *dy, float *const *dx)
{
    (void)y;
    conv_state *st = l->state;
    float *db = l->spec.bias ? herd_layer_grad(l, ctx, 1) : NULL;
    HERD_TRY(ctx->be->conv2d_bwd_weights(st->plan, x[0], dy, herd_layer_grad(l, ctx, 0), db,
                                         ctx->grad_beta));
    if (dx[0])
        HERD_TRY(ctx->be->conv2d_bwd_data(st->plan, dy, herd_layer_param(l, ctx, 0), dx[0]));
    return HERD_OK;
}

static void conv_destroy(herd_layer *l, const herd_backend *be)
{
    conv_state *st = l->state;
    if (st && st->plan)
        be->conv2d_plan_free(st->plan);
    free(st);
    l->state = NULL;
}

static double conv_flops(const herd_layer *l)
{
    const herd_layer_spec *s = &l->spec;
    return 2.0 * l->out_shape.c * l->out_shape.h * l->out_shape.w * l->in_shape[0].c * s->kernel *
           s->kernel;
}

static const char *const conv2d_keys[] = {"out", "kernel", "stride", "pad", "bias", NULL};

const herd_layer_ops herd_layer_conv2d = {
    .type = "conv2d", .n_inputs = 1, .setup = conv_setup, .init_params = conv_init,
    .reshape = conv_reshape, .forward = conv_forward, .backward = conv_backward,
    .destroy = conv_destroy, .flops = conv_flops,
    .keys = conv2d_keys, .bf16 = HERD_BF16_PRODUCES,
};
