/* Accounting of a device allocator's memory against a cap (--gpu-memory-limit),
 * kept apart from CUDA calls so the rules are tested on any machine. "Held" is
 * everything the allocator got from the driver: buffers in use and cached ones. */
#ifndef HERD_BACKEND_MEM_BUDGET_H
#define HERD_BACKEND_MEM_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

#include "herd/herd.h"

typedef struct herd_mem_budget {
    uint64_t limit;  /* 0 = no cap */
    uint64_t held;   /* in use + cached */
    uint64_t cached; /* held but free for reuse (can be given back) */
    uint64_t peak;   /* largest `held` so far */
} herd_mem_budget;

typedef enum {
    HERD_MEM_FITS,              /* a new block of that size stays within the cap */
    HERD_MEM_FITS_AFTER_RELEASE, /* only once the cached blocks are given back */
    HERD_MEM_OVER,              /* beyond the cap even with nothing cached */
} herd_mem_verdict;

herd_mem_verdict herd_mem_budget_check(const herd_mem_budget *b, uint64_t bytes);
/* A block got from the driver / given back to it. */
void herd_mem_budget_obtained(herd_mem_budget *b, uint64_t bytes);
void herd_mem_budget_returned(herd_mem_budget *b, uint64_t bytes);
/* A held block leaves the cache for a caller / comes back to the cache. */
void herd_mem_budget_handed_out(herd_mem_budget *b, uint64_t bytes);
void herd_mem_budget_cached(herd_mem_budget *b, uint64_t bytes);

/* HERD_ERR_NOMEM naming the request, what herd holds, the cap (when over_limit: the
 * cap refused it; otherwise the driver did) and the device's free and total memory,
 * with what to try. */
herd_status herd_mem_budget_error(const herd_mem_budget *b, uint64_t bytes, bool over_limit,
                                  uint64_t device_free, uint64_t device_total);

#endif
