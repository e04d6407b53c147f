/* GEMM and the bias ops of fully connected layers. fp32 GEMMs go through oneDNN matmuls
 * made once per shape (cpu_matmul.c says what they beat); OpenBLAS was 4-8% slower than
 * either at 1 thread here, with its SkylakeX kernels (bench/results/2026-11-28-gemm-cpu.txt). */

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

herd_status herd_cpu_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float *a, int lda, const float *b, int ldb, float beta, float *c,
                          int ldc)
{
    bool empty;
    HERD_TRY(herd_gemm_check(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, &empty));
    if (empty)
        return HERD_OK;
    if (herd_cpu_bf16() != HERD_CPU_BF16_OFF)
        return herd_cpu_gemm_bf16(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    herd_matmul_shape s = {.bf16 = 0, .trans_a = trans_a, .trans_b = trans_b, .m = m, .n = n,
                           .k = k, .lda = lda, .ldb = ldb, .ldc = ldc, .alpha = alpha,
                           .beta = beta};
    return herd_cpu_matmul(&s, a, b, c);
}

herd_status herd_cpu_bias_add(int rows, int cols, float *y, const float *bias)
{
    HERD_TRY(herd_check_bias_add(rows, cols, y, bias));
    HERD_CPU_FOR(herd_cpu_par(rows * (size_t)cols), int, r, rows,
        float *row = y + (size_t)r * cols;
        for (int j = 0; j < cols; j++)
            row[j] += bias[j];
    );
    return HERD_OK;
}

herd_status herd_cpu_bias_grad(int rows, int cols, const float *dy, float *db, float beta)
{
    HERD_TRY(herd_check_bias_grad(rows, cols, dy, db, beta));
    /* Column sums, row by row, so the inner loop is contiguous and vectorises. */
    if (beta == 0.0f)
        for (int j = 0; j < cols; j++)
            db[j] = 0.0f;
    for (int r = 0; r < rows; r++) {
        const float *row = dy + (size_t)r * cols;
        for (int j = 0; j < cols; j++)
            db[j] += row[j];
    }
    return HERD_OK;
}
