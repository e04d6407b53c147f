/* The transformer ops of a device backend against the CPU backend's: embeddings (a
 * whole table and a tensor-parallel part, repeated tokens, no position rows), layer
 * norm, GELU and causal attention, forward and backward, and the vocabulary-parallel
 * loss's two halves, on the same random inputs.
 * HERD_TEST_DEVICE picks the device: sim (the default, in make test) must give the CPU's
 * bits; cuda (bench/gpu/half.sh, exits 77 without a GPU) must come within fp32
 * rounding, and give the CPU's bits where it adds in the CPU's order (embeddings). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "herd_config.h"

#include "backend/backend.h"

#if HERD_HAVE_CUDA
#include <cuda_runtime.h>
#endif

static const herd_backend *cpu, *dev;
static double tol; /* 0 on sim */

static float *up(const float *h, size_t n)
{
    float *d = dev->alloc(n ? n * sizeof(float) : sizeof(float));
    if (!d)
        fail_msg("%s alloc of %zu floats: %s", dev->name, n, herd_last_error());
    assert_herd_ok(dev->memcpy_h2d(d, h, n * sizeof(float)));
    return d;
}

static void check(const char *what, const float *d, const float *ref, size_t n, double limit)
{
    float *h = malloc(n * sizeof *h);
    assert_herd_ok(dev->memcpy_d2h(h, d, n * sizeof *h));
    double err = tu_max_rel_err(h, ref, n);
    printf("  %-40s max rel err %.3g\n", what, err);
    if (!(err <= limit))
        fail_msg("%s on %s: max rel err %g > %g", what, dev->name, err, limit);
    free(h);
}

/* n x t token ids in [0, vocab) with repeats (a small vocabulary, or every 3rd the same). */
static float *tokens(int n, int t, int vocab)
{
    float *ids = malloc((size_t)n * t * sizeof *ids);
    for (int i = 0; i < n * t; i++)
        ids[i] = (float)(i % 3 == 0 ? 1 : (i * 7919 + 13) % vocab);
    return ids;
}

static void embedding_case(int n, int t, int c, int vocab, int first, int count, bool positions,
                           float beta)
{
    int context = t + 3;
    size_t rows = (size_t)n * t;
    float *ids = tokens(n, t, vocab), *wte = tu_randv((size_t)count * c, 1),
          *wpe = tu_randv((size_t)context * c, 2), *y = calloc(rows * c, 4),
          *dy = tu_randv(rows * c, 3), *dwte = tu_randv((size_t)count * c, 4),
          *dwpe = tu_randv((size_t)context * c, 5);
    float *g_ids = up(ids, rows), *g_wte = up(wte, (size_t)count * c),
          *g_wpe = up(wpe, (size_t)context * c), *g_y = up(y, rows * c), *g_dy = up(dy, rows * c),
          *g_dwte = up(dwte, (size_t)count * c), *g_dwpe = up(dwpe, (size_t)context * c);
    assert_herd_ok(cpu->embedding_fwd(n, t, c, vocab, first, count, ids, wte,
                                      positions ? wpe : NULL, y));
    assert_herd_ok(dev->embedding_fwd(n, t, c, vocab, first, count, g_ids, g_wte,
                                      positions ? g_wpe : NULL, g_y));
    char what[96];
    snprintf(what, sizeof what, "embedding fwd %dx%dx%d rows %d+%d%s", n, t, c, first, count,
             positions ? "" : " no wpe");
    check(what, g_y, y, rows * c, 0); /* the same additions: exact */
    assert_herd_ok(cpu->embedding_bwd(n, t, c, first, count, context, ids, dy, dwte, beta, dwpe,
                                      beta));
    assert_herd_ok(dev->embedding_bwd(n, t, c, first, count, context, g_ids, g_dy, g_dwte, beta,
                                      g_dwpe, beta));
    snprintf(what, sizeof what, "embedding bwd dwte beta %g", beta);
    check(what, g_dwte, dwte, (size_t)count * c, 0); /* rows added in the CPU's order */
    check("embedding bwd dwpe", g_dwpe, dwpe, (size_t)context * c, 0);
    float *p[] = {g_ids, g_wte, g_wpe, g_y, g_dy, g_dwte, g_dwpe};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        dev->free(p[i]);
    free(ids), free(wte), free(wpe), free(y), free(dy), free(dwte), free(dwpe);
}

