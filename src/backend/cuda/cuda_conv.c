/* 2-D convolution through cuDNN. A plan holds the descriptors and the algorithms
 * chosen once for forward, backward data and backward filter (cuda_conv_algo.c:
 * measured, cached per shape), so running a layer allocates nothing: every convolution
 * shares one workspace, grown to the largest choice (the backend's scratch, safe to share
 * because all work runs in order on one stream).
 * Math is plain fp32 (CUDNN_FMA_MATH, no TF32) to match the CPU backend, unless
 * --precision tf32 (herd_cuda_ctx.tf32): then CUDNN_TENSOR_OP_MATH lets cuDNN use
 * TF32 tensor cores, and each direction runs with the math type of the algorithm
 * chosen for it. A plan re-chooses when the precision changed since it was built. */
#include <stdlib.h>

#include "backend/cuda/cuda_conv_algo.h"

struct herd_conv_plan {
    herd_conv_desc d;
    cudnnTensorDescriptor_t x, y, bias;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    herd_cuda_conv_algos algos;
    bool tf32; /* the precision the algorithms were chosen for */
};

/* Plans alive: the shared workspace goes back to the allocator with the last one, so
 * memory in use after the models are gone is what it was before them. */
static int g_live_plans;

void herd_cuda_conv2d_plan_free(herd_conv_plan *p)
{
    if (!p)
        return;
    if (--g_live_plans == 0)
        herd_cuda_scratch_release(HERD_CUDA_SCRATCH_CONV);
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
    free(p);
}

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

/* Algorithms for the current precision. */
static herd_status pick_algos(herd_conv_plan *p)
{
    p->tf32 = herd_cuda_ctx_get()->tf32;
    return herd_cuda_conv_algos_choose(&p->d, p->x, p->w, p->conv, p->y, p->tf32, &p->algos);
}

/* Before a cuDNN call: re-pick after a precision change, and set the direction's
 * math type (the descriptor is shared by the three directions). */
enum { FWD, BWD_DATA, BWD_FILTER };

static herd_status prepare(herd_conv_plan *p, int direction, void **workspace)
{
    if (p->tf32 != herd_cuda_ctx_get()->tf32)
        HERD_TRY(pick_algos(p));
    HERD_TRY(herd_cuda_scratch(HERD_CUDA_SCRATCH_CONV, p->algos.workspace, workspace));
    if (!p->tf32)
        return HERD_OK; /* FMA_MATH, set when the algorithms were picked */
    cudnnMathType_t math = direction == FWD        ? p->algos.fwd_math
                           : direction == BWD_DATA ? p->algos.bwd_data_math
                                                   : p->algos.bwd_filter_math;
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
    g_live_plans++;
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
    void *ws;
    HERD_TRY(prepare(p, FWD, &ws));
    cudnnHandle_t h = herd_cuda_ctx_get()->cudnn;
    const float one = 1.0f, zero = 0.0f;
    HERD_CUDNN(cudnnConvolutionForward(h, &one, p->x, x, p->w, w, p->conv, p->algos.fwd,
                                       ws, p->algos.workspace, &zero, p->y, y),
               "convolution forward");
    if (p->d.bias)
        HERD_CUDNN(cudnnAddTensor(h, &one, p->bias, b, &one, p->y, y), "convolution bias");
    return HERD_OK;
}

herd_status herd_cuda_conv2d_bwd_data(herd_conv_plan *p, const float *dy, const float *w,
                                      float *dx)
{
    HERD_TRY(herd_check_conv2d_bwd_data(p, dy, w, dx));
    void *ws;
    HERD_TRY(prepare(p, BWD_DATA, &ws));
    const float one = 1.0f, zero = 0.0f;
    HERD_CUDNN(cudnnConvolutionBackwardData(herd_cuda_ctx_get()->cudnn, &one, p->w, w, p->y, dy,
                                            p->conv, p->algos.bwd_data, ws,
                                            p->algos.workspace, &zero, p->x, dx),
               "convolution backward data");
    return HERD_OK;
}

herd_status herd_cuda_conv2d_bwd_weights(herd_conv_plan *p, const float *x, const float *dy,
                                         float *dw, float *db, float beta)
{
    HERD_TRY(herd_check_conv2d_bwd_weights(p, x, dy, dw, db, beta));
    void *ws;
    HERD_TRY(prepare(p, BWD_FILTER, &ws));
    cudnnHandle_t h = herd_cuda_ctx_get()->cudnn;
    const float one = 1.0f;
    /* cuDNN's beta blends into the existing gradient: exactly accumulation. */
    HERD_CUDNN(cudnnConvolutionBackwardFilter(h, &one, p->x, x, p->y, dy, p->conv,
                                              p->algos.bwd_filter, ws, p->algos.workspace,
                                              &beta, p->w, dw),
               "convolution backward filter");
    if (p->d.bias)
        HERD_CUDNN(cudnnConvolutionBackwardBias(h, &one, p->y, dy, &beta, p->bias, db),
                   "convolution backward bias");
    return HERD_OK;
}
