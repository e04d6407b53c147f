/* The simulated device's memory. Two ranges of address space of the same size are
 * reserved at first use: the device range, which stays PROT_NONE for good, so a host
 * read or write through a device pointer faults at once (a missing memcpy_h2d/d2h
 * fails the test that has it), and its shadow, where a live block's pages are made
 * readable and writable. The ops run the CPU backend on the shadow addresses; a
 * device pointer p is stored at p + delta, so callers' pointer arithmetic (views,
 * offsets into flat buffers) stays valid. Each block is followed by an inaccessible
 * guard page in the shadow too, so a kernel running past a block faults rather than
 * writing into its neighbour. Addresses are handed out in order and reused only once
 * the range is used up (first fit over what was freed), which keeps a stale pointer to
 * a freed block failing for as long as possible. --gpu-memory-limit / --memory-limit
 * count the requested bytes rounded to 64, as the CPU backend does, so a cap means
 * the same on both. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/mem_budget.h"
#include "backend/sim/sim.h"
#include "core/error.h"
#include "core/log.h"

#define RESERVE_MAX ((size_t)16 << 30) /* per range; halved until the system agrees */
#define RESERVE_MIN ((size_t)256 << 20)

typedef struct extent {
    size_t off, len; /* len: pages of the block and its guard page */
} extent;

typedef struct live {
    size_t off, len, bytes; /* bytes: what was asked for */
    uint64_t counted;       /* against the budget */
    int category;
} live;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_init_error[256];
static char *g_dev, *g_shadow;
static size_t g_size, g_page;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t g_top;                    /* addresses below were handed out at least once */
static extent *g_free;                  /* freed extents below g_top, sorted, coalesced */
static size_t g_nfree, g_cap_free;
static live *g_live;                    /* live blocks, sorted by offset */
static size_t g_nlive, g_cap_live;
static uint64_t g_frees;                 /* blocks freed: a graph holding one is stale */
static size_t g_mapped;                 /* shadow pages of live blocks (their len) */
static herd_mem_budget g_budget;        /* held = sum of counted; nothing is cached */
static uint64_t g_by_category[HERD_MEM_CATEGORIES], g_at_peak[HERD_MEM_CATEGORIES];

static void reserve(void)
{
    g_page = (size_t)sysconf(_SC_PAGESIZE);
    for (size_t size = RESERVE_MAX; size >= RESERVE_MIN; size /= 2) {
        void *p = mmap(NULL, 2 * size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        if (p != MAP_FAILED) {
            g_dev = p;
            g_shadow = g_dev + size;
            g_size = size;
            return;
        }
    }
    snprintf(g_init_error, sizeof g_init_error,
             "sim: reserving 2 x %zu MiB of address space for the simulated device failed (%s); "
             "raise the address-space limit (ulimit -v)",
             RESERVE_MIN >> 20, strerror(errno));
}

herd_status herd_sim_mem_init(void)
{
    pthread_once(&g_once, reserve);
    if (g_init_error[0])
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "%s", g_init_error);
    return HERD_OK;
}

bool herd_sim_is_device(const void *p)
{
    const char *c = p;
    return g_dev && c >= g_dev && c < g_dev + g_size;
}

/* Makes room for one more entry of an array. */
static bool grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return true;
    size_t want = *cap ? *cap * 2 : 64;
    void *p = realloc(*arr, want * elem);
    if (!p)
        return false;
    *arr = p;
    *cap = want;
    return true;
}

