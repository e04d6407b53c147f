/* The resnet50 zoo model: torchvision's parameter count, the documented FLOPs and
 * one real training step on the CPU at ImageNet size. */
#include <math.h>
#include <stdio.h>

#include "testutil.h"

static void test_size_and_flops(void **state)
{
    (void)state;
    herd_model *m;
    assert_herd_ok(herd_model_create_shape("resnet50", 3, 224, 224, 1000, &m));
    /* torchvision.models.resnet50(): sum(p.numel() for p in m.parameters()). */
    assert_int_equal(herd_model_param_count(m), 25557032);
    /* Convolutions and fc are 4.09 G multiply-adds (8.18 GFLOP at 2 per multiply-add);
     * batch norm, ReLU, pooling and the residual adds bring it to about 8.2 GFLOP. */
    double gflop = herd_model_flops_per_sample(m) / 1e9;
    printf("resnet50: %zu parameters, %.4f GFLOP per sample (forward)\n",
           herd_model_param_count(m), gflop);
    if (gflop < 8.15 || gflop > 8.30)
        fail_msg("resnet50 forward FLOPs per sample %.4f G, expected about 8.2 G", gflop);
    herd_model_free(m);
}

static void test_cpu_step(void **state)
{
    (void)state;
    herd_dataset *ds;
    assert_herd_ok(herd_dataset_open("synthetic:3,224,224,1000,2", HERD_SPLIT_TRAIN, &ds));
    herd_model *m;
    assert_herd_ok(herd_model_create("resnet50", ds, &m));
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    cfg.epochs = 1;
    cfg.batch_size = 1;
    cfg.max_steps = 1;
    cfg.threads = 1;
    herd_train_result res;
    assert_herd_ok(herd_train(m, ds, NULL, &cfg, NULL, NULL, &res));
    assert_int_equal(res.steps, 1);
    /* An untrained 1000-way classifier: loss near ln(1000) = 6.9. */
    if (!isfinite(res.train_loss) || res.train_loss < 4.0 || res.train_loss > 10.0)
        fail_msg("first-step loss %g, expected about ln(1000)", res.train_loss);
    herd_model_free(m);
    herd_dataset_free(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size_and_flops),
        cmocka_unit_test(test_cpu_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
