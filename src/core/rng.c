#include "core/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t herd_mix64(uint64_t a, uint64_t b)
{
    uint64_t x = a ^ (b * 0xd1b54a32d192ed03ULL);
    return splitmix64(&x);
}

void herd_rng_seed(herd_rng *r, uint64_t seed, uint64_t stream_a, uint64_t stream_b)
{
    uint64_t x = herd_mix64(herd_mix64(seed, stream_a + 1), stream_b + 1);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t herd_rng_next(herd_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float herd_rng_uniform(herd_rng *r) { return (float)(herd_rng_next(r) >> 40) * (1.0f / 16777216.0f); }

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
