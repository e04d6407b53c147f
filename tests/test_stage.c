/* Pipeline stages as models: a whole model cut into consecutive stages computes
 * bitwise what the whole computes (initial weights, logits, every gradient), with
 * each stage's input gradient handed to the stage before. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/model.h"
#include "testutil.h"

/* A stage may begin at b when no layer from b on reads before b-1 or the input. */
static bool can_cut(const herd_model *m, int b)
{
    for (int j = b; j < m->n_layers; j++)
        for (int k = 0; k < m->layers[j].spec.n_inputs; k++)
            if (m->layers[j].spec.inputs[k] < b - 1)
                return false;
    return true;
}

static void run_whole(herd_model *m, const float *x, const float *dlogits, float *logits_out)
{
    herd_run_ctx ctx = herd_model_ctx(m, true, 99);
    const float *logits;
    assert_int_equal(herd_model_forward(m, &ctx, x, &logits), HERD_OK);
    memcpy(logits_out, logits, (size_t)m->batch * m->classes * sizeof(float));
    assert_int_equal(herd_model_backward(m, &ctx, x, dlogits), HERD_OK);
}

/* Cuts the whole model at `cuts` (sorted layer indices) and compares. */
static void check_cuts(herd_model *whole, const int *cuts, int n_cuts, int batch)
{
    int stages = n_cuts + 1, bounds[8];
    bounds[0] = 0;
    for (int i = 0; i < n_cuts; i++)
        bounds[i + 1] = cuts[i];
    bounds[stages] = whole->n_layers;
    size_t in = (size_t)whole->in_c * whole->in_h * whole->in_w;
    float *x = tu_randv((size_t)batch * in, 5);
    float *dlogits = tu_randv((size_t)batch * whole->classes, 6);
    float *want_logits = malloc((size_t)batch * whole->classes * sizeof(float));
    assert_int_equal(herd_model_reshape(whole, batch), HERD_OK);
    run_whole(whole, x, dlogits, want_logits);

    herd_model *st[8];
    const float *acts[8];
    size_t param_at = 0, buffer_at = 0;
    for (int s = 0; s < stages; s++) {
        st[s] = calloc(1, sizeof *st[s]);
        assert_int_equal(herd_model_build_stage(st[s], whole, bounds[s], bounds[s + 1], true, s > 0, 0),
                         HERD_OK);
        assert_memory_equal(st[s]->params, whole->params + param_at, st[s]->n_param_floats * 4);
        assert_int_equal(herd_model_reshape(st[s], batch), HERD_OK);
        herd_run_ctx ctx = herd_model_ctx(st[s], true, 99);
        assert_int_equal(herd_model_forward(st[s], &ctx, s ? acts[s - 1] : x, &acts[s]), HERD_OK);
        param_at += st[s]->n_param_floats;
        buffer_at += st[s]->n_buffer_floats;
    }
    assert_int_equal(param_at, whole->n_param_floats);
    assert_int_equal(buffer_at, whole->n_buffer_floats);
    assert_memory_equal(acts[stages - 1], want_logits, (size_t)batch * whole->classes * 4);
    const float *dy = dlogits;
    for (int s = stages - 1; s >= 0; s--) {
        herd_run_ctx ctx = herd_model_ctx(st[s], true, 99);
        assert_int_equal(herd_model_backward(st[s], &ctx, s ? acts[s - 1] : x, dy), HERD_OK);
        dy = st[s]->dinput;
    }
    param_at = buffer_at = 0;
    for (int s = 0; s < stages; s++) {
        if (memcmp(st[s]->grads, whole->grads + param_at, st[s]->n_param_floats * 4) != 0)
            fail_msg("%s: stage %d of cuts at %d: gradients differ from the whole model's",
                     whole->name, s, cuts[0]);
        /* Batch norm's running statistics, updated by the forward passes. */
        assert_memory_equal(st[s]->buffers, whole->buffers + buffer_at, st[s]->n_buffer_floats * 4);
        param_at += st[s]->n_param_floats;
        buffer_at += st[s]->n_buffer_floats;
        herd_model_free(st[s]);
    }
    free(x);
    free(dlogits);
    free(want_logits);
}

static herd_model *make(const char *name, int c, int hw)
{
    herd_model *m;
    assert_int_equal(herd_model_create_shape(name, c, hw, hw, 10, &m), HERD_OK);
    return m;
}

static void test_every_single_cut(void **state)
{
    (void)state;
    const char *names[] = {"mlp", "lenet5", "resnet20"};
    const int chans[] = {1, 1, 3}, sizes[] = {28, 28, 32};
    for (int k = 0; k < 3; k++) {
        int valid = 0;
        herd_model *probe = make(names[k], chans[k], sizes[k]);
        int n = probe->n_layers;
        herd_model_free(probe);
        for (int b = 1; b < n; b++) {
            /* Fresh whole model each time: the forward passes move the running statistics. */
            herd_model *whole = make(names[k], chans[k], sizes[k]);
            if (can_cut(whole, b)) {
                check_cuts(whole, &b, 1, 3);
                valid++;
            }
            herd_model_free(whole);
        }
        assert_true(valid > 0);
    }
}

static void test_three_stages_and_refusal(void **state)
{
    (void)state;
    herd_model *whole = make("resnet20", 3, 32);
    int cuts[2] = {0, 0}, found = 0;
    for (int b = 1; b < whole->n_layers && found < 2; b++)
        if (can_cut(whole, b) && (found == 0 || b > cuts[0] + 5))
            cuts[found++] = b;
    assert_int_equal(found, 2);
    check_cuts(whole, cuts, 2, 2);
    /* Inside a residual block: the shortcut reads across the cut. */
    int inside = -1;
    for (int b = 1; b < whole->n_layers && inside < 0; b++)
        if (!can_cut(whole, b))
            inside = b;
    assert_true(inside > 0);
    herd_model *bad = calloc(1, sizeof *bad);
    assert_int_equal(herd_model_build_stage(bad, whole, inside, whole->n_layers, true, true, 0),
                     HERD_ERR_INVALID_ARG);
    assert_non_null(strstr(herd_last_error(), "reads"));
    herd_model_free(bad);
    herd_model_free(whole);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_single_cut),
        cmocka_unit_test(test_three_stages_and_refusal),
    };
    return tu_run(tests, NULL, NULL);
}
