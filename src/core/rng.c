#include "core/rng.h"

#include <math.h>

uint32_t herd_rng_below(herd_rng *r, uint32_t n)
{
    /* Lemire's multiply-shift; the bias is below 2^-32 for our n. */
    return (uint32_t)(((herd_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

float herd_rng_normal(herd_rng *r)
{
    float u1 = herd_rng_uniform(r), u2 = herd_rng_uniform(r);
    if (u1 < 1e-12f)
        u1 = 1e-12f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530718f * u2);
}

void herd_rng_permutation(herd_rng *r, uint32_t *perm, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        perm[i] = i;
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = herd_rng_below(r, i);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}
