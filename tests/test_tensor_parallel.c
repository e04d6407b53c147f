/* Tensor parallelism's layers against the whole model, one process: T threads each
 * hold one part of a small GPT (heads, MLP features and vocabulary split; the
 * vocabulary unevenly), their group's sums and gathers meet at a barrier and add in
 * rank order. Each part's logits, loss and every gradient must match the same part of
 * the whole model's within 1e-5, and a row-parallel layer with bias, a column-parallel
 * layer without, and the model file's bad values are checked too. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "nn/model.h"
#include "nn/tensor_split.h"
#include "nn/xent_split.h"
#include "testutil.h"

enum { MAX_PARTS = 4, N = 2, T = 6 };

/* vocab 61: 31 + 30 over 2 parts, 16 + 15 + 15 + 15 over 4. */
static const char *const MODEL =
    "{\"layers\": ["
    "{\"type\": \"embedding\", \"name\": \"embed\", \"vocab\": 61, \"context\": 8, \"out\": 16},"
    "{\"type\": \"layernorm\", \"name\": \"h0.ln1\"},"
    "{\"type\": \"attention\", \"name\": \"h0.attn\", \"heads\": 4, \"init_std\": 0.3},"
    "{\"type\": \"add\", \"name\": \"h0.res1\", \"inputs\": [\"h0.attn\", \"embed\"]},"
    "{\"type\": \"layernorm\", \"name\": \"h0.ln2\"},"
    "{\"type\": \"linear\", \"name\": \"h0.fc\", \"out\": 32, \"per_position\": true,"
    " \"parallel\": \"column\", \"init_std\": 0.3},"
    "{\"type\": \"gelu\", \"name\": \"h0.gelu\"},"
    "{\"type\": \"linear\", \"name\": \"h0.proj\", \"out\": 16, \"per_position\": true,"
    " \"parallel\": \"row\"},"
    "{\"type\": \"add\", \"name\": \"h0.out\", \"inputs\": [\"h0.proj\", \"h0.res1\"]},"
    "{\"type\": \"linear\", \"name\": \"fc2\", \"out\": 8, \"per_position\": true,"
    " \"parallel\": \"column\", \"bias\": false},"
    "{\"type\": \"gelu\", \"name\": \"gelu2\"},"
    "{\"type\": \"linear\", \"name\": \"proj2\", \"out\": 16, \"per_position\": true,"
    " \"parallel\": \"row\"},"
    "{\"type\": \"layernorm\", \"name\": \"ln_f\"},"
    "{\"type\": \"lm_head\", \"name\": \"head\", \"tie\": \"embed\"}"
    "]}";

/* The threads' group: each puts its buffer in a slot, all wait, each adds the slots in
 * rank order into its own, all wait again before the slots are reused. */
typedef struct thread_group {
    pthread_barrier_t bar;
    int parts;
    const void *slot[MAX_PARTS];
} thread_group;

typedef struct part_arg {
    thread_group *g;
    int rank;
} part_arg;

static herd_status group_sum(void *group, float *buf, size_t n)
{
    part_arg *a = group;
    thread_group *g = a->g;
    float *copy = malloc(n * sizeof *copy);
    memcpy(copy, buf, n * sizeof *copy);
    g->slot[a->rank] = copy;
    pthread_barrier_wait(&g->bar);
    for (size_t i = 0; i < n; i++) {
        float s = ((const float *)g->slot[0])[i];
        for (int t = 1; t < g->parts; t++)
            s += ((const float *)g->slot[t])[i];
        buf[i] = s;
    }
    pthread_barrier_wait(&g->bar);
    free(copy);
    return HERD_OK;
}

static herd_status group_allgather(void *group, const void *mine, void *all, size_t bytes)
{
    part_arg *a = group;
    thread_group *g = a->g;
    g->slot[a->rank] = mine;
    pthread_barrier_wait(&g->bar);
    for (int t = 0; t < g->parts; t++)
        memcpy((char *)all + (size_t)t * bytes, g->slot[t], bytes);
    pthread_barrier_wait(&g->bar);
    return HERD_OK;
}

typedef struct run_out {
    herd_model *m;
    float *logits; /* this part's, copied */
    double loss;
    long correct;
    herd_status st;
} run_out;

static float tokens[N * T];
static int32_t labels[N * T];
static run_out outs[MAX_PARTS];

