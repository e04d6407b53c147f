/* Softmax cross-entropy with label smoothing (PyTorch's CrossEntropyLoss semantics). */
#include <math.h>
#include <stdbool.h>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

herd_status herd_cpu_softmax_xent(int n, int classes, const float *logits, const int32_t *labels,
                                  float smoothing, float *dlogits, double *loss_sum,
                                  long *correct)
{
    HERD_TRY(herd_check_softmax_xent(n, classes, logits, labels, smoothing));
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= classes)
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "softmax_xent: label %d of sample %d is outside [0, %d); does the "
                            "model's class count match the dataset?",
                            (int)labels[i], i, classes);
    /* target = (1 - eps) * onehot + eps / classes */
    const float off_target = smoothing / (float)classes;
    const float on_target = 1.0f - smoothing + off_target;
    const float inv_n = 1.0f / (float)n;
    double total = 0.0;
    long hits = 0;
#pragma omp parallel for schedule(static) reduction(+ : total, hits) if (n * (size_t)classes >= HERD_CPU_PAR_MIN)
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * classes;
        int best = 0;
        for (int j = 1; j < classes; j++)
            if (z[j] > z[best])
                best = j;
        float zmax = z[best];
        /* log-sum-exp shifted by the max so exp never overflows. */
        double sum_exp = 0.0, sum_z = 0.0;
        for (int j = 0; j < classes; j++) {
            sum_exp += exp((double)(z[j] - zmax));
            sum_z += z[j];
        }
        double lse = zmax + log(sum_exp);
        int y = labels[i];
        /* -sum_j target_j * (z_j - lse), using sum_j target_j = 1. */
        double loss = lse - (1.0 - smoothing) * z[y] - (double)off_target * sum_z;
        total += loss;
        hits += best == y;
        if (dlogits) {
            float *d = dlogits + (size_t)i * classes;
            float inv_sum = (float)(1.0 / sum_exp);
            for (int j = 0; j < classes; j++)
                d[j] = (expf(z[j] - zmax) * inv_sum - off_target) * inv_n;
            d[y] = (expf(z[y] - zmax) * inv_sum - on_target) * inv_n;
        }
    }
    if (loss_sum)
        *loss_sum = total;
    if (correct)
        *correct = hits;
    return HERD_OK;
}

/* Vocabulary-parallel cross-entropy (backend.h): one row's part of the classes. */
herd_status herd_cpu_xent_part_stats(int n, int count, int first, const float *logits,
                                     const int32_t *labels, double *stats)
{
    HERD_CHECK_ARRAYS("xent_part_stats", (size_t)n * count, logits, labels, stats);
#pragma omp parallel for schedule(static) if (n * (size_t)count >= HERD_CPU_PAR_MIN)
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * count;
        int best = 0;
        for (int j = 1; j < count; j++)
            if (z[j] > z[best])
                best = j;
        double sum_exp = 0.0, sum_z = 0.0;
        for (int j = 0; j < count; j++) {
            sum_exp += exp((double)(z[j] - z[best]));
            sum_z += z[j];
        }
        int y = labels[i] - first;
        bool here = y >= 0 && y < count;
        double *s = stats + (size_t)i * HERD_XENT_STATS;
        s[0] = z[best];
        s[1] = first + best;
        s[2] = sum_exp;
        s[3] = here ? z[y] : 0.0;
        s[4] = sum_z;
        s[5] = here;
    }
    return HERD_OK;
}

herd_status herd_cpu_xent_part_grad(int n, int count, int first, int classes,
                                    const float *logits, const int32_t *labels, const double *lse,
                                    float smoothing, float *dlogits)
{
    HERD_CHECK_ARRAYS("xent_part_grad", (size_t)n * count, logits, labels, lse, dlogits);
    const float off_target = smoothing / (float)classes;
    const float on_target = 1.0f - smoothing + off_target;
    const float inv_n = 1.0f / (float)n;
#pragma omp parallel for schedule(static) if (n * (size_t)count >= HERD_CPU_PAR_MIN)
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * count;
        float *d = dlogits + (size_t)i * count;
        float shift = (float)lse[i];
        for (int j = 0; j < count; j++)
            d[j] = (expf(z[j] - shift) - off_target) * inv_n;
        int y = labels[i] - first;
        if (y >= 0 && y < count)
            d[y] = (expf(z[y] - shift) - on_target) * inv_n;
    }
    return HERD_OK;
}
