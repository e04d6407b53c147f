/* A micro-batch whose last layer runs in chunks of samples (--loss-chunk,
 * nn/loss_chunks.h): every other layer's forward, then per chunk the last layer's
 * forward, the loss and at once the last layer's backward, then the other layers'
 * backward. The forward phase holds the chunks (the last layer's backward runs there).
 * Evaluation's loss likewise (herd_eval_loss). */
#include "train/step.h"

#include "core/error.h"
#include "nn/loss_chunks.h"
#include "nn/xent_split.h"

herd_status herd_step_head_chunks(herd_model *m, herd_step_plan *p, herd_run_ctx *ctx,
                                  const float *x, const int32_t *labels, int samples,
                                  float label_smoothing, float *dlogits, herd_step_stats *s)
{
    herd_model_backward_begin(m);
    int chunk = herd_model_head_chunk(m);
    /* --deterministic's whole passes: the first chunk writes the last layer's exact sums
     * afresh, the others add to them. */
    herd_exact_linear *e = p->exact_linear;
    bool fresh = e && e->fresh;
    for (int first = 0; first < samples; first += chunk) {
        int n = samples - first < chunk ? samples - first : chunk;
        const float *logits;
        HERD_TRY(herd_model_head_forward(m, ctx, x, first, n, &logits));
        /* The mean over the micro-batch's rows; --deterministic's whole passes take it a
         * slice at a time, each summed exactly (herd_step_loss). */
        float share = herd_step_whole_passes(p) ? 1.0f : (float)n / (float)samples;
        HERD_TRY(herd_step_loss(m, p, logits, labels + (size_t)first * m->positions,
                                n * m->positions, label_smoothing, share, dlogits, s));
        if (e)
            e->fresh = fresh && first == 0;
        herd_status st = herd_model_head_backward(m, ctx, x, first, n, dlogits, first > 0,
                                                  first + n >= samples);
        if (e)
            e->fresh = fresh;
        HERD_TRY(st);
    }
    return HERD_OK;
}

herd_status herd_chunked_micro_step(herd_model *m, herd_step_plan *p, herd_run_ctx *ctx,
                                    const herd_batch *b, int micro, int n_micro,
                                    float label_smoothing, herd_step_stats *s, double t0)
{
    HERD_TRY(herd_model_forward_body(m, ctx, b->x));
    HERD_TRY(herd_step_params_ready(p)); /* buckets of layers without parameters */
    /* The buckets start from the last layer's backward, inside the chunks. */
    if (micro == n_micro - 1 && !p->exact)
        herd_step_arm_reduction(p, m, n_micro, ctx);
    HERD_TRY(herd_step_head_chunks(m, p, ctx, b->x, b->labels, b->n, label_smoothing,
                                   herd_step_dlogits(m, p), s));
    s->samples += b->n;
    double t1;
    HERD_TRY(herd_step_forward_done(p, s, &t1));
    HERD_TRY(herd_model_backward_body(m, ctx, b->x));
    if (p->exact && !herd_step_whole_passes(p))
        HERD_TRY(herd_exact_sum_add(p->exact, m));
    return herd_step_backward_done(p, s, t0, t1);
}

herd_status herd_eval_loss(herd_model *m, const herd_run_ctx *ctx, const float *x,
                           const int32_t *labels, int n, double *loss, long *correct)
{
    HERD_TRY(herd_model_forward_body(m, ctx, x));
    *loss = 0;
    *correct = 0;
    int chunk = herd_model_head_chunk(m); /* the batch, unless the last layer runs in chunks */
    for (int first = 0; first < n; first += chunk) {
        int k = n - first < chunk ? n - first : chunk;
        const float *logits;
        double part = 0;
        long hits = 0;
        HERD_TRY(herd_model_head_forward(m, ctx, x, first, k, &logits));
        HERD_TRY(herd_model_xent(m, k * m->positions, logits, labels + (size_t)first * m->positions,
                                 0.0f, NULL, &part, &hits));
        *loss += part;
        *correct += hits;
    }
    return HERD_OK;
}
