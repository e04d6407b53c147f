#include "backend/backend.h"

#include <string.h>

#include "core/error.h"

/* PyTorch's output size: floor((in + 2*pad - k) / stride) + 1. */
static int out_size(int in, int k, int stride, int pad) { return (in + 2 * pad - k) / stride + 1; }

herd_status herd_conv_desc_finish(herd_conv_desc *d)
{
    if (!d)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "conv2d: NULL description");
    if (d->n <= 0 || d->c_in <= 0 || d->h_in <= 0 || d->w_in <= 0 || d->c_out <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "conv2d: sizes must be positive (n=%d c_in=%d h=%d w=%d c_out=%d)", d->n,
                        d->c_in, d->h_in, d->w_in, d->c_out);
    if (d->kh <= 0 || d->kw <= 0 || d->stride <= 0 || d->pad < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "conv2d: kernel %dx%d, stride %d, pad %d: kernel and stride must be "
                        "positive and pad non-negative",
                        d->kh, d->kw, d->stride, d->pad);
    if (d->h_in + 2 * d->pad < d->kh || d->w_in + 2 * d->pad < d->kw)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "conv2d: kernel %dx%d is larger than the padded input %dx%d (pad %d); "
                        "the input is too small for this layer",
                        d->kh, d->kw, d->h_in + 2 * d->pad, d->w_in + 2 * d->pad, d->pad);
    d->h_out = out_size(d->h_in, d->kh, d->stride, d->pad);
    d->w_out = out_size(d->w_in, d->kw, d->stride, d->pad);
    return HERD_OK;
}

herd_status herd_pool_desc_finish(herd_pool_desc *d)
{
    if (!d)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "pool: NULL description");
    if (d->n <= 0 || d->c <= 0 || d->h_in <= 0 || d->w_in <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "pool: sizes must be positive (n=%d c=%d h=%d w=%d)",
                        d->n, d->c, d->h_in, d->w_in);
    if (d->k <= 0 || d->stride <= 0 || d->pad < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "pool: kernel %d, stride %d, pad %d: kernel and stride must be positive "
                        "and pad non-negative",
                        d->k, d->stride, d->pad);
    /* PyTorch's rule: padding beyond half the kernel would make windows of pure padding. */
    if (2 * d->pad > d->k)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "pool: pad %d must be at most half the kernel %d",
                        d->pad, d->k);
    if (d->h_in + 2 * d->pad < d->k || d->w_in + 2 * d->pad < d->k)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "pool: kernel %d is larger than the padded input %dx%d; the input is "
                        "too small for this layer",
                        d->k, d->h_in + 2 * d->pad, d->w_in + 2 * d->pad);
    d->h_out = out_size(d->h_in, d->k, d->stride, d->pad);
    d->w_out = out_size(d->w_in, d->k, d->stride, d->pad);
    return HERD_OK;
}

#if !HERD_HAVE_CUDA
/* The CPU-only build: the same entry point, so callers need no #if. */
const herd_backend *herd_backend_cuda(void)
{
    HERD_ERR(HERD_ERR_UNSUPPORTED,
             "cuda backend: herd was built without CUDA; rebuild with the CUDA toolkit and "
             "cuDNN installed (cmake -DHERD_CUDA=ON) or use the cpu backend");
    return NULL;
}

void herd_backend_cuda_shutdown(void) {}

bool herd_backend_cuda_visible(void) { return false; }

herd_status herd_backend_cuda_bind(int local_rank, int local_size)
{
    (void)local_rank, (void)local_size;
    herd_backend_cuda(); /* sets the message */
    return HERD_ERR_UNSUPPORTED;
}
#endif

herd_status herd_gemm_check(bool trans_a, bool trans_b, int m, int n, int k, const float *a,
                            int lda, const float *b, int ldb, const float *c, int ldc, bool *empty)
{
    *empty = false;
    if (m < 0 || n < 0 || k < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "gemm: negative size m=%d n=%d k=%d", m, n, k);
    if (m == 0 || n == 0) {
        *empty = true;
        return HERD_OK;
    }
    /* Row-major leading dimensions are the stored row lengths. */
    int a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
    if (lda < (a_cols > 1 ? a_cols : 1) || ldb < (b_cols > 1 ? b_cols : 1) || ldc < n)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "gemm: leading dimensions too small (lda=%d needs %d, ldb=%d needs %d, "
                        "ldc=%d needs %d)",
                        lda, a_cols, ldb, b_cols, ldc, n);
    if (!c || (k > 0 && (!a || !b)))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "gemm: NULL matrix");
    return HERD_OK;
}

herd_status herd_check_grad_beta(const char *op, float beta)
{
    if (beta != 0.0f && beta != 1.0f)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: beta must be 0 or 1, got %g", op, (double)beta);
    return HERD_OK;
}

herd_status herd_bn_check_sizes(const char *op, int n, int c, int hw)
{
    if (n <= 0 || c <= 0 || hw <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: sizes must be positive (n=%d c=%d hw=%d)", op,
                        n, c, hw);
    return HERD_OK;
}

herd_status herd_bn_check_count(int64_t count)
{
    if (count < 2)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "batchnorm: training needs more than 1 value per channel (%lld in the "
                        "batch); use a larger batch",
                        (long long)count);
    return HERD_OK;
}

const char *herd_precision_name(herd_precision p)
{
    switch (p) {
    case HERD_PRECISION_FP32: return "fp32";
    case HERD_PRECISION_TF32: return "tf32";
    case HERD_PRECISION_BF16: return "bf16";
    case HERD_PRECISION_FP16: return "fp16";
    }
    return "unknown";
}

herd_status herd_precision_parse(const char *name, herd_precision *out)
{
    static const herd_precision all[] = {HERD_PRECISION_FP32, HERD_PRECISION_TF32,
                                         HERD_PRECISION_BF16, HERD_PRECISION_FP16};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (strcmp(name, herd_precision_name(all[i])) == 0) {
            *out = all[i];
            return HERD_OK;
        }
    return HERD_ERR(HERD_ERR_INVALID_ARG, "unknown precision '%s' (use fp32, tf32, bf16 or fp16)",
                    name ? name : "(null)");
}

/* Dense (no sparsity) FLOPs per clock per SM, one multiply-add = 2, from NVIDIA's
 * architecture whitepapers: fp32 on the CUDA cores, the others on tensor cores with
 * fp32 accumulation. Keep in step with the table in docs/performance.md. */
double herd_peak_flops_per_clock_sm(int cc_major, int cc_minor, herd_precision p)
{
    static const struct {
        int major, minor;
        double fp32, tf32, half; /* half: fp16 and bf16 alike */
    } table[] = {
        {7, 0, 128, 0, 1024},    /* V100: 64 FP32 cores, 8 tensor cores; no TF32/BF16 */
        {8, 0, 128, 1024, 2048}, /* A100 */
        {9, 0, 256, 2048, 4096}, /* H100, H200 */
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (table[i].major != cc_major || table[i].minor != cc_minor)
            continue;
        switch (p) {
        case HERD_PRECISION_FP32: return table[i].fp32;
        case HERD_PRECISION_TF32: return table[i].tf32;
        case HERD_PRECISION_BF16: return cc_major >= 8 ? table[i].half : 0;
        case HERD_PRECISION_FP16: return table[i].half;
        }
    }
    return 0;
}
