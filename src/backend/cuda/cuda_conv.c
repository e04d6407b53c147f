/* 2-D convolution through cuDNN. A plan holds the descriptors, the algorithms picked
 * once (cuDNN's heuristics, v7 API) for forward, backward data and backward filter,
 * and one workspace big enough for all three, so running a layer allocates nothing.
 * Math is plain fp32 (CUDNN_FMA_MATH, no TF32) to match the CPU backend, unless
 * --precision tf32 (herd_cuda_ctx.tf32): then CUDNN_TENSOR_OP_MATH lets cuDNN use
 * TF32 tensor cores, and each direction runs with the math type of the algorithm
 * picked for it. A plan re-picks when the precision changed since it was built. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "core/log.h"

/* Workspace cap per algorithm: faster algorithms that want more are skipped. */
#define WORKSPACE_CAP ((size_t)512 << 20)

struct herd_conv_plan {
    herd_conv_desc d;
    cudnnTensorDescriptor_t x, y, bias;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd_algo;
    cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
    bool tf32; /* the precision the algorithms were picked for */
    cudnnMathType_t fwd_math, bwd_data_math, bwd_filter_math;
    void *workspace;
    size_t workspace_bytes;
};

void herd_cuda_conv2d_plan_free(herd_conv_plan *p)
{
    if (!p)
        return;
    if (p->x)
        cudnnDestroyTensorDescriptor(p->x);
    if (p->y)
        cudnnDestroyTensorDescriptor(p->y);
    if (p->bias)
        cudnnDestroyTensorDescriptor(p->bias);
    if (p->w)
        cudnnDestroyFilterDescriptor(p->w);
    if (p->conv)
        cudnnDestroyConvolutionDescriptor(p->conv);
    herd_cuda_free(p->workspace);
    free(p);
}

/* Deterministic algorithms only, unless HERD_CUDNN_ANY_ALGO=1 (for measuring what that
 * costs): cuDNN's atomics-based algorithms (backward filter, backward data) sum in
 * another order on every call, so two GPU runs would differ in the last bits and a
 * resumed run would not end on the uninterrupted run's bytes, as it does on the CPU. */
static bool env_is_1(const char *name)
{
    const char *v = getenv(name);
    return v && strcmp(v, "1") == 0;
}

static bool any_algo(void) { return env_is_1("HERD_CUDNN_ANY_ALGO"); }

/* FFT and Winograd algorithms compute through transforms whose rounding differs from a
 * direct sum's by far more than fp32's last bits (seen on an H200: lenet5 1.6e-5 from the
 * CPU after 8 steps with them, 7.3e-8 without).
 * HERD_CUDNN_EXACT=1 leaves them out, to measure what they change and cost. */
