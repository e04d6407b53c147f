/* CUDA backend internals shared between its files (C and CUDA C++).
 *
 * Every op runs on the backend's one stream. It is a blocking stream (not
 * cudaStreamNonBlocking) on purpose: plain cudaMemcpy on the legacy default stream,
 * as callers and tests use to move data in and out, then orders itself after the
 * queued work without any extra synchronisation. */
#ifndef HERD_BACKEND_CUDA_H
#define HERD_BACKEND_CUDA_H

#include <cuda_runtime.h>
#include <cudnn.h>

#include "core/cublas_lib.h" /* before extern "C": it includes cuBLAS's C++-aware headers */

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/backend.h"
#include "core/error.h"

typedef struct herd_cuda_ctx {
    int device;
    cudaStream_t stream;
    const herd_cublas_lib *blas; /* opened at the backend's start (core/cublas_lib.h) */
    cublasHandle_t cublas;
    cudnnHandle_t cudnn;
    /* --precision: fp32 (no tensor cores), tf32, or bf16 / fp16 (tensor cores on 16-bit
     * operands, fp32 sums; activations between layers in 16 bits, cuda_act16.cu). */
    herd_precision precision;
} herd_cuda_ctx;

/* Whether the context's precision is bf16 or fp16: 16-bit operands and activations. */
static inline bool herd_cuda_half(const herd_cuda_ctx *ctx)
{
    return ctx->precision == HERD_PRECISION_BF16 || ctx->precision == HERD_PRECISION_FP16;
}

/* The context made by herd_backend_cuda(); valid once it returned non-NULL. */
const herd_cuda_ctx *herd_cuda_ctx_get(void);

/* Caching allocator (cuda_alloc.c): device memory, zeroed, in size classes. */
void *herd_cuda_alloc(size_t bytes);
void herd_cuda_free(void *p);
/* Frees the cached blocks and the scratch buffers (shutdown). */
void herd_cuda_alloc_release(void);
/* Caps the bytes the allocator holds, cached blocks included (0 = no cap). */
herd_status herd_cuda_set_memory_limit(uint64_t bytes);
/* Bytes herd could still take on the device (the cap's or the driver's view). */
uint64_t herd_cuda_memory_available(void);

/* Grow-only device scratch owned by the backend, one buffer per slot; ops use it for
 * small per-call temporaries so the training step never calls cudaMalloc. Safe to
 * reuse across ops because everything runs in order on one stream. */
enum { HERD_CUDA_SCRATCH_LOSS, HERD_CUDA_SCRATCH_BN, HERD_CUDA_SCRATCH_FLAG, HERD_CUDA_SCRATCH_NORM,
       HERD_CUDA_SCRATCH_CONV, /* the workspace every convolution shares */
       /* 16-bit convolutions: an fp32 input, output or weights converted for cuDNN */
       HERD_CUDA_SCRATCH_CONV_X16, HERD_CUDA_SCRATCH_CONV_Y16, HERD_CUDA_SCRATCH_CONV_W16,
       /* 16-bit gemm: the fp32 operands rounded */
       HERD_CUDA_SCRATCH_GEMM_A16, HERD_CUDA_SCRATCH_GEMM_B16,
       HERD_CUDA_SCRATCH_ATTN, /* attention's backward: d(scores) of a batch */
       HERD_CUDA_SCRATCH_COLSUM, /* column sums over many rows: each slice's partial sums */
       HERD_CUDA_SCRATCH_LOSS_TOTALS, /* softmax_xent's totals, waited for */
       HERD_CUDA_SCRATCH_COUNT };
herd_status herd_cuda_scratch(int slot, size_t bytes, void **p);
/* Gives a slot's buffer back to the allocator's cache (in stream order). */
void herd_cuda_scratch_release(int slot);
/* Pinned host memory for results that come back to the host (loss sums). */
herd_status herd_cuda_host_scratch(size_t bytes, void **p);
/* cuda_upload.c: host-to-device copies through pinned staging, in stream order, not
 * waited for (the host buffer is free again on return); the staging goes at shutdown. */
herd_status herd_cuda_upload(void *dst, const void *src, size_t bytes);
void herd_cuda_upload_release(void);

/* Graphs (cuda_graph.c): backend.h's graph ops; whether this thread is capturing one;
 * during a capture, the device word (INT_MAX when all is well, else the first bad row)
 * an embedding's token check writes, which the graph's launch reads and reports; the
 * check words given back at shutdown. The allocator counts its frees: a graph holding
 * a freed pointer is stale. */
