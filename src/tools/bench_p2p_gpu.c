/*
 * GPU-to-GPU copies in the manner of CUDA's p2pBandwidthLatencyTest: cudaMemcpyPeer
 * between every pair of GPUs this process sees, with peer access enabled where the
 * hardware allows (NVLink or PCIe peer writes) or disabled (the driver stages the
 * copy through host memory). The diagonal is a copy within one GPU.
 */
#include <stdio.h>

#include "herd_config.h"
#include "core/error.h"
#include "tools/bench_internal.h"

#if !HERD_HAVE_CUDA

static herd_status no_cuda(void)
{
    return HERD_ERR(HERD_ERR_UNSUPPORTED,
                    "herd was built without CUDA; rebuild with the CUDA toolkit (cmake -DHERD_CUDA=ON) "
                    "to measure GPU links");
}

herd_status bench_p2p_gpu_count(int *count, char *why, size_t cap)
{
    *count = 0;
    snprintf(why, cap, "herd was built without CUDA");
    return no_cuda();
}

herd_status bench_p2p_gpus(const bench_p2p_config *cfg, bool peer_access, bench_p2p_matrices *out)
{
    (void)cfg, (void)peer_access, (void)out;
    return no_cuda();
}

herd_status bench_p2p_gpu_can_access(int i, int j, bool *yes)
{
    (void)i, (void)j;
    *yes = false;
    return no_cuda();
}

#else

#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>

#include "backend/cuda/cuda.h"

herd_status bench_p2p_gpu_count(int *count, char *why, size_t cap)
{
    *count = 0;
    cudaError_t ce = cudaGetDeviceCount(count);
    if (ce != cudaSuccess) { /* no driver or no device: nothing visible to measure */
        *count = 0;
        snprintf(why, cap, "%s", cudaGetErrorString(ce));
        cudaGetLastError(); /* clear it, so later CUDA calls do not report it again */
    } else if (*count == 0) {
        snprintf(why, cap, "0 devices visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
    }
    return HERD_OK;
}

herd_status bench_p2p_gpu_can_access(int i, int j, bool *yes)
{
    int can = 0;
    *yes = false;
    if (i != j)
        HERD_CUDA(cudaDeviceCanAccessPeer(&can, i, j), "querying peer access");
    *yes = i == j || can;
    return HERD_OK;
}

typedef struct gpu {
    void *src, *dst;
    cudaStream_t stream;
    cudaEvent_t start, stop;
} gpu;

static herd_status gpu_open(int d, size_t bytes, gpu *g)
{
    HERD_CUDA(cudaSetDevice(d), "selecting a GPU");
    HERD_CUDA(cudaMalloc(&g->src, bytes), "allocating a copy source");
    HERD_CUDA(cudaMalloc(&g->dst, bytes), "allocating a copy destination");
    HERD_CUDA(cudaMemset(g->src, 1, bytes), "filling a copy source");
    HERD_CUDA(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), "creating a stream");
    HERD_CUDA(cudaEventCreate(&g->start), "creating an event");
    HERD_CUDA(cudaEventCreate(&g->stop), "creating an event");
    return HERD_OK;
}

static void gpu_close(int d, gpu *g)
{
    cudaSetDevice(d);
    if (g->src)
        cudaFree(g->src);
    if (g->dst)
        cudaFree(g->dst);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    if (g->start)
        cudaEventDestroy(g->start);
    if (g->stop)
        cudaEventDestroy(g->stop);
}

/* Peer access both ways between i and j, on or off; "already" is not an error. */
static herd_status set_peer(int i, int j, bool on)
{
    for (int k = 0; k < 2; k++) {
        int from = k ? j : i, to = k ? i : j;
        HERD_CUDA(cudaSetDevice(from), "selecting a GPU");
        cudaError_t ce = on ? cudaDeviceEnablePeerAccess(to, 0) : cudaDeviceDisablePeerAccess(to);
        if (ce == cudaErrorPeerAccessAlreadyEnabled || ce == cudaErrorPeerAccessNotEnabled)
            cudaGetLastError();
        else if (ce != cudaSuccess)
            return HERD_ERR(HERD_ERR_INTERNAL, "%s peer access from GPU %d to GPU %d failed: %s",
                            on ? "enabling" : "disabling", from, to, cudaGetErrorString(ce));
    }
    return HERD_OK;
}

/* Milliseconds for `reps` copies of `bytes` from GPU i to GPU j, and at the same
 * time from j to i when both_ways (j's stream starts with i's start event and i's
 * stop waits for j's). */
