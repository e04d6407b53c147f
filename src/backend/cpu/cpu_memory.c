/* The CPU backend's memory: every block herd allocates for a model (parameters,
 * gradients, buffers, optimizer state, activations, the kernels' workspaces) is
 * counted here, by what it is for, against --memory-limit. The block's size sits in
 * a header in front of it (64 bytes, so the block keeps its 64-byte alignment). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu.h"
#include "core/error.h"

#define HEADER 64

typedef struct block_header {
    size_t bytes;
    int category;
} block_header;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t limit, in_use, peak; /* under mu */
static uint64_t by_category[HERD_MEM_CATEGORIES], at_peak[HERD_MEM_CATEGORIES];

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

void *herd_cpu_alloc(size_t bytes)
{
    size_t rounded = (bytes + 63) / 64 * 64;
    int category = herd_mem_category_current();
    pthread_mutex_lock(&mu);
    if (limit && in_use + rounded > limit) {
        uint64_t held = in_use;
        pthread_mutex_unlock(&mu);
        HERD_ERR(HERD_ERR_NOMEM,
                 "memory limit reached: allocating %.1f MiB of %s on top of the %.1f MiB herd holds "
                 "exceeds --memory-limit %.1f MiB; use a smaller batch or fewer micro-batches in "
                 "flight, split the model into more pipeline stages, or raise the limit",
                 mib(rounded), herd_mem_category_name(category), mib(held), mib(limit));
        return NULL;
    }
    in_use += rounded;
    by_category[category] += rounded;
    if (in_use > peak) {
        peak = in_use;
        memcpy(at_peak, by_category, sizeof at_peak);
    }
    pthread_mutex_unlock(&mu);
    char *p = aligned_alloc(64, HEADER + (rounded ? rounded : 64));
    if (!p) {
        pthread_mutex_lock(&mu);
        in_use -= rounded;
        by_category[category] -= rounded;
        pthread_mutex_unlock(&mu);
        HERD_NOMEM(bytes);
        return NULL;
    }
    block_header *h = (block_header *)p;
    h->bytes = rounded;
    h->category = category;
    memset(p + HEADER, 0, rounded);
    return p + HEADER;
}

void herd_cpu_free(void *ptr)
{
    if (!ptr)
        return;
    char *p = (char *)ptr - HEADER;
    block_header *h = (block_header *)p;
    pthread_mutex_lock(&mu);
    in_use -= h->bytes;
    by_category[h->category] -= h->bytes;
    pthread_mutex_unlock(&mu);
    free(p);
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
