/* The simulated device ("sim") against the CPU backend: every op on the same inputs
 * gives the same bits (uploaded, run, downloaded); host pointers handed to device ops,
 * device pointers where a host value goes, freed blocks, ranges past a block and
 * copies the wrong way are refused by name; a host read or write of a device pointer
 * faults; the memory cap refuses; the staged communicator reduces device buffers; and
 * whole training runs on "sim" end with the CPU's parameters, bit for bit. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#include "backend/backend.h"
#include "core/error.h"
#include "dist/comm.h"
#include "nn/model.h"

static const herd_backend *cpu, *sim;

static int setup(void **state)
{
    (void)state;
    cpu = herd_backend_cpu();
    sim = herd_backend_sim();
    if (!sim) {
        fprintf(stderr, "herd_backend_sim: %s\n", herd_last_error());
        return -1;
    }
    return cpu->set_threads(1) == HERD_OK && sim->set_threads(1) == HERD_OK ? 0 : -1;
}

/* ------------------------------------------------------------ op equality harness
 * A case gives its buffers' initial host contents; `run` calls the op on one backend
 * with that backend's copies and may write host results (loss sums, flags) to out.
 * Both backends start from the same bytes; afterwards every buffer and out must be
 * the same bits, and the op must have changed something. */

#define MAXBUF 12

typedef herd_status (*op_fn)(const herd_backend *be, void **b, const void *ctx, void *out);

typedef struct op_case {
    const char *name;
    int nbuf;
    size_t bytes[MAXBUF];
    void *init[MAXBUF]; /* host contents, owned by the case */
    size_t out_bytes;
} op_case;

static void run_on(const herd_backend *be, const op_case *c, op_fn fn, const void *ctx,
                   void **result, void *out)
{
    void *b[MAXBUF];
    for (int i = 0; i < c->nbuf; i++) {
        b[i] = be->alloc(c->bytes[i]);
        if (!b[i])
            fail_msg("%s: %s alloc: %s", c->name, be->name, herd_last_error());
        assert_herd_ok(be->memcpy_h2d(b[i], c->init[i], c->bytes[i]));
    }
    herd_status st = fn(be, b, ctx, out);
    if (st != HERD_OK)
        fail_msg("%s on %s: %s", c->name, be->name, herd_last_error());
    for (int i = 0; i < c->nbuf; i++) {
        result[i] = malloc(c->bytes[i] ? c->bytes[i] : 1);
        assert_herd_ok(be->memcpy_d2h(result[i], b[i], c->bytes[i]));
        be->free(b[i]);
    }
}

static void same_on_both(op_case *c, op_fn fn, const void *ctx)
{
    void *rc[MAXBUF], *rs[MAXBUF];
    unsigned char oc[64] = {0}, os[64] = {0};
    assert_true(c->out_bytes <= sizeof oc);
    run_on(cpu, c, fn, ctx, rc, oc);
    run_on(sim, c, fn, ctx, rs, os);
    bool changed = c->out_bytes > 0;
    for (int i = 0; i < c->nbuf; i++) {
        if (memcmp(rc[i], rs[i], c->bytes[i]) != 0)
            fail_msg("%s: buffer %d differs between cpu and sim", c->name, i);
        changed |= memcmp(rc[i], c->init[i], c->bytes[i]) != 0;
        free(rc[i]), free(rs[i]), free(c->init[i]);
    }
    if (memcmp(oc, os, c->out_bytes) != 0)
        fail_msg("%s: host results differ between cpu and sim", c->name);
    if (!changed)
        fail_msg("%s: the op changed nothing (the case tests nothing)", c->name);
}

/* Adds a buffer of n random floats in [-1, 1) (seeded by its index). */
static void *add_f(op_case *c, size_t n)
{
    int i = c->nbuf++;
    assert_true(i < MAXBUF);
    c->bytes[i] = n * sizeof(float);
    c->init[i] = tu_randv(n, 100 + (uint64_t)i);
    return c->init[i];
}

static void *add_bytes(op_case *c, size_t bytes)
{
    int i = c->nbuf++;
    assert_true(i < MAXBUF);
    c->bytes[i] = bytes;
    c->init[i] = calloc(1, bytes ? bytes : 1);
    return c->init[i];
}

