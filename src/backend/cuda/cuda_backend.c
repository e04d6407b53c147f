/* The CUDA backend's function table and its context: the device current when
 * herd_backend_cuda() is first called, one stream, and cuBLAS / cuDNN handles bound
 * to that stream. */
#include <pthread.h>
#include <stdio.h>

#include "backend/cuda/cuda_conv_algo.h"
#include "core/log.h"

static herd_cuda_ctx g_ctx;
static char g_init_error[400];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_bound_device = -1; /* herd_backend_cuda_bind's choice, -1 = the current device */

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
    if (g_bound_device >= 0 && (ce = cudaSetDevice(g_bound_device)) != cudaSuccess)
        INIT_FAIL("cudaSetDevice(%d) failed: %s", g_bound_device, cudaGetErrorString(ce));
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
    if (herd_cublas_open(&g_ctx.blas) != HERD_OK)
        INIT_FAIL("%s", herd_last_error());
    const herd_cublas_lib *b = g_ctx.blas;
    cublasStatus_t cb = b->create(&g_ctx.cublas);
    if (cb != CUBLAS_STATUS_SUCCESS)
        INIT_FAIL("cublasCreate failed: %s", b->status_string(cb));
    b->set_stream(g_ctx.cublas, g_ctx.stream);
    /* Plain fp32 (no TF32): results must match the CPU backend at fp32 tolerances;
     * TF32 will be an explicit --precision choice. */
    if ((cb = b->set_math_mode(g_ctx.cublas, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS)
        INIT_FAIL("cublasSetMathMode failed: %s", b->status_string(cb));
    cudnnStatus_t cd = cudnnCreate(&g_ctx.cudnn);
    if (cd != CUDNN_STATUS_SUCCESS)
        INIT_FAIL("cudnnCreate failed: %s", cudnnGetErrorString(cd));
    if ((cd = cudnnSetStream(g_ctx.cudnn, g_ctx.stream)) != CUDNN_STATUS_SUCCESS)
        INIT_FAIL("cudnnSetStream failed: %s", cudnnGetErrorString(cd));
}

static bool cuda_supports_op(herd_op op) { return op >= 0 && op < HERD_OP_COUNT; }

static herd_status cuda_set_threads(int threads)
{
    HERD_TRY(herd_check_set_threads(threads));
    return HERD_OK; /* host threads play no part in GPU ops */
}

static herd_status cuda_set_precision(herd_precision p)
{
    struct cudaDeviceProp prop;
    HERD_CUDA(cudaGetDeviceProperties(&prop, g_ctx.device), "reading the device properties");
    /* Tensor cores: fp16 from Volta (7.0), bf16 and tf32 from Ampere (8.0). */
    int need = p == HERD_PRECISION_FP16 ? 7 : p == HERD_PRECISION_FP32 ? 0 : 8;
    if (prop.major < need)
        return HERD_ERR(HERD_ERR_UNSUPPORTED,
                        "--precision %s needs a GPU of compute capability %d.0 or newer; %s is "
                        "%d.%d (use --precision fp32%s)",
                        herd_precision_name(p), need, prop.name, prop.major, prop.minor,
                        prop.major >= 7 && p != HERD_PRECISION_FP16 ? " or fp16" : "");
    /* cuBLAS: TF32 tensor cores for cublasSgemm under tf32, none under fp32 (the default
     * mode does not use TF32); bf16 and fp16 name their compute type per call
     * (cuda_gemm.cu), and the fp32 products left under them (attention's scores and
     * mixing, cuda_attention.cu) take TF32, more precise than the 16-bit operands PyTorch's
     * autocast gives them. Convolutions pick up the precision when they next run. */
    bool tf32 = p != HERD_PRECISION_FP32;
    HERD_CUBLAS(g_ctx.blas->set_math_mode(g_ctx.cublas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                           : CUBLAS_DEFAULT_MATH),
                "setting the math mode");
    g_ctx.precision = p;
    return HERD_OK;
}

static herd_status cuda_device_info(herd_device_info *out)
{
    struct cudaDeviceProp prop;
    HERD_CUDA(cudaGetDeviceProperties(&prop, g_ctx.device), "reading the device properties");
    int khz = 0;
    /* cudaDeviceProp lost its clockRate field in CUDA 13; the attribute stays. */
    HERD_CUDA(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, g_ctx.device),
              "reading the SM clock");
    snprintf(out->name, sizeof out->name, "%.*s", (int)sizeof out->name - 1, prop.name);
    out->cc_major = prop.major;
    out->cc_minor = prop.minor;
    out->sms = prop.multiProcessorCount;
    out->clock_ghz = khz / 1e6;
    out->memory_bytes = prop.totalGlobalMem;
    return HERD_OK;
}

