/* Batch normalisation over (N, H, W) per channel: batch statistics in training,
 * running statistics in evaluation (PyTorch semantics). With ctx->bn_group spanning
 * more than one rank, training statistics are those of the global batch
 * (synchronised BN, as torch.nn.SyncBatchNorm): the backend's split ops compute
 * per-channel sums, the group adds them over ranks, the next op uses them. bf16
 * activations take the same split ops, with nothing in between on one rank. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layers/common.h"
#include "nn/slices.h"

typedef struct bn_state {
    float *save_mean, *save_invstd; /* from the last training forward, for backward */
    /* The split ops' per-channel sums, 2c + 1 doubles of backend memory, kept here so
     * a step allocates nothing. allreduce_f64 adds host memory: a device backend's
     * sums travel through `host` (2c + 1 doubles; NULL on the CPU, which reduces red
     * in place). The last slot carries the batch's count in the forward's sum. */
    double *red, *host;
    int64_t count;  /* values per channel in the global batch of the last forward */
    bool synced;    /* the last training forward used global statistics */
    float *keep;    /* slices: the running statistics before the batch's update (2c) */
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

/* Per channel, so made once; an attempt refused part-way (--memory-limit) left what
 * is still missing, and the next one makes it. */
static herd_status bn_reshape(herd_layer *l, const herd_backend *be, int batch)
{
    (void)batch;
    bn_state *st = l->state;
    if (!st && !(st = l->state = herd_xcalloc(1, sizeof *st)))
        return HERD_ERR_NOMEM;
    size_t c = (size_t)l->in_shape[0].c, bytes = c * sizeof(float);
    if (!st->save_mean && !(st->save_mean = be->alloc(bytes)))
        return HERD_ERR_NOMEM; /* the allocator said why */
    if (!st->save_invstd && !(st->save_invstd = be->alloc(bytes)))
        return HERD_ERR_NOMEM;
    if (!st->red && !(st->red = be->alloc((2 * c + 1) * sizeof(double))))
        return HERD_ERR_NOMEM;
    if (!be->host_memory && !st->host && !(st->host = herd_xcalloc(2 * c + 1, sizeof(double))))
        return HERD_ERR_NOMEM;
    return HERD_OK;
}

static bool bn_sync(const herd_run_ctx *ctx)
{
    return ctx->training && ctx->bn_group.sum_f64 && ctx->bn_group.ranks > 1;
}

/* The split ops on the layer's format: they serve synchronised BN, and bf16
 * activations, whose local BN is the same steps back to back. */
static bool bn_bf16(const herd_layer *l) { return l->out_format == HERD_ACT_BF16; }

static herd_status split_stats(const herd_layer *l, const herd_run_ctx *ctx, const float *x,
                               const double *sum, int64_t count, double *out)
{
    herd_shape s = l->in_shape[0];
    int n = l->batch, c = s.c, hw = s.h * s.w;
    if (bn_bf16(l))
        return ctx->be->bf16_acts->bn_stats(n, c, hw, herd_bf16(x), sum, count, out);
    return ctx->be->bn_stats(n, c, hw, x, sum, count, out);
}

static herd_status split_apply(const herd_layer *l, const herd_run_ctx *ctx, const float *x,
                               const double *sum, const double *sq, int64_t count, float *y)
{
    bn_state *st = l->state;
    herd_shape s = l->in_shape[0];
    int n = l->batch, c = s.c, hw = s.h * s.w;
    const float *gamma = herd_layer_param(l, ctx, 0), *beta = herd_layer_param(l, ctx, 1);
    float *rmean = herd_layer_param(l, ctx, 2), *rvar = herd_layer_param(l, ctx, 3);
    float momentum = l->spec.momentum, eps = l->spec.eps;
    if (bn_bf16(l))
        return ctx->be->bf16_acts->bn_apply_train(n, c, hw, herd_bf16(x), gamma, beta, sum, sq,
                                                  count, (uint16_t *)y, st->save_mean,
                                                  st->save_invstd, rmean, rvar, momentum, eps);
    return ctx->be->bn_apply_train(n, c, hw, x, gamma, beta, sum, sq, count, y, st->save_mean,
                                   st->save_invstd, rmean, rvar, momentum, eps);
}

/* Adds n per-channel sums (backend memory) over the group, and with `count` the
 * batch's count (a host value) in slot n. The CPU reduces them where they are; a
 * device's go to the host and back. */
