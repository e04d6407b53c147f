/*
 * A backend is a table of functions: every op a layer, loss or optimizer needs.
 * Layers in src/nn are written once against this table; the CPU backend
 * (src/backend/cpu) implements it with oneDNN and plain loops, and the CUDA
 * backend will implement it with cuDNN/cuBLAS and its own kernels.
 *
 * Conventions: pointers are device memory of the backend (host memory for CPU);
 * tensors are NCHW float32, contiguous. Ops that produce a parameter gradient take
 * `beta`: 0 overwrites the gradient, 1 accumulates into it (gradient accumulation).
 * Every op returns HERD_OK or a status with herd_last_error() set.
 */
#ifndef HERD_BACKEND_H
#define HERD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/herd.h"

typedef enum herd_op {
    HERD_OP_GEMM,
    HERD_OP_CONV2D,
    HERD_OP_MAXPOOL,
    HERD_OP_AVGPOOL,
    HERD_OP_GLOBAL_AVGPOOL,
    HERD_OP_BATCHNORM,
    HERD_OP_RELU,
    HERD_OP_DROPOUT,
    HERD_OP_ADD,
    HERD_OP_SOFTMAX_XENT,
    HERD_OP_SGD,
    HERD_OP_ADAMW,
    HERD_OP_COUNT
} herd_op;

typedef struct herd_conv_desc {
    int n, c_in, h_in, w_in;
    int c_out, kh, kw, stride, pad;
    int h_out, w_out; /* filled by herd_conv_desc_finish */
    bool bias;
    /* The input x (and dx) / the output y (and dy) are 16-bit activations in the
     * backend's layout of herd_bf16_act_ops, not fp32 NCHW: only for backends that have
     * those ops, and only while they are in use. */
    bool bf16_in, bf16_out;
} herd_conv_desc;

typedef struct herd_pool_desc {
    int n, c, h_in, w_in;
    int k, stride, pad;
    int h_out, w_out;
    bool is_max; /* max or average (average counts padding as zero, divides by k*k) */
} herd_pool_desc;

/* Opaque per-layer plans: oneDNN primitives, cuDNN descriptors and workspaces. */
typedef struct herd_conv_plan herd_conv_plan;
typedef struct herd_pool_plan herd_pool_plan;

/* One tensor's side of exact_linear_wgrad: either `plain` (the call is one slice: its
 * values are written there), or the slices' values v rounded to the grid, rint(v * scale)
 * with scale a power of two (docs/determinism.md), added to the integers held in `sums`
 * (with `grid` false only the maximum is taken). max_bits: the largest |v| as the bits of
 * a float, kept across calls (above 0x7f800000: a value was not finite). */
typedef struct herd_exact_grad_out {
    float *plain;
    double *sums;
    bool grid;
    double scale;
    uint32_t max_bits;
} herd_exact_grad_out;

/* A linear layer's weight and bias gradients slice by slice: rows of dy [rows, out] and
 * x [rows, in] in slices of `slice` rows; a slice's dW[o, i] is the fused multiply-adds
 * of its rows in order from zero, its db[o] the sums of its rows in order from zero. */
typedef struct herd_exact_wgrad {
    int rows, slice, in, out;
    const float *dy, *x;
    herd_exact_grad_out w, b; /* b.plain and b.sums NULL: no bias */
    bool fresh; /* with a grid, the sums start at this call's slices (no zeroing before) */
} herd_exact_wgrad;

typedef struct herd_sgd_args {
    float lr, momentum, weight_decay;
    bool nesterov, decoupled; /* decoupled: w -= lr*wd*w; else g += wd*w */
} herd_sgd_args;

typedef struct herd_adamw_args {
    float lr, beta1, beta2, eps, weight_decay;
    long step; /* 1-based, for bias correction */
} herd_adamw_args;

/*
 * 16-bit activations between layers, in a layout the backend chooses: the CPU's is
 * oneDNN's nChw16c (per sample, blocks of 16 channels, each block h x w pixels of 16
 * bf16 values); the GPU's is channels last (NHWC), bf16 in bf16 runs and IEEE half in
 * fp16 runs (the same 2 bytes a value; layers only pass the buffers along).
 * In a 16-bit run, convolutions read and write them without reorders, and these ops
 * carry them through batch norm, ReLU, residual adds and the final pooling, so the
 * layers between two convolutions move half the bytes they move in fp32. Channels are
 * a multiple of 16, so neither layout has padding and `n` counts the same values as
 * the NCHW tensor. Parameters, statistics and their gradients stay fp32; reductions
 * run in double in an order fixed by the shape (the CPU's: per sample first, then over
 * samples in order, the same bits for any thread count). The BN ops are the fp32 split
 * ops (bn_stats ...) on this layout, with the same meaning; local BN calls them back
 * to back.
 */
