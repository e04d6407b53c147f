/* Finite-difference gradient checks for every layer type and the loss, through
 * the real graph: each model starts with a 1x1 "pre" convolution so the tested
 * layer's input gradient is checked through pre's weight gradient. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/model.h"
#include "testutil.h"

typedef struct gc_case {
    const char *name;
    const char *layers; /* JSON layer objects between "pre" and the final linear */
    int c, h, w;
    float smoothing;
} gc_case;

static double model_loss(herd_model *m, const float *x, const int32_t *labels, int n,
                         float smoothing, float *dlogits)
{
    herd_run_ctx ctx = herd_model_ctx(m, true, 1234);
    const float *logits;
    assert_herd_ok(herd_model_forward(m, &ctx, x, &logits));
    double loss_sum = 0;
    long correct = 0;
    assert_herd_ok(
        m->be->softmax_xent(n, m->classes, logits, labels, smoothing, dlogits, &loss_sum, &correct));
    return loss_sum / n;
}

/* ||a - b|| / ||b||, robust to the odd kink (ReLU, max pool) hit by a perturbation. */
static double rel_norm_err(const double *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num) / fmax(sqrt(den), 1e-8);
}

static void check_case(const gc_case *gc)
{
    char text[4096];
    snprintf(text, sizeof text,
             "{\"layers\": [{\"type\": \"conv2d\", \"name\": \"pre\", \"out\": %d, \"kernel\": 1},"
             " %s%s {\"type\": \"flatten\"}, {\"type\": \"linear\", \"name\": \"head\", \"out\": 4}]}",
             gc->c, gc->layers, *gc->layers ? "," : "");
    herd_layer_spec *specs;
    int n_specs;
    assert_herd_ok(herd_model_parse_text(text, gc->name, 4, &specs, &n_specs));
    herd_model *m = calloc(1, sizeof *m);
    m->in_c = gc->c, m->in_h = gc->h, m->in_w = gc->w, m->classes = 4;
    snprintf(m->name, sizeof m->name, "%s", gc->name);
    assert_herd_ok(herd_model_build(m, specs, n_specs, 7));
    free(specs);
    assert_herd_ok(m->be->set_threads(1));

    const int n = 3;
    assert_herd_ok(herd_model_reshape(m, n));
    size_t in_size = (size_t)n * gc->c * gc->h * gc->w;
    float *x = malloc(in_size * sizeof *x);
    tu_fill_uniform(x, in_size, -1.0f, 1.0f, 99);
    int32_t labels[3] = {0, 3, 1};
    float *dlogits = calloc((size_t)n * 4, sizeof *dlogits);

    model_loss(m, x, labels, n, gc->smoothing, dlogits);
    herd_run_ctx ctx = herd_model_ctx(m, true, 1234);
    assert_herd_ok(herd_model_backward(m, &ctx, x, dlogits));

    /* Every parameter of every layer (capped per tensor to keep the test quick). */
    size_t cap = 0;
    for (int v = 0; v < m->n_views; v++)
        if (!m->views[v].is_buffer)
            cap += m->views[v].numel < 24 ? m->views[v].numel : 24;
    double *analytic = calloc(cap, sizeof(double)), *numeric = calloc(cap, sizeof(double));
    size_t k = 0;
    const float eps = 1e-2f;
    for (int v = 0; v < m->n_views; v++) {
        const herd_tensor_view *tv = &m->views[v];
        if (tv->is_buffer)
            continue;
        size_t take = tv->numel < 24 ? tv->numel : 24;
        for (size_t j = 0; j < take; j++) {
            size_t idx = tv->offset + (j * 7919) % tv->numel;
            float saved = m->params[idx];
            m->params[idx] = saved + eps;
            double lp = model_loss(m, x, labels, n, gc->smoothing, NULL);
            m->params[idx] = saved - eps;
            double lm = model_loss(m, x, labels, n, gc->smoothing, NULL);
            m->params[idx] = saved;
            analytic[k] = m->grads[idx];
            numeric[k] = (lp - lm) / (2.0 * eps);
            k++;
        }
    }
    double err = rel_norm_err(analytic, numeric, k);
    if (err > 2e-2)
        fail_msg("%s: gradient relative error %.3g over %zu entries", gc->name, err, k);
    free(analytic);
    free(numeric);
    free(x);
    free(dlogits);
    herd_model_free(m);
}

static void test_gradients(void **state)
{
    (void)state;
    static const gc_case cases[] = {
        {"linear", "", 3, 2, 2, 0},
        {"conv2d", "{\"type\": \"conv2d\", \"name\": \"c\", \"out\": 4, \"kernel\": 3, \"pad\": 1}", 2, 5, 5, 0},
        {"conv2d_stride", "{\"type\": \"conv2d\", \"name\": \"c\", \"out\": 3, \"kernel\": 3, \"stride\": 2, \"bias\": false}", 2, 7, 7, 0},
        {"relu", "{\"type\": \"relu\"}", 2, 3, 3, 0},
        {"maxpool", "{\"type\": \"maxpool\", \"kernel\": 2}", 2, 4, 4, 0},
        {"avgpool", "{\"type\": \"avgpool\", \"kernel\": 2}", 2, 4, 4, 0},
        {"global_avgpool", "{\"type\": \"global_avgpool\"}", 3, 3, 3, 0},
        {"batchnorm", "{\"type\": \"batchnorm\", \"name\": \"bn\"}", 3, 3, 3, 0},
        {"dropout", "{\"type\": \"dropout\", \"p\": 0.3}", 2, 3, 3, 0},
        {"add", "{\"type\": \"conv2d\", \"name\": \"a\", \"out\": 2, \"kernel\": 3, \"pad\": 1},"
                "{\"type\": \"add\", \"inputs\": [\"a\", \"pre\"]}", 2, 4, 4, 0},
        {"loss_smoothing", "", 3, 2, 2, 0.1f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i]);
}

/* The loss gradient on its own: dlogits against finite differences of the loss. */
static void test_loss_gradient(void **state)
{
    (void)state;
    const herd_backend *be = herd_backend_cpu();
    enum { N = 4, C = 5 };
    float logits[N * C], dl[N * C];
    int32_t labels[N] = {0, 4, 2, 2};
    tu_fill_uniform(logits, N * C, -3, 3, 5);
    for (int s = 0; s < 2; s++) {
        float smooth = s ? 0.2f : 0.0f;
        double loss;
        long correct;
        assert_herd_ok(be->softmax_xent(N, C, logits, labels, smooth, dl, &loss, &correct));
        for (int i = 0; i < N * C; i++) {
            float saved = logits[i];
            double lp, lm;
            logits[i] = saved + 1e-3f;
            assert_herd_ok(be->softmax_xent(N, C, logits, labels, smooth, NULL, &lp, &correct));
            logits[i] = saved - 1e-3f;
            assert_herd_ok(be->softmax_xent(N, C, logits, labels, smooth, NULL, &lm, &correct));
            logits[i] = saved;
            double numeric = (lp - lm) / (2e-3 * N);
            assert_true(fabs(numeric - dl[i]) < 2e-3);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_loss_gradient),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
