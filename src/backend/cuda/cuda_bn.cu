/* Batch normalisation over (n, hw) per channel of NCHW tensors, PyTorch semantics
 * (biased variance to normalise, unbiased for the running variance), mirroring
 * cpu_bn.c step for step so both backends agree to rounding: sums accumulate in
 * double, the variance comes from a second pass over deviations, and the fused ops
 * are the split (synchronised BN) ops run back to back.
 *
 * One block per channel: a channel's n*hw values are strided over the block and the
 * partial sums reduced in shared memory. Simple and exact; with few channels and
 * large planes it leaves SMs idle (a split-channel reduction is future work). */
#include <math.h>

#include "backend/cuda/cuda.h"

#define BN_THREADS 256

/* ---- device helpers */

/* Sum of v over the block; every thread gets the result. */
__device__ static double block_sum(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = BN_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads(); /* sh is reused by the next reduction */
    return r;
}

/* Offset of value i (0 <= i < n*hw) of channel ch. */
__device__ static size_t at(long long i, int hw, size_t plane, int ch)
{
    return (size_t)(i / hw) * plane + (size_t)ch * hw + (size_t)(i % hw);
}

__device__ static double ch_sum(const float *x, long long cnt, int hw, size_t plane, int ch,
                                double *sh)
{
    double s = 0.0;
    for (long long i = threadIdx.x; i < cnt; i += BN_THREADS)
        s += x[at(i, hw, plane, ch)];
    return block_sum(s, sh);
}

__device__ static double ch_sqdev(const float *x, long long cnt, int hw, size_t plane, int ch,
                                  float mean, double *sh)
{
    double s = 0.0;
    for (long long i = threadIdx.x; i < cnt; i += BN_THREADS) {
        float d = x[at(i, hw, plane, ch)] - mean;
        s += d * d;
    }
    return block_sum(s, sh);
}

/* Normalise one channel and save / update its statistics (as cpu_bn.c ch_apply). */
__device__ static void ch_apply(const float *x, float *y, long long cnt, int hw, size_t plane,
                                int ch, float mean, double sq, long long count, const float *gamma,
                                const float *beta, float *save_mean, float *save_invstd,
                                float *running_mean, float *running_var, float momentum,
                                float eps)
{
    double var = sq / (double)count;
    float invstd = (float)(1.0 / sqrt(var + (double)eps));
    float scale = gamma[ch] * invstd, shift = beta[ch] - mean * scale;
    for (long long i = threadIdx.x; i < cnt; i += BN_THREADS) {
        size_t o = at(i, hw, plane, ch);
        y[o] = x[o] * scale + shift;
    }
    if (threadIdx.x == 0) {
        save_mean[ch] = mean;
        save_invstd[ch] = invstd;
        double unbiased = sq / (double)(count - 1);
        running_mean[ch] = (1.0f - momentum) * running_mean[ch] + momentum * mean;
        running_var[ch] = (1.0f - momentum) * running_var[ch] + momentum * (float)unbiased;
    }
}

__device__ static void ch_bwd_sums(const float *x, const float *dy, long long cnt, int hw,
                                   size_t plane, int ch, float mean, double *sh, double *sum_dy,
                                   double *sum_dy_xc)
{
    double a = 0.0, b = 0.0;
    for (long long i = threadIdx.x; i < cnt; i += BN_THREADS) {
        size_t o = at(i, hw, plane, ch);
        a += dy[o];
        b += dy[o] * (x[o] - mean);
    }
    *sum_dy = block_sum(a, sh);
    *sum_dy_xc = block_sum(b, sh);
}

__device__ static void ch_param_grads(int ch, double sdy, double sdyxc, float invstd,
                                      float *dgamma, float *dbeta, float beta)
{
    if (threadIdx.x != 0)
        return;
    float dg = (float)(sdyxc * invstd), db = (float)sdy;
    dgamma[ch] = beta == 0.0f ? dg : dgamma[ch] + dg;
    dbeta[ch] = beta == 0.0f ? db : dbeta[ch] + db;
}

