/* Synchronised batch norm: K ranks, each with a part of the batch, whose per-channel
 * sums are added between the split backend ops, must reproduce one batch norm over
 * the whole batch (outputs, gradients, running statistics). First on the backend
 * ops with the ranks run one after another, then through the layer with K threads
 * and a fake communicator. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "nn/model.h"
#include "testutil.h"
#include "train/step.h"

#define TOL 1e-5

static const herd_backend *be;

static int setup(void **state)
{
    (void)state;
    be = herd_backend_cpu();
    return be->set_threads(1) == HERD_OK ? 0 : -1;
}

enum { C = 3, HW = 7, MAXK = 4 };

/* One BN over n samples, then the same batch split into parts[] ranks. */
static void check_split(int k, const int *parts, int bitwise)
{
    int n = 0;
    for (int r = 0; r < k; r++)
        n += parts[r];
    const size_t nx = (size_t)n * C * HW;
    const float eps = 1e-5f, mom = 0.1f;
    float *x = malloc(nx * 4), *dy = malloc(nx * 4);
    tu_fill_uniform(x, nx, -1, 1, 11);
    tu_fill_uniform(dy, nx, -1, 1, 12);
    for (size_t i = 0; i < nx; i++)
        x[i] = x[i] * 2 + 5.0f * (float)((i / HW) % C); /* large means: exercises the 2 passes */
    float gamma[C] = {0.7f, 1.3f, -0.4f}, beta[C] = {0.1f, 0.0f, -0.5f};

    /* Whole batch, the fused local ops. */
    float *y = malloc(nx * 4), *dx = malloc(nx * 4);
    float mean[C], invstd[C], rmean[C] = {0.2f, 0.2f, 0.2f}, rvar[C] = {1.5f, 1.5f, 1.5f};
    float dg[C], db[C];
    assert_herd_ok(be->bn_fwd_train(n, C, HW, x, gamma, beta, y, mean, invstd, rmean, rvar, mom, eps));
    assert_herd_ok(be->bn_bwd(n, C, HW, x, dy, gamma, mean, invstd, dx, dg, db, 0.0f));

    /* K ranks: each reduction is computed per rank, then summed (the allreduce). */
    float *ys = malloc(nx * 4), *dxs = malloc(nx * 4);
    float smean[MAXK][C], sinv[MAXK][C], srm[MAXK][C], srv[MAXK][C], sdg[MAXK][C], sdb[MAXK][C];
    double part[MAXK][2 * C], sum[C] = {0}, sq[C] = {0}, sdy[C] = {0}, sdyxc[C] = {0};
    int64_t count = (int64_t)n * HW;
    size_t off[MAXK];
    for (int r = 0, s = 0; r < k; s += parts[r], r++)
        off[r] = (size_t)s * C * HW;
    for (int r = 0; r < k; r++) {
        assert_herd_ok(be->bn_stats(parts[r], C, HW, x + off[r], NULL, 0, part[r]));
        for (int ch = 0; ch < C; ch++)
            sum[ch] += part[r][ch];
    }
    for (int r = 0; r < k; r++) {
        assert_herd_ok(be->bn_stats(parts[r], C, HW, x + off[r], sum, count, part[r]));
        for (int ch = 0; ch < C; ch++)
            sq[ch] += part[r][ch];
    }
    for (int r = 0; r < k; r++) {
        for (int ch = 0; ch < C; ch++)
            srm[r][ch] = 0.2f, srv[r][ch] = 1.5f;
        assert_herd_ok(be->bn_apply_train(parts[r], C, HW, x + off[r], gamma, beta, sum, sq, count,
                                          ys + off[r], smean[r], sinv[r], srm[r], srv[r], mom, eps));
        assert_herd_ok(be->bn_bwd_reduce(parts[r], C, HW, x + off[r], dy + off[r], smean[r],
                                         sinv[r], part[r], part[r] + C, sdg[r], sdb[r], 0.0f));
        for (int ch = 0; ch < C; ch++)
            sdy[ch] += part[r][ch], sdyxc[ch] += part[r][C + ch];
    }
    float dgsum[C] = {0}, dbsum[C] = {0};
    for (int r = 0; r < k; r++) {
        assert_herd_ok(be->bn_bwd_apply(parts[r], C, HW, x + off[r], dy + off[r], gamma, smean[r],
                                        sinv[r], sdy, sdyxc, count, dxs + off[r]));
        for (int ch = 0; ch < C; ch++)
            dgsum[ch] += sdg[r][ch], dbsum[ch] += sdb[r][ch];
        /* Every rank ends with the global batch's statistics. */
        assert_true(tu_max_rel_err(smean[r], mean, C) < TOL);
        assert_true(tu_max_rel_err(sinv[r], invstd, C) < TOL);
        assert_true(tu_max_rel_err(srm[r], rmean, C) < TOL);
        assert_true(tu_max_rel_err(srv[r], rvar, C) < TOL);
    }
    assert_true(tu_max_rel_err(ys, y, nx) < TOL);
    assert_true(tu_max_rel_err(dxs, dx, nx) < TOL);
    /* Parameter gradients are per rank; their sum is the whole batch's. */
    assert_true(tu_max_rel_err(dgsum, dg, C) < TOL);
    assert_true(tu_max_rel_err(dbsum, db, C) < TOL);
    if (bitwise) { /* one rank: the split ops are the fused ones, to the bit */
        assert_memory_equal(ys, y, nx * 4);
        assert_memory_equal(dxs, dx, nx * 4);
        assert_memory_equal(srv[0], rvar, sizeof rvar);
        assert_memory_equal(sdg[0], dg, sizeof dg);
    }
    free(x), free(dy), free(y), free(dx), free(ys), free(dxs);
}

