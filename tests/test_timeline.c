/* The timeline: the clock offset estimator, drift correction, the JSON it writes,
 * and a whole trace on the single-process communicator. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "core/clock.h"
#include "obs/timeline.h"

static void test_offset_from_shortest_round(void **state)
{
    (void)state;
    /* Peer clock = ours + 0.25 s. Slow rounds have lopsided delays that would bias a
     * mean; the 2 µs round is symmetric and must decide. */
    const double off = 0.25, delays[][3] = {{1e-3, 9e-3, 5e-6}, {1e-6, 1e-6, 3e-6},
                                             {4e-4, 2e-6, 1e-6}, {2e-5, 7e-5, 2e-6}};
    double rounds[4 * 4];
    for (int i = 0; i < 4; i++) {
        double *r = rounds + 4 * i, t = 100.0 + i;
        r[0] = t;
        r[1] = t + delays[i][0] + off;
        r[2] = r[1] + delays[i][2];
        r[3] = r[2] - off + delays[i][1];
    }
    double offset, rtt;
    herd_clock_offset(rounds, 4, &offset, &rtt);
    assert_true(fabs(offset - off) < 1e-9);
    assert_true(fabs(rtt - 2e-6) < 1e-9);

    /* A lopsided shortest round errs by at most half its round trip. */
    double skewed[4] = {0, 3e-6 + off, 3e-6 + off, 4e-6};
    herd_clock_offset(skewed, 1, &offset, &rtt);
    assert_true(fabs(offset - off) <= rtt / 2 + 1e-12);
}

static void test_clock_map_interpolates_drift(void **state)
{
    (void)state;
    /* Offset 1 s at rank-0 time 10, 2 s at 20: drift is linear in between. */
    herd_clock_map m = {.since = 10, .until = 20, .offset_since = 1, .offset_until = 2};
    assert_true(fabs(herd_clock_map_apply(&m, 11) - 10) < 1e-9);
    assert_true(fabs(herd_clock_map_apply(&m, 16.5) - 15) < 1e-9); /* 15 + 1.5 */
    assert_true(fabs(herd_clock_map_apply(&m, 22) - 20) < 1e-9);
    assert_true(fabs(herd_clock_map_apply(&m, 5) - 4) < 1e-9);     /* before: first offset */
    assert_true(fabs(herd_clock_map_apply(&m, 40) - 38) < 1e-9);   /* after: last offset */
    herd_clock_map once = {.since = 3, .until = 3, .offset_since = -0.5, .offset_until = -0.5};
    assert_true(fabs(herd_clock_map_apply(&once, 7) - 7.5) < 1e-9);
}

static const cJSON *field(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        fail_msg("no '%s' in %s", key, cJSON_PrintUnformatted(o));
    return v;
}

static double num(const cJSON *o, const char *key) { return field(o, key)->valuedouble; }
static const char *str(const cJSON *o, const char *key) { return field(o, key)->valuestring; }

static void test_write_events(void **state)
{
    (void)state;
    herd_tl_event ev[3] = {
        {.t0 = 12.0, .t1 = 12.5, .a = 2, .b = 7, .kind = HERD_TL_STEP},
        {.t0 = 12.1, .t1 = 12.2, .kind = HERD_TL_BWD_LAYER, .label = "conv \"1\""},
        {.t0 = 12.3, .t1 = 12.4, .queued = 25e-6, .a = 4096, .b = 7, .kind = HERD_TL_ALLREDUCE,
         .label = "allreduce bucket 3"},
    };
    /* This rank's clock runs 2 s ahead of rank 0's, whose trace began at 9.5 s. */
    herd_clock_map map = {.since = 0, .until = 100, .offset_since = 2, .offset_until = 2};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    long written = 0;
    fputc('[', f);
    herd_timeline_write_events(f, ev, 3, 5, &map, 9.5, &written);
    fputc(']', f);
    fclose(f);
    assert_int_equal(written, 3);
    cJSON *doc = cJSON_Parse(text);
    if (!doc)
        fail_msg("not JSON: %s", text);
    assert_int_equal(cJSON_GetArraySize(doc), 3);

    const cJSON *step = cJSON_GetArrayItem(doc, 0);
    assert_string_equal(str(step, "ph"), "X");
    assert_string_equal(str(step, "name"), "step");
    assert_string_equal(str(step, "cat"), "step");
    assert_true(fabs(num(step, "ts") - 0.5e6) < 1e-3); /* 12 - 2 - 9.5 s */
    assert_true(fabs(num(step, "dur") - 0.5e6) < 1e-3);
    assert_int_equal((int)num(step, "pid"), 5);
    assert_int_equal((int)num(step, "tid"), 0);
    assert_int_equal((int)num(field(step, "args"), "epoch"), 2);
    assert_int_equal((int)num(field(step, "args"), "step"), 7);

    const cJSON *layer = cJSON_GetArrayItem(doc, 1);
    assert_string_equal(str(layer, "name"), "bwd conv \"1\""); /* escaped and read back */
    assert_string_equal(str(layer, "cat"), "layer");

    const cJSON *comm = cJSON_GetArrayItem(doc, 2);
    assert_string_equal(str(comm, "name"), "allreduce bucket 3");
    assert_string_equal(str(comm, "cat"), "comm");
    assert_int_equal((int)num(comm, "tid"), 1);
    const cJSON *args = field(comm, "args");
    assert_int_equal((int)num(args, "bytes"), 4096);
    assert_int_equal((int)num(args, "step"), 7);
    assert_true(fabs(num(args, "queued_us") - 25) < 1e-6);
    cJSON_Delete(doc);
    free(text);
}

