/* Parity with PyTorch 1.13: fixtures from tests/make_fixtures.py hold fixed weights
 * and inputs for lenet5 and resnet20 with PyTorch's logits, loss, every gradient
 * and the state after 10 SGD-momentum steps. The first forward (logits, loss) must agree
 * to 1e-4 for both. lenet5's gradients and 10-step state must too. resnet20's are held
 * to 1e-2 and its state to 3e-2: its gradients depend on which convolution kernels oneDNN picks for the CPU.
 * Measured on an AVX2-only CPU (AMD EPYC, 2026-11-24; the fixtures and the 1e-4 bound
 * came from an AVX-512 one): the gradients from the fc layer back to layer2.2.conv2
 * match to ~2e-6 (norm-relative), then layer2.2.bn1's bias gradient (a sum over the
 * batch that cancels) jumps to 1.2e-2 while its weight gradient stays at 2e-6, and the
 * earlier layers inherit ~6e-3; the worst element is 3.2e-3 of max(1, |value|), the
 * 10-step state's 1.24e-2 (a running variance) and the 10th loss's 2.1e-3. A jump at one layer rather than a
 * growth looks like rounding meeting a ReLU input or a cancelling sum at its edge (not
 * proven); oneDNN's SSE4.1 kernels on the same CPU give ~1e-3 norm-relative there, and
 * lenet5 (no batch norm) agrees to 1e-8 on this CPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/safetensors.h"
#include "nn/model.h"
#include "optim/optim.h"
#include "testutil.h"

static void expect_close(const char *what, const float *got, const float *want, size_t n,
                         double tol)
{
    double err = tu_max_rel_err(got, want, n);
    if (getenv("HERD_PARITY_VERBOSE"))
        printf("  %-40s max rel err %.2e\n", what, err);
    if (!(err <= tol))
        fail_msg("%s differs from PyTorch: max relative error %.3g (tolerance %.1g)", what, err, tol);
}

static void check_model(const char *name, int batch, double tol, double state_tol)
{
    char path[512];
    snprintf(path, sizeof path, "%s/fixtures/%s.safetensors", HERD_TEST_DIR, name);
    herd_st_file *f;
    assert_herd_ok(herd_safetensors_read(path, &f));
    herd_model *m;
    assert_herd_ok(herd_model_create_shape(name, 1, 28, 28, 10, &m));
    assert_herd_ok(m->be->set_threads(1));
    char key[160];
    tu_fixture_load_init(m, f);
    size_t in_n = (size_t)batch * 28 * 28;
    const float *x = tu_fixture_tensor(f, "input", in_n);
    const float *label_f = tu_fixture_tensor(f, "labels", (size_t)batch);
    int32_t labels[16];
    for (int i = 0; i < batch; i++)
        labels[i] = (int32_t)label_f[i];

    herd_train_config cfg;
    herd_train_config_default(&cfg);
    cfg.lr = (float)atof(herd_st_meta(f, "lr"));
    cfg.momentum = 0.9f;
    cfg.weight_decay = 5e-4f;
    cfg.decay_bn_bias = true; /* PyTorch's SGD decays every parameter */
    herd_optimizer *opt;
    assert_herd_ok(herd_optimizer_create(&cfg, m, &opt));
    assert_herd_ok(herd_model_reshape(m, batch));
    float *dlogits = calloc((size_t)batch * 10, sizeof(float));
    const float *losses = tu_fixture_tensor(f, "losses", 10);
    for (int step = 0; step < 10; step++) {
        herd_run_ctx ctx = herd_model_ctx(m, true, 0);
        const float *logits;
        assert_herd_ok(herd_model_forward(m, &ctx, x, &logits));
        double loss_sum;
        long correct;
        assert_herd_ok(m->be->softmax_xent(batch, 10, logits, labels, 0.0f, dlogits, &loss_sum,
                                           &correct));
        float loss = (float)(loss_sum / batch);
        snprintf(key, sizeof key, "%s loss at step %d", name, step + 1);
        expect_close(key, &loss, &losses[step], 1, step == 0 ? 1e-4 : tol);
        if (step == 0) {
            expect_close("logits", logits, tu_fixture_tensor(f, "logits", (size_t)batch * 10),
                         (size_t)batch * 10, 1e-4);
            double smooth_sum;
            assert_herd_ok(m->be->softmax_xent(batch, 10, logits, labels, 0.1f, NULL, &smooth_sum,
                                               &correct));
            float smooth = (float)(smooth_sum / batch);
            expect_close("label-smoothed loss", &smooth, tu_fixture_tensor(f, "loss_smooth", 1), 1, 1e-4);
        }
        assert_herd_ok(herd_model_backward(m, &ctx, x, dlogits));
        if (step == 0)
            for (int v = 0; v < m->n_views; v++) {
                const herd_tensor_view *tv = &m->views[v];
                if (tv->is_buffer)
                    continue;
                snprintf(key, sizeof key, "grad.%s", tv->name);
                expect_close(key, m->grads + tv->offset, tu_fixture_tensor(f, key, tv->numel), tv->numel, tol);
            }
        assert_herd_ok(herd_optimizer_step(opt, m, cfg.lr));
    }
    for (int v = 0; v < m->n_views; v++) {
        const herd_tensor_view *tv = &m->views[v];
        snprintf(key, sizeof key, "after.%s", tv->name);
        const float *got = (tv->is_buffer ? m->buffers : m->params) + tv->offset;
        expect_close(key, got, tu_fixture_tensor(f, key, tv->numel), tv->numel, state_tol);
    }
    printf("%s: forward, loss, gradients and 10 SGD steps of all %d tensors match PyTorch\n", name, m->n_views);
    free(dlogits);
    herd_optimizer_free(opt);
    herd_model_free(m);
    herd_st_free(f);
}