static void test_embedding(void **state)
{
    (void)state;
    embedding_case(2, 5, 24, 11, 0, 11, true, 0.0f);
    embedding_case(3, 16, 70, 50, 20, 17, false, 1.0f); /* a part: ids outside add nothing */
    embedding_case(4, 64, 768, 300, 0, 300, true, 1.0f);
}

static void test_bad_token(void **state)
{
    (void)state;
    float ids[6] = {0, 1, 2, 3, 2.5f, 1}, *wte = tu_randv(4 * 8, 1);
    float *zeros = calloc(6 * 8, 4);
    float *g_ids = up(ids, 6), *g_wte = up(wte, 32), *g_y = up(zeros, 48);
    tu_expect_error(dev->embedding_fwd(2, 3, 8, 4, 0, 4, g_ids, g_wte, NULL, g_y),
                    HERD_ERR_INVALID_ARG, "token 2.5 at sample 1, position 1", "vocabulary of 4");
    ids[4] = 4; /* at the vocabulary's size */
    assert_herd_ok(dev->memcpy_h2d(g_ids, ids, sizeof ids));
    tu_expect_error(dev->embedding_fwd(2, 3, 8, 4, 0, 4, g_ids, g_wte, NULL, g_y),
                    HERD_ERR_INVALID_ARG, "token 4 at sample 1, position 1", NULL);
    dev->free(g_ids), dev->free(g_wte), dev->free(g_y);
    free(wte), free(zeros);
}

static void layernorm_case(int rows, int c, float beta)
{
    size_t nv = (size_t)rows * c;
    float *x = tu_randv(nv, 10), *g = tu_randv(c, 11), *b = tu_randv(c, 12), *dy = tu_randv(nv, 13);
    for (size_t i = 0; i < nv; i++)
        x[i] = 3.0f * x[i] + 0.5f; /* an offset, so the mean matters */
    float *y = calloc(nv, 4), *mean = calloc(rows, 4), *rstd = calloc(rows, 4), *dx = calloc(nv, 4),
          *dg = tu_randv(c, 14), *db = tu_randv(c, 15);
    float *gx = up(x, nv), *gg = up(g, c), *gb = up(b, c), *gdy = up(dy, nv), *gy = up(y, nv),
          *gm = up(mean, rows), *gr = up(rstd, rows), *gdx = up(dx, nv), *gdg = up(dg, c),
          *gdb = up(db, c);
    assert_herd_ok(cpu->layernorm_fwd(rows, c, x, g, b, 1e-5f, y, mean, rstd));
    assert_herd_ok(dev->layernorm_fwd(rows, c, gx, gg, gb, 1e-5f, gy, gm, gr));
    char what[96];
    snprintf(what, sizeof what, "layernorm fwd %dx%d", rows, c);
    check(what, gy, y, nv, tol);
    check("layernorm mean", gm, mean, rows, tol);
    check("layernorm rstd", gr, rstd, rows, tol);
    assert_herd_ok(cpu->layernorm_bwd(rows, c, x, dy, g, mean, rstd, dx, dg, db, beta));
    assert_herd_ok(dev->layernorm_bwd(rows, c, gx, gdy, gg, gm, gr, gdx, gdg, gdb, beta));
    check("layernorm dx", gdx, dx, nv, tol);
    snprintf(what, sizeof what, "layernorm dgamma beta %g", beta);
    check(what, gdg, dg, c, tol * 10); /* sums of many rows */
    check("layernorm dbias", gdb, db, c, tol * 10);
    float *p[] = {gx, gg, gb, gdy, gy, gm, gr, gdx, gdg, gdb};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        dev->free(p[i]);
    free(x), free(g), free(b), free(dy), free(y), free(mean), free(rstd), free(dx), free(dg),
        free(db);
}