/* ------------------------------------------------------------ dense */

typedef struct gemm_ctx {
    bool ta, tb;
    int m, n, k;
    float beta;
} gemm_ctx;

static herd_status run_gemm(const herd_backend *be, void **b, const void *ctx, void *out)
{
    (void)out;
    const gemm_ctx *g = ctx;
    return be->gemm(g->ta, g->tb, g->m, g->n, g->k, 0.7f, b[0], g->ta ? g->m : g->k, b[1],
                    g->tb ? g->k : g->n, g->beta, b[2], g->n);
}

static void test_gemm(void **state)
{
    (void)state;
    for (int v = 0; v < 8; v++) {
        gemm_ctx g = {v & 1, v & 2, 13, 17, 11, (v & 4) ? 1.0f : 0.0f};
        op_case c = {.name = "gemm"};
        add_f(&c, (size_t)g.m * g.k), add_f(&c, (size_t)g.k * g.n), add_f(&c, (size_t)g.m * g.n);
        same_on_both(&c, run_gemm, &g);
    }
}

static herd_status run_bias(const herd_backend *be, void **b, const void *ctx, void *out)
{
    (void)ctx, (void)out;
    HERD_TRY(be->bias_add(5, 7, b[0], b[1]));
    HERD_TRY(be->bias_grad(5, 7, b[0], b[2], 0.0f));
    return be->bias_grad(5, 7, b[0], b[3], 1.0f);
}

static void test_bias(void **state)
{
    (void)state;
    op_case c = {.name = "bias_add/bias_grad"};
    add_f(&c, 35), add_f(&c, 7), add_f(&c, 7), add_f(&c, 7);
    same_on_both(&c, run_bias, NULL);
}

/* ------------------------------------------------------------ conv, pooling */

static herd_status run_conv(const herd_backend *be, void **b, const void *ctx, void *out)
{
    (void)out;
    herd_conv_plan *p;
    HERD_TRY(be->conv2d_plan(ctx, &p));
    /* x w bias y dy dx dw db dw(accumulated) db(accumulated) */
    herd_status st = be->conv2d_fwd(p, b[0], b[1], b[2], b[3]);
    if (st == HERD_OK)
        st = be->conv2d_bwd_data(p, b[4], b[1], b[5]);
    if (st == HERD_OK)
        st = be->conv2d_bwd_weights(p, b[0], b[4], b[6], b[7], 0.0f);
    if (st == HERD_OK)
        st = be->conv2d_bwd_weights(p, b[0], b[4], b[8], b[9], 1.0f);
    be->conv2d_plan_free(p);
    return st;
}

static void test_conv(void **state)
{
    (void)state;
    herd_conv_desc ds[] = {
        {.n = 2, .c_in = 3, .h_in = 9, .w_in = 8, .c_out = 5, .kh = 3, .kw = 3, .stride = 1,
         .pad = 1, .bias = true},
        {.n = 3, .c_in = 4, .h_in = 10, .w_in = 10, .c_out = 6, .kh = 5, .kw = 5, .stride = 2,
         .pad = 0, .bias = true},
    };
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) {
        herd_conv_desc d = ds[i];
        assert_herd_ok(herd_conv_desc_finish(&d));
        size_t nx = (size_t)d.n * d.c_in * d.h_in * d.w_in, ny = (size_t)d.n * d.c_out * d.h_out * d.w_out;
        size_t nw = (size_t)d.c_out * d.c_in * d.kh * d.kw;
        op_case c = {.name = "conv2d"};
        add_f(&c, nx), add_f(&c, nw), add_f(&c, d.c_out), add_f(&c, ny), add_f(&c, ny);
        add_f(&c, nx), add_f(&c, nw), add_f(&c, d.c_out), add_f(&c, nw), add_f(&c, d.c_out);
        same_on_both(&c, run_conv, &d);
    }
}

static herd_status run_pool(const herd_backend *be, void **b, const void *ctx, void *out)
{
    (void)out;
    herd_pool_plan *p;
    HERD_TRY(be->pool_plan(ctx, &p));
    herd_status st = be->pool_fwd(p, b[0], b[1], true);
    if (st == HERD_OK)
        st = be->pool_bwd(p, b[2], b[3]);
    be->pool_plan_free(p);
    return st;
}

