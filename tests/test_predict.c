/* herd predict: the alpha-beta fit to bench allreduce results, the allreduce formulas
 * and the scaling table. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "tools/tools.h"

static void assert_near(double got, double want, double rel)
{
    if (fabs(got - want) > rel * fabs(want))
        fail_msg("got %.9g, want %.9g (relative tolerance %g)", got, want, rel);
}

/* tests/fixtures/bench_allreduce_np2.json: 2 ranks, made from alpha 10 us and beta
 * 0.1 ns/byte, times rounded to 1 ns as the benchmark prints them. */
static void test_fit_fixture(void **state)
{
    (void)state;
    herd_alpha_beta ab;
    assert_herd_ok(herd_alpha_beta_fit_file(HERD_TEST_DIR "/fixtures/bench_allreduce_np2.json", &ab));
    assert_int_equal(ab.ranks, 2);
    assert_int_equal(ab.points, 12);
    assert_near(ab.alpha_s, 10e-6, 1e-3);
    assert_near(ab.beta_s_per_byte, 0.1e-9, 1e-3);
    assert_true(ab.max_rel_residual < 1e-3);
}

/* 4 ranks, noisy: the fit recovers alpha and beta of the ring formula for that n
 * (2(n-1) alpha = 30 us, 2(n-1)/n beta = 1.5 beta). */
static void test_fit_four_ranks(void **state)
{
    (void)state;
    const double alpha = 5e-6, beta = 0.4e-9, noise[] = {1.03, 0.98, 1.01, 0.97, 1.02, 1.0};
    char json[4096];
    int len = snprintf(json, sizeof json, "{\"collective\":\"allreduce\",\"backend\":\"mpi\","
                       "\"ranks\":4,\"hosts\":2,\"dtype\":\"float\",\"iters\":5,\"results\":[");
    for (int i = 0; i < 6; i++) {
        double bytes = 1024.0 * pow(16, i);
        double t = (6 * alpha + 1.5 * bytes * beta) * noise[i];
        len += snprintf(json + len, sizeof json - (size_t)len,
                        "%s{\"bytes\":%.0f,\"count\":%.0f,\"type\":\"float\",\"time_us\":%.3f,"
                        "\"algbw_gbps\":1,\"busbw_gbps\":1,\"wrong\":0}", i ? "," : "", bytes,
                        bytes / 4, t * 1e6);
    }
    snprintf(json + len, sizeof json - (size_t)len, "],\"avg_busbw_gbps\":1}");
    herd_alpha_beta ab;
    assert_herd_ok(herd_alpha_beta_fit_json(json, &ab));
    assert_int_equal(ab.ranks, 4);
    assert_near(ab.alpha_s, alpha, 0.05);
    assert_near(ab.beta_s_per_byte, beta, 0.05);
    assert_true(ab.max_rel_residual > 0.005 && ab.max_rel_residual < 0.06);
    /* The fitted model reproduces the 4-rank time of a size it never saw. */
    assert_near(herd_ring_allreduce_s(&ab, 4, 3e6), 6 * alpha + 1.5 * 3e6 * beta, 0.05);
}

static void test_fit_errors(void **state)
{
    (void)state;
    herd_alpha_beta ab;
    const char *one_rank = "{\"collective\":\"allreduce\",\"ranks\":1,\"results\":["
                           "{\"bytes\":8,\"time_us\":1,\"wrong\":0},{\"bytes\":64,\"time_us\":2,\"wrong\":0}]}";
    assert_int_equal(herd_alpha_beta_fit_json(one_rank, &ab), HERD_ERR_FORMAT);
    assert_non_null(strstr(herd_last_error(), "1-rank"));
    const char *wrong = "{\"collective\":\"allreduce\",\"ranks\":2,\"results\":["
                        "{\"bytes\":8,\"time_us\":1,\"wrong\":0},{\"bytes\":64,\"time_us\":2,\"wrong\":3}]}";
    assert_int_equal(herd_alpha_beta_fit_json(wrong, &ab), HERD_ERR_FORMAT);
    assert_non_null(strstr(herd_last_error(), "wrong"));
    const char *one_size = "{\"collective\":\"allreduce\",\"ranks\":2,\"results\":["
                           "{\"bytes\":64,\"time_us\":2,\"wrong\":0},{\"bytes\":64,\"time_us\":2.1,\"wrong\":0}]}";
    assert_int_equal(herd_alpha_beta_fit_json(one_size, &ab), HERD_ERR_FORMAT);
    assert_non_null(strstr(herd_last_error(), "2 or more message sizes"));
    const char *shrinking = "{\"collective\":\"allreduce\",\"ranks\":2,\"results\":["
                            "{\"bytes\":8,\"time_us\":50,\"wrong\":0},{\"bytes\":1048576,\"time_us\":5,\"wrong\":0}]}";
    assert_int_equal(herd_alpha_beta_fit_json(shrinking, &ab), HERD_ERR_FORMAT);
    const char *bcast = "{\"collective\":\"broadcast\",\"ranks\":2,\"results\":[]}";
    assert_int_equal(herd_alpha_beta_fit_json(bcast, &ab), HERD_ERR_FORMAT);
    assert_non_null(strstr(herd_last_error(), "broadcast"));
    assert_int_equal(herd_alpha_beta_fit_json("ranks: 2", &ab), HERD_ERR_FORMAT);
    assert_int_equal(herd_alpha_beta_fit_json("{\"ranks\":2} {\"ranks\":4}", &ab), HERD_ERR_FORMAT);
    assert_non_null(strstr(herd_last_error(), "not JSON (near '{\"ranks\":4}')"));
    const char *no_time = "{\"collective\":\"allreduce\",\"ranks\":2,\"results\":[{\"bytes\":8}]}";
    assert_int_equal(herd_alpha_beta_fit_json(no_time, &ab), HERD_ERR_FORMAT);
    assert_int_equal(herd_alpha_beta_fit_file("/nonexistent/bench.json", &ab), HERD_ERR_IO);
    assert_non_null(strstr(herd_last_error(), "herd bench allreduce"));
}

