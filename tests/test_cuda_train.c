/* Training on the CUDA backend against the CPU: the same lenet5, seed and batches
 * on both, parameters compared after a few SGD steps; initialisation and a save /
 * load round trip through the host must match exactly. Without a GPU (or CUDA in
 * the build) the only check is that asking for one fails clearly; the program then
 * exits 77, which ctest counts as skipped. A GPU that is there but fails to
 * initialise fails the test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "nn/model.h"

#define DATA "synthetic:1,28,28,10,256"

static float *host_params(const herd_model *m) { return tu_model_host_copy(m, false); }

static herd_model *make(const char *device, herd_dataset *ds)
{
    herd_model *m;
    assert_herd_ok(herd_model_create_device("lenet5", ds, device, &m));
    assert_herd_ok(herd_model_init_params(m, 9));
    return m;
}

static void train_few(herd_model *m, herd_dataset *ds)
{
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    cfg.epochs = 1;
    cfg.threads = 1;
    cfg.lr = 0.01f;
    cfg.eval_every = 0;
    cfg.batch_size = 32;
    herd_train_result res;
    assert_herd_ok(herd_train(m, ds, NULL, &cfg, NULL, NULL, &res));
    assert_int_equal(res.steps, 8);
}

static void test_gpu_matches_cpu(void **state)
{
    (void)state;
    herd_dataset *ds;
    assert_herd_ok(herd_dataset_open(DATA, HERD_SPLIT_TRAIN, &ds));
    herd_model *cpu = make("cpu", ds), *gpu = make("cuda", ds);
    assert_string_equal(gpu->be->name, "cuda");
    size_t n = cpu->n_param_floats;

    float *c0 = host_params(cpu), *g0 = host_params(gpu);
    assert_memory_equal(c0, g0, n * sizeof(float)); /* same host init, uploaded */

    train_few(cpu, ds);
    train_few(gpu, ds);
    float *c1 = host_params(cpu), *g1 = host_params(gpu);
    double err = tu_max_rel_err(g1, c1, n), moved = tu_max_rel_err(c0, c1, n);
    printf("lenet5, 8 SGD steps: GPU vs CPU max relative difference %.3g (training moved the "
           "parameters by %.3g)\n", err, moved);
    assert_true(moved > 1e-3);
    assert_true(err < 1e-3);

    /* Save from the GPU, load on the CPU: the host sees exactly the device's values. */
    char *dir = tu_tempdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    assert_herd_ok(herd_model_save(gpu, path));
    herd_model *back = make("cpu", ds);
    assert_herd_ok(herd_model_load(back, path));
    assert_memory_equal(back->params, g1, n * sizeof(float));
    /* ... and loading into a GPU model uploads them unchanged. */
    assert_herd_ok(herd_model_init_params(gpu, 1));
    assert_herd_ok(herd_model_load(gpu, path));
    float *g2 = host_params(gpu);
    assert_memory_equal(g2, g1, n * sizeof(float));

    herd_eval_result r;
    assert_herd_ok(herd_evaluate(gpu, ds, 64, 1, &r));
    herd_eval_result rc;
    assert_herd_ok(herd_evaluate(back, ds, 64, 1, &rc));
    printf("evaluation: GPU loss %.6f acc %.4f, CPU loss %.6f acc %.4f\n", r.loss, r.acc, rc.loss,
           rc.acc);
    assert_true(r.samples == 256 && rc.samples == 256);
    assert_true(r.loss - rc.loss < 1e-4 && rc.loss - r.loss < 1e-4);

    free(c0), free(g0), free(c1), free(g1), free(g2);
    tu_rmtree(dir);
    free(dir);
    herd_model_free(back);
    herd_model_free(cpu);
    herd_model_free(gpu);
    herd_dataset_free(ds);
}

int main(void)
{
    herd_dataset *ds;
    if (herd_dataset_open(DATA, HERD_SPLIT_TRAIN, &ds) != HERD_OK)
        return 1;
    herd_model *m = NULL;
    herd_status st = herd_model_create_device("lenet5", ds, "cuda", &m);
    herd_dataset_free(ds);
    if (st != HERD_OK) {
        /* No silent fallback: the request fails, says why, and builds nothing. */
        char why[512];
        snprintf(why, sizeof why, "%s", herd_last_error());
        if (st != HERD_ERR_UNSUPPORTED || m != NULL || !strstr(why, "cuda")) {
            printf("FAILED: --device cuda failed without saying it is the GPU: %s\n", why);
            return 1;
        }
        tu_cuda_or_exit(); /* exits: 77 without a GPU, 1 when one is there but broken */
        printf("FAILED: the GPU works but a model could not be created on it: %s\n", why);
        return 1;
    }
    herd_model_free(m);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_matches_cpu),
    };
    int rc = tu_run(tests, NULL, NULL);
    herd_backend_cuda_shutdown();
    return rc;
}
