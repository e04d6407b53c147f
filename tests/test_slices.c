/* A batch run as slices layer by layer (nn/slices.h) computes what the model computes
 * on the whole batch: resnet20's batch norms normalise over the whole batch (the slices'
 * sums added between them), so its logits, every parameter gradient (the slices' added)
 * and the running statistics match the whole-batch run within rounding, for 8 samples
 * as 1 slice of 8, 4 of 2 and 8 of 1, and with the slices' layers on 2 and 3 threads;
 * every slice's gradient of every layer is handed over exactly once; models with tied
 * weights are refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/slices.h"
#include "testutil.h"

enum { BATCH = 8, HW = 8, CLASSES = 10 };

typedef struct collect {
    herd_model *m;
    double *grads; /* the slices' gradients added */
    int *seen;     /* per layer: slices handed over */
    int n;         /* slices */
    int rows_calls;
} collect;

/* One rank: the slices' rows in their order. */
static herd_status sum_rows(void *user, const double *rows, int width, double *out)
{
    collect *c = user;
    c->rows_calls++;
    for (int w = 0; w < width; w++)
        out[w] = 0;
    for (int i = 0; i < c->n; i++)
        for (int w = 0; w < width; w++)
            out[w] += rows[(size_t)i * width + w];
    return HERD_OK;
}

static herd_status grads_ready(void *user, int slice, int layer, const float *grads)
{
    (void)slice;
    collect *c = user;
    const herd_layer *l = &c->m->layers[layer];
    c->seen[layer]++;
    for (int k = 0; k < l->n_tensors; k++) {
        const herd_tensor_view *v = &c->m->views[l->first_tensor + k];
        if (!v->is_buffer)
            for (size_t i = 0; i < v->numel; i++)
                c->grads[v->offset + i] += grads[v->offset + i];
    }
    return HERD_OK;
}

static herd_model *make(void)
{
    herd_model *m;
    assert_int_equal(herd_model_create_shape("resnet20", 3, HW, HW, CLASSES, &m), HERD_OK);
    return m;
}

/* |a - b| within tol of the larger of |b| and the tensor's scale. */
static void assert_close(const float *a, const double *b, size_t n, double tol, const char *what)
{
    double scale = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(b[i]));
    for (size_t i = 0; i < n; i++)
        if (!(fabs(a[i] - b[i]) <= tol * scale)) {
            fprintf(stderr, "%s[%zu]: %.9g, want %.9g (scale %g)\n", what, i, (double)a[i], b[i], scale);
            fail();
        }
}

/* threads > 1: the slices' layers on that many threads at once (slices.threads), each
 * writing its own gradients. */