/* Builds part `rank` of `parts` (parts 1: the whole model), one forward and backward. */
static herd_status run_part(part_arg *a, int parts, run_out *o)
{
    herd_layer_spec *specs;
    int n_specs;
    HERD_TRY(herd_model_parse_text(MODEL, "tp.json", 61, &specs, &n_specs));
    herd_model *m = calloc(1, sizeof *m);
    o->m = m;
    m->in_c = 1, m->in_h = T, m->in_w = 1, m->classes = 61;
    snprintf(m->name, sizeof m->name, "tp");
    if (parts > 1)
        m->tp = (herd_tp_group){.rank = a->rank, .size = parts, .sum = group_sum,
                                .allgather = group_allgather, .group = a};
    herd_status st = herd_model_build(m, specs, n_specs, 11);
    free(specs);
    HERD_TRY(st);
    HERD_TRY(herd_model_reshape(m, N));
    herd_run_ctx ctx = herd_model_ctx(m, true, 5);
    const float *logits;
    HERD_TRY(herd_model_forward(m, &ctx, tokens, &logits));
    size_t nl = (size_t)N * T * m->class_count;
    o->logits = malloc(nl * sizeof(float));
    memcpy(o->logits, logits, nl * sizeof(float));
    float *dlogits = calloc(nl, sizeof *dlogits);
    st = herd_model_xent(m, N * T, logits, labels, 0.1f, dlogits, &o->loss, &o->correct);
    if (st == HERD_OK)
        st = herd_model_backward(m, &ctx, tokens, dlogits);
    free(dlogits);
    return st;
}

static void *part_thread(void *arg)
{
    part_arg *a = arg;
    outs[a->rank].st = run_part(a, a->g->parts, &outs[a->rank]);
    return NULL;
}

/* sqrt(sum (a-b)^2) / max(sqrt(sum b^2), tiny) */
static double rel_err(const float *a, const float *b, size_t n)
{
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return sqrt(d) / (sqrt(r) > 1e-30 ? sqrt(r) : 1e-30);
}

static void check_parts(int parts)
{
    for (int i = 0; i < N * T; i++) {
        tokens[i] = (float)((i * 17 + 3) % 61);
        labels[i] = (int32_t)((i * 29 + 5) % 61);
    }
    run_out whole = {0};
    part_arg wa = {0};
    assert_herd_ok(run_part(&wa, 1, &whole));
    thread_group g = {.parts = parts};
    pthread_barrier_init(&g.bar, NULL, (unsigned)parts);
    pthread_t th[MAX_PARTS];
    part_arg args[MAX_PARTS];
    for (int t = 0; t < parts; t++) {
        args[t] = (part_arg){.g = &g, .rank = t};
        pthread_create(&th[t], NULL, part_thread, &args[t]);
    }
    for (int t = 0; t < parts; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&g.bar);
    herd_model *w = whole.m;
    int split_views = 0;
    for (int t = 0; t < parts; t++) {
        run_out *o = &outs[t];
        assert_herd_ok(o->st);
        herd_model *m = o->m;
        assert_int_equal(m->n_views, w->n_views);
        /* Loss and hits: the same on every part, and the whole model's. */
        assert_true(fabs(o->loss - whole.loss) <= 1e-5 * fabs(whole.loss));
        assert_int_equal(o->correct, whole.correct);
        /* Logits: this part's columns of the whole's. */
        size_t rows = (size_t)N * T;
        float *mine = malloc(rows * (size_t)m->class_count * sizeof *mine);
        for (size_t r = 0; r < rows; r++)
            memcpy(mine + r * (size_t)m->class_count, whole.logits + r * 61 + m->class_first,
                   (size_t)m->class_count * sizeof *mine);
        double le = rel_err(o->logits, mine, rows * (size_t)m->class_count);
        if (le > 1e-5)
            fail_msg("part %d of %d: logits %.3g from the whole model's", t, parts, le);
        free(mine);
        for (int v = 0; v < m->n_views; v++) {
            const herd_tensor_view *pv = &m->views[v], *wv = &w->views[v];
            assert_string_equal(pv->name, wv->name);
            split_views += pv->split_parts > 1;
            float *want = malloc(pv->numel * sizeof *want), *wantp = malloc(pv->numel * sizeof *wantp);
            herd_split_copy(pv, w->grads + wv->offset, want, true);
            herd_split_copy(pv, w->params + wv->offset, wantp, true);
            double pe = rel_err(m->params + pv->offset, wantp, pv->numel);
            double ge = rel_err(m->grads + pv->offset, want, pv->numel);
            if (pe != 0 || ge > 1e-5)
                fail_msg("part %d of %d: %s: parameters %.3g, gradient %.3g from the whole's",
                         t, parts, pv->name, pe, ge);
            free(want);
            free(wantp);
        }
    }
    /* wte; qkv weight and bias, proj.weight; h0.fc weight and bias, fc2 weight; the two
     * row layers' weights */
    assert_int_equal(split_views, parts * 9);
    for (int t = 0; t < parts; t++) {
        free(outs[t].logits);
        herd_model_free(outs[t].m);
    }
    free(whole.logits);
    herd_model_free(w);
}

static void test_two_parts(void **state)
{
    (void)state;
    assert_herd_ok(herd_backend_cpu()->set_threads(1));
    check_parts(2);
}

static void test_four_parts(void **state)
{
    (void)state;
    check_parts(4);
}

/* A model of the given layers (JSON, after a flatten) planned as part 0 of 2: refused,
 * the message holding want. */
