/* The communication benchmarks on the single-process communicator: every size
 * verified, the corruption hook caught in every type, fusion, the JSON shape that
 * herd predict reads, the point-to-point matrices of a group of one, the session
 * and the buffers. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tools/bench_internal.h"

static bench_session *local(void)
{
    bench_session *s = NULL;
    assert_herd_ok(bench_session_open("local", false, &s));
    return s;
}

static bench_allreduce_config sweep(bench_type type)
{
    return (bench_allreduce_config){.min_bytes = 8, .max_bytes = 4096, .factor = 4, .iters = 2,
                                    .warmup = 1, .type = type};
}

static void test_sweep_verifies_every_size(void **state)
{
    (void)state;
    bench_session *c = local();
    const bench_type types[] = {BENCH_FLOAT, BENCH_HALF, BENCH_BFLOAT16};
    for (int t = 0; t < 3; t++) {
        bench_allreduce_config cfg = sweep(types[t]);
        bench_allreduce_result r;
        assert_herd_ok(bench_allreduce(c, &cfg, &r));
        assert_int_equal(r.n_rows, 5); /* 8, 32, 128, 512, 2048; 8192 is past 4096 */
        assert_int_equal(r.ranks, 1);
        assert_int_equal(r.hosts, 1);
        assert_string_equal(r.backend, "local");
        assert_int_equal(r.wrong, 0);
        size_t elem = types[t] == BENCH_FLOAT ? 4 : 2;
        for (int i = 0; i < r.n_rows; i++) {
            assert_int_equal(r.rows[i].count * elem, r.rows[i].bytes);
            assert_true(r.rows[i].busbw_gbps == 0); /* one rank: 2(n-1)/n = 0 */
            assert_true(r.rows[i].ref_time_us < 0); /* not asked for */
        }
        assert_int_equal(r.rows[4].bytes, 2048);

        cfg.corrupt = true; /* one flipped element per size must be seen */
        bench_allreduce_result_free(&r);
        assert_herd_ok(bench_allreduce(c, &cfg, &r));
        assert_int_equal(r.wrong, r.n_rows);
        for (int i = 0; i < r.n_rows; i++)
            assert_int_equal(r.rows[i].wrong, 1);
        bench_allreduce_result_free(&r);
    }
    bench_session_close(c);
}

static void test_fusion_and_refusals(void **state)
{
    (void)state;
    bench_session *c = local();
    bench_allreduce_config cfg = sweep(BENCH_BFLOAT16);
    cfg.fused_tensors = 10;
    cfg.min_bytes = 64;
    bench_allreduce_result r;
    assert_herd_ok(bench_allreduce(c, &cfg, &r));
    assert_int_equal(r.n_rows, 0);
    assert_int_equal(r.wrong, 0);
    assert_true(r.unfused_us >= 0 && r.fused_us >= 0);
    bench_allreduce_result_free(&r);

    cfg = sweep(BENCH_FLOAT);
    cfg.compare_reference = true; /* one process has no MPI_Allreduce */
    assert_int_equal(bench_allreduce(c, &cfg, &r), HERD_ERR_UNSUPPORTED);
    assert_non_null(strstr(herd_last_error(), "mpirun"));
    cfg = sweep(BENCH_FLOAT);
    cfg.max_bytes = 4;
    assert_int_equal(bench_allreduce(c, &cfg, &r), HERD_ERR_INVALID_ARG);
    bench_session_close(c);

    assert_true(bench_allreduce_bus_factor(1) == 0);
    assert_true(bench_allreduce_bus_factor(2) == 1);
    assert_true(bench_allreduce_bus_factor(4) == 1.5);
    bench_type t;
    assert_true(bench_parse_type("bfloat16", &t) && t == BENCH_BFLOAT16);
    assert_true(bench_parse_type("half", &t) && t == BENCH_HALF);
    assert_true(bench_parse_type("fp32", &t) && t == BENCH_FLOAT);
    assert_false(bench_parse_type("double", &t));
    assert_string_equal(bench_type_name(BENCH_BFLOAT16), "bfloat16");
    assert_int_equal(bench_type_size(BENCH_HALF), 2);
    assert_int_equal(bench_wire_type(BENCH_HALF), HERD_WIRE_FP16);
    assert_int_equal(bench_allreduce_count(BENCH_FLOAT, 3), 1); /* at least one element */
}

