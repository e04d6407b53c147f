/* The CPU backend's memory accounting: every block counted by category, the peak and
 * what it was made of, --memory-limit's refusal naming the request and the cap, the
 * counts and the cap holding with threads allocating at once, every refusal while a
 * model sizes its batch naming the cap (and the model working once there is room),
 * and herd_train's figures and refusals. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/hugepages.h"
#include "nn/model.h"
#include "testutil.h"

static herd_memory_usage usage(void)
{
    herd_memory_usage u;
    assert_int_equal(herd_device_memory_usage("cpu", &u), HERD_OK);
    return u;
}

static void test_counts_and_peak(void **state)
{
    (void)state;
    const herd_backend *be = herd_backend_cpu();
    herd_memory_usage before = usage();
    assert_int_equal(herd_device_memory_reset_peak("cpu"), HERD_OK);
    herd_mem_category was = herd_mem_category_set(HERD_MEM_PARAMS);
    float *p = be->alloc(1000); /* rounded to 1024 */
    herd_mem_category_set(HERD_MEM_ACTIVATIONS);
    float *a = be->alloc(4096);
    herd_mem_category_set(was);
    assert_non_null(p);
    assert_non_null(a);
    assert_true(((uintptr_t)p % 64) == 0 && ((uintptr_t)a % 64) == 0);
    for (int i = 0; i < 250; i++)
        assert_true(p[i] == 0.0f); /* zeroed */
    herd_memory_usage u = usage();
    assert_int_equal(u.current - before.current, 1024 + 4096);
    assert_int_equal(u.peak, u.current);
    assert_int_equal(u.peak_by_category[HERD_MEM_PARAMS] - before.peak_by_category[HERD_MEM_PARAMS],
                     1024);
    uint64_t sum = 0;
    for (int c = 0; c < HERD_MEM_CATEGORIES; c++)
        sum += u.peak_by_category[c];
    assert_int_equal(sum, u.peak);
    be->free(a);
    be->free(p);
    u = usage();
    assert_int_equal(u.current, before.current);
    assert_int_equal(u.peak, before.current + 1024 + 4096); /* the peak stays */
}

static void test_limit(void **state)
{
    (void)state;
    const herd_backend *be = herd_backend_cpu();
    herd_memory_usage u = usage();
    assert_int_equal(herd_device_set_memory_limit("cpu", u.current + (1 << 20)), HERD_OK);
    herd_mem_category was = herd_mem_category_set(HERD_MEM_OPTIMIZER);
    void *fits = be->alloc(512 << 10);
    void *over = be->alloc(768 << 10);
    herd_mem_category_set(was);
    assert_non_null(fits);
    assert_null(over);
    const char *msg = herd_last_error();
    if (!strstr(msg, "allocating 0.8 MiB of optimizer state") || !strstr(msg, "--memory-limit"))
        fail_msg("the refusal says: %s", msg);
    /* A cap below what is held is refused; removing the cap lets it through. */
    assert_int_equal(herd_device_set_memory_limit("cpu", u.current + 1), HERD_ERR_INVALID_ARG);
    assert_int_equal(herd_device_set_memory_limit("cpu", 0), HERD_OK);
    over = be->alloc(768 << 10);
    assert_non_null(over);
    be->free(over);
    be->free(fits);
}

static void *churn(void *arg)
{
    const herd_backend *be = arg;
    for (int i = 0; i < 2000; i++) {
        void *p = be->alloc((size_t)(i % 7 + 1) * 128);
        be->free(p);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    const herd_backend *be = herd_backend_cpu();
    uint64_t start = usage().current;
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, churn, (void *)be);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(usage().current, start);
}

/* A thread allocating and freeing blocks of 4..52 KiB, 8 alive at a time (their sum
 * reaches 76 x 4 KiB), after every thread has started. */
typedef struct worker {
    const herd_backend *be;
    pthread_barrier_t *start;
    int refused;
} worker;

static void *churn_live(void *arg)
{
    worker *w = arg;
    void *live[8] = {0};
    pthread_barrier_wait(w->start);
    for (int i = 0; i < 3000; i++) {
        w->be->free(live[i % 8]);
        live[i % 8] = w->be->alloc((size_t)(i % 13 + 1) * 4096);
        w->refused += live[i % 8] == NULL;
    }
    for (int k = 0; k < 8; k++)
        w->be->free(live[k]);
    return NULL;
}

