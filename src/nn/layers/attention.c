/* Causal multi-head self-attention (GPT-2's attn): qkv = x Wqkv^T + b, per head the
 * softmax of q k^T / sqrt(width / heads) over earlier positions and itself, times v,
 * then y = that Wproj^T + b. Tensors: qkv.weight [3C, C], qkv.bias, proj.weight [C, C],
 * proj.bias (q, k, v are the rows of qkv.weight in that order, heads side by side).
 * Under tensor parallelism each rank holds heads/T heads: their rows of q, k and v
 * (column-parallel) and their columns of proj.weight (row-parallel), so the block
 * sums over the group once forward (after the projection) and once backward (the
 * input's gradient); proj.bias is whole on every rank. */
#include <stdlib.h>
#include <string.h>

#include "nn/layers/tokens.h"
#include "nn/tensor_split.h"

typedef struct attention_state {
    int heads, width; /* this rank's heads and their part of the width */
    /* Saved by the forward, in the stash the model holds (recompute.h): [rows, 3C],
     * [n, H, T, T], [rows, C]. */
    float *qkv, *att, *mix;
    float *dmix, *dqkv;     /* backward scratch, in the model's shared scratch */
} attention_state;

static herd_status attention_setup(herd_layer *l, herd_model *m)
{
    HERD_TRY(herd_token_input(l, 0));
    int c = l->in_shape[0].w, h = l->spec.heads, parts = m->tp.size > 1 ? m->tp.size : 1;
    if (h <= 0 || c % h != 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "attention layer '%s': \"heads\" (%d) must divide the width %d", l->spec.name,
                        h, c);
    if (h % parts != 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "attention layer '%s' has %d heads, which do not split evenly over "
                        "--tensor-parallel %d; choose a tensor-parallel size that divides %d",
                        l->spec.name, h, parts, h);
    int64_t wqkv[2] = {3 * (int64_t)c, c}, bqkv[1] = {3 * (int64_t)c}, wp[2] = {c, c}, bp[1] = {c};
    HERD_TRY(herd_layer_checked_size(l, "qkv.weight", 2, wqkv, NULL));
    int64_t att[3] = {h, l->in_shape[0].h, l->in_shape[0].h};
    HERD_TRY(herd_layer_checked_size(l, "attention matrix", 3, att, NULL));
    herd_model_add_split_tensor(m, l, "qkv.weight", 2, wqkv, 0, 3, 0);
    herd_model_add_split_tensor(m, l, "qkv.bias", 1, bqkv, 0, 3, 1);
    herd_model_add_split_tensor(m, l, "proj.weight", 2, wp, 1, 1, 0);
    herd_model_add_tensor(m, l, "proj.bias", 1, bp, 0, 1);
    attention_state *st = herd_xcalloc(1, sizeof(attention_state));
    if (!(l->state = st))
        return HERD_ERR_NOMEM;
    st->heads = h / parts;
    st->width = c / parts;
    if (parts > 1) /* the projection's output; the input's gradient */
        l->tp_sum_forward = l->tp_sum_backward = herd_shape_per_sample(l->in_shape[0]);
    l->out_shape = l->in_shape[0];
    return HERD_OK;
}

static void attention_init(herd_layer *l, herd_model *m, herd_rng *rng)
{
    int c = l->in_shape[0].w;
    if (l->spec.init_std > 0) {
        herd_init_normal(herd_view_data(m, l, 0), 3 * (size_t)c * c, l->spec.init_std, rng);
        float proj = l->spec.proj_init_std > 0 ? l->spec.proj_init_std : l->spec.init_std;
        herd_init_normal(herd_view_data(m, l, 2), (size_t)c * c, proj, rng);
        memset(herd_view_data(m, l, 1), 0, 3 * (size_t)c * sizeof(float));
        memset(herd_view_data(m, l, 3), 0, (size_t)c * sizeof(float));
        return;
    }
    herd_init_uniform_fan_in(herd_view_data(m, l, 0), 3 * (size_t)c * c, c, rng);
    herd_init_uniform_fan_in(herd_view_data(m, l, 1), 3 * (size_t)c, c, rng);
    herd_init_uniform_fan_in(herd_view_data(m, l, 2), (size_t)c * c, c, rng);
    herd_init_uniform_fan_in(herd_view_data(m, l, 3), (size_t)c, c, rng);
}

/* The stash's three parts, in floats. */
static void stash_parts(const herd_layer *l, int batch, size_t parts[3])
{
    const attention_state *st = l->state;
    size_t rows = (size_t)batch * l->in_shape[0].h, c = (size_t)st->width;
    size_t t = (size_t)l->in_shape[0].h;
    parts[0] = rows * 3 * c;
    parts[1] = (size_t)batch * st->heads * t * t;
    parts[2] = rows * c;
}

static size_t attention_stash_bytes(const herd_layer *l, int batch)
{
    size_t parts[3];
    stash_parts(l, batch, parts);
    return (parts[0] + parts[1] + parts[2]) * sizeof(float);
}