static bool transform_fwd(cudnnConvolutionFwdAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
static bool transform_bd(cudnnConvolutionBwdDataAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
static bool transform_bf(cudnnConvolutionBwdFilterAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

/* The first heuristic choice that succeeded, fits the cap and is deterministic. cuDNN
 * lists them best first; the workspace size comes back with each. */
#define PICK(kind, results, count, algo_out, ws_out, math_out, what)                     \
    do {                                                                                 \
        int found_ = 0;                                                                  \
        bool any_ = any_algo(), exact_ = env_is_1("HERD_CUDNN_EXACT");                   \
        for (int i_ = 0; i_ < (count) && !found_; i_++)                                  \
            if ((results)[i_].status == CUDNN_STATUS_SUCCESS &&                          \
                (results)[i_].memory <= WORKSPACE_CAP &&                                 \
                !(exact_ && transform_##kind((results)[i_].algo)) &&                     \
                (any_ || (results)[i_].determinism == CUDNN_DETERMINISTIC)) {            \
                *(algo_out) = (results)[i_].algo;                                        \
                *(ws_out) = (results)[i_].memory;                                        \
                *(math_out) = (results)[i_].mathType;                                    \
                found_ = 1;                                                              \
            }                                                                            \
        if (!found_)                                                                     \
            return HERD_ERR(HERD_ERR_UNSUPPORTED,                                        \
                            "cuDNN has no deterministic " what " algorithm for conv n=%d c_in=%d %dx%d " \
                            "c_out=%d k=%dx%d stride %d pad %d within %zu MiB of workspace", \
                            d->n, d->c_in, d->h_in, d->w_in, d->c_out, d->kh, d->kw,     \
                            d->stride, d->pad, WORKSPACE_CAP >> 20);                     \
    } while (0)

static herd_status pick_algos(herd_conv_plan *p);

static herd_status build(herd_conv_plan *p)
{
    const herd_conv_desc *d = &p->d;
    HERD_CUDNN(cudnnCreateTensorDescriptor(&p->x), "tensor descriptor");
    HERD_CUDNN(cudnnCreateTensorDescriptor(&p->y), "tensor descriptor");
    HERD_CUDNN(cudnnCreateTensorDescriptor(&p->bias), "tensor descriptor");
    HERD_CUDNN(cudnnCreateFilterDescriptor(&p->w), "filter descriptor");
    HERD_CUDNN(cudnnCreateConvolutionDescriptor(&p->conv), "convolution descriptor");
    HERD_CUDNN(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n,
                                          d->c_in, d->h_in, d->w_in),
               "conv input descriptor");
    HERD_CUDNN(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n,
                                          d->c_out, d->h_out, d->w_out),
               "conv output descriptor");
    HERD_CUDNN(cudnnSetTensor4dDescriptor(p->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                          d->c_out, 1, 1),
               "conv bias descriptor");
    HERD_CUDNN(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, d->c_out,
                                          d->c_in, d->kh, d->kw),
               "conv filter descriptor");
    /* Cross-correlation: what deep-learning frameworks call convolution. */
    HERD_CUDNN(cudnnSetConvolution2dDescriptor(p->conv, d->pad, d->pad, d->stride, d->stride, 1,
                                               1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
               "convolution descriptor");
    int n_out, c_out, h_out, w_out;
    HERD_CUDNN(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &n_out, &c_out, &h_out,
                                                     &w_out),
               "convolution output size");
    if (n_out != d->n || c_out != d->c_out || h_out != d->h_out || w_out != d->w_out)
        return HERD_ERR(HERD_ERR_INTERNAL,
                        "cuDNN computes a %dx%dx%dx%d output where herd expects %dx%dx%dx%d",
                        n_out, c_out, h_out, w_out, d->n, d->c_out, d->h_out, d->w_out);
    return pick_algos(p);
}

/* Algorithms (and workspace) for the current precision. */
static herd_status pick_algos(herd_conv_plan *p)
{
    const herd_conv_desc *d = &p->d;
    cudnnHandle_t h = herd_cuda_ctx_get()->cudnn;
    p->tf32 = herd_cuda_ctx_get()->tf32;
    HERD_CUDNN(cudnnSetConvolutionMathType(p->conv, p->tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
               "convolution math type");
    int count = 0;
    size_t ws_f = 0, ws_d = 0, ws_w = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    HERD_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(h, p->x, p->w, p->conv, p->y,
                                                      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count,
                                                      fwd),
               "forward algorithm choice");
    PICK(fwd, fwd, count, &p->fwd_algo, &ws_f, &p->fwd_math, "forward");
    cudnnConvolutionBwdDataAlgoPerf_t bd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    HERD_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->w, p->y, p->conv, p->x,
                                                           CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                           &count, bd),
               "backward data algorithm choice");
    PICK(bd, bd, count, &p->bwd_data_algo, &ws_d, &p->bwd_data_math, "backward-data");
    cudnnConvolutionBwdFilterAlgoPerf_t bf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    HERD_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                   h, p->x, p->y, p->conv, p->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count,
                   bf),
               "backward filter algorithm choice");
    PICK(bf, bf, count, &p->bwd_filter_algo, &ws_w, &p->bwd_filter_math, "backward-filter");
    if (env_is_1("HERD_CUDNN_LOG"))
        herd_log(HERD_LOG_INFO, "cuDNN conv n=%d c_in=%d %dx%d c_out=%d k=%d stride %d: forward "
                 "algorithm %d, backward data %d, backward filter %d (%s)", d->n, d->c_in, d->h_in,
                 d->w_in, d->c_out, d->kh, d->stride, (int)p->fwd_algo, (int)p->bwd_data_algo,
                 (int)p->bwd_filter_algo, p->tf32 ? "tf32" : "fp32");
    if (!p->tf32) /* fp32 stays FMA whatever the heuristics report */
        p->fwd_math = p->bwd_data_math = p->bwd_filter_math = CUDNN_FMA_MATH;

    size_t ws = ws_f > ws_d ? ws_f : ws_d;
    ws = ws > ws_w ? ws : ws_w;
    if (ws > p->workspace_bytes) {
        /* Safe to drop the old one at once: all work is in order on one stream. */
        herd_cuda_free(p->workspace);
        p->workspace = NULL;
        p->workspace_bytes = 0;
        if (!(p->workspace = herd_cuda_alloc(ws)))
            return HERD_ERR_NOMEM;
        p->workspace_bytes = ws;
    }
    return HERD_OK;
}

