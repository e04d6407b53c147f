/* Softmax cross-entropy with label smoothing (PyTorch's CrossEntropyLoss semantics). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "backend/cpu/cpu_fastexp.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

/* A row's largest logit and the first place it is at (0 where none equals it: NaN). The loops
 * below vectorise: with a vocabulary of 256, libm's exp one value at a time took a fifth of
 * gpt-nano's training step. */
static int row_argmax(const float *z, int n, float *max_out)
{
    float mx = z[0];
#pragma omp simd reduction(max : mx)
    for (int j = 1; j < n; j++)
        mx = z[j] > mx ? z[j] : mx;
    int best = 0;
    while (best < n && !(z[best] == mx))
        best++;
    *max_out = mx;
    return best < n ? best : 0;
}

/* sum_j e^(z_j - shift) in double, each term in float (herd_fast_expf: a few ulps), kept
 * in out[] when out is not NULL; and sum_j z_j into *sum_z. */
static double row_exp_sum(const float *z, int n, float shift, float *out, double *sum_z)
{
    double se = 0.0, sz = 0.0;
    if (out) { /* two loops: a store under a condition keeps the loop scalar */
#pragma omp simd reduction(+ : se, sz)
        for (int j = 0; j < n; j++) { /* z[j] read before out[j] is written: out may be z */
            float zj = z[j];
            out[j] = herd_fast_expf(zj - shift);
            se += out[j];
            sz += zj;
        }
    } else {
#pragma omp simd reduction(+ : se, sz)
        for (int j = 0; j < n; j++) {
            se += herd_fast_expf(z[j] - shift);
            sz += z[j];
        }
    }
    *sum_z = sz;
    return se;
}

herd_status herd_cpu_softmax_xent(int n, int classes, const float *logits, const int32_t *labels,
                                  float smoothing, float *dlogits, double *loss_sum,
                                  long *correct)
{
    HERD_TRY(herd_check_softmax_xent(n, classes, logits, labels, smoothing));
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= classes)
            return herd_xent_bad_label((int)labels[i], i, classes);
    /* target = (1 - eps) * onehot + eps / classes */
    const float off_target = smoothing / (float)classes;
    const float on_target = 1.0f - smoothing + off_target;
    const float inv_n = 1.0f / (float)n;
    /* On threads each row's loss is kept and the rows are added in order afterwards, as
     * one thread adds them: the total does not follow the thread count (--deterministic
     * reads it). */
    bool par = herd_cpu_par((size_t)n * (size_t)classes);
    double *row_loss = par ? malloc((size_t)n * sizeof *row_loss) : NULL;
    if (par && !row_loss)
        return HERD_NOMEM((size_t)n * sizeof *row_loss);
    double total = 0.0;
    long hits = 0;
#pragma omp parallel for schedule(static) reduction(+ : hits) if (par)
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * classes;
        float zmax;
        int best = row_argmax(z, classes, &zmax);
        /* log-sum-exp shifted by the max so exp never overflows; the exponentials are kept
         * in the gradient's row for the gradient. */
        float *d = dlogits ? dlogits + (size_t)i * classes : NULL;
        int y = labels[i];
        float z_y = z[y]; /* before d, which may be z, is written */
        double sum_z, sum_exp = row_exp_sum(z, classes, zmax, d, &sum_z);
        double lse = zmax + log(sum_exp);
        /* -sum_j target_j * (z_j - lse), using sum_j target_j = 1. */
        double loss = lse - (1.0 - smoothing) * z_y - (double)off_target * sum_z;
        if (row_loss)
            row_loss[i] = loss;
        else
            total += loss;
        hits += best == y;
        if (d) {
            float inv_sum = (float)(1.0 / sum_exp), e_y = d[y];
#pragma omp simd
            for (int j = 0; j < classes; j++)
                d[j] = (d[j] * inv_sum - off_target) * inv_n;
            d[y] = (e_y * inv_sum - on_target) * inv_n;
        }
    }
    for (int i = 0; row_loss && i < n; i++)
        total += row_loss[i];
    free(row_loss);
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
    HERD_CPU_FOR(herd_cpu_par(n * (size_t)count), int, i, n,
        const float *z = logits + (size_t)i * count;
        float zmax;
        int best = row_argmax(z, count, &zmax);
        double sum_z, sum_exp = row_exp_sum(z, count, zmax, NULL, &sum_z);
        int y = labels[i] - first;
        bool here = y >= 0 && y < count;
        double *s = stats + (size_t)i * HERD_XENT_STATS;
        s[0] = z[best];
        s[1] = first + best;
        s[2] = sum_exp;
        s[3] = here ? z[y] : 0.0;
        s[4] = sum_z;
        s[5] = here;
    );
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
    HERD_CPU_FOR(herd_cpu_par(n * (size_t)count), int, i, n,
        const float *z = logits + (size_t)i * count;
        float *d = dlogits + (size_t)i * count;
        float shift = (float)lse[i];
        _Pragma("omp simd")
        for (int j = 0; j < count; j++)
            d[j] = (herd_fast_expf(z[j] - shift) - off_target) * inv_n;
        int y = labels[i] - first;
        if (y >= 0 && y < count)
            d[y] = (herd_fast_expf(z[y] - shift) - on_target) * inv_n;
    );
    return HERD_OK;
}