static void test_lenet5(void **state)
{
    (void)state;
    check_model("lenet5", 8, 1e-4, 1e-4);
}

static void test_resnet20(void **state)
{
    (void)state;
    check_model("resnet20", 8, 1e-2, 3e-2);
}

/* gpt-nano (tests/make_fixtures.py's make_lm): token ids in, a prediction at every
 * position; logits, loss and every gradient (the token table's tied: the head's part and
 * the embedding's) to 1e-5, then 20 AdamW steps' losses to 1e-4 and the state after. */
static void test_gpt_nano(void **state)
{
    (void)state;
    char path[512], key[160];
    snprintf(path, sizeof path, "%s/fixtures/gpt-nano.safetensors", HERD_TEST_DIR);
    herd_st_file *f;
    assert_herd_ok(herd_safetensors_read(path, &f));
    int n = atoi(herd_st_meta(f, "batch")), t = atoi(herd_st_meta(f, "seq_len"));
    int vocab = atoi(herd_st_meta(f, "vocab")), steps = atoi(herd_st_meta(f, "steps"));
    herd_model *m;
    assert_herd_ok(herd_model_create_shape("gpt-nano", 1, t, 1, vocab, &m));
    assert_int_equal(m->positions, t);
    assert_herd_ok(m->be->set_threads(1));
    tu_fixture_load_init(m, f);
    int rows = n * t;
    const float *x = tu_fixture_tensor(f, "input", (size_t)rows);
    const float *label_f = tu_fixture_tensor(f, "labels", (size_t)rows);
    int32_t *labels = malloc((size_t)rows * sizeof *labels);
    for (int i = 0; i < rows; i++)
        labels[i] = (int32_t)label_f[i];
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    cfg.optimizer = HERD_OPT_ADAMW;
    cfg.lr = (float)atof(herd_st_meta(f, "lr"));
    cfg.beta1 = (float)atof(herd_st_meta(f, "beta1"));
    cfg.beta2 = (float)atof(herd_st_meta(f, "beta2"));
    cfg.eps = (float)atof(herd_st_meta(f, "eps"));
    cfg.weight_decay = (float)atof(herd_st_meta(f, "weight_decay"));
    cfg.decay_bn_bias = false; /* PyTorch's groups: no decay on 1-D tensors */
    herd_optimizer *opt;
    assert_herd_ok(herd_optimizer_create(&cfg, m, &opt));
    assert_herd_ok(herd_model_reshape(m, n));
    float *dlogits = calloc((size_t)rows * vocab, sizeof(float));
    const float *losses = tu_fixture_tensor(f, "losses", (size_t)steps);
    for (int step = 0; step < steps; step++) {
        herd_run_ctx ctx = herd_model_ctx(m, true, 0);
        const float *logits;
        assert_herd_ok(herd_model_forward(m, &ctx, x, &logits));
        double loss_sum;
        long correct;
        assert_herd_ok(m->be->softmax_xent(rows, vocab, logits, labels, 0.0f, dlogits, &loss_sum,
                                           &correct));
        float loss = (float)(loss_sum / rows);
        snprintf(key, sizeof key, "gpt-nano loss at step %d", step + 1);
        expect_close(key, &loss, &losses[step], 1, step == 0 ? 1e-5 : 1e-4);
        if (step == 0)
            expect_close("logits", logits, tu_fixture_tensor(f, "logits", (size_t)rows * vocab),
                         (size_t)rows * vocab, 1e-5);
        assert_herd_ok(herd_model_backward(m, &ctx, x, dlogits));
        for (int v = 0; v < m->n_views && step == 0; v++) {
            const herd_tensor_view *tv = &m->views[v];
            snprintf(key, sizeof key, "grad.%s", tv->name);
            expect_close(key, m->grads + tv->offset, tu_fixture_tensor(f, key, tv->numel),
                         tv->numel, 1e-5);
        }
        assert_herd_ok(herd_optimizer_step(opt, m, cfg.lr));
    }
    for (int v = 0; v < m->n_views; v++) {
        const herd_tensor_view *tv = &m->views[v];
        snprintf(key, sizeof key, "after.%s", tv->name);
        const float *want = tu_fixture_tensor(f, key, tv->numel), *got = m->params + tv->offset;
        size_t len = tv->numel;
        bool qkv_bias = strstr(tv->name, ".qkv.bias") != NULL;
        /* The key bias's gradient is zero (a softmax does not see a shift), so both sides
         * get rounding noise that AdamW scales up to steps of lr: q and v thirds only. */
        if (qkv_bias)
            len /= 3;
        expect_close(key, got, want, len, 1e-4);
        if (qkv_bias)
            expect_close(key, got + 2 * len, want + 2 * len, len, 1e-4);
    }
    printf("gpt-nano: logits, loss, gradients and %d AdamW steps of all %d tensors match "
           "PyTorch\n", steps, m->n_views);
    free(labels);
    free(dlogits);
    herd_optimizer_free(opt);
    herd_model_free(m);
    herd_st_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lenet5),
        cmocka_unit_test(test_resnet20),
        cmocka_unit_test(test_gpt_nano),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
