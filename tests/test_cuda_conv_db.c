/* The file of measured cuDNN algorithms (src/backend/cuda/cuda_conv_db.c): what one run
 * measured, a later run reads back, so both run the same algorithms. File handling only,
 * no GPU needed; in a build without CUDA the program exits 77 (skipped). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "herd_config.h"

#if HERD_HAVE_CUDA
#include "backend/cuda/cuda_conv_algo.h"

static char g_dir[] = "/tmp/herd-conv-db-XXXXXX";
static char g_path[256];

static herd_cuda_conv_algos choice(int base)
{
    return (herd_cuda_conv_algos){.fwd = base, .bwd_data = base + 1, .bwd_filter = base + 2,
                                  .fwd_math = CUDNN_FMA_MATH, .bwd_data_math = CUDNN_FMA_MATH,
                                  .bwd_filter_math = CUDNN_TENSOR_OP_MATH,
                                  .workspace = (size_t)base << 32};
}

static void expect(const char *key, const herd_cuda_conv_algos *want)
{
    herd_cuda_conv_algos got;
    bool found = true;
    assert_herd_ok(herd_cuda_conv_db_lookup(key, &got, &found));
    assert_int_equal(found, want != NULL);
    if (want)
        assert_memory_equal(&got, want, sizeof got);
}

static void test_kept_across_runs(void **state)
{
    (void)state;
    snprintf(g_path, sizeof g_path, "%s/a/b/algos.tsv", g_dir); /* folders made on write */
    setenv("HERD_CUDNN_CACHE", g_path, 1);
    expect("H200 cudnn91900 n64 c3 224x224 o64 k7x7 s2 p3 fp32", NULL); /* no file yet */
    herd_cuda_conv_algos a = choice(1), b = choice(2), c = choice(5);
    assert_herd_ok(herd_cuda_conv_db_store("K fp32", &a));
    assert_herd_ok(herd_cuda_conv_db_store("K fp32", &b)); /* a second rank's: first wins */
    assert_herd_ok(herd_cuda_conv_db_store("K fp32 exact", &c));
    expect("K fp32", &a);
    expect("K fp32 exact", &c);
    expect("K", NULL); /* a prefix of a key is another key */
    expect("K tf32", NULL);
}

static void test_damaged_line_named(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/damaged.tsv", g_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("other\t1 2 3 0 0 0 0\nK fp32\t1 2 x 0 0 0 0\n", f);
    fclose(f);
    setenv("HERD_CUDNN_CACHE", path, 1);
    herd_cuda_conv_algos got;
    bool found;
    assert_int_equal(herd_cuda_conv_db_lookup("K fp32", &got, &found), HERD_ERR_INVALID_ARG);
    assert_non_null(strstr(herd_last_error(), "damaged.tsv:2"));
    assert_non_null(strstr(herd_last_error(), "delete the file"));
    expect("other", &(herd_cuda_conv_algos){.fwd = 1, .bwd_data = 2, .bwd_filter = 3});
    /* A truncated line (a write cut short) is damaged too, not half a choice. */
    f = fopen(path, "w");
    fputs("K fp32\t1 2 3 0 0\n", f);
    fclose(f);
    assert_int_equal(herd_cuda_conv_db_lookup("K fp32", &got, &found), HERD_ERR_INVALID_ARG);
}

static void test_off_and_unwritable(void **state)
{
    (void)state;
    herd_cuda_conv_algos a = choice(3);
    setenv("HERD_CUDNN_CACHE", "", 1); /* kept in the process only */
    assert_herd_ok(herd_cuda_conv_db_store("K fp32", &a));
    expect("K fp32", NULL);
    /* A file that cannot be written: later runs measure again; this one goes on. */
    setenv("HERD_CUDNN_CACHE", "/proc/herd-no/such/file", 1);
    assert_herd_ok(herd_cuda_conv_db_store("K fp32", &a));
    expect("K fp32", NULL);
}

int main(void)
{
    if (!mkdtemp(g_dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_across_runs),
        cmocka_unit_test(test_damaged_line_named),
        cmocka_unit_test(test_off_and_unwritable),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0)
        return 1;
    return rc;
}
#else
int main(void)
{
    puts("SKIPPED: herd was built without CUDA");
    return 77;
}
#endif