typedef struct herd_bf16_act_ops {
    /* Whether the backend's current arithmetic reads them natively (bf16 precision on
     * a CPU with bf16 instructions; bf16 or fp16 on a GPU): only then does a model keep
     * activations in them. */
    bool (*in_use)(void);
    herd_status (*from_f32)(int n, int c, int hw, const float *x, uint16_t *y); /* NCHW fp32 -> */
    herd_status (*to_f32)(int n, int c, int hw, const uint16_t *x, float *y);   /* -> NCHW fp32 */
    herd_status (*relu_fwd)(size_t n, const uint16_t *x, uint16_t *y);
    herd_status (*relu_bwd)(size_t n, const uint16_t *y, const uint16_t *dy, uint16_t *dx);
    herd_status (*add)(size_t n, const uint16_t *a, const uint16_t *b, uint16_t *y);
    herd_status (*accumulate)(size_t n, const uint16_t *x, uint16_t *y); /* y += x */
    herd_status (*copy)(size_t n, const uint16_t *x, uint16_t *y);
    /* Mean over H*W per (n, c) into fp32 n x c, and its gradient. */
    herd_status (*global_avgpool_fwd)(int n, int c, int hw, const uint16_t *x, float *y);
    herd_status (*global_avgpool_bwd)(int n, int c, int hw, const float *dy, uint16_t *dx);
    herd_status (*bn_stats)(int n, int c, int hw, const uint16_t *x, const double *sum,
                            int64_t count, double *out);
    herd_status (*bn_apply_train)(int n, int c, int hw, const uint16_t *x, const float *gamma,
                                  const float *beta, const double *sum, const double *sqdev,
                                  int64_t count, uint16_t *y, float *save_mean,
                                  float *save_invstd, float *running_mean, float *running_var,
                                  float momentum, float eps);
    herd_status (*bn_fwd_infer)(int n, int c, int hw, const uint16_t *x, const float *gamma,
                                const float *beta, uint16_t *y, const float *running_mean,
                                const float *running_var, float eps);
    herd_status (*bn_bwd_reduce)(int n, int c, int hw, const uint16_t *x, const uint16_t *dy,
                                 const float *save_mean, const float *save_invstd,
                                 double *sum_dy, double *sum_dy_xc, float *dgamma, float *dbeta,
                                 float beta);
    herd_status (*bn_bwd_apply)(int n, int c, int hw, const uint16_t *x, const uint16_t *dy,
                                const float *gamma, const float *save_mean,
                                const float *save_invstd, const double *sum_dy,
                                const double *sum_dy_xc, int64_t count, uint16_t *dx);
} herd_bf16_act_ops;

/* softmax_xent_queued's totals, as they lie in the backend's memory. */
typedef struct herd_xent_totals {
    double loss_sum;  /* the summed per-row loss */
    int64_t correct;  /* rows whose argmax is the label */
    int32_t bad_row;  /* the first row whose label is outside [0, classes), or INT32_MAX */
    int32_t bad_label;
} herd_xent_totals;

/* A captured sequence of a backend's ops, replayed by one launch (CUDA graphs). */
typedef struct herd_graph herd_graph;
/* What a graph captures: backend ops only, the same ones with the same arguments
 * every time it runs. */
typedef herd_status (*herd_graph_region)(void *user);

struct herd_device_info;

