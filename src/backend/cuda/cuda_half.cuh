/* What the 16-bit activation files share (cuda_act16.cu, cuda_bn16.cu): the two formats
 * as raw bits, dispatch by the context's precision, 16-byte packs and tile sizes. */
#ifndef HERD_BACKEND_CUDA_HALF_CUH
#define HERD_BACKEND_CUDA_HALF_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_kernels.cuh"

/* The two 16-bit formats, as raw bits (the table's buffers are uint16_t). */
struct as_bf16 {
    static __device__ float load(uint16_t b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
    static __device__ uint16_t store(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
};
struct as_fp16 {
    static __device__ float load(uint16_t b) { return __half2float(__ushort_as_half(b)); }
    static __device__ uint16_t store(float v) { return __half_as_ushort(__float2half_rn(v)); }
};

static inline bool fp16(void) { return herd_cuda_ctx_get()->precision == HERD_PRECISION_FP16; }

/* Runs F<as_fp16> or F<as_bf16> by the precision: F is a launcher template. */
#define BY_FORMAT(F, ...) (fp16() ? F<as_fp16>(__VA_ARGS__) : F<as_bf16>(__VA_ARGS__))

/* Eight values in 16 bytes: the unit of the vectorised loops. */
union pack8 {
    uint4 u;
    uint16_t h[8];
};

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

#define TILE 32
#define TILE_ROWS 8

/* The batch-norm ops of the table (cuda_bn16.cu, C++ linkage: .cu files alone call them),
 * same contracts as backend.h's. */
herd_status herd_cuda_bn16_stats(int n, int c, int hw, const uint16_t *x, const double *sum,
                                 int64_t count, double *out);
herd_status herd_cuda_bn16_apply_train(int n, int c, int hw, const uint16_t *x,
                                       const float *gamma, const float *beta, const double *sum,
                                       const double *sqdev, int64_t count, uint16_t *y,
                                       float *save_mean, float *save_invstd, float *running_mean,
                                       float *running_var, float momentum, float eps);
herd_status herd_cuda_bn16_fwd_infer(int n, int c, int hw, const uint16_t *x, const float *gamma,
                                     const float *beta, uint16_t *y, const float *running_mean,
                                     const float *running_var, float eps);
herd_status herd_cuda_bn16_bwd_reduce(int n, int c, int hw, const uint16_t *x, const uint16_t *dy,
                                      const float *save_mean, const float *save_invstd,
                                      double *sum_dy, double *sum_dy_xc, float *dgamma,
                                      float *dbeta, float beta);
herd_status herd_cuda_bn16_bwd_apply(int n, int c, int hw, const uint16_t *x, const uint16_t *dy,
                                     const float *gamma, const float *save_mean,
                                     const float *save_invstd, const double *sum_dy,
                                     const double *sum_dy_xc, int64_t count, uint16_t *dx);

#endif
