/* Choosing a convolution's cuDNN algorithms by measurement.
 *
 * cuDNN's heuristics (the v7 API) rank algorithms without running them, and under a
 * fixed workspace cap they sent resnet50's backward passes to cuDNN's legacy kernels
 * (60 of 193 ms of kernels in one fp32 step on an H200, 2026-11-26). So each shape is
 * timed once with cudnnFind*Ex, on scratch buffers from herd's allocator (the memory
 * budget sees them), and the result cached for the process: resnet50's 53
 * convolutions are 20-odd shapes, and evaluation's batch size is one more set. Choices
 * are also kept in a file for later runs (cuda_conv_db.c), which makes two runs of one
 * job choose alike and end on the same bytes.
 *
 * What may be chosen: deterministic algorithms only (cuDNN's atomics-based ones sum in
 * another order on every call, and a resumed run would not end on the uninterrupted
 * run's bytes), within a quarter of the device memory herd may still take; among those
 * within 5% of the fastest, the one with the least workspace; no Winograd on kernels
 * wider than 3x3 (allowed() says why). Every convolution shares
 * one workspace (cuda_conv.c), so the cost in memory is the largest choice, not a sum.
 *
 * Variables, for measuring what a rule costs:
 *   HERD_CUDNN_HEURISTIC=1  the old choice: heuristics, first fit within 512 MiB
 *   HERD_CUDNN_ANY_ALGO=1   non-deterministic algorithms too
 *   HERD_CUDNN_EXACT=1      no FFT or Winograd algorithms (their transforms round far
 *                           from a direct sum: lenet5 1.6e-5 from the CPU after 8 steps)
 *   HERD_CUDNN_LOG=1        each choice logged with its measured times */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_conv_algo.h"
#include "core/log.h"
#include "core/parse.h"

#define HEURISTIC_WORKSPACE_CAP ((size_t)512 << 20)
#define NEAR_FASTEST 1.05f

/* HERD_CUDNN_* switches: 0 (or unset) or 1; any other value is refused, naming it. */
static herd_status env_switch(const char *name, bool *on)
{
    static const char *const values[] = {"0", "1", NULL};
    int which;
    herd_status st = herd_env_choice(name, values, &which);
    *on = which == 1;
    return st;
}

const char *herd_cuda_nondeterminism(void)
{
    bool any; /* a value other than 0 or 1 is refused where algorithms are chosen */
    return env_switch("HERD_CUDNN_ANY_ALGO", &any) == HERD_OK && any
               ? "HERD_CUDNN_ANY_ALGO=1 lets cuDNN choose convolution algorithms that add with "
                 "atomics"
               : NULL;
}

typedef struct policy {
    bool any, exact, heuristic;
    bool wide_kernel; /* wider than 3x3 */
    herd_precision prec;
    size_t limit; /* workspace bytes an algorithm may take */
} policy;

/* The algorithms that transform their operands instead of summing products directly. */
enum { DIRECT, FFT, WINOGRAD };

static int transform_fwd(cudnnConvolutionFwdAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ? FFT
           : a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
                   a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED
               ? WINOGRAD
               : DIRECT;
}
static int transform_bd(cudnnConvolutionBwdDataAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
                   a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING
               ? FFT
           : a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
                   a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED
               ? WINOGRAD
               : DIRECT;
}
static int transform_bf(cudnnConvolutionBwdFilterAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
                   a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING
               ? FFT
           : a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED ? WINOGRAD
                                                                     : DIRECT;
}

/* Winograd on kernels wider than 3x3 is never chosen: its transforms amplify rounding
 * with the tile (an fp32 5x5 backward-data 2.3e-2 from the CPU on an H200, 2026-11-28,
 * where direct sums are within 1e-5). */
static bool allowed(const policy *pol, cudnnStatus_t status, size_t memory,
                    cudnnDeterminism_t det, int transform)
{
    return status == CUDNN_STATUS_SUCCESS && memory <= pol->limit &&
           !(pol->exact && transform != DIRECT) &&
           !(pol->wide_kernel && transform == WINOGRAD) &&
           (pol->any || det == CUDNN_DETERMINISTIC);
}

/* One chooser per direction (the three perf structs share their fields, not a type).
 * Results come best first: by cuDNN's ranking from the heuristics, by time from Find.
 * From Find, an allowed algorithm within NEAR_FASTEST of the first allowed one wins if
 * it takes less workspace. Returns the index chosen, -1 if none is allowed. */
