/* Gradient clipping by global norm (--clip-grad-norm) against a double-precision
 * reference of torch.nn.utils.clip_grad_norm_, and the backends' sum of squares it
 * rests on: exact to double rounding, and the same bits for any thread count (ranks
 * holding the same gradients must agree on their norm). Through training: a run whose
 * every step is clipped equals, step for step, the same run with the clipping done by
 * hand. The multi-rank sides (data parallel, pipeline stages) are in mpi_equivalence
 * and cli_pipeline. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "data/dataset.h"
#include "nn/model.h"
#include "optim/optim.h"

static double ref_norm(const float *g, size_t n)
{
    long double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (long double)g[i] * g[i];
    return (double)sqrtl(s);
}

static herd_model *model_with_grads(uint64_t seed, float scale)
{
    herd_model *m;
    assert_herd_ok(herd_model_create_shape("mlp", 1, 12, 12, 4, &m));
    tu_fill_uniform(m->grads, m->n_param_floats, -scale, scale, seed);
    return m;
}

static void test_sum_squares(void **state)
{
    (void)state;
    const herd_backend *be = herd_backend_cpu();
    size_t sizes[] = {0, 1, 8191, 8192, 8193, 100000, 300001};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        float *x = tu_randv(n, 7 + k);
        double one, two, ref = ref_norm(x, n);
        assert_herd_ok(be->set_threads(1));
        assert_herd_ok(be->sum_squares(n, x, &one));
        assert_herd_ok(be->set_threads(2));
        assert_herd_ok(be->sum_squares(n, x, &two));
        assert_memory_equal(&one, &two, sizeof one); /* bitwise, whatever the threads */
        assert_true(fabs(sqrt(one) - ref) <= 1e-12 * fmax(1.0, ref));
        free(x);
    }
    assert_herd_ok(be->set_threads(1));
    double out;
    assert_int_equal(be->sum_squares(4, NULL, &out), HERD_ERR_INVALID_ARG);
}

static void test_clip_above_and_below(void **state)
{
    (void)state;
    herd_model *m = model_with_grads(3, 0.01f);
    size_t n = m->n_param_floats;
    float *before = malloc(n * sizeof(float));
    memcpy(before, m->grads, n * sizeof(float));
    double norm0 = ref_norm(before, n), norm;
    bool clipped;
    /* Below the maximum: untouched, bit for bit. */
    assert_herd_ok(herd_clip_grad_norm(m, (float)(norm0 * 2), NULL, &norm, &clipped));
    assert_false(clipped);
    assert_true(fabs(norm - norm0) <= 1e-12 * norm0);
    assert_memory_equal(m->grads, before, n * sizeof(float));
    /* Above: every gradient times max / (norm + 1e-6), as PyTorch. */
    float max = (float)(norm0 / 4);
    assert_herd_ok(herd_clip_grad_norm(m, max, NULL, &norm, &clipped));
    assert_true(clipped);
    double coef = (double)max / (norm0 + 1e-6);
    for (size_t i = 0; i < n; i++)
        assert_true(fabs(m->grads[i] - before[i] * coef) <= 1e-7 * fabs(before[i] * coef) + 1e-30);
    assert_true(fabs(ref_norm(m->grads, n) - max) <= 1e-6 * max);
    free(before);
    herd_model_free(m);
}

/* A group whose sum_f64 adds a second, equal part: the norm becomes sqrt(2) x. */
static herd_status double_it(void *group, double *vals, int n)
{
    (*(int *)group)++;
    for (int i = 0; i < n; i++)
        vals[i] *= 2;
    return HERD_OK;
}

static void test_clip_group_and_errors(void **state)
{
    (void)state;
    herd_model *m = model_with_grads(4, 0.01f);
    size_t n = m->n_param_floats;
    double norm0 = ref_norm(m->grads, n), norm;
    int calls = 0;
    herd_group_sum group = {.sum_f64 = double_it, .group = &calls, .ranks = 2};
    bool clipped;
    assert_herd_ok(herd_clip_grad_norm(m, (float)(norm0 * 1.2), &group, &norm, &clipped));
    assert_int_equal(calls, 1);
    assert_true(fabs(norm - norm0 * sqrt(2.0)) <= 1e-9 * norm0);
    assert_true(clipped); /* sqrt(2) x above 1.2 x */
    assert_int_equal(herd_clip_grad_norm(m, 0.0f, NULL, NULL, NULL), HERD_ERR_INVALID_ARG);
    assert_int_equal(herd_clip_grad_norm(m, NAN, NULL, NULL, NULL), HERD_ERR_INVALID_ARG);
    m->grads[5] = INFINITY;
    assert_int_equal(herd_clip_grad_norm(m, 1.0f, NULL, &norm, &clipped), HERD_ERR_INVALID_ARG);
    assert_non_null(strstr(herd_last_error(), "training diverged"));
    assert_false(clipped);
    herd_model_free(m);
}