__device__ static void ch_dx(const float *x, const float *dy, float *dx, long long cnt, int hw,
                             size_t plane, int ch, float gamma, float mean, float invstd,
                             double sdy, double sdyxc, long long count)
{
    float k = gamma * invstd;
    float mean_dy = (float)(sdy / (double)count);
    float proj = (float)(sdyxc / (double)count) * invstd * invstd;
    for (long long i = threadIdx.x; i < cnt; i += BN_THREADS) {
        size_t o = at(i, hw, plane, ch);
        dx[o] = k * (dy[o] - mean_dy - (x[o] - mean) * proj);
    }
}

/* ---- kernels (grid = channels) */

__global__ void k_bn_fwd_train(int n, int c, int hw, const float *x, const float *gamma,
                               const float *beta, float *y, float *save_mean, float *save_invstd,
                               float *running_mean, float *running_var, float momentum, float eps)
{
    __shared__ double sh[BN_THREADS];
    int ch = blockIdx.x;
    size_t plane = (size_t)c * hw;
    long long cnt = (long long)n * hw;
    float mean = (float)(ch_sum(x, cnt, hw, plane, ch, sh) / (double)cnt);
    double sq = ch_sqdev(x, cnt, hw, plane, ch, mean, sh);
    ch_apply(x, y, cnt, hw, plane, ch, mean, sq, cnt, gamma, beta, save_mean, save_invstd,
             running_mean, running_var, momentum, eps);
}

__global__ void k_bn_stats(int n, int c, int hw, const float *x, const double *sum,
                           long long count, double *out)
{
    __shared__ double sh[BN_THREADS];
    int ch = blockIdx.x;
    size_t plane = (size_t)c * hw;
    long long cnt = (long long)n * hw;
    double r = sum ? ch_sqdev(x, cnt, hw, plane, ch, (float)(sum[ch] / (double)count), sh)
                   : ch_sum(x, cnt, hw, plane, ch, sh);
    if (threadIdx.x == 0)
        out[ch] = r;
}

__global__ void k_bn_apply_train(int n, int c, int hw, const float *x, const float *gamma,
                                 const float *beta, const double *sum, const double *sqdev,
                                 long long count, float *y, float *save_mean, float *save_invstd,
                                 float *running_mean, float *running_var, float momentum,
                                 float eps)
{
    int ch = blockIdx.x;
    ch_apply(x, y, (long long)n * hw, hw, (size_t)c * hw, ch, (float)(sum[ch] / (double)count),
             sqdev[ch], count, gamma, beta, save_mean, save_invstd, running_mean, running_var,
             momentum, eps);
}

__global__ void k_bn_bwd(int n, int c, int hw, const float *x, const float *dy,
                         const float *gamma, const float *save_mean, const float *save_invstd,
                         float *dx, float *dgamma, float *dbeta, float beta)
{
    __shared__ double sh[BN_THREADS];
    int ch = blockIdx.x;
    size_t plane = (size_t)c * hw;
    long long cnt = (long long)n * hw;
    double sdy, sdyxc;
    ch_bwd_sums(x, dy, cnt, hw, plane, ch, save_mean[ch], sh, &sdy, &sdyxc);
    if (dx)
        ch_dx(x, dy, dx, cnt, hw, plane, ch, gamma[ch], save_mean[ch], save_invstd[ch], sdy,
              sdyxc, cnt);
    ch_param_grads(ch, sdy, sdyxc, save_invstd[ch], dgamma, dbeta, beta);
}

