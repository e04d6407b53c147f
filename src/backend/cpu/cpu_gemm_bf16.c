/* GEMM in bf16 mixed precision: A and B become bf16, products accumulate in fp32,
 * C stays fp32. Natively through a oneDNN matmul made once per shape (cpu_matmul.c);
 * emulated by rounding copies of A and B to bf16 for dnnl_sgemm. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_dnnl.h"
#include "backend/cpu/cpu_ops.h"
#include "core/half.h"

/* The bf16 copies of A and B: kept and grown, since a fresh allocation per call costs
 * more in page faults than the matmul itself (measured on mlp); one per thread, as
 * threads run GEMMs at once (--deterministic's slices). */
/* A rows x cols matrix with leading dimension ld, copied compactly: as bf16 (to16)
 * or as fp32 rounded to bf16 (to32). The rows are converted inline: a parallel region
 * per row costs more than the row. */
static void compact(const float *x, int rows, int cols, int ld, uint16_t *to16, float *to32)
{
    HERD_CPU_FOR(herd_cpu_par((size_t)rows * cols), int, r, rows,
        const float *row = x + (size_t)r * ld;
        if (to16) {
            uint16_t *out = to16 + (size_t)r * cols;
            for (int i = 0; i < cols; i++)
                out[i] = herd_float_to_bf16(row[i]);
        } else {
            float *out = to32 + (size_t)r * cols;
            for (int i = 0; i < cols; i++)
                out[i] = herd_bf16_to_float(herd_float_to_bf16(row[i]));
        }
    );
}

herd_status herd_cpu_gemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                               const float *a, int lda, const float *b, int ldb, float beta,
                               float *c, int ldc)
{
    bool native = herd_cpu_bf16() == HERD_CPU_BF16_NATIVE;
    size_t elem = native ? sizeof(uint16_t) : sizeof(float);
    /* Stored shapes: op(A) is m x k, op(B) is k x n. */
    int a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
    int b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
    size_t a_n = (size_t)a_rows * a_cols, b_n = (size_t)b_rows * b_cols;
    char *copy = herd_cpu_thread_buffer(HERD_CPU_BF16_COPIES, (a_n + b_n) * elem);
    if (!copy)
        return HERD_ERR_NOMEM; /* the allocator said why */
    herd_status st = HERD_OK;
    dnnl_status_t ds = dnnl_success;
    if (native) {
        uint16_t *a16 = (uint16_t *)copy, *b16 = a16 + a_n;
        compact(a, a_rows, a_cols, lda, a16, NULL);
        compact(b, b_rows, b_cols, ldb, b16, NULL);
        herd_matmul_shape s = {.bf16 = 1, .trans_a = trans_a, .trans_b = trans_b, .m = m,
                               .n = n, .k = k, .lda = a_cols, .ldb = b_cols, .ldc = ldc,
                               .alpha = alpha, .beta = beta};
        st = herd_cpu_matmul(&s, a16, b16, c);
    } else {
        float *a32 = (float *)copy, *b32 = a32 + a_n;
        compact(a, a_rows, a_cols, lda, NULL, a32);
        compact(b, b_rows, b_cols, ldb, NULL, b32);
        ds = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a32, a_cols, b32,
                        b_cols, beta, c, ldc);
    }
    HERD_DNNL(ds, "sgemm (bf16 emulation)");
    return st;
}