/* With drift, ts - queued_us must still be the launch time on rank 0's clock. */
static void test_queued_on_rank0_clock(void **state)
{
    (void)state;
    herd_tl_event ev = {.t0 = 50.5, .t1 = 50.6, .queued = 0.5, .a = 8, .b = 1,
                        .kind = HERD_TL_ALLREDUCE, .label = "allreduce bucket 0"};
    herd_clock_map map = {.since = 0, .until = 100, .offset_since = 0, .offset_until = 1};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    long written = 0;
    herd_timeline_write_events(f, &ev, 1, 1, &map, 0, &written);
    fclose(f);
    cJSON *o = cJSON_Parse(text);
    assert_non_null(o);
    double launch_us = num(o, "ts") - num(field(o, "args"), "queued_us");
    assert_true(fabs(launch_us - 1e6 * herd_clock_map_apply(&map, 50.0)) < 0.01);
    assert_true(fabs(num(o, "ts") - 1e6 * herd_clock_map_apply(&map, 50.5)) < 0.01);
    cJSON_Delete(o);
    free(text);
}

/* More events than the buffers first hold, over two flushes: none lost, all nested. */
static void test_local_trace(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char path[512];
    snprintf(path, sizeof path, "%s/t.json", dir);
    herd_comm *c;
    assert_herd_ok(herd_comm_local_create(&c));
    herd_timeline *tl;
    assert_herd_ok(herd_timeline_open(path, c, 1, &tl));
    const int steps = 40, layers = 30;
    double t = herd_now(); /* after the trace began: ts >= 0 */
    for (int s = 1; s <= steps; s++) {
        herd_timeline_begin_step(tl, 1 + s / 20, s);
        double t0 = t;
        for (int l = 0; l < layers; l++, t += 1e-3)
            herd_timeline_add(tl, HERD_TL_FWD_LAYER, "dense", t, t + 1e-3);
        herd_timeline_add(tl, HERD_TL_FORWARD, NULL, t0, t);
        herd_timeline_comm(tl, "allreduce bucket 0", t - 1e-3, t, t + 2e-3, 400);
        t += 3e-3;
        herd_timeline_add(tl, HERD_TL_STEP, NULL, t0, t);
        if (s == steps / 2)
            assert_herd_ok(herd_timeline_flush(tl));
    }
    herd_timeline_add(tl, HERD_TL_EVALUATE, NULL, t, t + 0.1);
    assert_herd_ok(herd_timeline_close(tl));
    herd_comm_destroy(c);

    char *text = tu_read_file(path, NULL);
    cJSON *doc = cJSON_Parse(text);
    if (!doc)
        fail_msg("not JSON: %.300s", text);
    assert_string_equal(str(doc, "displayTimeUnit"), "ms");
    const cJSON *other = field(doc, "otherData");
    assert_string_equal(str(other, "herd_version"), HERD_VERSION);
    assert_int_equal((int)num(other, "ranks"), 1);
    assert_int_equal(cJSON_GetArraySize(field(other, "clock_offsets_us")), 1);
    assert_int_equal((int)num(other, "dropped_events"), 0);

    int counts[HERD_TL_KINDS] = {0}, meta = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, field(doc, "traceEvents"))
    {
        if (strcmp(str(e, "ph"), "M") == 0) {
            meta++;
            if (strcmp(str(e, "name"), "process_name") == 0)
                assert_true(strncmp(str(field(e, "args"), "name"), "rank 0 (", 8) == 0);
            continue;
        }
        const char *name = str(e, "name");
        herd_tl_kind k = strcmp(name, "step") == 0        ? HERD_TL_STEP
                         : strcmp(name, "forward") == 0   ? HERD_TL_FORWARD
                         : strcmp(name, "fwd dense") == 0 ? HERD_TL_FWD_LAYER
                         : strcmp(name, "evaluate") == 0  ? HERD_TL_EVALUATE
                                                          : HERD_TL_ALLREDUCE;
        if (k == HERD_TL_ALLREDUCE)
            assert_string_equal(name, "allreduce bucket 0");
        counts[k]++;
        assert_true(num(e, "ts") >= -1e-3 && num(e, "dur") >= 0);
    }
    assert_int_equal(meta, 4); /* process name and order, two thread names */
    assert_int_equal(counts[HERD_TL_STEP], steps);
    assert_int_equal(counts[HERD_TL_FORWARD], steps);
    assert_int_equal(counts[HERD_TL_FWD_LAYER], steps * layers);
    assert_int_equal(counts[HERD_TL_ALLREDUCE], steps);
    assert_int_equal(counts[HERD_TL_EVALUATE], 1);
    cJSON_Delete(doc);
    free(text);
    tu_rmtree(dir);
    free(dir);
}

static void test_unwritable_path(void **state)
{
    (void)state;
    herd_comm *c;
    assert_herd_ok(herd_comm_local_create(&c));
    herd_timeline *tl = (herd_timeline *)c; /* must be reset to NULL */
    assert_int_equal(herd_timeline_open("/nonexistent-dir/t.json", c, 10, &tl), HERD_ERR_IO);
    assert_null(tl);
    assert_non_null(strstr(herd_last_error(), "/nonexistent-dir/t.json"));
    herd_comm_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_offset_from_shortest_round),
        cmocka_unit_test(test_clock_map_interpolates_drift),
        cmocka_unit_test(test_write_events),
        cmocka_unit_test(test_queued_on_rank0_clock),
        cmocka_unit_test(test_local_trace),
        cmocka_unit_test(test_unwritable_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
