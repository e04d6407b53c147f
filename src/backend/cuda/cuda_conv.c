/* 2-D convolution through cuDNN. A plan holds the descriptors and the algorithms
 * chosen once for forward, backward data and backward filter (cuda_conv_algo.c:
 * measured, cached per shape), so running a layer allocates nothing: every convolution
 * shares one workspace, grown to the largest choice (the backend's scratch, safe to share
 * because all work runs in order on one stream).
 * Math is plain fp32 (CUDNN_FMA_MATH, no TF32) to match the CPU backend, unless
 * --precision tf32: then CUDNN_TENSOR_OP_MATH lets cuDNN use TF32 tensor cores, and each
 * direction runs with the math type of the algorithm chosen for it.
 * --precision bf16 and fp16 run cuDNN on 16-bit channels-last tensors (NHWC, weights
 * KRSC) with fp32 sums: what tensor cores read without transposing. Activations the model
 * keeps in 16 bits (d.bf16_in / bf16_out, cuda_act16.cu) go to cuDNN as they are; fp32
 * ones, the fp32 master weights and the weight gradient are converted through the
 * backend's scratch on every call (weights change at every step; a conversion is one pass
 * over a small tensor). A plan re-chooses when the precision changed since it was built. */
#include <stdlib.h>

#include "backend/cuda/cuda_conv_algo.h"

struct herd_conv_plan {
    herd_conv_desc d;
    cudnnTensorDescriptor_t x, y, bias; /* fp32 NCHW, or 16-bit NHWC (x, y) */
    cudnnTensorDescriptor_t y32;        /* fp32 NCHW y, for the fp32 bias ops */
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    herd_cuda_conv_algos algos;
    herd_precision precision; /* the precision the descriptors and algorithms are for */
};

/* Plans alive: the shared workspace goes back to the allocator with the last one, so
 * memory in use after the models are gone is what it was before them. */
static int g_live_plans;

void herd_cuda_conv2d_plan_free(herd_conv_plan *p)
{
    if (!p)
        return;
    if (--g_live_plans == 0)
        for (int slot = HERD_CUDA_SCRATCH_CONV; slot <= HERD_CUDA_SCRATCH_CONV_W16; slot++)
            herd_cuda_scratch_release(slot);
    if (p->x)
        cudnnDestroyTensorDescriptor(p->x);
    if (p->y)
        cudnnDestroyTensorDescriptor(p->y);
    if (p->y32)
        cudnnDestroyTensorDescriptor(p->y32);
    if (p->bias)
        cudnnDestroyTensorDescriptor(p->bias);
    if (p->w)
        cudnnDestroyFilterDescriptor(p->w);
    if (p->conv)
        cudnnDestroyConvolutionDescriptor(p->conv);
    free(p);
}

static herd_status pick_algos(herd_conv_plan *p);

/* The x, y and w descriptors for a precision: fp32 NCHW, or 16-bit NHWC. */
static herd_status set_layout(herd_conv_plan *p, herd_precision prec)
{
    const herd_conv_desc *d = &p->d;
    bool half = prec == HERD_PRECISION_BF16 || prec == HERD_PRECISION_FP16;
    cudnnDataType_t t = !half ? CUDNN_DATA_FLOAT
                        : prec == HERD_PRECISION_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    cudnnTensorFormat_t f = half ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    HERD_CUDNN(cudnnSetTensor4dDescriptor(p->x, f, t, d->n, d->c_in, d->h_in, d->w_in),
               "conv input descriptor");
    HERD_CUDNN(cudnnSetTensor4dDescriptor(p->y, f, t, d->n, d->c_out, d->h_out, d->w_out),
               "conv output descriptor");
    HERD_CUDNN(cudnnSetFilter4dDescriptor(p->w, t, f, d->c_out, d->c_in, d->kh, d->kw),
               "conv filter descriptor");
    p->precision = prec;
    return HERD_OK;
}