static void test_json_shape(void **state)
{
    (void)state;
    bench_session *c = local();
    bench_allreduce_config cfg = sweep(BENCH_HALF);
    bench_allreduce_result r;
    assert_herd_ok(bench_allreduce(c, &cfg, &r));
    char *dir = tu_tempdir();
    char path[512];
    snprintf(path, sizeof path, "%s/ar.json", dir);
    assert_herd_ok(bench_allreduce_write_json(&cfg, &r, path));
    char *text = tu_read_file(path, NULL);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    assert_string_equal(cJSON_GetObjectItem(root, "collective")->valuestring, "allreduce");
    assert_string_equal(cJSON_GetObjectItem(root, "backend")->valuestring, "local");
    assert_string_equal(cJSON_GetObjectItem(root, "dtype")->valuestring, "half");
    assert_int_equal(cJSON_GetObjectItem(root, "ranks")->valueint, 1);
    assert_int_equal(cJSON_GetObjectItem(root, "hosts")->valueint, 1);
    assert_int_equal(cJSON_GetObjectItem(root, "iters")->valueint, 2);
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(root, "avg_busbw_gbps")));
    cJSON *rows = cJSON_GetObjectItem(root, "results");
    assert_int_equal(cJSON_GetArraySize(rows), r.n_rows);
    static const char *fields[] = {"bytes", "count", "time_us", "algbw_gbps", "busbw_gbps", "wrong"};
    for (int i = 0; i < r.n_rows; i++) {
        cJSON *row = cJSON_GetArrayItem(rows, i);
        for (size_t k = 0; k < sizeof fields / sizeof *fields; k++)
            assert_true(cJSON_IsNumber(cJSON_GetObjectItem(row, fields[k])));
        assert_string_equal(cJSON_GetObjectItem(row, "type")->valuestring, "half");
        assert_true(cJSON_GetObjectItem(row, "bytes")->valuedouble == (double)r.rows[i].bytes);
        assert_null(cJSON_GetObjectItem(row, "mpi_time_us")); /* only with --compare-mpi */
    }
    cJSON_Delete(root);
    snprintf(path, sizeof path, "%s/missing/ar.json", dir);
    assert_int_equal(bench_allreduce_write_json(&cfg, &r, path), HERD_ERR_IO);
    tu_rmtree(dir);
    free(dir);
    bench_allreduce_result_free(&r);
    bench_session_close(c);
}

static void test_p2p_one_rank_and_gpus(void **state)
{
    (void)state;
    bench_session *c = local();
    bench_p2p_config cfg = {.bw_bytes = 1024, .bw_reps = 2, .lat_bytes = 8, .lat_reps = 2};
    bench_p2p_matrices m;
    assert_herd_ok(bench_p2p_ranks(c, &cfg, &m));
    assert_int_equal(m.n, 1);
    assert_true(isnan(m.uni_gbps[0]) && isnan(m.bi_gbps[0]) && isnan(m.lat_us[0]));
    bench_p2p_matrices_free(&m);
    cfg.bw_reps = 0;
    assert_int_equal(bench_p2p_ranks(c, &cfg, &m), HERD_ERR_INVALID_ARG);
    bench_session_close(c);

    int gpus = -1;
    char why[160] = "";
    herd_status st = bench_p2p_gpu_count(&gpus, why, sizeof why);
    assert_true(st == HERD_OK || st == HERD_ERR_UNSUPPORTED);
    assert_true(gpus >= 0);
    if (gpus == 0) /* the CLI prints why the GPU matrices are skipped */
        assert_true(why[0] != '\0');
}

/* What the CLI sees of a session: who this rank is, and every rank's host. */
static void test_session(void **state)
{
    (void)state;
    bench_session *s = local();
    assert_int_equal(bench_session_rank(s), 0);
    assert_int_equal(bench_session_size(s), 1);
    assert_string_equal(bench_session_backend(s), "local");
    assert_true(bench_session_host(s)[0] != '\0');
    bench_host *hosts = NULL;
    assert_herd_ok(bench_session_hosts(s, &hosts));
    assert_string_equal(hosts[0].name, bench_session_host(s));
    free(hosts);
    bench_session_close(s);

    /* nccl only where GPU reductions are asked for (bench allreduce, not p2p); this
     * build or machine may have neither NCCL nor a GPU, so only the refusal is sure. */
    assert_int_equal(bench_session_open("nccl", false, &s), HERD_ERR_UNSUPPORTED);
    assert_null(s);
    assert_int_equal(bench_session_open("carrier-pigeon", true, &s), HERD_ERR_INVALID_ARG);
    assert_null(s);
}

/* Host buffers always; GPU buffers through the cuda backend, or the reason there are none. */
static void test_mem(void **state)
{
    (void)state;
    bench_mem m;
    assert_herd_ok(bench_mem_alloc(&m, 64, false));
    assert_true(m.host && !m.dev && bench_mem_target(&m) == m.host);
    assert_herd_ok(bench_mem_upload(&m, 64));
    bench_mem_free(&m);
    herd_status st = bench_mem_alloc(&m, 64, true);
    if (st != HERD_OK) { /* built without CUDA, or no GPU */
        assert_int_equal(st, HERD_ERR_UNSUPPORTED);
        assert_non_null(strstr(herd_last_error(), "cuda backend"));
        assert_null(m.host);
        return;
    }
    assert_true(m.dev && bench_mem_target(&m) == m.dev);
    memset(m.host, 0x5a, 64);
    assert_herd_ok(bench_mem_upload(&m, 64));
    memset(m.host, 0, 64);
    assert_herd_ok(bench_mem_download(&m, 64));
    assert_int_equal(((unsigned char *)m.host)[63], 0x5a);
    bench_mem_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep_verifies_every_size),
        cmocka_unit_test(test_fusion_and_refusals),
        cmocka_unit_test(test_json_shape),
        cmocka_unit_test(test_p2p_one_rank_and_gpus),
        cmocka_unit_test(test_session),
        cmocka_unit_test(test_mem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