static void test_split_ops(void **state)
{
    (void)state;
    check_split(1, (int[]){6}, 1);
    check_split(2, (int[]){3, 3}, 0);
    check_split(3, (int[]){1, 2, 3}, 0); /* uneven parts, one of a single sample */
    check_split(4, (int[]){1, 1, 1, 1}, 0);
}

static void test_split_ops_errors(void **state)
{
    (void)state;
    float x[2 * C * HW] = {0}, g[C] = {1, 1, 1}, b[C] = {0}, y[2 * C * HW], m[C], s[C], rm[C], rv[C];
    double sum[C] = {0}, sq[C] = {0};
    /* One value per channel over the global batch cannot be normalised. */
    assert_int_equal(be->bn_apply_train(1, C, 1, x, g, b, sum, sq, 1, y, m, s, rm, rv, 0.1f, 1e-5f),
                     HERD_ERR_INVALID_ARG);
    assert_int_equal(be->bn_stats(0, C, HW, x, NULL, 0, sum), HERD_ERR_INVALID_ARG);
    assert_int_equal(be->bn_stats(2, C, HW, x, NULL, 0, NULL), HERD_ERR_INVALID_ARG);
    double a[C], d[C];
    assert_int_equal(be->bn_bwd_reduce(2, C, HW, x, x, m, s, a, d, m, s, 0.5f), HERD_ERR_INVALID_ARG);
}

/* ------------------------------------------------------------ the layer, K threads */

/* A fake communicator for ranks that are threads: allreduce_f64 publishes each
 * rank's values in its slot and every rank adds the slots in rank order, so the
 * result is deterministic. */
typedef struct fake_world {
    pthread_barrier_t bar;
    int size;
    double slots[MAXK][64];
    int calls[MAXK];
} fake_world;

static herd_status fake_allreduce_f64(herd_comm *c, double *vals, int n)
{
    fake_world *w = c->impl;
    if (n > 64)
        return HERD_ERR_INTERNAL; /* the test's slots are too small: grow them */
    memcpy(w->slots[c->rank], vals, (size_t)n * sizeof *vals);
    w->calls[c->rank]++;
    pthread_barrier_wait(&w->bar);
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int r = 0; r < w->size; r++)
            s += w->slots[r][i];
        vals[i] = s;
    }
    pthread_barrier_wait(&w->bar); /* nobody overwrites a slot still being read */
    return HERD_OK;
}

static const herd_comm_ops fake_ops = {.name = "fake", .allreduce_f64 = fake_allreduce_f64};

