/* GPU-only checks of the GPU training options: --precision (tf32 really in use: its
 * GEMM error is TF32's, not fp32's, and within TF32 tolerances of the CPU; fp32 exact
 * again afterwards; bf16 within bf16's), the --gpu-memory-limit cap in the caching
 * allocator, and dynamic loss scaling skipping an overflowing step on the GPU. Without
 * a GPU (or CUDA in the build), or on a GPU without TF32, the program exits 77 (skipped)
 * saying why; a GPU that fails to initialise fails it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "backend/backend.h"
#include "data/dataset.h"
#include "nn/model.h"

static const herd_backend *cpu, *gpu;

static float *up(const float *h, size_t n)
{
    float *d = gpu->alloc(n * sizeof *d);
    assert_non_null(d);
    assert_herd_ok(gpu->memcpy_h2d(d, h, n * sizeof *d));
    return d;
}

static double err_vs(const float *dev, const float *ref, size_t n)
{
    float *h = malloc(n * sizeof *h);
    assert_herd_ok(gpu->memcpy_d2h(h, dev, n * sizeof *h));
    double e = tu_max_rel_err(h, ref, n);
    free(h);
    return e;
}

static double gemm_err(void)
{
    const int m = 192, n = 160, k = 1024;
    float *a = tu_randv((size_t)m * k, 1), *b = tu_randv((size_t)k * n, 2), *c = calloc((size_t)m * n, 4);
    float *da = up(a, (size_t)m * k), *db = up(b, (size_t)k * n), *dc = up(c, (size_t)m * n);
    assert_herd_ok(cpu->gemm(false, false, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n));
    assert_herd_ok(gpu->gemm(false, false, m, n, k, 1.0f, da, k, db, n, 0.0f, dc, n));
    double e = err_vs(dc, c, (size_t)m * n);
    gpu->free(da), gpu->free(db), gpu->free(dc);
    free(a), free(b), free(c);
    return e;
}

/* Forward and backward-data of one convolution: the plan re-picks its algorithms
 * when the precision changes between calls. */
static double conv_err(herd_conv_plan *pg, herd_conv_plan *pc, const herd_conv_desc *d)
{
    size_t nx = (size_t)d->n * d->c_in * d->h_in * d->w_in, nw = (size_t)d->c_out * d->c_in * 9;
    size_t ny = (size_t)d->n * d->c_out * d->h_out * d->w_out;
    float *x = tu_randv(nx, 3), *w = tu_randv(nw, 4), *y = calloc(ny, 4);
    float *gx = up(x, nx), *gw = up(w, nw), *gy = up(y, ny);
    assert_herd_ok(cpu->conv2d_fwd(pc, x, w, NULL, y));
    assert_herd_ok(gpu->conv2d_fwd(pg, gx, gw, NULL, gy));
    double e = err_vs(gy, y, ny);
    gpu->free(gx), gpu->free(gw), gpu->free(gy);
    free(x), free(w), free(y);
    return e;
}

/* Why TF32 cannot be checked on this GPU, or NULL when it can. */
static const char *tf32_unavailable(char *why, size_t cap)
{
    const char *override = getenv("NVIDIA_TF32_OVERRIDE");
    if (override && strcmp(override, "0") == 0)
        return "NVIDIA_TF32_OVERRIDE=0 turns TF32 off in cuBLAS and cuDNN";
    herd_device_info info;
    assert_herd_ok(gpu->device_info(&info));
    if (info.cc_major < 8) {
        snprintf(why, cap, "TF32 needs compute capability 8.0 or newer; %s is sm_%d%d", info.name,
                 info.cc_major, info.cc_minor);
        return why;
    }
    return NULL;
}

