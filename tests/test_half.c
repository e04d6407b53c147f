/* float <-> fp16 / bf16 conversions against hand-checked bit patterns. */
#include <math.h>

#include "testutil.h"
#include "core/half.h"

static void test_half_exact_values(void **state)
{
    (void)state;
    assert_int_equal(herd_float_to_half(1.0f), 0x3c00);
    assert_int_equal(herd_float_to_half(-2.0f), 0xc000);
    assert_int_equal(herd_float_to_half(0.0f), 0x0000);
    assert_int_equal(herd_float_to_half(-0.0f), 0x8000);
    assert_int_equal(herd_float_to_half(65504.0f), 0x7bff);  /* largest half */
    assert_int_equal(herd_float_to_half(0x1p-14f), 0x0400);  /* smallest normal */
    assert_int_equal(herd_float_to_half(0x1p-24f), 0x0001);  /* smallest subnormal */
    assert_int_equal(herd_float_to_half(0x3ffp-24f), 0x03ff); /* largest subnormal */
    assert_true(herd_half_to_float(0x3c00) == 1.0f);
    assert_true(herd_half_to_float(0x7bff) == 65504.0f);
    assert_true(herd_half_to_float(0x0001) == 0x1p-24f);
    assert_true(herd_half_to_float(0x83ff) == -0x3ffp-24f);
    /* Every half survives the round trip. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
            continue; /* NaNs: checked below */
        assert_int_equal(herd_float_to_half(herd_half_to_float((uint16_t)h)), h);
    }
}

static void test_half_rounding(void **state)
{
    (void)state;
    /* Ties between two halves go to the even mantissa. */
    assert_int_equal(herd_float_to_half(1.0f + 0x1p-11f), 0x3c00);          /* 1 | 1+2^-10 */
    assert_int_equal(herd_float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02);      /* 1+2^-10 | 1+2^-9 */
    assert_int_equal(herd_float_to_half(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01); /* above the tie */
    assert_int_equal(herd_float_to_half(65519.0f), 0x7bff);
    assert_int_equal(herd_float_to_half(65520.0f), 0x7c00); /* the tie with 2^16 overflows */
    assert_int_equal(herd_float_to_half(1e6f), 0x7c00);
    /* Subnormal ties and the flush to zero. */
    assert_int_equal(herd_float_to_half(0x1p-25f), 0x0000);       /* tie: 0 is even */
    assert_int_equal(herd_float_to_half(0x1p-25f * 1.0001f), 0x0001);
    assert_int_equal(herd_float_to_half(3 * 0x1p-25f), 0x0002);   /* 1.5 units: tie to 2 */
    assert_int_equal(herd_float_to_half(5 * 0x1p-25f), 0x0002);   /* 2.5 units: tie to 2 */
    assert_int_equal(herd_float_to_half(0x1p-30f), 0x0000);
    assert_int_equal(herd_float_to_half(-0x1p-30f), 0x8000);
    assert_int_equal(herd_float_to_half(0x7ffp-25f), 0x0400); /* rounds up into the normals */
}

static void test_half_specials(void **state)
{
    (void)state;
    assert_int_equal(herd_float_to_half(INFINITY), 0x7c00);
    assert_int_equal(herd_float_to_half(-INFINITY), 0xfc00);
    assert_true(isinf(herd_half_to_float(0x7c00)) && herd_half_to_float(0x7c00) > 0);
    uint16_t h = herd_float_to_half(NAN);
    assert_int_equal(h & 0x7c00, 0x7c00);
    assert_true(h & 0x3ff);
    assert_true(isnan(herd_half_to_float(h)));
    /* A NaN whose payload lies only in the low bits must not become inf. */
    assert_true(isnan(herd_half_to_float(herd_float_to_half(herd_bits_float(0x7f800001u)))));
}

static void test_bf16(void **state)
{
    (void)state;
    assert_int_equal(herd_float_to_bf16(1.0f), 0x3f80);
    assert_int_equal(herd_float_to_bf16(-2.0f), 0xc000);
    assert_true(herd_bf16_to_float(0x3f80) == 1.0f);
    /* Ties between two bf16 values go to the even one. */
    assert_int_equal(herd_float_to_bf16(herd_bits_float(0x3f808000u)), 0x3f80); /* 1 + 2^-8 */
    assert_int_equal(herd_float_to_bf16(herd_bits_float(0x3f818000u)), 0x3f82); /* odd: up */
    assert_int_equal(herd_float_to_bf16(herd_bits_float(0x3f808001u)), 0x3f81); /* above the tie */
    assert_int_equal(herd_float_to_bf16(herd_bits_float(0x3f807fffu)), 0x3f80); /* below it */
    assert_int_equal(herd_float_to_bf16(herd_bits_float(0x7f7fffffu)), 0x7f80); /* FLT_MAX -> inf */
    assert_int_equal(herd_float_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(herd_float_to_bf16(-INFINITY), 0xff80);
    assert_true(isnan(herd_bf16_to_float(herd_float_to_bf16(NAN))));
    assert_true(isnan(herd_bf16_to_float(herd_float_to_bf16(herd_bits_float(0x7f800001u)))));
    /* Subnormals keep their top bits. */
    assert_int_equal(herd_float_to_bf16(herd_bits_float(0x00010000u)), 0x0001);
    assert_true(herd_bf16_to_float(0x0001) == herd_bits_float(0x00010000u));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_exact_values),
        cmocka_unit_test(test_half_rounding),
        cmocka_unit_test(test_half_specials),
        cmocka_unit_test(test_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
