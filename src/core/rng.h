/* Deterministic random numbers: splitmix64 to derive seeds, xoshiro256** streams. */
#ifndef HERD_CORE_RNG_H
#define HERD_CORE_RNG_H

#include <stdint.h>

typedef struct herd_rng {
    uint64_t s[4];
} herd_rng;

/* Seeds a stream from a seed and up to two stream ids (epoch, step, layer...). */
void herd_rng_seed(herd_rng *r, uint64_t seed, uint64_t stream_a, uint64_t stream_b);
uint64_t herd_rng_next(herd_rng *r);
/* Uniform in [0, 1). */
float herd_rng_uniform(herd_rng *r);
/* Uniform integer in [0, n). */
uint32_t herd_rng_below(herd_rng *r, uint32_t n);
/* Standard normal (Box-Muller). */
float herd_rng_normal(herd_rng *r);
/* Mixes values into one 64-bit seed. */
uint64_t herd_mix64(uint64_t a, uint64_t b);
/* Fisher-Yates shuffle of 0..n-1 into perm. */
void herd_rng_permutation(herd_rng *r, uint32_t *perm, uint32_t n);

#endif