herd_status herd_cuda_graph_capture(herd_graph_region region, void *user, herd_graph **out);
herd_status herd_cuda_graph_launch(herd_graph *g, bool *stale);
void herd_cuda_graph_free(herd_graph *g);
void herd_cuda_graph_release(void);
bool herd_cuda_capturing(void);
herd_status herd_cuda_graph_defer_check(const float *tokens, int rows, int t, int vocab,
                                        int **word);
uint64_t herd_cuda_frees(void);
/* The error for token row `bad` of an embedding (its value read back). */
herd_status herd_cuda_token_error(const float *tokens, int bad, int t, int vocab);

/* The phase timer (cuda_timer.c): backend.h's timer_mark / timer_elapsed, and the
 * events given back at shutdown. */
herd_status herd_cuda_timer_mark(int slot);
herd_status herd_cuda_timer_elapsed(int from, int to, double *seconds);
void herd_cuda_timer_release(void);

#define HERD_CUDA_HINT                                                                   \
    "; rerun with CUDA_LAUNCH_BLOCKING=1 (and compute-sanitizer) to find the failing " \
    "kernel, or use --device cpu"

/* A CUDA runtime call that failed. */
#define HERD_CUDA(call, what)                                                          \
    do {                                                                               \
        cudaError_t herd_ce_ = (call);                                                 \
        if (herd_ce_ != cudaSuccess)                                                   \
            return HERD_ERR(HERD_ERR_INTERNAL, "CUDA: %s failed: %s (%s)%s", what,     \
                            cudaGetErrorName(herd_ce_), cudaGetErrorString(herd_ce_), \
                            HERD_CUDA_HINT);                                           \
    } while (0)

/* After a kernel launch: reports bad launch configurations at once (errors inside
 * the kernel surface at the next synchronising call). */
#define HERD_CUDA_LAUNCHED(kernel) HERD_CUDA(cudaGetLastError(), "launch of " kernel)

#define HERD_CUBLAS(call, what)                                                          \
    do {                                                                                 \
        cublasStatus_t herd_cb_ = (call);                                                \
        if (herd_cb_ != CUBLAS_STATUS_SUCCESS)                                           \
            return HERD_ERR(HERD_ERR_INTERNAL, "cuBLAS: %s failed: %s (%s)%s", what,     \
                            herd_cuda_ctx_get()->blas->status_name(herd_cb_),          \
                            herd_cuda_ctx_get()->blas->status_string(herd_cb_),        \
                            HERD_CUDA_HINT);                                             \
    } while (0)

#define HERD_CUDNN(call, what)                                                              \
    do {                                                                                    \
        cudnnStatus_t herd_cd_ = (call);                                                    \
        if (herd_cd_ != CUDNN_STATUS_SUCCESS)                                               \
            return HERD_ERR(HERD_ERR_INTERNAL, "cuDNN: %s failed: %s%s", what,              \
                            cudnnGetErrorString(herd_cd_), HERD_CUDA_HINT);                 \
    } while (0)

/* Launch geometry for grid-stride loops over n elements. */
#define HERD_CUDA_THREADS 256
static inline unsigned herd_cuda_blocks(size_t n)
{
    size_t b = (n + HERD_CUDA_THREADS - 1) / HERD_CUDA_THREADS;
    if (b < 1)
        b = 1;
    return b > 65535u * 16u ? 65535u * 16u : (unsigned)b; /* grid-stride covers the rest */
}

/* ---- ops, one file per family; same contracts as backend.h */

/* Column sums over `rows` rows in slices of rows, so that long columns (a transformer's
 * n x t rows) spread over the GPU: the slice count, fixed by the row count alone (the
 * same sums on any GPU); 1 below HERD_CUDA_COLSUM_ROWS rows a slice. */
#define HERD_CUDA_COLSUM_ROWS 256
static inline int herd_cuda_colsum_slices(int rows)
{
    int s = (rows + HERD_CUDA_COLSUM_ROWS - 1) / HERD_CUDA_COLSUM_ROWS;
    return s < 1 ? 1 : s > 64 ? 64 : s;
}

/* cuda_gemm.cu */
herd_status herd_cuda_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                           const float *a, int lda, const float *b, int ldb, float beta, float *c,
                           int ldc);
herd_status herd_cuda_bias_add(int rows, int cols, float *y, const float *bias);
herd_status herd_cuda_bias_grad(int rows, int cols, const float *dy, float *db, float beta);

/* cuda_conv.c */
herd_status herd_cuda_conv2d_plan(const herd_conv_desc *d, herd_conv_plan **plan);
void herd_cuda_conv2d_plan_free(herd_conv_plan *plan);
herd_status herd_cuda_conv2d_fwd(herd_conv_plan *p, const float *x, const float *w,
                                 const float *b, float *y);
