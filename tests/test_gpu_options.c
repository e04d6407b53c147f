/* The GPU options' CPU-side logic: --gpu-memory-limit's accounting (the rules the CUDA
 * caching allocator follows: what fits, what fits once the cache is given back, what
 * never fits, an error naming the sizes), the peak-FLOP/s table, precision names,
 * and the CPU backend refusing what it cannot do. */
#include <string.h>

#include "testutil.h"

#include "backend/backend.h"
#include "backend/mem_budget.h"

#define MiB (1024u * 1024u)

static void test_no_limit(void **state)
{
    (void)state;
    herd_mem_budget b = {0};
    assert_int_equal(herd_mem_budget_check(&b, (uint64_t)1 << 40), HERD_MEM_FITS);
    herd_mem_budget_obtained(&b, 100 * MiB);
    assert_int_equal(b.held, 100 * MiB);
    assert_int_equal(b.peak, 100 * MiB);
}

static void test_limit(void **state)
{
    (void)state;
    herd_mem_budget b = {.limit = 100 * MiB};
    assert_int_equal(herd_mem_budget_check(&b, 100 * MiB), HERD_MEM_FITS);
    assert_int_equal(herd_mem_budget_check(&b, 100 * MiB + 1), HERD_MEM_OVER);
    herd_mem_budget_obtained(&b, 60 * MiB);  /* in use */
    herd_mem_budget_obtained(&b, 30 * MiB);  /* in use, then freed to the cache */
    herd_mem_budget_cached(&b, 30 * MiB);
    assert_int_equal(b.held, 90 * MiB);
    assert_int_equal(herd_mem_budget_check(&b, 10 * MiB), HERD_MEM_FITS);
    /* 20 MiB more would hold 110: only after the cached 30 go back to the driver. */
    assert_int_equal(herd_mem_budget_check(&b, 20 * MiB), HERD_MEM_FITS_AFTER_RELEASE);
    assert_int_equal(herd_mem_budget_check(&b, 40 * MiB), HERD_MEM_FITS_AFTER_RELEASE);
    assert_int_equal(herd_mem_budget_check(&b, 41 * MiB), HERD_MEM_OVER);
    /* Reusing the cached block changes nothing held; releasing it frees room. */
    herd_mem_budget_handed_out(&b, 30 * MiB);
    assert_int_equal(b.cached, 0);
    assert_int_equal(herd_mem_budget_check(&b, 20 * MiB), HERD_MEM_OVER);
    herd_mem_budget_cached(&b, 30 * MiB);
    herd_mem_budget_returned(&b, 30 * MiB);
    assert_int_equal(b.held, 60 * MiB);
    assert_int_equal(b.cached, 0);
    assert_int_equal(b.peak, 90 * MiB);
    assert_int_equal(herd_mem_budget_check(&b, 40 * MiB), HERD_MEM_FITS);
    /* No wrap-around for requests beyond any limit. */
    assert_int_equal(herd_mem_budget_check(&b, UINT64_MAX), HERD_MEM_OVER);
}

static void expect_in(const char *msg, const char *const *wanted)
{
    for (; *wanted; wanted++)
        if (!strstr(msg, *wanted))
            fail_msg("expected '%s' in: %s", *wanted, msg);
}

