/* GEMM through cuBLAS and the bias ops of fully connected layers as own kernels. */
#include "backend/cuda/cuda.h"

/* ---- kernels */

__global__ void k_bias_add(size_t total, int cols, float *y, const float *bias)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += bias[i % cols];
}

/* One block of 32 x 8 threads per 32 columns and slice of rows: x walks columns
 * (coalesced), y strides the slice's rows, then the 8 partial sums of a column are added
 * in shared memory. One slice writes db itself; several write their sums to part
 * [slice][cols] for k_bias_grad_total. */
__global__ void k_bias_grad(int rows, int cols, int per_slice, const float *dy, float *db,
                            float beta, float *part)
{
    __shared__ float sums[8][33];
    int col = blockIdx.x * 32 + threadIdx.x, lo = blockIdx.y * per_slice;
    int hi = lo + per_slice < rows ? lo + per_slice : rows;
    float s = 0.0f;
    if (col < cols)
        for (int r = lo + threadIdx.y; r < hi; r += 8)
            s += dy[(size_t)r * cols + col];
    sums[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        for (int j = 1; j < 8; j++)
            s += sums[j][threadIdx.x];
        if (part)
            part[(size_t)blockIdx.y * cols + col] = s;
        else
            db[col] = beta == 0.0f ? s : db[col] + s;
    }
}

/* db (+)= the slices' sums, added in slice order. */
__global__ void k_bias_grad_total(int cols, int slices, const float *part, float *db, float beta)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols)
        return;
    float s = part[col];
    for (int k = 1; k < slices; k++)
        s += part[(size_t)k * cols + col];
    db[col] = beta == 0.0f ? s : db[col] + s;
}

/* ---- launchers */

/* A row-major operand of `rows` rows of `cols` values, `ld` apart, rounded to 16 bits
 * into a scratch slot with the same leading dimension. */
static herd_status round16(int slot, int rows, int cols, const float *x, int ld, bool bf16,
                           const void **out)
{
    size_t n = (size_t)(rows - 1) * ld + cols;
    void *buf;
    HERD_TRY(herd_cuda_scratch(slot, n * 2, &buf));
    HERD_TRY(herd_cuda_cast_to_16(n, x, 1.0f, bf16, buf, herd_cuda_ctx_get()->stream));
    *out = buf;
    return HERD_OK;
}

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
        /* bf16 / fp16: the operands rounded to nearest even here, as the CPU's 16-bit gemm
         * rounds them, then tensor cores with fp32 sums. (cuBLAS's FAST_16BF rounds the fp32
         * operands its own way: 1.3e-2 from the CPU's rounding on an H200.) */
        bool bf16 = ctx->precision == HERD_PRECISION_BF16;
        const void *a16, *b16;
        HERD_TRY(round16(HERD_CUDA_SCRATCH_GEMM_A16, trans_a ? k : m, trans_a ? m : k, a, lda,
                         bf16, &a16));
        HERD_TRY(round16(HERD_CUDA_SCRATCH_GEMM_B16, trans_b ? n : k, trans_b ? k : n, b, ldb,
                         bf16, &b16));
        cudaDataType_t t16 = bf16 ? CUDA_R_16BF : CUDA_R_16F;
        HERD_CUBLAS(ctx->blas->gemm_ex(ctx->cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                       trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b16,
                                       t16, ldb, a16, t16, lda, &beta, c, CUDA_R_32F, ldc,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
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
    cudaStream_t st = herd_cuda_ctx_get()->stream;
    int slices = herd_cuda_colsum_slices(rows), per = (rows + slices - 1) / slices;
    float *part = NULL;
    if (slices > 1) {
        void *p;
        HERD_TRY(herd_cuda_scratch(HERD_CUDA_SCRATCH_COLSUM, (size_t)slices * cols * sizeof(float), &p));
        part = (float *)p;
    }
    dim3 grid((unsigned)(cols + 31) / 32, (unsigned)slices);
    k_bias_grad<<<grid, dim3(32, 8), 0, st>>>(rows, cols, per, dy, db, beta, part);
    HERD_CUDA_LAUNCHED("k_bias_grad");
    if (part) {
        k_bias_grad_total<<<(cols + 255) / 256, 256, 0, st>>>(cols, slices, part, db, beta);
        HERD_CUDA_LAUNCHED("k_bias_grad_total");
    }
    return HERD_OK;
}
