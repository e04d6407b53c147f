/* Batch normalisation over (n, hw) per channel of NCHW tensors, PyTorch semantics.
 * Channels are independent, so they are split across threads; sums run over
 * contiguous hw rows in float (vectorised) and are accumulated per row in double
 * to keep precision on large batches.
 *
 * Training is written as per-channel steps (sum, squared deviations, apply; and
 * gradient sums, dx) that both the fused local ops (bn_fwd_train, bn_bwd) and the
 * split ops of synchronised BN (bn_stats, bn_apply_train, bn_bwd_reduce,
 * bn_bwd_apply) call. The fused ops run every step of one channel back to back, so
 * the channel stays in cache; the split ops run one step over all channels, leaving
 * the caller room to sum the reductions over ranks in between. With the same sums
 * both give bit-identical results. */
#include <math.h>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

static inline double row_sum(const float *x, int hw)
{
    /* Double accumulators: a plain float sum over a 28x28 plane loses ~1e-5 relative,
     * enough to make unvectorised (debug) builds drift from PyTorch over a few steps.
     * simd reduction lets gcc split the sum into vector lanes without -ffast-math. */
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < hw; i++)
        s += x[i];
    return s;
}

/* ---- per-channel steps; x points at channel ch of sample 0, rows are `plane` apart */

static double ch_sum(const float *x, int n, size_t plane, int hw)
{
    double sum = 0.0;
    for (int s = 0; s < n; s++)
        sum += row_sum(x + s * plane, hw);
    return sum;
}

static float ch_mean(double sum, int64_t count) { return (float)(sum / (double)count); }

/* Second pass over deviations: no cancellation as with E[x^2] - E[x]^2, and
 * the per-rank sums add up exactly as the single-process sum would. */
static double ch_sqdev(const float *x, int n, size_t plane, int hw, float mean)
{
    double sq = 0.0;
    for (int s = 0; s < n; s++) {
        const float *xr = x + s * plane;
        double acc = 0.0;
#pragma omp simd reduction(+ : acc)
        for (int i = 0; i < hw; i++) {
            float d = xr[i] - mean;
            acc += d * d;
        }
        sq += acc;
    }
    return sq;
}

/* Normalises one channel with the batch's mean and summed squared deviations over
 * `count` values, saves them for backward and updates the running statistics. */
static void ch_apply(const float *x, float *y, int n, size_t plane, int hw, float mean,
                     double sq, int64_t count, float gamma, float beta, float *save_mean,
                     float *save_invstd, float *running_mean, float *running_var,
                     float momentum, float eps)
{
    double var = sq / (double)count;
    float invstd = (float)(1.0 / sqrt(var + (double)eps));
    float scale = gamma * invstd, shift = beta - mean * scale;
    for (int s = 0; s < n; s++) {
        const float *xr = x + s * plane;
        float *yr = y + s * plane;
        for (int i = 0; i < hw; i++)
            yr[i] = xr[i] * scale + shift;
    }
    *save_mean = mean;
    *save_invstd = invstd;
    double unbiased = sq / (double)(count - 1);
    *running_mean = (1.0f - momentum) * *running_mean + momentum * mean;
    *running_var = (1.0f - momentum) * *running_var + momentum * (float)unbiased;
}

static void ch_bwd_sums(const float *x, const float *dy, int n, size_t plane, int hw, float mean,
                        double *sum_dy, double *sum_dy_xc)
{
    double sa = 0.0, sb = 0.0;
    for (int s = 0; s < n; s++) {
        const float *xr = x + s * plane;
        const float *dyr = dy + s * plane;
        double a = 0.0, b = 0.0;
#pragma omp simd reduction(+ : a, b)
        for (int i = 0; i < hw; i++) {
            a += dyr[i];
            b += dyr[i] * (xr[i] - mean);
        }
        sa += a;
        sb += b;
    }
    *sum_dy = sa;
    *sum_dy_xc = sb;
}

/* Parameter gradients come from this process's sums only: with data parallelism
 * the gradient averaging across ranks combines them. */
