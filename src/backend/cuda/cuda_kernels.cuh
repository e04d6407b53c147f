/* Loop and warp idioms the CUDA backend's kernels share, and the launchers' stream. All
 * .cu files compile as one unit (CMakeLists.txt): what two of them need is defined here
 * once. */
#ifndef HERD_BACKEND_CUDA_KERNELS_CUH
#define HERD_BACKEND_CUDA_KERNELS_CUH

#include "backend/cuda/cuda.h"

/* The stream every launcher queues on: the context's. */
static inline cudaStream_t stream(void) { return herd_cuda_ctx_get()->stream; }

/* What batch norm's partial-sum kernels add (cuda_bn.cu, cuda_bn16.cu). */
enum { SUM_X, SUM_SQDEV, SUM_BWD };

/* A grid-stride loop of i over [0, n) (launched with herd_cuda_blocks, cuda.h). */
#define GRID_STRIDE(i, n)                                                         \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);        \
         i += (size_t)gridDim.x * blockDim.x)

/* The sum of v over the warp's 32 lanes, on every lane (a butterfly: each lane adds in
 * the same order, so all get the same bits). */
template <typename T> __device__ static inline T warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

#endif
