/* Phase times on a device's clock (train/phase_clock.c): with a fake timer whose
 * marks the test places, the phases are the time between the marks, gaps between
 * micro-batches count nowhere, marks before a step's start are ignored, and a step of
 * more marks than the ring holds reads the same sums. With the CPU backend behind a
 * timer on host clocks, training steps go through the same code and the phases add
 * up to no more than the step, with the weights bitwise those of the plain CPU. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "core/clock.h"
#include "optim/optim.h"
#include "train/phase_clock.h"
#include "train/step.h"

/* ---- a fake device clock: each mark reads fake_now */
static double fake_now, fake_marks[HERD_TIMER_SLOTS];
static int fake_waits, marks_made;

static herd_status fake_mark(int slot)
{
    assert_true(slot >= 0 && slot < HERD_TIMER_SLOTS);
    fake_marks[slot] = fake_now;
    marks_made++;
    return HERD_OK;
}

static herd_status fake_elapsed(int from, int to, double *seconds)
{
    fake_waits++;
    *seconds = fake_marks[to] - fake_marks[from];
    return HERD_OK;
}

static void after(herd_phase_clock *c, double dt, herd_phase ph)
{
    fake_now += dt;
    assert_herd_ok(herd_phase_mark(c, ph));
}

static void test_marks(void **state)
{
    (void)state;
    herd_backend be = *herd_backend_cpu();
    herd_phase_clock c;
    herd_phase_clock_init(&c, &be);
    assert_false(herd_phase_clock_timing(&c)); /* no timer: host clocks */
    be.timer_mark = fake_mark;
    be.timer_elapsed = fake_elapsed;
    herd_phase_clock_init(&c, &be);
    marks_made = 0;
    /* Marks before a step's start (a pipeline's step) do nothing. */
    after(&c, 1, HERD_PHASE_COMM);
    assert_int_equal(marks_made, 0);
    herd_phase_times t = {.forward = 9, .data_wait = 7, .total = 30};
    assert_herd_ok(herd_phase_clock_finish(&c, &t, NULL));
    assert_true(t.forward == 9); /* untouched */
    /* Two micro-batches, a gap between them, reductions and the update. */
    after(&c, 100, HERD_PHASE_START);
    assert_true(herd_phase_clock_timing(&c));
    after(&c, 0.25, HERD_PHASE_FORWARD);
    after(&c, 0.5, HERD_PHASE_BACKWARD);
    after(&c, 8, HERD_PHASE_GAP);
    after(&c, 0.125, HERD_PHASE_FORWARD);
    after(&c, 0.0625, HERD_PHASE_COMM); /* a ZeRO gather inside the forward */
    after(&c, 0.125, HERD_PHASE_FORWARD);
    after(&c, 0.5, HERD_PHASE_BACKWARD);
    after(&c, 2, HERD_PHASE_COMM);
    after(&c, 1, HERD_PHASE_OPTIMIZER);
    fake_waits = 0;
    assert_herd_ok(herd_phase_clock_finish(&c, &t, NULL));
    assert_true(t.forward == 0.5 && t.backward == 1 && t.comm_wait == 2.0625 &&
                t.optimizer == 1);
    assert_true(t.data_wait == 7 && t.total == 30); /* the caller's */
    assert_false(herd_phase_clock_timing(&c));
    /* The next step starts afresh. */
    after(&c, 3, HERD_PHASE_START);
    after(&c, 0.5, HERD_PHASE_FORWARD);
    after(&c, 0.5, HERD_PHASE_BACKWARD);
    after(&c, 0.5, HERD_PHASE_COMM);
    after(&c, 0.5, HERD_PHASE_OPTIMIZER);
    assert_herd_ok(herd_phase_clock_finish(&c, &t, NULL));
    assert_true(t.forward == 0.5 && t.backward == 0.5 && t.comm_wait == 0.5 &&
                t.optimizer == 0.5);
}

static void test_ring_overflow(void **state)
{
    (void)state;
    herd_backend be = *herd_backend_cpu();
    be.timer_mark = fake_mark;
    be.timer_elapsed = fake_elapsed;
    herd_phase_clock c;
    herd_phase_clock_init(&c, &be);
    /* 200 micro-batches: 602 marks, more than twice the ring. */
    const int micro = 200;
    fake_now = 0;
    marks_made = fake_waits = 0;
    for (int k = 0; k < micro; k++) {
        after(&c, 1, k == 0 ? HERD_PHASE_START : HERD_PHASE_GAP);
        after(&c, 0.25, HERD_PHASE_FORWARD);
        after(&c, 0.5, HERD_PHASE_BACKWARD);
    }
    after(&c, 0.125, HERD_PHASE_COMM);
    after(&c, 0.0625, HERD_PHASE_OPTIMIZER);
    herd_phase_times t = {0};
    assert_herd_ok(herd_phase_clock_finish(&c, &t, NULL));
    assert_int_equal(marks_made, 3 * micro + 2);
    assert_true(t.forward == 0.25 * micro && t.backward == 0.5 * micro);
    assert_true(t.comm_wait == 0.125 && t.optimizer == 0.0625);
}

/* ---- the CPU backend behind a timer on host clocks: the training step's path */
static double host_marks[HERD_TIMER_SLOTS];

static herd_status host_mark(int slot)
{
    host_marks[slot] = herd_now();
    marks_made++;
    return HERD_OK;
}

static herd_status host_elapsed(int from, int to, double *seconds)
{
    *seconds = host_marks[to] - host_marks[from];
    return HERD_OK;
}

/* `steps` steps of n_micro micro-batches of mlp on synthetic data on device (timed:
 * the CPU backend's ops with a timer instead); the weights in *w. */