static void ch_param_grads(double sum_dy, double sum_dy_xc, float invstd, float *dgamma,
                           float *dbeta, float beta)
{
    float dg = (float)(sum_dy_xc * invstd), db = (float)sum_dy;
    *dgamma = beta == 0.0f ? dg : *dgamma + dg;
    *dbeta = beta == 0.0f ? db : *dbeta + db;
}

/* dx = gamma*invstd * (dy - mean(dy) - xhat * mean(dy*xhat)), means over `count`. */
static void ch_dx(const float *x, const float *dy, float *dx, int n, size_t plane, int hw,
                  float gamma, float mean, float invstd, double sum_dy, double sum_dy_xc,
                  int64_t count)
{
    float k = gamma * invstd;
    float mean_dy = (float)(sum_dy / (double)count);
    float proj = (float)(sum_dy_xc / (double)count) * invstd * invstd;
    for (int s = 0; s < n; s++) {
        const float *xr = x + s * plane;
        const float *dyr = dy + s * plane;
        float *dxr = dx + s * plane;
        for (int i = 0; i < hw; i++)
            dxr[i] = k * (dyr[i] - mean_dy - (xr[i] - mean) * proj);
    }
}

#define CH(p, ch) ((p) + (size_t)(ch) * hw) /* channel ch of sample 0 */

/* ---- fused local ops */

herd_status herd_cpu_bn_fwd_train(int n, int c, int hw, const float *x, const float *gamma,
                                  const float *beta, float *y, float *save_mean,
                                  float *save_invstd, float *running_mean, float *running_var,
                                  float momentum, float eps)
{
    HERD_TRY(herd_check_bn_fwd_train(n, c, hw, x, gamma, beta, y, save_mean, save_invstd,
                                     running_mean, running_var));
    int64_t count = (int64_t)n * hw;
    size_t plane = (size_t)c * hw;
    HERD_CPU_FOR(herd_cpu_par((size_t)count * c), int, ch, c,
        float mean = ch_mean(ch_sum(CH(x, ch), n, plane, hw), count);
        double sq = ch_sqdev(CH(x, ch), n, plane, hw, mean);
        ch_apply(CH(x, ch), CH(y, ch), n, plane, hw, mean, sq, count, gamma[ch], beta[ch],
                 &save_mean[ch], &save_invstd[ch], &running_mean[ch], &running_var[ch],
                 momentum, eps);
    );
    return HERD_OK;
}

herd_status herd_cpu_bn_fwd_infer(int n, int c, int hw, const float *x, const float *gamma,
                                  const float *beta, float *y, const float *running_mean,
                                  const float *running_var, float eps)
{
    HERD_TRY(herd_check_bn_fwd_infer(n, c, hw, x, gamma, beta, y, running_mean, running_var));
    size_t plane = (size_t)c * hw;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)n * plane >= HERD_CPU_PAR_MIN)
    for (int s = 0; s < n; s++)
        for (int ch = 0; ch < c; ch++) {
            float scale = gamma[ch] / sqrtf(running_var[ch] + eps);
            float shift = beta[ch] - running_mean[ch] * scale;
            const float *xr = x + s * plane + (size_t)ch * hw;
            float *yr = y + s * plane + (size_t)ch * hw;
            for (int i = 0; i < hw; i++)
                yr[i] = xr[i] * scale + shift;
        }
    return HERD_OK;
}

herd_status herd_cpu_bn_bwd(int n, int c, int hw, const float *x, const float *dy,
                            const float *gamma, const float *save_mean, const float *save_invstd,
                            float *dx, float *dgamma, float *dbeta, float beta)
{
    HERD_TRY(herd_check_bn_bwd(n, c, hw, x, dy, gamma, save_mean, save_invstd, dgamma, dbeta,
                               beta));
    size_t plane = (size_t)c * hw;
    int64_t count = (int64_t)n * hw;
    HERD_CPU_FOR(herd_cpu_par((size_t)count * c), int, ch, c,
        double sum_dy, sum_dy_xc;
        ch_bwd_sums(CH(x, ch), CH(dy, ch), n, plane, hw, save_mean[ch], &sum_dy, &sum_dy_xc);
        if (dx)
            ch_dx(CH(x, ch), CH(dy, ch), CH(dx, ch), n, plane, hw, gamma[ch], save_mean[ch],
                  save_invstd[ch], sum_dy, sum_dy_xc, count);
        ch_param_grads(sum_dy, sum_dy_xc, save_invstd[ch], &dgamma[ch], &dbeta[ch], beta);
    );
    return HERD_OK;
}

