/* The exact gradient sums of --deterministic (src/train/exact_sum.c): slices added in
 * any order give the same bits, gradients and batch-norm running statistics (each slice
 * updating them from the step's snapshot); the first step and a slice past the grid's
 * headroom ask for a redo; inf and NaN reach the mean instead of looping; slice losses on
 * their grid add in any order. (Several ranks: the
 * cli_deterministic test, which compares whole runs at 1 to 6 ranks.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "testutil.h"

#include "train/exact_sum.h"

enum { SLICES = 7, A = 1000, B = 37, R = 4, HERD_EXACT_GRID_TEXT_TEST = 256 };

/* A model of two parameter tensors and a buffer, enough for the sums. */
typedef struct fake {
    herd_model m;
    herd_tensor_view views[3];
    float grads[A + B];
    float buffers[R];
    herd_exact_sum e;
} fake;

static herd_comm *g_comm; /* one process: the sums' allreduce is the identity */

static void fake_init(fake *f)
{
    memset(f, 0, sizeof *f);
    f->views[0] = (herd_tensor_view){.name = "a", .offset = 0, .numel = A};
    f->views[1] = (herd_tensor_view){.name = "b", .offset = A, .numel = B};
    f->views[2] = (herd_tensor_view){.name = "running", .offset = 0, .numel = R, .is_buffer = 1};
    f->m.be = herd_backend_cpu();
    f->m.views = f->views;
    f->m.n_views = 3;
    f->m.n_param_floats = A + B;
    f->m.grads = f->grads;
    f->m.n_buffer_floats = R;
    f->m.buffers = f->buffers;
    for (int i = 0; i < R; i++) /* a running variance's start, and some spread */
        f->buffers[i] = 1.0f + (float)i;
    assert_herd_ok(herd_exact_sum_init(&f->e, &f->m, 1));
}

/* Slice s's gradient: values over many binades, tensor b far smaller than a. */
static void slice_grad(fake *f, int s, float scale)
{
    float *r = tu_randv(A + B, 100 + (uint64_t)s);
    for (int i = 0; i < A; i++)
        f->grads[i] = scale * r[i] * ldexpf(1.0f, (i % 17) - 8);
    for (int i = 0; i < B; i++)
        f->grads[A + i] = scale * 1e-6f * r[A + i];
    free(r);
}

/* Slice s's batch statistic for running buffer i. */
static float slice_stat(int s, int i) { return 0.3f * (float)(s + 1) + 0.01f * (float)i; }

/* What batch norm's forward does to the running buffers: momentum 0.1 towards the slice's
 * statistic, from what the buffers held. */
static void slice_forward(fake *f, int s)
{
    for (int i = 0; i < R; i++)
        f->buffers[i] = 0.9f * f->buffers[i] + 0.1f * slice_stat(s, i);
}

/* One step over the slices in `order`, redone while asked (at most twice); every slice
 * starts from the buffers the step found, as exact_step.c does. */
static void step(fake *f, const int *order, float scale, int *redos)
{
    herd_exact_sum *e = &f->e;
    bool redo = true;
    assert_herd_ok(herd_exact_sum_keep_buffers(e, &f->m));
    for (*redos = -1; redo; (*redos)++) {
        assert_true(*redos < 2);
        herd_exact_sum_begin(e, &f->m, SLICES, false);
        for (int k = 0; k < SLICES; k++) {
            assert_herd_ok(herd_exact_sum_restore_buffers(e, &f->m));
            slice_grad(f, order[k], scale);
            slice_forward(f, order[k]);
            assert_herd_ok(herd_exact_sum_add(e, &f->m));
        }
        assert_herd_ok(herd_exact_sum_finish(e, &f->m, g_comm, &redo));
    }
}

