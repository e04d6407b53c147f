/* Where a float array first holds inf or NaN: blocks are or-reduced over the exponent
 * bits first (a loop compilers vectorise), so a clean array costs one pass. */
#ifndef HERD_CORE_FINITE_H
#define HERD_CORE_FINITE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The index of x's first non-finite value, or n when all are finite. */
static inline size_t herd_first_nonfinite(const float *x, size_t n)
{
    enum { BLOCK = 4096 };
    for (size_t lo = 0; lo < n; lo += BLOCK) {
        size_t hi = n - lo < BLOCK ? n : lo + BLOCK;
        uint32_t all_exp = 0; /* an all-ones exponent is Inf or NaN */
        for (size_t i = lo; i < hi; i++) {
            uint32_t u;
            memcpy(&u, &x[i], sizeof u);
            all_exp |= (u & 0x7f800000u) == 0x7f800000u;
        }
        if (!all_exp)
            continue;
        while (isfinite(x[lo]))
            lo++;
        return lo;
    }
    return n;
}

#endif
