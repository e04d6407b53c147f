/* Causal self-attention's core on the CPU (backend.h's attention_fwd / attention_bwd):
 * per (sample, head) the scores, the softmax and its backward as matrix products through
 * dnnl_sgemm, on q, k and v where they lie in qkv (rows 3c apart). A (sample, head) is one
 * thread's from start to end and its GEMMs run on that thread (oneDNN does not nest
 * threads), so the bits do not depend on the thread count. Scores above the diagonal are
 * computed and then masked: a whole t x t product runs at GEMM speed, where the lower
 * triangle alone would fall back to dot products one row at a time. fp32 at every
 * --precision (PyTorch's bf16 autocast would run these two products in bf16). */
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/cpu_dnnl.h"
#include "backend/cpu/cpu_fastexp.h"
#include "backend/cpu/cpu_ops.h"

/* Row-major C = alpha op(A) op(B) + beta C on this thread; false when oneDNN failed. */
static bool mm(char ta, char tb, int m, int n, int k, float alpha, const float *a, size_t lda,
               const float *b, size_t ldb, float beta, float *c, size_t ldc)
{
    return dnnl_sgemm(ta, tb, m, n, k, alpha, a, (dnnl_dim_t)lda, b, (dnnl_dim_t)ldb, beta, c,
                      (dnnl_dim_t)ldc) == dnnl_success;
}

/* Row i of the scores into its softmax over positions 0..i, zero after. */
static void softmax_row(float *row, int i, int t)
{
    float mx = row[0];
#pragma omp simd reduction(max : mx)
    for (int j = 1; j <= i; j++)
        mx = row[j] > mx ? row[j] : mx;
#pragma omp simd
    for (int j = 0; j <= i; j++)
        row[j] = herd_fast_expf(row[j] - mx);
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j <= i; j++)
        sum += row[j];
    float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j <= i; j++)
        row[j] *= inv;
    for (int j = i + 1; j < t; j++)
        row[j] = 0.0f;
}

static herd_status failed(const char *what)
{
    return HERD_ERR(HERD_ERR_INTERNAL, "oneDNN sgemm failed in %s (out of memory, or a size "
                    "oneDNN refuses)", what);
}

herd_status herd_cpu_attention_fwd(int n, int t, int c, int heads, const float *qkv, float *att,
                                   float *y)
{
    HERD_CHECK_ARRAYS("attention_fwd", (size_t)n * t * c, qkv, att, y);
    int d = c / heads;
    float scale = 1.0f / sqrtf((float)d);
    size_t ld = 3 * (size_t)c;
    bool ok = true;
#pragma omp parallel for collapse(2) schedule(static) reduction(&& : ok)
    for (int b = 0; b < n; b++)
        for (int h = 0; h < heads; h++) {
            const float *q = qkv + (size_t)b * t * ld + (size_t)h * d, *k = q + c, *v = q + 2 * c;
            float *a = att + ((size_t)b * heads + h) * t * t;
            /* a = q k^T / sqrt(d), then its rows' causal softmax; y = a v. */
            ok = ok && mm('N', 'T', t, t, d, scale, q, ld, k, ld, 0.0f, a, (size_t)t);
            for (int i = 0; i < t && ok; i++)
                softmax_row(a + (size_t)i * t, i, t);
            ok = ok && mm('N', 'N', t, d, t, 1.0f, a, (size_t)t, v, ld, 0.0f,
                          y + (size_t)b * t * c + (size_t)h * d, (size_t)c);
        }
    return ok ? HERD_OK : failed("attention_fwd");
}

herd_status herd_cpu_attention_bwd(int n, int t, int c, int heads, const float *qkv,
                                   const float *att, const float *dy, float *dqkv)
{
    HERD_CHECK_ARRAYS("attention_bwd", (size_t)n * t * c, qkv, att, dy, dqkv);
    int d = c / heads;
    float scale = 1.0f / sqrtf((float)d);
    size_t ld = 3 * (size_t)c;
    bool ok = true;
    /* Each (sample, head) owns its slices of dqkv: no two threads write one value. */
#pragma omp parallel reduction(&& : ok)
    {
        float *ds = malloc((size_t)t * t * sizeof *ds); /* this thread's d(scores) */
        ok = ds != NULL;
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < n; b++)
            for (int h = 0; h < heads; h++) {
                if (!ds)
                    continue;
                size_t off = (size_t)b * t * ld + (size_t)h * d;
                const float *q = qkv + off, *k = q + c, *v = q + 2 * c;
                float *dq = dqkv + off, *dk = dq + c, *dv = dq + 2 * c;
                const float *a = att + ((size_t)b * heads + h) * t * t;
                const float *g = dy + (size_t)b * t * c + (size_t)h * d;
                /* da = g v^T; through the softmax, ds = a (da - rowsum(a da)) / sqrt(d) (zero
                 * above the diagonal, where a is); then dq = ds k, dk = ds^T q, dv = a^T g. */
                ok = ok && mm('N', 'T', t, t, d, 1.0f, g, (size_t)c, v, ld, 0.0f, ds, (size_t)t);
                for (int i = 0; i < t && ok; i++) {
                    const float *ar = a + (size_t)i * t;
                    float *dr = ds + (size_t)i * t, s = 0;
                    for (int j = 0; j <= i; j++)
                        s += ar[j] * dr[j];
#pragma omp simd
                    for (int j = 0; j < t; j++)
                        dr[j] = ar[j] * (dr[j] - s) * scale;
                }
                ok = ok && mm('N', 'N', t, d, t, 1.0f, ds, (size_t)t, k, ld, 0.0f, dq, ld);
                ok = ok && mm('T', 'N', t, d, t, 1.0f, ds, (size_t)t, q, ld, 0.0f, dk, ld);
                ok = ok && mm('T', 'N', t, d, t, 1.0f, a, (size_t)t, g, (size_t)c, 0.0f, dv, ld);
            }
        free(ds);
    }
    return ok ? HERD_OK : failed("attention_bwd");
}
