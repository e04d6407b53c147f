/* The CPU backend's ops, one group per file; cpu_backend.c puts them in the table. */
#ifndef HERD_BACKEND_CPU_OPS_H
#define HERD_BACKEND_CPU_OPS_H

#include "backend/backend.h"
#include "core/par.h"

/* cpu_gemm.c */
herd_status herd_cpu_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float *a, int lda, const float *b, int ldb, float beta, float *c,
                          int ldc);
/* cpu_matmul.c: C = alpha * op(A) op(B) + beta * C through a oneDNN matmul made once per
 * shape (row-major; A and B fp32 or bf16 by `bf16`, C fp32). All fields are 4 bytes, so a
 * shape has no padding and compares with memcmp. */
typedef struct herd_matmul_shape {
    int bf16, trans_a, trans_b, m, n, k, lda, ldb, ldc;
    float alpha, beta;
} herd_matmul_shape;
herd_status herd_cpu_matmul(const herd_matmul_shape *s, const void *a, const void *b, float *c);
/* cpu_gemm_bf16.c: the same in bf16 mixed precision (herd_cpu_gemm calls it). */
herd_status herd_cpu_gemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                               const float *a, int lda, const float *b, int ldb, float beta,
                               float *c, int ldc);
herd_status herd_cpu_bias_add(int rows, int cols, float *y, const float *bias);
herd_status herd_cpu_bias_grad(int rows, int cols, const float *dy, float *db, float beta);

/* cpu_conv.c */
herd_status herd_cpu_conv2d_plan(const herd_conv_desc *d, herd_conv_plan **plan);
void herd_cpu_conv2d_plan_free(herd_conv_plan *plan);
herd_status herd_cpu_conv2d_fwd(herd_conv_plan *p, const float *x, const float *w,
                                const float *b, float *y);
herd_status herd_cpu_conv2d_bwd_data(herd_conv_plan *p, const float *dy, const float *w,
                                     float *dx);
herd_status herd_cpu_conv2d_bwd_weights(herd_conv_plan *p, const float *x, const float *dy,
                                        float *dw, float *db, float beta);

/* cpu_pool.c */
herd_status herd_cpu_pool_plan(const herd_pool_desc *d, herd_pool_plan **plan);
void herd_cpu_pool_plan_free(herd_pool_plan *plan);
herd_status herd_cpu_pool_fwd(herd_pool_plan *p, const float *x, float *y, bool training);
herd_status herd_cpu_pool_bwd(herd_pool_plan *p, const float *dy, float *dx);
herd_status herd_cpu_global_avgpool_fwd(int n, int c, int hw, const float *x, float *y);
herd_status herd_cpu_global_avgpool_bwd(int n, int c, int hw, const float *dy, float *dx);

/* cpu_bn.c */
herd_status herd_cpu_bn_fwd_train(int n, int c, int hw, const float *x, const float *gamma,
                                  const float *beta, float *y, float *save_mean,
                                  float *save_invstd, float *running_mean, float *running_var,
                                  float momentum, float eps);
herd_status herd_cpu_bn_fwd_infer(int n, int c, int hw, const float *x, const float *gamma,
                                  const float *beta, float *y, const float *running_mean,
                                  const float *running_var, float eps);
herd_status herd_cpu_bn_bwd(int n, int c, int hw, const float *x, const float *dy,
                            const float *gamma, const float *save_mean, const float *save_invstd,
                            float *dx, float *dgamma, float *dbeta, float beta);
herd_status herd_cpu_bn_stats(int n, int c, int hw, const float *x, const double *sum,
                              int64_t count, double *out);
herd_status herd_cpu_bn_apply_train(int n, int c, int hw, const float *x, const float *gamma,
                                    const float *beta, const double *sum, const double *sqdev,
                                    int64_t count, float *y, float *save_mean, float *save_invstd,
                                    float *running_mean, float *running_var, float momentum,
                                    float eps);
herd_status herd_cpu_bn_bwd_reduce(int n, int c, int hw, const float *x, const float *dy,
                                   const float *save_mean, const float *save_invstd,
                                   double *sum_dy, double *sum_dy_xc, float *dgamma,
                                   float *dbeta, float beta);
herd_status herd_cpu_bn_bwd_apply(int n, int c, int hw, const float *x, const float *dy,
                                  const float *gamma, const float *save_mean,
                                  const float *save_invstd, const double *sum_dy,
                                  const double *sum_dy_xc, int64_t count, float *dx);

/* cpu_elementwise.c */
herd_status herd_cpu_relu_fwd(size_t n, const float *x, float *y);
herd_status herd_cpu_relu_bwd(size_t n, const float *y, const float *dy, float *dx);
herd_status herd_cpu_dropout_fwd(size_t n, const float *x, float *y, float *mask, float p,
                                 uint64_t seed);
