/* Dynamic loss scaling: the scale rule, the CPU unscale-and-check op, and training
 * that skips an overflowing step (parameters unchanged, scale halved) and grows the
 * scale after a window of clean steps. The CUDA op is checked in test_backend_cuda. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "backend/backend.h"
#include "data/dataset.h"
#include "nn/model.h"
#include "optim/loss_scale.h"

static void test_rule(void **state)
{
    (void)state;
    herd_loss_scaler s;
    assert_herd_ok(herd_loss_scaler_init(&s, 8.0f, 3));
    assert_herd_ok(herd_loss_scaler_update(&s, false));
    assert_herd_ok(herd_loss_scaler_update(&s, false));
    assert_true(s.scale == 8.0f); /* not yet a whole window */
    assert_herd_ok(herd_loss_scaler_update(&s, false));
    assert_true(s.scale == 16.0f);
    assert_herd_ok(herd_loss_scaler_update(&s, false));
    assert_herd_ok(herd_loss_scaler_update(&s, true)); /* overflow: halve, window restarts */
    assert_true(s.scale == 8.0f);
    assert_int_equal(s.skipped, 1);
    assert_herd_ok(herd_loss_scaler_update(&s, false));
    assert_herd_ok(herd_loss_scaler_update(&s, false));
    assert_true(s.scale == 8.0f);
    assert_herd_ok(herd_loss_scaler_update(&s, false));
    assert_true(s.scale == 16.0f);

    /* Growth stops before the scale would become infinite. */
    assert_herd_ok(herd_loss_scaler_init(&s, FLT_MAX, 1));
    assert_herd_ok(herd_loss_scaler_update(&s, false));
    assert_true(isfinite(s.scale));

    /* Overflow at every scale is divergence, reported rather than skipped forever. */
    assert_herd_ok(herd_loss_scaler_init(&s, 1.0f, 10));
    herd_status st = HERD_OK;
    int steps = 0;
    while (st == HERD_OK && steps < 100) {
        st = herd_loss_scaler_update(&s, true);
        steps++;
    }
    assert_int_not_equal(st, HERD_OK);
    assert_non_null(strstr(herd_last_error(), "diverged"));
    assert_int_equal(steps, 25); /* 1 -> 2^-25, below the smallest fp16 subnormal */

    assert_int_not_equal(herd_loss_scaler_init(&s, 0.5f, 10), HERD_OK);
    assert_int_not_equal(herd_loss_scaler_init(&s, 1024.0f, 0), HERD_OK);
}

static void test_cpu_op(void **state)
{
    (void)state;
    const herd_backend *be = herd_backend_cpu();
    enum { N = 100000 }; /* above the threaded threshold */
    float *x = malloc(N * sizeof *x);
    tu_fill_uniform(x, N, -4.0f, 4.0f, 7);
    float *want = malloc(N * sizeof *want);
    for (int i = 0; i < N; i++)
        want[i] = x[i] * 0.25f;
    bool found = true;
    assert_herd_ok(be->grad_unscale_check(N, x, 0.25f, &found));
    assert_false(found);
    assert_memory_equal(x, want, N * sizeof *x); /* a power of two scales exactly */

    x[N - 1] = INFINITY;
    assert_herd_ok(be->grad_unscale_check(N, x, 1.0f, &found));
    assert_true(found);
    x[N - 1] = 0.0f;
    x[3] = NAN;
    assert_herd_ok(be->grad_unscale_check(N, x, 0.5f, &found));
    assert_true(found);
    /* Finite inputs that overflow once scaled are overflow too. */
    x[3] = 1e30f;
    assert_herd_ok(be->grad_unscale_check(N, x, 1e10f, &found));
    assert_true(found);
    /* Without a flag it only scales; an empty buffer is fine. */
    x[0] = 3.0f;
    assert_herd_ok(be->grad_unscale_check(1, x, 2.0f, NULL));
    assert_true(x[0] == 6.0f);
    assert_herd_ok(be->grad_unscale_check(0, NULL, 2.0f, &found));
    assert_false(found);
    free(x);
    free(want);
}

typedef struct trace {
    int steps;
    double scale[16];
    long skipped[16];
} trace;

static bool record(const herd_progress *p, void *user)
{
    trace *t = user;
    if (!p->epoch_end && t->steps < 16) {
        t->scale[t->steps] = p->loss_scale;
        t->skipped[t->steps] = p->skipped_steps;
        t->steps++;
    }
    return true;
}

/* init 0 trains without a loss scaler. */
static void train(herd_dataset *ds, herd_model *m, float init, int window, long steps,
                  trace *t, herd_train_result *res)
{
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    cfg.epochs = 1;
    cfg.batch_size = 16;
    cfg.threads = 1;
    cfg.max_steps = steps;
    cfg.dynamic_loss_scale = init > 0;
    if (cfg.dynamic_loss_scale) {
        cfg.loss_scale_init = init;
        cfg.loss_scale_window = window;
    }
    memset(t, 0, sizeof *t);
    assert_herd_ok(herd_train(m, ds, NULL, &cfg, record, t, res));
}