typedef struct herd_backend {
    const char *name;
    bool (*supports_op)(herd_op op);
    /* Its pointers are plain host memory (the CPU backend): callers read and write
     * them directly and skip the staging copies a device backend needs. */
    bool host_memory;
    /* softmax_xent's dlogits may be its logits (the gradient written over them): the
     * trainer then holds no second buffer of the logits' size. */
    bool xent_in_place;
    /* Why its kernels may give other bits from run to run (what --deterministic refuses),
     * or NULL when they do not; a NULL function: they never do. */
    const char *(*nondeterminism)(void);

    /* Memory (zeroed). A failed alloc returns NULL with the reason in herd_last_error()
     * (the request, what is held, the cap): callers return HERD_ERR_NOMEM as it is. */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    herd_status (*set_threads)(int threads); /* 0 = all cores */
    /* Host <-> backend memory, used only at the edges (parameter init, each batch's
     * inputs, save/load), so callers never special-case a device. Both return once the
     * host side may be reused (h2d) or read (d2h) straight away; an h2d copy may still
     * be on its way to the device then, ordered before any later op (CUDA's is). For
     * the CPU backend they are memcpy; callers only need them when !host_memory. */
    herd_status (*memcpy_h2d)(void *dst, const void *src, size_t bytes);
    herd_status (*memcpy_d2h)(void *dst, const void *src, size_t bytes);

    /* C[m,n] = alpha * op(A) op(B) + beta * C, row-major; op(A) is m x k. */
    herd_status (*gemm)(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                        const float *a, int lda, const float *b, int ldb, float beta, float *c,
                        int ldc);
    /* --deterministic's linear layer (docs/determinism.md): each output is one fixed
     * sequence of fp32 operations whatever the rows beside it, the blocking or the
     * threads. fwd: y = x W^T + b, W [out, in], each dot product as 16 strided chains of
     * fused multiply-adds (input i into chain i mod 16) summed in a fixed tree, then + b;
     * bwd_data: dx = dy W, one chain over the outputs in order. NULL: none. */
    herd_status (*exact_linear_fwd)(int rows, int in, int out, const float *x, const float *w,
                                    const float *b, float *y);
    herd_status (*exact_linear_bwd_data)(int rows, int in, int out, const float *dy,
                                         const float *w, float *dx);
    herd_status (*exact_linear_wgrad)(herd_exact_wgrad *job);
    /* y[i, :] += bias (rows x cols) and db (+)= column sums of dy. */
    herd_status (*bias_add)(int rows, int cols, float *y, const float *bias);
    herd_status (*bias_grad)(int rows, int cols, const float *dy, float *db, float beta);

    herd_status (*conv2d_plan)(const herd_conv_desc *d, herd_conv_plan **plan);
    void (*conv2d_plan_free)(herd_conv_plan *plan);
    herd_status (*conv2d_fwd)(herd_conv_plan *p, const float *x, const float *w, const float *b,
                              float *y);
    herd_status (*conv2d_bwd_data)(herd_conv_plan *p, const float *dy, const float *w, float *dx);
    herd_status (*conv2d_bwd_weights)(herd_conv_plan *p, const float *x, const float *dy, float *dw,
                                      float *db, float beta);

    herd_status (*pool_plan)(const herd_pool_desc *d, herd_pool_plan **plan);
    void (*pool_plan_free)(herd_pool_plan *plan);
    herd_status (*pool_fwd)(herd_pool_plan *p, const float *x, float *y, bool training);
    herd_status (*pool_bwd)(herd_pool_plan *p, const float *dy, float *dx);

    /* Mean over H*W per (n, c): x is n x c x hw, y is n x c. */
    herd_status (*global_avgpool_fwd)(int n, int c, int hw, const float *x, float *y);
    herd_status (*global_avgpool_bwd)(int n, int c, int hw, const float *dy, float *dx);

    /* Batch norm over (n, hw) per channel. Training: batch statistics, saves mean
     * and inverse std, updates running stats (PyTorch semantics: unbiased running var). */
    herd_status (*bn_fwd_train)(int n, int c, int hw, const float *x, const float *gamma,
                                const float *beta, float *y, float *save_mean, float *save_invstd,
                                float *running_mean, float *running_var, float momentum, float eps);
    herd_status (*bn_fwd_infer)(int n, int c, int hw, const float *x, const float *gamma,
                                const float *beta, float *y, const float *running_mean,
                                const float *running_var, float eps);
    herd_status (*bn_bwd)(int n, int c, int hw, const float *x, const float *dy,
                          const float *gamma, const float *save_mean, const float *save_invstd,
                          float *dx, float *dgamma, float *dbeta, float beta);

    /* Training batch norm split at its reductions, for synchronised BN: the caller
     * sums each reduction over the data-parallel ranks before the next step (local
     * BN is the same steps with nothing in between, and bn_fwd_train / bn_bwd are
     * exactly that). Each reduction is c doubles, one per channel; `count` is the number of
     * values per channel in the whole (global) batch.
     *   forward:  bn_stats(sum = NULL) -> out = sum of x per channel
     *             bn_stats(sum = global sums) -> out = sum of (x - mean)^2, mean = sum/count
     *             bn_apply_train(global sums) -> y, save_mean/invstd, running stats
     *                                           (unbiased variance of the global batch)
     *   backward: bn_bwd_reduce -> sum of dy and of dy*(x - mean) per channel, and
     *                              dgamma/dbeta from this batch alone (gradient averaging
     *                              across ranks combines them)
     *             bn_bwd_apply(global sums) -> dx */
    herd_status (*bn_stats)(int n, int c, int hw, const float *x, const double *sum,
                            int64_t count, double *out);
    herd_status (*bn_apply_train)(int n, int c, int hw, const float *x, const float *gamma,
                                  const float *beta, const double *sum, const double *sqdev,
                                  int64_t count, float *y, float *save_mean, float *save_invstd,
                                  float *running_mean, float *running_var, float momentum,
                                  float eps);
    herd_status (*bn_bwd_reduce)(int n, int c, int hw, const float *x, const float *dy,
                                 const float *save_mean, const float *save_invstd,
                                 double *sum_dy, double *sum_dy_xc, float *dgamma, float *dbeta,
                                 float beta);
    herd_status (*bn_bwd_apply)(int n, int c, int hw, const float *x, const float *dy,
                                const float *gamma, const float *save_mean,
                                const float *save_invstd, const double *sum_dy,
                                const double *sum_dy_xc, int64_t count, float *dx);

    herd_status (*relu_fwd)(size_t n, const float *x, float *y);
    herd_status (*relu_bwd)(size_t n, const float *y, const float *dy, float *dx);
    /* Inverted dropout: mask holds 0 or 1/(1-p); drawn from (seed) deterministically. */
    herd_status (*dropout_fwd)(size_t n, const float *x, float *y, float *mask, float p,
                               uint64_t seed);
    /* The same with the seed herd_mix64(*seed, stream), *seed read from the backend's
     * memory when the op runs, not when it is called: what a graph captures, the step's
     * seed written there before each launch. NULL where the backend has no graphs. */
    herd_status (*dropout_fwd_seeded)(size_t n, const float *x, float *y, float *mask, float p,
                                      const uint64_t *seed, uint64_t stream);
    herd_status (*mul)(size_t n, const float *a, const float *b, float *y); /* y = a*b */
    herd_status (*add)(size_t n, const float *a, const float *b, float *y);   /* y = a+b */
    herd_status (*axpy)(size_t n, float alpha, const float *x, float *y);     /* y += alpha*x */
    herd_status (*copy)(size_t n, const float *x, float *y);
    herd_status (*fill)(size_t n, float value, float *y);

    /* Mean softmax cross-entropy over the batch with label smoothing. dlogits gets the
     * gradient of the mean loss; loss_sum the summed per-sample loss, correct the
     * count of argmax hits (host values). dlogits may be NULL (evaluation), or logits
     * itself where xent_in_place says so. */
    herd_status (*softmax_xent)(int n, int classes, const float *logits, const int32_t *labels,
                                float smoothing, float *dlogits, double *loss_sum, long *correct);
    /* The same, with its totals left in the backend's memory (`totals`, one
     * herd_xent_totals) instead of waited for: what a graph captures (below). The host
     * reads them later (memcpy_d2h) and herd_xent_totals_check refuses a bad label then.
     * NULL where the backend has no graphs. */
    herd_status (*softmax_xent_queued)(int n, int classes, const float *logits,
                                       const int32_t *labels, float smoothing, float *dlogits,
                                       herd_xent_totals *totals);

    /* Vocabulary-parallel cross-entropy (nn/xent_split.c), in the backend's memory (stats
     * and lse too; the caller copies them to and from the host): logits [n, count]
     * hold classes first..first+count-1. stats gets HERD_XENT_STATS doubles a row: the
     * part's largest logit, its class, the sum of exp(z - that largest), the label's
     * logit (0 when the label is elsewhere), the logits' sum, 1 when the label is here.
     * part_grad writes the gradient of the mean loss (as softmax_xent) from lse, each
     * row's log-sum-exp over all classes. NULL: no tensor parallelism on this backend. */
    herd_status (*xent_part_stats)(int n, int count, int first, const float *logits,
                                   const int32_t *labels, double *stats);
    herd_status (*xent_part_grad)(int n, int count, int first, int classes, const float *logits,
                                  const int32_t *labels, const double *lse, float smoothing,
                                  float *dlogits);

    /* Transformer ops (docs/model-files.md). Token tensors are row-major [rows, width]
     * with rows = n x t (sample-major, then position). NULL where a backend has none:
     * the layers refuse with the backend's name. */
    /* y[b,p,:] = wte[tokens[b,p],:] + wpe[p,:]. Token ids travel as floats holding whole
     * numbers (the model input is float; ids below 2^24 are exact): one that is not a
     * whole number in [0, vocab) is refused, naming its sample, position and value. wte
     * holds the rows of ids [first, first + count) (a tensor-parallel part; 0 and vocab
     * otherwise): other ids add nothing. wpe NULL: no position rows added. */
    herd_status (*embedding_fwd)(int n, int t, int c, int vocab, int first, int count,
                                 const float *tokens, const float *wte, const float *wpe,
                                 float *y);
    /* dwte (count rows, ids first..) = beta_wte * dwte + the rows of dy added at their
     * tokens (in row order); dwpe = beta * dwpe + dy summed over the batch (its rows
     * past t, up to context, get only the beta: 0 clears them). */
    herd_status (*embedding_bwd)(int n, int t, int c, int first, int count, int context,
                                 const float *tokens, const float *dy, float *dwte,
                                 float beta_wte, float *dwpe, float beta);
    /* Layer norm of each row over its c values (biased variance, as PyTorch); mean and
     * rstd (1/sqrt(var + eps)) per row are saved for the backward. */
    herd_status (*layernorm_fwd)(int rows, int c, const float *x, const float *gamma,
                                 const float *bias, float eps, float *y, float *mean,
                                 float *rstd);
    herd_status (*layernorm_bwd)(int rows, int c, const float *x, const float *dy,
                                 const float *gamma, const float *mean, const float *rstd,
                                 float *dx, float *dgamma, float *dbias, float beta);
    /* GELU, tanh approximation (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
    herd_status (*gelu_fwd)(size_t n, const float *x, float *y);
    herd_status (*gelu_bwd)(size_t n, const float *x, const float *dy, float *dx);
    /* Causal self-attention of `heads` heads of width c / heads: qkv is [n, t, 3c] (q, k
     * and v side by side, each head's slice contiguous), att [n, heads, t, t] the softmax
     * of q k^T / sqrt(c / heads) over positions <= the query's (saved for the backward;
     * zero above the diagonal), y [n, t, c] = att v, heads side by side. */
    herd_status (*attention_fwd)(int n, int t, int c, int heads, const float *qkv, float *att,
                                 float *y);
    herd_status (*attention_bwd)(int n, int t, int c, int heads, const float *qkv,
                                 const float *att, const float *dy, float *dqkv);

    /* Fused optimizer updates over a flat slice (the optimizer calls them once per
     * run of tensors that share a weight decay). */
    herd_status (*sgd_update)(size_t n, float *w, const float *g, float *momentum_buf,
                              const herd_sgd_args *a);
    herd_status (*adamw_update)(size_t n, float *w, const float *g, float *m, float *v,
                                const herd_adamw_args *a);

    /* x *= factor over n values and, when found_inf is not NULL, *found_inf = whether
     * any result is inf or NaN (a host value; on a GPU this waits for the stream).
     * Loss scaling unscales gradients with factor 1/scale and checks them in one pass,
     * and scales the loss gradient up with factor = scale and no check. */
    herd_status (*grad_unscale_check)(size_t n, float *x, float factor, bool *found_inf);
    /* *out = the sum of x[i]^2 over n values, accumulated in double in blocks of a fixed
     * size and the blocks added in order: the same bits for any thread count, so ranks
     * holding the same gradients agree on their norm (gradient clipping). A host value;
     * on a GPU this waits for the stream. */
    herd_status (*sum_squares)(size_t n, const float *x, double *out);

    /* The arithmetic of gemm and convolutions from now on (herd_precision). Backends
     * refuse what they cannot do, with a message saying so. */
    herd_status (*set_precision)(herd_precision p);
    /* bf16 activations between layers (above); NULL where the backend has none. */
    const herd_bf16_act_ops *bf16_acts;
    /* Memory: cap what the backend's allocator holds (0 = none); what it holds, by
     * category (NULL where not counted); and describe the device for peak-FLOP/s
     * figures (NULL for the CPU backend). */
    herd_status (*set_memory_limit)(uint64_t bytes);
    void (*memory_usage)(herd_memory_usage *out);
    void (*memory_reset_peak)(void);
    herd_status (*device_info)(struct herd_device_info *out);
    /* The device this process computes on as the other processes of its host see it:
     * its index here (*ordinal) and, in id, a text two processes of one host share
     * exactly when they compute on the same device (a GPU's PCI bus id, which is what
     * NCCL refuses to see twice). NULL where processes never share a device (the CPU). */
    herd_status (*device_identity)(int *ordinal, char *id, size_t cap);
    /* Phase times on the device's own clock, where host clocks mislead (a GPU runs its
     * kernels after the host has queued them and moved on). timer_mark records a mark in
     * slot 0..HERD_TIMER_SLOTS-1 after the work queued so far, without waiting;
     * timer_elapsed waits until mark `to` is reached and gives the seconds the device
     * spent from mark `from` (recorded before it) to it. NULL where host clocks are
     * right: the CPU computes while the host waits. */
    herd_status (*timer_mark)(int slot);
    herd_status (*timer_elapsed)(int from, int to, double *seconds);
    /* herd_now() when the device reached mark `slot`, where the backend knows it exactly
     * (the simulated device marks on the host's clock); NULL where the host can only
     * guess (a GPU: the phase clock takes the host's time as it records a step's first
     * mark, right for a device that has drained the last step). */
    herd_status (*timer_host_time)(int slot, double *host_seconds);

    /* Graphs (NULL where the backend has none: the CPU runs each op as it is called).
     * graph_capture runs `region` with every op recorded, not computed: its ops must
     * not wait for the device, copy to or from the host, allocate or free, so the host
     * reads nothing inside it; pointers and scalars are fixed at capture. graph_launch
     * computes the recorded ops (in the backend's order with the others) and returns
     * once any check inside them has been read; *stale says that memory was freed since
     * the capture (a pointer in it may now be another buffer's): nothing was computed,
     * capture again. A device that validates data inside an op (token ids) reports what
     * it found from graph_launch. */
    herd_status (*graph_capture)(herd_graph_region region, void *user, herd_graph **out);
    herd_status (*graph_launch)(herd_graph *g, bool *stale);
    void (*graph_free)(herd_graph *g);
} herd_backend;

