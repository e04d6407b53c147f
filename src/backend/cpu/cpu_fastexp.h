/* e^x in plain arithmetic that compilers vectorise (libm's expf and tanhf are calls, one
 * value at a time: GELU's tanh took a third of gpt-nano's training step). */
#ifndef HERD_BACKEND_CPU_FASTEXP_H
#define HERD_BACKEND_CPU_FASTEXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* e^x = 2^n e^r with n = round(x / ln 2) and |r| <= ln(2)/2; e^r from its Taylor series to
 * r^7 (the next term is below 6e-9 relative), ln 2 in two parts so that n ln 2 is exact.
 * Relative error within a few float ulps; x below -87 gives 0 and above 88 gives e^88
 * (inputs here are bounded: softmax arguments are <= 0, GELU's are clamped); NaN gives
 * NaN, so a diverged step still shows (the clamp keeps NaN out of the int conversion,
 * where it would be undefined). */
static inline float herd_fast_expf(float x)
{
    const float shifter = 12582912.0f; /* 1.5 x 2^23: adding it rounds to an integer */
    float c = x > -87.0f ? (x < 88.0f ? x : 88.0f) : -87.0f;
    float n = (c * 1.44269504088896341f + shifter) - shifter;
    float r = (c - n * 0.693145751953125f) - n * 1.428606765330187e-6f;
    /* Horner's steps as fused multiply-adds: one rounding each, and half the
     * instructions (C11 contracts no a * b + c by itself). */
    float p = 1.0f / 5040.0f;
    p = fmaf(p, r, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale, e;
    memcpy(&scale, &bits, sizeof scale);
    e = x < -87.0f ? 0.0f : p * scale;
    return x == x ? e : x;
}

#endif
