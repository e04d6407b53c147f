/* Batch normalisation over (n, hw) per channel of NCHW tensors, PyTorch semantics.
 * Channels are independent, so they are split across threads; sums run over
 * contiguous hw rows in float (vectorised) and are accumulated per row in double
 * to keep precision on large batches. */
#include <math.h>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

static herd_status check_sizes(const char *op, int n, int c, int hw)
{
    if (n <= 0 || c <= 0 || hw <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: sizes must be positive (n=%d c=%d hw=%d)", op,
                        n, c, hw);
    return HERD_OK;
}

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

herd_status herd_cpu_bn_fwd_train(int n, int c, int hw, const float *x, const float *gamma,
                                  const float *beta, float *y, float *save_mean,
                                  float *save_invstd, float *running_mean, float *running_var,
                                  float momentum, float eps)
{
    HERD_TRY(check_sizes("bn_fwd_train", n, c, hw));
    if (!x || !gamma || !beta || !y || !save_mean || !save_invstd || !running_mean ||
        !running_var)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bn_fwd_train: NULL array");
    size_t count = (size_t)n * hw;
    if (count < 2)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "batchnorm: training needs more than 1 value per channel (batch %d, "
                        "%d pixels); use a larger batch",
                        n, hw);
    size_t plane = (size_t)c * hw;
#pragma omp parallel for schedule(static) if (count * c >= HERD_CPU_PAR_MIN)
    for (int ch = 0; ch < c; ch++) {
        double sum = 0.0;
        for (int s = 0; s < n; s++)
            sum += row_sum(x + s * plane + (size_t)ch * hw, hw);
        float mean = (float)(sum / (double)count);
        /* Second pass over deviations: no cancellation as with E[x^2] - E[x]^2. */
        double sq = 0.0;
        for (int s = 0; s < n; s++) {
            const float *xr = x + s * plane + (size_t)ch * hw;
            double acc = 0.0;
#pragma omp simd reduction(+ : acc)
            for (int i = 0; i < hw; i++) {
                float d = xr[i] - mean;
                acc += d * d;
            }
            sq += acc;
        }
        double var = sq / (double)count;
        float invstd = (float)(1.0 / sqrt(var + (double)eps));
        float scale = gamma[ch] * invstd, shift = beta[ch] - mean * scale;
        for (int s = 0; s < n; s++) {
            const float *xr = x + s * plane + (size_t)ch * hw;
            float *yr = y + s * plane + (size_t)ch * hw;
            for (int i = 0; i < hw; i++)
                yr[i] = xr[i] * scale + shift;
        }
        save_mean[ch] = mean;
        save_invstd[ch] = invstd;
        double unbiased = sq / (double)(count - 1);
        running_mean[ch] = (1.0f - momentum) * running_mean[ch] + momentum * mean;
        running_var[ch] = (1.0f - momentum) * running_var[ch] + momentum * (float)unbiased;
    }
    return HERD_OK;
}

herd_status herd_cpu_bn_fwd_infer(int n, int c, int hw, const float *x, const float *gamma,
                                  const float *beta, float *y, const float *running_mean,
                                  const float *running_var, float eps)
{
    HERD_TRY(check_sizes("bn_fwd_infer", n, c, hw));
    if (!x || !gamma || !beta || !y || !running_mean || !running_var)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bn_fwd_infer: NULL array");
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
    HERD_TRY(check_sizes("bn_bwd", n, c, hw));
    /* dx may be NULL: batch norm reading the model input needs no input gradient. */
    if (!x || !dy || !gamma || !save_mean || !save_invstd || !dgamma || !dbeta)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bn_bwd: NULL array");
    if (beta != 0.0f && beta != 1.0f)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bn_bwd: beta must be 0 or 1, got %g",
                        (double)beta);
    size_t plane = (size_t)c * hw, count = (size_t)n * hw;
#pragma omp parallel for schedule(static) if (count * c >= HERD_CPU_PAR_MIN)
    for (int ch = 0; ch < c; ch++) {
        float mean = save_mean[ch], invstd = save_invstd[ch];
        double sum_dy = 0.0, sum_dy_xc = 0.0;
        for (int s = 0; s < n; s++) {
            const float *xr = x + s * plane + (size_t)ch * hw;
            const float *dyr = dy + s * plane + (size_t)ch * hw;
            double a = 0.0, b = 0.0;
#pragma omp simd reduction(+ : a, b)
            for (int i = 0; i < hw; i++) {
                a += dyr[i];
                b += dyr[i] * (xr[i] - mean);
            }
            sum_dy += a;
            sum_dy_xc += b;
        }
        /* dx = gamma*invstd * (dy - mean(dy) - xhat * mean(dy*xhat)) */
        float k = gamma[ch] * invstd;
        float mean_dy = (float)(sum_dy / (double)count);
        float proj = (float)(sum_dy_xc / (double)count) * invstd * invstd;
        for (int s = 0; dx && s < n; s++) {
            const float *xr = x + s * plane + (size_t)ch * hw;
            const float *dyr = dy + s * plane + (size_t)ch * hw;
            float *dxr = dx + s * plane + (size_t)ch * hw;
            for (int i = 0; i < hw; i++)
                dxr[i] = k * (dyr[i] - mean_dy - (xr[i] - mean) * proj);
        }
        float dg = (float)(sum_dy_xc * invstd), db = (float)sum_dy;
        dgamma[ch] = beta == 0.0f ? dg : dgamma[ch] + dg;
        dbeta[ch] = beta == 0.0f ? db : dbeta[ch] + db;
    }
    return HERD_OK;
}
