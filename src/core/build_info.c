#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "herd/herd.h"

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
    snprintf(build_info, sizeof build_info,
             "herd " HERD_VERSION " (cpu backend: oneDNN " HERD_DNNL_VERSION ", OpenMP; MPI: %s)", mpi);
}

const char *herd_build_info(void)
{
    pthread_once(&build_info_once, compose_build_info);
    return build_info;
}
