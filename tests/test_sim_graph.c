/* Graphs on the simulated device (backend.h's graph ops, src/backend/sim/sim_graph.c):
 * a capture records without computing and a launch computes what was recorded, as
 * CUDA's; what CUDA refuses while capturing is refused by name (host values, copies,
 * allocations, frees, timer marks); a replay whose host code would change an op, a
 * pointer or a step-dependent scalar fails instead of replaying stale values; memory
 * freed since the capture makes the graph stale; softmax_xent_queued leaves softmax_xent's
 * totals in device memory and reports a bad label when they are read. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#include "backend/backend.h"
#include "core/error.h"

static const herd_backend *sim;

static int setup(void **state)
{
    (void)state;
    sim = herd_backend_sim();
    return sim && sim->set_threads(1) == HERD_OK ? 0 : -1;
}

#define N 64

/* y = alpha * x + y, with alpha and the op read from the region's arguments. */
typedef struct axpy_region {
    float *x, *y;
    float alpha;
    int extra_ops; /* fills after the axpy */
} axpy_region;

static herd_status run_axpy(void *user)
{
    axpy_region *r = user;
    HERD_TRY(sim->axpy(N, r->alpha, r->x, r->y));
    for (int i = 0; i < r->extra_ops; i++)
        HERD_TRY(sim->fill(N, 0.0f, r->x));
    return HERD_OK;
}

static void upload(float *dev, float value)
{
    float h[N];
    for (int i = 0; i < N; i++)
        h[i] = value;
    assert_int_equal(sim->memcpy_h2d(dev, h, sizeof h), HERD_OK);
}

static float first_of(const float *dev)
{
    float h[N];
    assert_int_equal(sim->memcpy_d2h(h, dev, sizeof h), HERD_OK);
    return h[0];
}

static void test_capture_records_and_launch_computes(void **state)
{
    (void)state;
    axpy_region r = {.x = sim->alloc(N * sizeof(float)), .y = sim->alloc(N * sizeof(float)),
                     .alpha = 2.0f};
    upload(r.x, 1.0f);
    upload(r.y, 0.0f);
    herd_graph *g = NULL;
    assert_int_equal(sim->graph_capture(run_axpy, &r, &g), HERD_OK);
    assert_true(first_of(r.y) == 0.0f); /* captured, not computed */
    bool stale = true;
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(sim->graph_launch(g, &stale), HERD_OK);
        assert_false(stale);
        assert_true(first_of(r.y) == 2.0f * (float)i);
    }
    /* A scalar that changed between launches: a CUDA graph would use the captured one. */
    r.alpha = 3.0f;
    assert_int_equal(sim->graph_launch(g, &stale), HERD_ERR_UNSUPPORTED);
    assert_non_null(strstr(herd_last_error(), "graph replay"));
    assert_non_null(strstr(herd_last_error(), "alpha"));
    r.alpha = 2.0f;
    /* So does an op more than the capture made. */
    r.extra_ops = 1;
    assert_int_equal(sim->graph_launch(g, &stale), HERD_ERR_UNSUPPORTED);
    assert_non_null(strstr(herd_last_error(), "fill"));
    r.extra_ops = 0;
    /* And a buffer moved. */
    float *y2 = sim->alloc(N * sizeof(float));
    float *y1 = r.y;
    r.y = y2;
    assert_int_equal(sim->graph_launch(g, &stale), HERD_ERR_UNSUPPORTED);
    assert_non_null(strstr(herd_last_error(), "axpy's y ="));
    r.y = y1;
    assert_int_equal(sim->graph_launch(g, &stale), HERD_OK);
    /* Memory freed since the capture: stale, nothing computed. */
    float before = first_of(r.y);
    sim->free(y2);
    assert_int_equal(sim->graph_launch(g, &stale), HERD_OK);
    assert_true(stale);
    assert_true(first_of(r.y) == before);
    sim->graph_free(g);
    sim->free(r.x);
    sim->free(r.y);
}

/* Regions that do what CUDA refuses while capturing. */
typedef struct bad_region {
    float *buf;
    int what;
} bad_region;

static herd_status run_bad(void *user)
{
    bad_region *r = user;
    float h[N] = {0};
    double sq;
    switch (r->what) {
    case 0: return sim->memcpy_d2h(h, r->buf, sizeof h);
    case 1: return sim->memcpy_h2d(r->buf, h, sizeof h);
    case 2: return sim->sum_squares(N, r->buf, &sq); /* a host result */
    case 3: {
        void *p = sim->alloc(16);
        return p ? HERD_OK : HERD_ERR_NOMEM;
    }
    case 4:
        sim->free(r->buf);
        return HERD_OK;
    default: return sim->timer_mark ? sim->timer_mark(0) : HERD_OK;
    }
}

