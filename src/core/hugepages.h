/* Large blocks on transparent huge pages: the kernel's default THP mode ("madvise") gives
 * huge pages only to memory that asks, and a training step's activations, gradients and
 * workspaces are first touched page by page (lenet5's first step took 8,800 page faults,
 * a third of a short run's CPU on a virtual machine, where each fault exits to the host). */
#ifndef HERD_CORE_HUGEPAGES_H
#define HERD_CORE_HUGEPAGES_H

#include <stdbool.h>
#include <stddef.h>

/* Whether a block of `bytes` goes to herd_huge_map: at least one whole huge page, and not
 * under AddressSanitizer, which puts redzones only around its own allocator's blocks. */
bool herd_huge_worth(size_t bytes);
/* `bytes` of zeroed memory on a 2 MiB boundary, marked for huge pages (where the kernel
 * refuses, it stays on small pages); NULL when the system has no memory. The pages cost
 * nothing until touched, as calloc's large blocks. Give it back with herd_huge_unmap. */
void *herd_huge_map(size_t bytes);
/* For a block written whole as soon as it is made (a data set's images): the bytes of whole
 * huge pages to ask herd_huge_map for, from half a huge page on (up to half a page more
 * memory, for a few page faults instead of one per 4 KiB, about 10 us each on a VM), or 0:
 * malloc it (smaller, or under AddressSanitizer). */
size_t herd_huge_whole(size_t bytes);
void herd_huge_unmap(void *p, size_t bytes);
/* Asks for huge pages under the whole 2 MiB pages inside a block from malloc, before it
 * is first written (a data set's images: 9,600 of lenet5's synthetic ones took 1,840
 * faults, a third of a short run's CPU); the block stays malloc's, freed by free. */
void herd_huge_advise(void *p, size_t bytes);

#endif
