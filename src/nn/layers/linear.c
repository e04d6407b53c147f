/* Fully connected layer: y = x W^T + b, W is [out, in] as in PyTorch. Under tensor
 * parallelism (Megatron-LM's pair) a "column" layer holds its part of the output
 * features (rows of W and b): its input is whole, its output this rank's part, and the
 * input's gradient is summed over the group. A "row" layer holds its part of the input
 * features (columns of W): it reads the part a column layer gave, its products are
 * summed over the group before the bias (whole, on every rank) is added. */
#include <math.h>
#include <string.h>

#include "nn/layers/tokens.h"
#include "nn/tensor_split.h"

static int tp_parts(const herd_model *m) { return m->tp.size > 1 ? m->tp.size : 1; }

/* Rows and features of the input: one row per sample, or per position with
 * "per_position" (a 1 x T x C token tensor, as PyTorch's Linear on the last dimension).
 * out: the output features this rank computes. */
static void linear_dims(const herd_layer *l, int *rows, int *in, int *out)
{
    bool pp = l->spec.per_position;
    *rows = l->batch * (pp ? l->in_shape[0].h : 1);
    *in = pp ? l->in_shape[0].w : l->in_shape[0].c;
    *out = pp ? l->out_shape.w : l->out_shape.c;
}

/* The split's part of the features, or an error naming the layer. */
static herd_status split_features(const herd_layer *l, const herd_model *m, int whole,
                                  const char *what, int *part)
{
    int t = tp_parts(m);
    if (whole % t != 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "linear layer '%s' (\"parallel\": \"%s\"): its %d %s features do not "
                        "split evenly over --tensor-parallel %d; choose a tensor-parallel size "
                        "that divides %d", l->spec.name,
                        l->spec.parallel == HERD_TP_COLUMN ? "column" : "row", whole, what, t,
                        whole);
    *part = whole / t;
    return HERD_OK;
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
    int features = l->spec.per_position ? in.w : in.c, out = l->spec.out;
    herd_tp_split split = tp_parts(m) > 1 ? l->spec.parallel : HERD_TP_NONE;
    if (split == HERD_TP_COLUMN)
        HERD_TRY(split_features(l, m, l->spec.out, "output", &out));
    /* A row layer's input is already its part: the whole has tp.size times the features. */
    int whole_in = split == HERD_TP_ROW ? features * tp_parts(m) : features;
    int64_t wshape[2] = {l->spec.out, whole_in};
    HERD_TRY(herd_layer_checked_size(l, "weight", 2, wshape, NULL));
    int64_t bshape[1] = {l->spec.out};
    if (split == HERD_TP_NONE) {
        herd_model_add_tensor(m, l, "weight", 2, wshape, 0, 0);
        if (l->spec.bias)
            herd_model_add_tensor(m, l, "bias", 1, bshape, 0, 1);
    } else {
        herd_model_add_split_tensor(m, l, "weight", 2, wshape, split == HERD_TP_COLUMN ? 0 : 1,
                                    1, 0);
        if (l->spec.bias && split == HERD_TP_COLUMN)
            herd_model_add_split_tensor(m, l, "bias", 1, bshape, 0, 1, 1);
        else if (l->spec.bias)
            herd_model_add_tensor(m, l, "bias", 1, bshape, 0, 1);
    }
    l->out_shape = l->spec.per_position ? (herd_shape){1, 1, in.h, out} : (herd_shape){1, out, 1, 1};
    if (split == HERD_TP_ROW)
        l->tp_sum_forward = herd_shape_per_sample(l->out_shape);
    if (split == HERD_TP_COLUMN)
        l->tp_sum_backward = herd_shape_per_sample(in);
    return HERD_OK;
}

/* Draws the whole tensors: a split model's part is cut from them (tensor_split.h). */
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

/* --deterministic's exact ops (herd_exact_linear), for layers over samples: a sequence's
 * per-position layer (a transformer's, whose model runs slice by slice anyway) keeps
 * oneDNN's GEMMs, faster at its narrow widths and as fixed for a slice's fixed shape. */
static bool exact_ops(const herd_layer *l, const herd_run_ctx *ctx)
{
    return ctx->exact && ctx->be->exact_linear_fwd && !l->spec.per_position;
}