herd_status herd_cpu_mul(size_t n, const float *a, const float *b, float *y);
herd_status herd_cpu_add(size_t n, const float *a, const float *b, float *y);
herd_status herd_cpu_axpy(size_t n, float alpha, const float *x, float *y);
herd_status herd_cpu_copy(size_t n, const float *x, float *y);
herd_status herd_cpu_fill(size_t n, float value, float *y);

/* cpu_loss.c */
herd_status herd_cpu_softmax_xent(int n, int classes, const float *logits, const int32_t *labels,
                                  float smoothing, float *dlogits, double *loss_sum,
                                  long *correct);

herd_status herd_cpu_xent_part_stats(int n, int count, int first, const float *logits,
                                     const int32_t *labels, double *stats);
herd_status herd_cpu_xent_part_grad(int n, int count, int first, int classes,
                                    const float *logits, const int32_t *labels, const double *lse,
                                    float smoothing, float *dlogits);

/* cpu_transformer.c */
herd_status herd_cpu_embedding_fwd(int n, int t, int c, int vocab, int first, int count,
                                   const float *tokens, const float *wte, const float *wpe,
                                   float *y);
herd_status herd_cpu_embedding_bwd(int n, int t, int c, int first, int count, int context,
                                   const float *tokens, const float *dy, float *dwte,
                                   float beta_wte, float *dwpe, float beta);
herd_status herd_cpu_layernorm_fwd(int rows, int c, const float *x, const float *gamma,
                                   const float *bias, float eps, float *y, float *mean,
                                   float *rstd);
herd_status herd_cpu_layernorm_bwd(int rows, int c, const float *x, const float *dy,
                                   const float *gamma, const float *mean, const float *rstd,
                                   float *dx, float *dgamma, float *dbias, float beta);
herd_status herd_cpu_gelu_fwd(size_t n, const float *x, float *y);
herd_status herd_cpu_gelu_bwd(size_t n, const float *x, const float *dy, float *dx);
herd_status herd_cpu_attention_fwd(int n, int t, int c, int heads, const float *qkv, float *att,
                                   float *y);
herd_status herd_cpu_attention_bwd(int n, int t, int c, int heads, const float *qkv,
                                   const float *att, const float *dy, float *dqkv);

/* cpu_precision.c: the arithmetic set by set_precision. NATIVE runs convolutions and
 * GEMMs as oneDNN bf16 primitives; EMULATED rounds their inputs to bf16 and runs the
 * fp32 kernels (HERD_CPU_BF16=emulate, for CPUs without bf16 instructions: tests). */
typedef enum herd_cpu_bf16_mode {
    HERD_CPU_BF16_OFF,
    HERD_CPU_BF16_NATIVE,
    HERD_CPU_BF16_EMULATED,
} herd_cpu_bf16_mode;
herd_cpu_bf16_mode herd_cpu_bf16(void);
herd_status herd_cpu_set_precision(herd_precision p);
bool herd_cpu_native_bf16(void);
void herd_cpu_round_bf16(float *x, size_t n); /* each value to its nearest bf16 */

/* cpu_act_bf16.c: bf16 activations in nChw16c between layers (backend.h). */
extern const herd_bf16_act_ops herd_cpu_bf16_act_ops;

/* Elementwise loops below this many elements stay on one thread: forking costs more. */
#define HERD_CPU_PAR_MIN 32768

/* herd_par_team (core/par.h) at this backend's threshold. */
static inline bool herd_cpu_par(size_t work) { return herd_par_team(work, HERD_CPU_PAR_MIN); }

/* for (TYPE I = 0; I < N; I++) { BODY }: split statically over the team when PAR, inline
 * otherwise; the _SIMD form vectorises both ways, as `omp simd` does (no alias checks).
 * BODY is a macro argument, so it holds no `#` line: an inner pragma is written _Pragma(...). */
#define HERD_CPU_FOR(par, TYPE, I, N, ...)                                                         \
    do {                                                                                           \
        if (par) {                                                                                 \
            _Pragma("omp parallel for schedule(static)") for (TYPE I = 0; I < (N); I++) {          \
                __VA_ARGS__                                                                        \
            }                                                                                      \
        } else {                                                                                   \
            for (TYPE I = 0; I < (N); I++) { __VA_ARGS__ }                                         \
        }                                                                                          \
    } while (0)
#define HERD_CPU_FOR_SIMD(par, TYPE, I, N, ...)                                                    \
    do {                                                                                           \
        if (par) {                                                                                 \
            _Pragma("omp parallel for simd schedule(static)") for (TYPE I = 0; I < (N); I++) {     \
                __VA_ARGS__                                                                        \
            }                                                                                      \
        } else {                                                                                   \
            _Pragma("omp simd") for (TYPE I = 0; I < (N); I++) { __VA_ARGS__ }                     \
        }                                                                                          \
    } while (0)

#endif
