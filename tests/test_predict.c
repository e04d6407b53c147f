/* herd predict: the allreduce table read from bench allreduce results, the formulas,
 * the bucket plan and the simulated step, against numbers worked out by hand. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "tools/tools.h"
#include "train/buckets.h"

static void assert_near(double got, double want, double rel)
{
    if (fabs(got - want) > rel * fabs(want))
        fail_msg("got %.9g, want %.9g (relative tolerance %g)", got, want, rel);
}

/* A 2-rank table from sizes and times in microseconds. */
static void table_json(char *json, size_t cap, int ranks, const double *bytes, const double *us, int n)
{
    int len = snprintf(json, cap, "{\"collective\":\"allreduce\",\"backend\":\"mpi\",\"ranks\":%d,"
                       "\"hosts\":2,\"dtype\":\"float\",\"iters\":5,\"results\":[", ranks);
    for (int i = 0; i < n; i++)
        len += snprintf(json + len, cap - (size_t)len, "%s{\"bytes\":%.0f,\"count\":%.0f,\"type\":"
                        "\"float\",\"time_us\":%.3f,\"wrong\":0}", i ? "," : "", bytes[i],
                        bytes[i] / 4, us[i]);
    snprintf(json + len, cap - (size_t)len, "],\"avg_busbw_gbps\":1}");
}

/* tests/fixtures/bench_allreduce_np2.json: 2 ranks, made from alpha 10 us and beta
 * 0.1 ns/byte, times rounded to 1 ns as the benchmark prints them: straight lines
 * between its sizes are that line again. */
static void test_link_fixture(void **state)
{
    (void)state;
    herd_comm_link l;
    assert_herd_ok(herd_comm_link_from_bench_file(HERD_TEST_DIR "/fixtures/bench_allreduce_np2.json", &l));
    assert_int_equal(l.ranks, 2);
    assert_int_equal(l.points, 12);
    assert_true(l.max_rel_residual < 1e-4);
    bool beyond = true;
    herd_alpha_beta ab = herd_comm_link_segment(&l, 3e6, &beyond);
    assert_false(beyond);
    assert_near(ab.alpha_s, 10e-6, 1e-3);
    assert_near(ab.beta_s_per_byte, 0.1e-9, 1e-3);
    assert_near(herd_comm_link_allreduce_s(&l, 2, 3e6), 20e-6 + 3e6 * 0.1e-9, 1e-4);
}

/* A link whose time jumps between 2000 and 8000 bytes (a protocol change):
 *   bytes 1000 2000 4000 8000,  time 10 12 40 1000 us. */
