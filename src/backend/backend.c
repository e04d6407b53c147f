/* What every backend shares: layer descriptions, the argument checks each op makes
 * before it computes, precision names and the GPU peak table. */
#include "backend/backend.h"

#include <string.h>

#include "herd_config.h"
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

/* ------------------------------------------------------------ argument checks */

herd_status herd_check_set_threads(int threads)
{
    if (threads < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "threads must be >= 0 (0 = all cores), got %d",
                        threads);
    return HERD_OK;
}

herd_status herd_check_arrays(const char *op, const void *const *arrays, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (!arrays[i])
            return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: NULL array", op);
    return HERD_OK;
}

herd_status herd_check_timer_slot(int slot)
{
    if (slot < 0 || slot >= HERD_TIMER_SLOTS)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "timer slot %d outside 0..%d", slot,
                        HERD_TIMER_SLOTS - 1);
    return HERD_OK;
}

herd_status herd_check_grad_beta(const char *op, float beta)
{
    if (beta != 0.0f && beta != 1.0f)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: beta must be 0 or 1, got %g", op, (double)beta);
    return HERD_OK;
}

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

herd_status herd_check_bias_add(int rows, int cols, const float *y, const float *bias)
{
    if (rows < 0 || cols < 0 || ((size_t)rows * (size_t)cols > 0 && (!y || !bias)))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bias_add: bad arguments (rows=%d cols=%d)", rows,
                        cols);
    return HERD_OK;
}

herd_status herd_check_bias_grad(int rows, int cols, const float *dy, const float *db, float beta)
{
    if (rows < 0 || cols < 0 || (cols > 0 && !db) || ((size_t)rows * (size_t)cols > 0 && !dy))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bias_grad: bad arguments (rows=%d cols=%d)", rows,
                        cols);
    return herd_check_grad_beta("bias_grad", beta);
}

/* The finished description every backend's plan begins with. */
static const herd_conv_desc *conv_desc(const herd_conv_plan *p)
{
    return (const herd_conv_desc *)(const void *)p;
}

static const herd_pool_desc *pool_desc(const herd_pool_plan *p)
{
    return (const herd_pool_desc *)(const void *)p;
}

herd_status herd_check_conv2d_plan(const herd_conv_desc *d, herd_conv_plan **plan,
                                   herd_conv_desc *fin)
{
    if (!d || !plan)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "conv2d_plan: NULL argument");
    *plan = NULL;
    *fin = *d;
    return herd_conv_desc_finish(fin);
}

herd_status herd_check_conv2d_fwd(const herd_conv_plan *p, const float *x, const float *w,
                                  const float *b, const float *y)
{
    if (!p || !x || !w || !y)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "conv2d_fwd: NULL argument");
    if (conv_desc(p)->bias && !b)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "conv2d_fwd: the layer has a bias but b is NULL");
    return HERD_OK;
}

herd_status herd_check_conv2d_bwd_data(const herd_conv_plan *p, const float *dy, const float *w,
                                       const float *dx)
{
    if (!p || !dy || !w || !dx)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "conv2d_bwd_data: NULL argument");
    return HERD_OK;
}

herd_status herd_check_conv2d_bwd_weights(const herd_conv_plan *p, const float *x,
                                          const float *dy, const float *dw, const float *db,
                                          float beta)
{
    if (!p || !x || !dy)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "conv2d_bwd_weights: NULL argument");
    HERD_TRY(herd_check_grad_beta("conv2d_bwd_weights", beta));
    if (!dw || (conv_desc(p)->bias && !db))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "conv2d_bwd_weights: NULL gradient");
    return HERD_OK;
}

herd_status herd_check_pool_plan(const herd_pool_desc *d, herd_pool_plan **plan,
                                 herd_pool_desc *fin)
{
    if (!d || !plan)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "pool_plan: NULL argument");
    *plan = NULL;
    *fin = *d;
    return herd_pool_desc_finish(fin);
}

herd_status herd_check_pool_fwd(const herd_pool_plan *p, const float *x, const float *y)
{
    if (!p || !x || !y)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "pool_fwd: NULL argument");
    return HERD_OK;
}

herd_status herd_check_pool_bwd(const herd_pool_plan *p, const float *dy, const float *dx,
                                bool trained)
{
    if (!p || !dy || !dx)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "pool_bwd: NULL argument");
    if (pool_desc(p)->is_max && !trained)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "max pool backward needs a training forward pass first (the argmax of "
                        "the last one is kept in the plan)");
    return HERD_OK;
}