static void test_layernorm(void **state)
{
    (void)state;
    layernorm_case(7, 5, 0.0f);
    layernorm_case(300, 768, 1.0f);
    layernorm_case(33, 100, 0.0f);
}

static void test_gelu(void **state)
{
    (void)state;
    size_t n = 100003;
    float *x = tu_randv(n, 20), *dy = tu_randv(n, 21), *y = calloc(n, 4), *dx = calloc(n, 4);
    for (size_t i = 0; i < n; i++)
        x[i] *= 12.0f; /* both tails, past where e^-2u is clamped */
    float *gx = up(x, n), *gdy = up(dy, n), *gy = up(y, n), *gdx = up(dx, n);
    assert_herd_ok(cpu->gelu_fwd(n, x, y));
    assert_herd_ok(dev->gelu_fwd(n, gx, gy));
    check("gelu fwd", gy, y, n, tol);
    assert_herd_ok(cpu->gelu_bwd(n, x, dy, dx));
    assert_herd_ok(dev->gelu_bwd(n, gx, gdy, gdx));
    check("gelu bwd", gdx, dx, n, tol);
    dev->free(gx), dev->free(gdy), dev->free(gy), dev->free(gdx);
    free(x), free(dy), free(y), free(dx);
}

static void attention_case(int n, int t, int c, int heads)
{
    size_t rows = (size_t)n * t, natt = (size_t)n * heads * t * t;
    float *qkv = tu_randv(rows * 3 * c, 30), *dy = tu_randv(rows * c, 31);
    for (size_t i = 0; i < rows * 3 * c; i++)
        qkv[i] *= 2.0f; /* peaked softmaxes too */
    float *att = calloc(natt, 4), *y = calloc(rows * c, 4), *dqkv = calloc(rows * 3 * c, 4);
    float *g_qkv = up(qkv, rows * 3 * c), *g_dy = up(dy, rows * c), *g_att = up(att, natt),
          *g_y = up(y, rows * c), *g_dqkv = up(dqkv, rows * 3 * c);
    assert_herd_ok(cpu->attention_fwd(n, t, c, heads, qkv, att, y));
    assert_herd_ok(dev->attention_fwd(n, t, c, heads, g_qkv, g_att, g_y));
    char what[96];
    snprintf(what, sizeof what, "attention fwd n%d t%d c%d h%d: att", n, t, c, heads);
    check(what, g_att, att, natt, tol);
    check("attention fwd: y", g_y, y, rows * c, tol * 10);
    assert_herd_ok(cpu->attention_bwd(n, t, c, heads, qkv, att, dy, dqkv));
    assert_herd_ok(dev->attention_bwd(n, t, c, heads, g_qkv, g_att, g_dy, g_dqkv));
    check("attention bwd: dqkv", g_dqkv, dqkv, rows * 3 * c, tol * 10);
    dev->free(g_qkv), dev->free(g_dy), dev->free(g_att), dev->free(g_y), dev->free(g_dqkv);
    free(qkv), free(dy), free(att), free(y), free(dqkv);
}

static void test_attention(void **state)
{
    (void)state;
    attention_case(1, 1, 4, 1);
    attention_case(2, 7, 12, 3);
    attention_case(3, 40, 64, 4);  /* rows longer than a warp */
    attention_case(2, 128, 96, 2); /* gpt-nano's shape, batch 2 */
}

/* Row summaries of one part [first, first + count) of `classes` and the gradient from
 * given log-sum-exps, with labels inside and outside the part. */