/* ---- split ops for synchronised batch norm */

herd_status herd_cpu_bn_stats(int n, int c, int hw, const float *x, const double *sum,
                              int64_t count, double *out)
{
    HERD_TRY(herd_check_bn_stats(n, c, hw, x, sum, count, out));
    size_t plane = (size_t)c * hw;
    HERD_CPU_FOR(herd_cpu_par((size_t)n * plane), int, ch, c,
        out[ch] = sum ? ch_sqdev(CH(x, ch), n, plane, hw, ch_mean(sum[ch], count))
                      : ch_sum(CH(x, ch), n, plane, hw);
    );
    return HERD_OK;
}

herd_status herd_cpu_bn_apply_train(int n, int c, int hw, const float *x, const float *gamma,
                                    const float *beta, const double *sum, const double *sqdev,
                                    int64_t count, float *y, float *save_mean, float *save_invstd,
                                    float *running_mean, float *running_var, float momentum,
                                    float eps)
{
    HERD_TRY(herd_check_bn_apply_train(n, c, hw, x, gamma, beta, sum, sqdev, count, y, save_mean,
                                       save_invstd, running_mean, running_var));
    size_t plane = (size_t)c * hw;
    HERD_CPU_FOR(herd_cpu_par((size_t)n * plane), int, ch, c,
        ch_apply(CH(x, ch), CH(y, ch), n, plane, hw, ch_mean(sum[ch], count), sqdev[ch], count,
                 gamma[ch], beta[ch], &save_mean[ch], &save_invstd[ch], &running_mean[ch],
                 &running_var[ch], momentum, eps);
    );
    return HERD_OK;
}

herd_status herd_cpu_bn_bwd_reduce(int n, int c, int hw, const float *x, const float *dy,
                                   const float *save_mean, const float *save_invstd,
                                   double *sum_dy, double *sum_dy_xc, float *dgamma,
                                   float *dbeta, float beta)
{
    HERD_TRY(herd_check_bn_bwd_reduce(n, c, hw, x, dy, save_mean, save_invstd, sum_dy, sum_dy_xc,
                                      dgamma, dbeta, beta));
    size_t plane = (size_t)c * hw;
    HERD_CPU_FOR(herd_cpu_par((size_t)n * plane), int, ch, c,
        ch_bwd_sums(CH(x, ch), CH(dy, ch), n, plane, hw, save_mean[ch], &sum_dy[ch],
                    &sum_dy_xc[ch]);
        ch_param_grads(sum_dy[ch], sum_dy_xc[ch], save_invstd[ch], &dgamma[ch], &dbeta[ch], beta);
    );
    return HERD_OK;
}

herd_status herd_cpu_bn_bwd_apply(int n, int c, int hw, const float *x, const float *dy,
                                  const float *gamma, const float *save_mean,
                                  const float *save_invstd, const double *sum_dy,
                                  const double *sum_dy_xc, int64_t count, float *dx)
{
    HERD_TRY(herd_check_bn_bwd_apply(n, c, hw, x, dy, gamma, save_mean, save_invstd, sum_dy,
                                     sum_dy_xc, count, dx));
    size_t plane = (size_t)c * hw;
    HERD_CPU_FOR(herd_cpu_par((size_t)n * plane), int, ch, c,
        ch_dx(CH(x, ch), CH(dy, ch), CH(dx, ch), n, plane, hw, gamma[ch], save_mean[ch],
              save_invstd[ch], sum_dy[ch], sum_dy_xc[ch], count);
    );
    return HERD_OK;
}
