/* The CPU backend's memory accounting: every block counted by category, the peak and
 * what it was made of, --memory-limit's refusal naming the request and the cap, and
 * the counts staying right with threads allocating at once. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "testutil.h"

static herd_memory_usage usage(void)
{
    herd_memory_usage u;
    assert_int_equal(herd_device_memory_usage("cpu", &u), HERD_OK);
    return u;
}

static void test_counts_and_peak(void **state)
{
    (void)state;
    const herd_backend *be = herd_backend_cpu();
    herd_memory_usage before = usage();
    assert_int_equal(herd_device_memory_reset_peak("cpu"), HERD_OK);
    herd_mem_category was = herd_mem_category_set(HERD_MEM_PARAMS);
    float *p = be->alloc(1000); /* rounded to 1024 */
    herd_mem_category_set(HERD_MEM_ACTIVATIONS);
    float *a = be->alloc(4096);
    herd_mem_category_set(was);
    assert_non_null(p);
    assert_non_null(a);
    assert_true(((uintptr_t)p % 64) == 0 && ((uintptr_t)a % 64) == 0);
    for (int i = 0; i < 250; i++)
        assert_true(p[i] == 0.0f); /* zeroed */
    herd_memory_usage u = usage();
    assert_int_equal(u.current - before.current, 1024 + 4096);
    assert_int_equal(u.peak, u.current);
    assert_int_equal(u.peak_by_category[HERD_MEM_PARAMS] - before.peak_by_category[HERD_MEM_PARAMS],
                     1024);
    uint64_t sum = 0;
    for (int c = 0; c < HERD_MEM_CATEGORIES; c++)
        sum += u.peak_by_category[c];
    assert_int_equal(sum, u.peak);
    be->free(a);
    be->free(p);
    u = usage();
    assert_int_equal(u.current, before.current);
    assert_int_equal(u.peak, before.current + 1024 + 4096); /* the peak stays */
}

static void test_limit(void **state)
{
    (void)state;
    const herd_backend *be = herd_backend_cpu();
    herd_memory_usage u = usage();
    assert_int_equal(herd_device_set_memory_limit("cpu", u.current + (1 << 20)), HERD_OK);
    herd_mem_category was = herd_mem_category_set(HERD_MEM_OPTIMIZER);
    void *fits = be->alloc(512 << 10);
    void *over = be->alloc(768 << 10);
    herd_mem_category_set(was);
    assert_non_null(fits);
    assert_null(over);
    const char *msg = herd_last_error();
    if (!strstr(msg, "allocating 0.8 MiB of optimizer state") || !strstr(msg, "--memory-limit"))
        fail_msg("the refusal says: %s", msg);
    /* A cap below what is held is refused; removing the cap lets it through. */
    assert_int_equal(herd_device_set_memory_limit("cpu", u.current + 1), HERD_ERR_INVALID_ARG);
    assert_int_equal(herd_device_set_memory_limit("cpu", 0), HERD_OK);
    over = be->alloc(768 << 10);
    assert_non_null(over);
    be->free(over);
    be->free(fits);
}

static void *churn(void *arg)
{
    const herd_backend *be = arg;
    for (int i = 0; i < 2000; i++) {
        void *p = be->alloc((size_t)(i % 7 + 1) * 128);
        be->free(p);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    const herd_backend *be = herd_backend_cpu();
    uint64_t start = usage().current;
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, churn, (void *)be);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(usage().current, start);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_and_peak),
        cmocka_unit_test(test_limit),
        cmocka_unit_test(test_threads),
    };
    return tu_run(tests, NULL, NULL);
}