#define DEFINE_CHOOSE(name, perf_t, is_transform)                                          \
    static int name(const policy *pol, const perf_t *r, int count, bool measured)          \
    {                                                                                      \
        int first = -1, best = -1;                                                         \
        for (int i = 0; i < count; i++) {                                                  \
            if (!allowed(pol, r[i].status, r[i].memory, r[i].determinism,                  \
                         is_transform(r[i].algo)))                                         \
                continue;                                                                  \
            if (first < 0)                                                                 \
                first = best = i;                                                          \
            else if (measured && r[i].time <= r[first].time * NEAR_FASTEST &&              \
                     r[i].memory < r[best].memory)                                         \
                best = i;                                                                  \
            if (!measured)                                                                 \
                break;                                                                     \
        }                                                                                  \
        return best;                                                                       \
    }
DEFINE_CHOOSE(choose_fwd, cudnnConvolutionFwdAlgoPerf_t, transform_fwd)
DEFINE_CHOOSE(choose_bd, cudnnConvolutionBwdDataAlgoPerf_t, transform_bd)
DEFINE_CHOOSE(choose_bf, cudnnConvolutionBwdFilterAlgoPerf_t, transform_bf)

/* The largest workspace among the allowed algorithms of a heuristics list: what Find
 * needs to try them all. */
#define LARGEST_ALLOWED(pol, r, count, is_transform, out)                                  \
    do {                                                                                   \
        for (int i_ = 0; i_ < (count); i_++)                                               \
            if (allowed(pol, (r)[i_].status, (r)[i_].memory, (r)[i_].determinism,          \
                        is_transform((r)[i_].algo)) && (r)[i_].memory > *(out))            \
                *(out) = (r)[i_].memory;                                                   \
    } while (0)

static herd_status none_allowed(const herd_conv_desc *d, const policy *pol, const char *what)
{
    return HERD_ERR(HERD_ERR_UNSUPPORTED,
                    "cuDNN has no %s%s algorithm for conv n=%d c_in=%d %dx%d c_out=%d k=%dx%d "
                    "stride %d pad %d within %.0f MiB of workspace; free GPU memory (a smaller "
                    "--batch-size, or a higher --gpu-memory-limit) or set HERD_CUDNN_ANY_ALGO=1",
                    pol->any ? "" : "deterministic ", what, d->n, d->c_in, d->h_in, d->w_in,
                    d->c_out, d->kh, d->kw, d->stride, d->pad, pol->limit / 1048576.0);
}

/* ---- the process's cache of choices */

typedef struct cached {
    herd_conv_desc shape; /* n, c_in, h_in, w_in, c_out, kh, kw, stride, pad */
    bool any, exact, heuristic;
    herd_precision prec;
    herd_cuda_conv_algos algos;
    struct cached *next;
} cached;

static cached *g_cache;

static bool same_shape(const herd_conv_desc *a, const herd_conv_desc *b)
{
    return a->n == b->n && a->c_in == b->c_in && a->h_in == b->h_in && a->w_in == b->w_in &&
           a->c_out == b->c_out && a->kh == b->kh && a->kw == b->kw && a->stride == b->stride &&
           a->pad == b->pad;
}

static cached *lookup(const herd_conv_desc *d, const policy *pol)
{
    for (cached *c = g_cache; c; c = c->next)
        if (same_shape(&c->shape, d) && c->any == pol->any && c->exact == pol->exact &&
            c->heuristic == pol->heuristic && c->prec == pol->prec)
            return c;
    return NULL;
}

void herd_cuda_conv_algos_release(void)
{
    while (g_cache) {
        cached *c = g_cache;
        g_cache = c->next;
        free(c);
    }
}

/* ---- measuring */

typedef struct descs {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
} descs;

typedef struct scratch {
    void *x, *w, *y, *ws;
    size_t ws_bytes;
} scratch;

static void scratch_free(scratch *s)
{
    herd_cuda_free(s->x);
    herd_cuda_free(s->w);
    herd_cuda_free(s->y);
    herd_cuda_free(s->ws);
}

