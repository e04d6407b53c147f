/* The CPU backend's function table, memory, threads and the shared oneDNN engine. */
#include <omp.h>
#include <string.h>
#include <pthread.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_dnnl.h"
#include "backend/cpu/cpu_ops.h"

static dnnl_engine_t g_engine;
static dnnl_stream_t g_stream;
static dnnl_status_t g_engine_status = dnnl_success;
static pthread_once_t g_engine_once = PTHREAD_ONCE_INIT;

static void create_engine(void)
{
    g_engine_status = dnnl_engine_create(&g_engine, dnnl_cpu, 0);
    if (g_engine_status == dnnl_success)
        g_engine_status = dnnl_stream_create(&g_stream, g_engine, dnnl_stream_default_flags);
}

herd_status herd_dnnl_get(dnnl_engine_t *engine, dnnl_stream_t *stream)
{
    pthread_once(&g_engine_once, create_engine);
    HERD_DNNL(g_engine_status, "CPU engine/stream creation");
    *engine = g_engine;
    *stream = g_stream;
    return HERD_OK;
}

const char *herd_dnnl_status_str(dnnl_status_t st)
{
    switch (st) {
    case dnnl_success: return "success";
    case dnnl_out_of_memory: return "out of memory";
    case dnnl_invalid_arguments: return "invalid arguments";
    case dnnl_unimplemented: return "unimplemented for these sizes";
    case dnnl_iterator_ends: return "iterator ends";
    case dnnl_runtime_error: return "runtime error";
    case dnnl_not_required: return "not required";
    }
    return "unknown status";
}

static bool cpu_supports_op(herd_op op) { return op >= 0 && op < HERD_OP_COUNT; }



static herd_status cpu_set_threads(int threads)
{
    HERD_TRY(herd_check_set_threads(threads));
    omp_set_num_threads(threads == 0 ? omp_get_num_procs() : threads);
    return HERD_OK;
}

static herd_status cpu_memcpy(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
    return HERD_OK;
}

static const herd_backend cpu_backend = {
    .name = "cpu",
    .host_memory = true,
    .xent_in_place = true,
    .supports_op = cpu_supports_op,
    .alloc = herd_cpu_alloc,
    .free = herd_cpu_free,
    .set_memory_limit = herd_cpu_set_memory_limit,
    .memory_usage = herd_cpu_memory_usage,
    .memory_reset_peak = herd_cpu_memory_reset_peak,
    .memcpy_h2d = cpu_memcpy,
    .memcpy_d2h = cpu_memcpy,
    .set_threads = cpu_set_threads,
    .gemm = herd_cpu_gemm,
    .bias_add = herd_cpu_bias_add,
    .bias_grad = herd_cpu_bias_grad,
    .exact_linear_fwd = herd_cpu_exact_linear_fwd,
    .exact_linear_bwd_data = herd_cpu_exact_linear_bwd_data,
    .exact_linear_wgrad = herd_cpu_exact_linear_wgrad,
    .conv2d_plan = herd_cpu_conv2d_plan,
    .conv2d_plan_free = herd_cpu_conv2d_plan_free,
    .conv2d_fwd = herd_cpu_conv2d_fwd,
    .conv2d_bwd_data = herd_cpu_conv2d_bwd_data,
    .conv2d_bwd_weights = herd_cpu_conv2d_bwd_weights,
    .pool_plan = herd_cpu_pool_plan,
    .pool_plan_free = herd_cpu_pool_plan_free,
    .pool_fwd = herd_cpu_pool_fwd,
    .pool_bwd = herd_cpu_pool_bwd,
    .global_avgpool_fwd = herd_cpu_global_avgpool_fwd,
    .global_avgpool_bwd = herd_cpu_global_avgpool_bwd,
    .bn_fwd_train = herd_cpu_bn_fwd_train,
    .bn_fwd_infer = herd_cpu_bn_fwd_infer,
    .bn_bwd = herd_cpu_bn_bwd,
    .bn_stats = herd_cpu_bn_stats,
    .bn_apply_train = herd_cpu_bn_apply_train,
    .bn_bwd_reduce = herd_cpu_bn_bwd_reduce,
    .bn_bwd_apply = herd_cpu_bn_bwd_apply,
    .relu_fwd = herd_cpu_relu_fwd,
    .relu_bwd = herd_cpu_relu_bwd,
    .dropout_fwd = herd_cpu_dropout_fwd,
    .mul = herd_cpu_mul,
    .add = herd_cpu_add,
    .axpy = herd_cpu_axpy,
    .copy = herd_cpu_copy,
    .fill = herd_cpu_fill,
    .softmax_xent = herd_cpu_softmax_xent,
    .xent_part_stats = herd_cpu_xent_part_stats,
    .xent_part_grad = herd_cpu_xent_part_grad,
    .embedding_fwd = herd_cpu_embedding_fwd,
    .embedding_bwd = herd_cpu_embedding_bwd,
    .layernorm_fwd = herd_cpu_layernorm_fwd,
    .layernorm_bwd = herd_cpu_layernorm_bwd,
    .gelu_fwd = herd_cpu_gelu_fwd,
    .gelu_bwd = herd_cpu_gelu_bwd,
    .attention_fwd = herd_cpu_attention_fwd,
    .attention_bwd = herd_cpu_attention_bwd,
    .sgd_update = herd_cpu_sgd_update,
    .adamw_update = herd_cpu_adamw_update,
    .grad_unscale_check = herd_cpu_grad_unscale_check,
    .sum_squares = herd_cpu_sum_squares,
    .set_precision = herd_cpu_set_precision,
    .bf16_acts = &herd_cpu_bf16_act_ops,
};

const herd_backend *herd_backend_cpu(void) { return &cpu_backend; }