static void train(const char *device, const herd_backend *timed, int steps, int n_micro,
                  float **w, size_t *n)
{
    herd_dataset *ds;
    assert_herd_ok(herd_dataset_open("synthetic:1,8,8,4,1024", HERD_SPLIT_TRAIN, &ds));
    herd_model *m;
    assert_herd_ok(herd_model_create_device("mlp", ds, device, &m));
    assert_herd_ok(herd_model_init_params(m, 7));
    if (timed)
        m->be = timed; /* the same ops, with a timer */
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    herd_optimizer *opt;
    assert_herd_ok(herd_optimizer_create(&cfg, m, &opt));
    herd_comm *local;
    assert_herd_ok(herd_comm_local_create(&local));
    herd_step_plan plan;
    assert_herd_ok(herd_step_plan_init(&plan, m, local, cfg.bucket_mb, HERD_WIRE_FP32, false));
    herd_loader_config lc = {.batch_size = 2, .prefetch = 2, .workers = 1, .shard_count = 1};
    herd_loader *loader;
    assert_herd_ok(herd_loader_create(ds, &lc, &loader));
    assert_herd_ok(herd_loader_start_epoch(loader, 0, 0));
    for (int step = 0; step < steps; step++) {
        herd_step_stats s = {0};
        marks_made = 0;
        double t0 = herd_now();
        for (int k = 0; k < n_micro; k++) {
            herd_batch b;
            bool has;
            assert_herd_ok(herd_loader_next(loader, &b, &has));
            assert_true(has);
            assert_herd_ok(herd_micro_step(m, &plan, &b, k, n_micro, 0.0f, (uint64_t)step, &s));
        }
        assert_herd_ok(herd_apply_step(m, opt, &plan, cfg.lr, &s));
        double total = herd_now() - t0;
        double sum = s.t.forward + s.t.backward + s.t.optimizer + s.t.comm_wait;
        assert_true(s.t.forward > 0 && s.t.backward > 0 && s.t.optimizer > 0);
        assert_true(s.t.comm_wait >= 0);
        if (sum > total)
            fail_msg("step %d: phases %.9f s, more than the step's %.9f s", step, sum, total);
        /* Each micro-batch's start, forward and backward, then reductions and update. */
        if (strcmp(device, "cpu") == 0)
            assert_int_equal(marks_made, timed ? 3 * n_micro + 2 : 0);
    }
    *n = m->n_param_floats;
    *w = tu_model_host_copy(m, false);
    herd_loader_free(loader);
    herd_step_plan_free(&plan, m);
    herd_optimizer_free(opt);
    herd_comm_destroy(local);
    herd_model_free(m);
    herd_dataset_free(ds);
}

static void test_training_steps(void **state)
{
    (void)state;
    herd_backend timed = *herd_backend_cpu();
    timed.timer_mark = host_mark;
    timed.timer_elapsed = host_elapsed;
    /* 2 micro-batches per step; 100 make a step of more marks than the ring. */
    const int micro[] = {1, 2, 100};
    for (size_t i = 0; i < sizeof micro / sizeof micro[0]; i++) {
        float *plain, *with_timer;
        size_t n, n2;
        train("cpu", NULL, 3, micro[i], &plain, &n);
        train("cpu", &timed, 3, micro[i], &with_timer, &n2);
        assert_int_equal(n, n2);
        assert_memory_equal(plain, with_timer, n * sizeof *plain); /* timing changes nothing */
        free(plain);
        free(with_timer);
    }
}

/* The simulated device has a timer on host clocks: its steps take the device path
 * (marks, one read at the end) and end where the CPU's do. */
static void test_sim_steps(void **state)
{
    (void)state;
    if (!herd_backend_sim())
        tu_skip("no simulated device here: %s", herd_last_error());
    assert_non_null(herd_backend_sim()->timer_mark);
    float *cpu_w, *sim_w;
    size_t n, n2;
    train("cpu", NULL, 3, 1, &cpu_w, &n);
    train("sim", NULL, 3, 1, &sim_w, &n2);
    assert_int_equal(n, n2);
    assert_memory_equal(cpu_w, sim_w, n * sizeof *cpu_w);
    free(cpu_w);
    free(sim_w);
}

/* herd_train on sim: the mean phases, and the data wait, within the mean step. */
static void test_sim_train(void **state)
{
    (void)state;
    if (!herd_backend_sim())
        tu_skip("no simulated device here: %s", herd_last_error());
    herd_dataset *ds;
    assert_herd_ok(herd_dataset_open("synthetic:1,8,8,4,512", HERD_SPLIT_TRAIN, &ds));
    herd_model *m;
    assert_herd_ok(herd_model_create_device("mlp", ds, "sim", &m));
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    cfg.epochs = 1;
    cfg.batch_size = 32;
    cfg.threads = 1;
    herd_train_result res;
    assert_herd_ok(herd_train(m, ds, NULL, &cfg, NULL, NULL, &res));
    const herd_phase_times *t = &res.phases;
    assert_true(res.steps == 16);
    assert_true(t->forward > 0 && t->backward > 0 && t->optimizer > 0 && t->comm_wait >= 0);
    double sum = t->data_wait + t->forward + t->backward + t->comm_wait + t->optimizer;
    if (!(sum <= t->total))
        fail_msg("mean phases %.9f s (data %.9f, fwd %.9f, bwd %.9f, comm %.9f, opt %.9f), more "
                 "than the mean step's %.9f s", sum, t->data_wait, t->forward, t->backward,
                 t->comm_wait, t->optimizer, t->total);
    herd_model_free(m);
    herd_dataset_free(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_marks),
        cmocka_unit_test(test_ring_overflow),
        cmocka_unit_test(test_training_steps),
        cmocka_unit_test(test_sim_steps),
        cmocka_unit_test(test_sim_train),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
