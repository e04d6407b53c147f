/*
 * cuBLAS, opened on first use (dlopen) rather than linked. Linked, libcublasLt's
 * initialisers ran in every herd process, CPU-only runs included: a program linked
 * with -lcublas started in 186 ms of CPU against 1 ms without it. Only builds with the
 * CUDA backend (HERD_HAVE_CUDA) compile this.
 */
#ifndef HERD_CORE_CUBLAS_LIB_H
#define HERD_CORE_CUBLAS_LIB_H

#include <cublas_v2.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/error.h"

/* The functions herd calls, by the names the library exports (cublas_v2.h's macros
 * map cublasCreate to cublasCreate_v2, and so on). */
typedef struct herd_cublas_lib {
    __typeof__(&cublasCreate_v2) create;
    __typeof__(&cublasDestroy_v2) destroy;
    __typeof__(&cublasSetStream_v2) set_stream;
    __typeof__(&cublasSetMathMode) set_math_mode;
    __typeof__(&cublasSgemm_v2) sgemm;
    __typeof__(&cublasSgemmStridedBatched) sgemm_strided_batched; /* attention's per-head products */
    /* Spelled out: C++ overloads cublasGemmEx, so __typeof__ cannot name it. */
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                              const void *, const void *, cudaDataType, int, const void *,
                              cudaDataType, int, const void *, void *, cudaDataType, int,
                              cublasComputeType_t, cublasGemmAlgo_t);
    __typeof__(&cublasGetStatusName) status_name;
    __typeof__(&cublasGetStatusString) status_string;
    __typeof__(&cublasGetProperty) get_property;
} herd_cublas_lib;

/* The library, opened by the first call (thread-safe); an error naming the file and
 * dlerror's reason when it cannot be opened or lacks a function. */
herd_status herd_cublas_open(const herd_cublas_lib **out);

#ifdef __cplusplus
}
#endif

#endif