static void test_link_table(void **state)
{
    (void)state;
    const double bytes[] = {1000, 2000, 4000, 8000}, us[] = {10, 12, 40, 1000};
    char json[2048];
    table_json(json, sizeof json, 2, bytes, us, 4);
    herd_comm_link l;
    assert_herd_ok(herd_comm_link_from_bench_json(json, &l));
    /* The measured sizes themselves, and straight lines between them. */
    for (int i = 0; i < 4; i++)
        assert_near(herd_comm_link_allreduce_s(&l, 2, bytes[i]), us[i] * 1e-6, 1e-12);
    assert_near(herd_comm_link_allreduce_s(&l, 2, 1500), 11e-6, 1e-12);
    assert_near(herd_comm_link_allreduce_s(&l, 2, 3000), 26e-6, 1e-12); /* 12 + 1000 x 28/2000 */
    /* Below the table: the smallest size's latency. */
    assert_near(herd_comm_link_allreduce_s(&l, 2, 500), 10e-6, 1e-12);
    /* Above: the last segment's line, 40 + 0.24 us/byte beyond 4000, said to be extrapolated. */
    bool beyond = false;
    herd_comm_link_segment(&l, 16000, &beyond);
    assert_true(beyond);
    assert_near(herd_comm_link_allreduce_s(&l, 2, 16000), 2920e-6, 1e-12);
    /* Leave-one-out: at 2000, 1000..4000 says 20 (12 measured, 66.7%); at 4000, 2000..8000
     * says 12 + 2000 x 988/6000 = 341.33 (40 measured, 753%): the jump. */
    assert_near(l.max_rel_residual, (12 + 2000 * 988.0 / 6000 - 40) / 40, 1e-9);
    assert_true(l.worst_bytes == 4000);
    /* Segment 1000..2000: 8 us + 0.002 us/byte = 2 alpha + bytes beta at 2 ranks, so
     * alpha 4 us, beta 2 ns/byte. 4 ranks at 1500 bytes: ring 6 x 4 + 1.5 x 3 = 28.5 us,
     * tree 4 x (4 + 3) = 28 us; the faster. */
    herd_alpha_beta ab = herd_comm_link_segment(&l, 1500, NULL);
    assert_near(ab.alpha_s, 4e-6, 1e-9);
    assert_near(ab.beta_s_per_byte, 2e-9, 1e-9);
    assert_near(herd_comm_link_allreduce_s(&l, 4, 1500), 28e-6, 1e-9);
    assert_true(herd_comm_link_allreduce_s(&l, 1, 1500) == 0);

    /* A last segment that falls (noise) is not extended: the largest size's bandwidth. */
    const double b2[] = {1000, 2000, 4000}, t2[] = {10, 30, 20};
    table_json(json, sizeof json, 2, b2, t2, 3);
    assert_herd_ok(herd_comm_link_from_bench_json(json, &l));
    assert_near(herd_comm_link_allreduce_s(&l, 2, 8000), 40e-6, 1e-12);
}

static void test_link_errors(void **state)
{
    (void)state;
    herd_comm_link l;
    const char *one_rank = "{\"collective\":\"allreduce\",\"ranks\":1,\"results\":["
                           "{\"bytes\":8,\"time_us\":1,\"wrong\":0},{\"bytes\":64,\"time_us\":2,\"wrong\":0}]}";
    assert_int_equal(herd_comm_link_from_bench_json(one_rank, &l), HERD_ERR_FORMAT);
    assert_non_null(strstr(herd_last_error(), "1-rank"));
    const char *wrong = "{\"collective\":\"allreduce\",\"ranks\":2,\"results\":["
                        "{\"bytes\":8,\"time_us\":1,\"wrong\":0},{\"bytes\":64,\"time_us\":2,\"wrong\":3}]}";
    assert_int_equal(herd_comm_link_from_bench_json(wrong, &l), HERD_ERR_FORMAT);
    assert_non_null(strstr(herd_last_error(), "wrong"));
    const char *one_size = "{\"collective\":\"allreduce\",\"ranks\":2,\"results\":["
                           "{\"bytes\":64,\"time_us\":2,\"wrong\":0}]}";
    assert_int_equal(herd_comm_link_from_bench_json(one_size, &l), HERD_ERR_FORMAT);
    assert_non_null(strstr(herd_last_error(), "2 or more message sizes"));
    const char *repeated = "{\"collective\":\"allreduce\",\"ranks\":2,\"results\":["
                           "{\"bytes\":64,\"time_us\":2,\"wrong\":0},{\"bytes\":64,\"time_us\":2.1,\"wrong\":0}]}";
    assert_int_equal(herd_comm_link_from_bench_json(repeated, &l), HERD_ERR_FORMAT);
    assert_non_null(strstr(herd_last_error(), "result 1: 64 bytes after 64; the sizes must increase"));
    const char *shrinking = "{\"collective\":\"allreduce\",\"ranks\":2,\"results\":["
                            "{\"bytes\":8,\"time_us\":50,\"wrong\":0},{\"bytes\":1048576,\"time_us\":5,\"wrong\":0}]}";
    assert_int_equal(herd_comm_link_from_bench_json(shrinking, &l), HERD_ERR_FORMAT);
    assert_non_null(strstr(herd_last_error(), "does not grow"));
    const char *bcast = "{\"collective\":\"broadcast\",\"ranks\":2,\"results\":[]}";
    assert_int_equal(herd_comm_link_from_bench_json(bcast, &l), HERD_ERR_FORMAT);
    assert_non_null(strstr(herd_last_error(), "broadcast"));
    assert_int_equal(herd_comm_link_from_bench_json("ranks: 2", &l), HERD_ERR_FORMAT);
    assert_int_equal(herd_comm_link_from_bench_json("{\"ranks\":2} {\"ranks\":4}", &l), HERD_ERR_FORMAT);
    assert_non_null(strstr(herd_last_error(), "not JSON (near '{\"ranks\":4}')"));
    const char *no_time = "{\"collective\":\"allreduce\",\"ranks\":2,\"results\":[{\"bytes\":8}]}";
    assert_int_equal(herd_comm_link_from_bench_json(no_time, &l), HERD_ERR_FORMAT);
    assert_int_equal(herd_comm_link_from_bench_file("/nonexistent/bench.json", &l), HERD_ERR_IO);
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
    /* A given link is one segment everywhere. */
    herd_comm_link l = herd_comm_link_given(1e-6, 1e-9);
    assert_near(herd_comm_link_allreduce_s(&l, 4, 1e6), 6e-6 + 1.5e-3, 1e-12);
}

