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

/* Device scratch of the split loss (NULL on a host backend, where the host arrays serve). */
typedef struct xent_dev {
    double *stats, *lse;
} xent_dev;

static void xent_dev_free(const herd_backend *be, xent_dev *d)
{
    if (!be->host_memory) {
        be->free(d->stats);
        be->free(d->lse);
    }
}

/* Row stats of this rank's part into the host array mine (through device scratch on a
 * device backend, whose labels are device memory). */
static herd_status part_stats(const herd_model *m, int n, const float *logits,
                              const int32_t *dev_labels, double *mine, xent_dev *d)
{
    const herd_backend *be = m->be;
    size_t bytes = (size_t)n * HERD_XENT_STATS * sizeof(double);
    if (be->host_memory)
        return be->xent_part_stats(n, m->class_count, m->class_first, logits, dev_labels, mine);
    if (!(d->stats = be->alloc(bytes)))
        return HERD_ERR_NOMEM; /* the allocator said why */
    HERD_TRY(be->xent_part_stats(n, m->class_count, m->class_first, logits, dev_labels, d->stats));
    return be->memcpy_d2h(mine, d->stats, bytes);
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
    if (!be->xent_part_stats || !be->xent_part_grad)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "the %s backend has no vocabulary-parallel "
                        "cross-entropy; use --device cpu for tensor parallelism", be->name);
    int parts = m->tp.size;
    size_t stride = (size_t)n * HERD_XENT_STATS;
    double *mine = malloc(stride * sizeof *mine);
    double *all = malloc(stride * (size_t)parts * sizeof *all);
    double *lse = malloc((size_t)n * sizeof *lse);
    /* Labels are device memory on a device backend: a host copy for the checks below. */
    int32_t *host_labels = be->host_memory ? (int32_t *)labels : malloc((size_t)n * sizeof *labels);
    xent_dev dev = {0};
    /* The group's ranks hold the same labels and shapes, so they fail alike up to here;
     * out of memory on one alone ends in the stall inspector's report. */
    herd_status st = mine && all && lse && host_labels ? HERD_OK
                                                       : HERD_NOMEM(stride * (parts + 2) * 8);
    if (st == HERD_OK && !be->host_memory)
        st = be->memcpy_d2h(host_labels, labels, (size_t)n * sizeof *labels);
    for (int i = 0; st == HERD_OK && i < n; i++)
        if (host_labels[i] < 0 || host_labels[i] >= m->classes)
            st = HERD_ERR(HERD_ERR_INVALID_ARG,
                          "softmax_xent: label %d of row %d is outside [0, %d); does the "
                          "model's class count match the dataset?", (int)host_labels[i], i,
                          m->classes);
    if (st == HERD_OK)
        st = part_stats(m, n, logits, labels, mine, &dev);
    if (st == HERD_OK)
        st = m->tp.allgather(m->tp.group, mine, all, stride * sizeof(double));
    double total = 0;
    long hits = 0;
    for (int i = 0; st == HERD_OK && i < n; i++) {
        double loss;
        long hit;
        combine_row(all, parts, stride, i, m->classes, smoothing, &lse[i], &loss, host_labels[i],
                    &hit);
        total += loss;
        hits += hit;
    }
    const double *lse_arg = lse;
    if (st == HERD_OK && dlogits && !be->host_memory) {
        if (!(dev.lse = be->alloc((size_t)n * sizeof *lse)))
            st = HERD_ERR_NOMEM;
        else
            st = be->memcpy_h2d(dev.lse, lse, (size_t)n * sizeof *lse);
        lse_arg = dev.lse;
    }
    if (st == HERD_OK && dlogits)
        st = be->xent_part_grad(n, m->class_count, m->class_first, m->classes, logits, labels,
                                lse_arg, smoothing, dlogits);
    if (st == HERD_OK && loss_sum)
        *loss_sum = total;
    if (st == HERD_OK && correct)
        *correct = hits;
    xent_dev_free(be, &dev);
    if (host_labels != labels)
        free(host_labels);
    free(mine);
    free(all);
    free(lse);
    return st;
}