/* Before a cuDNN call: re-pick after a precision change, and set the direction's
 * math type (the descriptor is shared by the three directions). */
enum { FWD, BWD_DATA, BWD_FILTER };

static herd_status prepare(herd_conv_plan *p, int direction)
{
    if (p->tf32 != herd_cuda_ctx_get()->tf32)
        HERD_TRY(pick_algos(p));
    if (!p->tf32)
        return HERD_OK; /* FMA_MATH, set when the algorithms were picked */
    cudnnMathType_t math = direction == FWD        ? p->fwd_math
                           : direction == BWD_DATA ? p->bwd_data_math
                                                   : p->bwd_filter_math;
    HERD_CUDNN(cudnnSetConvolutionMathType(p->conv, math), "convolution math type");
    return HERD_OK;
}
herd_status herd_cuda_conv2d_plan(const herd_conv_desc *d, herd_conv_plan **plan)
{
    herd_conv_desc fin;
    HERD_TRY(herd_check_conv2d_plan(d, plan, &fin));
    if (fin.bf16_in || fin.bf16_out) /* the backend has no bf16_acts table */
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "conv2d_plan: the CUDA backend takes fp32 NCHW "
                        "activations only, not bf16 blocked ones");
    herd_conv_plan *p = calloc(1, sizeof *p);
    if (!p)
        return HERD_NOMEM(sizeof *p);
    p->d = fin;
    herd_status st = build(p);
    if (st != HERD_OK) {
        herd_cuda_conv2d_plan_free(p);
        return st;
    }
    *plan = p;
    return HERD_OK;
}

herd_status herd_cuda_conv2d_fwd(herd_conv_plan *p, const float *x, const float *w,
                                 const float *b, float *y)
{
    HERD_TRY(herd_check_conv2d_fwd(p, x, w, b, y));
    HERD_TRY(prepare(p, FWD));
    cudnnHandle_t h = herd_cuda_ctx_get()->cudnn;
    const float one = 1.0f, zero = 0.0f;
    HERD_CUDNN(cudnnConvolutionForward(h, &one, p->x, x, p->w, w, p->conv, p->fwd_algo,
                                       p->workspace, p->workspace_bytes, &zero, p->y, y),
               "convolution forward");
    if (p->d.bias)
        HERD_CUDNN(cudnnAddTensor(h, &one, p->bias, b, &one, p->y, y), "convolution bias");
    return HERD_OK;
}

herd_status herd_cuda_conv2d_bwd_data(herd_conv_plan *p, const float *dy, const float *w,
                                      float *dx)
{
    HERD_TRY(herd_check_conv2d_bwd_data(p, dy, w, dx));
    HERD_TRY(prepare(p, BWD_DATA));
    const float one = 1.0f, zero = 0.0f;
    HERD_CUDNN(cudnnConvolutionBackwardData(herd_cuda_ctx_get()->cudnn, &one, p->w, w, p->y, dy,
                                            p->conv, p->bwd_data_algo, p->workspace,
                                            p->workspace_bytes, &zero, p->x, dx),
               "convolution backward data");
    return HERD_OK;
}

herd_status herd_cuda_conv2d_bwd_weights(herd_conv_plan *p, const float *x, const float *dy,
                                         float *dw, float *db, float beta)
{
    HERD_TRY(herd_check_conv2d_bwd_weights(p, x, dy, dw, db, beta));
    HERD_TRY(prepare(p, BWD_FILTER));
    cudnnHandle_t h = herd_cuda_ctx_get()->cudnn;
    const float one = 1.0f;
    /* cuDNN's beta blends into the existing gradient: exactly accumulation. */
    HERD_CUDNN(cudnnConvolutionBackwardFilter(h, &one, p->x, x, p->y, dy, p->conv,
                                              p->bwd_filter_algo, p->workspace,
                                              p->workspace_bytes, &beta, p->w, dw),
               "convolution backward filter");
    if (p->d.bias)
        HERD_CUDNN(cudnnConvolutionBackwardBias(h, &one, p->y, dy, &beta, p->bias, db),
                   "convolution backward bias");
    return HERD_OK;
}
