/* The CPU backend's memory: every block herd allocates for a model (parameters,
 * gradients, buffers, optimizer state, activations, the kernels' workspaces) is
 * counted here, by what it is for, against --memory-limit. The block's size sits in
 * a header in front of it (64 bytes, so the block keeps its 64-byte alignment). Blocks
 * come zeroed from calloc, which maps large ones fresh from the kernel without writing
 * them: a workspace sized for the largest kernel costs no page until a kernel uses it
 * (a memset here showed in a perf sample of make test: 2% of the CPU, and more in the
 * page faults it took). Blocks of 2 MiB and more are mapped on a 2 MiB boundary and
 * marked for transparent huge pages, which the kernel's default mode ("madvise") gives
 * only to memory that asks: one fault per 2 MiB instead of 512, and fewer TLB misses
 * (core/hugepages.h). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu.h"
#include "core/error.h"
#include "core/hugepages.h"

#define HEADER 64

typedef struct block_header {
    size_t bytes;
    int category;
    void *raw;     /* what calloc or herd_huge_map gave */
    size_t mapped; /* herd_huge_map's length; 0: from calloc */
} block_header;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t limit, in_use, peak; /* under mu */
static uint64_t by_category[HERD_MEM_CATEGORIES], at_peak[HERD_MEM_CATEGORIES];

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

static void release(void *raw, size_t mapped)
{
    if (mapped)
        herd_huge_unmap(raw, mapped);
    else
        free(raw);
}

/* Whether `bytes` more stay within the cap; if not, the refusal. Caller holds mu. */
static bool fits(uint64_t bytes, int category)
{
    if (!limit || (bytes <= limit && in_use <= limit - bytes))
        return true;
    /* Activations a quarter or more of what it would hold: --recompute is worth naming. */
    uint64_t acts = by_category[HERD_MEM_ACTIVATIONS] + (category == HERD_MEM_ACTIVATIONS ? bytes : 0);
    bool name_recompute = acts >= (in_use + bytes) / 4;
    HERD_ERR(HERD_ERR_NOMEM,
             "memory limit reached: allocating %.1f MiB of %s on top of the %.1f MiB herd holds "
             "exceeds --memory-limit %.1f MiB; %suse a smaller batch or fewer micro-batches in "
             "flight, split the model into more pipeline stages, or raise the limit",
             mib(bytes), herd_mem_category_name(category), mib(in_use), mib(limit),
             name_recompute ? "hold fewer activations with --recompute, " : "");
    return false;
}

/* Counts `bytes` of `category` when they stay within the cap (else fits says why). */
static bool count_if_fits(uint64_t bytes, int category)
{
    pthread_mutex_lock(&mu);
    bool ok = fits(bytes, category);
    if (ok) {
        in_use += bytes;
        by_category[category] += bytes;
        if (in_use > peak) {
            peak = in_use;
            memcpy(at_peak, by_category, sizeof at_peak);
        }
    }
    pthread_mutex_unlock(&mu);
    return ok;
}

void *herd_cpu_alloc(size_t bytes)
{
    int category = herd_mem_category_current();
    if (bytes > SIZE_MAX - 3 * HEADER) { /* the rounding below would wrap */
        HERD_NOMEM(bytes);
        return NULL;
    }
    size_t rounded = (bytes + 63) / 64 * 64;
    /* Refused before it costs anything, and counted only once it exists, so a block the
     * system could not give never shows in the peak; the cap is checked again then,
     * since other threads may have allocated meanwhile. */
    pthread_mutex_lock(&mu);
    bool ok = fits(rounded, category);
    pthread_mutex_unlock(&mu);
    if (!ok)
        return NULL;
    /* One header and up to 63 bytes more, to put the block on a 64-byte boundary. */
    size_t mapped = herd_huge_worth(HEADER + rounded) ? HEADER + rounded : 0;
    char *raw = mapped ? herd_huge_map(mapped) : calloc(1, 2 * HEADER + (rounded ? rounded : 64));
    if (!raw) {
        pthread_mutex_lock(&mu);
        uint64_t held = in_use;
        pthread_mutex_unlock(&mu);
        HERD_ERR(HERD_ERR_NOMEM,
                 "out of memory allocating %.1f MiB of %s (herd holds %.1f MiB); use a smaller "
                 "batch, split the model into pipeline stages, or add memory",
                 mib(rounded), herd_mem_category_name(category), mib(held));
        return NULL;
    }
    if (!count_if_fits(rounded, category)) {
        release(raw, mapped);
        return NULL;
    }
    char *block = (char *)(((uintptr_t)raw + HEADER + 63) / 64 * 64);
    block_header *h = (block_header *)(block - HEADER);
    h->bytes = rounded;
    h->category = category;
    h->raw = raw;
    h->mapped = mapped;
    return block;
}

