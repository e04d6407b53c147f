/* A device backend's graphs (backend.h's graph ops; --cuda-graphs): a capture records
 * without computing and each launch computes what was recorded; memory freed since the
 * capture makes the graph stale (nothing computed); a region that waits on the host
 * fails to capture and leaves the device working; softmax_xent_queued leaves
 * softmax_xent's totals in device memory and a bad label is reported when they are
 * read; a bad token inside a captured embedding is reported by the launch, named; a
 * captured dropout draws each launch's mask from the seed in device memory.
 * HERD_TEST_DEVICE picks the device: sim (the default, in make test), whose graphs also
 * refuse by name what CUDA refuses while capturing and fail a replay whose scalars,
 * ops or buffers differ from the capture (src/backend/sim/sim_graph.c); or cuda
 * (bench/gpu/check.sh; exits 77 without a GPU), whose replay uses the captured values. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "herd_config.h"

#include "backend/backend.h"
#include "core/error.h"
#include "core/rng.h"

#if HERD_HAVE_CUDA
#include <cuda_runtime.h>
#endif

static const herd_backend *dev;
static bool sim; /* the simulated device: the rules checked by name */

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
    HERD_TRY(dev->axpy(N, r->alpha, r->x, r->y));
    for (int i = 0; i < r->extra_ops; i++)
        HERD_TRY(dev->fill(N, 0.0f, r->x));
    return HERD_OK;
}

static void upload(float *d, float value)
{
    float h[N];
    for (int i = 0; i < N; i++)
        h[i] = value;
    assert_int_equal(dev->memcpy_h2d(d, h, sizeof h), HERD_OK);
}

static float first_of(const float *d)
{
    float h[N];
    assert_int_equal(dev->memcpy_d2h(h, d, sizeof h), HERD_OK);
    return h[0];
}

/* A capture of region that must succeed, and a launch that must. */
static herd_graph *captured(herd_graph_region region, void *user)
{
    herd_graph *g = NULL;
    assert_int_equal(dev->graph_capture(region, user, &g), HERD_OK);
    return g;
}

static void launched(herd_graph *g)
{
    bool stale;
    assert_int_equal(dev->graph_launch(g, &stale), HERD_OK);
}

static void test_capture_records_and_launch_computes(void **state)
{
    (void)state;
    axpy_region r = {.x = dev->alloc(N * sizeof(float)), .y = dev->alloc(N * sizeof(float)),
                     .alpha = 2.0f};
    upload(r.x, 1.0f);
    upload(r.y, 0.0f);
    herd_graph *g = NULL;
    assert_int_equal(dev->graph_capture(run_axpy, &r, &g), HERD_OK);
    assert_true(first_of(r.y) == 0.0f); /* captured, not computed */
    bool stale = true;
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(dev->graph_launch(g, &stale), HERD_OK);
        assert_false(stale);
        assert_true(first_of(r.y) == 2.0f * (float)i);
    }
    r.alpha = 3.0f; /* a scalar changed after the capture */
    if (sim) {
        /* The simulated replay runs the region again and finds the difference. */
        assert_int_equal(dev->graph_launch(g, &stale), HERD_ERR_UNSUPPORTED);
        assert_non_null(strstr(herd_last_error(), "graph replay"));
        assert_non_null(
            strstr(herd_last_error(), "axpy's alpha = 3 where the capture had axpy's alpha = 2"));
        r.alpha = 2.0f;
        r.extra_ops = 1; /* an op more than the capture made */
        assert_int_equal(dev->graph_launch(g, &stale), HERD_ERR_UNSUPPORTED);
        assert_non_null(strstr(herd_last_error(), "fill"));
        r.extra_ops = 0;
        float *y1 = r.y;
        r.y = dev->alloc(N * sizeof(float)); /* a buffer moved */
        assert_int_equal(dev->graph_launch(g, &stale), HERD_ERR_UNSUPPORTED);
        assert_non_null(strstr(herd_last_error(), "axpy's y ="));
        dev->free(r.y); /* freed since the capture: every later launch is stale */
        r.y = y1;
    } else {
        /* CUDA replays what it captured: the old alpha. */
        assert_int_equal(dev->graph_launch(g, &stale), HERD_OK);
        assert_true(first_of(r.y) == 8.0f);
        dev->free(dev->alloc(N * sizeof(float))); /* a free since the capture */
    }
    float before = first_of(r.y);
    assert_int_equal(dev->graph_launch(g, &stale), HERD_OK);
    assert_true(stale);
    assert_true(first_of(r.y) == before); /* nothing computed */
    dev->graph_free(g);
    /* Captured again, it launches. */
    assert_int_equal(dev->graph_capture(run_axpy, &r, &g), HERD_OK);
    assert_int_equal(dev->graph_launch(g, &stale), HERD_OK);
    assert_false(stale);
    assert_true(first_of(r.y) == before + 2.0f);
    dev->graph_free(g);
    dev->free(r.x);
    dev->free(r.y);
}