static herd_status group_sum(const bn_state *st, const herd_run_ctx *ctx, double *vals, int n,
                             double *count)
{
    const herd_backend *be = ctx->be;
    const herd_group_sum *group = &ctx->bn_group;
    double *h = be->host_memory ? vals : st->host;
    size_t bytes = (size_t)n * sizeof(double);
    if (!be->host_memory)
        HERD_TRY(be->memcpy_d2h(h, vals, bytes));
    if (count)
        h[n] = *count;
    HERD_TRY(group->sum_f64(group->group, h, n + (count != NULL)));
    if (count)
        *count = h[n];
    return be->host_memory ? HERD_OK : be->memcpy_h2d(vals, h, bytes);
}

/* Training statistics of one value per channel are undefined (a variance of one value);
 * the backend would refuse them without saying which layer or why a batch is that small. */
static herd_status bn_check_values(const herd_layer *l, int64_t values, bool sync)
{
    if (values >= 2)
        return HERD_OK;
    return HERD_INPUT_ERR(HERD_ERR_INVALID_ARG,
                          "batch norm '%s' gets %lld value%s per channel in training (%d sample%s "
                          "of %dx%d%s), and its statistics need 2 or more. A batch this small is "
                          "usually an epoch's last, partial one (training samples that the "
                          "global batch does not divide): pick a --batch-size or --train-samples "
                          "that leaves 2 or more samples per rank and micro-batch in it%s",
                          l->spec.name, (long long)values, values == 1 ? "" : "s", l->batch,
                          l->batch == 1 ? "" : "s",
                          l->in_shape[0].h, l->in_shape[0].w, sync ? " on every rank" : "",
                          sync ? "" : ", or add --sync-bn (statistics over every rank's samples)");
}

/* Forward in split steps: sum of x (and the local count, so ranks whose batches
 * differ in size still agree on the mean), allreduce when synchronised, squared
 * deviations from the mean, allreduce, normalise. Two passes as in local BN, so one
 * rank gives exactly the local result. */
static herd_status bn_forward_split(herd_layer *l, const herd_run_ctx *ctx, const float *x,
                                    float *y, bool sync)
{
    bn_state *st = l->state;
    int c = l->in_shape[0].c;
    double *sum = st->red, *sq = st->red + c + 1;
    HERD_TRY(split_stats(l, ctx, x, NULL, 0, sum));
    double values = (double)l->batch * l->in_shape[0].h * l->in_shape[0].w;
    if (sync)
        HERD_TRY(group_sum(st, ctx, sum, c, &values));
    int64_t count = llround(values);
    HERD_TRY(bn_check_values(l, count, sync)); /* a synchronised count is every rank's */
    HERD_TRY(split_stats(l, ctx, x, sum, count, sq));
    if (sync)
        HERD_TRY(group_sum(st, ctx, sq, c, NULL));
    HERD_TRY(split_apply(l, ctx, x, sum, sq, count, y));
    st->count = count;
    st->synced = sync;
    return HERD_OK;
}

static herd_status bn_forward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                              float *y)
{
    bn_state *st = l->state;
    herd_shape s = l->in_shape[0];
    int n = l->batch, c = s.c, hw = s.h * s.w;
    if (ctx->training && !bn_sync(ctx))
        HERD_TRY(bn_check_values(l, (int64_t)n * hw, false));
    if (bn_sync(ctx) || (ctx->training && bn_bf16(l)))
        return bn_forward_split(l, ctx, x[0], y, bn_sync(ctx));
    st->synced = false;
    const float *gamma = herd_layer_param(l, ctx, 0), *beta = herd_layer_param(l, ctx, 1);
    float *rmean = herd_layer_param(l, ctx, 2), *rvar = herd_layer_param(l, ctx, 3);
    if (bn_bf16(l))
        return ctx->be->bf16_acts->bn_fwd_infer(n, c, hw, herd_bf16(x[0]), gamma, beta,
                                                (uint16_t *)y, rmean, rvar, l->spec.eps);
    if (ctx->training)
        return ctx->be->bn_fwd_train(n, c, hw, x[0], gamma, beta, y, st->save_mean,
                                     st->save_invstd, rmean, rvar, l->spec.momentum, l->spec.eps);
    return ctx->be->bn_fwd_infer(n, c, hw, x[0], gamma, beta, y, rmean, rvar, l->spec.eps);
}

/* Backward's first split step: dgamma/dbeta from this batch (with ctx->grad_beta), and
 * the per-channel sums of dy and dy*(x - mean) into st->red (2c doubles). */
