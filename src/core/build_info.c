#include <pthread.h>
#include <stdio.h>
#include <string.h>

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
#define VERSION_CAP MPI_MAX_LIBRARY_VERSION_STRING
#else
#define VERSION_CAP 64
#endif

static char build_info[512];
static pthread_once_t build_info_once = PTHREAD_ONCE_INIT;

static void compose_build_info(void)
{
    char mpi[VERSION_CAP] = "none";
#if HERD_HAVE_MPI
    /* Callable before MPI_Init; the library actually loaded, not the headers'. */
    int len = 0;
    if (MPI_Get_library_version(mpi, &len) == MPI_SUCCESS)
        mpi[strcspn(mpi, ",\n")] = '\0'; /* "Open MPI v4.1.4", without the package details */
#endif
    char cuda[128] = "CUDA: none";
#if HERD_HAVE_CUDA
    /* The CUDA runtime and cuDNN actually loaded (they may differ from the headers);
     * NCCL is not linked yet, so its version is the headers'. */
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    size_t dnn = cudnnGetVersion();
    char nccl[32] = "NCCL: none";
#if HERD_HAVE_NCCL
    snprintf(nccl, sizeof nccl, "NCCL %d.%d.%d", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
#endif
    snprintf(cuda, sizeof cuda, "cuda backend: CUDA %d.%d, cuDNN %zu.%zu.%zu, %s", rt / 1000,
             rt % 1000 / 10, dnn / 10000, dnn / 100 % 100, dnn % 100, nccl);
#endif
    snprintf(build_info, sizeof build_info,
             "herd " HERD_VERSION " (cpu backend: oneDNN " HERD_DNNL_VERSION ", OpenMP; %s; MPI: %s)",
             cuda, mpi);
}

const char *herd_build_info(void)
{
    pthread_once(&build_info_once, compose_build_info);
    return build_info;
}