static void test_pool(void **state)
{
    (void)state;
    for (int is_max = 0; is_max < 2; is_max++) {
        herd_pool_desc d = {.n = 2, .c = 3, .h_in = 8, .w_in = 7, .k = 3, .stride = 2, .pad = 1,
                            .is_max = is_max};
        assert_herd_ok(herd_pool_desc_finish(&d));
        size_t nx = (size_t)d.n * d.c * d.h_in * d.w_in, ny = (size_t)d.n * d.c * d.h_out * d.w_out;
        op_case c = {.name = is_max ? "maxpool" : "avgpool"};
        add_f(&c, nx), add_f(&c, ny), add_f(&c, ny), add_f(&c, nx);
        same_on_both(&c, run_pool, &d);
    }
}

static herd_status run_gap(const herd_backend *be, void **b, const void *ctx, void *out)
{
    (void)ctx, (void)out;
    HERD_TRY(be->global_avgpool_fwd(2, 3, 20, b[0], b[1]));
    return be->global_avgpool_bwd(2, 3, 20, b[2], b[3]);
}

static void test_global_avgpool(void **state)
{
    (void)state;
    op_case c = {.name = "global_avgpool"};
    add_f(&c, 120), add_f(&c, 6), add_f(&c, 6), add_f(&c, 120);
    same_on_both(&c, run_gap, NULL);
}

/* ------------------------------------------------------------ batch norm */

enum { BN_N = 3, BN_C = 4, BN_HW = 10 };

static herd_status run_bn(const herd_backend *be, void **b, const void *ctx, void *out)
{
    (void)ctx, (void)out;
    const int n = BN_N, c = BN_C, hw = BN_HW;
    float *x = b[0], *gamma = b[1], *beta = b[2], *y = b[3], *mean = b[4], *invstd = b[5];
    float *rm = b[6], *rv = b[7], *dy = b[8], *dx = b[9], *dg = b[10], *db = b[11];
    HERD_TRY(be->bn_fwd_train(n, c, hw, x, gamma, beta, y, mean, invstd, rm, rv, 0.1f, 1e-5f));
    HERD_TRY(be->bn_bwd(n, c, hw, x, dy, gamma, mean, invstd, dx, dg, db, 1.0f));
    /* Inference overwrites y from the running statistics the training pass updated. */
    return be->bn_fwd_infer(n, c, hw, x, gamma, beta, dy, rm, rv, 1e-5f);
}

static void test_bn(void **state)
{
    (void)state;
    op_case c = {.name = "bn_fwd_train/bn_bwd/bn_fwd_infer"};
    size_t all = BN_N * BN_C * BN_HW;
    add_f(&c, all), add_f(&c, BN_C), add_f(&c, BN_C), add_f(&c, all), add_f(&c, BN_C);
    add_f(&c, BN_C), add_f(&c, BN_C);
    float *rv = add_f(&c, BN_C);
    for (int i = 0; i < BN_C; i++)
        rv[i] = 1.0f + 0.5f * rv[i]; /* a variance */
    add_f(&c, all), add_f(&c, all), add_f(&c, BN_C), add_f(&c, BN_C);
    same_on_both(&c, run_bn, NULL);
}

/* The split ops, with their double arrays in device memory. */
static herd_status run_bn_split(const herd_backend *be, void **b, const void *ctx, void *out)
{
    (void)ctx, (void)out;
    const int n = BN_N, c = BN_C, hw = BN_HW;
    const int64_t count = (int64_t)n * hw;
    float *x = b[0], *gamma = b[1], *beta = b[2], *y = b[3], *mean = b[4], *invstd = b[5];
    float *rm = b[6], *rv = b[7], *dy = b[8], *dx = b[9];
    double *sum = b[10], *sq = b[11];
    HERD_TRY(be->bn_stats(n, c, hw, x, NULL, count, sum));
    HERD_TRY(be->bn_stats(n, c, hw, x, sum, count, sq));
    HERD_TRY(be->bn_apply_train(n, c, hw, x, gamma, beta, sum, sq, count, y, mean, invstd, rm, rv,
                                0.1f, 1e-5f));
    /* The backward sums reuse the two arrays; dgamma/dbeta go to rm/rv's room. */
    HERD_TRY(be->bn_bwd_reduce(n, c, hw, x, dy, mean, invstd, sum, sq, rm, rv, 0.0f));
    return be->bn_bwd_apply(n, c, hw, x, dy, gamma, mean, invstd, sum, sq, count, dx);
}