static herd_status bwd_reduce(herd_layer *l, const herd_run_ctx *ctx, const float *x,
                              const float *dy)
{
    bn_state *st = l->state;
    const herd_backend *be = ctx->be;
    herd_shape s = l->in_shape[0];
    int n = l->batch, c = s.c, hw = s.h * s.w;
    float *dgamma = herd_layer_grad(l, ctx, 0), *dbeta = herd_layer_grad(l, ctx, 1);
    if (bn_bf16(l))
        return be->bf16_acts->bn_bwd_reduce(n, c, hw, herd_bf16(x), herd_bf16(dy),
                                            st->save_mean, st->save_invstd, st->red, st->red + c,
                                            dgamma, dbeta, ctx->grad_beta);
    return be->bn_bwd_reduce(n, c, hw, x, dy, st->save_mean, st->save_invstd, st->red,
                             st->red + c, dgamma, dbeta, ctx->grad_beta);
}

/* The second: dx from the sums of dy and dy*(x - mean) in `sums` (2c doubles) over
 * st->count values per channel. */
static herd_status bwd_apply(herd_layer *l, const herd_run_ctx *ctx, const float *x,
                             const float *dy, const double *sums, float *dx)
{
    bn_state *st = l->state;
    const herd_backend *be = ctx->be;
    herd_shape s = l->in_shape[0];
    int n = l->batch, c = s.c, hw = s.h * s.w;
    const float *gamma = herd_layer_param(l, ctx, 0);
    if (bn_bf16(l))
        return be->bf16_acts->bn_bwd_apply(n, c, hw, herd_bf16(x), herd_bf16(dy), gamma,
                                           st->save_mean, st->save_invstd, sums, sums + c,
                                           st->count, (uint16_t *)dx);
    return be->bn_bwd_apply(n, c, hw, x, dy, gamma, st->save_mean, st->save_invstd, sums,
                            sums + c, st->count, dx);
}

/* Backward in split steps: dgamma/dbeta from this rank's batch (the gradient
 * allreduce averages them like any parameter gradient); dx needs the sums of dy and
 * dy*(x - mean) over the global batch when synchronised. */
static herd_status bn_backward_split(herd_layer *l, const herd_run_ctx *ctx, const float *x,
                                     const float *dy, float *dx)
{
    bn_state *st = l->state;
    const herd_group_sum *group = &ctx->bn_group;
    HERD_TRY(bwd_reduce(l, ctx, x, dy));
    /* No input gradient (BN on the model input): every rank runs the same model, so
     * all of them skip this allreduce together. */
    if (!dx)
        return HERD_OK;
    if (st->synced && (!group->sum_f64 || group->ranks <= 1))
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "batchnorm '%s': forward used synchronised statistics but backward has "
                        "no multi-rank bn_group; pass the same run context to both",
                        l->spec.name);
    if (st->synced)
        HERD_TRY(group_sum(st, ctx, st->red, 2 * l->in_shape[0].c, NULL));
    return bwd_apply(l, ctx, x, dy, st->red, dx);
}

static herd_status bn_backward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                               const float *y, const float *dy, float *const *dx)
{
    (void)y;
    bn_state *st = l->state;
    herd_shape s = l->in_shape[0];
    if (st->synced || bn_bf16(l))
        return bn_backward_split(l, ctx, x[0], dy, dx[0]);
    /* dx[0] is NULL when BN reads the model input: the backend then skips dx. */
    return ctx->be->bn_bwd(l->batch, s.c, s.h * s.w, x[0], dy, herd_layer_param(l, ctx, 0),
                           st->save_mean, st->save_invstd, dx[0], herd_layer_grad(l, ctx, 0),
                           herd_layer_grad(l, ctx, 1), ctx->grad_beta);
}

/* --- Slices of one batch (nn/slices.h): each slice a model of its own, the statistics
 * the whole batch's, added by sums->sum_rows in the batch's order of slices. */

/* n doubles of backend memory into host `row`. */
static herd_status to_host(const herd_backend *be, double *row, const double *d, int n)
{
    if (be->host_memory) {
        memcpy(row, d, (size_t)n * sizeof *d);
        return HERD_OK;
    }
    return be->memcpy_d2h(row, d, (size_t)n * sizeof *d);
}

static herd_status to_backend(const herd_backend *be, double *d, const double *row, int n)
{
    if (be->host_memory) {
        memcpy(d, row, (size_t)n * sizeof *d);
        return HERD_OK;
    }
    return be->memcpy_h2d(d, row, (size_t)n * sizeof *d);
}

extern const herd_layer_ops herd_layer_batchnorm;

bool herd_layer_is_batchnorm(const herd_layer *l) { return l->ops == &herd_layer_batchnorm; }

/* The running statistics are updated once, with the batch's statistics: every slice's
 * apply starts from the values the first found, which st0->keep holds. */
