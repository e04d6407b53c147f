/* The tied language-model head: logits = h Wte^T at every position, Wte the token
 * table of an earlier embedding layer ("tie"), shared, not copied: the head declares
 * no tensor of its own, and the embedding's backward (which runs after the head's)
 * adds its part to the gradient the head wrote. On a pipeline stage without the
 * embedding the head holds a copy of the table instead, kept equal by the pipeline
 * (train/pipeline_tied.c), as Megatron-LM does. Output 1 x T x vocab. Under tensor
 * parallelism the table's rows are split: each rank gives the logits of its part of the
 * vocabulary (the model's class_first, class_count; the loss is vocabulary-parallel,
 * nn/xent_split.c), and the input's gradient is summed over the group. */
#include <string.h>

#include "nn/layers/tokens.h"
#include "nn/tensor_split.h"

/* The head's output over the table's rows it holds (the model's classes when they are
 * the vocabulary), and its sums under tensor parallelism. */
static void set_output(herd_layer *l, herd_model *m, bool classes)
{
    int64_t first, count;
    herd_split_view_range(&m->views[l->shared_view], &first, &count);
    if (classes && l == &m->layers[m->n_layers - 1]) {
        m->class_first = (int)first;
        m->class_count = (int)count;
    }
    l->out_shape = (herd_shape){1, 1, l->in_shape[0].h, (int)count};
    if (m->tp.size > 1)
        l->tp_sum_backward = herd_shape_per_sample(l->in_shape[0]);
}

/* The stage's own copy of the token table (vocabulary = the model's classes), declared
 * as the embedding declares it: split alike, decayed alike. */
static herd_status tied_copy_setup(herd_layer *l, herd_model *m)
{
    int64_t wte[2] = {m->classes, l->in_shape[0].w};
    HERD_TRY(herd_layer_checked_size(l, "copy of the token table", 2, wte, NULL));
    l->shared_view = herd_model_add_split_tensor(m, l, "wte", 2, wte, 0, 1, 0);
    set_output(l, m, true);
    return HERD_OK;
}

static herd_status lm_head_setup(herd_layer *l, herd_model *m)
{
    HERD_TRY(herd_token_input(l, 0));
    int self = (int)(l - m->layers);
    herd_layer *emb = NULL;
    for (int i = 0; i < self && !emb; i++)
        if (strcmp(m->layers[i].spec.name, l->spec.tie) == 0)
            emb = &m->layers[i];
    /* A pipeline stage past the first: the table lives on the first stage, and this
     * stage keeps a copy of its own (the pipeline sums the two gradients, pipeline.h). */
    if (!emb && m->layer_offset > 0)
        return tied_copy_setup(l, m);
    if (!emb || strcmp(emb->spec.type, "embedding") != 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "lm_head layer '%s': \"tie\" names '%s', which is not an embedding layer "
                        "before it", l->spec.name, l->spec.tie);
    if (emb->spec.out != l->in_shape[0].w)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "lm_head layer '%s' reads width %d, but its embedding '%s' has width %d",
                        l->spec.name, l->in_shape[0].w, emb->spec.name, emb->spec.out);
    l->shared_view = emb->first_tensor; /* the token table, the embedding's first tensor */
    emb->grad_shared = true;
    set_output(l, m, emb->spec.vocab == m->classes);
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