__global__ void k_bn_bwd_reduce(int n, int c, int hw, const float *x, const float *dy,
                                const float *save_mean, const float *save_invstd, double *sum_dy,
                                double *sum_dy_xc, float *dgamma, float *dbeta, float beta)
{
    __shared__ double sh[BN_THREADS];
    int ch = blockIdx.x;
    double sdy, sdyxc;
    ch_bwd_sums(x, dy, (long long)n * hw, hw, (size_t)c * hw, ch, save_mean[ch], sh, &sdy,
                &sdyxc);
    if (threadIdx.x == 0) {
        sum_dy[ch] = sdy;
        sum_dy_xc[ch] = sdyxc;
    }
    ch_param_grads(ch, sdy, sdyxc, save_invstd[ch], dgamma, dbeta, beta);
}

__global__ void k_bn_bwd_apply(int n, int c, int hw, const float *x, const float *dy,
                               const float *gamma, const float *save_mean,
                               const float *save_invstd, const double *sum_dy,
                               const double *sum_dy_xc, long long count, float *dx)
{
    int ch = blockIdx.x;
    ch_dx(x, dy, dx, (long long)n * hw, hw, (size_t)c * hw, ch, gamma[ch], save_mean[ch],
          save_invstd[ch], sum_dy[ch], sum_dy_xc[ch], count);
}

__global__ void k_bn_infer(size_t total, int c, int hw, const float *x, const float *gamma,
                           const float *beta, float *y, const float *running_mean,
                           const float *running_var, float eps)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int ch = (int)(i / hw % c);
        float scale = gamma[ch] / sqrtf(running_var[ch] + eps);
        float shift = beta[ch] - running_mean[ch] * scale;
        y[i] = x[i] * scale + shift;
    }
}

/* ---- launchers */

static herd_status check_sizes(const char *op, int n, int c, int hw)
{
    if (n <= 0 || c <= 0 || hw <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: sizes must be positive (n=%d c=%d hw=%d)", op,
                        n, c, hw);
    return HERD_OK; /* one block per channel: grid.x (2^31-1) fits any int c */
}

static herd_status check_count(int64_t count)
{
    if (count < 2)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "batchnorm: training needs more than 1 value per channel (%lld in the "
                        "batch); use a larger batch",
                        (long long)count);
    return HERD_OK;
}

static herd_status check_beta(const char *op, float beta)
{
    if (beta != 0.0f && beta != 1.0f)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: beta must be 0 or 1, got %g", op,
                        (double)beta);
    return HERD_OK;
}

static cudaStream_t stream(void) { return herd_cuda_ctx_get()->stream; }