/* Under a cap each thread alone would hit: the cap holds at every moment, refusals
 * leave no count behind, and the peak's breakdown still sums to the peak. */
static void test_threads_under_cap(void **state)
{
    (void)state;
    herd_memory_usage start = usage();
    uint64_t cap = start.current + 200 * 1024;
    assert_int_equal(herd_device_set_memory_limit("cpu", cap), HERD_OK);
    assert_int_equal(herd_device_memory_reset_peak("cpu"), HERD_OK);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 4);
    worker w[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){.be = herd_backend_cpu(), .start = &go};
        pthread_create(&t[i], NULL, churn_live, &w[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&go);
    assert_int_equal(herd_device_set_memory_limit("cpu", 0), HERD_OK);
    herd_memory_usage u = usage();
    printf("refused under a %.0f KiB cap: %d %d %d %d; peak %.0f KiB\n",
           (double)(cap - start.current) / 1024, w[0].refused, w[1].refused, w[2].refused,
           w[3].refused, (double)(u.peak - start.current) / 1024);
    for (int i = 0; i < 4; i++)
        assert_true(w[i].refused > 0);
    assert_int_equal(u.current, start.current);
    assert_true(u.peak <= cap);
    uint64_t sum = 0;
    for (int c = 0; c < HERD_MEM_CATEGORIES; c++)
        sum += u.peak_by_category[c];
    assert_int_equal(sum, u.peak);
}

/* Whether /proc/self/smaps says the mapping holding p may take huge pages (THPeligible: 1);
 * -1 where the kernel does not say (older kernels, no THP). */
static int thp_eligible(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[256];
    int eligible = -1;
    bool inside = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (inside && sscanf(line, "THPeligible: %d", &eligible) == 1)
            break;
    }
    fclose(f);
    return eligible;
}

static bool thp_offered(void)
{
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char mode[128] = "";
    bool ok = f && fgets(mode, sizeof mode, f) && !strstr(mode, "[never]");
    if (f)
        fclose(f);
    return ok;
}

/* Blocks of 2 MiB and more: on a huge-page boundary (plus the header), zeroed, marked
 * for huge pages where the kernel offers them, counted as any block; under the
 * sanitizers from calloc (ASan's redzones), where herd_huge_worth says no. */
static void test_huge_page_blocks(void **state)
{
    (void)state;
    const size_t mib2 = (size_t)2 << 20;
    char *raw = herd_huge_map(3 * mib2 + 100);
    assert_non_null(raw);
    assert_int_equal((uintptr_t)raw % mib2, 0);
    for (size_t i = 0; i < 3 * mib2 + 100; i += 4096)
        assert_int_equal(raw[i], 0);
    raw[3 * mib2 + 99] = 1; /* the last byte asked for is there */
    if (thp_offered() && thp_eligible(raw) >= 0)
        assert_int_equal(thp_eligible(raw), 1);
    herd_huge_unmap(raw, 3 * mib2 + 100);
    assert_false(herd_huge_worth(mib2 - 1));

    const herd_backend *be = herd_backend_cpu();
    herd_memory_usage before = usage();
    float *big = be->alloc(5 * mib2 / 2);
    assert_non_null(big);
    assert_int_equal((uintptr_t)big % 64, 0);
    if (herd_huge_worth(mib2))
        assert_int_equal((uintptr_t)big % mib2, 64); /* the header fills the first 64 bytes */
    for (size_t i = 0; i < 5 * mib2 / 2 / sizeof *big; i += 1024)
        assert_true(big[i] == 0.0f);
    big[5 * mib2 / 2 / sizeof *big - 1] = 1.0f;
    assert_int_equal(usage().current - before.current, 5 * mib2 / 2);
    be->free(big);
    assert_int_equal(usage().current, before.current);
}

/* A malloc'd block (a data set's images) asks for huge pages for the whole 2 MiB pages
 * inside it, before it is written; the block stays malloc's. Small blocks, NULL and the
 * sanitizer builds are left alone. */