herd_status herd_cuda_conv2d_bwd_data(herd_conv_plan *p, const float *dy, const float *w,
                                      float *dx);
herd_status herd_cuda_conv2d_bwd_weights(herd_conv_plan *p, const float *x, const float *dy,
                                         float *dw, float *db, float beta);

/* cuda_pool.cu */
herd_status herd_cuda_pool_plan(const herd_pool_desc *d, herd_pool_plan **plan);
void herd_cuda_pool_plan_free(herd_pool_plan *plan);
herd_status herd_cuda_pool_fwd(herd_pool_plan *p, const float *x, float *y, bool training);
herd_status herd_cuda_pool_bwd(herd_pool_plan *p, const float *dy, float *dx);
herd_status herd_cuda_global_avgpool_fwd(int n, int c, int hw, const float *x, float *y);
herd_status herd_cuda_global_avgpool_bwd(int n, int c, int hw, const float *dy, float *dx);

/* cuda_bn.cu */
herd_status herd_cuda_bn_fwd_train(int n, int c, int hw, const float *x, const float *gamma,
                                   const float *beta, float *y, float *save_mean,
                                   float *save_invstd, float *running_mean, float *running_var,
                                   float momentum, float eps);
herd_status herd_cuda_bn_fwd_infer(int n, int c, int hw, const float *x, const float *gamma,
                                   const float *beta, float *y, const float *running_mean,
                                   const float *running_var, float eps);
herd_status herd_cuda_bn_bwd(int n, int c, int hw, const float *x, const float *dy,
                             const float *gamma, const float *save_mean,
                             const float *save_invstd, float *dx, float *dgamma, float *dbeta,
                             float beta);
herd_status herd_cuda_bn_stats(int n, int c, int hw, const float *x, const double *sum,
                               int64_t count, double *out);
herd_status herd_cuda_bn_apply_train(int n, int c, int hw, const float *x, const float *gamma,
                                     const float *beta, const double *sum, const double *sqdev,
                                     int64_t count, float *y, float *save_mean,
                                     float *save_invstd, float *running_mean, float *running_var,
                                     float momentum, float eps);
herd_status herd_cuda_bn_bwd_reduce(int n, int c, int hw, const float *x, const float *dy,
                                    const float *save_mean, const float *save_invstd,
                                    double *sum_dy, double *sum_dy_xc, float *dgamma,
                                    float *dbeta, float beta);
herd_status herd_cuda_bn_bwd_apply(int n, int c, int hw, const float *x, const float *dy,
                                   const float *gamma, const float *save_mean,
                                   const float *save_invstd, const double *sum_dy,
                                   const double *sum_dy_xc, int64_t count, float *dx);

/* cuda_elementwise.cu */
herd_status herd_cuda_relu_fwd(size_t n, const float *x, float *y);
herd_status herd_cuda_relu_bwd(size_t n, const float *y, const float *dy, float *dx);
herd_status herd_cuda_dropout_fwd(size_t n, const float *x, float *y, float *mask, float p,
                                  uint64_t seed);
herd_status herd_cuda_dropout_fwd_seeded(size_t n, const float *x, float *y, float *mask, float p,
                                         const uint64_t *seed, uint64_t stream);
herd_status herd_cuda_mul(size_t n, const float *a, const float *b, float *y);
herd_status herd_cuda_add(size_t n, const float *a, const float *b, float *y);
herd_status herd_cuda_axpy(size_t n, float alpha, const float *x, float *y);
herd_status herd_cuda_copy(size_t n, const float *x, float *y);
herd_status herd_cuda_memcpy_h2d(void *dst, const void *src, size_t bytes);
herd_status herd_cuda_memcpy_d2h(void *dst, const void *src, size_t bytes);
herd_status herd_cuda_fill(size_t n, float value, float *y);

/* cuda_bn.cu: the per-channel steps, shared with the 16-bit activations' batch norm.
 * part holds [2][splits][c] partial sums; totals adds each channel's in split order
 * into a (and b); params and bwd_params are k_bn_params / k_bn_bwd_params (cuda_bn.cu
 * says what they compute). The scratch gives part, tot ([2][c]) and coef ([3][c]). */
herd_status herd_cuda_bn_scratch(int c, int splits, double **part, double **tot, float **coef);
herd_status herd_cuda_bn_totals(int c, int splits, const double *part, double *a, double *b);
herd_status herd_cuda_bn_params(int c, const double *sum, const double *sq, int64_t count,
                                const float *gamma, const float *beta, float *save_mean,
                                float *save_invstd, float *running_mean, float *running_var,
                                float momentum, float eps, float *coef);
