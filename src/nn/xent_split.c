/* Vocabulary-parallel cross-entropy: each rank summarises its part of every row (its
 * largest logit, the sum of exponentials below it, the label's logit if it holds it),
 * one allgather brings every part's summary to every rank, and each combines them in
 * rank order, so all get the same log-sum-exp, loss and hits; the gradient of each
 * part then needs no further exchange (Megatron-LM's scheme, with one exchange instead
 * of three). */
#include "nn/xent_split.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"

/* Row i's log-sum-exp, loss and whether the argmax is the label, from every part. */
static void combine_row(const double *all, int parts, size_t stride, int i, int classes,
                        float smoothing, double *lse, double *loss, int32_t label, long *hit)
{
    double top = -INFINITY, best_class = 0, target = 0, sum_z = 0;
    for (int t = 0; t < parts; t++) {
        const double *s = all + (size_t)t * stride + (size_t)i * HERD_XENT_STATS;
        if (s[0] > top) /* ties keep the lower class, as one softmax_xent does */
            top = s[0], best_class = s[1];
        if (s[5] != 0)
            target = s[3];
        sum_z += s[4];
    }
    double sum_exp = 0;
    for (int t = 0; t < parts; t++) {
        const double *s = all + (size_t)t * stride + (size_t)i * HERD_XENT_STATS;
        sum_exp += s[2] * exp(s[0] - top);
    }
    *lse = top + log(sum_exp);
    double off_target = (double)(smoothing / (float)classes);
    *loss = *lse - (1.0 - smoothing) * target - off_target * sum_z;
    *hit = (int32_t)best_class == label;
}

herd_status herd_model_xent(const herd_model *m, int n, const float *logits,
                            const int32_t *labels, float smoothing, float *dlogits,
                            double *loss_sum, long *correct)
{
    const herd_backend *be = m->be;
    if (m->tp.size <= 1 || m->class_count == m->classes)
        return be->softmax_xent(n, m->classes, logits, labels, smoothing, dlogits, loss_sum,
                                correct);
    HERD_TRY(herd_check_softmax_xent(n, m->class_count, logits, labels, smoothing));
    if (!be->xent_part_stats || !be->xent_part_grad || !be->host_memory)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "the %s backend has no vocabulary-parallel "
                        "cross-entropy; tensor parallelism runs on the CPU", be->name);
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= m->classes)
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "softmax_xent: label %d of row %d is outside [0, %d); does the "
                            "model's class count match the dataset?", (int)labels[i], i,
                            m->classes);
    int parts = m->tp.size;
    size_t stride = (size_t)n * HERD_XENT_STATS;
    double *mine = malloc(stride * sizeof *mine);
    double *all = malloc(stride * (size_t)parts * sizeof *all);
    double *lse = malloc((size_t)n * sizeof *lse);
    /* The group's ranks hold the same labels and shapes, so they fail alike up to here;
     * out of memory on one alone ends in the stall inspector's report. */
    herd_status st = mine && all && lse ? HERD_OK : HERD_NOMEM(stride * (parts + 2) * 8);
    if (st == HERD_OK)
        st = be->xent_part_stats(n, m->class_count, m->class_first, logits, labels, mine);
    if (st == HERD_OK)
        st = m->tp.allgather(m->tp.group, mine, all, stride * sizeof(double));
    double total = 0;
    long hits = 0;
    for (int i = 0; st == HERD_OK && i < n; i++) {
        double loss;
        long hit;
        combine_row(all, parts, stride, i, m->classes, smoothing, &lse[i], &loss, labels[i], &hit);
        total += loss;
        hits += hit;
    }
    if (st == HERD_OK && dlogits)
        st = be->xent_part_grad(n, m->class_count, m->class_first, m->classes, logits, labels,
                                lse, smoothing, dlogits);
    if (st == HERD_OK && loss_sum)
        *loss_sum = total;
    if (st == HERD_OK && correct)
        *correct = hits;
    free(mine);
    free(all);
    free(lse);
    return st;
}
