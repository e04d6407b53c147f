/* Optimizer kernels and schedules against step-by-step double-precision
 * references of torch.optim.SGD / AdamW. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "nn/model.h"
#include "optim/optim.h"

/* A hand-built model: a linear layer, a batch norm (with a running-mean buffer
 * between its parameters in view order) and another linear layer. */
typedef struct tmodel {
    herd_model m;
    herd_tensor_view views[6];
} tmodel;

static void add_view(tmodel *t, const char *name, int ndim, const int64_t *shape, int is_buffer,
                     int no_decay, size_t *param_off, size_t *buf_off)
{
    herd_tensor_view *v = &t->views[t->m.n_views++];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s", name);
    v->ndim = ndim;
    v->numel = 1;
    for (int i = 0; i < ndim; i++) {
        v->shape[i] = shape[i];
        v->numel *= (size_t)shape[i];
    }
    v->is_buffer = is_buffer;
    v->no_decay = no_decay;
    size_t *off = is_buffer ? buf_off : param_off;
    v->offset = *off;
    *off += v->numel;
}

static tmodel *tmodel_new(void)
{
    tmodel *t = calloc(1, sizeof *t);
    size_t po = 0, bo = 0;
    t->m.views = t->views;
    t->m.cap_views = 6;
    snprintf(t->m.name, sizeof t->m.name, "tiny");
    t->m.be = herd_backend_cpu();
    add_view(t, "fc1.weight", 2, (int64_t[]){4, 5}, 0, 0, &po, &bo);
    add_view(t, "fc1.bias", 1, (int64_t[]){4}, 0, 1, &po, &bo);
    add_view(t, "bn.running_mean", 1, (int64_t[]){3}, 1, 0, &po, &bo);
    add_view(t, "bn.weight", 1, (int64_t[]){3}, 0, 1, &po, &bo);
    add_view(t, "bn.bias", 1, (int64_t[]){3}, 0, 1, &po, &bo);
    add_view(t, "fc2.weight", 2, (int64_t[]){2, 3}, 0, 0, &po, &bo);
    t->m.n_param_floats = po;
    t->m.n_buffer_floats = bo;
    t->m.params = calloc(po, sizeof(float));
    t->m.grads = calloc(po, sizeof(float));
    t->m.buffers = calloc(bo, sizeof(float));
    tu_fill_uniform(t->m.params, po, -1, 1, 1);
    tu_fill_uniform(t->m.buffers, bo, -1, 1, 2);
    return t;
}

static void tmodel_free(tmodel *t)
{
    free(t->m.params);
    free(t->m.grads);
    free(t->m.buffers);
    free(t);
}

/* Per-float weight decay as the optimizer should apply it. */
static void decay_of(const tmodel *t, const herd_train_config *cfg, double *wd)
{
    for (int i = 0; i < t->m.n_views; i++) {
        const herd_tensor_view *v = &t->views[i];
        if (v->is_buffer)
            continue;
        for (size_t k = 0; k < v->numel; k++)
            wd[v->offset + k] = (v->no_decay && !cfg->decay_bn_bias) ? 0.0 : cfg->weight_decay;
    }
}

