/* Softmax cross-entropy with label smoothing (PyTorch's CrossEntropyLoss). One warp
 * per sample writes its loss and hit; a second single-block kernel adds them in a
 * fixed order, so loss_sum is deterministic (no atomics on the sum). */
#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_kernels.cuh"

#define ROWS_PER_BLOCK 4 /* warps per block */

/* ---- kernels */

/* A warp's summary of row z of count values, on every lane: its largest value and the
 * first index holding it (the CPU scans with >, so ties go to the lowest), the sum of
 * exp(z - largest) in double, and the sum of z. */
__device__ static void row_summary(const float *z, int count, int lane, float *best_out,
                                   int *arg_out, double *se_out, double *sz_out)
{
    float best = -INFINITY;
    int arg = 0x7fffffff;
    for (int j = lane; j < count; j += 32)
        if (z[j] > best) {
            best = z[j];
            arg = j;
        }
    for (int o = 16; o > 0; o >>= 1) {
        float ob = __shfl_xor_sync(0xffffffffu, best, o);
        int oa = __shfl_xor_sync(0xffffffffu, arg, o);
        if (ob > best || (ob == best && oa < arg)) {
            best = ob;
            arg = oa;
        }
    }
    double se = 0.0, sz = 0.0;
    for (int j = lane; j < count; j += 32) {
        se += exp((double)(z[j] - best));
        sz += z[j];
    }
    se = warp_sum(se);
    sz = warp_sum(sz);
    *best_out = best;
    *arg_out = arg;
    *se_out = se;
    *sz_out = sz;
}

__global__ void k_xent_rows(int n, int classes, const float *logits, const int32_t *labels,
                            float smoothing, float *dlogits, double *row_loss, int *row_hit,
                            herd_xent_totals *res)
{
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= n)
        return;
    const float *z = logits + (size_t)row * classes;
    int y = labels[row];
    if (y < 0 || y >= classes) {
        if (lane == 0) {
            atomicMin(&res->bad_row, row);
            row_loss[row] = 0.0;
            row_hit[row] = 0;
        }
        return;
    }
    float best;
    int arg;
    double se, sz;
    row_summary(z, classes, lane, &best, &arg, &se, &sz);
    float off_target = smoothing / (float)classes;
    if (lane == 0) {
        double lse = best + log(se);
        row_loss[row] = lse - (1.0 - smoothing) * z[y] - (double)off_target * sz;
        row_hit[row] = arg == y;
    }
    if (dlogits) {
        float on_target = 1.0f - smoothing + off_target;
        float inv_n = 1.0f / (float)n, inv_sum = (float)(1.0 / se);
        float *d = dlogits + (size_t)row * classes;
        for (int j = lane; j < classes; j += 32)
            d[j] = (expf(z[j] - best) * inv_sum - (j == y ? on_target : off_target)) * inv_n;
    }
}

__global__ void k_xent_total(int n, const double *row_loss, const int *row_hit,
                             herd_xent_totals *res)
{
    __shared__ double sl[256];
    __shared__ long long sh[256];
    double l = 0.0;
    long long h = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        l += row_loss[i];
        h += row_hit[i];
    }
    sl[threadIdx.x] = l;
    sh[threadIdx.x] = h;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            sl[threadIdx.x] += sl[threadIdx.x + s];
            sh[threadIdx.x] += sh[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        res->loss_sum = sl[0];
        res->correct = sh[0];
    }
}

__global__ void k_xent_init(herd_xent_totals *res)
{
    res->bad_row = 0x7fffffff;
    res->bad_label = 0;
}

__global__ void k_xent_bad_label(const int32_t *labels, herd_xent_totals *res)
{
    if (res->bad_row != 0x7fffffff)
        res->bad_label = labels[res->bad_row];
}

/* ---- launchers */

