/* Caching device allocator. cudaMalloc/cudaFree synchronise the device and cost
 * tens of microseconds, so freed blocks go to a free list per size class and are
 * handed out again; after the first training step every buffer comes from a list.
 * Classes: 512 bytes, then four per power of two (at most 25% slack). Reuse is safe
 * without events because all work runs in order on the backend's one stream.
 * --gpu-memory-limit caps what is held, cached blocks included (mem_budget.c). */
#include <pthread.h>
#include <stdlib.h>

#include "backend/cuda/cuda.h"
#include "backend/mem_budget.h"

#define MIN_BYTES 512
#define NCLASSES 256
#define LIVE_BUCKETS 4096

typedef struct block {
    void *ptr;
    size_t bytes;
    int cls;
    struct block *next;
} block;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static block *g_free[NCLASSES];         /* cached blocks by class */
static block *g_live[LIVE_BUCKETS];     /* handed-out blocks by pointer hash */
static block *g_spare;                  /* unused list nodes */
static herd_mem_budget g_budget;
static uint64_t g_frees;                 /* blocks freed: a graph holding one is stale */

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
            herd_mem_budget_returned(&g_budget, b->bytes);
            b->next = g_spare;
            g_spare = b;
        }
}

/* The driver's view for error messages. */
static void device_memory(uint64_t *free_b, uint64_t *total_b)
{
    size_t f = 0, t = 0;
    cudaMemGetInfo(&f, &t);
    *free_b = f;
    *total_b = t;
}

/* A new block from the driver within the cap; NULL with the error set. Caller holds the lock. */
static block *obtain(size_t cls_bytes, int cls)
{
    uint64_t free_b, total_b;
    herd_mem_verdict v = herd_mem_budget_check(&g_budget, cls_bytes);
    if (v == HERD_MEM_FITS_AFTER_RELEASE) {
        release_cached();
        v = herd_mem_budget_check(&g_budget, cls_bytes);
    }
    if (v != HERD_MEM_FITS) {
        device_memory(&free_b, &total_b);
        herd_mem_budget_error(&g_budget, cls_bytes, true, free_b, total_b);
        return NULL;
    }
    block *b = node();
    if (!b) {
        HERD_NOMEM(sizeof *b);
        return NULL;
    }
    void *p = NULL;
    cudaError_t ce = cudaMalloc(&p, cls_bytes);
    if (ce == cudaErrorMemoryAllocation) {
        cudaGetLastError(); /* clear the error before retrying */
        release_cached();   /* memory may be held in classes this request cannot use */
        ce = cudaMalloc(&p, cls_bytes);
    }
    if (ce != cudaSuccess) {
        cudaGetLastError();
        b->next = g_spare;
        g_spare = b;
        device_memory(&free_b, &total_b);
        if (ce == cudaErrorMemoryAllocation)
            herd_mem_budget_error(&g_budget, cls_bytes, false, free_b, total_b);
        else
            HERD_ERR(HERD_ERR_INTERNAL, "CUDA: allocating %zu bytes failed: %s%s", cls_bytes,
                     cudaGetErrorString(ce), HERD_CUDA_HINT);
        return NULL;
    }
    herd_mem_budget_obtained(&g_budget, cls_bytes);
    b->ptr = p;
    b->bytes = cls_bytes;
    b->cls = cls;
    return b;
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
        herd_mem_budget_handed_out(&g_budget, b->bytes);
    } else if (!(b = obtain(cls_bytes, cls))) {
        pthread_mutex_unlock(&g_lock);
        return NULL;
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
        g_frees++;
        *link = b->next;
        b->next = g_free[b->cls];
        g_free[b->cls] = b;
        herd_mem_budget_cached(&g_budget, b->bytes);
    }
    pthread_mutex_unlock(&g_lock);
    /* A pointer this allocator never returned is ignored rather than passed to
     * cudaFree: freeing foreign memory would corrupt another owner. */
}

uint64_t herd_cuda_frees(void)
{
    pthread_mutex_lock(&g_lock);
    uint64_t n = g_frees;
    pthread_mutex_unlock(&g_lock);
    return n;
}

herd_status herd_cuda_set_memory_limit(uint64_t bytes)
{
    pthread_mutex_lock(&g_lock);
    uint64_t in_use = g_budget.held - g_budget.cached;
    if (bytes && in_use > bytes) {
        pthread_mutex_unlock(&g_lock);
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "--gpu-memory-limit %.1f MiB is below the %.1f MiB herd already uses on "
                        "the GPU; set the limit before creating models, or raise it",
                        bytes / 1048576.0, in_use / 1048576.0);
    }
    g_budget.limit = bytes;
    if (bytes && g_budget.held > bytes)
        release_cached();
    pthread_mutex_unlock(&g_lock);
    return HERD_OK;
}

/* Bytes herd could still take: under --gpu-memory-limit the cap less what is in use,
 * else the driver's free memory plus herd's cached blocks (which it would give back). */
uint64_t herd_cuda_memory_available(void)
{
    uint64_t free_b, total_b;
    device_memory(&free_b, &total_b);
    pthread_mutex_lock(&g_lock);
    uint64_t in_use = g_budget.held - g_budget.cached, avail = free_b + g_budget.cached;
    if (g_budget.limit)
        avail = g_budget.limit > in_use ? g_budget.limit - in_use : 0;
    pthread_mutex_unlock(&g_lock);
    return avail;
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
        /* Grow geometrically (a few calls per run at most), but a large buffer (the
         * convolutions' shared workspace) exactly: doubling GiBs would waste them. */
        size_t want = bytes > ((size_t)64 << 20) ? bytes : bytes * 2;
        if (!(g_scratch[slot] = herd_cuda_alloc(want)))
            return HERD_ERR_NOMEM;
        g_scratch_bytes[slot] = want;
    }
    *p = g_scratch[slot];
    return HERD_OK;
}

void herd_cuda_scratch_release(int slot)
{
    if (slot < 0 || slot >= HERD_CUDA_SCRATCH_COUNT)
        return;
    herd_cuda_free(g_scratch[slot]);
    g_scratch[slot] = NULL;
    g_scratch_bytes[slot] = 0;
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
    for (int s = 0; s < HERD_CUDA_SCRATCH_COUNT; s++)
        herd_cuda_scratch_release(s);
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