/* Tensors (floats) in declaration order: layer 0 100000 + 100, layer 1 200000, layer 2
 * 150000 + 50, layer 3 30000; buckets of 0.5 MiB = 131072 floats. From the back:
 * 30000 + 50 + 150000 (the tensor that crosses the size stays in), then 200000 alone,
 * then 100 + 100000. */
static void test_bucket_plan(void **state)
{
    (void)state;
    const herd_param_ref t[] = {{0, 100000, 0},      {100000, 100, 0},   {100100, 200000, 1},
                                {300100, 150000, 2}, {450100, 50, 2},    {450150, 30000, 3}};
    herd_bucket_span b[6];
    int n = 0, of[6];
    assert_near(herd_bucket_first_mb(25), 1.0, 0);
    assert_near(herd_bucket_first_mb(0.5), 0.5, 0);
    assert_herd_ok(herd_bucket_plan(t, 6, 0.5, herd_bucket_first_mb(0.5), b, &n, of));
    assert_int_equal(n, 3);
    assert_true(b[0].offset == 300100 && b[0].numel == 180050 && b[0].views == 3);
    assert_true(b[1].offset == 100100 && b[1].numel == 200000 && b[1].views == 1);
    assert_true(b[2].offset == 0 && b[2].numel == 100100 && b[2].views == 2);
    assert_int_equal(b[0].ready_layer, 2);
    assert_int_equal(b[1].ready_layer, 1);
    assert_int_equal(b[2].ready_layer, 0);
    const int want_of[] = {2, 2, 1, 0, 0, 0};
    for (int i = 0; i < 6; i++)
        assert_int_equal(of[i], want_of[i]);
    /* 25 MiB buckets, the first 1 MiB (262144 floats): 180050 + 200000 crosses it, so the
     * first bucket ends after layer 1 and the second holds layer 0. */
    assert_herd_ok(herd_bucket_plan(t, 6, 25, 1, b, &n, NULL));
    assert_int_equal(n, 2);
    assert_true(b[0].numel == 380050 && b[0].ready_layer == 1 && b[1].numel == 100100);
    assert_int_equal(herd_bucket_plan(t, 6, 0, 1, b, &n, NULL), HERD_ERR_INVALID_ARG);
}

/* herd predict times the buckets herd train reduces: for resnet20 (batch norms: buffers
 * that are no gradients) and lenet5 at several --bucket-mb, the plan predict builds has
 * training's buckets, the same offsets, sizes and tensor counts in the same order, and
 * each bucket is ready after the layer whose backward lets training launch it. */
