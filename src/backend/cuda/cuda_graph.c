/* CUDA graphs (backend.h's graph_capture / graph_launch / graph_free): a region of ops
 * captured from the backend's stream once and replayed by one launch, so a step of
 * many small kernels costs one launch instead of one per kernel (the host, not the
 * GPU, bounds such steps). A region must not wait for the stream, copy to the host or
 * allocate: CUDA refuses those while capturing (this thread's mode), and the capture
 * fails with its message. Checks an op makes on data (embedding's token ids) leave
 * their verdict in a device word during a capture, read by the launch. */
#include <stdlib.h>

#include "backend/cuda/cuda.h"

#define MAX_CHECKS 4

typedef struct deferred_check {
    const float *tokens;
    int rows, t, vocab;
} deferred_check;

struct herd_graph {
    cudaGraphExec_t exec;
    uint64_t frees; /* the allocator's frees at the capture */
    int n_checks;
    deferred_check checks[MAX_CHECKS];
};

/* The graph being captured on this thread, and the check words (device ints every
 * graph shares: launches read theirs before the next one starts). */
static _Thread_local herd_graph *g_capturing;
static int *g_words;
static int *g_words_host;

bool herd_cuda_capturing(void) { return g_capturing != NULL; }

herd_status herd_cuda_graph_defer_check(const float *tokens, int rows, int t, int vocab,
                                        int **word)
{
    herd_graph *g = g_capturing;
    if (!g)
        return HERD_ERR(HERD_ERR_INTERNAL, "cuda graph: a deferred check outside a capture");
    if (g->n_checks == MAX_CHECKS)
        return HERD_ERR(HERD_ERR_UNSUPPORTED,
                        "cuda graph: more than %d token checks in one captured region (one per "
                        "embedding layer); run without --cuda-graphs", MAX_CHECKS);
    g->checks[g->n_checks] =
        (deferred_check){.tokens = tokens, .rows = rows, .t = t, .vocab = vocab};
    *word = g_words + g->n_checks++;
    return HERD_OK;
}

static herd_status check_words(void)
{
    if (g_words)
        return HERD_OK;
    HERD_CUDA(cudaMalloc((void **)&g_words, MAX_CHECKS * sizeof(int)), "graph check words");
    HERD_CUDA(cudaMallocHost((void **)&g_words_host, MAX_CHECKS * sizeof(int)),
              "graph check words (host)");
    return HERD_OK;
}

herd_status herd_cuda_graph_capture(herd_graph_region region, void *user, herd_graph **out)
{
    *out = NULL;
    if (g_capturing)
        return HERD_ERR(HERD_ERR_INTERNAL, "cuda graph: a capture inside a capture");
    HERD_TRY(check_words());
    herd_graph *g = calloc(1, sizeof *g);
    if (!g)
        return HERD_NOMEM(sizeof *g);
    cudaStream_t st = herd_cuda_ctx_get()->stream;
    g->frees = herd_cuda_frees();
    cudaError_t ce = cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
    if (ce != cudaSuccess) {
        free(g);
        HERD_CUDA(ce, "beginning a graph capture");
    }
    g_capturing = g;
    herd_status st_region = region(user);
    g_capturing = NULL;
    cudaGraph_t graph = NULL;
    /* Always ended, so the stream leaves capture mode whatever the region did. */
    ce = cudaStreamEndCapture(st, &graph);
    if (st_region == HERD_OK && ce == cudaSuccess)
        ce = cudaGraphInstantiate(&g->exec, graph, 0);
    if (graph)
        cudaGraphDestroy(graph);
    if (st_region != HERD_OK || ce != cudaSuccess) {
        free(g);
        if (st_region != HERD_OK)
            return st_region;
        return HERD_ERR(HERD_ERR_INTERNAL,
                        "CUDA: capturing a graph failed: %s (%s); an op in the region waited for "
                        "the device, copied to the host or allocated; run without --cuda-graphs",
                        cudaGetErrorName(ce), cudaGetErrorString(ce));
    }
    *out = g;
    return HERD_OK;
}

herd_status herd_cuda_graph_launch(herd_graph *g, bool *stale)
{
    *stale = g->frees != herd_cuda_frees();
    if (*stale)
        return HERD_OK;
    cudaStream_t st = herd_cuda_ctx_get()->stream;
    HERD_CUDA(cudaGraphLaunch(g->exec, st), "launching a graph");
    if (!g->n_checks)
        return HERD_OK;
    HERD_CUDA(cudaMemcpyAsync(g_words_host, g_words, (size_t)g->n_checks * sizeof(int),
                              cudaMemcpyDeviceToHost, st),
              "reading a graph's token checks");
    HERD_CUDA(cudaStreamSynchronize(st), "a graph's token checks");
    for (int i = 0; i < g->n_checks; i++) {
        const deferred_check *c = &g->checks[i];
        if (g_words_host[i] < c->rows)
            return herd_cuda_token_error(c->tokens, g_words_host[i], c->t, c->vocab);
    }
    return HERD_OK;
}

void herd_cuda_graph_free(herd_graph *g)
{
    if (!g)
        return;
    cudaGraphExecDestroy(g->exec);
    free(g);
}

void herd_cuda_graph_release(void)
{
    cudaFree(g_words);
    cudaFreeHost(g_words_host);
    g_words = NULL;
    g_words_host = NULL;
}
