#include "core/hugepages.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/sanitizer.h"

#define HUGE_PAGE ((size_t)2 << 20)

bool herd_huge_worth(size_t bytes) { return !HERD_ASAN && bytes >= HUGE_PAGE; }

size_t herd_huge_whole(size_t bytes)
{
    size_t whole = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    return bytes >= HUGE_PAGE / 2 && whole >= bytes && herd_huge_worth(whole) ? whole : 0;
}

static size_t mapped_length(size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + page - 1) / page * page;
}

void *herd_huge_map(size_t bytes)
{
    size_t len = mapped_length(bytes);
    if (len < bytes || len > SIZE_MAX - HUGE_PAGE)
        return NULL;
    /* A huge page's worth more, to start on its boundary; the ends go back at once. */
    size_t span = len + HUGE_PAGE;
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *start = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE);
    size_t head = (size_t)(start - raw), tail = span - head - len;
    if (head)
        munmap(raw, head);
    if (tail)
        munmap(start + len, tail);
    /* Refused where THP is off ("never") or not built in: small pages, as calloc's. */
    (void)madvise(start, len, MADV_HUGEPAGE);
    return start;
}

void herd_huge_unmap(void *p, size_t bytes)
{
    if (p)
        munmap(p, mapped_length(bytes));
}

void herd_huge_advise(void *p, size_t bytes)
{
    if (!p || !herd_huge_worth(bytes))
        return;
    uintptr_t start = ((uintptr_t)p + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    uintptr_t end = ((uintptr_t)p + bytes) / HUGE_PAGE * HUGE_PAGE;
    if (end > start) /* refused where THP is off: small pages, as before */
        (void)madvise((void *)start, end - start, MADV_HUGEPAGE);
}