static void test_huge_advise(void **state)
{
    (void)state;
    const size_t mib2 = (size_t)2 << 20, bytes = 5 * mib2 + 12345;
    herd_huge_advise(NULL, bytes);
    char *small = malloc(mib2 - 1);
    assert_non_null(small);
    herd_huge_advise(small, mib2 - 1);
    memset(small, 7, mib2 - 1);
    free(small);
    char *block = malloc(bytes);
    assert_non_null(block);
    herd_huge_advise(block, bytes);
    memset(block, 3, bytes);
    assert_int_equal(block[0], 3);
    assert_int_equal(block[bytes - 1], 3);
    /* The first whole huge page inside the block. */
    char *inner = (char *)(((uintptr_t)block + mib2 - 1) / mib2 * mib2);
    if (herd_huge_worth(bytes) && thp_offered() && thp_eligible(inner) >= 0)
        assert_int_equal(thp_eligible(inner), 1);
    free(block);
}

/* Convolution plans that read the same weights share one reordered copy, made at the
 * first shared call (cpu_shared_weights.c); where the cap leaves no room for it, each plan
 * reads its own copy, sized at set-up: the same bits, and no error mid-training. */
static void test_shared_weights_capped(void **state)
{
    (void)state;
    const herd_backend *be = herd_backend_cpu();
    herd_conv_desc d = {.n = 1, .c_in = 256, .h_in = 4, .w_in = 4, .c_out = 256, .kh = 3, .kw = 3,
                        .stride = 1, .pad = 1};
    assert_herd_ok(herd_conv_desc_finish(&d));
    size_t nx = (size_t)d.n * d.c_in * d.h_in * d.w_in, nw = (size_t)d.c_out * d.c_in * d.kh * d.kw;
    size_t ny = (size_t)d.n * d.c_out * d.h_out * d.w_out;
    float *x = tu_randv(nx, 30), *w = tu_randv(nw, 31), *w_alone = malloc(nw * 4);
    float *y[3] = {calloc(ny, 4), calloc(ny, 4), calloc(ny, 4)};
    memcpy(w_alone, w, nw * 4);
    herd_conv_plan *p[3];
    for (int i = 0; i < 3; i++)
        assert_herd_ok(be->conv2d_plan(&d, &p[i]));
    assert_herd_ok(be->conv2d_fwd(p[2], x, w_alone, NULL, y[2])); /* the arena exists now */
    herd_memory_usage held = usage();
    /* 1 MiB of room: less than the 2.25 MiB a shared copy of the weights would take. */
    assert_int_equal(herd_device_set_memory_limit("cpu", held.current + (1 << 20)), HERD_OK);
    for (int i = 0; i < 2; i++) {
        assert_herd_ok(be->conv2d_fwd(p[i], x, w, NULL, y[i]));
        assert_memory_equal(y[i], y[2], ny * 4);
    }
    assert_int_equal(usage().current, held.current);
    assert_int_equal(herd_device_set_memory_limit("cpu", 0), HERD_OK);
    for (int i = 0; i < 3; i++) {
        be->conv2d_plan_free(p[i]);
        free(y[i]);
    }
    free(x), free(w), free(w_alone);
}

/* A request too large to round up is refused, not wrapped to a small block. */
static void test_huge_request(void **state)
{
    (void)state;
    const herd_backend *be = herd_backend_cpu();
    herd_memory_usage before = usage();
    assert_null(be->alloc(SIZE_MAX - 10)); /* (its rounding wrapped to a 64-byte block) */
    assert_null(be->alloc(SIZE_MAX - 64));
    herd_memory_usage after = usage();
    assert_int_equal(after.current, before.current);
    assert_int_equal(after.peak, before.peak); /* what never existed is not in the peak */
}

/* Sizing a batch under every cap from nothing to enough: each refusal, wherever it falls
 * (activations, a convolution's or pooling's plan and scratch, batch-norm statistics,
 * the dropout mask), says it was the cap, and once there is room the model works. */