static herd_status build(herd_conv_plan *p)
{
    const herd_conv_desc *d = &p->d;
    HERD_CUDNN(cudnnCreateTensorDescriptor(&p->x), "tensor descriptor");
    HERD_CUDNN(cudnnCreateTensorDescriptor(&p->y), "tensor descriptor");
    HERD_CUDNN(cudnnCreateTensorDescriptor(&p->y32), "tensor descriptor");
    HERD_CUDNN(cudnnCreateTensorDescriptor(&p->bias), "tensor descriptor");
    HERD_CUDNN(cudnnCreateFilterDescriptor(&p->w), "filter descriptor");
    HERD_CUDNN(cudnnCreateConvolutionDescriptor(&p->conv), "convolution descriptor");
    HERD_CUDNN(cudnnSetTensor4dDescriptor(p->y32, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n,
                                          d->c_out, d->h_out, d->w_out),
               "conv output descriptor");
    HERD_CUDNN(cudnnSetTensor4dDescriptor(p->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                          d->c_out, 1, 1),
               "conv bias descriptor");
    HERD_TRY(set_layout(p, HERD_PRECISION_FP32));
    /* Cross-correlation: what deep-learning frameworks call convolution. Sums are fp32
     * at every precision. */
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

/* Descriptors and algorithms for the context's precision. */
static herd_status pick_algos(herd_conv_plan *p)
{
    herd_precision prec = herd_cuda_ctx_get()->precision;
    HERD_TRY(set_layout(p, prec));
    return herd_cuda_conv_algos_choose(&p->d, p->x, p->w, p->conv, p->y, prec, &p->algos);
}

/* Before a cuDNN call: re-pick after a precision change, and set the direction's
 * math type (the descriptor is shared by the three directions). */
enum { FWD, BWD_DATA, BWD_FILTER };

static bool half(const herd_conv_plan *p)
{
    return p->precision == HERD_PRECISION_BF16 || p->precision == HERD_PRECISION_FP16;
}

static herd_status prepare(herd_conv_plan *p, int direction, void **workspace)
{
    if (p->precision != herd_cuda_ctx_get()->precision)
        HERD_TRY(pick_algos(p));
    if ((p->d.bf16_in || p->d.bf16_out) && !half(p))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "conv2d: 16-bit activations in a %s run; they "
                        "exist only under --precision bf16 or fp16",
                        herd_precision_name(p->precision));
    HERD_TRY(herd_cuda_scratch(HERD_CUDA_SCRATCH_CONV, p->algos.workspace, workspace));
    if (p->precision == HERD_PRECISION_FP32)
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

/* ---- 16-bit operands: the model's 16-bit activations as they are, anything fp32
 * converted into the slot's scratch (NHWC, or KRSC for weights) */

static herd_status as16(int slot, int n, int c, int hw, const float *f32, bool is16,
                        const void **out)
{
    if (is16) {
        *out = f32;
        return HERD_OK;
    }
    void *buf;
    HERD_TRY(herd_cuda_scratch(slot, (size_t)n * c * hw * 2, &buf));
    HERD_TRY(herd_cuda_to_nhwc16(n, c, hw, f32, buf));
    *out = buf;
    return HERD_OK;
}

/* Where a 16-bit result goes: the caller's buffer when the model keeps it in 16 bits,
 * else the slot's scratch (then converted back by the caller). */
static herd_status out16(int slot, size_t count, float *f32, bool is16, void **out)
{
    if (is16) {
        *out = f32;
        return HERD_OK;
    }
    return herd_cuda_scratch(slot, count * 2, out);
}

#define X_HW(d) ((d)->h_in * (d)->w_in)
#define Y_HW(d) ((d)->h_out * (d)->w_out)
#define W_HW(d) ((d)->kh * (d)->kw)

static herd_status fwd16(herd_conv_plan *p, void *ws, const float *x, const float *w,
                         const float *b, float *y)
{
    const herd_conv_desc *d = &p->d;
    const void *x16, *w16;
    void *y16;
    HERD_TRY(as16(HERD_CUDA_SCRATCH_CONV_X16, d->n, d->c_in, X_HW(d), x, d->bf16_in, &x16));
    HERD_TRY(as16(HERD_CUDA_SCRATCH_CONV_W16, d->c_out, d->c_in, W_HW(d), w, false, &w16));
    HERD_TRY(out16(HERD_CUDA_SCRATCH_CONV_Y16, (size_t)d->n * d->c_out * Y_HW(d), y, d->bf16_out,
                   &y16));
    const float one = 1.0f, zero = 0.0f;
    HERD_CUDNN(cudnnConvolutionForward(herd_cuda_ctx_get()->cudnn, &one, p->x, x16, p->w, w16,
                                       p->conv, p->algos.fwd, ws, p->algos.workspace, &zero, p->y,
                                       y16),
               "convolution forward (16-bit)");
    if (d->bf16_out)
        return d->bias ? herd_cuda_nhwc16_bias_add((size_t)d->n * Y_HW(d), d->c_out, y16, b)
                       : HERD_OK;
    return herd_cuda_from_nhwc16(d->n, d->c_out, Y_HW(d), y16, y, d->bias ? b : NULL, false);
}

static herd_status bwd_data16(herd_conv_plan *p, void *ws, const float *dy, const float *w,
                              float *dx)
{
    const herd_conv_desc *d = &p->d;
    const void *dy16, *w16;
    void *dx16;
    HERD_TRY(as16(HERD_CUDA_SCRATCH_CONV_Y16, d->n, d->c_out, Y_HW(d), dy, d->bf16_out, &dy16));
    HERD_TRY(as16(HERD_CUDA_SCRATCH_CONV_W16, d->c_out, d->c_in, W_HW(d), w, false, &w16));
    HERD_TRY(out16(HERD_CUDA_SCRATCH_CONV_X16, (size_t)d->n * d->c_in * X_HW(d), dx, d->bf16_in,
                   &dx16));
    const float one = 1.0f, zero = 0.0f;
    HERD_CUDNN(cudnnConvolutionBackwardData(herd_cuda_ctx_get()->cudnn, &one, p->w, w16, p->y,
                                            dy16, p->conv, p->algos.bwd_data, ws,
                                            p->algos.workspace, &zero, p->x, dx16),
               "convolution backward data (16-bit)");
    return d->bf16_in ? HERD_OK : herd_cuda_from_nhwc16(d->n, d->c_in, X_HW(d), dx16, dx, NULL, false);
}

/* The weight gradient comes out of cuDNN in 16 bits (its type is the data's) and is
 * widened into the fp32 gradient, added to it when accumulating. */
static herd_status bwd_weights16(herd_conv_plan *p, void *ws, const float *x, const float *dy,
                                 float *dw, float *db, float beta)
{
    const herd_conv_desc *d = &p->d;
    const void *x16, *dy16;
    void *dw16;
    HERD_TRY(as16(HERD_CUDA_SCRATCH_CONV_X16, d->n, d->c_in, X_HW(d), x, d->bf16_in, &x16));
    HERD_TRY(as16(HERD_CUDA_SCRATCH_CONV_Y16, d->n, d->c_out, Y_HW(d), dy, d->bf16_out, &dy16));
    HERD_TRY(out16(HERD_CUDA_SCRATCH_CONV_W16, (size_t)d->c_out * d->c_in * W_HW(d), NULL, false,
                   &dw16));
    cudnnHandle_t h = herd_cuda_ctx_get()->cudnn;
    const float one = 1.0f, zero = 0.0f;
    HERD_CUDNN(cudnnConvolutionBackwardFilter(h, &one, p->x, x16, p->y, dy16, p->conv,
                                              p->algos.bwd_filter, ws, p->algos.workspace, &zero,
                                              p->w, dw16),
               "convolution backward filter (16-bit)");
    HERD_TRY(herd_cuda_from_nhwc16(d->c_out, d->c_in, W_HW(d), dw16, dw, NULL, beta != 0.0f));
    if (!d->bias)
        return HERD_OK;
    if (d->bf16_out)
        return herd_cuda_nhwc16_bias_grad((size_t)d->n * Y_HW(d), d->c_out, dy16, db, beta);
    HERD_CUDNN(cudnnConvolutionBackwardBias(h, &one, p->y32, dy, &beta, p->bias, db),
               "convolution backward bias");
    return HERD_OK;
}

herd_status herd_cuda_conv2d_fwd(herd_conv_plan *p, const float *x, const float *w,
                                 const float *b, float *y)
{
    HERD_TRY(herd_check_conv2d_fwd(p, x, w, b, y));
    void *ws;
    HERD_TRY(prepare(p, FWD, &ws));
    if (half(p))
        return fwd16(p, ws, x, w, b, y);
    cudnnHandle_t h = herd_cuda_ctx_get()->cudnn;
    const float one = 1.0f, zero = 0.0f;
    HERD_CUDNN(cudnnConvolutionForward(h, &one, p->x, x, p->w, w, p->conv, p->algos.fwd,
                                       ws, p->algos.workspace, &zero, p->y, y),
               "convolution forward");
    if (p->d.bias)
        HERD_CUDNN(cudnnAddTensor(h, &one, p->bias, b, &one, p->y32, y), "convolution bias");
    return HERD_OK;
}

herd_status herd_cuda_conv2d_bwd_data(herd_conv_plan *p, const float *dy, const float *w,
                                      float *dx)
{
    HERD_TRY(herd_check_conv2d_bwd_data(p, dy, w, dx));
    void *ws;
    HERD_TRY(prepare(p, BWD_DATA, &ws));
    if (half(p))
        return bwd_data16(p, ws, dy, w, dx);
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
    if (half(p))
        return bwd_weights16(p, ws, x, dy, dw, db, beta);
    cudnnHandle_t h = herd_cuda_ctx_get()->cudnn;
    const float one = 1.0f;
    /* cuDNN's beta blends into the existing gradient: exactly accumulation. */
    HERD_CUDNN(cudnnConvolutionBackwardFilter(h, &one, p->x, x, p->y, dy, p->conv,
                                              p->algos.bwd_filter, ws, p->algos.workspace,
                                              &beta, p->w, dw),
               "convolution backward filter");
    if (p->d.bias)
        HERD_CUDNN(cudnnConvolutionBackwardBias(h, &one, p->y32, dy, &beta, p->bias, db),
                   "convolution backward bias");
    return HERD_OK;
}