static void test_precision(void **state)
{
    (void)state;
    herd_conv_desc d = {.n = 8, .c_in = 64, .h_in = 16, .w_in = 16, .c_out = 64, .kh = 3,
                        .kw = 3, .stride = 1, .pad = 1};
    assert_herd_ok(herd_conv_desc_finish(&d));
    herd_conv_plan *pc, *pg;
    assert_herd_ok(cpu->conv2d_plan(&d, &pc));
    assert_herd_ok(gpu->set_precision(HERD_PRECISION_FP32));
    assert_herd_ok(gpu->conv2d_plan(&d, &pg));
    double g32 = gemm_err(), c32 = conv_err(pg, pc, &d);
    assert_true(g32 < 1e-4 && c32 < 1e-4);
    char buf[256];
    const char *no_tf32 = tf32_unavailable(buf, sizeof buf);
    if (no_tf32) {
        gpu->conv2d_plan_free(pg);
        cpu->conv2d_plan_free(pc);
        tu_skip_essential("%s", no_tf32);
    }
    assert_herd_ok(gpu->set_precision(HERD_PRECISION_TF32));
    double gtf = gemm_err(), ctf = conv_err(pg, pc, &d);
    assert_herd_ok(gpu->set_precision(HERD_PRECISION_FP32));
    double g32b = gemm_err(), c32b = conv_err(pg, pc, &d);
    printf("gemm vs CPU: fp32 %.3g, tf32 %.3g, fp32 again %.3g\n", g32, gtf, g32b);
    printf("conv vs CPU: fp32 %.3g, tf32 %.3g, fp32 again %.3g\n", c32, ctf, c32b);
    /* TF32 keeps 10 mantissa bits: relative errors around 1e-3 on these 1024-term
     * sums, against under 1e-5 in fp32. A GEMM error at fp32's level means TF32 was
     * not used. (cuDNN may pick a convolution algorithm without tensor cores, so the
     * convolution's error is bounded, not required to grow.) */
    assert_true(g32b < 1e-4 && c32b < 1e-4);
    if (!(gtf > 1e-4))
        fail_msg("--precision tf32: the GEMM error %.3g is fp32's, TF32 is not in use", gtf);
    assert_true(gtf < 2e-2 && ctf < 2e-2);
    /* bf16 (8 mantissa bits) on the same plan: it re-lays its descriptors out as 16-bit
     * NHWC and back (test_cuda_act16 checks each 16-bit op closely). */
    assert_herd_ok(gpu->set_precision(HERD_PRECISION_BF16));
    double gbf = gemm_err(), cbf = conv_err(pg, pc, &d);
    assert_herd_ok(gpu->set_precision(HERD_PRECISION_FP32));
    double g32c = gemm_err(), c32c = conv_err(pg, pc, &d);
    printf("bf16: gemm %.3g, conv %.3g; fp32 after it: gemm %.3g, conv %.3g\n", gbf, cbf, g32c,
           c32c);
    if (!(gbf > 1e-3))
        fail_msg("--precision bf16: the GEMM error %.3g is not bf16's", gbf);
    /* The bound is bf16's, not a bug's: an output near zero keeps the absolute error of
     * its terms' rounding to 8 bits (on an H200: conv 0.0675 over 576 terms, gemm 0.0678
     * since its operands round to nearest even, tf32's 0.01 times 8 for 3 fewer bits);
     * test_cuda_act16 checks the 16-bit ops against a CPU that rounds the same operands. */
    assert_true(gbf < 0.1 && cbf > 1e-3 && cbf < 0.1 && g32c < 1e-4 && c32c < 1e-4);
    gpu->conv2d_plan_free(pg);
    cpu->conv2d_plan_free(pc);
}

static void test_memory_limit(void **state)
{
    (void)state;
    const size_t mib = 1 << 20;
    assert_herd_ok(herd_device_set_memory_limit("cuda", 64 * mib));
    void *a = gpu->alloc(32 * mib);
    assert_non_null(a);
    void *b = gpu->alloc(40 * mib); /* 72 MiB in use would pass the cap */
    assert_null(b);
    const char *msg = herd_last_error();
    printf("refused: %s\n", msg);
    assert_non_null(strstr(msg, "--gpu-memory-limit 64.0 MiB"));
    assert_non_null(strstr(msg, "40.0 MiB"));
    assert_non_null(strstr(msg, "MiB free"));
    /* Below what is in use: refused. */
    assert_int_equal(herd_device_set_memory_limit("cuda", 16 * mib), HERD_ERR_INVALID_ARG);
    gpu->free(a);
    /* The freed block is cached; a different size class fits once the cache goes back. */
    void *c = gpu->alloc(60 * mib);
    assert_non_null(c);
    gpu->free(c);
    assert_herd_ok(herd_device_set_memory_limit("cuda", 0));
    /* The CPU has its own cap (test_memory), set and lifted independently. */
    assert_herd_ok(herd_device_set_memory_limit("cpu", 64 * mib));
    assert_herd_ok(herd_device_set_memory_limit("cpu", 0));
}

typedef struct trace {
    double scale;
    long skipped;
} trace;

static bool record(const herd_progress *p, void *user)
{
    if (!p->epoch_end)
        *(trace *)user = (trace){p->loss_scale, p->skipped_steps};
    return true;
}

/* The CPU test's overflow on the GPU: huge scale and crafted inputs overflow the
 * first layer's weight gradient; the step is skipped and nothing changes. */
static void test_loss_scale_overflow(void **state)
{
    (void)state;
    herd_dataset *ds;
    assert_herd_ok(herd_dataset_open("synthetic:1,28,28,10,64", HERD_SPLIT_TRAIN, &ds));
    ds->std[0] = 1e-6f;
    herd_model *m;
    assert_herd_ok(herd_model_create_device("lenet5", ds, "cuda", &m));
    size_t bytes = m->n_param_floats * sizeof(float);
    float *before = malloc(bytes), *after = malloc(bytes);
    assert_herd_ok(m->be->memcpy_d2h(before, m->params, bytes));
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    cfg.epochs = 1;
    cfg.batch_size = 16;
    cfg.max_steps = 1;
    cfg.dynamic_loss_scale = true;
    cfg.loss_scale_init = 0x1p127f;
    trace t = {0};
    herd_train_result res;
    assert_herd_ok(herd_train(m, ds, NULL, &cfg, record, &t, &res));
    assert_int_equal(res.skipped_steps, 1);
    assert_true(t.scale == 0x1p126);
    assert_herd_ok(m->be->memcpy_d2h(after, m->params, bytes));
    assert_memory_equal(before, after, bytes);
    free(before);
    free(after);
    herd_model_free(m);
    herd_dataset_free(ds);
}

int main(void)
{
    cpu = herd_backend_cpu();
    cpu->set_threads(1);
    gpu = tu_cuda_or_exit();
    const struct CMUnitTest tests[] = {
        /* First: its cap is checked against what herd holds, which the other cases'
         * scratch buffers (kept for the process) would raise. */
        cmocka_unit_test(test_memory_limit),
        cmocka_unit_test(test_precision),
        cmocka_unit_test(test_loss_scale_overflow),
    };
    int status = tu_run(tests, NULL, NULL);
    herd_backend_cuda_shutdown();
    return status;
}