extern "C" herd_status herd_cuda_bn_fwd_train(int n, int c, int hw, const float *x,
                                              const float *gamma, const float *beta, float *y,
                                              float *save_mean, float *save_invstd,
                                              float *running_mean, float *running_var,
                                              float momentum, float eps)
{
    HERD_TRY(check_sizes("bn_fwd_train", n, c, hw));
    if (!x || !gamma || !beta || !y || !save_mean || !save_invstd || !running_mean ||
        !running_var)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bn_fwd_train: NULL array");
    HERD_TRY(check_count((int64_t)n * hw));
    k_bn_fwd_train<<<c, BN_THREADS, 0, stream()>>>(n, c, hw, x, gamma, beta, y, save_mean,
                                                   save_invstd, running_mean, running_var,
                                                   momentum, eps);
    HERD_CUDA_LAUNCHED("k_bn_fwd_train");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_bn_fwd_infer(int n, int c, int hw, const float *x,
                                              const float *gamma, const float *beta, float *y,
                                              const float *running_mean,
                                              const float *running_var, float eps)
{
    HERD_TRY(check_sizes("bn_fwd_infer", n, c, hw));
    if (!x || !gamma || !beta || !y || !running_mean || !running_var)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bn_fwd_infer: NULL array");
    size_t total = (size_t)n * c * hw;
    k_bn_infer<<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, stream()>>>(
        total, c, hw, x, gamma, beta, y, running_mean, running_var, eps);
    HERD_CUDA_LAUNCHED("k_bn_infer");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_bn_bwd(int n, int c, int hw, const float *x, const float *dy,
                                        const float *gamma, const float *save_mean,
                                        const float *save_invstd, float *dx, float *dgamma,
                                        float *dbeta, float beta)
{
    HERD_TRY(check_sizes("bn_bwd", n, c, hw));
    /* dx may be NULL: batch norm reading the model input needs no input gradient. */
    if (!x || !dy || !gamma || !save_mean || !save_invstd || !dgamma || !dbeta)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bn_bwd: NULL array");
    HERD_TRY(check_beta("bn_bwd", beta));
    k_bn_bwd<<<c, BN_THREADS, 0, stream()>>>(n, c, hw, x, dy, gamma, save_mean, save_invstd, dx,
                                             dgamma, dbeta, beta);
    HERD_CUDA_LAUNCHED("k_bn_bwd");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_bn_stats(int n, int c, int hw, const float *x, const double *sum,
                                          int64_t count, double *out)
{
    HERD_TRY(check_sizes("bn_stats", n, c, hw));
    if (!x || !out)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bn_stats: NULL array");
    if (sum)
        HERD_TRY(check_count(count));
    k_bn_stats<<<c, BN_THREADS, 0, stream()>>>(n, c, hw, x, sum, (long long)count, out);
    HERD_CUDA_LAUNCHED("k_bn_stats");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_bn_apply_train(int n, int c, int hw, const float *x,
                                                const float *gamma, const float *beta,
                                                const double *sum, const double *sqdev,
                                                int64_t count, float *y, float *save_mean,
                                                float *save_invstd, float *running_mean,
                                                float *running_var, float momentum, float eps)
{
    HERD_TRY(check_sizes("bn_apply_train", n, c, hw));
    if (!x || !gamma || !beta || !sum || !sqdev || !y || !save_mean || !save_invstd ||
        !running_mean || !running_var)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bn_apply_train: NULL array");
    HERD_TRY(check_count(count));
    k_bn_apply_train<<<c, BN_THREADS, 0, stream()>>>(n, c, hw, x, gamma, beta, sum, sqdev,
                                                     (long long)count, y, save_mean, save_invstd,
                                                     running_mean, running_var, momentum, eps);
    HERD_CUDA_LAUNCHED("k_bn_apply_train");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_bn_bwd_reduce(int n, int c, int hw, const float *x,
                                               const float *dy, const float *save_mean,
                                               const float *save_invstd, double *sum_dy,
                                               double *sum_dy_xc, float *dgamma, float *dbeta,
                                               float beta)
{
    HERD_TRY(check_sizes("bn_bwd_reduce", n, c, hw));
    if (!x || !dy || !save_mean || !save_invstd || !sum_dy || !sum_dy_xc || !dgamma || !dbeta)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bn_bwd_reduce: NULL array");
    HERD_TRY(check_beta("bn_bwd_reduce", beta));
    k_bn_bwd_reduce<<<c, BN_THREADS, 0, stream()>>>(n, c, hw, x, dy, save_mean, save_invstd,
                                                    sum_dy, sum_dy_xc, dgamma, dbeta, beta);
    HERD_CUDA_LAUNCHED("k_bn_bwd_reduce");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_bn_bwd_apply(int n, int c, int hw, const float *x,
                                              const float *dy, const float *gamma,
                                              const float *save_mean, const float *save_invstd,
                                              const double *sum_dy, const double *sum_dy_xc,
                                              int64_t count, float *dx)
{
    HERD_TRY(check_sizes("bn_bwd_apply", n, c, hw));
    if (!x || !dy || !gamma || !save_mean || !save_invstd || !sum_dy || !sum_dy_xc || !dx)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bn_bwd_apply: NULL array");
    HERD_TRY(check_count(count));
    k_bn_bwd_apply<<<c, BN_THREADS, 0, stream()>>>(n, c, hw, x, dy, gamma, save_mean,
                                                   save_invstd, sum_dy, sum_dy_xc,
                                                   (long long)count, dx);
    HERD_CUDA_LAUNCHED("k_bn_bwd_apply");
    return HERD_OK;
}