static const char *MODEL =
    "{\"layers\": [{\"type\": \"conv2d\", \"name\": \"pre\", \"out\": 3, \"kernel\": 3, \"pad\": 1},"
    " {\"type\": \"batchnorm\", \"name\": \"bn\"}, {\"type\": \"relu\"},"
    " {\"type\": \"conv2d\", \"name\": \"c2\", \"out\": 4, \"kernel\": 1},"
    " {\"type\": \"batchnorm\", \"name\": \"bn2\"},"
    " {\"type\": \"flatten\"}, {\"type\": \"linear\", \"name\": \"head\", \"out\": 5}]}";
/* With 16 channels, in native bf16 the first conv, bn and relu keep bf16 activations
 * (herd_bf16_act_ops); bn2 feeds flatten, so it and c2 stay fp32. */
static const char *MODEL16 =
    "{\"layers\": [{\"type\": \"conv2d\", \"name\": \"pre\", \"out\": 16, \"kernel\": 3, \"pad\": 1},"
    " {\"type\": \"batchnorm\", \"name\": \"bn\"}, {\"type\": \"relu\"},"
    " {\"type\": \"conv2d\", \"name\": \"c2\", \"out\": 16, \"kernel\": 1},"
    " {\"type\": \"batchnorm\", \"name\": \"bn2\"},"
    " {\"type\": \"flatten\"}, {\"type\": \"linear\", \"name\": \"head\", \"out\": 5}]}";
enum { IC = 2, IH = 4, IW = 4, CLASSES = 5, N = 6, STEPS = 2 };

static const char *model_text = NULL; /* MODEL unless a test sets MODEL16 */

static herd_model *make_model(void)
{
    herd_layer_spec *specs;
    int n_specs;
    assert_herd_ok(herd_model_parse_text(model_text ? model_text : MODEL, "syncbn", CLASSES,
                                         &specs, &n_specs));
    herd_model *m = calloc(1, sizeof *m);
    m->in_c = IC, m->in_h = IH, m->in_w = IW, m->classes = CLASSES;
    snprintf(m->name, sizeof m->name, "syncbn");
    assert_herd_ok(herd_model_build(m, specs, n_specs, 7));
    free(specs);
    return m;
}

/* Forward + backward of STEPS steps (no optimizer: running statistics evolve). Runs
 * on the rank threads, so it reports failures instead of asserting (cmocka's
 * failure jumps back into the main thread's stack). */
#define TRY(expr)                          \
    do {                                   \
        herd_status st_ = (expr);          \
        if (st_ != HERD_OK)                \
            return st_;                    \
    } while (0)

static herd_status run_steps(herd_model *m, herd_comm *comm, const float *x, const int32_t *labels, int n,
                      float *logits_out)
{
    TRY(herd_model_reshape(m, n));
    float dlogits[N * CLASSES];
    for (int s = 0; s < STEPS; s++) {
        herd_run_ctx ctx = herd_model_ctx(m, true, 1);
        ctx.bn_group = herd_group_of_comm(comm);
        const float *logits;
        TRY(herd_model_forward(m, &ctx, x, &logits));
        double loss;
        long correct;
        TRY(m->be->softmax_xent(n, CLASSES, logits, labels, 0, dlogits, &loss, &correct));
        TRY(herd_model_backward(m, &ctx, x, dlogits));
        memcpy(logits_out, logits, (size_t)n * CLASSES * sizeof *logits);
    }
    return HERD_OK;
}

typedef struct rank_job {
    herd_comm comm;
    herd_model *m;
    const float *x;
    const int32_t *labels;
    int n;
    float *logits;
    herd_status status;
} rank_job;

static void *rank_main(void *arg)
{
    rank_job *j = arg;
    j->status = run_steps(j->m, &j->comm, j->x, j->labels, j->n, j->logits);
    return NULL;
}