/* On `device`: a device's parameters are compared through host copies. */
static void check_overflow_skips_step(const char *device)
{
    herd_dataset *ds;
    assert_herd_ok(herd_dataset_open("synthetic:1,12,12,4,64", HERD_SPLIT_TRAIN, &ds));
    /* Crafted input: a tiny normalisation std makes pixels about 1e6, so with the
     * largest power-of-two scale the first layer's weight gradient (input x scaled
     * output gradient) overflows while the forward pass stays finite. */
    ds->std[0] = 1e-6f;
    herd_model *m;
    assert_herd_ok(herd_model_create_device("mlp", ds, device, &m));
    size_t n = m->n_param_floats;
    float *before, *after, *bb, *ab;
    assert_herd_ok(herd_model_stage(m, true, &before, &bb));
    const float init = 0x1p127f;
    trace t;
    herd_train_result res;
    train(ds, m, init, 2000, 1, &t, &res);
    assert_int_equal(res.steps, 1);
    assert_int_equal(res.skipped_steps, 1);
    assert_true(res.loss_scale == init / 2);
    assert_int_equal(t.steps, 1);
    assert_true(t.scale[0] == init / 2);
    assert_int_equal(t.skipped[0], 1);
    assert_true(isfinite(res.train_loss)); /* the forward pass did not overflow */
    /* The skipped step left every parameter as it was. */
    assert_herd_ok(herd_model_stage(m, true, &after, &ab));
    assert_memory_equal(after, before, n * sizeof *before);
    free(before), free(bb), free(after), free(ab);
    herd_model_free(m);
    herd_dataset_free(ds);
}

static void test_overflow_skips_step(void **state)
{
    (void)state;
    check_overflow_skips_step("cpu");
    check_overflow_skips_step("sim"); /* the skip decided from the device's flag */
    if (herd_backend_cuda_visible())
        check_overflow_skips_step("cuda");
}

static void test_growth_after_window(void **state)
{
    (void)state;
    herd_dataset *ds;
    assert_herd_ok(herd_dataset_open("synthetic:1,12,12,4,256", HERD_SPLIT_TRAIN, &ds));
    herd_model *m;
    assert_herd_ok(herd_model_create("mlp", ds, &m));
    size_t n = m->n_param_floats;
    float *before = malloc(n * sizeof *before);
    memcpy(before, m->params, n * sizeof *before);
    trace t;
    herd_train_result res;
    train(ds, m, 1024.0f, 3, 7, &t, &res);
    static const double want[7] = {1024, 1024, 2048, 2048, 2048, 4096, 4096};
    assert_int_equal(t.steps, 7);
    for (int i = 0; i < 7; i++) {
        if (t.scale[i] != want[i])
            fail_msg("after step %d the scale is %g, expected %g", i + 1, t.scale[i], want[i]);
        assert_int_equal(t.skipped[i], 0);
    }
    assert_int_equal(res.skipped_steps, 0);
    assert_true(memcmp(m->params, before, n * sizeof *before) != 0); /* steps were applied */
    free(before);
    herd_model_free(m);
    herd_dataset_free(ds);
}

/* Loss scaling must not change training: scaled-then-unscaled gradients with a power
 * of two scale are the same floats, so the weights match a run without it. */
static void test_same_result_as_unscaled(void **state)
{
    (void)state;
    herd_dataset *ds;
    assert_herd_ok(herd_dataset_open("synthetic:1,12,12,4,128", HERD_SPLIT_TRAIN, &ds));
    herd_model *a, *b;
    assert_herd_ok(herd_model_create("mlp", ds, &a));
    assert_herd_ok(herd_model_create("mlp", ds, &b));
    trace ta, tb;
    herd_train_result ra, rb;
    train(ds, a, 4096.0f, 2000, 4, &ta, &ra);
    train(ds, b, 0, 0, 4, &tb, &rb);
    /* The scaled run really scaled (every step at 4096, none skipped); the other did not. */
    assert_int_equal(ra.steps, 4);
    assert_int_equal(ta.steps, 4);
    for (int i = 0; i < 4; i++)
        assert_true(ta.scale[i] == 4096.0);
    assert_true(ra.loss_scale == 4096.0);
    assert_int_equal(ra.skipped_steps, 0);
    assert_int_equal(rb.steps, 4);
    assert_true(rb.loss_scale == 0.0);
    if (memcmp(a->params, b->params, a->n_param_floats * sizeof *a->params) != 0)
        fail_msg("loss-scaled training differs from plain training by %g (relative)",
                 tu_max_rel_err(a->params, b->params, a->n_param_floats));
    herd_model_free(a);
    herd_model_free(b);
    herd_dataset_free(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule),
        cmocka_unit_test(test_cpu_op),
        cmocka_unit_test(test_overflow_skips_step),
        cmocka_unit_test(test_growth_after_window),
        cmocka_unit_test(test_same_result_as_unscaled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
