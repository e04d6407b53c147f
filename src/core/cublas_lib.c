/* Only a build with the CUDA backend has cuBLAS headers. */
#include "herd_config.h"
#if HERD_HAVE_CUDA
#include "core/cublas_lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)
/* The major version herd was compiled against: its ABI. */
#define CUBLAS_SONAME "libcublas.so." STR(CUBLAS_VER_MAJOR)

static herd_cublas_lib lib;
static char failure[512];
static pthread_once_t opened = PTHREAD_ONCE_INIT;

/* dlsym into *slot (a function pointer of the right type); false naming the symbol. */
static bool resolve(void *handle, const char *name, void *slot)
{
    void *f = dlsym(handle, name);
    if (!f) {
        snprintf(failure, sizeof failure, "%s has no function %s (%s)", CUBLAS_SONAME, name, dlerror());
        return false;
    }
    memcpy(slot, &f, sizeof f);
    return true;
}

static void open_once(void)
{
    void *h = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(failure, sizeof failure, "cannot load %s: %s; install cuBLAS %d (the CUDA toolkit's) "
                 "or add its directory to LD_LIBRARY_PATH", CUBLAS_SONAME, dlerror(), CUBLAS_VER_MAJOR);
        return;
    }
    herd_cublas_lib l;
    if (resolve(h, "cublasCreate_v2", &l.create) && resolve(h, "cublasDestroy_v2", &l.destroy) &&
        resolve(h, "cublasSetStream_v2", &l.set_stream) && resolve(h, "cublasSetMathMode", &l.set_math_mode) &&
        resolve(h, "cublasSgemm_v2", &l.sgemm) && resolve(h, "cublasGemmEx", &l.gemm_ex) &&
        resolve(h, "cublasSgemmStridedBatched", &l.sgemm_strided_batched) &&
        resolve(h, "cublasGetStatusName", &l.status_name) &&
        resolve(h, "cublasGetStatusString", &l.status_string) &&
        resolve(h, "cublasGetProperty", &l.get_property))
        lib = l;
    else
        dlclose(h);
}

herd_status herd_cublas_open(const herd_cublas_lib **out)
{
    pthread_once(&opened, open_once);
    *out = lib.create ? &lib : NULL;
    return lib.create ? HERD_OK : HERD_ERR(HERD_ERR_UNSUPPORTED, "cuBLAS: %s", failure);
}
#endif
