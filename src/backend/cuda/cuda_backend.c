/* The CUDA backend's function table and its context: the device current when
 * herd_backend_cuda() is first called, one stream, and cuBLAS / cuDNN handles bound
 * to that stream. */
#include <pthread.h>
#include <stdio.h>

#include "backend/cuda/cuda.h"

static herd_cuda_ctx g_ctx;
static char g_init_error[400];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

const herd_cuda_ctx *herd_cuda_ctx_get(void) { return &g_ctx; }

/* Records why initialisation failed; herd_backend_cuda() reports it on every call. */
#define INIT_FAIL(...)                                                              \
    do {                                                                            \
        snprintf(g_init_error, sizeof g_init_error, __VA_ARGS__);                   \
        return;                                                                     \
    } while (0)

static void init(void)
{
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess || count == 0)
        INIT_FAIL("no CUDA device is visible (%s); check nvidia-smi and CUDA_VISIBLE_DEVICES, "
                  "or use the cpu backend",
                  ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
    if ((ce = cudaGetDevice(&g_ctx.device)) != cudaSuccess)
        INIT_FAIL("cudaGetDevice failed: %s", cudaGetErrorString(ce));
    /* Same major version or the cuDNN API this was compiled against may be missing. */
    size_t cudnn_ver = cudnnGetVersion();
    if (cudnn_ver / 10000 != CUDNN_MAJOR)
        INIT_FAIL("cuDNN %zu.%zu was loaded but herd was built against cuDNN %d.%d; put a "
                  "cuDNN %d library first on LD_LIBRARY_PATH",
                  cudnn_ver / 10000, cudnn_ver / 100 % 100, CUDNN_MAJOR, CUDNN_MINOR, CUDNN_MAJOR);
    /* Blocking stream: see cuda.h. */
    if ((ce = cudaStreamCreate(&g_ctx.stream)) != cudaSuccess)
        INIT_FAIL("cudaStreamCreate failed: %s", cudaGetErrorString(ce));
    cublasStatus_t cb = cublasCreate(&g_ctx.cublas);
    if (cb != CUBLAS_STATUS_SUCCESS)
        INIT_FAIL("cublasCreate failed: %s", cublasGetStatusString(cb));
    cublasSetStream(g_ctx.cublas, g_ctx.stream);
    /* Plain fp32 (no TF32): results must match the CPU backend at fp32 tolerances;
     * TF32 will be an explicit --precision choice. */
    if ((cb = cublasSetMathMode(g_ctx.cublas, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS)
        INIT_FAIL("cublasSetMathMode failed: %s", cublasGetStatusString(cb));
    cudnnStatus_t cd = cudnnCreate(&g_ctx.cudnn);
    if (cd != CUDNN_STATUS_SUCCESS)
        INIT_FAIL("cudnnCreate failed: %s", cudnnGetErrorString(cd));
    if ((cd = cudnnSetStream(g_ctx.cudnn, g_ctx.stream)) != CUDNN_STATUS_SUCCESS)
        INIT_FAIL("cudnnSetStream failed: %s", cudnnGetErrorString(cd));
}

static bool cuda_supports_op(herd_op op) { return op >= 0 && op < HERD_OP_COUNT; }

static herd_status cuda_set_threads(int threads)
{
    if (threads < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "threads must be >= 0 (0 = all cores), got %d",
                        threads);
    return HERD_OK; /* host threads play no part in GPU ops */
}

static const herd_backend cuda_backend = {
    .name = "cuda",
    .supports_op = cuda_supports_op,
    .alloc = herd_cuda_alloc,
    .free = herd_cuda_free,
    .memcpy_h2d = herd_cuda_memcpy_h2d,
    .memcpy_d2h = herd_cuda_memcpy_d2h,
    .set_threads = cuda_set_threads,
    .gemm = herd_cuda_gemm,
    .bias_add = herd_cuda_bias_add,
    .bias_grad = herd_cuda_bias_grad,
    .conv2d_plan = herd_cuda_conv2d_plan,
    .conv2d_plan_free = herd_cuda_conv2d_plan_free,
    .conv2d_fwd = herd_cuda_conv2d_fwd,
    .conv2d_bwd_data = herd_cuda_conv2d_bwd_data,
    .conv2d_bwd_weights = herd_cuda_conv2d_bwd_weights,
    .pool_plan = herd_cuda_pool_plan,
    .pool_plan_free = herd_cuda_pool_plan_free,
    .pool_fwd = herd_cuda_pool_fwd,
    .pool_bwd = herd_cuda_pool_bwd,
    .global_avgpool_fwd = herd_cuda_global_avgpool_fwd,
    .global_avgpool_bwd = herd_cuda_global_avgpool_bwd,
    .bn_fwd_train = herd_cuda_bn_fwd_train,
    .bn_fwd_infer = herd_cuda_bn_fwd_infer,
    .bn_bwd = herd_cuda_bn_bwd,
    .bn_stats = herd_cuda_bn_stats,
    .bn_apply_train = herd_cuda_bn_apply_train,
    .bn_bwd_reduce = herd_cuda_bn_bwd_reduce,
    .bn_bwd_apply = herd_cuda_bn_bwd_apply,
    .relu_fwd = herd_cuda_relu_fwd,
    .relu_bwd = herd_cuda_relu_bwd,
    .dropout_fwd = herd_cuda_dropout_fwd,
    .mul = herd_cuda_mul,
    .add = herd_cuda_add,
    .axpy = herd_cuda_axpy,
    .copy = herd_cuda_copy,
    .fill = herd_cuda_fill,
    .softmax_xent = herd_cuda_softmax_xent,
    .sgd_update = herd_cuda_sgd_update,
    .adamw_update = herd_cuda_adamw_update,
};

static bool g_shut_down;

void herd_backend_cuda_shutdown(void)
{
    if (g_shut_down || g_init_error[0] || !g_ctx.stream)
        return;
    cudaStreamSynchronize(g_ctx.stream);
    herd_cuda_alloc_release();
    cudnnDestroy(g_ctx.cudnn);
    cublasDestroy(g_ctx.cublas);
    cudaStreamDestroy(g_ctx.stream);
    g_shut_down = true;
}

const herd_backend *herd_backend_cuda(void)
{
    pthread_once(&g_once, init);
    if (g_shut_down) {
        HERD_ERR(HERD_ERR_UNSUPPORTED, "cuda backend: used after herd_backend_cuda_shutdown()");
        return NULL;
    }
    if (g_init_error[0]) {
        HERD_ERR(HERD_ERR_UNSUPPORTED, "cuda backend: %s", g_init_error);
        return NULL;
    }
    return &cuda_backend;
}