static void xent_part_case(int n, int count, int first, int classes)
{
    float *z = tu_randv((size_t)n * count, 40), *d = calloc((size_t)n * count, 4);
    for (size_t i = 0; i < (size_t)n * count; i++)
        z[i] *= 5.0f;
    z[count + 3] = z[count + 1] = 9.0f; /* a tie in row 1: the lower class wins */
    int32_t *labels = malloc((size_t)n * sizeof *labels);
    double *stats = calloc((size_t)n * HERD_XENT_STATS, sizeof *stats), *lse = malloc(n * 8);
    for (int i = 0; i < n; i++) {
        labels[i] = (i * 37 + 5) % classes;
        lse[i] = 3.0 + 0.01 * i;
    }
    size_t sb = (size_t)n * HERD_XENT_STATS * sizeof(double);
    float *gz = up(z, (size_t)n * count), *gd = up(d, (size_t)n * count);
    int32_t *gl = dev->alloc((size_t)n * sizeof *labels);
    double *gs = dev->alloc(sb), *glse = dev->alloc((size_t)n * 8);
    assert_non_null(gl), assert_non_null(gs), assert_non_null(glse);
    assert_herd_ok(dev->memcpy_h2d(gl, labels, (size_t)n * sizeof *labels));
    assert_herd_ok(dev->memcpy_h2d(glse, lse, (size_t)n * 8));
    assert_herd_ok(cpu->xent_part_stats(n, count, first, z, labels, stats));
    assert_herd_ok(dev->xent_part_stats(n, count, first, gz, gl, gs));
    double *h = malloc(sb), err = 0;
    assert_herd_ok(dev->memcpy_d2h(h, gs, sb));
    for (size_t i = 0; i < (size_t)n * HERD_XENT_STATS; i++) {
        double e = fabs(h[i] - stats[i]) / (fabs(stats[i]) > 1 ? fabs(stats[i]) : 1);
        err = e > err ? e : err;
    }
    printf("  xent_part_stats n%d part %d+%d of %d    max rel err %.3g\n", n, first, count, classes,
           err);
    if (!(err <= tol))
        fail_msg("xent_part_stats on %s: max rel err %g > %g", dev->name, err, tol);
    for (int i = 0; i < n; i++) /* the largest logit's class and whether the label is here: exact */
        if (h[i * HERD_XENT_STATS + 1] != stats[i * HERD_XENT_STATS + 1] ||
            h[i * HERD_XENT_STATS + 5] != stats[i * HERD_XENT_STATS + 5])
            fail_msg("xent_part_stats row %d: class %g / here %g, the CPU's %g / %g", i,
                     h[i * HERD_XENT_STATS + 1], h[i * HERD_XENT_STATS + 5],
                     stats[i * HERD_XENT_STATS + 1], stats[i * HERD_XENT_STATS + 5]);
    assert_herd_ok(cpu->xent_part_grad(n, count, first, classes, z, labels, lse, 0.1f, d));
    assert_herd_ok(dev->xent_part_grad(n, count, first, classes, gz, gl, glse, 0.1f, gd));
    check("xent_part_grad", gd, d, (size_t)n * count, tol);
    dev->free(gz), dev->free(gd), dev->free(gl), dev->free(gs), dev->free(glse);
    free(z), free(d), free(labels), free(stats), free(lse), free(h);
}

static void test_xent_part(void **state)
{
    (void)state;
    xent_part_case(5, 7, 0, 20);
    xent_part_case(64, 100, 100, 257); /* the last part of an uneven split */
    xent_part_case(33, 1000, 500, 2000);
}

int main(void)
{
    const char *name = getenv("HERD_TEST_DEVICE");
    name = name && *name ? name : "sim";
    cpu = herd_backend_cpu();
    if (cpu->set_threads(1) != HERD_OK)
        return 1;
    if (strcmp(name, "cuda") == 0)
        dev = tu_cuda_or_exit();
    else if (herd_backend_for(name, &dev) != HERD_OK) {
        printf("FAILED: device %s: %s\n", name, herd_last_error());
        return 1;
    }
    tol = strcmp(name, "sim") == 0 ? 0.0 : 1e-5;
    printf("device %s against the CPU, tolerance %g\n", dev->name, tol);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedding), cmocka_unit_test(test_bad_token),
        cmocka_unit_test(test_layernorm), cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_attention), cmocka_unit_test(test_xent_part),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
#if HERD_HAVE_CUDA
    if (strcmp(name, "cuda") == 0) {
        if (failed == 0 && cudaDeviceSynchronize() != cudaSuccess)
            failed = 1; /* a kernel faulted after its last check */
        herd_backend_cuda_shutdown();
    }
#endif
    return failed;
}
