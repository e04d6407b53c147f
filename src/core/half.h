/*
 * float <-> IEEE binary16 and bfloat16, exact and with round-to-nearest-even, for
 * gradients on the wire. Bit manipulation only (no F16C), so every build and every
 * rank rounds identically. Infinities stay infinite, NaNs stay (quiet) NaN,
 * half subnormals are produced and read exactly.
 */
#ifndef HERD_CORE_HALF_H
#define HERD_CORE_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t herd_float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float herd_bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t herd_float_to_half(float f)
{
    uint32_t x = herd_float_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf, or NaN keeping its top payload bits and made quiet */
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0u));
    if (a >= 0x477ff000u) /* >= 65520, halfway between the largest half and 2^16: the tie goes to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a half subnormal, in units of 2^-24 */
        uint32_t e = a >> 23;
        if (e < 102) /* below 2^-25: rounds to zero */
            return sign;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (q & 1u)))
            q++; /* may carry into the smallest normal, which is the right answer */
        return (uint16_t)(sign | q);
    }
    uint32_t q = (a >> 13) - (112u << 10); /* rebias the exponent from 127 to 15 */
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u)))
        q++; /* a carry out of the mantissa bumps the exponent, as it should */
    return (uint16_t)(sign | q);
}

static inline float herd_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) { /* zero or subnormal: m * 2^-24 is exact in float */
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    if (e == 31)
        return herd_bits_float(sign | 0x7f800000u | (m << 13));
    return herd_bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

static inline uint16_t herd_float_to_bf16(float f)
{
    uint32_t x = herd_float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: truncating could make it inf */
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u); /* round to nearest, ties to even; overflow gives inf */
    return (uint16_t)(x >> 16);
}

static inline float herd_bf16_to_float(uint16_t b) { return herd_bits_float((uint32_t)b << 16); }

#endif