static void test_refusals_while_sizing(void **state)
{
    (void)state;
    static const char net[] =
        "{\"name\": \"capnet\", \"layers\": ["
        "{\"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"pad\": 1},"
        "{\"type\": \"batchnorm\"}, {\"type\": \"relu\"}, {\"type\": \"maxpool\", \"kernel\": 2},"
        "{\"type\": \"dropout\", \"p\": 0.5}, {\"type\": \"flatten\"},"
        "{\"type\": \"linear\", \"out\": \"classes\"}]}";
    char *dir = tu_tempdir();
    char *path = tu_write_file(dir, "capnet.json", net, sizeof net - 1);
    herd_model *m;
    assert_int_equal(herd_model_create_shape(path, 1, 8, 8, 3, &m), HERD_OK);
    uint64_t base = usage().current;
    int refusals = 0;
    herd_status st = HERD_ERR_NOMEM;
    for (uint64_t cap = base + 64; st != HERD_OK; cap += 64) {
        assert_true(cap < base + (16u << 20));
        assert_int_equal(herd_device_set_memory_limit("cpu", cap), HERD_OK);
        st = herd_model_reshape(m, 2);
        if (st == HERD_OK)
            break;
        assert_int_equal(st, HERD_ERR_NOMEM);
        if (!strstr(herd_last_error(), "memory limit reached"))
            fail_msg("refused under a cap of %llu bytes without saying so: %s",
                     (unsigned long long)(cap - base), herd_last_error());
        refusals++;
    }
    assert_int_equal(herd_device_set_memory_limit("cpu", 0), HERD_OK);
    printf("%d refusals before batch 2 fitted in %.1f KiB\n", refusals,
           (double)(usage().current - base) / 1024);
    assert_true(refusals > 10);
    /* After all those refusals: a training forward and backward at batch 2. */
    float x[2 * 64] = {0}, dlogits[2 * 3] = {0.5f, -0.5f, 0, 0, 0.5f, -0.5f};
    herd_run_ctx ctx = herd_model_ctx(m, true, 1);
    const float *logits;
    if (herd_model_forward(m, &ctx, x, &logits) != HERD_OK ||
        herd_model_backward(m, &ctx, x, dlogits) != HERD_OK)
        fail_msg("the model does not run after the refusals: %s", herd_last_error());
    herd_model_free(m);
    tu_rmtree(dir);
    free(path);
    free(dir);
}

/* Output gradients share buffers by liveness: resnet20's 60-odd layers need a few
 * (its residual adds keep a block's input gradient alive across the block), and
 * every layer but the last has one, at least as large as its output. */
static void test_gradient_buffers_shared(void **state)
{
    (void)state;
    herd_model *m;
    assert_int_equal(herd_model_create_shape("resnet20", 1, 28, 28, 10, &m), HERD_OK);
    assert_int_equal(herd_model_reshape(m, 4), HERD_OK);
    printf("resnet20: %d layers, %d gradient buffers\n", m->n_layers, m->n_grad_slots);
    assert_true(m->n_layers > 50);
    assert_true(m->n_grad_slots >= 2 && m->n_grad_slots <= 4);
    assert_null(m->dacts[m->n_layers - 1]); /* the loss gives the last layer's */
    for (int i = 0; i < m->n_layers - 1; i++) {
        int k = 0;
        while (k < m->n_grad_slots && m->grad_slots[k] != m->dacts[i])
            k++;
        assert_true(k < m->n_grad_slots);
    }
    /* No two gradients live at once share one: layer j's backward reads its own and
     * writes its inputs'. */
    for (int j = 0; j < m->n_layers; j++)
        for (int k = 0; k < m->layers[j].spec.n_inputs; k++) {
            int src = m->layers[j].spec.inputs[k];
            if (src >= 0 && j < m->n_layers - 1)
                assert_ptr_not_equal(m->dacts[src], m->dacts[j]);
        }
    herd_model_free(m);
}

/* One epoch in batches of 16 on one thread, stopping after max_steps (0 = none). */
static herd_train_config short_run(long max_steps)
{
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    cfg.epochs = 1;
    cfg.batch_size = 16;
    cfg.threads = 1;
    cfg.max_steps = max_steps;
    return cfg;
}

/* herd_train's figures on one rank: its peak is the largest, and is made of what
 * training allocates. */