herd_status herd_check_global_avgpool(const char *op, int n, int c, int hw, const float *in,
                                      const float *out)
{
    if (n <= 0 || c <= 0 || hw <= 0 || !in || !out)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: bad arguments (n=%d c=%d hw=%d)", op, n, c, hw);
    return HERD_OK;
}

static herd_status bn_check_sizes(const char *op, int n, int c, int hw)
{
    if (n <= 0 || c <= 0 || hw <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: sizes must be positive (n=%d c=%d hw=%d)", op,
                        n, c, hw);
    return HERD_OK;
}

/* Training statistics need more than one value per channel. */
static herd_status bn_check_count(int64_t count)
{
    if (count < 2)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "batchnorm: training needs more than 1 value per channel (%lld in the "
                        "batch); use a larger batch",
                        (long long)count);
    return HERD_OK;
}

herd_status herd_check_bn_fwd_train(int n, int c, int hw, const float *x, const float *gamma,
                                    const float *beta, const float *y, const float *save_mean,
                                    const float *save_invstd, const float *running_mean,
                                    const float *running_var)
{
    HERD_TRY(bn_check_sizes("bn_fwd_train", n, c, hw));
    HERD_CHECK_ARRAYS("bn_fwd_train", 1, x, gamma, beta, y, save_mean, save_invstd, running_mean,
                      running_var);
    return bn_check_count((int64_t)n * hw);
}

herd_status herd_check_bn_fwd_infer(int n, int c, int hw, const float *x, const float *gamma,
                                    const float *beta, const float *y, const float *running_mean,
                                    const float *running_var)
{
    HERD_TRY(bn_check_sizes("bn_fwd_infer", n, c, hw));
    HERD_CHECK_ARRAYS("bn_fwd_infer", 1, x, gamma, beta, y, running_mean, running_var);
    return HERD_OK;
}

herd_status herd_check_bn_bwd(int n, int c, int hw, const float *x, const float *dy,
                              const float *gamma, const float *save_mean,
                              const float *save_invstd, const float *dgamma, const float *dbeta,
                              float beta)
{
    HERD_TRY(bn_check_sizes("bn_bwd", n, c, hw));
    /* dx may be NULL: batch norm reading the model input needs no input gradient. */
    HERD_CHECK_ARRAYS("bn_bwd", 1, x, dy, gamma, save_mean, save_invstd, dgamma, dbeta);
    return herd_check_grad_beta("bn_bwd", beta);
}

herd_status herd_check_bn_stats(int n, int c, int hw, const float *x, const double *sum,
                                int64_t count, const double *out)
{
    HERD_TRY(bn_check_sizes("bn_stats", n, c, hw));
    HERD_CHECK_ARRAYS("bn_stats", 1, x, out);
    return sum ? bn_check_count(count) : HERD_OK;
}

herd_status herd_check_bn_apply_train(int n, int c, int hw, const float *x, const float *gamma,
                                      const float *beta, const double *sum, const double *sqdev,
                                      int64_t count, const float *y, const float *save_mean,
                                      const float *save_invstd, const float *running_mean,
                                      const float *running_var)
{
    HERD_TRY(bn_check_sizes("bn_apply_train", n, c, hw));
    HERD_CHECK_ARRAYS("bn_apply_train", 1, x, gamma, beta, sum, sqdev, y, save_mean, save_invstd,
                      running_mean, running_var);
    return bn_check_count(count);
}

herd_status herd_check_bn_bwd_reduce(int n, int c, int hw, const float *x, const float *dy,
                                     const float *save_mean, const float *save_invstd,
                                     const double *sum_dy, const double *sum_dy_xc,
                                     const float *dgamma, const float *dbeta, float beta)
{
    HERD_TRY(bn_check_sizes("bn_bwd_reduce", n, c, hw));
    HERD_CHECK_ARRAYS("bn_bwd_reduce", 1, x, dy, save_mean, save_invstd, sum_dy, sum_dy_xc,
                      dgamma, dbeta);
    return herd_check_grad_beta("bn_bwd_reduce", beta);
}

