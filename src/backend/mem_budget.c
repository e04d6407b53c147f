#include "backend/mem_budget.h"

#include <stdio.h>

#include "core/error.h"

herd_mem_verdict herd_mem_budget_check(const herd_mem_budget *b, uint64_t bytes)
{
    if (b->limit == 0 || (bytes <= b->limit && b->held <= b->limit - bytes))
        return HERD_MEM_FITS;
    uint64_t in_use = b->held - b->cached;
    if (bytes <= b->limit && in_use <= b->limit - bytes)
        return HERD_MEM_FITS_AFTER_RELEASE;
    return HERD_MEM_OVER;
}

void herd_mem_budget_obtained(herd_mem_budget *b, uint64_t bytes)
{
    b->held += bytes;
    if (b->held > b->peak)
        b->peak = b->held;
}

void herd_mem_budget_returned(herd_mem_budget *b, uint64_t bytes)
{
    b->held -= bytes < b->held ? bytes : b->held;
    b->cached -= bytes < b->cached ? bytes : b->cached;
}

void herd_mem_budget_handed_out(herd_mem_budget *b, uint64_t bytes)
{
    b->cached -= bytes < b->cached ? bytes : b->cached;
}

void herd_mem_budget_cached(herd_mem_budget *b, uint64_t bytes) { b->cached += bytes; }

static double mib(uint64_t bytes) { return (double)bytes / 1048576.0; }

herd_status herd_mem_budget_error(const herd_mem_budget *b, uint64_t bytes, bool over_limit,
                                  uint64_t device_free, uint64_t device_total)
{
    if (over_limit)
        return HERD_ERR(HERD_ERR_NOMEM,
                        "GPU memory limit reached: allocating %.1f MiB on top of the %.1f MiB "
                        "herd holds in use exceeds --gpu-memory-limit %.1f MiB (the GPU has "
                        "%.1f of %.1f MiB free); use a smaller batch size or --recompute, or "
                        "raise the limit",
                        mib(bytes), mib(b->held - b->cached), mib(b->limit), mib(device_free),
                        mib(device_total));
    char cap[48] = "no --gpu-memory-limit";
    if (b->limit)
        snprintf(cap, sizeof cap, "--gpu-memory-limit %.1f MiB", mib(b->limit));
    return HERD_ERR(HERD_ERR_NOMEM,
                    "out of GPU memory allocating %.1f MiB (herd holds %.1f MiB in use, %s; the "
                    "GPU has %.1f of %.1f MiB free); use a smaller batch size or --recompute",
                    mib(bytes), mib(b->held - b->cached), cap, mib(device_free),
                    mib(device_total));
}