static void test_bn_split(void **state)
{
    (void)state;
    op_case c = {.name = "bn_stats/bn_apply_train/bn_bwd_reduce/bn_bwd_apply"};
    size_t all = BN_N * BN_C * BN_HW;
    add_f(&c, all), add_f(&c, BN_C), add_f(&c, BN_C), add_f(&c, all), add_f(&c, BN_C);
    add_f(&c, BN_C), add_f(&c, BN_C), add_f(&c, BN_C), add_f(&c, all), add_f(&c, all);
    add_bytes(&c, BN_C * sizeof(double)), add_bytes(&c, BN_C * sizeof(double));
    same_on_both(&c, run_bn_split, NULL);
}

/* ------------------------------------------------------------ elementwise */

enum { EW = 1000 };

static herd_status run_elementwise(const herd_backend *be, void **b, const void *ctx, void *out)
{
    (void)ctx, (void)out;
    HERD_TRY(be->relu_fwd(EW, b[0], b[1]));
    HERD_TRY(be->relu_bwd(EW, b[1], b[2], b[3]));
    HERD_TRY(be->dropout_fwd(EW, b[0], b[4], b[5], 0.3f, 42));
    HERD_TRY(be->mul(EW, b[0], b[2], b[6]));
    HERD_TRY(be->add(EW, b[0], b[2], b[7]));
    HERD_TRY(be->axpy(EW, -0.25f, b[0], b[8]));
    HERD_TRY(be->copy(EW / 2, (float *)b[0] + 7, (float *)b[9] + 100)); /* views inside blocks */
    return be->fill(EW - 1, 3.5f, (float *)b[10] + 1);
}

static void test_elementwise(void **state)
{
    (void)state;
    op_case c = {.name = "relu/dropout/mul/add/axpy/copy/fill"};
    for (int i = 0; i < 11; i++)
        add_f(&c, EW);
    same_on_both(&c, run_elementwise, NULL);
}

/* ------------------------------------------------------------ loss, optimizers */

enum { XN = 9, XC = 7 };

typedef struct xent_out {
    double loss[2];
    long correct[2];
} xent_out;

static herd_status run_xent(const herd_backend *be, void **b, const void *ctx, void *out)
{
    (void)ctx;
    xent_out *o = out;
    HERD_TRY(be->softmax_xent(XN, XC, b[0], b[1], 0.1f, b[2], &o->loss[0], &o->correct[0]));
    return be->softmax_xent(XN, XC, b[0], b[1], 0.0f, NULL, &o->loss[1], &o->correct[1]);
}

static void test_softmax_xent(void **state)
{
    (void)state;
    op_case c = {.name = "softmax_xent", .out_bytes = sizeof(xent_out)};
    add_f(&c, XN * XC);
    int32_t *labels = add_bytes(&c, XN * sizeof(int32_t));
    for (int i = 0; i < XN; i++)
        labels[i] = (i * 5) % XC;
    add_f(&c, XN * XC);
    same_on_both(&c, run_xent, NULL);
}

static herd_status run_optim(const herd_backend *be, void **b, const void *ctx, void *out)
{
    (void)ctx, (void)out;
    herd_sgd_args s = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-3f, .nesterov = true};
    HERD_TRY(be->sgd_update(EW, b[0], b[1], b[2], &s));
    s.decoupled = true, s.nesterov = false;
    HERD_TRY(be->sgd_update(EW, b[0], b[1], b[2], &s));
    herd_sgd_args plain = {.lr = 0.05f};
    HERD_TRY(be->sgd_update(EW, b[3], b[1], NULL, &plain));
    herd_adamw_args a = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                         .weight_decay = 0.01f, .step = 3};
    return be->adamw_update(EW, b[4], b[1], b[5], b[6], &a);
}

