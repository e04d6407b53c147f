/* GEMM through cuBLAS and the bias ops of fully connected layers as own kernels. */
#include "backend/cuda/cuda.h"

/* ---- kernels */

__global__ void k_bias_add(size_t total, int cols, float *y, const float *bias)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += bias[i % cols];
}

/* One block of 32 x 8 threads per 32 columns: x walks columns (coalesced), y strides
 * the rows, then the 8 partial sums of a column are added in shared memory. */
__global__ void k_bias_grad(int rows, int cols, const float *dy, float *db, float beta)
{
    __shared__ float part[8][33];
    int col = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (col < cols)
        for (int r = threadIdx.y; r < rows; r += 8)
            s += dy[(size_t)r * cols + col];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        for (int j = 1; j < 8; j++)
            s += part[j][threadIdx.x];
        db[col] = beta == 0.0f ? s : db[col] + s;
    }
}

/* ---- launchers */

extern "C" herd_status herd_cuda_gemm(bool trans_a, bool trans_b, int m, int n, int k,
                                      float alpha, const float *a, int lda, const float *b,
                                      int ldb, float beta, float *c, int ldc)
{
    bool empty;
    HERD_TRY(herd_gemm_check(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, &empty));
    if (empty)
        return HERD_OK;
    /* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the same
     * buffers with the operands swapped and m, n exchanged. */
    const herd_cuda_ctx *ctx = herd_cuda_ctx_get();
    if (herd_cuda_half(ctx)) {
        /* bf16 / fp16: cuBLAS rounds the fp32 operands to 16 bits for the tensor cores
         * and sums in fp32, as the CPU's bf16 gemm does. */
        cublasComputeType_t ct = ctx->precision == HERD_PRECISION_BF16
                                     ? CUBLAS_COMPUTE_32F_FAST_16BF
                                     : CUBLAS_COMPUTE_32F_FAST_16F;
        HERD_CUBLAS(ctx->blas->gemm_ex(ctx->cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                       trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                                       CUDA_R_32F, ldb, a, CUDA_R_32F, lda, &beta, c, CUDA_R_32F,
                                       ldc, ct, CUBLAS_GEMM_DEFAULT),
                    "gemm (16-bit tensor cores)");
        return HERD_OK;
    }
    HERD_CUBLAS(ctx->blas->sgemm(ctx->cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a, lda,
                                 &beta, c, ldc),
                "sgemm");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_bias_add(int rows, int cols, float *y, const float *bias)
{
    size_t total = (size_t)(rows > 0 ? rows : 0) * (size_t)(cols > 0 ? cols : 0);
    HERD_TRY(herd_check_bias_add(rows, cols, y, bias));
    if (total == 0)
        return HERD_OK;
    k_bias_add<<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, herd_cuda_ctx_get()->stream>>>(
        total, cols, y, bias);
    HERD_CUDA_LAUNCHED("k_bias_add");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_bias_grad(int rows, int cols, const float *dy, float *db,
                                           float beta)
{
    HERD_TRY(herd_check_bias_grad(rows, cols, dy, db, beta));
    if (cols == 0)
        return HERD_OK;
    k_bias_grad<<<(cols + 31) / 32, dim3(32, 8), 0, herd_cuda_ctx_get()->stream>>>(rows, cols, dy,
                                                                                  db, beta);
    HERD_CUDA_LAUNCHED("k_bias_grad");
    return HERD_OK;
}