/* Buffers for Find to run on (their contents do not matter: it writes the outputs). */
static herd_status scratch_alloc(const herd_conv_desc *d, size_t ws_bytes, scratch *s)
{
    size_t xb = (size_t)d->n * d->c_in * d->h_in * d->w_in * sizeof(float);
    size_t yb = (size_t)d->n * d->c_out * d->h_out * d->w_out * sizeof(float);
    size_t wb = (size_t)d->c_out * d->c_in * d->kh * d->kw * sizeof(float);
    s->ws_bytes = ws_bytes;
    if (!(s->x = herd_cuda_alloc(xb)) || !(s->y = herd_cuda_alloc(yb)) ||
        !(s->w = herd_cuda_alloc(wb)) || (ws_bytes && !(s->ws = herd_cuda_alloc(ws_bytes)))) {
        char why[512]; /* the allocator's message, before HERD_ERR overwrites it */
        snprintf(why, sizeof why, "%s", herd_last_error());
        scratch_free(s);
        return HERD_ERR(HERD_ERR_NOMEM, "measuring cuDNN's algorithms for conv n=%d c_in=%d "
                        "%dx%d c_out=%d: %s", d->n, d->c_in, d->h_in, d->w_in, d->c_out, why);
    }
    return HERD_OK;
}

static herd_status choose(const herd_conv_desc *d, const descs *ds, const policy *pol,
                          herd_cuda_conv_algos *out, float ms[3])
{
    cudnnHandle_t h = herd_cuda_ctx_get()->cudnn;
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    cudnnConvolutionBwdDataAlgoPerf_t bd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    cudnnConvolutionBwdFilterAlgoPerf_t bf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int nf = 0, nd = 0, nw = 0;
    HERD_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(h, ds->x, ds->w, ds->conv, ds->y,
                                                      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &nf, fwd),
               "forward algorithm heuristics");
    HERD_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                   h, ds->w, ds->y, ds->conv, ds->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &nd,
                   bd),
               "backward data algorithm heuristics");
    HERD_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                   h, ds->x, ds->y, ds->conv, ds->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &nw,
                   bf),
               "backward filter algorithm heuristics");
    bool measured = !pol->heuristic;
    if (measured) {
        size_t ws = 0;
        LARGEST_ALLOWED(pol, fwd, nf, transform_fwd, &ws);
        LARGEST_ALLOWED(pol, bd, nd, transform_bd, &ws);
        LARGEST_ALLOWED(pol, bf, nw, transform_bf, &ws);
        scratch s = {0};
        HERD_TRY(scratch_alloc(d, ws, &s));
        cudnnStatus_t cs = cudnnFindConvolutionForwardAlgorithmEx(
            h, ds->x, s.x, ds->w, s.w, ds->conv, ds->y, s.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
            &nf, fwd, s.ws, ws);
        if (cs == CUDNN_STATUS_SUCCESS)
            cs = cudnnFindConvolutionBackwardDataAlgorithmEx(
                h, ds->w, s.w, ds->y, s.y, ds->conv, ds->x, s.x,
                CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &nd, bd, s.ws, ws);
        if (cs == CUDNN_STATUS_SUCCESS)
            cs = cudnnFindConvolutionBackwardFilterAlgorithmEx(
                h, ds->x, s.x, ds->y, s.y, ds->conv, ds->w, s.w,
                CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &nw, bf, s.ws, ws);
        scratch_free(&s); /* back to the cache, in stream order */
        HERD_CUDNN(cs, "measuring the convolution algorithms (cudnnFind)");
    }
    int i = choose_fwd(pol, fwd, nf, measured), j = choose_bd(pol, bd, nd, measured),
        k = choose_bf(pol, bf, nw, measured);
    if (i < 0)
        return none_allowed(d, pol, "forward");
    if (j < 0)
        return none_allowed(d, pol, "backward-data");
    if (k < 0)
        return none_allowed(d, pol, "backward-filter");
    *out = (herd_cuda_conv_algos){
        .fwd = fwd[i].algo, .bwd_data = bd[j].algo, .bwd_filter = bf[k].algo,
        .fwd_math = fwd[i].mathType, .bwd_data_math = bd[j].mathType,
        .bwd_filter_math = bf[k].mathType};
    if (pol->prec == HERD_PRECISION_FP32) /* fp32 stays FMA whatever cuDNN reports */
        out->fwd_math = out->bwd_data_math = out->bwd_filter_math = CUDNN_FMA_MATH;
    size_t ws = fwd[i].memory > bd[j].memory ? fwd[i].memory : bd[j].memory;
    out->workspace = ws > bf[k].memory ? ws : bf[k].memory;
    ms[0] = fwd[i].time, ms[1] = bd[j].time, ms[2] = bf[k].time;
    return HERD_OK;
}

