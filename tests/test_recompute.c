/* Activation recomputation's storage (nn/recompute.h): a model that re-runs its runs'
 * insides gives the gradients and running statistics of one that holds them, bit for bit,
 * its insides in one pool; resnet20 has 9 runs to re-run, lenet5 (a chain) none; two
 * models sharing one pool (a pipeline stage's slots) each re-run what the other
 * overwrote; a pool grown by one model leaves the other stale until it reshapes, and a
 * backward across that move is refused instead of reading freed memory. */
#include <stdlib.h>
#include <string.h>

#include "nn/recompute.h"
#include "testutil.h"

enum { HW = 8, CLASSES = 10 };

static herd_model *make_hw(const char *name, int c, int hw, bool recompute)
{
    herd_model *m;
    assert_int_equal(herd_model_create_shape(name, c, hw, hw, CLASSES, &m), HERD_OK);
    herd_model_set_recompute(m, recompute);
    return m;
}

static herd_model *make(const char *name, int c, bool recompute) { return make_hw(name, c, HW, recompute); }

/* One training step's forward and backward of m on x at `batch` (reshaped first). */
static void step(herd_model *m, int batch, const float *x, const float *dlogits)
{
    assert_int_equal(herd_model_reshape(m, batch), HERD_OK);
    herd_run_ctx ctx = herd_model_ctx(m, true, 11);
    const float *logits;
    assert_int_equal(herd_model_forward(m, &ctx, x, &logits), HERD_OK);
    assert_int_equal(herd_model_backward(m, &ctx, x, dlogits), HERD_OK);
}

static void assert_same_state(const herd_model *a, const herd_model *b)
{
    assert_int_equal(a->n_param_floats, b->n_param_floats);
    assert_memory_equal(a->grads, b->grads, a->n_param_floats * sizeof(float));
    assert_memory_equal(a->buffers, b->buffers, a->n_buffer_floats * sizeof(float));
}

static bool in_pool(const herd_model *m, const void *p)
{
    const char *mem = m->rc->pool->mem;
    return (const char *)p >= mem && (const char *)p < mem + m->rc->pool->bytes;
}

static void test_runs(void **state)
{
    (void)state;
    herd_model *rn = make("resnet20", 3, true), *lenet = make_hw("lenet5", 1, 28, true);
    assert_int_equal(herd_recompute_runs(rn), 9);
    assert_int_equal(herd_recompute_runs(lenet), 0);
    herd_model_free(rn);
    herd_model_free(lenet);
}

static void test_same_bits(void **state)
{
    (void)state;
    enum { B = 4 };
    float *x = tu_randv(B * 3 * HW * HW, 1), *dl = tu_randv(B * CLASSES, 2);
    herd_model *held = make("resnet20", 3, false), *rc = make("resnet20", 3, true);
    step(held, B, x, dl);
    step(rc, B, x, dl);
    assert_same_state(held, rc);
    /* resnet20's first block's first convolution is inside a run: in the pool. */
    assert_true(in_pool(rc, rc->acts[3]));
    assert_false(held->rc->pool->mem != NULL && in_pool(held, held->acts[3]));
    /* Twice more, the running statistics moving once a step as without. */
    step(held, B, x, dl);
    step(rc, B, x, dl);
    assert_same_state(held, rc);
    herd_model_free(held);
    herd_model_free(rc);
    free(x);
    free(dl);
}

static void test_shared_pool(void **state)
{
    (void)state;
    enum { B = 4 };
    size_t in = 3 * HW * HW;
    float *x = tu_randv(2 * B * in, 3), *dl = tu_randv(2 * B * CLASSES, 4);
    const float *x2 = x + B * in, *dl2 = dl + B * CLASSES;
    herd_model *a = make("resnet20", 3, true), *b = make("resnet20", 3, true);
    herd_model *want_a = make("resnet20", 3, false), *want_b = make("resnet20", 3, false);
    herd_model *slots[2] = {a, b};
    assert_int_equal(herd_recompute_share(slots, 2), HERD_OK);

    /* Both forwards, then both backwards (GPipe's order): b's forward overwrote a's
     * insides, so a's backward re-runs every run. */
    herd_model *all[2] = {a, b};
    const float *xs[2] = {x, x2}, *dls[2] = {dl, dl2};
    herd_run_ctx ctx[2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(herd_model_reshape(all[i], B), HERD_OK);
        ctx[i] = herd_model_ctx(all[i], true, 11);
        const float *logits;
        assert_int_equal(herd_model_forward(all[i], &ctx[i], xs[i], &logits), HERD_OK);
    }
    assert_ptr_equal(a->rc->pool, b->rc->pool);
    assert_ptr_equal(a->acts[3], b->acts[3]);
    for (int i = 0; i < 2; i++)
        assert_int_equal(herd_model_backward(all[i], &ctx[i], xs[i], dls[i]), HERD_OK);
    step(want_a, B, x, dl);
    step(want_b, B, x2, dl2);
    assert_same_state(a, want_a);
    assert_same_state(b, want_b);

    /* a at a larger batch grows the pool: b is stale until it reshapes, and a backward
     * of b across the move is refused. */
    const float *logits;
    assert_int_equal(herd_model_forward(b, &ctx[1], x2, &logits), HERD_OK);
    assert_int_equal(herd_model_reshape(a, 2 * B), HERD_OK);
    assert_true(herd_recompute_stale(b));
    assert_int_equal(herd_model_backward(b, &ctx[1], x2, dl2), HERD_ERR_INTERNAL);
    assert_non_null(strstr(herd_last_error(), "moved between the forward and the backward"));
    step(b, B, x2, dl2); /* reshapes into the grown pool */
    assert_false(herd_recompute_stale(b));
    step(want_b, B, x2, dl2);
    /* b's refused backward wrote some gradients; its step since overwrote them all. */
    assert_memory_equal(b->grads, want_b->grads, b->n_param_floats * sizeof(float));
    herd_model_free(a);
    herd_model_free(b); /* the last user frees the pool (leak-checked under ASan) */
    herd_model_free(want_a);
    herd_model_free(want_b);
    free(x);
    free(dl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runs),
        cmocka_unit_test(test_same_bits),
        cmocka_unit_test(test_shared_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