static herd_status time_copies(gpu *g, int i, int j, size_t bytes, int reps, bool both_ways,
                               float *ms)
{
    HERD_CUDA(cudaSetDevice(i), "selecting a GPU");
    HERD_CUDA(cudaEventRecord(g[i].start, g[i].stream), "recording the start event");
    for (int r = 0; r < reps; r++)
        HERD_CUDA(cudaMemcpyPeerAsync(g[j].dst, j, g[i].src, i, bytes, g[i].stream), "a peer copy");
    if (both_ways) {
        HERD_CUDA(cudaSetDevice(j), "selecting a GPU");
        HERD_CUDA(cudaStreamWaitEvent(g[j].stream, g[i].start, 0), "ordering the return copies");
        for (int r = 0; r < reps; r++)
            HERD_CUDA(cudaMemcpyPeerAsync(g[i].dst, i, g[j].src, j, bytes, g[j].stream),
                      "a peer copy");
        HERD_CUDA(cudaEventRecord(g[j].stop, g[j].stream), "recording the stop event");
        HERD_CUDA(cudaSetDevice(i), "selecting a GPU");
        HERD_CUDA(cudaStreamWaitEvent(g[i].stream, g[j].stop, 0), "waiting for the return copies");
    }
    HERD_CUDA(cudaEventRecord(g[i].stop, g[i].stream), "recording the stop event");
    HERD_CUDA(cudaEventSynchronize(g[i].stop), "waiting for the copies");
    HERD_CUDA(cudaEventElapsedTime(ms, g[i].start, g[i].stop), "reading the copy time");
    return HERD_OK;
}

static herd_status measure_pair(gpu *g, int i, int j, const bench_p2p_config *cfg,
                                bench_p2p_matrices *m)
{
    int n = m->n;
    float ms = 0;
    HERD_TRY(time_copies(g, i, j, cfg->bw_bytes, 1, i != j, &ms)); /* warm-up */
    HERD_TRY(time_copies(g, i, j, cfg->bw_bytes, cfg->bw_reps, false, &ms));
    m->uni_gbps[i * n + j] = (double)cfg->bw_bytes * cfg->bw_reps / (1e-3 * ms) / 1e9;
    if (i != j) {
        HERD_TRY(time_copies(g, i, j, cfg->bw_bytes, cfg->bw_reps, true, &ms));
        m->bi_gbps[i * n + j] = 2.0 * cfg->bw_bytes * cfg->bw_reps / (1e-3 * ms) / 1e9;
    }
    HERD_TRY(time_copies(g, i, j, cfg->lat_bytes, cfg->lat_reps, false, &ms));
    m->lat_us[i * n + j] = 1e3 * ms / cfg->lat_reps;
    return HERD_OK;
}

herd_status bench_p2p_gpus(const bench_p2p_config *cfg, bool peer_access, bench_p2p_matrices *out)
{
    int n = 0;
    char why[160];
    HERD_TRY(bench_p2p_gpu_count(&n, why, sizeof why));
    if (n == 0)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "no GPU is visible: %s", why);
    size_t bytes = cfg->bw_bytes > cfg->lat_bytes ? cfg->bw_bytes : cfg->lat_bytes;
    gpu *g = herd_xcalloc((size_t)n, sizeof *g);
    if (!g)
        return HERD_ERR_NOMEM;
    herd_status st = bench_p2p_matrices_alloc(n, out);
    for (int d = 0; st == HERD_OK && d < n; d++)
        st = gpu_open(d, bytes, &g[d]);
    for (int i = 0; st == HERD_OK && i < n; i++)
        for (int j = 0; st == HERD_OK && j < n; j++) {
            bool can = false;
            st = bench_p2p_gpu_can_access(i, j, &can);
            bool peer = peer_access && can && i != j;
            if (st == HERD_OK && peer)
                st = set_peer(i, j, true);
            if (st == HERD_OK)
                st = measure_pair(g, i, j, cfg, out);
            if (peer) /* the next pair starts from peer access off */
                st = st == HERD_OK ? set_peer(i, j, false) : st;
        }
    for (int i = 0; st == HERD_OK && i < n; i++)
        out->bi_gbps[i * n + i] = NAN; /* a GPU with itself has no two directions */
    for (int d = 0; d < n; d++)
        gpu_close(d, &g[d]);
    free(g);
    if (st != HERD_OK)
        bench_p2p_matrices_free(out);
    return st;
}

#endif