/* Index of the last live block starting at or before off, or g_nlive if none. */
static size_t live_at(size_t off)
{
    size_t lo = 0, hi = g_nlive; /* first block starting after off */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (g_live[mid].off <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo ? lo - 1 : g_nlive;
}

/* An extent of len bytes of address space, or false. */
static bool take(size_t len, size_t *off)
{
    if (len <= g_size - g_top) {
        *off = g_top;
        g_top += len;
        return true;
    }
    for (size_t i = 0; i < g_nfree; i++)
        if (g_free[i].len >= len) {
            *off = g_free[i].off;
            g_free[i].off += len;
            g_free[i].len -= len;
            if (!g_free[i].len) {
                memmove(&g_free[i], &g_free[i + 1], (g_nfree - i - 1) * sizeof *g_free);
                g_nfree--;
            }
            return true;
        }
    return false;
}

/* Gives an extent back, merged with its neighbours. False only when the list could
 * not grow (the address space is then lost, nothing else). */
static bool give(size_t off, size_t len)
{
    size_t i = 0;
    while (i < g_nfree && g_free[i].off < off)
        i++;
    bool prev = i > 0 && g_free[i - 1].off + g_free[i - 1].len == off;
    bool next = i < g_nfree && off + len == g_free[i].off;
    if (prev && next) {
        g_free[i - 1].len += len + g_free[i].len;
        memmove(&g_free[i], &g_free[i + 1], (g_nfree - i - 1) * sizeof *g_free);
        g_nfree--;
    } else if (prev) {
        g_free[i - 1].len += len;
    } else if (next) {
        g_free[i].off = off;
        g_free[i].len += len;
    } else {
        if (!grow((void **)&g_free, &g_cap_free, g_nfree, sizeof *g_free))
            return false;
        memmove(&g_free[i + 1], &g_free[i], (g_nfree - i) * sizeof *g_free);
        g_free[i] = (extent){off, len};
        g_nfree++;
    }
    return true;
}

static void count(uint64_t bytes, int category, bool obtained)
{
    if (obtained) {
        uint64_t peak = g_budget.peak;
        herd_mem_budget_obtained(&g_budget, bytes);
        g_by_category[category] += bytes;
        if (g_budget.peak > peak)
            memcpy(g_at_peak, g_by_category, sizeof g_at_peak);
    } else {
        herd_mem_budget_returned(&g_budget, bytes);
        g_by_category[category] -= bytes;
    }
}

void *herd_sim_alloc(size_t bytes)
{
    if (herd_sim_mem_init() != HERD_OK ||
        herd_sim_graph_refuse("alloc", "CUDA refuses cudaMalloc while capturing; allocate "
                              "before the capture") != HERD_OK)
        return NULL;
    int category = herd_mem_category_current();
    if (bytes > g_size) {
        HERD_ERR(HERD_ERR_NOMEM, "sim: allocating %zu bytes: more than the simulated device's "
                 "%zu MiB", bytes, g_size >> 20);
        return NULL;
    }
    size_t pages = (bytes + g_page - 1) / g_page * g_page;
    size_t len = (pages ? pages : g_page) + g_page; /* and the guard page */
    uint64_t counted = (bytes + 63) / 64 * 64;
    pthread_mutex_lock(&g_lock);
    size_t off = 0;
    if (herd_mem_budget_check(&g_budget, counted) != HERD_MEM_FITS) {
        herd_mem_budget_error(&g_budget, counted, true, g_size - g_mapped, g_size);
        goto fail;
    }
    if (!grow((void **)&g_live, &g_cap_live, g_nlive, sizeof *g_live)) {
        HERD_NOMEM(sizeof *g_live * g_cap_live * 2);
        goto fail;
    }
    if (!take(len, &off)) {
        herd_mem_budget_error(&g_budget, counted, false, g_size - g_mapped, g_size);
        goto fail;
    }
    /* Fresh pages, and pages given back with MADV_DONTNEED, read as zeros. */
    if (mprotect(g_shadow + off, len - g_page, PROT_READ | PROT_WRITE) != 0) {
        HERD_ERR(HERD_ERR_NOMEM, "sim: mapping %zu bytes of simulated device memory failed: %s",
                 len - g_page, strerror(errno));
        give(off, len);
        goto fail;
    }
    size_t before = live_at(off), i = before == g_nlive ? 0 : before + 1;
    memmove(&g_live[i + 1], &g_live[i], (g_nlive - i) * sizeof *g_live);
    g_live[i] = (live){.off = off, .len = len, .bytes = bytes, .counted = counted,
                       .category = category};
    g_nlive++;
    g_mapped += len;
    count(counted, category, true);
    pthread_mutex_unlock(&g_lock);
    return g_dev + off;
fail:
    pthread_mutex_unlock(&g_lock);
    return NULL;
}

void herd_sim_free(void *p)
{
    if (!p)
        return;
    herd_sim_graph_note_free();
    pthread_mutex_lock(&g_lock);
    size_t off = (size_t)((char *)p - g_dev);
    size_t i = herd_sim_is_device(p) ? live_at(off) : g_nlive;
    if (i == g_nlive || g_live[i].off != off) {
        pthread_mutex_unlock(&g_lock);
        /* free() cannot fail by its contract; a bad free is a caller's bug to surface. */
        herd_log(HERD_LOG_ERROR, "sim: free(%p): not the start of a live simulated-device "
                 "allocation (%s); ignored", p,
                 herd_sim_is_device(p) ? "freed already, or an address inside a block"
                                       : "host memory");
        return;
    }
    live b = g_live[i];
    g_frees++;
    memmove(&g_live[i], &g_live[i + 1], (g_nlive - i - 1) * sizeof *g_live);
    g_nlive--;
    g_mapped -= b.len;
    count(b.counted, b.category, false);
    char *s = g_shadow + b.off;
    /* Inaccessible again, and its pages back to the system (zeros when reused). */
    madvise(s, b.len - g_page, MADV_DONTNEED);
    mprotect(s, b.len - g_page, PROT_NONE);
    give(b.off, b.len);
    pthread_mutex_unlock(&g_lock);
}

herd_status herd_sim_dev(const char *op, const char *arg, const void *p, size_t bytes,
                         void **shadow)
{
    *shadow = NULL;
    if (!p)
        return HERD_OK;
    if (!herd_sim_is_device(p))
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "sim: %s: argument '%s' is host memory, not device memory (a missing "
                        "memcpy_h2d, or a host buffer handed to a device op)", op, arg);
    size_t off = (size_t)((const char *)p - g_dev);
    pthread_mutex_lock(&g_lock);
    size_t i = live_at(off);
    bool in_block = i < g_nlive && off - g_live[i].off < g_live[i].len;
    size_t start = in_block ? off - g_live[i].off : 0, size = in_block ? g_live[i].bytes : 0;
    pthread_mutex_unlock(&g_lock);
    if (!in_block)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "sim: %s: argument '%s' (%p) is not in a live device allocation: freed "
                        "already, or never allocated", op, arg, p);
    if (start > size || bytes > size - start)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "sim: %s: argument '%s' covers %zu bytes from byte %zu of a %zu-byte "
                        "device allocation: it runs past the allocation's end", op, arg, bytes,
                        start, size);
    *shadow = g_shadow + off;
    return herd_sim_graph_array(op, arg, p, bytes);
}

