/* When a loop should fork the OpenMP team, for the backends' kernels and the exact sums. */
#ifndef HERD_CORE_PAR_H
#define HERD_CORE_PAR_H

#include <omp.h>
#include <stdbool.h>
#include <stddef.h>

/* Whether a loop over `work` elements runs on the OpenMP team: at least `min` of them to
 * pay for the fork, more than one thread to give it to, and not already inside a region (a
 * nested one runs on one thread). Otherwise the caller runs the loop inline, outside any
 * parallel region: libgomp ends every region with a futex call, even one an if clause keeps
 * on one thread (1 us each; --deterministic resnet20 ran 3,600 regions a step), and an if
 * clause without a modifier switches the loop's simd off too. */
static inline bool herd_par_team(size_t work, size_t min)
{
    return work >= min && omp_get_max_threads() > 1 && !omp_in_parallel();
}

#endif