/* tol: how far K ranks may be from one process (outputs, gradients, statistics). */
static void check_layer_threads(double tol)
{
    const size_t per = (size_t)IC * IH * IW;
    float x[N * IC * IH * IW];
    tu_fill_uniform(x, N * per, -1, 1, 21);
    int32_t labels[N] = {0, 4, 2, 1, 3, 3};

    /* One process, the whole batch; with a group of one rank (local statistics). */
    herd_model *ref = make_model();
    fake_world one = {.size = 1};
    pthread_barrier_init(&one.bar, NULL, 1);
    herd_comm solo = {.ops = &fake_ops, .rank = 0, .size = 1, .impl = &one};
    float ref_logits[N * CLASSES];
    assert_herd_ok(run_steps(ref, &solo, x, labels, N, ref_logits));
    assert_int_equal(one.calls[0], 0); /* one rank never communicates */
    pthread_barrier_destroy(&one.bar);

    /* K ranks of N/K samples each, as data-parallel training splits a global batch. */
    for (int k = 2; k <= 3; k++) {
        fake_world w = {.size = k};
        pthread_barrier_init(&w.bar, NULL, (unsigned)k);
        rank_job jobs[MAXK];
        pthread_t th[MAXK];
        float logits[N * CLASSES];
        int nr = N / k;
        for (int r = 0; r < k; r++) {
            jobs[r] = (rank_job){.comm = {.ops = &fake_ops, .rank = r, .size = k, .impl = &w},
                                 .m = make_model(), .x = x + r * nr * per,
                                 .labels = labels + r * nr, .n = nr,
                                 .logits = logits + r * nr * CLASSES};
            assert_int_equal(pthread_create(&th[r], NULL, rank_main, &jobs[r]), 0);
        }
        for (int r = 0; r < k; r++) {
            pthread_join(th[r], NULL);
            assert_herd_ok(jobs[r].status);
        }
        pthread_barrier_destroy(&w.bar);
        /* Per step and BN layer: 2 allreduces forward, 1 backward. */
        assert_int_equal(w.calls[0], STEPS * 2 * 3);
        double lerr = tu_max_rel_err(logits, ref_logits, N * CLASSES);
        if (!(lerr < tol))
            fail_msg("%d ranks: logits differ from one process by %.3g", k, lerr);
        /* Averaged gradients (what the gradient allreduce computes) are the
         * single-process gradients of the mean loss; running statistics agree. */
        herd_model *m0 = jobs[0].m;
        float *avg = calloc(m0->n_param_floats, sizeof *avg);
        for (int r = 0; r < k; r++) {
            for (size_t i = 0; i < m0->n_param_floats; i++)
                avg[i] += jobs[r].m->grads[i] / (float)k;
            assert_true(tu_max_rel_err(jobs[r].m->buffers, ref->buffers, ref->n_buffer_floats) <
                        tol);
        }
        double err = tu_max_rel_err(avg, ref->grads, ref->n_param_floats);
        if (!(err <= tol))
            fail_msg("%d ranks: averaged gradients differ from one process by %.3g", k, err);
        printf("%d ranks: logits %.2e, gradients %.2e from one process\n", k, lerr, err);
        free(avg);
        for (int r = 0; r < k; r++)
            herd_model_free(jobs[r].m);
    }
    herd_model_free(ref);
}

static void test_layer_threads(void **state)
{
    (void)state;
    check_layer_threads(TOL);
}

/* The same through bf16 activations: the per-channel sums are the same in double,
 * added in another order, and each rank rounds its own outputs to bf16, so the ranks
 * agree with one process within bf16's rounding. */
static void test_layer_threads_bf16(void **state)
{
    (void)state;
    if (!herd_cpu_native_bf16())
        tu_skip("oneDNN dispatches to %s here: no native bf16 to test", herd_cpu_isa());
    assert_herd_ok(be->set_precision(HERD_PRECISION_BF16));
    model_text = MODEL16;
    herd_model *m = make_model();
    assert_herd_ok(herd_model_reshape(m, N));
    assert_int_equal(m->layers[1].out_format, HERD_ACT_BF16); /* bn */
    assert_int_equal(m->layers[4].out_format, HERD_ACT_F32);  /* bn2 */
    herd_model_free(m);
    check_layer_threads(2e-2);
    model_text = NULL;
    assert_herd_ok(be->set_precision(HERD_PRECISION_FP32));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_ops),
        cmocka_unit_test(test_split_ops_errors),
        cmocka_unit_test(test_layer_threads),
        cmocka_unit_test(test_layer_threads_bf16),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
