#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/build_info.h"
#include "herd_config.h"
#if HERD_HAVE_CUDA
#include "core/cublas_lib.h"
#endif
#include "herd/herd.h"

#if HERD_HAVE_CUDA
#include <cuda_runtime.h>
#include <cudnn.h>
#endif
#if HERD_HAVE_NCCL
#include <nccl.h>
#endif
#if HERD_HAVE_MPI
#include <mpi.h>
#endif

static char build_info[768];
static char mpi_library[128] = "none"; /* kept apart: herd doctor names it alone */
static pthread_once_t build_info_once = PTHREAD_ONCE_INIT, mpi_library_once = PTHREAD_ONCE_INIT;

static void compose_mpi_library(void)
{
#if HERD_HAVE_MPI
    /* Callable before MPI_Init; the library actually loaded, not the headers'. Cut to
     * "Open MPI v4.1.4" or "MPICH 4.0.2", without the package details (MPICH's string
     * runs to kilobytes: its configure line). */
    static char full[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(full, &len) == MPI_SUCCESS) {
        full[strcspn(full, ",\n")] = '\0';
        const char *label = strstr(full, " Version:"); /* "MPICH Version:\t4.0.2" */
        if (label)
            snprintf(mpi_library, sizeof mpi_library, "%.*s %.64s", (int)(label - full), full,
                     label + strlen(" Version:") + strspn(label + strlen(" Version:"), " \t"));
        else
            snprintf(mpi_library, sizeof mpi_library, "%.120s", full);
    }
#endif
}

static void compose_build_info(void)
{
    pthread_once(&mpi_library_once, compose_mpi_library);
    char cuda[160] = "cuda: not built";
#if HERD_HAVE_CUDA
    /* The CUDA runtime, cuBLAS and cuDNN actually loaded (they may differ from the
     * headers); none of these calls needs a GPU. */
    int rt = 0, blas_major = 0, blas_minor = 0, blas_patch = 0;
    cudaRuntimeGetVersion(&rt);
    char blas[48] = "cuBLAS not loadable";
    const herd_cublas_lib *cublas;
    herd_status st = herd_cublas_open(&cublas);
    if (st == HERD_OK) {
        cublas->get_property(MAJOR_VERSION, &blas_major);
        cublas->get_property(MINOR_VERSION, &blas_minor);
        cublas->get_property(PATCH_LEVEL, &blas_patch);
        snprintf(blas, sizeof blas, "cuBLAS %d.%d.%d", blas_major, blas_minor, blas_patch);
    }
    size_t dnn = cudnnGetVersion();
    snprintf(cuda, sizeof cuda, "cuda: CUDA %d.%d, %s, cuDNN %zu.%zu.%zu", rt / 1000, rt % 1000 / 10, blas,
             dnn / 10000, dnn / 100 % 100, dnn % 100);
#endif
    char nccl[32] = "NCCL: none";
#if HERD_HAVE_NCCL
    int nv = 0;
    ncclGetVersion(&nv); /* the library loaded: major*10000 + minor*100 + patch */
    snprintf(nccl, sizeof nccl, "NCCL %d.%d.%d", nv / 10000, nv / 100 % 100, nv % 100);
#endif
    snprintf(build_info, sizeof build_info,
             "herd " HERD_VERSION " (backends: cpu: oneDNN " HERD_DNNL_VERSION
             " (convolutions and matmuls: primitives made once per shape), OpenMP; %s; MPI: %s;"
             " %s)",
             cuda, mpi_library, nccl);
}

const char *herd_build_info(void)
{
    pthread_once(&build_info_once, compose_build_info);
    return build_info;
}

const char *herd_mpi_library_version(void)
{
#if HERD_HAVE_MPI
    pthread_once(&mpi_library_once, compose_mpi_library);
    return mpi_library;
#else
    return NULL;
#endif
}