void herd_cpu_free(void *ptr)
{
    if (!ptr)
        return;
    block_header *h = (block_header *)((char *)ptr - HEADER);
    pthread_mutex_lock(&mu);
    in_use -= h->bytes;
    by_category[h->category] -= h->bytes;
    pthread_mutex_unlock(&mu);
    release(h->raw, h->mapped);
}

herd_status herd_host_memory_hold(uint64_t bytes, herd_mem_category c)
{
    return count_if_fits(bytes, (int)c) ? HERD_OK : HERD_ERR_NOMEM; /* fits said why */
}

void herd_host_memory_release(uint64_t bytes, herd_mem_category c)
{
    pthread_mutex_lock(&mu);
    in_use -= bytes < in_use ? bytes : in_use;
    by_category[c] -= bytes < by_category[c] ? bytes : by_category[c];
    pthread_mutex_unlock(&mu);
}

herd_status herd_cpu_set_memory_limit(uint64_t bytes)
{
    pthread_mutex_lock(&mu);
    uint64_t held = in_use;
    bool ok = bytes == 0 || bytes >= held;
    if (ok)
        limit = bytes;
    pthread_mutex_unlock(&mu);
    if (!ok)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "--memory-limit %.1f MiB is below the %.1f MiB herd already holds",
                        mib(bytes), mib(held));
    return HERD_OK;
}

void herd_cpu_memory_usage(herd_memory_usage *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&mu);
    out->current = in_use;
    out->peak = peak;
    out->limit = limit;
    for (int c = 0; c < HERD_MEM_CATEGORIES; c++)
        out->peak_by_category[c] = at_peak[c];
    pthread_mutex_unlock(&mu);
}

void herd_cpu_memory_reset_peak(void)
{
    pthread_mutex_lock(&mu);
    peak = in_use;
    memcpy(at_peak, by_category, sizeof at_peak);
    pthread_mutex_unlock(&mu);
}

/* Thread buffers: a key per kind, whose destructor frees the thread's block at its end. */
typedef struct thread_buffer {
    void *block;
    size_t bytes;
} thread_buffer;
static pthread_key_t buffer_keys[HERD_CPU_THREAD_BUFFERS];
static pthread_once_t buffer_keys_once = PTHREAD_ONCE_INIT;
static bool buffer_keys_made;

static void thread_buffer_free(void *v)
{
    thread_buffer *b = v;
    herd_cpu_free(b->block);
    free(b);
}

static void make_buffer_keys(void)
{
    bool made = true;
    for (int k = 0; k < HERD_CPU_THREAD_BUFFERS; k++)
        made &= pthread_key_create(&buffer_keys[k], thread_buffer_free) == 0;
    buffer_keys_made = made;
}

void *herd_cpu_thread_buffer(herd_cpu_thread_buffer_kind kind, size_t bytes)
{
    pthread_once(&buffer_keys_once, make_buffer_keys);
    if (!buffer_keys_made) {
        HERD_ERR(HERD_ERR_INTERNAL, "pthread_key_create failed: no thread buffers");
        return NULL;
    }
    thread_buffer *b = pthread_getspecific(buffer_keys[kind]);
    if (!b) {
        if (!(b = calloc(1, sizeof *b)) || pthread_setspecific(buffer_keys[kind], b) != 0) {
            free(b);
            HERD_NOMEM(sizeof *b);
            return NULL;
        }
    }
    if (bytes > b->bytes) {
        herd_cpu_free(b->block);
        b->block = herd_cpu_alloc(bytes);
        b->bytes = b->block ? bytes : 0;
    }
    return b->block;
}