/* softmax_xent's error for label `label` of row `row` outside [0, classes). */
herd_status herd_xent_bad_label(int label, int row, int classes);
/* That error for totals read back from softmax_xent_queued holding a bad label, or
 * HERD_OK. */
herd_status herd_xent_totals_check(const herd_xent_totals *t, int classes);

/* The marks a backend's timer holds at once (slots are reused round the ring). */
#define HERD_TIMER_SLOTS 256

/* What this thread's next allocations are for (HERD_MEM_WORKSPACE unless set): the
 * callers that know say it, the allocator counts it. Returns the previous one, to
 * restore. */
herd_mem_category herd_mem_category_set(herd_mem_category c);
herd_mem_category herd_mem_category_current(void);
const char *herd_mem_category_name(int c); /* "parameters", "gradients", ... */
/* *buf (be's memory, *cap elements of `elem` bytes) holds at least `need` elements:
 * replaced, not copied, when it is smaller, and counted as c. */
herd_status herd_backend_grow(const herd_backend *be, herd_mem_category c, void **buf, size_t *cap,
                              size_t need, size_t elem);
/* Host bytes into be's memory (a copy on the CPU, a host-to-device copy elsewhere). */
herd_status herd_backend_upload(const herd_backend *be, void *dst, const void *src, size_t bytes);
/* Host memory herd holds outside the CPU allocator (a file read whole), counted against
 * --memory-limit on the CPU and in its peak like an allocation: hold refuses what would
 * exceed the cap (HERD_ERR_NOMEM naming it), release gives back what hold counted. */
