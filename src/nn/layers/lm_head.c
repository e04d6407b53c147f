/* The tied language-model head: logits = h Wte^T at every position, Wte the token
 * table of an earlier embedding layer ("tie"), shared, not copied: the head declares
 * no tensor of its own, and the embedding's backward (which runs after the head's)
 * adds its part to the gradient the head wrote. Output 1 x T x vocab. Under tensor
 * parallelism the table's rows are split: each rank gives the logits of its part of the
 * vocabulary (the model's class_first, class_count; the loss is vocabulary-parallel,
 * nn/xent_split.c), and the input's gradient is summed over the group. */
#include <string.h>

#include "nn/layers/tokens.h"
#include "nn/tensor_split.h"

static herd_status lm_head_setup(herd_layer *l, herd_model *m)
{
    HERD_TRY(herd_token_input(l, 0));
    int self = (int)(l - m->layers);
    herd_layer *emb = NULL;
    for (int i = 0; i < self && !emb; i++)
        if (strcmp(m->layers[i].spec.name, l->spec.tie) == 0)
            emb = &m->layers[i];
    if (!emb || strcmp(emb->spec.type, "embedding") != 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "lm_head layer '%s': \"tie\" names '%s', which is not an embedding layer "
                        "before it%s", l->spec.name, l->spec.tie,
                        m->layer_offset > 0 || m->open_output
                            ? " in this pipeline stage (a tied head needs its embedding's stage)"
                            : "");
    if (emb->spec.out != l->in_shape[0].w)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "lm_head layer '%s' reads width %d, but its embedding '%s' has width %d",
                        l->spec.name, l->in_shape[0].w, emb->spec.name, emb->spec.out);
    l->shared_view = emb->first_tensor; /* the token table, the embedding's first tensor */
    emb->grad_shared = true;
    int64_t first, count;
    herd_split_view_range(&m->views[l->shared_view], &first, &count);
    if (l == &m->layers[m->n_layers - 1] && emb->spec.vocab == m->classes) {
        m->class_first = (int)first;
        m->class_count = (int)count;
    }
    l->out_shape = (herd_shape){1, 1, l->in_shape[0].h, (int)count};
    if (m->tp.size > 1)
        l->tp_sum_backward = herd_shape_per_sample(l->in_shape[0]);
    return HERD_OK;
}

static herd_status lm_head_forward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                   float *y)
{
    int rows = l->batch * l->in_shape[0].h, c = l->in_shape[0].w, v = l->out_shape.w;
    const float *wte = ctx->params + ctx->views[l->shared_view].offset;
    return ctx->be->gemm(false, true, rows, v, c, 1.0f, x[0], c, wte, c, 0.0f, y, v);
}

static herd_status lm_head_backward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                    const float *y, const float *dy, float *const *dx)
{
    (void)y;
    int rows = l->batch * l->in_shape[0].h, c = l->in_shape[0].w, v = l->out_shape.w;
    size_t off = ctx->views[l->shared_view].offset;
    const herd_backend *be = ctx->be;
    HERD_TRY(be->gemm(true, false, v, c, rows, 1.0f, dy, v, x[0], c, ctx->grad_beta,
                      ctx->grads + off, c));
    if (dx[0]) {
        HERD_TRY(be->gemm(false, false, rows, c, v, 1.0f, dy, v, ctx->params + off, c, 0.0f, dx[0],
                          c));
        if (ctx->tp)
            HERD_TRY(ctx->tp->sum(ctx->tp->group, dx[0], (size_t)rows * c));
    }
    return HERD_OK;
}

static double lm_head_flops(const herd_layer *l)
{
    return 2.0 * l->in_shape[0].h * l->in_shape[0].w * l->out_shape.w;
}

static const char *const lm_head_keys[] = {"tie", NULL};

const herd_layer_ops herd_layer_lm_head = {
    .type = "lm_head", .n_inputs = 1, .setup = lm_head_setup, .forward = lm_head_forward,
    .backward = lm_head_backward, .flops = lm_head_flops, .keys = lm_head_keys,
};
