/* Causal self-attention's core on the CUDA backend (backend.h's attention_fwd and
 * attention_bwd), as the CPU computes it: per (sample, head) the scores as a whole t x t
 * product, the causal softmax row by row, and its backward, with the products through
 * cuBLAS, batched over a sample's heads (q, k and v of head h lie d apart in qkv's rows
 * of 3c). fp32 values at every --precision; the products run on TF32 tensor cores under
 * tf32, bf16 and fp16 (the handle's math mode, cuda_backend.c). The probabilities stay in `att` for the backward, as the layer
 * asks; a fused kernel that recomputes them (flash attention) is the next step. */
#include <math.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_kernels.cuh"

#define WARPS_PER_BLOCK 8 /* one warp a row of scores */

/* Row i of each (sample, head)'s t x t scores into its softmax over positions 0..i, zero
 * after (rows of all pairs back to back: row index r, position i = r % t). */
__global__ void k_causal_softmax(size_t rows, int t, float *att)
{
    int lane = threadIdx.x & 31;
    size_t r = (size_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    if (r >= rows)
        return;
    int i = (int)(r % t);
    float *row = att + r * t;
    float mx = -INFINITY;
    for (int j = lane; j <= i; j += 32)
        mx = fmaxf(mx, row[j]);
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.0f;
    for (int j = lane; j <= i; j += 32) {
        float e = expf(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    sum = warp_sum(sum);
    float inv = 1.0f / sum;
    for (int j = lane; j < t; j += 32)
        row[j] = j <= i ? row[j] * inv : 0.0f;
}

/* ds = a (da - rowsum(a da)) scale, in place over da (zero above the diagonal, where a is). */
__global__ void k_softmax_bwd(size_t rows, int t, float scale, const float *att, float *ds)
{
    int lane = threadIdx.x & 31;
    size_t r = (size_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    if (r >= rows)
        return;
    int i = (int)(r % t);
    const float *a = att + r * t;
    float *d = ds + r * t, s = 0.0f;
    for (int j = lane; j <= i; j += 32)
        s += a[j] * d[j];
    s = warp_sum(s);
    for (int j = lane; j < t; j += 32)
        d[j] = a[j] * (d[j] - s) * scale;
}

/* Row-major C_h = alpha op(A_h) op(B_h) + beta C_h for h < count, each operand's matrices
 * `s?` floats apart: cuda_gemm.cu's column-major swap, batched. */
static herd_status gemm_heads(bool ta, bool tb, int m, int n, int k, float alpha, const float *a,
                              int lda, long long sa, const float *b, int ldb, long long sb,
                              float *c, int ldc, long long sc, int count)
{
    const herd_cuda_ctx *ctx = herd_cuda_ctx_get();
    const float zero = 0.0f;
    HERD_CUBLAS(ctx->blas->sgemm_strided_batched(ctx->cublas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                 ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
                                                 b, ldb, sb, a, lda, sa, &zero, c, ldc, sc, count),
                "attention's batched sgemm");
    return HERD_OK;
}

static herd_status check_shape(const char *op, int n, int t, int c, int heads)
{
    if (n <= 0 || t <= 0 || c <= 0 || heads <= 0 || c % heads)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: %d samples of %d positions of width %d in %d "
                        "heads (the width must split evenly into the heads)", op, n, t, c, heads);
    return HERD_OK;
}

static unsigned row_blocks(size_t rows)
{
    return (unsigned)((rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
}

extern "C" herd_status herd_cuda_attention_fwd(int n, int t, int c, int heads, const float *qkv,
                                               float *att, float *y)
{
    HERD_CHECK_ARRAYS("attention_fwd", (size_t)n * t * c, qkv, att, y);
    HERD_TRY(check_shape("attention_fwd", n, t, c, heads));
    int d = c / heads, ld = 3 * c;
    long long tt = (long long)t * t;
    float scale = 1.0f / sqrtf((float)d);
    for (int b = 0; b < n; b++) {
        const float *q = qkv + (size_t)b * t * ld;
        HERD_TRY(gemm_heads(false, true, t, t, d, scale, q, ld, d, q + c, ld, d,
                            att + (size_t)b * heads * tt, t, tt, heads));
    }
    size_t rows = (size_t)n * heads * t;
    k_causal_softmax<<<row_blocks(rows), 32 * WARPS_PER_BLOCK, 0, herd_cuda_ctx_get()->stream>>>(
        rows, t, att);
    HERD_CUDA_LAUNCHED("k_causal_softmax");
    for (int b = 0; b < n; b++) {
        const float *v = qkv + (size_t)b * t * ld + 2 * c;
        HERD_TRY(gemm_heads(false, false, t, d, t, 1.0f, att + (size_t)b * heads * tt, t, tt, v,
                            ld, d, y + (size_t)b * t * c, c, d, heads));
    }
    return HERD_OK;
}

extern "C" herd_status herd_cuda_attention_bwd(int n, int t, int c, int heads, const float *qkv,
                                               const float *att, const float *dy, float *dqkv)
{
    HERD_CHECK_ARRAYS("attention_bwd", (size_t)n * t * c, qkv, att, dy, dqkv);
    HERD_TRY(check_shape("attention_bwd", n, t, c, heads));
    int d = c / heads, ld = 3 * c;
    long long tt = (long long)t * t;
    float scale = 1.0f / sqrtf((float)d);
    void *p;
    HERD_TRY(herd_cuda_scratch(HERD_CUDA_SCRATCH_ATTN, (size_t)n * heads * tt * sizeof(float), &p));
    float *ds = (float *)p;
    /* da = g v^T; ds through the softmax; dq = ds k, dk = ds^T q, dv = a^T g. Each
     * product writes its slices of dqkv whole (beta 0). */
    for (int b = 0; b < n; b++) {
        const float *v = qkv + (size_t)b * t * ld + 2 * c, *g = dy + (size_t)b * t * c;
        HERD_TRY(gemm_heads(false, true, t, t, d, 1.0f, g, c, d, v, ld, d,
                            ds + (size_t)b * heads * tt, t, tt, heads));
    }
    size_t rows = (size_t)n * heads * t;
    k_softmax_bwd<<<row_blocks(rows), 32 * WARPS_PER_BLOCK, 0, herd_cuda_ctx_get()->stream>>>(
        rows, t, scale, att, ds);
    HERD_CUDA_LAUNCHED("k_softmax_bwd");
    for (int b = 0; b < n; b++) {
        size_t off = (size_t)b * t * ld;
        const float *q = qkv + off, *k = q + c, *g = dy + (size_t)b * t * c;
        const float *sb = ds + (size_t)b * heads * tt, *ab = att + (size_t)b * heads * tt;
        float *dq = dqkv + off;
        HERD_TRY(gemm_heads(false, false, t, d, t, 1.0f, sb, t, tt, k, ld, d, dq, ld, d, heads));
        HERD_TRY(gemm_heads(true, false, t, d, t, 1.0f, sb, t, tt, q, ld, d, dq + c, ld, d, heads));
        HERD_TRY(gemm_heads(true, false, t, d, t, 1.0f, ab, t, tt, g, c, d, dq + 2 * c, ld, d,
                            heads));
    }
    return HERD_OK;
}
