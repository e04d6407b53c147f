/* Fused optimizer updates: one pass over weights, gradients and state per step, the
 * same arithmetic as the CPU backend (torch.optim.SGD / AdamW semantics). */
#include <math.h>

#include "backend/cuda/cuda.h"

/* ---- kernels */

__global__ void k_sgd(size_t n, float *w, const float *g, float *buf, float lr, float mom,
                      float wd_coupled, float shrink, bool nesterov)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float wi = w[i] * shrink;
        float gi = g[i] + wd_coupled * wi;
        if (buf) {
            float bi = mom * buf[i] + gi;
            buf[i] = bi;
            gi = nesterov ? gi + mom * bi : bi;
        }
        w[i] = wi - lr * gi;
    }
}

__global__ void k_adamw(size_t n, float *w, const float *g, float *m, float *v, float b1,
                        float b2, float eps, float shrink, float step_size, float inv_sqrt_bc2)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w[i] = w[i] * shrink - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    }
}

/* x *= factor; any non-finite result sets *flag (a plain store: every writer
 * writes 1, so the race is benign). */
__global__ void k_unscale_check(size_t n, float *x, float factor, int *flag)
{
    bool bad = false;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i] * factor;
        x[i] = v;
        bad |= !isfinite(v);
    }
    if (bad && flag)
        *flag = 1;
}

/* ---- launchers */

/* x *= factor on stream st; with flag, a non-finite result sets *flag. */
static herd_status launch_scale(size_t n, float *x, float factor, int *flag, cudaStream_t st)
{
    if (n == 0)
        return HERD_OK;
    k_unscale_check<<<herd_cuda_blocks(n), HERD_CUDA_THREADS, 0, st>>>(n, x, factor, flag);
    HERD_CUDA_LAUNCHED("k_unscale_check");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_sgd_update(size_t n, float *w, const float *g,
                                            float *momentum_buf, const herd_sgd_args *a)
{
    HERD_TRY(herd_check_sgd_update(n, w, g, momentum_buf, a));
    if (n == 0)
        return HERD_OK;
    float wd_coupled = a->decoupled ? 0.0f : a->weight_decay;
    float shrink = a->decoupled ? 1.0f - a->lr * a->weight_decay : 1.0f;
    k_sgd<<<herd_cuda_blocks(n), HERD_CUDA_THREADS, 0, herd_cuda_ctx_get()->stream>>>(
        n, w, g, a->momentum != 0.0f ? momentum_buf : NULL, a->lr, a->momentum, wd_coupled,
        shrink, a->nesterov);
    HERD_CUDA_LAUNCHED("k_sgd");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_adamw_update(size_t n, float *w, const float *g, float *m,
                                              float *v, const herd_adamw_args *a)
{
    HERD_TRY(herd_check_adamw_update(n, w, g, m, v, a));
    if (n == 0)
        return HERD_OK;
    /* Per-step constants on the host in double, exactly as the CPU backend. */
    double bc1 = 1.0 - pow((double)a->beta1, (double)a->step);
    double bc2 = 1.0 - pow((double)a->beta2, (double)a->step);
    k_adamw<<<herd_cuda_blocks(n), HERD_CUDA_THREADS, 0, herd_cuda_ctx_get()->stream>>>(
        n, w, g, m, v, a->beta1, a->beta2, a->eps, 1.0f - a->lr * a->weight_decay,
        (float)((double)a->lr / bc1), (float)(1.0 / sqrt(bc2)));
    HERD_CUDA_LAUNCHED("k_adamw");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_grad_unscale_check(size_t n, float *x, float factor,
                                                    bool *found_inf)
{
    HERD_TRY(herd_check_grad_unscale(n, x));
    cudaStream_t st = herd_cuda_ctx_get()->stream;
    int *flag = NULL;
    if (found_inf) {
        void *p;
        HERD_TRY(herd_cuda_scratch(HERD_CUDA_SCRATCH_FLAG, sizeof(int), &p));
        flag = (int *)p;
        HERD_CUDA(cudaMemsetAsync(flag, 0, sizeof(int), st), "clearing the overflow flag");
    }
    HERD_TRY(launch_scale(n, x, factor, flag, st));
    if (!found_inf)
        return HERD_OK;
    /* The skip decision is made on the host: one 4-byte copy per step. */
    void *host;
    HERD_TRY(herd_cuda_host_scratch(sizeof(int), &host));
    HERD_CUDA(cudaMemcpyAsync(host, flag, sizeof(int), cudaMemcpyDeviceToHost, st),
              "overflow flag copy");
    HERD_CUDA(cudaStreamSynchronize(st), "grad_unscale_check");
    *found_inf = *(const int *)host != 0;
    return HERD_OK;
}

/* One CUDA block per chunk of SQ_CHUNK values, its sum of squares in double; the host
 * adds the chunks in order, so the result does not depend on scheduling (as the CPU's). */
#define SQ_CHUNK 8192
__global__ void k_sum_squares(size_t n, const float *x, double *part)
{
    __shared__ double acc[HERD_CUDA_THREADS];
    size_t lo = (size_t)blockIdx.x * SQ_CHUNK, hi = lo + SQ_CHUNK < n ? lo + SQ_CHUNK : n;
    double s = 0.0;
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
        s += (double)x[i] * x[i];
    acc[threadIdx.x] = s;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w)
            acc[threadIdx.x] += acc[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        part[blockIdx.x] = acc[0];
}

extern "C" herd_status herd_cuda_sum_squares(size_t n, const float *x, double *out)
{
    HERD_TRY(herd_check_sum_squares(n, x, out));
    *out = 0.0;
    if (n == 0)
        return HERD_OK;
    size_t chunks = (n + SQ_CHUNK - 1) / SQ_CHUNK;
    cudaStream_t st = herd_cuda_ctx_get()->stream;
    void *part, *host;
    HERD_TRY(herd_cuda_scratch(HERD_CUDA_SCRATCH_NORM, chunks * sizeof(double), &part));
    HERD_TRY(herd_cuda_host_scratch(chunks * sizeof(double), &host));
    k_sum_squares<<<(unsigned)chunks, HERD_CUDA_THREADS, 0, st>>>(n, x, (double *)part);
    HERD_CUDA_LAUNCHED("k_sum_squares");
    HERD_CUDA(cudaMemcpyAsync(host, part, chunks * sizeof(double), cudaMemcpyDeviceToHost, st),
              "sum of squares copy");
    HERD_CUDA(cudaStreamSynchronize(st), "sum_squares");
    double total = 0.0;
    for (size_t c = 0; c < chunks; c++)
        total += ((const double *)host)[c];
    *out = total;
    return HERD_OK;
}

extern "C" herd_status herd_cuda_scale_on(size_t n, float *x, float scale, cudaStream_t st)
{
    return scale == 1.0f ? HERD_OK : launch_scale(n, x, scale, NULL, st);
}