static void test_optimizers(void **state)
{
    (void)state;
    op_case c = {.name = "sgd_update/adamw_update"};
    for (int i = 0; i < 7; i++)
        add_f(&c, EW);
    float *v = c.init[6];
    for (int i = 0; i < EW; i++)
        v[i] = fabsf(v[i]); /* Adam's second moment */
    same_on_both(&c, run_optim, NULL);
}

typedef struct scale_out {
    bool inf[2];
    double sumsq;
} scale_out;

static herd_status run_scale(const herd_backend *be, void **b, const void *ctx, void *out)
{
    (void)ctx;
    scale_out *o = out;
    HERD_TRY(be->grad_unscale_check(EW, b[0], 0.5f, &o->inf[0]));
    HERD_TRY(be->grad_unscale_check(EW, b[1], 2.0f, &o->inf[1]));
    HERD_TRY(be->grad_unscale_check(EW, b[0], 4.0f, NULL));
    return be->sum_squares(EW, b[0], &o->sumsq);
}

static void test_scaling(void **state)
{
    (void)state;
    op_case c = {.name = "grad_unscale_check/sum_squares", .out_bytes = sizeof(scale_out)};
    add_f(&c, EW);
    float *bad = add_f(&c, EW);
    bad[500] = INFINITY;
    same_on_both(&c, run_scale, NULL);
}

/* ------------------------------------------------------------ refusals */

/* The op's status is HERD_ERR_INVALID_ARG and its message contains what. */
#define assert_refused(expr, what)                                                          \
    do {                                                                                    \
        herd_status st_ = (expr);                                                           \
        if (st_ != HERD_ERR_INVALID_ARG || !strstr(herd_last_error(), (what)))              \
            fail_msg("%s: got %s \"%s\", want a refusal saying \"%s\"", #expr,              \
                     herd_status_name(st_), herd_last_error(), (what));                     \
    } while (0)

static void test_host_pointers_refused(void **state)
{
    (void)state;
    float host[64] = {0};
    float *d = sim->alloc(sizeof host), *e = sim->alloc(sizeof host);
    assert_non_null(d);
    assert_refused(sim->relu_fwd(64, host, d),
                   "sim: relu_fwd: argument 'x' is host memory, not device memory");
    assert_refused(sim->relu_fwd(64, d, host),
                   "sim: relu_fwd: argument 'y' is host memory, not device memory");
    assert_refused(sim->gemm(false, false, 8, 8, 8, 1, host, 8, d, 8, 0, e, 8),
                   "sim: gemm: argument 'a' is host memory, not device memory");
    assert_refused(sim->fill(64, 1.0f, host), "sim: fill: argument 'y' is host memory");
    /* The BN split ops' reductions are device memory too. */
    double sums[4];
    assert_refused(sim->bn_stats(1, 4, 16, d, NULL, 16, sums),
                   "sim: bn_stats: argument 'out' is host memory");
    /* Host values must not be device memory. */
    assert_refused(sim->sum_squares(64, d, (double *)(void *)e),
                   "sim: sum_squares: argument 'out' is device memory");
    int32_t *labels = sim->alloc(4 * sizeof(int32_t));
    long correct;
    assert_refused(sim->softmax_xent(4, 16, d, labels, 0, NULL, (double *)(void *)e, &correct),
                   "sim: softmax_xent: argument 'loss_sum' is device memory");
    int32_t hl[4] = {0};
    double loss;
    assert_refused(sim->softmax_xent(4, 16, d, hl, 0, NULL, &loss, &correct),
                   "sim: softmax_xent: argument 'labels' is host memory");
    /* A range past its block, an address in no block, a freed block. */
    assert_refused(sim->relu_fwd(65, d, e), "runs past the allocation's end");
    assert_refused(sim->copy(60, d + 8, e), "covers 240 bytes from byte 32 of a 256-byte");
    assert_herd_ok(sim->copy(56, d + 8, e)); /* a view inside the block is fine */
    sim->free(e);
    assert_refused(sim->relu_fwd(64, d, e), "is not in a live device allocation");
    sim->free(d);
    sim->free(labels);
}