herd_status herd_host_memory_hold(uint64_t bytes, herd_mem_category c);
void herd_host_memory_release(uint64_t bytes, herd_mem_category c);

/* A GPU as the bench reports it. */
typedef struct herd_device_info {
    char name[64];
    int cc_major, cc_minor; /* compute capability */
    int sms;                /* streaming multiprocessors */
    double clock_ghz;       /* the SMs' maximum clock */
    uint64_t memory_bytes;
} herd_device_info;

/* Dense FLOPs per clock per SM for a compute capability at a precision (the peak
 * table of docs/performance.md); 0 when the architecture is not in the table. */
double herd_peak_flops_per_clock_sm(int cc_major, int cc_minor, herd_precision p);

const herd_backend *herd_backend_cpu(void);
/* The simulated device ("sim", src/backend/sim), for tests of device code paths
 * without a GPU: the CPU backend's arithmetic behind device memory the host cannot
 * read (a host access to a device pointer faults; memcpy_h2d/d2h are the only way
 * across), every op checking that its pointers are live device allocations. NULL,
 * with herd_last_error() saying why, when its address space cannot be reserved. */
const herd_backend *herd_backend_sim(void);
/* The GPU backend on the current CUDA device. NULL, with herd_last_error() saying
 * why, when herd was built without CUDA (HERD_HAVE_CUDA unset) or no usable GPU is
 * visible; callers fall back to the CPU or report the error. */