static void test_order_free(void **state)
{
    (void)state;
    static fake f, g;
    fake_init(&f);
    fake_init(&g);
    const int fwd[SLICES] = {0, 1, 2, 3, 4, 5, 6}, mixed[SLICES] = {5, 2, 6, 0, 3, 1, 4};
    float start[R];
    memcpy(start, f.buffers, sizeof start);
    int redos;
    step(&f, fwd, 1.0f, &redos);
    assert_int_equal(redos, 1); /* the first step measures its grid, then sums */
    step(&g, mixed, 1.0f, &redos);
    assert_memory_equal(f.grads, g.grads, sizeof f.grads);
    assert_memory_equal(f.buffers, g.buffers, sizeof f.buffers);
    /* The running statistics: the mean over the slices of each slice's update from the
     * step's start (not updated slice after slice), within the grid's precision. */
    for (int i = 0; i < R; i++) {
        double mean = 0;
        for (int s = 0; s < SLICES; s++)
            mean += (double)(0.9f * start[i] + 0.1f * slice_stat(s, i)) / SLICES;
        assert_true(fabs(f.buffers[i] - mean) <= 1e-6 * fabs(mean));
    }
    /* The mean, to the grid's precision (30 bits below each tensor's largest value). */
    double worst = 0;
    for (int i = 0; i < A + B; i++) {
        double sum = 0, mx = 0;
        for (int s = 0; s < SLICES; s++) {
            slice_grad(&g, s, 1.0f);
            sum += g.grads[i];
        }
        for (int j = i < A ? 0 : A; j < (i < A ? A : A + B); j++)
            mx = fmax(mx, fabs(f.grads[j]));
        worst = fmax(worst, fabs(f.grads[i] - sum / SLICES) / mx);
    }
    printf("largest difference from the double-precision mean: %.3g of the tensor's largest\n", worst);
    assert_true(worst < 1e-7);
    /* The next step uses this one's grid: no redo. */
    step(&f, mixed, 1.0f, &redos);
    assert_int_equal(redos, 0);
    herd_exact_sum_free(&f.e);
    herd_exact_sum_free(&g.e);
}

static void test_overflow_redone(void **state)
{
    (void)state;
    static fake f, g;
    fake_init(&f);
    fake_init(&g);
    const int order[SLICES] = {0, 1, 2, 3, 4, 5, 6};
    int redos;
    step(&f, order, 1.0f, &redos);
    memcpy(g.buffers, f.buffers, sizeof g.buffers); /* the buffers f's next step starts from */
    /* Gradients 2^30 times larger than the grid was made for: past the headroom. */
    step(&f, order, 1073741824.0f, &redos);
    assert_int_equal(redos, 1);
    /* Redone on the grid of what was seen: the same bits as sums that started there. */
    step(&g, order, 1073741824.0f, &redos);
    assert_memory_equal(f.grads, g.grads, sizeof f.grads);
    /* f's redo started from the step's buffers again, as g's sums did. */
    assert_memory_equal(f.buffers, g.buffers, sizeof f.buffers);
    herd_exact_sum_free(&f.e);
    herd_exact_sum_free(&g.e);
}

static void test_nonfinite_reaches_the_mean(void **state)
{
    (void)state;
    static fake f;
    fake_init(&f);
    const int order[SLICES] = {0, 1, 2, 3, 4, 5, 6};
    int redos;
    step(&f, order, 1.0f, &redos);
    herd_exact_sum_begin(&f.e, &f.m, SLICES, false);
    for (int k = 0; k < SLICES; k++) {
        slice_grad(&f, k, 1.0f);
        if (k == 3)
            f.grads[A + 5] = NAN;
        assert_herd_ok(herd_exact_sum_add(&f.e, &f.m));
    }
    bool redo;
    assert_herd_ok(herd_exact_sum_finish(&f.e, &f.m, g_comm, &redo));
    assert_false(redo); /* no grid holds NaN: the step's checks see it instead */
    assert_true(isnan(f.grads[A]));
    assert_true(isfinite(f.grads[0])); /* tensor a stays finite */
    herd_exact_sum_free(&f.e);
}