static void expect_split_error(const char *layers, const char *want)
{
    char text[1024];
    snprintf(text, sizeof text, "{\"name\": \"split\", \"layers\": [{\"type\": \"flatten\"}, %s]}",
             layers);
    herd_layer_spec *specs;
    int n;
    assert_herd_ok(herd_model_parse_text(text, "split.json", 4, &specs, &n));
    herd_model *m = calloc(1, sizeof *m);
    m->in_c = 1, m->in_h = 4, m->in_w = 4, m->classes = 4;
    m->tp = (herd_tp_group){.rank = 0, .size = 2};
    tu_expect_error(herd_model_plan(m, specs, n), HERD_ERR_INVALID_ARG, want, "docs/model-files.md");
    herd_model_free(m);
    free(specs);
}

/* Splits that cannot be made are refused at build, naming the layer and the sizes. */
static void test_refusals(void **state)
{
    (void)state;
    herd_layer_spec *specs;
    int n;
    assert_herd_ok(herd_model_parse_text(MODEL, "tp.json", 61, &specs, &n));
    herd_model *m = calloc(1, sizeof *m);
    m->in_c = 1, m->in_h = T, m->in_w = 1, m->classes = 61;
    m->tp = (herd_tp_group){.rank = 0, .size = 3};
    tu_expect_error(herd_model_plan(m, specs, n), HERD_ERR_INVALID_ARG,
                    "'h0.attn' has 4 heads", "--tensor-parallel 3");
    herd_model_free(m);
    m = calloc(1, sizeof *m);
    m->in_c = 1, m->in_h = T, m->in_w = 1, m->classes = 61;
    m->tp = (herd_tp_group){.rank = 1, .size = 4};
    specs[2].heads = 8; /* attention passes; fc2's 8 outputs split, h0.fc's 32 too */
    specs[9].out = 6;
    tu_expect_error(herd_model_plan(m, specs, n), HERD_ERR_INVALID_ARG,
                    "'fc2' (\"parallel\": \"column\"): its 6 output features",
                    "--tensor-parallel 4");
    herd_model_free(m);
    free(specs);
    /* A column-parallel layer's part is read only by element-wise layers and the
     * row-parallel layer that sums it (else each part would train a model of its own). */
    expect_split_error("{\"type\": \"linear\", \"name\": \"fc1\", \"out\": 8, \"parallel\": \"column\"},"
                       "{\"type\": \"relu\", \"name\": \"act\"},"
                       "{\"type\": \"linear\", \"name\": \"fc2\", \"out\": 4}",
                       "layer 'fc2' (linear) reads 'act', which holds one part");
    expect_split_error("{\"type\": \"linear\", \"name\": \"fc1\", \"out\": 8},"
                       "{\"type\": \"linear\", \"name\": \"fc2\", \"out\": 4, \"parallel\": \"row\"}",
                       "layer 'fc2' is row-parallel but reads 'fc1', which is whole");
    expect_split_error("{\"type\": \"linear\", \"name\": \"fc1\", \"out\": 8, \"parallel\": \"column\"},"
                       "{\"type\": \"gelu\", \"name\": \"act\"}",
                       "its last layer 'act' gives one part");
    const char *bad = "{\"layers\": [{\"type\": \"linear\", \"name\": \"fc\", \"out\": 4, "
                      "\"parallel\": \"columns\"}]}";
    tu_expect_error(herd_model_parse_text(bad, "bad.json", 4, &specs, &n), HERD_ERR_FORMAT,
                    "bad.json: layer 'fc': \"parallel\" is 'columns'", "\"column\"");
}

/* The offset arithmetic alone: uneven parts, and a view's part back in its whole. */
static void test_split_copy(void **state)
{
    (void)state;
    int64_t first, count, at = 0;
    for (int t = 0; t < 4; t++) {
        herd_split_range(61, t, 4, &first, &count);
        assert_int_equal(first, at);
        assert_int_equal(count, t == 0 ? 16 : 15);
        at += count;
    }
    /* A [6, 4] tensor in 3 blocks of 2 rows, part 1 of 2: rows 1, 3, 5. */
    herd_tensor_view v = {.ndim = 2, .shape = {3, 4}, .numel = 12, .split_dim = 0,
                          .split_groups = 3, .split_part = 1, .split_parts = 2,
                          .whole_shape = {6, 4}};
    float whole[24], part[12], back[24] = {0};
    for (int i = 0; i < 24; i++)
        whole[i] = (float)i;
    herd_split_copy(&v, whole, part, true);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++)
            assert_true(part[r * 4 + c] == whole[(2 * r + 1) * 4 + c]);
    herd_split_copy(&v, back, part, false);
    for (int r = 0; r < 6; r++)
        for (int c = 0; c < 4; c++)
            assert_true(back[r * 4 + c] == (r % 2 ? whole[r * 4 + c] : 0.0f));
    /* Columns 2..3 of a [3, 4] tensor. */
    herd_tensor_view c = {.ndim = 2, .shape = {3, 2}, .numel = 6, .split_dim = 1,
                          .split_groups = 1, .split_part = 1, .split_parts = 2,
                          .whole_shape = {3, 4}};
    herd_split_copy(&c, whole, part, true);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 2; k++)
            assert_true(part[r * 2 + k] == whole[r * 4 + 2 + k]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_copy),
        cmocka_unit_test(test_two_parts),
        cmocka_unit_test(test_four_parts),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