static void test_messages(void **state)
{
    (void)state;
    herd_mem_budget b = {.limit = 512 * MiB, .held = 500 * MiB, .cached = 100 * MiB};
    /* Refused by the cap: the request, what herd uses, the cap, the GPU's free and total. */
    assert_int_equal(herd_mem_budget_error(&b, 300 * MiB, true, 2048ull * MiB, 81920ull * MiB),
                     HERD_ERR_NOMEM);
    expect_in(herd_last_error(),
              (const char *const[]){"limit reached", "300.0 MiB", "400.0 MiB",
                                    "--gpu-memory-limit 512.0 MiB", "2048.0 of 81920.0 MiB free",
                                    "smaller batch", NULL});
    /* Refused by the driver: says so, and still names the cap. */
    assert_int_equal(herd_mem_budget_error(&b, 300 * MiB, false, 10ull * MiB, 81920ull * MiB),
                     HERD_ERR_NOMEM);
    expect_in(herd_last_error(),
              (const char *const[]){"out of GPU memory", "300.0 MiB",
                                    "--gpu-memory-limit 512.0 MiB", "10.0 of 81920.0 MiB free",
                                    NULL});
    b.limit = 0;
    herd_mem_budget_error(&b, 1 * MiB, false, 0, 0);
    expect_in(herd_last_error(), (const char *const[]){"no --gpu-memory-limit", NULL});
}

static void test_peak_table(void **state)
{
    (void)state;
    /* H100 SXM: 132 SMs at 1.98 GHz -> 66.9 TFLOP/s fp32, 535 tf32, 1070 bf16 dense. */
    assert_true(132 * 1.98e9 * herd_peak_flops_per_clock_sm(9, 0, HERD_PRECISION_FP32) / 1e12 > 66.8);
    assert_true(herd_peak_flops_per_clock_sm(9, 0, HERD_PRECISION_TF32) == 2048);
    assert_true(herd_peak_flops_per_clock_sm(9, 0, HERD_PRECISION_BF16) == 4096);
    assert_true(herd_peak_flops_per_clock_sm(8, 0, HERD_PRECISION_FP16) == 2048);
    assert_true(herd_peak_flops_per_clock_sm(7, 0, HERD_PRECISION_TF32) == 0); /* no TF32 on V100 */
    assert_true(herd_peak_flops_per_clock_sm(7, 0, HERD_PRECISION_BF16) == 0);
    assert_true(herd_peak_flops_per_clock_sm(8, 6, HERD_PRECISION_FP32) == 0); /* not listed */
}

static void test_precision_and_cpu_refusals(void **state)
{
    (void)state;
    herd_precision p;
    for (int i = HERD_PRECISION_FP32; i <= HERD_PRECISION_FP16; i++) {
        assert_herd_ok(herd_precision_parse(herd_precision_name((herd_precision)i), &p));
        assert_int_equal(p, i);
    }
    assert_int_equal(herd_precision_parse("fp8", &p), HERD_ERR_INVALID_ARG);
    herd_model *m;
    assert_herd_ok(herd_model_create_shape("mlp", 1, 8, 8, 4, &m));
    assert_string_equal(herd_model_device(m), "cpu");
    assert_herd_ok(herd_model_set_precision(m, HERD_PRECISION_FP32));
    for (int i = HERD_PRECISION_TF32; i <= HERD_PRECISION_FP16; i++) {
        if (i == HERD_PRECISION_BF16)
            continue; /* test_cpu_bf16 */
        assert_int_equal(herd_model_set_precision(m, (herd_precision)i), HERD_ERR_UNSUPPORTED);
        assert_non_null(strstr(herd_last_error(), "computes in fp32 or bf16"));
        assert_int_equal(herd_model_precision(m), HERD_PRECISION_FP32); /* unchanged */
    }
    herd_model_free(m);
    /* The CPU has a cap too now (test_memory); one is set and lifted. */
    assert_int_equal(herd_device_set_memory_limit("cpu", (uint64_t)1 << 40), HERD_OK);
    assert_int_equal(herd_device_set_memory_limit("cpu", 0), HERD_OK);
    assert_int_equal(herd_device_set_memory_limit("tpu", 1 << 30), HERD_ERR_INVALID_ARG);
    /* With no GPU visible the default is the CPU, whatever the build. */
    if (!herd_backend_cuda_visible())
        assert_string_equal(herd_default_device(), "cpu");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peak_table),
        cmocka_unit_test(test_precision_and_cpu_refusals),
        cmocka_unit_test(test_no_limit),
        cmocka_unit_test(test_limit),
        cmocka_unit_test(test_messages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