static void test_grid_in_checkpoints(void **state)
{
    (void)state;
    static fake f, g;
    fake_init(&f);
    fake_init(&g);
    char text[HERD_EXACT_GRID_TEXT_TEST];
    herd_exact_sum_grid_text(&f.e, &f.m, text, sizeof text);
    assert_string_equal(text, ""); /* no grid yet: nothing to keep */
    const int order[SLICES] = {0, 1, 2, 3, 4, 5, 6};
    int redos;
    step(&f, order, 1.0f, &redos);
    herd_exact_sum_grid_text(&f.e, &f.m, text, sizeof text);
    printf("grid: %s\n", text);
    /* Read back, the next step sums as the one that wrote it (no measuring pass). */
    assert_herd_ok(herd_exact_sum_set_grid_text(&g.e, &g.m, text));
    step(&f, order, 1.0f, &redos);
    memcpy(g.buffers, f.buffers, sizeof g.buffers); /* as the checkpoint's weights file */
    step(&f, order, 1.0f, &redos);
    step(&g, order, 1.0f, &redos);
    assert_int_equal(redos, 0);
    assert_memory_equal(f.grads, g.grads, sizeof f.grads);
    assert_memory_equal(f.buffers, g.buffers, sizeof f.buffers);
    const char *bad[] = {"", "1,2", "1,2,3,4", "1,x,3", "1,,3", "1,2,3,", "1,2,999", "-1,2,3 "};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(herd_exact_sum_set_grid_text(&g.e, &g.m, bad[i]), HERD_ERR_FORMAT);
        assert_non_null(strstr(herd_last_error(), "exact_grid does not fit"));
    }
    herd_exact_sum_free(&f.e);
    herd_exact_sum_free(&g.e);
}

/* Slice losses on the grid add to the same bits in any grouping (one rank's slices in
 * order, or partial sums per rank reduced in another order), which the raw doubles do
 * not; the total stays within half a grid step per slice of the raw one. */
static void test_loss_order_free(void **state)
{
    (void)state;
    enum { N = 96 };
    double raw[N], on[N]; /* losses from 2^-32 to 2^8: some are past 53 bits apart */
    float *r = tu_randv(N * 8, 7);
    for (int i = 0; i < N; i++) { /* a slice's loss: 8 fp32 values summed in a double */
        raw[i] = 0;
        for (int k = 0; k < 8; k++)
            raw[i] += (double)(fabsf(r[i * 8 + k]) * ldexpf(1.0f, (i * 7 + k) % 40 - 32));
        on[i] = herd_exact_loss(raw[i]);
        assert_true(fabs(on[i] - raw[i]) <= ldexp(1.0, -29));
    }
    free(r);
    double fwd = 0, raw_fwd = 0, ranks = 0, raw_ranks = 0;
    for (int i = 0; i < N; i++)
        fwd += on[i], raw_fwd += raw[i];
    for (int k = 5; k >= 0; k--) { /* 6 ranks' partial sums, reduced last to first */
        double part = 0, raw_part = 0;
        for (int i = k; i < N; i += 6)
            part += on[i], raw_part += raw[i];
        ranks += part, raw_ranks += raw_part;
    }
    assert_memory_equal(&fwd, &ranks, sizeof fwd);
    assert_true(raw_fwd != raw_ranks); /* the data make the order matter without the grid */
    assert_true(fabs(fwd - raw_fwd) <= N * ldexp(1.0, -29));
    assert_true(isinf(herd_exact_loss(INFINITY)) && isnan(herd_exact_loss(NAN)));
}

/* Threads that fail at once (exact_threads.c, nn/slices.c): the first failure's status
 * and its thread's message reach the caller; none failing gives HERD_OK. */
static void test_first_error_across_threads(void **state)
{
    (void)state;
    herd_first_error none = {0}, failed = {0};
#pragma omp parallel for num_threads(2)
    for (int i = 0; i < 8; i++) {
        herd_first_error_keep(&none, HERD_OK);
        herd_first_error_keep(&failed, i == 3 || i == 5 ? HERD_ERR(HERD_ERR_NOMEM, "slice %d failed", i)
                                                          : HERD_OK);
    }
    assert_int_equal(herd_first_error_status(&none), HERD_OK);
    assert_int_equal(herd_first_error_status(&failed), HERD_ERR_NOMEM);
    assert_true(strstr(herd_last_error(), "slice 3 failed") || strstr(herd_last_error(), "slice 5 failed"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_free),
        cmocka_unit_test(test_overflow_redone),
        cmocka_unit_test(test_nonfinite_reaches_the_mean),
        cmocka_unit_test(test_grid_in_checkpoints),
        cmocka_unit_test(test_loss_order_free),
        cmocka_unit_test(test_first_error_across_threads),
    };
    if (herd_comm_local_create(&g_comm) != HERD_OK)
        return 1;
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    herd_comm_destroy(g_comm);
    return rc;
}
