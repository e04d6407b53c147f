/* Deterministic random numbers: splitmix64 to derive seeds, xoshiro256** streams.
 * The stream functions are inline and also compile as CUDA device code, so the GPU
 * backend draws exactly the numbers the CPU backend draws (dropout masks). */
#ifndef HERD_CORE_RNG_H
#define HERD_CORE_RNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define HERD_HOST_DEVICE __host__ __device__
#else
#define HERD_HOST_DEVICE
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct herd_rng {
    uint64_t s[4];
} herd_rng;

static inline HERD_HOST_DEVICE uint64_t herd_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Mixes values into one 64-bit seed. */
static inline HERD_HOST_DEVICE uint64_t herd_mix64(uint64_t a, uint64_t b)
{
    uint64_t x = a ^ (b * 0xd1b54a32d192ed03ULL);
    return herd_splitmix64(&x);
}

/* Seeds a stream from a seed and up to two stream ids (epoch, step, layer...). */
static inline HERD_HOST_DEVICE void herd_rng_seed(herd_rng *r, uint64_t seed, uint64_t stream_a,
                                                  uint64_t stream_b)
{
    uint64_t x = herd_mix64(herd_mix64(seed, stream_a + 1), stream_b + 1);
    for (int i = 0; i < 4; i++)
        r->s[i] = herd_splitmix64(&x);
}

static inline HERD_HOST_DEVICE uint64_t herd_rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static inline HERD_HOST_DEVICE uint64_t herd_rng_next(herd_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = herd_rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = herd_rotl64(s[3], 45);
    return result;
}

/* Uniform in [0, 1). */
static inline HERD_HOST_DEVICE float herd_rng_uniform(herd_rng *r)
{
    return (float)(herd_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

/* Uniform in [0, 1), the i-th draw of a counter-based stream keyed by key: any element
 * computed alone, in any order, by any thread (dropout masks: one GPU thread per
 * element, the same numbers on the CPU). */
static inline HERD_HOST_DEVICE float herd_rng_uniform_at(uint64_t key, uint64_t i)
{
    return (float)(herd_mix64(key, i) >> 40) * (1.0f / 16777216.0f);
}

/* The key of a dropout layer's stream for one call's seed. */
static inline HERD_HOST_DEVICE uint64_t herd_dropout_key(uint64_t seed)
{
    return herd_mix64(seed, 0x64726f70 /* "drop" */);
}

/* Uniform integer in [0, n). */
uint32_t herd_rng_below(herd_rng *r, uint32_t n);
/* Standard normal (Box-Muller). */
float herd_rng_normal(herd_rng *r);
/* Fisher-Yates shuffle of 0..n-1 into perm. */
void herd_rng_permutation(herd_rng *r, uint32_t *perm, uint32_t n);

#ifdef __cplusplus
}
#endif
#endif