/* One tensor's side of an exact weight gradient: written (plain), or into the sums. */
static herd_exact_grad_out exact_out(const herd_layer *l, const herd_run_ctx *ctx, int k)
{
    const herd_exact_linear *e = ctx->exact;
    int v = l->first_tensor + k;
    if (!e->sums)
        return (herd_exact_grad_out){.plain = herd_layer_grad(l, ctx, k)};
    return (herd_exact_grad_out){.sums = e->sums + ctx->views[v].offset, .grid = e->have_grid,
                                 .scale = ldexp(1.0, -e->grid[v]), .max_bits = e->max_bits[v]};
}

/* --deterministic: each slice's weight and bias gradients by the backend's exact op, a
 * slice a call (written) or every slice of the call at once (into the exact sums). */
static herd_status exact_grads(const herd_layer *l, const herd_run_ctx *ctx, int n, int in,
                               int out, const float *x, const float *dy)
{
    herd_exact_linear *e = ctx->exact;
    herd_exact_wgrad j = {.rows = n, .slice = e->sums ? e->slice * (n / l->batch) : n, .in = in,
                          .out = out, .dy = dy, .x = x, .w = exact_out(l, ctx, 0),
                          .fresh = e->sums && e->fresh};
    if (l->spec.bias)
        j.b = exact_out(l, ctx, 1);
    HERD_TRY(ctx->be->exact_linear_wgrad(&j));
    if (e->sums) {
        e->max_bits[l->first_tensor] = j.w.max_bits;
        if (l->spec.bias)
            e->max_bits[l->first_tensor + 1] = j.b.max_bits;
    }
    return HERD_OK;
}

static herd_status linear_forward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                  float *y)
{
    int n, in, out;
    linear_dims(l, &n, &in, &out);
    const float *w = herd_layer_param(l, ctx, 0);
    bool row_sum = ctx->tp && l->spec.parallel == HERD_TP_ROW;
    if (exact_ops(l, ctx)) { /* the bias in the kernel, unless a sum comes before it */
        const float *b = l->spec.bias && !row_sum ? herd_layer_param(l, ctx, 1) : NULL;
        HERD_TRY(ctx->be->exact_linear_fwd(n, in, out, x[0], w, b, y));
        if (b)
            return HERD_OK;
    } else {
        HERD_TRY(ctx->be->gemm(false, true, n, out, in, 1.0f, x[0], in, w, in, 0.0f, y, out));
    }
    if (row_sum)
        HERD_TRY(ctx->tp->sum(ctx->tp->group, y, (size_t)n * out));
    if (l->spec.bias)
        HERD_TRY(ctx->be->bias_add(n, out, y, herd_layer_param(l, ctx, 1)));
    return HERD_OK;
}

static herd_status linear_backward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                   const float *y, const float *dy, float *const *dx)
{
    (void)y;
    int n, in, out;
    linear_dims(l, &n, &in, &out);
    const herd_backend *be = ctx->be;
    bool exact = exact_ops(l, ctx);
    /* dW[out, in] = dy^T x; dx = dy W. */
    if (exact) {
        HERD_TRY(exact_grads(l, ctx, n, in, out, x[0], dy));
    } else {
        HERD_TRY(be->gemm(true, false, out, in, n, 1.0f, dy, out, x[0], in, ctx->grad_beta,
                          herd_layer_grad(l, ctx, 0), in));
        if (l->spec.bias)
            HERD_TRY(be->bias_grad(n, out, dy, herd_layer_grad(l, ctx, 1), ctx->grad_beta));
    }
    if (dx[0]) {
        const float *w = herd_layer_param(l, ctx, 0);
        if (exact)
            HERD_TRY(be->exact_linear_bwd_data(n, in, out, dy, w, dx[0]));
        else
            HERD_TRY(be->gemm(false, false, n, in, out, 1.0f, dy, out, w, in, 0.0f, dx[0], in));
        if (ctx->tp && l->spec.parallel == HERD_TP_COLUMN)
            HERD_TRY(ctx->tp->sum(ctx->tp->group, dx[0], (size_t)n * in));
    }
    return HERD_OK;
}

/* Of this rank's part (a split layer computes its share of the outputs or inputs). */
static double linear_flops(const herd_layer *l)
{
    int rows, in, out;
    herd_layer tmp = *l;
    tmp.batch = 1;
    linear_dims(&tmp, &rows, &in, &out);
    return 2.0 * rows * in * out;
}

static const char *const linear_keys[] = {"out", "bias", "per_position", "init_std", "parallel",
                                          NULL};

const herd_layer_ops herd_layer_linear = {
    .type = "linear", .n_inputs = 1, .setup = linear_setup, .init_params = linear_init,
    .forward = linear_forward, .backward = linear_backward, .flops = linear_flops,
    .keys = linear_keys,
};