/* The GPU model and cuDNN version, the shape, the precision and the rules: what a
 * measured choice holds for. */
static void db_key(const herd_conv_desc *d, const policy *pol, char *key, size_t size)
{
    static char gpu[sizeof(((struct cudaDeviceProp *)0)->name)];
    if (!gpu[0]) {
        struct cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, herd_cuda_ctx_get()->device) != cudaSuccess)
            snprintf(prop.name, sizeof prop.name, "unknown");
        snprintf(gpu, sizeof gpu, "%s", prop.name);
        for (char *c = gpu; *c; c++)
            if (*c == ' ' || *c == '\t')
                *c = '_';
    }
    /* "rules2": choices stored before Winograd was barred from wide kernels are not reused. */
    snprintf(key, size, "%.120s cudnn%zu n%d c%d %dx%d o%d k%dx%d s%d p%d %s%s%s rules2", gpu,
             cudnnGetVersion(), d->n, d->c_in, d->h_in, d->w_in, d->c_out, d->kh, d->kw,
             d->stride, d->pad, herd_precision_name(pol->prec), pol->any ? " any" : "",
             pol->exact ? " exact" : "");
}

herd_status herd_cuda_conv_algos_choose(const herd_conv_desc *d, cudnnTensorDescriptor_t x,
                                        cudnnFilterDescriptor_t w,
                                        cudnnConvolutionDescriptor_t conv,
                                        cudnnTensorDescriptor_t y, herd_precision prec,
                                        herd_cuda_conv_algos *out)
{
    policy pol = {.prec = prec, .wide_kernel = d->kh > 3 || d->kw > 3};
    bool log_choice;
    HERD_TRY(env_switch("HERD_CUDNN_ANY_ALGO", &pol.any));
    HERD_TRY(env_switch("HERD_CUDNN_EXACT", &pol.exact));
    HERD_TRY(env_switch("HERD_CUDNN_HEURISTIC", &pol.heuristic));
    HERD_TRY(env_switch("HERD_CUDNN_LOG", &log_choice));
    cudnnMathType_t math = prec == HERD_PRECISION_FP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    HERD_CUDNN(cudnnSetConvolutionMathType(conv, math), "convolution math type");
    cached *hit = lookup(d, &pol);
    if (hit) {
        *out = hit->algos;
        return HERD_OK;
    }
    char key[320];
    db_key(d, &pol, key, sizeof key);
    bool kept = false;
    if (!pol.heuristic)
        HERD_TRY(herd_cuda_conv_db_lookup(key, out, &kept));
    pol.limit = pol.heuristic ? HEURISTIC_WORKSPACE_CAP : herd_cuda_memory_available() / 4;
    if (kept && out->workspace > pol.limit)
        kept = false; /* chosen with more memory free than there is now */
    float ms[3] = {-1, -1, -1};
    if (!kept) {
        HERD_TRY(choose(d, &(descs){.x = x, .y = y, .w = w, .conv = conv}, &pol, out, ms));
        if (!pol.heuristic)
            HERD_TRY(herd_cuda_conv_db_store(key, out));
    }
    /* Find leaves the math type of the last algorithm it tried on the descriptor. */
    HERD_CUDNN(cudnnSetConvolutionMathType(conv, math), "convolution math type");
    if (log_choice)
        herd_log(HERD_LOG_INFO, "cuDNN conv n=%d c_in=%d %dx%d c_out=%d k=%d stride %d (%s, %s): "
                 "forward algorithm %d (%.3f ms), backward data %d (%.3f ms), backward filter %d "
                 "(%.3f ms), workspace %.1f MiB", d->n, d->c_in, d->h_in, d->w_in, d->c_out, d->kh,
                 d->stride, herd_precision_name(prec),
                 pol.heuristic ? "heuristics" : kept ? "measured by an earlier run" : "measured",
                 (int)out->fwd, ms[0], (int)out->bwd_data, ms[1], (int)out->bwd_filter, ms[2],
                 out->workspace / 1048576.0);
    cached *c = malloc(sizeof *c);
    if (!c)
        return HERD_NOMEM(sizeof *c);
    *c = (cached){.shape = *d, .any = pol.any, .exact = pol.exact, .heuristic = pol.heuristic,
                  .prec = prec, .algos = *out, .next = g_cache};
    g_cache = c;
    return HERD_OK;
}