static void test_buckets_as_train(void **state)
{
    (void)state;
    herd_dataset *ds = NULL;
    assert_herd_ok(herd_dataset_open("synthetic:3,32,32,10,64", HERD_SPLIT_TRAIN, &ds));
    const char *models[] = {"resnet20", "lenet5"};
    const double sizes[] = {0.01, 0.05, 0.5, 25};
    for (int mi = 0; mi < 2; mi++) {
        herd_model *m = NULL;
        assert_herd_ok(herd_model_create(models[mi], ds, &m));
        for (int si = 0; si < 4; si++) {
            herd_buckets train;
            herd_predict_plan plan;
            herd_predict_opts o = {.bucket_mb = sizes[si], .grad_bytes_per_param = 4,
                                   .metrics = HERD_METRICS_STEP_LATE, .step_s = 1e-2,
                                   .backward_fraction = -1};
            assert_herd_ok(herd_buckets_plan(m, sizes[si], &train));
            assert_herd_ok(herd_predict_plan_build(m, &o, NULL, &plan));
            assert_int_equal(plan.sm.n_buckets, train.n);
            assert_ptr_equal(plan.sm.buckets, plan.buckets.spans);
            if (sizes[si] < 0.02)
                assert_true(train.n >= 3); /* several buckets: the comparison means something */
            size_t total = 0;
            for (int k = 0; k < train.n; k++) {
                const herd_bucket_span *b = &plan.buckets.spans[k];
                assert_true(b->offset == train.b[k].offset && b->numel == train.b[k].numel);
                assert_int_equal(b->views, train.b[k].views);
                /* Training launches bucket k during the backward of the layer that
                 * completes it: the lowest layer it touches. */
                int l = b->ready_layer;
                assert_true(train.bucket_of_layer[l] == k || train.first_bucket_of_layer[l] == k);
                total += b->numel;
            }
            assert_true(total == herd_model_param_count(m));
            herd_predict_plan_free(&plan);
            herd_buckets_free(&train);
        }
        herd_model_free(m);
    }
    herd_dataset_free(ds);
}

/* The simulated step, by hand. Link alpha 1 ms, beta 1 ns/byte: 2 ranks take
 * 2 ms + bytes x 1 ns. Forward 2 ms, backward of layers 0, 1, 2: 3, 2, 1 ms, other 1 ms
 * (compute 9 ms). Two buckets of 250000 floats (1e6 bytes, 3 ms each): bucket 0 ready
 * after layer 2, bucket 1 after layer 0. */
