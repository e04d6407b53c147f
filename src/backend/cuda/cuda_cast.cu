/* Gradient wire formats for the NCCL communicator: fp32 <-> fp16 / bf16 casts,
 * launched on the caller's stream (the communication stream, not the backend's).
 * Round to nearest even, as the CPU casts in core/half.h. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda.h"

__global__ void k_to_half(size_t n, const float *x, float scale, __half *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2half_rn(x[i] * scale);
}

__global__ void k_to_bf16(size_t n, const float *x, float scale, __nv_bfloat16 *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn(x[i] * scale);
}

__global__ void k_from_half(size_t n, const __half *x, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __half2float(x[i]);
}

__global__ void k_from_bf16(size_t n, const __nv_bfloat16 *x, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __bfloat162float(x[i]);
}

extern "C" herd_status herd_cuda_cast_to_16(size_t n, const float *x, float scale, bool bf16,
                                            void *y, cudaStream_t st)
{
    if (n == 0)
        return HERD_OK;
    if (bf16)
        k_to_bf16<<<herd_cuda_blocks(n), HERD_CUDA_THREADS, 0, st>>>(n, x, scale,
                                                                     (__nv_bfloat16 *)y);
    else
        k_to_half<<<herd_cuda_blocks(n), HERD_CUDA_THREADS, 0, st>>>(n, x, scale, (__half *)y);
    HERD_CUDA_LAUNCHED("k_to_half / k_to_bf16");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_cast_from_16(size_t n, const void *x, bool bf16, float *y,
                                              cudaStream_t st)
{
    if (n == 0)
        return HERD_OK;
    if (bf16)
        k_from_bf16<<<herd_cuda_blocks(n), HERD_CUDA_THREADS, 0, st>>>(
            n, (const __nv_bfloat16 *)x, y);
    else
        k_from_half<<<herd_cuda_blocks(n), HERD_CUDA_THREADS, 0, st>>>(n, (const __half *)x, y);
    HERD_CUDA_LAUNCHED("k_from_half / k_from_bf16");
    return HERD_OK;
}