herd_status herd_check_bn_bwd_apply(int n, int c, int hw, const float *x, const float *dy,
                                    const float *gamma, const float *save_mean,
                                    const float *save_invstd, const double *sum_dy,
                                    const double *sum_dy_xc, int64_t count, const float *dx)
{
    HERD_TRY(bn_check_sizes("bn_bwd_apply", n, c, hw));
    HERD_CHECK_ARRAYS("bn_bwd_apply", 1, x, dy, gamma, save_mean, save_invstd, sum_dy, sum_dy_xc,
                      dx);
    return bn_check_count(count);
}

herd_status herd_check_dropout_fwd(size_t n, const float *x, const float *y, const float *mask,
                                   float p)
{
    HERD_CHECK_ARRAYS("dropout_fwd", n, x, y, mask);
    if (!(p >= 0.0f && p <= 1.0f))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "dropout: p must be in [0, 1], got %g", (double)p);
    return HERD_OK;
}

herd_status herd_check_softmax_xent(int n, int classes, const float *logits,
                                    const int32_t *labels, float smoothing)
{
    if (n <= 0 || classes <= 0 || !logits || !labels)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "softmax_xent: bad arguments (n=%d classes=%d)", n,
                        classes);
    if (!(smoothing >= 0.0f && smoothing <= 1.0f))
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "softmax_xent: label smoothing must be in [0, 1], got %g",
                        (double)smoothing);
    return HERD_OK;
}

herd_status herd_xent_bad_label(int label, int row, int classes)
{
    return HERD_ERR(HERD_ERR_INVALID_ARG,
                    "softmax_xent: label %d of sample %d is outside [0, %d); does the model's "
                    "class count match the dataset?",
                    label, row, classes);
}

herd_status herd_xent_totals_check(const herd_xent_totals *t, int classes)
{
    return t->bad_row == INT32_MAX ? HERD_OK
                                   : herd_xent_bad_label(t->bad_label, t->bad_row, classes);
}

herd_status herd_check_sgd_update(size_t n, const float *w, const float *g,
                                  const float *momentum_buf, const herd_sgd_args *a)
{
    if (n == 0)
        return HERD_OK;
    if (!w || !g || !a)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "sgd_update: weights, gradients and args must not be NULL");
    if (a->momentum != 0.0f && !momentum_buf)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "sgd_update: momentum %g needs a momentum buffer; allocate one or set "
                        "momentum 0",
                        (double)a->momentum);
    return HERD_OK;
}

herd_status herd_check_adamw_update(size_t n, const float *w, const float *g, const float *m,
                                    const float *v, const herd_adamw_args *a)
{
    if (n == 0)
        return HERD_OK;
    if (!w || !g || !m || !v || !a)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "adamw_update: weights, gradients, moments and args must not be NULL");
    if (a->step < 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "adamw_update: step is %ld but must be 1-based (>= 1) for the bias "
                        "correction",
                        a->step);
    return HERD_OK;
}

herd_status herd_check_grad_unscale(size_t n, const float *x)
{
    if (n && !x)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "grad_unscale_check: NULL buffer for %zu values", n);
    return HERD_OK;
}

herd_status herd_check_sum_squares(size_t n, const float *x, const double *out)
{
    if ((n && !x) || !out)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "sum_squares: NULL buffer for %zu values or NULL result", n);
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

static _Thread_local herd_mem_category mem_category = HERD_MEM_WORKSPACE;

herd_mem_category herd_mem_category_set(herd_mem_category c)
{
    herd_mem_category old = mem_category;
    mem_category = c;
    return old;
}

herd_mem_category herd_mem_category_current(void) { return mem_category; }

herd_status herd_backend_grow(const herd_backend *be, herd_mem_category c, void **buf, size_t *cap,
                              size_t need, size_t elem)
{
    if (need <= *cap)
        return HERD_OK;
    be->free(*buf);
    *cap = 0;
    herd_mem_category was = herd_mem_category_set(c);
    *buf = be->alloc(need * elem);
    herd_mem_category_set(was);
    if (!*buf)
        return HERD_ERR_NOMEM; /* the allocator said why */
    *cap = need;
    return HERD_OK;
}

herd_status herd_backend_upload(const herd_backend *be, void *dst, const void *src, size_t bytes)
{
    if (!be->host_memory)
        return be->memcpy_h2d(dst, src, bytes);
    memcpy(dst, src, bytes);
    return HERD_OK;
}

const char *herd_mem_category_name(int c)
{
    static const char *names[] = {"parameters", "gradients", "optimizer state", "activations",
                                  "workspace", "checkpoint buffers"};
    return c >= 0 && c < HERD_MEM_CATEGORIES ? names[c] : "?";
}