/* herd_train with --clip-grad-norm against the same steps taken by hand: forward,
 * backward, the clip from the reference formula, the optimizer's update. */
static void test_train_matches_hand(void **state)
{
    (void)state;
    herd_dataset *ds;
    assert_herd_ok(herd_dataset_open("synthetic:1,12,12,4,96", HERD_SPLIT_TRAIN, &ds));
    herd_model *trained, *hand;
    assert_herd_ok(herd_model_create("mlp", ds, &trained));
    assert_herd_ok(herd_model_create("mlp", ds, &hand));
    assert_herd_ok(herd_model_init_params(trained, 9));
    assert_herd_ok(herd_model_init_params(hand, 9));
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    cfg.epochs = 1;
    cfg.batch_size = 32;
    cfg.lr = 0.1f;
    cfg.warmup_epochs = 0.0f;
    cfg.threads = 1;
    cfg.eval_every = 0;
    cfg.clip_grad_norm = 0.05f;
    herd_train_result res = {0};
    assert_herd_ok(herd_train(trained, ds, NULL, &cfg, NULL, NULL, &res));
    assert_int_equal(res.steps, 3);
    assert_int_equal(res.clipped_steps, 3);

    /* The batches herd_train read: its loader's configuration, epoch 0. */
    herd_loader_config lc = {.batch_size = 32, .shuffle = true, .seed = cfg.seed, .prefetch = 1,
                             .workers = 1, .shard_rank = 0, .shard_count = 1};
    herd_loader *loader;
    assert_herd_ok(herd_loader_create(ds, &lc, &loader));
    assert_herd_ok(herd_loader_start_epoch(loader, 0, 0));
    herd_optimizer *opt;
    assert_herd_ok(herd_optimizer_create(&cfg, hand, &opt));
    assert_herd_ok(herd_model_reshape(hand, 32));
    float *dlogits = calloc(32 * 4, sizeof(float));
    for (int step = 0; step < 3; step++) {
        herd_batch b;
        bool has;
        assert_herd_ok(herd_loader_next(loader, &b, &has));
        assert_true(has && b.n == 32);
        herd_run_ctx ctx = herd_model_ctx(hand, true, 0);
        const float *logits;
        assert_herd_ok(herd_model_forward(hand, &ctx, b.x, &logits));
        double loss;
        long correct;
        assert_herd_ok(hand->be->softmax_xent(32, 4, logits, b.labels, 0.0f, dlogits, &loss,
                                              &correct));
        assert_herd_ok(herd_model_backward(hand, &ctx, b.x, dlogits));
        double norm = ref_norm(hand->grads, hand->n_param_floats);
        float coef = (float)(0.05 / (norm + 1e-6));
        assert_true(coef < 1.0f);
        for (size_t i = 0; i < hand->n_param_floats; i++)
            hand->grads[i] *= coef;
        assert_herd_ok(herd_optimizer_step(opt, hand, herd_lr_at(&cfg, step, 3)));
    }
    herd_loader_free(loader);
    double worst = tu_max_rel_err(trained->params, hand->params, hand->n_param_floats);
    printf("3 clipped steps: herd_train and the steps by hand differ by %.3g\n", worst);
    assert_true(worst <= 1e-6);
    free(dlogits);
    herd_optimizer_free(opt);
    herd_model_free(trained);
    herd_model_free(hand);
    herd_dataset_free(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sum_squares),
        cmocka_unit_test(test_clip_above_and_below),
        cmocka_unit_test(test_clip_group_and_errors),
        cmocka_unit_test(test_train_matches_hand),
    };
    return tu_run(tests, NULL, NULL);
}