const herd_backend *herd_backend_cuda(void);
/* Gives the CUDA backend's own device memory back (the allocator's cache, scratch,
 * library handles and workspaces) at the end of a program, so leak checkers see only
 * what the caller still holds. Buffers and plans the caller got must be freed first;
 * herd_backend_cuda() afterwards returns NULL. A no-op without CUDA. */
void herd_backend_cuda_shutdown(void);
/* The backend a device name stands for: "cpu" (also for NULL), "cuda" or "sim"
 * (device.c). A backend missing from this build or machine is HERD_ERR_UNSUPPORTED
 * saying why; any other name HERD_ERR_INVALID_ARG. */
herd_status herd_backend_for(const char *device, const herd_backend **be);
/* Whether a CUDA GPU is visible to this build, without initialising the backend. */
bool herd_backend_cuda_visible(void);
/* Makes GPU (local_rank % visible GPUs) the device herd_backend_cuda() will use, and
 * logs which one it took: one GPU per rank where the host has enough, else several
 * ranks take turns on each (herd_comm_device_create then reduces through MPI, as
 * NCCL refuses two ranks on one GPU). Must come before the backend's first use. */
herd_status herd_backend_cuda_bind(int local_rank, int local_size);

/* ------------------------------------------------------------ argument checks
 * What every backend checks before an op, written once (backend.c): the rules and
 * the messages are the same whatever computes the op. Each backend's op calls its
 * check first and adds only what is its own (the CUDA grid's limits, say). Every
 * backend's plan structs begin with their finished description (herd_conv_desc d,
 * herd_pool_desc d), which the plan checks read. */

