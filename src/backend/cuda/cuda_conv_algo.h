/* How a convolution's cuDNN algorithms are chosen (cuda_conv_algo.c), apart from the
 * descriptors and calls (cuda_conv.c). */
#ifndef HERD_BACKEND_CUDA_CONV_ALGO_H
#define HERD_BACKEND_CUDA_CONV_ALGO_H

#include "backend/cuda/cuda.h"

typedef struct herd_cuda_conv_algos {
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    cudnnMathType_t fwd_math, bwd_data_math, bwd_filter_math;
    size_t workspace; /* the largest of the three directions' */
} herd_cuda_conv_algos;

/* The three directions' algorithms for one convolution shape at the context's precision.
 * By default they are measured (cuDNN's Find, run once per shape and precision, kept for
 * the process and in a file for later runs), deterministic ones only, within a quarter of the device memory
 * herd may still take. The descriptors are the plan's; conv's math type is left set for
 * the precision (CUDNN_FMA_MATH for fp32, CUDNN_TENSOR_OP_MATH for tf32, bf16 and fp16). */
herd_status herd_cuda_conv_algos_choose(const herd_conv_desc *d, cudnnTensorDescriptor_t x,
                                        cudnnFilterDescriptor_t w,
                                        cudnnConvolutionDescriptor_t conv,
                                        cudnnTensorDescriptor_t y, herd_precision prec,
                                        herd_cuda_conv_algos *out);

/* Why convolutions may give other bits from run to run (HERD_CUDNN_ANY_ALGO=1), or NULL:
 * the backend's nondeterminism. */
const char *herd_cuda_nondeterminism(void);

/* The file of measured choices kept across runs (cuda_conv_db.c), by a key naming the
 * GPU, cuDNN, the shape, the precision and the rules. */
herd_status herd_cuda_conv_db_lookup(const char *key, herd_cuda_conv_algos *out, bool *found);
herd_status herd_cuda_conv_db_store(const char *key, const herd_cuda_conv_algos *a);

/* Forgets the measured choices (shutdown). */
void herd_cuda_conv_algos_release(void);

#endif