static void test_step_overlap(void **state)
{
    (void)state;
    herd_comm_link l = herd_comm_link_given(1e-3, 1e-9);
    const double bwd[] = {3e-3, 2e-3, 1e-3};
    herd_bucket_span two[] = {{0, 250000, 1, 2}, {0, 250000, 1, 0}};
    herd_step_model m = {.n_layers = 3, .backward_s = bwd, .buckets = two, .n_buckets = 2,
                         .wire_bytes_per_float = 4, .forward_s = 2e-3, .other_s = 1e-3,
                         .metrics = HERD_METRICS_LAST_BUCKET};
    herd_step_prediction p;
    /* Bucket 0 runs 3..6 ms under layers 1 and 0 (3..8); bucket 1 (with the metrics'
     * 56 bytes) 8..11.000056; the update ends at 12.000056. */
    assert_herd_ok(herd_predict_step(&l, 2, &m, &p));
    assert_near(p.compute_s, 9e-3, 1e-12);
    assert_near(p.comm_s, 6.000056e-3, 1e-12);
    assert_near(p.step_s, 12.000056e-3, 1e-12);
    assert_near(p.exposed_s, 3.000056e-3, 1e-9);
    assert_near(p.serial_s, 15.000056e-3, 1e-12);
    assert_int_equal(p.collectives, 2);
    /* Metrics in a blocking reduction after the update: +2.000056 ms. */
    m.metrics = HERD_METRICS_BLOCKING;
    assert_herd_ok(herd_predict_step(&l, 2, &m, &p));
    assert_near(p.step_s, 14.000056e-3, 1e-12);
    assert_int_equal(p.collectives, 3);
    /* A step late: the previous step's runs 0..2.000056 under forward, costs nothing here. */
    m.metrics = HERD_METRICS_STEP_LATE;
    assert_herd_ok(herd_predict_step(&l, 2, &m, &p));
    assert_near(p.step_s, 12e-3, 1e-12);
    assert_near(p.comm_s, 8.000056e-3, 1e-12);
    /* All gradients in one bucket, complete only after layer 0: nothing overlaps.
     * 2e6 bytes take 4 ms: 8..12, step 13 ms. */
    herd_bucket_span one[] = {{0, 500000, 2, 0}};
    m.buckets = one, m.n_buckets = 1, m.metrics = HERD_METRICS_LAST_BUCKET;
    assert_herd_ok(herd_predict_step(&l, 2, &m, &p));
    assert_near(p.step_s, 13.000056e-3, 1e-12);
    assert_near(p.step_s, p.serial_s, 1e-12);
    /* One worker: no collective at all. */
    assert_herd_ok(herd_predict_step(&l, 1, &m, &p));
    assert_true(p.step_s == p.compute_s && p.comm_s == 0 && p.collectives == 0);
    /* Buckets out of backward's order are refused. */
    herd_bucket_span bad[] = {{0, 1, 1, 0}, {0, 1, 1, 2}};
    m.buckets = bad, m.n_buckets = 2;
    assert_int_equal(herd_predict_step(&l, 2, &m, &p), HERD_ERR_INVALID_ARG);
}

/* --sync-bn: layer 1 a batch norm of 100 channels. Forward's exchanges of 808 and 800
 * bytes (2.000808 + 2.0008 ms) end at 6.001608; layer 2 at 7.001608 launches bucket 0
 * (to 10.001608); layer 1's backward exchange (1600 bytes, 2.0016 ms) waits behind it:
 * 10.001608..12.003208; layer 0 ends 15.003208, bucket 1 to 18.003264, step 19.003264. */
static void test_step_sync_bn(void **state)
{
    (void)state;
    herd_comm_link l = herd_comm_link_given(1e-3, 1e-9);
    const double bwd[] = {3e-3, 2e-3, 1e-3};
    const int bn[] = {0, 100, 0};
    herd_bucket_span two[] = {{0, 250000, 1, 2}, {0, 250000, 1, 0}};
    herd_step_model m = {.n_layers = 3, .backward_s = bwd, .sync_bn_channels = bn, .buckets = two,
                         .n_buckets = 2, .wire_bytes_per_float = 4, .forward_s = 2e-3,
                         .other_s = 1e-3, .metrics = HERD_METRICS_LAST_BUCKET};
    herd_step_prediction p;
    assert_herd_ok(herd_predict_step(&l, 2, &m, &p));
    assert_near(p.step_s, 19.003264e-3, 1e-12);
    assert_near(p.comm_s, 12.003264e-3, 1e-12);
    assert_int_equal(p.collectives, 5);
}