/* Runs `steps` optimizer steps and the double reference side by side. */
static void check_against_reference(herd_train_config *cfg, int steps)
{
    tmodel *t = tmodel_new();
    size_t n = t->m.n_param_floats;
    double *w = calloc(n, sizeof *w), *b = calloc(n, sizeof *b), *v2 = calloc(n, sizeof *v2);
    double *wd = calloc(n, sizeof *wd);
    for (size_t i = 0; i < n; i++)
        w[i] = t->m.params[i];
    decay_of(t, cfg, wd);

    herd_optimizer *o;
    assert_herd_ok(herd_optimizer_create(cfg, &t->m, &o));
    float *buf0 = calloc(t->m.n_buffer_floats, sizeof(float));
    memcpy(buf0, t->m.buffers, t->m.n_buffer_floats * sizeof(float));

    for (int s = 1; s <= steps; s++) {
        tu_fill_uniform(t->m.grads, n, -1, 1, 100 + (uint64_t)s);
        double lr = 0.1 / s; /* a changing lr checks it is used per step */
        assert_herd_ok(herd_optimizer_step(o, &t->m, (float)lr));
        for (size_t i = 0; i < n; i++) {
            double g = t->m.grads[i];
            if (cfg->optimizer == HERD_OPT_SGD) {
                if (cfg->decoupled_decay)
                    w[i] -= lr * wd[i] * w[i];
                else
                    g += wd[i] * w[i];
                if (cfg->momentum != 0.0f) {
                    b[i] = (s == 1) ? g : cfg->momentum * b[i] + g; /* PyTorch: buf = g first */
                    g = cfg->nesterov ? g + cfg->momentum * b[i] : b[i];
                }
                w[i] -= lr * g;
            } else {
                w[i] -= lr * wd[i] * w[i];
                b[i] = cfg->beta1 * b[i] + (1 - cfg->beta1) * g;
                v2[i] = cfg->beta2 * v2[i] + (1 - cfg->beta2) * g * g;
                double mhat = b[i] / (1 - pow(cfg->beta1, s));
                double vhat = v2[i] / (1 - pow(cfg->beta2, s));
                w[i] -= lr * mhat / (sqrt(vhat) + cfg->eps);
            }
        }
        for (size_t i = 0; i < n; i++) {
            double err = fabs(t->m.params[i] - w[i]) / fmax(1.0, fabs(w[i]));
            if (err > 2e-6)
                fail_msg("step %d float %zu: got %.9g want %.9g", s, i, (double)t->m.params[i], w[i]);
        }
    }
    assert_int_equal(herd_optimizer_steps(o), steps);
    /* Optimizer state is what the reference carries. */
    const char *name;
    size_t numel;
    float *st0 = herd_optimizer_state(o, 0, &name, &numel);
    assert_int_equal(numel, n);
    if (cfg->optimizer == HERD_OPT_SGD) {
        assert_int_equal(herd_optimizer_state_count(o), 1);
        assert_string_equal(name, "momentum");
        if (cfg->momentum != 0.0f)
            for (size_t i = 0; i < n; i++)
                assert_true(fabs(st0[i] - b[i]) <= 1e-5 * fmax(1, fabs(b[i])));
    } else {
        assert_int_equal(herd_optimizer_state_count(o), 2);
        assert_string_equal(name, "exp_avg");
        float *st1 = herd_optimizer_state(o, 1, &name, &numel);
        assert_string_equal(name, "exp_avg_sq");
        for (size_t i = 0; i < n; i++) {
            assert_true(fabs(st0[i] - b[i]) <= 1e-6);
            assert_true(fabs(st1[i] - v2[i]) <= 1e-6);
        }
    }
    assert_null(herd_optimizer_state(o, 5, &name, &numel));
    /* Buffers are never touched by the optimizer. */
    assert_memory_equal(buf0, t->m.buffers, t->m.n_buffer_floats * sizeof(float));

    herd_optimizer_free(o);
    free(buf0);
    free(w), free(b), free(v2), free(wd);
    tmodel_free(t);
}

/* The state's staging copies, on the CPU and on the simulated device (whose memory the
 * host cannot read): a range uploaded comes back where it went, the rest stays zero,
 * and a range outside the state or a tensor that does not exist is refused by name. */