static void test_copies(void **state)
{
    (void)state;
    float host[16], back[16];
    for (int i = 0; i < 16; i++)
        host[i] = (float)i;
    float *d = sim->alloc(sizeof host);
    assert_refused(sim->memcpy_h2d(host, d, sizeof host),
                   "sim: memcpy_h2d: argument 'src' is device memory");
    assert_refused(sim->memcpy_h2d(back, host, sizeof host),
                   "sim: memcpy_h2d: argument 'dst' is host memory");
    assert_refused(sim->memcpy_d2h(d, host, sizeof host),
                   "sim: memcpy_d2h: argument 'dst' is device memory");
    assert_refused(sim->memcpy_d2h(back, host, sizeof host),
                   "sim: memcpy_d2h: argument 'src' is host memory");
    assert_refused(sim->memcpy_h2d(d + 4, host, sizeof host), "runs past the allocation's end");
    /* Fresh memory is zeros; a copy into the middle lands there. */
    assert_herd_ok(sim->memcpy_d2h(back, d, sizeof back));
    for (int i = 0; i < 16; i++)
        assert_true(back[i] == 0.0f);
    assert_herd_ok(sim->memcpy_h2d(d + 4, host, 12 * sizeof(float)));
    assert_herd_ok(sim->memcpy_d2h(back, d, sizeof back));
    for (int i = 0; i < 16; i++)
        assert_true(back[i] == (i < 4 ? 0.0f : (float)(i - 4)));
    assert_herd_ok(sim->memcpy_h2d(NULL, NULL, 0));
    sim->free(d);
}

static char g_logged[512];

static void keep_log(herd_log_level level, const char *msg, void *user)
{
    (void)user;
    if (level == HERD_LOG_ERROR)
        snprintf(g_logged, sizeof g_logged, "%s", msg);
}

/* free() cannot fail, so a bad one is logged as an error and otherwise ignored. */
static void test_bad_free_logged(void **state)
{
    (void)state;
    herd_set_log_fn(keep_log, NULL);
    float host[4], *d = sim->alloc(sizeof host);
    sim->free(host);
    assert_non_null(strstr(g_logged, "not the start of a live simulated-device allocation (host"));
    g_logged[0] = '\0';
    sim->free(d + 1);
    assert_non_null(strstr(g_logged, "an address inside a block"));
    sim->free(d);
    g_logged[0] = '\0';
    sim->free(d);
    assert_non_null(strstr(g_logged, "freed already"));
    herd_set_log_fn(NULL, NULL);
}

/* ------------------------------------------------------------ host access faults */

static volatile void *g_expected_fault;

static void on_segv(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)uc;
    _exit(si->si_addr == g_expected_fault ? 42 : 43);
}

/* In a child: touches p from the host, which must fault at p: the child's handler exits
 * 42 then (43 for a fault elsewhere, 0 when nothing faulted). */
static void touch_in_child(float *p, bool write)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGSEGV, &sa, NULL);
        g_expected_fault = p;
        if (write)
            *(volatile float *)p = 1.0f;
        else
            (void)*(volatile float *)p;
        _exit(0);
    }
    int status;
    assert_true(waitpid(pid, &status, 0) == pid);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) {
        printf("  host %s of %p: killed by SIGSEGV (the handler was not ours to install)\n",
               write ? "write" : "read", (void *)p);
        return;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 42) {
        printf("  host %s of %p: SIGSEGV at that address\n", write ? "write" : "read", (void *)p);
        return;
    }
    fail_msg("a host %s of device pointer %p %s", write ? "write" : "read", (void *)p,
             WIFEXITED(status) && WEXITSTATUS(status) == 0    ? "did not fault"
             : WIFEXITED(status) && WEXITSTATUS(status) == 43 ? "faulted at another address"
                                                              : "ended the child another way");
}

static void test_host_access_faults(void **state)
{
    (void)state;
    float *d = sim->alloc(1000 * sizeof(float));
    assert_non_null(d);
    float one = 1.0f;
    assert_herd_ok(sim->memcpy_h2d(d + 500, &one, sizeof one));
    touch_in_child(d, false);
    touch_in_child(d + 500, false);
    touch_in_child(d + 999, true);
    sim->free(d);
}

/* ------------------------------------------------------------ memory cap and counts */