static void test_scaling_table(void **state)
{
    (void)state;
    /* Forward 3, backward 6 (one layer), other 1 ms: 10 ms. 1 MB of
     * gradients in one bucket, ready at the end of backward, alpha 0, 1 ns/byte: the
     * ring needs 2(n-1)/n ms and nothing hides it. */
    herd_comm_link l = herd_comm_link_given(0, 1e-9);
    const double bwd[] = {6e-3};
    herd_bucket_span one[] = {{0, 250000, 1, 0}};
    herd_step_model m = {.n_layers = 1, .backward_s = bwd, .buckets = one, .n_buckets = 1,
                         .wire_bytes_per_float = 4, .forward_s = 3e-3, .other_s = 1e-3,
                         .metrics = HERD_METRICS_STEP_LATE};
    herd_predict_row rows[8];
    assert_herd_ok(herd_predict_scaling(&l, &m, 1e6, 8, rows));
    assert_int_equal(rows[0].workers, 1);
    assert_true(rows[0].efficiency == 1 && rows[0].comm_s == 0);
    /* 2 workers: 1 ms of gradients; the metrics (56 bytes, 56 ns) hide under forward. */
    assert_near(rows[1].ring_s, 1e-3, 1e-9);
    assert_near(rows[1].step_overlap_s, 11e-3, 1e-9);
    assert_near(rows[1].efficiency_overlap, 10.0 / 11.0, 1e-9);
    assert_near(rows[7].step_overlap_s, 11.75e-3, 1e-9);
    assert_int_equal(herd_predict_max_workers(rows, 8, 0.9, true), 2); /* 3: 10/11.33 = 0.88 */
    assert_int_equal(herd_predict_max_workers(rows, 8, 0.95, true), 1);
    assert_int_equal(herd_predict_scaling(&l, &m, 1e6, 0, rows), HERD_ERR_INVALID_ARG);
    m.forward_s = -1;
    assert_int_equal(herd_predict_scaling(&l, &m, 1e6, 8, rows), HERD_ERR_INVALID_ARG);
}

/* A pipeline with equal stages and free transfers has the ideal bubble and makespan;
 * a transfer time and a slow stage stretch it as the schedule says. */
static void test_pipeline(void **state)
{
    (void)state;
    for (int kind = 0; kind < 2; kind++)
        for (int P = 1; P <= 4; P++)
            for (int M = 1; M <= 9; M += 4) {
                herd_pipeline_model pm = {.stages = P, .micro_batches = M,
                                          .schedule = (herd_pp_schedule_kind)kind, .other_s = 0.5};
                for (int s = 0; s < P; s++)
                    pm.forward_s[s] = 1, pm.backward_s[s] = 2;
                herd_pipeline_prediction pr;
                assert_int_equal(herd_predict_pipeline(&pm, &pr), HERD_OK);
                assert_true(fabs(pr.step_s - ((M + P - 1) * 3.0 + 0.5)) < 1e-9);
                assert_true(fabs(pr.bubble - pr.ideal_bubble) < 1e-12);
                assert_true(fabs(pr.ideal_bubble - (double)(P - 1) / (M + P - 1)) < 1e-12);
            }
    /* Two stages, one micro-batch: F0, transfer, F1, B1, transfer, B0. */
    herd_pipeline_model pm = {.stages = 2, .micro_batches = 1, .forward_s = {1, 2},
                              .backward_s = {3, 4}, .transfer_s = {0.25}, .allreduce_s = {0.5, 0}};
    herd_pipeline_prediction pr;
    assert_int_equal(herd_predict_pipeline(&pm, &pr), HERD_OK);
    assert_true(fabs(pr.step_s - (1 + 0.25 + 2 + 4 + 0.25 + 3 + 0.5)) < 1e-9);
    /* A tied token table: its stage (reduced at 10.5 + 0.5) and the last (done at 7.25)
     * exchange once both are done: 11 + 2. */
    pm.tied_stage = 0, pm.tied_s = 2;
    assert_int_equal(herd_predict_pipeline(&pm, &pr), HERD_OK);
    assert_true(fabs(pr.step_s - (11 + 2)) < 1e-9);
    pm.tied_s = 0;
    pm.stages = 0;
    assert_int_equal(herd_predict_pipeline(&pm, &pr), HERD_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_link_fixture),
        cmocka_unit_test(test_link_table),
        cmocka_unit_test(test_link_errors),
        cmocka_unit_test(test_formulas),
        cmocka_unit_test(test_bucket_plan),
        cmocka_unit_test(test_buckets_as_train),
        cmocka_unit_test(test_step_overlap),
        cmocka_unit_test(test_step_sync_bn),
        cmocka_unit_test(test_scaling_table),
        cmocka_unit_test(test_pipeline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