/* Regions that do what CUDA refuses while capturing. */
typedef struct bad_region {
    float *buf;
    int what;
} bad_region;

enum { D2H, SUM_SQUARES, H2D, ALLOC, FREE, TIMER, N_BAD };
static const char *const bad_names[N_BAD] = {"memcpy_d2h", "sum_squares", "memcpy_h2d", "alloc",
                                             "free", "timer_mark"};

static herd_status run_bad(void *user)
{
    bad_region *r = user;
    float h[N] = {0};
    double sq;
    switch (r->what) {
    case D2H: return dev->memcpy_d2h(h, r->buf, sizeof h);
    case SUM_SQUARES: return dev->sum_squares(N, r->buf, &sq); /* a host result */
    case H2D: return dev->memcpy_h2d(r->buf, h, sizeof h);
    case ALLOC: {
        void *p = dev->alloc(16);
        return p ? HERD_OK : HERD_ERR_NOMEM;
    }
    case FREE:
        dev->free(r->buf);
        return HERD_OK;
    default: return dev->timer_mark(0);
    }
}

static void test_refused_inside_a_capture(void **state)
{
    (void)state;
    /* CUDA refuses waiting for the stream while capturing; the simulated device refuses
     * every one of them, by name. */
    int cases = sim ? N_BAD : H2D;
    for (int what = 0; what < cases; what++) {
        bad_region r = {.buf = dev->alloc(N * sizeof(float)), .what = what};
        herd_graph *g = (herd_graph *)&r; /* must be reset */
        herd_status st = dev->graph_capture(run_bad, &r, &g);
        print_message("%s: %s\n", bad_names[what], herd_last_error());
        assert_int_not_equal(st, HERD_OK);
        assert_null(g);
        if (sim) {
            assert_non_null(strstr(herd_last_error(), bad_names[what]));
            assert_non_null(strstr(herd_last_error(), "capture"));
        }
        if (what != FREE)
            dev->free(r.buf);
        /* The device works as before afterwards: a plain op runs. */
        float *x = dev->alloc(N * sizeof(float));
        assert_int_equal(dev->fill(N, 1.0f, x), HERD_OK);
        assert_true(first_of(x) == 1.0f);
        dev->free(x);
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
    return dev->softmax_xent_queued(4, 3, r->logits, r->labels, 0.1f, r->dlogits, r->totals);
}

static void test_queued_loss(void **state)
{
    (void)state;
    xent_region r = {.logits = dev->alloc(12 * sizeof(float)),
                     .dlogits = dev->alloc(12 * sizeof(float)),
                     .labels = dev->alloc(4 * sizeof(int32_t)),
                     .totals = dev->alloc(sizeof(herd_xent_totals))};
    float z[12] = {1, 2, 3, 0.5f, -1, 2, 0, 0, 0, 3, 1, -2};
    int32_t y[4] = {2, 1, 0, 0};
    assert_int_equal(dev->memcpy_h2d(r.logits, z, sizeof z), HERD_OK);
    assert_int_equal(dev->memcpy_h2d(r.labels, y, sizeof y), HERD_OK);
    herd_graph *g = captured(run_xent, &r);
    launched(g);
    herd_xent_totals t;
    assert_int_equal(dev->memcpy_d2h(&t, r.totals, sizeof t), HERD_OK);
    assert_int_equal(herd_xent_totals_check(&t, 3), HERD_OK);
    /* The waited-for loss: the CPU's bits on the simulated device, its value on CUDA. */
    const herd_backend *cpu = herd_backend_cpu();
    float dz[12], got[12];
    double loss;
    long correct;
    assert_int_equal(cpu->softmax_xent(4, 3, z, y, 0.1f, dz, &loss, &correct), HERD_OK);
    assert_true(fabs(t.loss_sum - loss) <= (sim ? 0.0 : 1e-6 * fabs(loss)));
    assert_int_equal(t.correct, correct);
    assert_int_equal(dev->memcpy_d2h(got, r.dlogits, sizeof got), HERD_OK);
    for (int i = 0; i < 12; i++)
        assert_true(fabsf(got[i] - dz[i]) <= (sim ? 0.0f : 1e-6f));
    /* A bad label: found when the totals are read, naming it. */
    y[3] = 7;
    assert_int_equal(dev->memcpy_h2d(r.labels, y, sizeof y), HERD_OK);
    launched(g);
    assert_int_equal(dev->memcpy_d2h(&t, r.totals, sizeof t), HERD_OK);
    tu_expect_error(herd_xent_totals_check(&t, 3), HERD_ERR_INVALID_ARG, "label 7 of sample 3",
                    NULL);
    dev->graph_free(g);
    dev->free(r.logits);
    dev->free(r.dlogits);
    dev->free(r.labels);
    dev->free(r.totals);
}

typedef struct embed_region {
    float *ids, *wte, *y;
} embed_region;

static herd_status run_embed(void *user)
{
    embed_region *r = user;
    return dev->embedding_fwd(2, 3, 8, 4, 0, 4, r->ids, r->wte, NULL, r->y);
}

typedef struct drop_region {
    float *x, *y, *mask;
    uint64_t *seed;
} drop_region;

static herd_status run_drop(void *user)
{
    drop_region *r = user;
    return dev->dropout_fwd_seeded(N, r->x, r->y, r->mask, 0.5f, r->seed, 7);
}

/* Dropout in a graph draws the mask of the seed written before each launch: the masks
 * dropout_fwd draws from herd_mix64(seed, 7), bit for bit. */
static void test_seeded_dropout(void **state)
{
    (void)state;
    drop_region r = {.x = dev->alloc(N * sizeof(float)), .y = dev->alloc(N * sizeof(float)),
                     .mask = dev->alloc(N * sizeof(float)), .seed = dev->alloc(sizeof(uint64_t))};
    float *y2 = dev->alloc(N * sizeof(float)), *mask2 = dev->alloc(N * sizeof(float));
    upload(r.x, 1.5f);
    uint64_t seed = 11;
    assert_int_equal(dev->memcpy_h2d(r.seed, &seed, sizeof seed), HERD_OK);
    herd_graph *g = captured(run_drop, &r);
    int kept_differ = 0;
    float last[N] = {0};
    for (seed = 11; seed < 14; seed++) {
        assert_int_equal(dev->memcpy_h2d(r.seed, &seed, sizeof seed), HERD_OK);
        launched(g);
        assert_int_equal(dev->dropout_fwd(N, r.x, y2, mask2, 0.5f, herd_mix64(seed, 7)), HERD_OK);
        float a[N], b[N], ma[N], mb[N];
        assert_int_equal(dev->memcpy_d2h(a, r.y, sizeof a), HERD_OK);
        assert_int_equal(dev->memcpy_d2h(b, y2, sizeof b), HERD_OK);
        assert_int_equal(dev->memcpy_d2h(ma, r.mask, sizeof ma), HERD_OK);
        assert_int_equal(dev->memcpy_d2h(mb, mask2, sizeof mb), HERD_OK);
        assert_memory_equal(a, b, sizeof a);
        assert_memory_equal(ma, mb, sizeof ma);
        kept_differ += memcmp(ma, last, sizeof ma) != 0;
        memcpy(last, ma, sizeof last);
    }
    assert_int_equal(kept_differ, 3); /* each launch its own mask */
    dev->graph_free(g);
    dev->free(r.x), dev->free(r.y), dev->free(r.mask), dev->free(r.seed);
    dev->free(y2), dev->free(mask2);
}

/* A captured embedding's token check: the launch reports a bad token, naming it. */
static void test_token_check_in_a_graph(void **state)
{
    (void)state;
    float ids[6] = {0, 1, 2, 3, 2, 1}, wte[32] = {0};
    embed_region r = {.ids = dev->alloc(sizeof ids), .wte = dev->alloc(sizeof wte),
                      .y = dev->alloc(48 * sizeof(float))};
    assert_int_equal(dev->memcpy_h2d(r.ids, ids, sizeof ids), HERD_OK);
    assert_int_equal(dev->memcpy_h2d(r.wte, wte, sizeof wte), HERD_OK);
    herd_graph *g = captured(run_embed, &r);
    launched(g);
    ids[4] = 2.5f;
    bool stale;
    assert_int_equal(dev->memcpy_h2d(r.ids, ids, sizeof ids), HERD_OK);
    tu_expect_error(dev->graph_launch(g, &stale), HERD_ERR_INVALID_ARG,
                    "token 2.5 at sample 1, position 1", "vocabulary of 4");
    ids[4] = 1;
    assert_int_equal(dev->memcpy_h2d(r.ids, ids, sizeof ids), HERD_OK);
    launched(g); /* and on again */
    dev->graph_free(g);
    dev->free(r.ids);
    dev->free(r.wte);
    dev->free(r.y);
}

int main(void)
{
    const char *name = getenv("HERD_TEST_DEVICE");
    name = name && *name ? name : "sim";
    if (strcmp(name, "cuda") == 0)
        dev = tu_cuda_or_exit();
    else if (herd_backend_for(name, &dev) != HERD_OK) {
        printf("FAILED: device %s: %s\n", name, herd_last_error());
        return 1;
    }
    sim = strcmp(name, "sim") == 0;
    if (!dev->graph_capture) {
        printf("FAILED: the %s backend has no graphs\n", dev->name);
        return 1;
    }
    printf("graphs on %s\n", dev->name);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture_records_and_launch_computes),
        cmocka_unit_test(test_refused_inside_a_capture),
        cmocka_unit_test(test_queued_loss),
        cmocka_unit_test(test_token_check_in_a_graph),
        cmocka_unit_test(test_seeded_dropout),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
#if HERD_HAVE_CUDA
    if (!sim) {
        if (failed == 0 && cudaDeviceSynchronize() != cudaSuccess)
            failed = 1; /* a kernel faulted after its last check */
        herd_backend_cuda_shutdown();
    }
#endif
    return failed;
}