static void test_memory_limit(void **state)
{
    (void)state;
    herd_memory_usage u0, u;
    assert_herd_ok(herd_device_memory_usage("sim", &u0));
    const uint64_t mib = 1 << 20;
    assert_herd_ok(herd_device_set_memory_limit("sim", u0.current + 3 * mib));
    void *a = sim->alloc(2 * mib);
    assert_non_null(a);
    assert_herd_ok(herd_device_memory_usage("sim", &u));
    assert_true(u.current == u0.current + 2 * mib);
    assert_true(u.limit == u0.current + 3 * mib);
    assert_null(sim->alloc(2 * mib));
    assert_non_null(strstr(herd_last_error(), "memory limit reached"));
    /* Below what is in use: refused, the cap unchanged. */
    assert_int_equal(herd_device_set_memory_limit("sim", u0.current + mib), HERD_ERR_INVALID_ARG);
    sim->free(a);
    void *b = sim->alloc(2 * mib); /* fits again once a is back */
    assert_non_null(b);
    sim->free(b);
    assert_herd_ok(herd_device_set_memory_limit("sim", 0));
    assert_herd_ok(herd_device_memory_usage("sim", &u));
    assert_true(u.current == u0.current && u.limit == 0);
    /* Categories: what the peak was made of. */
    assert_herd_ok(herd_device_memory_reset_peak("sim"));
    herd_mem_category was = herd_mem_category_set(HERD_MEM_GRADS);
    void *g = sim->alloc(100); /* counted as 128, like the CPU */
    herd_mem_category_set(was);
    assert_herd_ok(herd_device_memory_usage("sim", &u));
    assert_true(u.peak == u0.current + 128);
    assert_true(u.peak_by_category[HERD_MEM_GRADS] >= 128);
    sim->free(g);
}

static void test_precision(void **state)
{
    (void)state;
    assert_int_equal(sim->set_precision(HERD_PRECISION_BF16), HERD_ERR_UNSUPPORTED);
    assert_non_null(strstr(herd_last_error(), "not available on the sim backend"));
    assert_int_equal(sim->set_precision(HERD_PRECISION_TF32), HERD_ERR_UNSUPPORTED);
    assert_herd_ok(sim->set_precision(HERD_PRECISION_FP32));
}

/* ------------------------------------------------------------ communicators */

/* A device backend other than cuda gets the staged communicator, which reaches device
 * memory only through the backend's copies. */
static void test_staged_comm(void **state)
{
    (void)state;
    herd_comm *local, *c;
    assert_herd_ok(herd_comm_local_create(&local));
    assert_herd_ok(herd_comm_device_create(local, sim, &c));
    assert_string_equal(c->ops->name, "mpi-staged");
    float h[10];
    for (int i = 0; i < 10; i++)
        h[i] = (float)i;
    float *d = sim->alloc(sizeof h);
    assert_herd_ok(sim->memcpy_h2d(d, h, sizeof h));
    assert_herd_ok(c->ops->allreduce_start(c, d + 4, 6, 0.5f, HERD_WIRE_FP32, "bucket 0"));
    assert_herd_ok(c->ops->allreduce_start(c, d, 4, 2.0f, HERD_WIRE_FP32, "bucket 1"));
    assert_herd_ok(c->ops->wait_all(c));
    assert_herd_ok(sim->memcpy_d2h(h, d, sizeof h));
    for (int i = 0; i < 10; i++)
        assert_true(h[i] == (i < 4 ? 2.0f : 0.5f) * (float)i);
    assert_herd_ok(herd_comm_broadcast_buffer(c, sim, d, sizeof h, 0));
    sim->free(d);
    herd_comm_destroy(c);
    herd_comm_destroy(local);
}

/* ------------------------------------------------------------ whole models */

static float *host_params(const herd_model *m) { return tu_model_host_copy(m, false); }