herd_status herd_cuda_bn_bwd_params(int c, const double *sdy, const double *sdyxc,
                                    int64_t count, const float *gamma, const float *save_invstd,
                                    float *dgamma, float *dbeta, float beta, float *coef);

/* cuda_act16.cu: 16-bit activations, channels last (NHWC), bf16 or IEEE half by the
 * context's precision; the backend's bf16_acts table, and the conversions its
 * convolutions use. to_nhwc16: fp32 NCHW [n][c][hw] -> 16-bit [n][hw][c]; from_nhwc16:
 * back, y = v (+ bias[ch] when bias) or y += v when accumulate. */
extern const herd_bf16_act_ops herd_cuda_act16_ops;
herd_status herd_cuda_to_nhwc16(int n, int c, int hw, const float *x, uint16_t *y);
herd_status herd_cuda_from_nhwc16(int n, int c, int hw, const uint16_t *x, float *y,
                                  const float *bias, bool accumulate);
/* Row-major [rows][c] 16-bit values: y[r][ch] += bias[ch], and db (+)= the column sums. */
herd_status herd_cuda_nhwc16_bias_add(size_t rows, int c, uint16_t *y, const float *bias);
herd_status herd_cuda_nhwc16_bias_grad(size_t rows, int c, const uint16_t *dy, float *db,
                                       float beta);

/* cuda_loss.cu */
herd_status herd_cuda_softmax_xent_queued(int n, int classes, const float *logits,
                                          const int32_t *labels, float smoothing, float *dlogits,
                                          herd_xent_totals *totals);
herd_status herd_cuda_softmax_xent(int n, int classes, const float *logits,
                                   const int32_t *labels, float smoothing, float *dlogits,
                                   double *loss_sum, long *correct);
herd_status herd_cuda_xent_part_stats(int n, int count, int first, const float *logits,
                                      const int32_t *labels, double *stats);
herd_status herd_cuda_xent_part_grad(int n, int count, int first, int classes,
                                     const float *logits, const int32_t *labels,
                                     const double *lse, float smoothing, float *dlogits);

/* cuda_transformer.cu, cuda_attention.cu */
herd_status herd_cuda_embedding_fwd(int n, int t, int c, int vocab, int first, int count,
                                    const float *tokens, const float *wte, const float *wpe,
                                    float *y);
herd_status herd_cuda_embedding_bwd(int n, int t, int c, int first, int count, int context,
                                    const float *tokens, const float *dy, float *dwte,
                                    float beta_wte, float *dwpe, float beta);
herd_status herd_cuda_layernorm_fwd(int rows, int c, const float *x, const float *gamma,
                                    const float *bias, float eps, float *y, float *mean,
                                    float *rstd);
herd_status herd_cuda_layernorm_bwd(int rows, int c, const float *x, const float *dy,
                                    const float *gamma, const float *mean, const float *rstd,
                                    float *dx, float *dgamma, float *dbias, float beta);
herd_status herd_cuda_gelu_fwd(size_t n, const float *x, float *y);
herd_status herd_cuda_gelu_bwd(size_t n, const float *x, const float *dy, float *dx);
herd_status herd_cuda_attention_fwd(int n, int t, int c, int heads, const float *qkv, float *att,
                                    float *y);
herd_status herd_cuda_attention_bwd(int n, int t, int c, int heads, const float *qkv,
                                    const float *att, const float *dy, float *dqkv);

/* cuda_optim.cu */
herd_status herd_cuda_sgd_update(size_t n, float *w, const float *g, float *momentum_buf,
                                 const herd_sgd_args *a);
herd_status herd_cuda_adamw_update(size_t n, float *w, const float *g, float *m, float *v,
                                   const herd_adamw_args *a);
herd_status herd_cuda_grad_unscale_check(size_t n, float *x, float factor, bool *found_inf);
herd_status herd_cuda_sum_squares(size_t n, const float *x, double *out);
/* x *= scale on a caller's stream (the NCCL communicator's). */
herd_status herd_cuda_scale_on(size_t n, float *x, float scale, cudaStream_t st);

/* cuda_cast.cu: on a caller's stream (the NCCL communicator's; the backend's for the
 * 16-bit gemm). y = half(x * scale), x = float(y); bf16 picks bfloat16 over IEEE half. */
herd_status herd_cuda_cast_to_16(size_t n, const float *x, float scale, bool bf16, void *y,
                                 cudaStream_t st);
herd_status herd_cuda_cast_from_16(size_t n, const void *x, bool bf16, float *y,
                                   cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
