/* The last layer in chunks of samples (loss_chunks.h). */
#include "nn/loss_chunks.h"

#include <string.h>

#include "core/error.h"
#include "core/trace.h"

static herd_layer *head_of(herd_model *m) { return &m->layers[m->n_layers - 1]; }

herd_status herd_model_set_loss_chunk(herd_model *m, int samples)
{
    if (samples < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "--loss-chunk must be 0 (off) or a number of samples, got %d", samples);
    const herd_layer *head = head_of(m);
    const char *type = head->ops->type;
    if (samples > 0 && strcmp(type, "linear") != 0 && strcmp(type, "lm_head") != 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "--loss-chunk: the last layer of '%s', '%s', is a "
                        "%s layer; only a linear or lm_head last layer runs in chunks",
                        m->name, head->spec.name, type);
    m->loss_chunk = samples;
    return HERD_OK;
}

bool herd_model_head_chunked(const herd_model *m)
{
    return m->batch > 0 && m->layers[m->n_layers - 1].batch < m->batch;
}

int herd_model_head_chunk(const herd_model *m) { return m->layers[m->n_layers - 1].batch; }

herd_status herd_model_forward_body(herd_model *m, const herd_run_ctx *ctx, const float *x)
{
    return herd_model_forward_layers(m, ctx, x, m->n_layers - 1);
}

/* The chunk's rows of the head's input: fp32 activations, a sample's values together
 * (the whole batch in any format). */
static herd_status chunk_input(herd_model *m, const float *x, int first, int n, const float **in)
{
    herd_layer *head = head_of(m);
    *in = herd_model_layer_input(m, x, m->n_layers - 1, 0);
    if (first == 0 && n == m->batch)
        return HERD_OK;
    if (head->in_format[0] != HERD_ACT_F32)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "--loss-chunk: the last layer '%s' of '%s' reads "
                        "bf16 activations, which are not cut by samples; drop --loss-chunk",
                        head->spec.name, m->name);
    *in += (size_t)first * herd_shape_per_sample(head->in_shape[0]);
    return HERD_OK;
}

/* Runs op with the head's batch set to this chunk's n samples (the reshape's chunk size
 * is put back after). */
static herd_status with_batch(herd_layer *head, int n, herd_status st_of_call(void *), void *arg)
{
    int chunk = head->batch;
    head->batch = head->out_shape.n = n;
    herd_status st = st_of_call(arg);
    head->batch = head->out_shape.n = chunk;
    return st;
}

typedef struct call {
    herd_layer *head;
    const herd_run_ctx *ctx;
    const float *in, *y, *dy;
    float *out, *din;
} call;

static herd_status call_forward(void *arg)
{
    call *c = arg;
    const float *in[HERD_MAX_INPUTS] = {c->in};
    return c->head->ops->forward(c->head, c->ctx, in, c->out);
}

static herd_status call_backward(void *arg)
{
    call *c = arg;
    const float *in[HERD_MAX_INPUTS] = {c->in};
    float *din[HERD_MAX_INPUTS] = {c->din};
    return c->head->ops->backward(c->head, c->ctx, in, c->y, c->dy, din);
}

herd_status herd_model_head_forward(herd_model *m, const herd_run_ctx *ctx, const float *x,
                                    int first, int n, const float **logits)
{
    herd_layer *head = head_of(m);
    int i = m->n_layers - 1;
    if (n <= 0 || n > head->batch || first < 0 || first + n > m->batch)
        return HERD_ERR(HERD_ERR_INTERNAL, "loss chunk: samples %d..%d of a batch of %d in chunks "
                        "of %d", first, first + n - 1, m->batch, head->batch);
    if (first == 0 && ctx->before_forward) /* once: ZeRO's gather of its parameters */
        HERD_TRY(ctx->before_forward(ctx->before_user, i));
    call c = {.head = head, .ctx = ctx, .out = m->acts[i]};
    HERD_TRY(chunk_input(m, x, first, n, &c.in));
    double t0 = herd_trace_start(ctx->trace);
    HERD_TRY(with_batch(head, n, call_forward, &c));
    herd_trace_end(ctx->trace, HERD_TL_FWD_LAYER, head->spec.name, t0);
    if (ctx->between_layers)
        ctx->between_layers(ctx->between_user);
    *logits = m->acts[i];
    return HERD_OK;
}

herd_status herd_model_head_backward(herd_model *m, const herd_run_ctx *ctx, const float *x,
                                     int first, int n, const float *dlogits, bool accumulate,
                                     bool last)
{
    herd_layer *head = head_of(m);
    int i = m->n_layers - 1;
    herd_layer_io io;
    herd_model_backward_io(m, i, x, dlogits, &io);
    if (io.via_scratch[0]) /* the last layer's backward runs first: nothing wrote it yet */
        return HERD_ERR(HERD_ERR_INTERNAL, "loss chunk: the input gradient of '%s' is already "
                        "written", head->spec.name);
    herd_run_ctx chunk_ctx = *ctx;
    if (accumulate)
        chunk_ctx.grad_beta = 1.0f;
    call c = {.head = head, .ctx = &chunk_ctx, .y = m->acts[i], .dy = dlogits};
    HERD_TRY(chunk_input(m, x, first, n, &c.in));
    if (io.din[0])
        c.din = io.din[0] + (size_t)first * herd_shape_per_sample(head->in_shape[0]);
    double t0 = herd_trace_start(ctx->trace);
    herd_status st = m->needs_grad[i] ? with_batch(head, n, call_backward, &c) : HERD_OK;
    herd_trace_end(ctx->trace, HERD_TL_BWD_LAYER, head->spec.name, t0);
    if (st == HERD_OK && last && ctx->after_backward)
        st = ctx->after_backward(ctx->hook_user, i);
    if (ctx->between_layers)
        ctx->between_layers(ctx->between_user);
    HERD_TRY(st);
    return last ? herd_model_backward_done(m, i, &io) : HERD_OK;
}

herd_status herd_model_backward_body(herd_model *m, const herd_run_ctx *ctx, const float *x)
{
    return herd_model_backward_layers(m, ctx, x, NULL, m->n_layers - 2);
}