static void test_state_staging(void **s)
{
    (void)s;
    const herd_backend *bes[] = {herd_backend_cpu(), herd_backend_sim()};
    for (int k = 0; k < 2; k++) {
        tmodel *t = tmodel_new();
        t->m.be = bes[k];
        herd_train_config cfg;
        herd_train_config_default(&cfg);
        cfg.optimizer = HERD_OPT_ADAMW;
        herd_optimizer *o;
        size_t lo = 5, n = t->m.n_param_floats - lo;
        assert_herd_ok(herd_optimizer_create_part(&cfg, &t->m, lo, t->m.n_param_floats, &o));
        float in[7], out[64] = {0}, zero[64] = {0};
        assert_true(n <= 64 && n > 2 + 7);
        tu_fill_uniform(in, 7, -1, 1, 3);
        assert_herd_ok(herd_optimizer_state_upload(o, 1, 2, 7, in));
        assert_herd_ok(herd_optimizer_state_download(o, 1, 0, n, out));
        assert_memory_equal(out, zero, 2 * sizeof(float));
        assert_memory_equal(out + 2, in, sizeof in);
        assert_memory_equal(out + 9, zero, (n - 9) * sizeof(float));
        assert_herd_ok(herd_optimizer_state_download(o, 0, 0, n, out)); /* the other tensor */
        assert_memory_equal(out, zero, n * sizeof(float));
        assert_herd_ok(herd_optimizer_state_download(o, 0, n, 0, out)); /* empty, at the end */
        assert_int_equal(herd_optimizer_state_download(o, 0, n - 1, 2, out), HERD_ERR_INVALID_ARG);
        assert_non_null(strstr(herd_last_error(), "outside optimizer state 'exp_avg'"));
        assert_int_equal(herd_optimizer_state_upload(o, 2, 0, 1, in), HERD_ERR_INVALID_ARG);
        assert_non_null(strstr(herd_last_error(), "no optimizer state tensor 2"));
        herd_optimizer_free(o);
        tmodel_free(t);
    }
}

static herd_train_config sgd_cfg(float momentum, bool nesterov, float wd, bool decoupled)
{
    herd_train_config c;
    herd_train_config_default(&c);
    c.optimizer = HERD_OPT_SGD;
    c.momentum = momentum;
    c.nesterov = nesterov;
    c.weight_decay = wd;
    c.decoupled_decay = decoupled;
    return c;
}

static void test_sgd_plain(void **s)
{
    (void)s;
    herd_train_config c = sgd_cfg(0, false, 0, false);
    check_against_reference(&c, 4);
}
static void test_sgd_momentum(void **s)
{
    (void)s;
    herd_train_config c = sgd_cfg(0.9f, false, 0, false);
    check_against_reference(&c, 5);
}
static void test_sgd_nesterov(void **s)
{
    (void)s;
    herd_train_config c = sgd_cfg(0.9f, true, 0, false);
    check_against_reference(&c, 5);
}
static void test_sgd_coupled_decay(void **s)
{
    (void)s;
    herd_train_config c = sgd_cfg(0.9f, true, 0.05f, false);
    check_against_reference(&c, 5);
    c = sgd_cfg(0.0f, false, 0.05f, false);
    check_against_reference(&c, 3);
}
static void test_sgd_decoupled_decay(void **s)
{
    (void)s;
    herd_train_config c = sgd_cfg(0.9f, false, 0.05f, true);
    check_against_reference(&c, 5);
}
static void test_sgd_decay_bn_bias(void **s)
{
    (void)s;
    herd_train_config c = sgd_cfg(0.9f, false, 0.05f, false);
    c.decay_bn_bias = true;
    check_against_reference(&c, 4);
}

/* With only decay on and zero gradients, no_decay views must not move at all. */
static void test_no_decay_views_excluded(void **s)
{
    (void)s;
    tmodel *t = tmodel_new();
    herd_train_config c = sgd_cfg(0.0f, false, 0.5f, false);
    float before[64];
    memcpy(before, t->m.params, t->m.n_param_floats * sizeof(float));
    herd_optimizer *o;
    assert_herd_ok(herd_optimizer_create(&c, &t->m, &o));
    assert_herd_ok(herd_optimizer_step(o, &t->m, 0.1f));
    for (int i = 0; i < t->m.n_views; i++) {
        const herd_tensor_view *v = &t->views[i];
        if (v->is_buffer)
            continue;
        for (size_t k = v->offset; k < v->offset + v->numel; k++) {
            if (v->no_decay)
                assert_true(t->m.params[k] == before[k]);
            else
                assert_true(fabsf(t->m.params[k] - before[k] * 0.95f) < 1e-6f);
        }
    }
    herd_optimizer_free(o);
    tmodel_free(t);
}