extern "C" herd_status herd_cuda_softmax_xent_queued(int n, int classes, const float *logits,
                                                     const int32_t *labels, float smoothing,
                                                     float *dlogits, herd_xent_totals *totals)
{
    HERD_TRY(herd_check_softmax_xent(n, classes, logits, labels, smoothing));
    HERD_CHECK_ARRAYS("softmax_xent_queued", 1, totals);
    cudaStream_t st = herd_cuda_ctx_get()->stream;
    /* Scratch: n losses, then n hits. */
    void *scratch;
    HERD_TRY(herd_cuda_scratch(HERD_CUDA_SCRATCH_LOSS,
                               (size_t)n * sizeof(double) + (size_t)n * sizeof(int), &scratch));
    double *row_loss = (double *)scratch;
    int *row_hit = (int *)(row_loss + n);
    k_xent_init<<<1, 1, 0, st>>>(totals);
    HERD_CUDA_LAUNCHED("k_xent_init");
    k_xent_rows<<<(n + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, 32 * ROWS_PER_BLOCK, 0, st>>>(
        n, classes, logits, labels, smoothing, dlogits, row_loss, row_hit, totals);
    HERD_CUDA_LAUNCHED("k_xent_rows");
    k_xent_total<<<1, 256, 0, st>>>(n, row_loss, row_hit, totals);
    HERD_CUDA_LAUNCHED("k_xent_total");
    k_xent_bad_label<<<1, 1, 0, st>>>(labels, totals);
    HERD_CUDA_LAUNCHED("k_xent_bad_label");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_softmax_xent(int n, int classes, const float *logits,
                                              const int32_t *labels, float smoothing,
                                              float *dlogits, double *loss_sum, long *correct)
{
    void *dev, *host;
    HERD_TRY(herd_cuda_scratch(HERD_CUDA_SCRATCH_LOSS_TOTALS, sizeof(herd_xent_totals), &dev));
    HERD_TRY(herd_cuda_host_scratch(sizeof(herd_xent_totals), &host));
    herd_xent_totals *totals = (herd_xent_totals *)dev;
    HERD_TRY(herd_cuda_softmax_xent_queued(n, classes, logits, labels, smoothing, dlogits, totals));
    /* The loss goes back to the host every step (it is logged): one small copy. */
    cudaStream_t st = herd_cuda_ctx_get()->stream;
    HERD_CUDA(cudaMemcpyAsync(host, totals, sizeof *totals, cudaMemcpyDeviceToHost, st),
              "softmax_xent result copy");
    HERD_CUDA(cudaStreamSynchronize(st), "softmax_xent kernels");
    const herd_xent_totals *r = (const herd_xent_totals *)host;
    HERD_TRY(herd_xent_totals_check(r, classes));
    if (loss_sum)
        *loss_sum = r->loss_sum;
    if (correct)
        *correct = (long)r->correct;
    return HERD_OK;
}

/* ---- the vocabulary-parallel loss's two halves (nn/xent_split.c; backend.h) */

/* One warp per row of this part: its largest logit and the first class holding it (the
 * CPU scans ascending with >), the sum of exp(z - that largest) in double, the label's
 * logit when the label is in the part, the logits' sum, and whether it is. */
__global__ void k_xent_part_stats(int n, int count, int first, const float *logits,
                                  const int32_t *labels, double *stats)
{
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= n)
        return;
    const float *z = logits + (size_t)row * count;
    float best;
    int arg;
    double se, sz;
    row_summary(z, count, lane, &best, &arg, &se, &sz);
    if (lane == 0) {
        int y = labels[row] - first;
        bool here = y >= 0 && y < count;
        double *s = stats + (size_t)row * HERD_XENT_STATS;
        s[0] = best;
        s[1] = first + arg;
        s[2] = se;
        s[3] = here ? z[y] : 0.0;
        s[4] = sz;
        s[5] = here;
    }
}

/* d = (e^(z - lse) - the target's share) / n, one thread per logit. */
__global__ void k_xent_part_grad(size_t total, int n, int count, int first, const float *logits,
                                 const int32_t *labels, const double *lse, float off_target,
                                 float on_target, float *dlogits)
{
    float inv_n = 1.0f / (float)n;
    GRID_STRIDE(i, total)
    {
        size_t row = i / count;
        int j = (int)(i % count);
        float shift = (float)lse[row];
        float target = labels[row] - first == j ? on_target : off_target;
        dlogits[i] = (expf(logits[i] - shift) - target) * inv_n;
    }
}

extern "C" herd_status herd_cuda_xent_part_stats(int n, int count, int first, const float *logits,
                                                 const int32_t *labels, double *stats)
{
    HERD_CHECK_ARRAYS("xent_part_stats", (size_t)n * count, logits, labels, stats);
    if (n <= 0 || count <= 0)
        return HERD_OK;
    k_xent_part_stats<<<(n + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, 32 * ROWS_PER_BLOCK, 0,
                        herd_cuda_ctx_get()->stream>>>(n, count, first, logits, labels, stats);
    HERD_CUDA_LAUNCHED("k_xent_part_stats");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_xent_part_grad(int n, int count, int first, int classes,
                                                const float *logits, const int32_t *labels,
                                                const double *lse, float smoothing,
                                                float *dlogits)
{
    HERD_CHECK_ARRAYS("xent_part_grad", (size_t)n * count, logits, labels, lse, dlogits);
    size_t total = (size_t)(n > 0 ? n : 0) * (size_t)(count > 0 ? count : 0);
    if (total == 0)
        return HERD_OK;
    float off_target = smoothing / (float)classes, on_target = 1.0f - smoothing + off_target;
    k_xent_part_grad<<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, herd_cuda_ctx_get()->stream>>>(
        total, n, count, first, logits, labels, lse, off_target, on_target, dlogits);
    HERD_CUDA_LAUNCHED("k_xent_part_grad");
    return HERD_OK;
}