static void test_formulas(void **state)
{
    (void)state;
    herd_alpha_beta ab = {.alpha_s = 1e-6, .beta_s_per_byte = 1e-9};
    assert_true(herd_ring_allreduce_s(&ab, 1, 1e6) == 0);
    assert_true(herd_tree_allreduce_s(&ab, 1, 1e6) == 0);
    /* ring: 2(n-1) alpha + 2(n-1)/n B beta */
    assert_near(herd_ring_allreduce_s(&ab, 4, 1e6), 6e-6 + 1.5e-3, 1e-12);
    assert_near(herd_ring_allreduce_s(&ab, 2, 1e6), 2e-6 + 1e-3, 1e-12);
    /* tree: 2 ceil(log2 n) (alpha + B beta) */
    assert_near(herd_tree_allreduce_s(&ab, 4, 1e6), 4 * (1e-6 + 1e-3), 1e-12);
    assert_near(herd_tree_allreduce_s(&ab, 5, 1e6), 6 * (1e-6 + 1e-3), 1e-12);
    /* Small messages: the tree's log2(n) hops beat the ring's 2(n-1) at many ranks. */
    assert_true(herd_tree_allreduce_s(&ab, 64, 8) < herd_ring_allreduce_s(&ab, 64, 8));
    assert_true(herd_ring_allreduce_s(&ab, 64, 1e8) < herd_tree_allreduce_s(&ab, 64, 1e8));
}

static void test_scaling_table(void **state)
{
    (void)state;
    /* 10 ms step, 6 ms of it backward; 1 MB of gradients at alpha 0, 1 ns/byte: the ring
     * needs 2(n-1)/n ms, under the backward for every n, so overlap hides it all. */
    herd_alpha_beta ab = {.alpha_s = 0, .beta_s_per_byte = 1e-9};
    herd_predict_row rows[8];
    assert_herd_ok(herd_predict_scaling(&ab, 1e6, 10e-3, 6e-3, 8, rows));
    assert_int_equal(rows[0].workers, 1);
    assert_true(rows[0].efficiency == 1 && rows[0].comm_s == 0);
    assert_near(rows[1].comm_s, 1e-3, 1e-9);
    assert_near(rows[1].efficiency, 10.0 / 11.0, 1e-9);
    assert_near(rows[7].comm_s, 1.75e-3, 1e-9);
    assert_near(rows[7].step_s, 11.75e-3, 1e-9);
    for (int i = 0; i < 8; i++)
        assert_true(rows[i].efficiency_overlap == 1.0);
    assert_int_equal(herd_predict_max_workers(rows, 8, 0.9, true), 8);
    assert_int_equal(herd_predict_max_workers(rows, 8, 0.9, false), 2); /* 3: 10/11.33 = 0.88 */
    assert_int_equal(herd_predict_max_workers(rows, 8, 0.95, false), 1);

    /* A slow link: 10 ns/byte makes 8 workers' ring 17.5 ms, 11.5 ms of it exposed. */
    ab.beta_s_per_byte = 1e-8;
    assert_herd_ok(herd_predict_scaling(&ab, 1e6, 10e-3, 6e-3, 8, rows));
    assert_near(rows[7].step_overlap_s, 21.5e-3, 1e-9);
    assert_near(rows[7].efficiency_overlap, 10.0 / 21.5, 1e-9);
    assert_int_equal(herd_predict_max_workers(rows, 8, 0.9, true), 1);
    assert_int_equal(herd_predict_max_workers(rows, 8, 0.55, true), 3); /* 4: 10/(10+15-6) = 0.53 */

    assert_int_equal(herd_predict_scaling(&ab, 1e6, 0, 0, 8, rows), HERD_ERR_INVALID_ARG);
    assert_int_equal(herd_predict_scaling(&ab, 1e6, 1e-3, 2e-3, 8, rows), HERD_ERR_INVALID_ARG);
    assert_int_equal(herd_predict_scaling(&ab, 1e6, 1e-3, 0, 0, rows), HERD_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit_fixture),
        cmocka_unit_test(test_fit_four_ranks),
        cmocka_unit_test(test_fit_errors),
        cmocka_unit_test(test_formulas),
        cmocka_unit_test(test_scaling_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
