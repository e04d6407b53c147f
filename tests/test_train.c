/* End to end: lenet5 learns Fashion-MNIST; an interrupted run resumed from its
 * checkpoint gives exactly the losses of an uninterrupted one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/model.h"
#include "testutil.h"

#define FASHION "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"

typedef struct loss_log {
    double loss[256];
    long first, last; /* global steps seen */
} loss_log;

static bool record(const herd_progress *p, void *user)
{
    loss_log *log = user;
    if (!p->epoch_end && p->global_step <= 256) {
        log->loss[p->global_step - 1] = p->step_loss;
        if (!log->first)
            log->first = p->global_step;
        log->last = p->global_step;
    }
    return true;
}

static void open_subset(size_t n_train, size_t n_test, herd_dataset **train, herd_dataset **test)
{
    assert_herd_ok(herd_dataset_open("fashion-mnist", HERD_SPLIT_TRAIN, train));
    assert_herd_ok(herd_dataset_open("fashion-mnist", HERD_SPLIT_TEST, test));
    assert_herd_ok(herd_dataset_truncate(*train, n_train));
    assert_herd_ok(herd_dataset_truncate(*test, n_test));
}

static void test_lenet5_learns(void **state)
{
    (void)state;
    if (access(FASHION, R_OK) != 0)
        tu_skip_essential("needs Fashion-MNIST (%s): apt-get install dataset-fashion-mnist",
                          FASHION);
    herd_dataset *train, *test;
    open_subset(tu_sanitized() ? 20000 : 30000, 10000, &train, &test);
    herd_model *m;
    assert_herd_ok(herd_model_create("lenet5", train, &m));
    assert_herd_ok(herd_model_init_params(m, 1));
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    cfg.epochs = 1;
    cfg.batch_size = 32;
    cfg.lr = 0.02f;
    cfg.threads = 1;
    herd_train_result res;
    assert_herd_ok(herd_train(m, train, test, &cfg, NULL, NULL, &res));
    printf("lenet5, 1 epoch on %zu samples: test_acc %.4f, train_loss %.4f\n",
           herd_dataset_size(train), res.test_acc, res.train_loss);
    assert_true(res.test_acc >= 0.80);
    herd_model_free(m);
    herd_dataset_free(train);
    herd_dataset_free(test);
}

static void train_run(const char *ckpt, long max_steps, bool resume, loss_log *log,
                      herd_train_result *res)
{
    herd_dataset *train, *test;
    /* 10 steps an epoch, of batches of 20 (batch norm's statistics come from 20). */
    open_subset(200, 100, &train, &test);
    herd_model *m;
    assert_herd_ok(herd_model_create("resnet20", train, &m));
    assert_herd_ok(herd_model_init_params(m, 3));
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    cfg.epochs = 2;
    cfg.batch_size = 20;
    cfg.threads = 1;
    cfg.augment = true;
    cfg.schedule = HERD_SCHED_COSINE;
    cfg.warmup_epochs = 1;
    cfg.checkpoint_dir = ckpt;
    cfg.max_steps = max_steps;
    cfg.resume = resume;
    assert_herd_ok(herd_train(m, train, test, &cfg, record, log, res));
    herd_model_free(m);
    herd_dataset_free(train);
    herd_dataset_free(test);
}