static void test_adamw(void **s)
{
    (void)s;
    herd_train_config c;
    herd_train_config_default(&c);
    c.optimizer = HERD_OPT_ADAMW;
    c.weight_decay = 0.01f;
    check_against_reference(&c, 6);
    c.weight_decay = 0;
    c.beta1 = 0.5f;
    c.beta2 = 0.9f;
    c.eps = 1e-3f;
    check_against_reference(&c, 4);
}

/* The kernels on a slice big enough to take the OpenMP path. */
static void test_kernels_large(void **s)
{
    (void)s;
    size_t n = 100003;
    float *w = malloc(n * 4), *g = malloc(n * 4), *b = calloc(n, 4), *v = calloc(n, 4);
    float *w0 = malloc(n * 4);
    tu_fill_uniform(w, n, -1, 1, 7);
    tu_fill_uniform(g, n, -1, 1, 8);
    memcpy(w0, w, n * 4);
    herd_sgd_args a = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-2f, .nesterov = true};
    assert_herd_ok(herd_cpu_sgd_update(n, w, g, b, &a));
    for (size_t i = 0; i < n; i += 997) {
        double gi = (double)g[i] + 1e-2 * w0[i];
        double want = w0[i] - 0.1 * (gi + 0.9 * gi);
        assert_true(fabs(w[i] - want) < 1e-6);
    }
    memcpy(w, w0, n * 4);
    memset(b, 0, n * 4);
    herd_adamw_args aa = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 1};
    assert_herd_ok(herd_cpu_adamw_update(n, w, g, b, v, &aa));
    for (size_t i = 0; i < n; i += 997) {
        /* First Adam step moves each weight by lr * sign(g) (up to eps). */
        double want = w0[i] - 1e-3 * (g[i] > 0 ? 1 : -1) * fabs(g[i]) / (fabs(g[i]) + 1e-8);
        assert_true(fabs(w[i] - want) < 1e-6);
    }
    aa.step = 0;
    assert_int_equal(herd_cpu_adamw_update(n, w, g, b, v, &aa), HERD_ERR_INVALID_ARG);
    a.momentum = 0.9f;
    assert_int_equal(herd_cpu_sgd_update(n, w, g, NULL, &a), HERD_ERR_INVALID_ARG);
    free(w), free(g), free(b), free(v), free(w0);
}

static void test_optimizer_bad_config(void **s)
{
    (void)s;
    tmodel *t = tmodel_new();
    herd_train_config c = sgd_cfg(0.0f, true, 0, false);
    herd_optimizer *o = (herd_optimizer *)1;
    assert_int_equal(herd_optimizer_create(&c, &t->m, &o), HERD_ERR_INVALID_ARG);
    assert_null(o);
    assert_non_null(strstr(herd_last_error(), "momentum"));
    herd_backend nokernel = *herd_backend_cpu();
    nokernel.adamw_update = NULL;
    t->m.be = &nokernel;
    c = sgd_cfg(0.9f, false, 0, false);
    c.optimizer = HERD_OPT_ADAMW;
    assert_int_equal(herd_optimizer_create(&c, &t->m, &o), HERD_ERR_UNSUPPORTED);
    tmodel_free(t);
}

static void expect_lr(const herd_train_config *c, long step, double want)
{
    double got = herd_lr_at(c, step, 10);
    if (fabs(got - want) > 1e-7 * fmax(1, fabs(want)))
        fail_msg("lr at step %ld: got %.9g want %.9g", step, got, want);
}