static void train_both(const char *model, const char *data, herd_train_config *cfg, int steps)
{
    herd_dataset *ds;
    assert_herd_ok(herd_dataset_open(data, HERD_SPLIT_TRAIN, &ds));
    herd_memory_usage before, after;
    assert_herd_ok(herd_device_memory_usage("sim", &before));
    herd_model *mc, *ms;
    assert_herd_ok(herd_model_create_device(model, ds, "cpu", &mc));
    assert_herd_ok(herd_model_create_device(model, ds, "sim", &ms));
    assert_string_equal(herd_model_device(ms), "sim");
    assert_herd_ok(herd_model_init_params(mc, 5));
    assert_herd_ok(herd_model_init_params(ms, 5));
    size_t n = mc->n_param_floats;
    float *c0 = host_params(mc), *s0 = host_params(ms);
    assert_memory_equal(c0, s0, n * sizeof(float));

    herd_train_result rc, rs;
    assert_herd_ok(herd_train(mc, ds, NULL, cfg, NULL, NULL, &rc));
    assert_herd_ok(herd_train(ms, ds, NULL, cfg, NULL, NULL, &rs));
    assert_int_equal(rc.steps, steps);
    assert_int_equal(rs.steps, steps);
    float *c1 = host_params(mc), *s1 = host_params(ms);
    assert_true(memcmp(c0, c1, n * sizeof(float)) != 0);
    if (memcmp(c1, s1, n * sizeof(float)) != 0)
        fail_msg("%s: parameters after %d steps differ between cpu and sim (max rel %g)", model,
                 steps, tu_max_rel_err(s1, c1, n));
    /* Buffers too (batch-norm running statistics). */
    float *bs = tu_model_host_copy(ms, true);
    if (mc->n_buffer_floats)
        assert_memory_equal(bs, mc->buffers, mc->n_buffer_floats * sizeof(float));
    free(bs);
    herd_eval_result ec, es;
    assert_herd_ok(herd_evaluate(mc, ds, 32, 1, &ec));
    assert_herd_ok(herd_evaluate(ms, ds, 32, 1, &es));
    assert_true(ec.loss == es.loss && ec.acc == es.acc);
    printf("%s: %d steps on sim and cpu, parameters equal; eval loss %.6f\n", model, steps, es.loss);

    free(c0), free(s0), free(c1), free(s1);
    herd_model_free(mc);
    herd_model_free(ms);
    herd_dataset_free(ds);
    /* Everything the model, its training and evaluation put on the device is back. */
    assert_herd_ok(herd_device_memory_usage("sim", &after));
    assert_true(after.current == before.current);
}

/* One epoch on one thread, no evaluation during training. */
static herd_train_config one_epoch(int batch_size)
{
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    cfg.epochs = 1;
    cfg.threads = 1;
    cfg.eval_every = 0;
    cfg.batch_size = batch_size;
    return cfg;
}

/* SGD with Nesterov momentum and weight decay, label smoothing, and the host values
 * of loss scaling (grad_unscale_check) and clipping (sum_squares) at every step. */
static void test_train_lenet5(void **state)
{
    (void)state;
    herd_train_config cfg = one_epoch(32);
    cfg.lr = 0.05f;
    cfg.momentum = 0.9f;
    cfg.nesterov = true;
    cfg.weight_decay = 5e-4f;
    cfg.label_smoothing = 0.1f;
    cfg.dynamic_loss_scale = true;
    cfg.clip_grad_norm = 0.05f; /* below the gradients' norm: it scales them */
    train_both("lenet5", "synthetic:1,28,28,10,128", &cfg, 4);
}

/* Batch norm, residual adds, global pooling; AdamW. */
static void test_train_resnet20(void **state)
{
    (void)state;
    herd_train_config cfg = one_epoch(8);
    cfg.optimizer = HERD_OPT_ADAMW;
    cfg.lr = 1e-3f;
    cfg.weight_decay = 0.01f;
    train_both("resnet20", "synthetic:3,16,16,10,16", &cfg, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_bias),
        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_global_avgpool),
        cmocka_unit_test(test_bn),
        cmocka_unit_test(test_bn_split),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_optimizers),
        cmocka_unit_test(test_scaling),
        cmocka_unit_test(test_host_pointers_refused),
        cmocka_unit_test(test_copies),
        cmocka_unit_test(test_bad_free_logged),
        cmocka_unit_test(test_host_access_faults),
        cmocka_unit_test(test_memory_limit),
        cmocka_unit_test(test_precision),
        cmocka_unit_test(test_staged_comm),
        cmocka_unit_test(test_train_lenet5),
        cmocka_unit_test(test_train_resnet20),
    };
    return tu_run(tests, setup, NULL);
}
