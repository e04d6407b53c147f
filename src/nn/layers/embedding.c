/* Token and position embedding (GPT-2's wte and wpe): the model input is 1 x T x 1
 * token ids (floats holding whole numbers, backend.h), the output 1 x T x width. Under
 * tensor parallelism the token table is split by rows (vocabulary-parallel, as the tied
 * head reads it): each rank looks up the ids it holds, part 0 adds the positions, and
 * the output is summed over the group; backward needs no exchange. */
#include "nn/layers/tokens.h"
#include "nn/tensor_split.h"

static herd_status embedding_setup(herd_layer *l, herd_model *m)
{
    herd_shape in = l->in_shape[0];
    const herd_layer_spec *s = &l->spec;
    if (s->vocab <= 0 || s->context <= 0 || s->out <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "embedding layer '%s' needs \"vocab\", \"context\" "
                        "and \"out\" (the width)", s->name);
    if (in.c != 1 || in.w != 1 || in.h > s->context)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "embedding layer '%s' reads a sequence of at most %d token ids per sample "
                        "(input 1 x T x 1, T <= \"context\"), but the input is %dx%dx%d",
                        s->name, s->context, in.c, in.h, in.w);
    int64_t wte[2] = {s->vocab, s->out}, wpe[2] = {s->context, s->out};
    HERD_TRY(herd_layer_checked_size(l, "token table", 2, wte, NULL));
    HERD_TRY(herd_layer_checked_size(l, "position table", 2, wpe, NULL));
    herd_model_add_split_tensor(m, l, "wte", 2, wte, 0, 1, 0);
    herd_model_add_tensor(m, l, "wpe", 2, wpe, 0, 0);
    l->out_shape = (herd_shape){1, 1, in.h, s->out};
    if (m->tp.size > 1)
        l->tp_sum_forward = herd_shape_per_sample(l->out_shape);
    return HERD_OK;
}

/* GPT-2's: normal with standard deviation 0.02. */
static void embedding_init(herd_layer *l, herd_model *m, herd_rng *rng)
{
    for (int k = 0; k < 2; k++) {
        float *w = herd_view_data(m, l, k);
        size_t n = herd_layer_view(l, m, k)->numel;
        for (size_t i = 0; i < n; i++)
            w[i] = 0.02f * herd_rng_normal(rng);
    }
}

static herd_status embedding_forward(herd_layer *l, const herd_run_ctx *ctx,
                                     const float *const *x, float *y)
{
    HERD_TRY(herd_token_op(l, ctx->be, ctx->be->embedding_fwd != NULL, "embedding"));
    int64_t first, count;
    herd_split_view_range(&ctx->views[l->first_tensor], &first, &count);
    bool positions = !ctx->tp || ctx->tp->rank == 0;
    HERD_TRY(ctx->be->embedding_fwd(l->batch, l->in_shape[0].h, l->spec.out, l->spec.vocab,
                                    (int)first, (int)count, x[0], herd_layer_param(l, ctx, 0),
                                    positions ? herd_layer_param(l, ctx, 1) : NULL, y));
    if (!ctx->tp)
        return HERD_OK;
    return ctx->tp->sum(ctx->tp->group, y, (size_t)l->batch * l->in_shape[0].h * l->spec.out);
}

static herd_status embedding_backward(herd_layer *l, const herd_run_ctx *ctx,
                                      const float *const *x, const float *y, const float *dy,
                                      float *const *dx)
{
    (void)y, (void)dx; /* token ids have no gradient */
    HERD_TRY(herd_token_op(l, ctx->be, ctx->be->embedding_bwd != NULL, "embedding"));
    /* A tied head has written the token table's gradient already (with grad_beta). */
    float beta_wte = l->grad_shared ? 1.0f : ctx->grad_beta;
    int64_t first, count;
    herd_split_view_range(&ctx->views[l->first_tensor], &first, &count);
    return ctx->be->embedding_bwd(l->batch, l->in_shape[0].h, l->spec.out, (int)first,
                                  (int)count, l->spec.context, x[0], dy,
                                  herd_layer_grad(l, ctx, 0), beta_wte,
                                  herd_layer_grad(l, ctx, 1), ctx->grad_beta);
}

static double embedding_flops(const herd_layer *l)
{
    return (double)herd_shape_per_sample(l->out_shape); /* one add per value */
}

static const char *const embedding_keys[] = {"vocab", "context", "out", NULL};

const herd_layer_ops herd_layer_embedding = {
    .type = "embedding", .n_inputs = 1, .setup = embedding_setup, .init_params = embedding_init,
    .forward = embedding_forward, .backward = embedding_backward, .flops = embedding_flops,
    .keys = embedding_keys,
};
