/* Fully connected layer: y = x W^T + b, W is [out, in] as in PyTorch. */
#include <string.h>

#include "nn/layers/tokens.h"

/* Rows and features of the input: one row per sample, or per position with
 * "per_position" (a 1 x T x C token tensor, as PyTorch's Linear on the last dimension). */
static void linear_dims(const herd_layer *l, int *rows, int *in)
{
    bool pp = l->spec.per_position;
    *rows = l->batch * (pp ? l->in_shape[0].h : 1);
    *in = pp ? l->in_shape[0].w : l->in_shape[0].c;
}

static herd_status linear_setup(herd_layer *l, herd_model *m)
{
    herd_shape in = l->in_shape[0];
    if (l->spec.per_position)
        HERD_TRY(herd_token_input(l, 0));
    else if (in.h != 1 || in.w != 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "linear layer '%s' needs a flat input but gets %dx%dx%d; put a "
                        "\"flatten\" layer before it (or give \"per_position\": true for a "
                        "sequence)",
                        l->spec.name, in.c, in.h, in.w);
    if (l->spec.out <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "linear layer '%s' needs \"out\" > 0", l->spec.name);
    int features = l->spec.per_position ? in.w : in.c;
    int64_t wshape[2] = {l->spec.out, features};
    HERD_TRY(herd_layer_checked_size(l, "weight", 2, wshape, NULL));
    int64_t bshape[1] = {l->spec.out};
    herd_model_add_tensor(m, l, "weight", 2, wshape, 0, 0);
    if (l->spec.bias)
        herd_model_add_tensor(m, l, "bias", 1, bshape, 0, 1);
    l->out_shape = l->spec.per_position ? (herd_shape){1, 1, in.h, l->spec.out}
                                        : (herd_shape){1, l->spec.out, 1, 1};
    return HERD_OK;
}

static void linear_init(herd_layer *l, herd_model *m, herd_rng *rng)
{
    int fan_in = l->spec.per_position ? l->in_shape[0].w : l->in_shape[0].c;
    size_t nw = (size_t)l->spec.out * fan_in;
    if (l->spec.init_std > 0) {
        herd_init_normal(herd_view_data(m, l, 0), nw, l->spec.init_std, rng);
        if (l->spec.bias)
            memset(herd_view_data(m, l, 1), 0, (size_t)l->spec.out * sizeof(float));
        return;
    }
    herd_init_uniform_fan_in(herd_view_data(m, l, 0), nw, fan_in, rng);
    if (l->spec.bias)
        herd_init_uniform_fan_in(herd_view_data(m, l, 1), (size_t)l->spec.out, fan_in, rng);
}

static herd_status linear_forward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                  float *y)
{
    int n, in, out = l->spec.out;
    linear_dims(l, &n, &in);
    const float *w = herd_layer_param(l, ctx, 0);
    HERD_TRY(ctx->be->gemm(false, true, n, out, in, 1.0f, x[0], in, w, in, 0.0f, y, out));
    if (l->spec.bias)
        HERD_TRY(ctx->be->bias_add(n, out, y, herd_layer_param(l, ctx, 1)));
    return HERD_OK;
}

static herd_status linear_backward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                   const float *y, const float *dy, float *const *dx)
{
    (void)y;
    int n, in, out = l->spec.out;
    linear_dims(l, &n, &in);
    const herd_backend *be = ctx->be;
    /* dW[out, in] = dy^T x; dx = dy W. */
    HERD_TRY(be->gemm(true, false, out, in, n, 1.0f, dy, out, x[0], in, ctx->grad_beta,
                      herd_layer_grad(l, ctx, 0), in));
    if (l->spec.bias)
        HERD_TRY(be->bias_grad(n, out, dy, herd_layer_grad(l, ctx, 1), ctx->grad_beta));
    if (dx[0])
        HERD_TRY(be->gemm(false, false, n, in, out, 1.0f, dy, out, herd_layer_param(l, ctx, 0), in,
                          0.0f, dx[0], in));
    return HERD_OK;
}

static double linear_flops(const herd_layer *l)
{
    int rows, in;
    herd_layer tmp = *l;
    tmp.batch = 1;
    linear_dims(&tmp, &rows, &in);
    return 2.0 * rows * in * l->spec.out;
}

static const char *const linear_keys[] = {"out", "bias", "per_position", "init_std", NULL};

const herd_layer_ops herd_layer_linear = {
    .type = "linear", .n_inputs = 1, .setup = linear_setup, .init_params = linear_init,
    .forward = linear_forward, .backward = linear_backward, .flops = linear_flops,
    .keys = linear_keys,
};