bool herd_backend_cuda_visible(void)
{
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

herd_status herd_backend_cuda_bind(int local_rank, int local_size)
{
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess || count == 0)
        return HERD_ERR(HERD_ERR_UNSUPPORTED,
                        "no CUDA device is visible (%s); check nvidia-smi and "
                        "CUDA_VISIBLE_DEVICES, or use --device cpu",
                        ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
    if (local_rank < 0 || local_rank >= local_size)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "local rank %d of %d ranks on this host",
                        local_rank, local_size);
    /* Round robin: with fewer GPUs than ranks several ranks take turns on one. */
    int device = local_rank % count;
    if (g_ctx.stream && g_ctx.device != device)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "the cuda backend already runs on GPU %d; bind local rank %d's GPU %d "
                        "before creating any model",
                        g_ctx.device, local_rank, device);
    char bus[32] = "bus id unknown";
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess)
        snprintf(bus, sizeof bus, "bus id unknown");
    g_bound_device = device;
    herd_log(HERD_LOG_INFO, "local rank %d of %d: GPU %d of %d (%s)%s", local_rank, local_size,
             device, count, bus, local_size > count ? ", shared with other ranks" : "");
    return HERD_OK;
}

/* The PCI bus id: NCCL tells ranks' GPUs apart by it, and it names the same GPU
 * whatever index CUDA_VISIBLE_DEVICES gives it in each process. */
static herd_status cuda_device_identity(int *ordinal, char *id, size_t cap)
{
    *ordinal = g_ctx.device;
    HERD_CUDA(cudaDeviceGetPCIBusId(id, cap > INT32_MAX ? INT32_MAX : (int)cap, g_ctx.device),
              "reading the GPU's PCI bus id");
    return HERD_OK;
}

static const herd_backend cuda_backend = {
    .name = "cuda",
    .supports_op = cuda_supports_op,
    .nondeterminism = herd_cuda_nondeterminism,
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
    .dropout_fwd_seeded = herd_cuda_dropout_fwd_seeded,
    .mul = herd_cuda_mul,
    .add = herd_cuda_add,
    .axpy = herd_cuda_axpy,
    .copy = herd_cuda_copy,
    .fill = herd_cuda_fill,
    .softmax_xent = herd_cuda_softmax_xent,
    .softmax_xent_queued = herd_cuda_softmax_xent_queued,
    .xent_part_stats = herd_cuda_xent_part_stats,
    .xent_part_grad = herd_cuda_xent_part_grad,
    .embedding_fwd = herd_cuda_embedding_fwd,
    .embedding_bwd = herd_cuda_embedding_bwd,
    .layernorm_fwd = herd_cuda_layernorm_fwd,
    .layernorm_bwd = herd_cuda_layernorm_bwd,
    .gelu_fwd = herd_cuda_gelu_fwd,
    .gelu_bwd = herd_cuda_gelu_bwd,
    .attention_fwd = herd_cuda_attention_fwd,
    .attention_bwd = herd_cuda_attention_bwd,
    .sgd_update = herd_cuda_sgd_update,
    .adamw_update = herd_cuda_adamw_update,
    .grad_unscale_check = herd_cuda_grad_unscale_check,
    .sum_squares = herd_cuda_sum_squares,
    .set_precision = cuda_set_precision,
    .bf16_acts = &herd_cuda_act16_ops,
    .set_memory_limit = herd_cuda_set_memory_limit,
    .device_info = cuda_device_info,
    .device_identity = cuda_device_identity,
    .timer_mark = herd_cuda_timer_mark,
    .timer_elapsed = herd_cuda_timer_elapsed,
    .graph_capture = herd_cuda_graph_capture,
    .graph_launch = herd_cuda_graph_launch,
    .graph_free = herd_cuda_graph_free,
};

static bool g_shut_down;

void herd_backend_cuda_shutdown(void)
{
    if (g_shut_down || g_init_error[0] || !g_ctx.stream)
        return;
    cudaStreamSynchronize(g_ctx.stream);
    herd_cuda_upload_release();
    herd_cuda_timer_release();
    herd_cuda_graph_release();
    herd_cuda_conv_algos_release();
    herd_cuda_alloc_release();
    cudnnDestroy(g_ctx.cudnn);
    g_ctx.blas->destroy(g_ctx.cublas);
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
