/* Batch normalisation over (N, H, W) per channel: batch statistics in training,
 * running statistics in evaluation (PyTorch semantics). */
#include <stdlib.h>

#include "nn/layers/common.h"

typedef struct bn_state {
    float *save_mean, *save_invstd; /* from the last training forward, for backward */
} bn_state;

static herd_status bn_setup(herd_layer *l, herd_model *m)
{
    int c = l->in_shape[0].c;
    int64_t shape[1] = {c};
    herd_model_add_tensor(m, l, "weight", 1, shape, 0, 1);
    herd_model_add_tensor(m, l, "bias", 1, shape, 0, 1);
    herd_model_add_tensor(m, l, "running_mean", 1, shape, 1, 1);
    herd_model_add_tensor(m, l, "running_var", 1, shape, 1, 1);
    l->out_shape = l->in_shape[0];
    return HERD_OK;
}

static void bn_init(herd_layer *l, herd_model *m, herd_rng *rng)
{
    (void)rng;
    int c = l->in_shape[0].c;
    float *gamma = herd_view_data(m, l, 0), *beta = herd_view_data(m, l, 1);
    float *rmean = herd_view_data(m, l, 2), *rvar = herd_view_data(m, l, 3);
    for (int i = 0; i < c; i++) {
        gamma[i] = 1.0f;
        beta[i] = 0.0f;
        rmean[i] = 0.0f;
        rvar[i] = 1.0f;
    }
}

static herd_status bn_reshape(herd_layer *l, const herd_backend *be, int batch)
{
    (void)batch;
    if (l->state)
        return HERD_OK;
    bn_state *st = herd_xcalloc(1, sizeof *st);
    if (!st)
        return HERD_ERR_NOMEM;
    l->state = st;
    size_t bytes = (size_t)l->in_shape[0].c * sizeof(float);
    st->save_mean = be->alloc(bytes);
    st->save_invstd = be->alloc(bytes);
    return st->save_mean && st->save_invstd ? HERD_OK : HERD_NOMEM(bytes);
}

static herd_status bn_forward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                              float *y)
{
    bn_state *st = l->state;
    herd_shape s = l->in_shape[0];
    const float *gamma = herd_layer_param(l, ctx, 0), *beta = herd_layer_param(l, ctx, 1);
    float *rmean = herd_layer_param(l, ctx, 2), *rvar = herd_layer_param(l, ctx, 3);
    if (ctx->training)
        return ctx->be->bn_fwd_train(l->batch, s.c, s.h * s.w, x[0], gamma, beta, y, st->save_mean,
                                     st->save_invstd, rmean, rvar, l->spec.momentum, l->spec.eps);
    return ctx->be->bn_fwd_infer(l->batch, s.c, s.h * s.w, x[0], gamma, beta, y, rmean, rvar,
                                 l->spec.eps);
}

static herd_status bn_backward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                               const float *y, const float *dy, float *const *dx)
{
    (void)y;
    bn_state *st = l->state;
    herd_shape s = l->in_shape[0];
    /* dx[0] is NULL when BN reads the model input: the backend then skips dx. */
    return ctx->be->bn_bwd(l->batch, s.c, s.h * s.w, x[0], dy, herd_layer_param(l, ctx, 0),
                           st->save_mean, st->save_invstd, dx[0], herd_layer_grad(l, ctx, 0),
                           herd_layer_grad(l, ctx, 1), ctx->grad_beta);
}

static void bn_destroy(herd_layer *l, const herd_backend *be)
{
    bn_state *st = l->state;
    if (st) {
        be->free(st->save_mean);
        be->free(st->save_invstd);
    }
    free(st);
    l->state = NULL;
}

static double bn_flops(const herd_layer *l) { return 2.0 * herd_shape_per_sample(l->in_shape[0]); }

const herd_layer_ops herd_layer_batchnorm = {
    .type = "batchnorm", .n_inputs = 1, .setup = bn_setup, .init_params = bn_init,
    .reshape = bn_reshape, .forward = bn_forward, .backward = bn_backward, .destroy = bn_destroy,
    .flops = bn_flops,
};