#define HERD_XENT_STATS 6 /* doubles per row of xent_part_stats */

/* "op: NULL array" when n > 0 and any of the arrays is NULL; returns from the caller. */
#define HERD_CHECK_ARRAYS(op, n, ...)                                                   \
    do {                                                                                \
        const void *herd_arrays_[] = {__VA_ARGS__};                                     \
        herd_status herd_arrays_st_ = (n) > 0 ? herd_check_arrays(op, herd_arrays_,     \
                                                    sizeof herd_arrays_ /               \
                                                        sizeof herd_arrays_[0])         \
                                              : HERD_OK;                                \
        if (herd_arrays_st_ != HERD_OK)                                                 \
            return herd_arrays_st_;                                                     \
    } while (0)
herd_status herd_check_arrays(const char *op, const void *const *arrays, size_t count);
herd_status herd_check_set_threads(int threads); /* 0 = all cores */
herd_status herd_check_grad_beta(const char *op, float beta); /* beta is 0 or 1 */
/* A slot of timer_mark / timer_elapsed: 0..HERD_TIMER_SLOTS-1. */
herd_status herd_check_timer_slot(int slot);

/* Validates a row-major gemm call (sizes, leading dimensions, pointers); *empty is
 * set when there is nothing to compute (m or n is 0). */