/* dmix [rows, C] and dqkv [rows, 3C]. */
static size_t attention_scratch_bytes(const herd_layer *l, int batch)
{
    const attention_state *st = l->state;
    return (size_t)batch * l->in_shape[0].h * 4 * st->width * sizeof(float);
}

static herd_status attention_reshape(herd_layer *l, const herd_backend *be, int batch)
{
    (void)be;
    attention_state *st = l->state;
    size_t parts[3];
    stash_parts(l, batch, parts);
    st->qkv = l->stash;
    st->att = st->qkv + parts[0];
    st->mix = st->att + parts[1];
    st->dmix = l->scratch;
    st->dqkv = st->dmix + (size_t)batch * l->in_shape[0].h * st->width;
    return HERD_OK;
}

static herd_status attention_forward(herd_layer *l, const herd_run_ctx *ctx,
                                     const float *const *x, float *y)
{
    attention_state *st = l->state;
    const herd_backend *be = ctx->be;
    HERD_TRY(herd_token_op(l, be, be->attention_fwd != NULL, "attention"));
    /* c: the width; p: this rank's part of it (c without tensor parallelism). */
    int rows = l->batch * l->in_shape[0].h, c = l->in_shape[0].w, p = st->width;
    HERD_TRY(be->gemm(false, true, rows, 3 * p, c, 1.0f, x[0], c, herd_layer_param(l, ctx, 0), c,
                      0.0f, st->qkv, 3 * p));
    HERD_TRY(be->bias_add(rows, 3 * p, st->qkv, herd_layer_param(l, ctx, 1)));
    HERD_TRY(be->attention_fwd(l->batch, l->in_shape[0].h, p, st->heads, st->qkv, st->att,
                               st->mix));
    HERD_TRY(be->gemm(false, true, rows, c, p, 1.0f, st->mix, p, herd_layer_param(l, ctx, 2), p,
                      0.0f, y, c));
    if (ctx->tp)
        HERD_TRY(ctx->tp->sum(ctx->tp->group, y, (size_t)rows * c));
    return be->bias_add(rows, c, y, herd_layer_param(l, ctx, 3));
}

static herd_status attention_backward(herd_layer *l, const herd_run_ctx *ctx,
                                      const float *const *x, const float *y, const float *dy,
                                      float *const *dx)
{
    (void)y;
    attention_state *st = l->state;
    const herd_backend *be = ctx->be;
    HERD_TRY(herd_token_op(l, be, be->attention_bwd != NULL, "attention"));
    int rows = l->batch * l->in_shape[0].h, c = l->in_shape[0].w, p = st->width;
    float gb = ctx->grad_beta;
    /* The output projection, as linear's backward. */
    HERD_TRY(be->gemm(true, false, c, p, rows, 1.0f, dy, c, st->mix, p, gb,
                      herd_layer_grad(l, ctx, 2), p));
    HERD_TRY(be->bias_grad(rows, c, dy, herd_layer_grad(l, ctx, 3), gb));
    HERD_TRY(be->gemm(false, false, rows, p, c, 1.0f, dy, c, herd_layer_param(l, ctx, 2), p, 0.0f,
                      st->dmix, p));
    HERD_TRY(be->attention_bwd(l->batch, l->in_shape[0].h, p, st->heads, st->qkv, st->att,
                               st->dmix, st->dqkv));
    HERD_TRY(be->gemm(true, false, 3 * p, c, rows, 1.0f, st->dqkv, 3 * p, x[0], c, gb,
                      herd_layer_grad(l, ctx, 0), c));
    HERD_TRY(be->bias_grad(rows, 3 * p, st->dqkv, herd_layer_grad(l, ctx, 1), gb));
    if (dx[0]) {
        HERD_TRY(be->gemm(false, false, rows, c, 3 * p, 1.0f, st->dqkv, 3 * p,
                          herd_layer_param(l, ctx, 0), c, 0.0f, dx[0], c));
        if (ctx->tp)
            HERD_TRY(ctx->tp->sum(ctx->tp->group, dx[0], (size_t)rows * c));
    }
    return HERD_OK;
}

static void attention_destroy(herd_layer *l, const herd_backend *be)
{
    (void)be; /* its buffers are the model's */
    free(l->state);
    l->state = NULL;
}

/* Projections 2 x 4C^2 per position; q k^T and att v 2 x 2 x T C over the causal half;
 * this rank's heads' share of them. */
static double attention_flops(const herd_layer *l)
{
    const attention_state *st = l->state;
    double t = l->in_shape[0].h, c = l->in_shape[0].w, part = st ? (double)st->width / c : 1.0;
    return part * (t * 8.0 * c * c + 2.0 * t * (t + 1) * c);
}

static const char *const attention_keys[] = {"heads", "init_std", "proj_init_std", NULL};

const herd_layer_ops herd_layer_attention = {
    .type = "attention", .n_inputs = 1, .setup = attention_setup, .init_params = attention_init,
    .reshape = attention_reshape, .forward = attention_forward, .backward = attention_backward,
    .destroy = attention_destroy, .flops = attention_flops, .keys = attention_keys,
    .stash_bytes = attention_stash_bytes, .scratch_bytes = attention_scratch_bytes,
};