herd_status herd_batchnorm_slices_forward(herd_layer *const *ls, int n, const herd_run_ctx *ctx,
                                          const float *const *x, float *const *y,
                                          herd_slice_sums *sums)
{
    const herd_backend *be = ctx->be;
    herd_layer *l0 = ls[0];
    bn_state *st0 = l0->state;
    herd_shape s = l0->in_shape[0];
    int c = s.c;
    double *rows = sums->rows, *g = rows + (size_t)n * (c + 1);
    /* Per channel: the sum of x, then (after the batch's mean) of squared deviations. */
    double *sum = st0->red, *sq = st0->red + c + 1;
    for (int i = 0; i < n; i++) {
        bn_state *st = ls[i]->state;
        HERD_TRY(split_stats(ls[i], ctx, x[i], NULL, 0, st->red));
        HERD_TRY(to_host(be, rows + (size_t)i * (c + 1), st->red, c));
        rows[(size_t)i * (c + 1) + c] = (double)ls[i]->batch * s.h * s.w;
    }
    HERD_TRY(sums->sum_rows(sums->user, rows, c + 1, g));
    int64_t count = llround(g[c]);
    HERD_TRY(to_backend(be, sum, g, c));
    for (int i = 0; i < n; i++) {
        bn_state *st = ls[i]->state;
        double *mine = i == 0 ? sq : st->red + c + 1;
        HERD_TRY(split_stats(ls[i], ctx, x[i], sum, count, mine));
        HERD_TRY(to_host(be, rows + (size_t)i * c, mine, c));
    }
    HERD_TRY(sums->sum_rows(sums->user, rows, c, g));
    HERD_TRY(to_backend(be, sq, g, c));
    float *rmean = herd_layer_param(l0, ctx, 2), *rvar = herd_layer_param(l0, ctx, 3);
    if (!st0->keep && !(st0->keep = be->alloc(2 * (size_t)c * sizeof(float))))
        return HERD_ERR_NOMEM; /* the allocator said why */
    HERD_TRY(be->copy((size_t)c, rmean, st0->keep));
    HERD_TRY(be->copy((size_t)c, rvar, st0->keep + c));
    for (int i = 0; i < n; i++) {
        bn_state *st = ls[i]->state;
        if (i > 0) {
            HERD_TRY(be->copy((size_t)c, st0->keep, rmean));
            HERD_TRY(be->copy((size_t)c, st0->keep + c, rvar));
        }
        HERD_TRY(split_apply(ls[i], ctx, x[i], sum, sq, count, y[i]));
        st->count = count;
        st->synced = true;
    }
    return HERD_OK;
}

herd_status herd_batchnorm_slices_backward(herd_layer *const *ls, int n, const herd_run_ctx *ctx,
                                           const float *const *x, const float *const *dy,
                                           float *const *dx, herd_slice_sums *sums, int layer)
{
    const herd_backend *be = ctx->be;
    int c = ls[0]->in_shape[0].c;
    double *rows = sums->rows, *g = rows + (size_t)n * 2 * c;
    for (int i = 0; i < n; i++) {
        bn_state *st = ls[i]->state;
        HERD_TRY(bwd_reduce(ls[i], ctx, x[i], dy[i]));
        HERD_TRY(sums->grads_ready(sums->user, i, layer, ctx->grads));
        HERD_TRY(to_host(be, rows + (size_t)i * 2 * c, st->red, 2 * c));
    }
    if (!dx[0]) /* batch norm on the model input: no slice has an input gradient */
        return HERD_OK;
    HERD_TRY(sums->sum_rows(sums->user, rows, 2 * c, g));
    bn_state *st0 = ls[0]->state;
    HERD_TRY(to_backend(be, st0->red, g, 2 * c));
    for (int i = 0; i < n; i++)
        HERD_TRY(bwd_apply(ls[i], ctx, x[i], dy[i], st0->red, dx[i]));
    return HERD_OK;
}

static void bn_destroy(herd_layer *l, const herd_backend *be)
{
    bn_state *st = l->state;
    if (st) {
        be->free(st->save_mean);
        be->free(st->save_invstd);
        be->free(st->red);
        be->free(st->keep);
        free(st->host);
    }
    free(st);
    l->state = NULL;
}

static double bn_flops(const herd_layer *l) { return 2.0 * herd_shape_per_sample(l->in_shape[0]); }

static const char *const batchnorm_keys[] = {"eps", "momentum", NULL};

const herd_layer_ops herd_layer_batchnorm = {
    .type = "batchnorm", .n_inputs = 1, .setup = bn_setup, .init_params = bn_init,
    .reshape = bn_reshape, .forward = bn_forward, .backward = bn_backward, .destroy = bn_destroy,
    .flops = bn_flops,
    .keys = batchnorm_keys, .bf16 = HERD_BF16_KEEPS,
};
