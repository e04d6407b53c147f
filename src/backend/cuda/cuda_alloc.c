/* Caching device allocator. cudaMalloc/cudaFree synchronise the device and cost
 * tens of microseconds, so freed blocks go to a free list per size class and are
 * handed out again; after the first training step every buffer comes from a list.
 * Classes: 512 bytes, then four per power of two (at most 25% slack). Reuse is safe
 * without events because all work runs in order on the backend's one stream. */
#include <pthread.h>
#include <stdlib.h>

#include "backend/cuda/cuda.h"

#define MIN_BYTES 512
#define NCLASSES 256
#define LIVE_BUCKETS 4096

typedef struct block {
    void *ptr;
    int cls;
    struct block *next;
} block;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static block *g_free[NCLASSES];         /* cached blocks by class */
static block *g_live[LIVE_BUCKETS];     /* handed-out blocks by pointer hash */
static block *g_spare;                  /* unused list nodes */

/* Class index and its byte size for a request. */
static int size_class(size_t bytes, size_t *cls_bytes)
{
    if (bytes <= MIN_BYTES) {
        *cls_bytes = MIN_BYTES;
        return 0;
    }
    int k = 63 - __builtin_clzll((unsigned long long)(bytes - 1)); /* 2^k < bytes <= 2^(k+1) */
    size_t step = (size_t)1 << (k - 2);
    size_t q = (bytes + step - 1) / step; /* 5..8 */
    *cls_bytes = q * step;
    return 1 + (k - 9) * 4 + (int)(q - 5);
}

static size_t hash_ptr(const void *p) { return ((uintptr_t)p >> 9) % LIVE_BUCKETS; }

static block *node(void)
{
    block *b = g_spare;
    if (b) {
        g_spare = b->next;
        return b;
    }
    return malloc(sizeof *b);
}

/* Returns every cached block to the driver (on allocation failure: memory may be
 * held in classes this request cannot use). Caller holds the lock. */
static void release_cached(void)
{
    for (int c = 0; c < NCLASSES; c++)
        while (g_free[c]) {
            block *b = g_free[c];
            g_free[c] = b->next;
            cudaFree(b->ptr);
            b->next = g_spare;
            g_spare = b;
        }
}

void *herd_cuda_alloc(size_t bytes)
{
    size_t cls_bytes;
    int cls = size_class(bytes ? bytes : 1, &cls_bytes);
    if (cls < 0 || cls >= NCLASSES) {
        HERD_ERR(HERD_ERR_INVALID_ARG, "cuda alloc: %zu bytes is beyond any GPU", bytes);
        return NULL;
    }
    pthread_mutex_lock(&g_lock);
    block *b = g_free[cls];
    if (b) {
        g_free[cls] = b->next;
    } else {
        b = node();
        void *p = NULL;
        cudaError_t ce = b ? cudaMalloc(&p, cls_bytes) : cudaErrorMemoryAllocation;
        if (ce == cudaErrorMemoryAllocation && b) {
            cudaGetLastError(); /* clear the sticky-free error before retrying */
            release_cached();
            ce = cudaMalloc(&p, cls_bytes);
        }
        if (ce != cudaSuccess) {
            cudaGetLastError();
            size_t free_b = 0, total_b = 0;
            cudaMemGetInfo(&free_b, &total_b);
            if (b) {
                b->next = g_spare;
                g_spare = b;
            }
            pthread_mutex_unlock(&g_lock);
            HERD_ERR(HERD_ERR_NOMEM,
                     "out of GPU memory allocating %zu bytes (%s; %zu of %zu MiB free); try a "
                     "smaller batch size",
                     cls_bytes, cudaGetErrorString(ce), free_b >> 20, total_b >> 20);
            return NULL;
        }
        b->ptr = p;
        b->cls = cls;
    }
    size_t h = hash_ptr(b->ptr);
    b->next = g_live[h];
    g_live[h] = b;
    void *p = b->ptr;
    pthread_mutex_unlock(&g_lock);
    /* The table promises zeroed memory; ordered on the stream like every op. */
    if (cudaMemsetAsync(p, 0, bytes ? bytes : 1, herd_cuda_ctx_get()->stream) != cudaSuccess) {
        HERD_ERR(HERD_ERR_INTERNAL, "cuda alloc: clearing %zu bytes failed: %s", bytes,
                 cudaGetErrorString(cudaGetLastError()));
        herd_cuda_free(p);
        return NULL;
    }
    return p;
}

void herd_cuda_free(void *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&g_lock);
    block **link = &g_live[hash_ptr(p)];
    while (*link && (*link)->ptr != p)
        link = &(*link)->next;
    block *b = *link;
    if (b) {
        *link = b->next;
        b->next = g_free[b->cls];
        g_free[b->cls] = b;
    }
    pthread_mutex_unlock(&g_lock);
    /* A pointer this allocator never returned is ignored rather than passed to
     * cudaFree: freeing foreign memory would corrupt another owner. */
}

/* ---- backend-owned scratch */

static void *g_scratch[HERD_CUDA_SCRATCH_COUNT];
static size_t g_scratch_bytes[HERD_CUDA_SCRATCH_COUNT];
static void *g_host;
static size_t g_host_bytes;

herd_status herd_cuda_scratch(int slot, size_t bytes, void **p)
{
    if (slot < 0 || slot >= HERD_CUDA_SCRATCH_COUNT)
        return HERD_ERR(HERD_ERR_INTERNAL, "cuda scratch: bad slot %d", slot);
    if (bytes > g_scratch_bytes[slot]) {
        herd_cuda_free(g_scratch[slot]);
        g_scratch[slot] = NULL;
        g_scratch_bytes[slot] = 0;
        size_t want = bytes * 2; /* grow geometrically: a few calls per run at most */
        if (!(g_scratch[slot] = herd_cuda_alloc(want)))
            return HERD_ERR_NOMEM;
        g_scratch_bytes[slot] = want;
    }
    *p = g_scratch[slot];
    return HERD_OK;
}

herd_status herd_cuda_host_scratch(size_t bytes, void **p)
{
    if (bytes > g_host_bytes) {
        /* Earlier async copies into the old buffer must finish before it goes. */
        HERD_CUDA(cudaStreamSynchronize(herd_cuda_ctx_get()->stream), "stream synchronise");
        if (g_host)
            cudaFreeHost(g_host);
        g_host = NULL;
        g_host_bytes = 0;
        size_t want = bytes < 4096 ? 4096 : bytes;
        HERD_CUDA(cudaMallocHost(&g_host, want), "pinned host allocation");
        g_host_bytes = want;
    }
    *p = g_host;
    return HERD_OK;
}

void herd_cuda_alloc_release(void)
{
    for (int s = 0; s < HERD_CUDA_SCRATCH_COUNT; s++) {
        herd_cuda_free(g_scratch[s]);
        g_scratch[s] = NULL;
        g_scratch_bytes[s] = 0;
    }
    if (g_host)
        cudaFreeHost(g_host);
    g_host = NULL;
    g_host_bytes = 0;
    pthread_mutex_lock(&g_lock);
    release_cached();
    while (g_spare) {
        block *b = g_spare;
        g_spare = b->next;
        free(b);
    }
    pthread_mutex_unlock(&g_lock);
}