static void test_schedules(void **s)
{
    (void)s;
    herd_train_config c;
    herd_train_config_default(&c);
    c.lr = 0.1f;
    c.epochs = 5;
    /* constant, no warmup */
    expect_lr(&c, 0, 0.1);
    expect_lr(&c, 49, 0.1);
    /* warmup: lr*(step+1)/warmup_steps, then the schedule */
    c.warmup_epochs = 1;
    expect_lr(&c, 0, 0.01);
    expect_lr(&c, 4, 0.05);
    expect_lr(&c, 9, 0.1);
    expect_lr(&c, 10, 0.1);
    c.warmup_epochs = 0.5f;
    expect_lr(&c, 0, 0.02);
    expect_lr(&c, 4, 0.1);
    /* step: gamma at each milestone epoch */
    c.warmup_epochs = 0;
    c.schedule = HERD_SCHED_STEP;
    c.milestones[0] = 2;
    c.milestones[1] = 4;
    c.n_milestones = 2;
    c.gamma = 0.1f;
    expect_lr(&c, 0, 0.1);
    expect_lr(&c, 19, 0.1);
    expect_lr(&c, 20, 0.01);
    expect_lr(&c, 39, 0.01);
    expect_lr(&c, 40, 0.001);
    /* cosine over the steps after warmup */
    c.schedule = HERD_SCHED_COSINE;
    expect_lr(&c, 0, 0.1);
    expect_lr(&c, 25, 0.05);
    expect_lr(&c, 49, 0.05 * (1 + cos(M_PI * 49 / 50)));
    expect_lr(&c, 50, 0.0);
    expect_lr(&c, 500, 0.0);
    c.warmup_epochs = 1;
    expect_lr(&c, 9, 0.1);
    expect_lr(&c, 10, 0.1);
    expect_lr(&c, 30, 0.05);
    expect_lr(&c, 49, 0.05 * (1 + cos(M_PI * 39 / 40)));
}

static void test_config_default(void **s)
{
    (void)s;
    herd_train_config c;
    memset(&c, 0xff, sizeof c);
    herd_train_config_default(&c);
    assert_int_equal(c.epochs, 10);
    assert_int_equal(c.batch_size, 128);
    assert_true(c.lr == 0.05f && c.momentum == 0.9f && c.weight_decay == 5e-4f);
    assert_int_equal(c.optimizer, HERD_OPT_SGD);
    assert_false(c.nesterov || c.decoupled_decay || c.decay_bn_bias || c.augment || c.resume);
    assert_true(c.beta1 == 0.9f && c.beta2 == 0.999f && c.eps == 1e-8f);
    assert_int_equal(c.schedule, HERD_SCHED_CONSTANT);
    assert_true(c.gamma == 0.1f && c.warmup_epochs == -1 && c.label_smoothing == 0);
    assert_int_equal(c.n_milestones, 0);
    assert_int_equal(c.threads, 0);
    assert_int_equal(c.seed, 42);
    assert_null(c.checkpoint_dir);
    assert_int_equal(c.eval_every, 1);
    assert_int_equal(c.max_steps, 0);
    assert_int_equal(c.compress, HERD_COMPRESS_NONE);
}

/* --compress's names both ways, and what is refused. */
static void test_compress_names(void **s)
{
    (void)s;
    static const char *names[] = {"none", "fp16", "bf16"};
    static const herd_compress values[] = {HERD_COMPRESS_NONE, HERD_COMPRESS_FP16, HERD_COMPRESS_BF16};
    for (int i = 0; i < 3; i++) {
        herd_compress c = (herd_compress)-1;
        assert_herd_ok(herd_compress_parse(names[i], &c));
        assert_int_equal(c, values[i]);
        assert_string_equal(herd_compress_name(values[i]), names[i]);
    }
    herd_compress c = HERD_COMPRESS_BF16;
    assert_int_equal(herd_compress_parse("fp32", &c), HERD_ERR_INVALID_ARG);
    assert_non_null(strstr(herd_last_error(), "'fp32'"));
    assert_int_equal(c, HERD_COMPRESS_BF16); /* untouched on failure */
    assert_int_equal(herd_compress_parse(NULL, &c), HERD_ERR_INVALID_ARG);
    assert_string_equal(herd_compress_name((herd_compress)7), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_plain),
        cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_sgd_nesterov),
        cmocka_unit_test(test_sgd_coupled_decay),
        cmocka_unit_test(test_sgd_decoupled_decay),
        cmocka_unit_test(test_sgd_decay_bn_bias),
        cmocka_unit_test(test_no_decay_views_excluded),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_kernels_large),
        cmocka_unit_test(test_optimizer_bad_config),
        cmocka_unit_test(test_schedules),
        cmocka_unit_test(test_config_default),
        cmocka_unit_test(test_compress_names),
        cmocka_unit_test(test_state_staging),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
