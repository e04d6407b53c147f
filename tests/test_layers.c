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

/* The mean loss over the model's n x positions predictions. */
static double model_loss(herd_model *m, const float *x, const int32_t *labels, int n,
                         float smoothing, float *dlogits)
{
    herd_run_ctx ctx = herd_model_ctx(m, true, 1234);
    const float *logits;
    assert_herd_ok(herd_model_forward(m, &ctx, x, &logits));
    double loss_sum = 0;
    long correct = 0;
    int rows = n * m->positions;
    assert_herd_ok(m->be->softmax_xent(rows, m->classes, logits, labels, smoothing, dlogits,
                                       &loss_sum, &correct));
    return loss_sum / rows;
}

/* Central differences of the loss in *p against its analytic gradient g. */
static void diff_entry(herd_model *m, const float *x, const int32_t *labels, int n, float *p,
                       const float *g, double *analytic, double *numeric)
{
    const float eps = 1e-3f;
    float saved = *p;
    *p = saved + eps;
    double lp = model_loss(m, x, labels, n, 0.0f, NULL);
    *p = saved - eps;
    double lm = model_loss(m, x, labels, n, 0.0f, NULL);
    *p = saved;
    *analytic = *g;
    *numeric = (lp - lm) / (2.0 * eps);
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

/* Layers without parameters before the first that has some (a flatten and a ReLU of the
 * input) get no output gradient, unless the model's input needs one (a pipeline stage's);
 * the parameters' gradients are the same bits either way. */
static void test_needs_grad(void **state)
{
    (void)state;
    const char *text = "{\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"relu\"},"
                       " {\"type\": \"linear\", \"name\": \"a\", \"out\": 6},"
                       " {\"type\": \"relu\"}, {\"type\": \"linear\", \"name\": \"b\", \"out\": 3}]}";
    herd_layer_spec *specs;
    int n_specs;
    assert_herd_ok(herd_model_parse_text(text, "needs", 3, &specs, &n_specs));
    herd_model *m = calloc(1, sizeof *m);
    m->in_c = 2, m->in_h = 3, m->in_w = 3, m->classes = 3;
    snprintf(m->name, sizeof m->name, "needs");
    assert_herd_ok(herd_model_build(m, specs, n_specs, 7));
    free(specs);
    const int n = 4;
    float x[4 * 18], dlogits[4 * 3];
    tu_fill_uniform(x, sizeof x / sizeof x[0], -1.0f, 1.0f, 5);
    int32_t labels[4] = {0, 2, 1, 2};
    float *first = malloc(m->n_param_floats * sizeof *first);
    for (int input_grad = 0; input_grad < 2; input_grad++) {
        m->input_grad = input_grad;
        assert_herd_ok(herd_model_reshape(m, n));
        model_loss(m, x, labels, n, 0.0f, dlogits);
        herd_run_ctx ctx = herd_model_ctx(m, true, 1);
        assert_herd_ok(herd_model_backward(m, &ctx, x, dlogits));
        const bool want[5] = {input_grad, input_grad, true, true, true};
        for (int i = 0; i < 5; i++)
            assert_int_equal(m->needs_grad[i], want[i]);
        if (!input_grad)
            memcpy(first, m->grads, m->n_param_floats * sizeof *first);
        else
            assert_memory_equal(first, m->grads, m->n_param_floats * sizeof *first);
    }
    free(first);
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

/* The transformer layers on a sequence (input 1 x T x C), each followed by a linear head
 * at every position (or ending in the tied lm_head): the loss is over every position,
 * and the input's gradient is checked directly (model->input_grad), besides every
 * parameter's. "tokens": the input is token ids of a vocabulary of c (no gradient). */
typedef struct token_case {
    const char *name;
    const char *layers;
    int t, c;
    bool tokens;
} token_case;

static void check_token_case(const token_case *tc)
{
    enum { N = 2, CLASSES = 5 };
    char text[4096];
    bool tied = strstr(tc->layers, "lm_head") != NULL;
    snprintf(text, sizeof text, "{\"layers\": [%s%s]}", tc->layers,
             tied ? "" : ", {\"type\": \"linear\", \"name\": \"head\", \"out\": 5, "
                         "\"per_position\": true}");
    herd_layer_spec *specs;
    int n_specs;
    assert_herd_ok(herd_model_parse_text(text, tc->name, CLASSES, &specs, &n_specs));
    herd_model *m = calloc(1, sizeof *m);
    m->in_c = 1, m->in_h = tc->t, m->in_w = tc->tokens ? 1 : tc->c;
    m->classes = tied ? tc->c : CLASSES;
    m->input_grad = !tc->tokens;
    snprintf(m->name, sizeof m->name, "%s", tc->name);
    assert_herd_ok(herd_model_build(m, specs, n_specs, 7));
    free(specs);
    assert_true(m->positions == tc->t);
    assert_herd_ok(m->be->set_threads(1));
    assert_herd_ok(herd_model_reshape(m, N));
    size_t in_size = (size_t)N * m->in_h * m->in_w, rows = (size_t)N * tc->t;
    float *x = malloc(in_size * sizeof *x);
    tu_fill_uniform(x, in_size, -1.0f, 1.0f, 99);
    int32_t *labels = malloc(rows * sizeof *labels);
    for (size_t i = 0; i < rows; i++)
        labels[i] = (int32_t)((i * 3 + 1) % (size_t)m->classes);
    for (size_t i = 0; i < in_size && tc->tokens; i++)
        x[i] = (float)((i * 5 + 2) % (size_t)tc->c); /* ids repeat: the table's sums are checked */
    float *dlogits = calloc(rows * (size_t)m->classes, sizeof *dlogits);
    model_loss(m, x, labels, N, 0.0f, dlogits);
    herd_run_ctx ctx = herd_model_ctx(m, true, 1234);
    for (size_t i = 0; i < m->n_param_floats; i++)
        m->grads[i] = 7.0f; /* a step's gradients overwrite the last step's (grad_beta 0) */
    assert_herd_ok(herd_model_backward(m, &ctx, x, dlogits));

    size_t cap = 64 + in_size;
    for (int v = 0; v < m->n_views; v++)
        cap += m->views[v].numel;
    double *analytic = calloc(cap, sizeof(double)), *numeric = calloc(cap, sizeof(double));
    size_t k = 0;
    for (int v = 0; v < m->n_views; v++) /* every entry: the tensors are small */
        for (size_t j = 0; j < m->views[v].numel; j++, k++) {
            size_t idx = m->views[v].offset + j;
            diff_entry(m, x, labels, N, &m->params[idx], &m->grads[idx], &analytic[k], &numeric[k]);
        }
    double perr = rel_norm_err(analytic, numeric, k);
    size_t kin = 0;
    for (size_t j = 0; j < in_size && !tc->tokens; j++, kin++)
        diff_entry(m, x, labels, N, &x[j], &m->dinput[j], &analytic[kin], &numeric[kin]);
    double ierr = kin ? rel_norm_err(analytic, numeric, kin) : 0;
    if (getenv("HERD_GRADCHECK_VERBOSE"))
        printf("  %-16s parameters %.2e over %zu, input %.2e over %zu\n", tc->name, perr, k, ierr,
               kin);
    if (perr > 2e-3 || ierr > 2e-3)
        fail_msg("%s: gradient relative error %.3g (parameters, %zu entries), %.3g (input, %zu)",
                 tc->name, perr, k, ierr, kin);
    free(analytic);
    free(numeric);
    free(x);
    free(labels);
    free(dlogits);
    herd_model_free(m);
}

static void test_token_gradients(void **state)
{
    (void)state;
    static const token_case cases[] = {
        {"layernorm", "{\"type\": \"layernorm\", \"name\": \"ln\"}", 3, 6, false},
        {"gelu", "{\"type\": \"gelu\"}", 3, 4, false},
        {"linear_per_pos", "{\"type\": \"linear\", \"name\": \"fc\", \"out\": 3, "
                           "\"per_position\": true}", 3, 4, false},
        {"attention", "{\"type\": \"attention\", \"name\": \"attn\", \"heads\": 2}", 4, 4,
         false},
        {"attention_1head", "{\"type\": \"attention\", \"name\": \"attn\", \"heads\": 1}", 3,
         3, false},
        {"embedding_tied", "{\"type\": \"embedding\", \"name\": \"emb\", \"vocab\": 7, "
                           "\"context\": 5, \"out\": 4}, {\"type\": \"layernorm\", "
                           "\"name\": \"ln\"}, {\"type\": \"lm_head\", \"tie\": \"emb\"}",
         4, 7, true},
        {"embedding", "{\"type\": \"embedding\", \"name\": \"emb\", \"vocab\": 6, "
                      "\"context\": 4, \"out\": 3}", 3, 6, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_token_case(&cases[i]);
}

/* A token id outside the vocabulary, or not a whole number, is refused naming it. */
static void test_bad_tokens(void **state)
{
    (void)state;
    const herd_backend *be = herd_backend_cpu();
    float wte[3 * 2] = {0}, wpe[2 * 2] = {0}, y[2 * 2];
    const float bad[][2] = {{1, 3}, {0.5f, 1}, {-1, 0}};
    for (int i = 0; i < 3; i++) {
        assert_int_not_equal(be->embedding_fwd(1, 2, 2, 3, 0, 3, bad[i], wte, wpe, y), HERD_OK);
        assert_non_null(strstr(herd_last_error(), "is not a token id of a vocabulary of 3"));
    }
    const float good[2] = {2, 0};
    assert_herd_ok(be->embedding_fwd(1, 2, 2, 3, 0, 3, good, wte, wpe, y));
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
        cmocka_unit_test(test_needs_grad),
        cmocka_unit_test(test_loss_gradient),
        cmocka_unit_test(test_token_gradients),
        cmocka_unit_test(test_bad_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