static void test_refused_inside_a_capture(void **state)
{
    (void)state;
    const char *names[] = {"memcpy_d2h", "memcpy_h2d", "sum_squares", "alloc", "free",
                           "timer_mark"};
    for (int what = 0; what < 6; what++) {
        bad_region r = {.buf = sim->alloc(N * sizeof(float)), .what = what};
        herd_graph *g = (herd_graph *)&r; /* must be reset */
        herd_status st = sim->graph_capture(run_bad, &r, &g);
        print_message("%s: %s\n", names[what], herd_last_error());
        assert_int_not_equal(st, HERD_OK);
        assert_null(g);
        assert_non_null(strstr(herd_last_error(), what == 4 ? "free" : names[what]));
        assert_non_null(strstr(herd_last_error(), "capture"));
        if (what != 4)
            sim->free(r.buf);
        /* The device works as before afterwards: a plain op runs. */
        float *x = sim->alloc(N * sizeof(float));
        assert_int_equal(sim->fill(N, 1.0f, x), HERD_OK);
        assert_true(first_of(x) == 1.0f);
        sim->free(x);
    }
}

typedef struct xent_region {
    float *logits, *dlogits;
    int32_t *labels;
    herd_xent_totals *totals;
} xent_region;

static herd_status run_xent(void *user)
{
    xent_region *r = user;
    return sim->softmax_xent_queued(4, 3, r->logits, r->labels, 0.1f, r->dlogits, r->totals);
}

static void test_queued_loss(void **state)
{
    (void)state;
    xent_region r = {.logits = sim->alloc(12 * sizeof(float)),
                     .dlogits = sim->alloc(12 * sizeof(float)),
                     .labels = sim->alloc(4 * sizeof(int32_t)),
                     .totals = sim->alloc(sizeof(herd_xent_totals))};
    float z[12] = {1, 2, 3, 0.5f, -1, 2, 0, 0, 0, 3, 1, -2};
    int32_t y[4] = {2, 1, 0, 0};
    assert_int_equal(sim->memcpy_h2d(r.logits, z, sizeof z), HERD_OK);
    assert_int_equal(sim->memcpy_h2d(r.labels, y, sizeof y), HERD_OK);
    herd_graph *g;
    assert_int_equal(sim->graph_capture(run_xent, &r, &g), HERD_OK);
    bool stale;
    assert_int_equal(sim->graph_launch(g, &stale), HERD_OK);
    herd_xent_totals t;
    assert_int_equal(sim->memcpy_d2h(&t, r.totals, sizeof t), HERD_OK);
    assert_int_equal(herd_xent_totals_check(&t, 3), HERD_OK);
    /* The waited-for loss, on the CPU's arithmetic. */
    const herd_backend *cpu = herd_backend_cpu();
    float dz[12];
    double loss;
    long correct;
    assert_int_equal(cpu->softmax_xent(4, 3, z, y, 0.1f, dz, &loss, &correct), HERD_OK);
    assert_true(t.loss_sum == loss);
    assert_int_equal(t.correct, correct);
    float got[12];
    assert_int_equal(sim->memcpy_d2h(got, r.dlogits, sizeof got), HERD_OK);
    assert_memory_equal(got, dz, sizeof dz);
    /* A bad label: found when the totals are read, naming it. */
    y[3] = 7;
    assert_int_equal(sim->memcpy_h2d(r.labels, y, sizeof y), HERD_OK);
    assert_int_equal(sim->graph_launch(g, &stale), HERD_OK);
    assert_int_equal(sim->memcpy_d2h(&t, r.totals, sizeof t), HERD_OK);
    assert_int_equal(herd_xent_totals_check(&t, 3), HERD_ERR_INVALID_ARG);
    assert_non_null(strstr(herd_last_error(), "label 7 of sample 3"));
    sim->graph_free(g);
    sim->free(r.logits);
    sim->free(r.dlogits);
    sim->free(r.labels);
    sim->free(r.totals);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture_records_and_launch_computes),
        cmocka_unit_test(test_refused_inside_a_capture),
        cmocka_unit_test(test_queued_loss),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