static void test_resume_is_exact(void **state)
{
    (void)state;
    if (access(FASHION, R_OK) != 0)
        tu_skip_essential("needs Fashion-MNIST (%s): apt-get install dataset-fashion-mnist",
                          FASHION);
    char *dir_a = tu_tempdir(), *dir_b = tu_tempdir(), *dir_c = tu_tempdir();
    loss_log full = {0}, part = {0}, rest = {0};
    herd_train_result r, r_full;
    train_run(dir_a, 0, false, &full, &r_full);
    assert_int_equal(full.last, 20);
    /* Stop mid-epoch (step 13 of 20) and resume. */
    train_run(dir_b, 13, false, &part, &r);
    assert_int_equal(part.last, 13);
    train_run(dir_b, 0, true, &rest, &r);
    assert_int_equal(rest.first, 14);
    assert_int_equal(rest.last, 20);
    /* The resumed epoch's figures are the whole epoch's (the checkpoint carries its sums). */
    if (r.train_loss != r_full.train_loss || r.train_acc != r_full.train_acc)
        fail_msg("resumed epoch: train_loss %.17g acc %.17g, uninterrupted %.17g %.17g", r.train_loss,
                 r.train_acc, r_full.train_loss, r_full.train_acc);
    for (long s = 13; s < 20; s++)
        if (rest.loss[s] != full.loss[s])
            fail_msg("step %ld: resumed loss %.9g != uninterrupted %.9g", s + 1, rest.loss[s],
                     full.loss[s]);
    /* Stop at an epoch boundary and resume. */
    memset(&rest, 0, sizeof rest);
    train_run(dir_c, 10, false, &part, &r);
    train_run(dir_c, 0, true, &rest, &r);
    assert_int_equal(rest.first, 11);
    for (long s = 10; s < 20; s++)
        assert_true(rest.loss[s] == full.loss[s]);
    tu_rmtree(dir_a);
    tu_rmtree(dir_b);
    tu_rmtree(dir_c);
    free(dir_a);
    free(dir_b);
    free(dir_c);
}

/* --grad-accum K with batch B takes the same steps as batch K*B (no batch norm). */
static void test_grad_accum_equals_big_batch(void **state)
{
    (void)state;
    herd_model *m[2];
    for (int k = 0; k < 2; k++) {
        herd_dataset *ds;
        assert_herd_ok(herd_dataset_open("synthetic:1,12,12,4,256", HERD_SPLIT_TRAIN, &ds));
        assert_herd_ok(herd_model_create("mlp", ds, &m[k]));
        assert_herd_ok(herd_model_init_params(m[k], 9));
        herd_train_config cfg;
        herd_train_config_default(&cfg);
        cfg.epochs = 1;
        cfg.threads = 1;
        cfg.lr = 0.01f;
        cfg.eval_every = 0;
        cfg.batch_size = k ? 8 : 32;
        cfg.grad_accum = k ? 4 : 1;
        herd_train_result res;
        assert_herd_ok(herd_train(m[k], ds, NULL, &cfg, NULL, NULL, &res));
        assert_int_equal(res.steps, 8);
        herd_dataset_free(ds);
    }
    double err = tu_max_rel_err(m[1]->params, m[0]->params, m[0]->n_param_floats);
    printf("grad-accum 4 x 8 vs batch 32, 8 steps: max relative difference %.3g\n", err);
    assert_true(err < 1e-5);
    herd_model_free(m[0]);
    herd_model_free(m[1]);
}

/* A compression outside herd_compress is refused before training, not cast onto the wire. */
static void test_compress_out_of_range_refused(void **state)
{
    (void)state;
    herd_dataset *ds;
    herd_model *m;
    assert_herd_ok(herd_dataset_open("synthetic:1,12,12,4,64", HERD_SPLIT_TRAIN, &ds));
    assert_herd_ok(herd_model_create("mlp", ds, &m));
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    cfg.epochs = 1;
    cfg.threads = 1;
    cfg.compress = (herd_compress)3;
    herd_train_result res;
    assert_int_equal(herd_train(m, ds, NULL, &cfg, NULL, NULL, &res), HERD_ERR_INVALID_ARG);
    assert_non_null(strstr(herd_last_error(), "compress is 0 (none), 1 (fp16) or 2 (bf16)"));
    cfg.compress = HERD_COMPRESS_BF16; /* one process: accepted, nothing to reduce */
    assert_herd_ok(herd_train(m, ds, NULL, &cfg, NULL, NULL, &res));
    herd_model_free(m);
    herd_dataset_free(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lenet5_learns),
        cmocka_unit_test(test_resume_is_exact),
        cmocka_unit_test(test_grad_accum_equals_big_batch),
        cmocka_unit_test(test_compress_out_of_range_refused),
    };
    return tu_run(tests, NULL, NULL);
}