static void check_slices(int size, int threads)
{
    int n = BATCH / size;
    size_t in = 3 * HW * HW;
    float *x = tu_randv(BATCH * in, 5), *dlogits = tu_randv(BATCH * CLASSES, 6);

    /* The whole batch at once. */
    herd_model *whole = make();
    assert_int_equal(herd_model_reshape(whole, BATCH), HERD_OK);
    herd_run_ctx ctx = herd_model_ctx(whole, true, 7);
    const float *logits;
    assert_int_equal(herd_model_forward(whole, &ctx, x, &logits), HERD_OK);
    double *want_logits = malloc(BATCH * CLASSES * sizeof *want_logits);
    for (size_t i = 0; i < BATCH * CLASSES; i++)
        want_logits[i] = logits[i];
    assert_int_equal(herd_model_backward(whole, &ctx, x, dlogits), HERD_OK);
    double *want_grads = malloc(whole->n_param_floats * sizeof *want_grads);
    double *want_buffers = malloc(whole->n_buffer_floats * sizeof *want_buffers);
    for (size_t i = 0; i < whole->n_param_floats; i++)
        want_grads[i] = whole->grads[i];
    for (size_t i = 0; i < whole->n_buffer_floats; i++)
        want_buffers[i] = whole->buffers[i];

    /* The same initial model (seed 0) as slices. */
    herd_model *m = make();
    herd_slices s = {0};
    assert_int_equal(herd_slices_reshape(&s, m, n, size), HERD_OK);
    float *thread_grads[4] = {0};
    for (int t = 0; t < threads && threads > 1; t++)
        thread_grads[t] = calloc(m->n_param_floats, sizeof(float));
    s.threads = threads;
    s.thread_grads = thread_grads;
    collect c = {.m = m, .n = n, .grads = calloc(m->n_param_floats, sizeof(double)),
                 .seen = calloc((size_t)m->n_layers, sizeof(int))};
    herd_slice_sums sums = {.sum_rows = sum_rows, .grads_ready = grads_ready, .user = &c};
    const float *xs[BATCH], *dls[BATCH];
    uint64_t seeds[BATCH];
    for (int i = 0; i < n; i++) {
        xs[i] = x + (size_t)i * size * in;
        dls[i] = dlogits + (size_t)i * size * CLASSES;
        seeds[i] = 7;
    }
    ctx = herd_model_ctx(m, true, 7);
    assert_int_equal(herd_slices_forward(&s, &ctx, seeds, xs, &sums), HERD_OK);
    for (int i = 0; i < n; i++)
        assert_close(herd_slices_logits(&s, i), want_logits + (size_t)i * size * CLASSES,
                     (size_t)size * CLASSES, 1e-4, "logits");
    assert_int_equal(herd_slices_backward(&s, &ctx, seeds, xs, dls, &sums), HERD_OK);
    float *got = malloc(m->n_param_floats * sizeof *got);
    for (size_t i = 0; i < m->n_param_floats; i++)
        got[i] = (float)c.grads[i];
    assert_close(got, want_grads, m->n_param_floats, 1e-4, "gradients");
    assert_close(m->buffers, want_buffers, m->n_buffer_floats, 1e-5, "running statistics");
    for (int l = 0; l < m->n_layers; l++)
        assert_int_equal(c.seen[l], n); /* once per slice, every layer */
    /* Each batch norm: two sums forward, one backward (the first one reads the input). */
    int bns = 0;
    for (int l = 0; l < m->n_layers; l++)
        bns += herd_layer_is_batchnorm(&m->layers[l]);
    assert_int_equal(c.rows_calls, 3 * bns);

    herd_slices_free(&s);
    for (int t = 0; t < 4; t++)
        free(thread_grads[t]);
    herd_model_free(m);
    herd_model_free(whole);
    free(got), free(c.grads), free(c.seen), free(want_logits), free(want_grads);
    free(want_buffers), free(x), free(dlogits);
}

static void test_one_slice(void **state) { (void)state; check_slices(8, 1); }
static void test_four_slices(void **state) { (void)state; check_slices(2, 1); }
static void test_eight_slices(void **state) { (void)state; check_slices(1, 1); }
static void test_four_slices_on_two_threads(void **state) { (void)state; check_slices(2, 2); }
static void test_eight_slices_on_three_threads(void **state) { (void)state; check_slices(1, 3); }

static void test_tied_weights_refused(void **state)
{
    (void)state;
    herd_model *m;
    assert_int_equal(herd_model_create_shape("gpt-nano", 1, 16, 1, 256, &m), HERD_OK);
    herd_slices s = {0};
    herd_status st = herd_slices_reshape(&s, m, 2, 1);
    assert_int_equal(st, HERD_ERR_UNSUPPORTED);
    assert_non_null(strstr(herd_last_error(), "ties weights"));
    herd_slices_free(&s);
    herd_model_free(m);
}

int main(void)
{
    if (herd_backend_cpu()->set_threads(1) != HERD_OK)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_slice),
        cmocka_unit_test(test_four_slices),
        cmocka_unit_test(test_eight_slices),
        cmocka_unit_test(test_four_slices_on_two_threads),
        cmocka_unit_test(test_eight_slices_on_three_threads),
        cmocka_unit_test(test_tied_weights_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