static void test_train_figures(void **state)
{
    (void)state;
    herd_dataset *ds;
    herd_model *m;
    assert_int_equal(herd_dataset_open("synthetic:1,28,28,10,64", HERD_SPLIT_TRAIN, &ds), HERD_OK);
    assert_int_equal(herd_model_create("lenet5", ds, &m), HERD_OK);
    herd_train_config cfg = short_run(2);
    herd_train_result res;
    assert_int_equal(herd_device_memory_reset_peak("cpu"), HERD_OK);
    assert_int_equal(herd_train(m, ds, NULL, &cfg, NULL, NULL, &res), HERD_OK);
    herd_memory_usage u = usage();
    uint64_t weights = herd_model_param_count(m) * sizeof(float);
    assert_int_equal(res.memory_peak_bytes, u.peak);
    assert_int_equal(res.memory_peak_max_bytes, u.peak);
    assert_int_equal(res.rank_memory_peak_bytes[0], u.peak);
    assert_int_equal(res.rank_memory_peak_bytes[1], 0);
    assert_true(u.peak_by_category[HERD_MEM_PARAMS] >= weights);
    assert_true(u.peak_by_category[HERD_MEM_GRADS] >= weights);
    assert_true(u.peak_by_category[HERD_MEM_OPTIMIZER] >= weights); /* SGD momentum */
    assert_true(u.peak_by_category[HERD_MEM_ACTIVATIONS] >= 2 * 16 * 6 * 28 * 28 * sizeof(float));
    assert_true(u.peak_by_category[HERD_MEM_WORKSPACE] > 0); /* convolution and pooling plans */
    herd_model_free(m);
    herd_dataset_free(ds);
}

/* Refusals through the API: a model whose parameters do not fit is not created and
 * gives back what it took; one whose optimizer state does not fit stops herd_train
 * before its first step, and herd_train gives back what it took. */
static void test_train_refused(void **state)
{
    (void)state;
    herd_dataset *ds;
    herd_model *m;
    assert_int_equal(herd_dataset_open("synthetic:1,12,12,4,64", HERD_SPLIT_TRAIN, &ds), HERD_OK);
    uint64_t base = usage().current;
    assert_int_equal(herd_device_set_memory_limit("cpu", base + (1 << 20)), HERD_OK);
    assert_int_equal(herd_model_create("mlp", ds, &m), HERD_ERR_NOMEM); /* 1.3 MiB of weights */
    if (!strstr(herd_last_error(), "of parameters"))
        fail_msg("the refusal says: %s", herd_last_error());
    assert_int_equal(usage().current, base);
    assert_int_equal(herd_device_set_memory_limit("cpu", 0), HERD_OK);
    assert_int_equal(herd_model_create("mlp", ds, &m), HERD_OK);
    uint64_t with_model = usage().current;
    assert_int_equal(herd_device_set_memory_limit("cpu", with_model + 64 * 1024), HERD_OK);
    herd_train_config cfg = short_run(0);
    herd_train_result res;
    assert_int_equal(herd_train(m, ds, NULL, &cfg, NULL, NULL, &res), HERD_ERR_NOMEM);
    const char *msg = herd_last_error();
    if (!strstr(msg, "optimizer state 'momentum'") || !strstr(msg, "memory limit reached"))
        fail_msg("the refusal says: %s", msg);
    assert_int_equal(res.steps, 0);
    assert_int_equal(usage().current, with_model);
    assert_int_equal(herd_device_set_memory_limit("cpu", 0), HERD_OK);
    herd_model_free(m);
    herd_dataset_free(ds);
    assert_int_equal(usage().current, base);
}

/* A failed test must not leave its cap on the next ones. */
static int lift_cap(void **state)
{
    (void)state;
    return herd_device_set_memory_limit("cpu", 0) == HERD_OK ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_counts_and_peak, lift_cap),
        cmocka_unit_test_teardown(test_limit, lift_cap),
        cmocka_unit_test_teardown(test_threads, lift_cap),
        cmocka_unit_test_teardown(test_threads_under_cap, lift_cap),
        cmocka_unit_test_teardown(test_huge_request, lift_cap),
        cmocka_unit_test_teardown(test_huge_page_blocks, lift_cap),
        cmocka_unit_test(test_huge_advise),
        cmocka_unit_test_teardown(test_shared_weights_capped, lift_cap),
        cmocka_unit_test_teardown(test_refusals_while_sizing, lift_cap),
        cmocka_unit_test_teardown(test_train_figures, lift_cap),
        cmocka_unit_test(test_gradient_buffers_shared),
        cmocka_unit_test_teardown(test_train_refused, lift_cap),
    };
    return tu_run(tests, NULL, NULL);
}