uint64_t herd_sim_frees(void)
{
    pthread_mutex_lock(&g_lock);
    uint64_t n = g_frees;
    pthread_mutex_unlock(&g_lock);
    return n;
}

herd_status herd_sim_host(const char *op, const char *arg, const void *p)
{
    if (herd_sim_is_device(p))
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "sim: %s: argument '%s' is device memory, but the op takes host memory "
                        "there", op, arg);
    if (p)
        return herd_sim_graph_refuse(op, "a host value is read or written when the op runs, "
                                         "which a graph's ops cannot wait for");
    return HERD_OK;
}

herd_status herd_sim_set_memory_limit(uint64_t bytes)
{
    pthread_mutex_lock(&g_lock);
    uint64_t held = g_budget.held;
    bool ok = bytes == 0 || bytes >= held;
    if (ok)
        g_budget.limit = bytes;
    pthread_mutex_unlock(&g_lock);
    if (!ok)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "--gpu-memory-limit %.1f MiB is below the %.1f MiB herd already uses on "
                        "the simulated device; set the limit before creating models, or raise it",
                        bytes / 1048576.0, held / 1048576.0);
    return HERD_OK;
}

void herd_sim_memory_usage(herd_memory_usage *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&g_lock);
    out->current = g_budget.held;
    out->peak = g_budget.peak;
    out->limit = g_budget.limit;
    memcpy(out->peak_by_category, g_at_peak, sizeof g_at_peak);
    pthread_mutex_unlock(&g_lock);
}

void herd_sim_memory_reset_peak(void)
{
    pthread_mutex_lock(&g_lock);
    g_budget.peak = g_budget.held;
    memcpy(g_at_peak, g_by_category, sizeof g_at_peak);
    pthread_mutex_unlock(&g_lock);
}