herd_status herd_gemm_check(bool trans_a, bool trans_b, int m, int n, int k, const float *a,
                            int lda, const float *b, int ldb, const float *c, int ldc, bool *empty);
herd_status herd_check_bias_add(int rows, int cols, const float *y, const float *bias);
herd_status herd_check_bias_grad(int rows, int cols, const float *dy, const float *db, float beta);

/* Plans: *plan = NULL, and *fin = the finished description the plan is built from. */
herd_status herd_check_conv2d_plan(const herd_conv_desc *d, herd_conv_plan **plan,
                                   herd_conv_desc *fin);
herd_status herd_check_conv2d_fwd(const herd_conv_plan *p, const float *x, const float *w,
                                  const float *b, const float *y);
herd_status herd_check_conv2d_bwd_data(const herd_conv_plan *p, const float *dy, const float *w,
                                       const float *dx);
herd_status herd_check_conv2d_bwd_weights(const herd_conv_plan *p, const float *x,
                                          const float *dy, const float *dw, const float *db,
                                          float beta);
herd_status herd_check_pool_plan(const herd_pool_desc *d, herd_pool_plan **plan,
                                 herd_pool_desc *fin);
herd_status herd_check_pool_fwd(const herd_pool_plan *p, const float *x, const float *y);
/* trained: a training forward ran on the plan since it was made (max pool's argmax). */
herd_status herd_check_pool_bwd(const herd_pool_plan *p, const float *dy, const float *dx,
                                bool trained);
/* op: "global_avgpool_fwd" or "global_avgpool_bwd". */
herd_status herd_check_global_avgpool(const char *op, int n, int c, int hw, const float *in,
                                      const float *out);

herd_status herd_check_bn_fwd_train(int n, int c, int hw, const float *x, const float *gamma,
                                    const float *beta, const float *y, const float *save_mean,
                                    const float *save_invstd, const float *running_mean,
                                    const float *running_var);
herd_status herd_check_bn_fwd_infer(int n, int c, int hw, const float *x, const float *gamma,
                                    const float *beta, const float *y, const float *running_mean,
                                    const float *running_var);
herd_status herd_check_bn_bwd(int n, int c, int hw, const float *x, const float *dy,
                              const float *gamma, const float *save_mean,
                              const float *save_invstd, const float *dgamma, const float *dbeta,
                              float beta);
herd_status herd_check_bn_stats(int n, int c, int hw, const float *x, const double *sum,
                                int64_t count, const double *out);
herd_status herd_check_bn_apply_train(int n, int c, int hw, const float *x, const float *gamma,
                                      const float *beta, const double *sum, const double *sqdev,
                                      int64_t count, const float *y, const float *save_mean,
                                      const float *save_invstd, const float *running_mean,
                                      const float *running_var);
herd_status herd_check_bn_bwd_reduce(int n, int c, int hw, const float *x, const float *dy,
                                     const float *save_mean, const float *save_invstd,
                                     const double *sum_dy, const double *sum_dy_xc,
                                     const float *dgamma, const float *dbeta, float beta);
herd_status herd_check_bn_bwd_apply(int n, int c, int hw, const float *x, const float *dy,
                                    const float *gamma, const float *save_mean,
                                    const float *save_invstd, const double *sum_dy,
                                    const double *sum_dy_xc, int64_t count, const float *dx);

herd_status herd_check_dropout_fwd(size_t n, const float *x, const float *y, const float *mask,
                                   float p);
/* Everything but the labels' range, which each backend checks where the labels are. */
herd_status herd_check_softmax_xent(int n, int classes, const float *logits,
                                    const int32_t *labels, float smoothing);
/* Both pass with nothing to check when n is 0. */
herd_status herd_check_sgd_update(size_t n, const float *w, const float *g,
                                  const float *momentum_buf, const herd_sgd_args *a);
herd_status herd_check_adamw_update(size_t n, const float *w, const float *g, const float *m,
                                    const float *v, const herd_adamw_args *a);
herd_status herd_check_grad_unscale(size_t n, const float *x);
herd_status herd_check_sum_squares(size_t n, const float *x, const double *out);

/* Computes h_out/w_out and validates a conv description. */
herd_status herd_conv_desc_finish(herd_conv_desc *d);
herd_status herd_pool_desc_finish(herd_pool_desc *d);

#endif
