#include "testutil.h"

#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "herd_config.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "nn/model.h"

char *tu_tempdir(void)
{
    char tmpl[] = "/tmp/herd-test-XXXXXX";
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

void tu_rmtree(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

char *tu_write_file(const char *dir, const char *name, const void *data, size_t len)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = malloc(n);
    snprintf(path, n, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
    return path;
}

char *tu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    char *text = malloc((size_t)n + 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    text[n] = '\0';
    if (len)
        *len = (size_t)n;
    return text;
}

double tu_max_rel_err(const float *a, const float *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / fmax(1.0, fabs((double)b[i]));
        if (d > worst || isnan(d))
            worst = isnan(d) ? INFINITY : d;
    }
    return worst;
}

void tu_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed)
{
    herd_rng r;
    herd_rng_seed(&r, seed, 0, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * herd_rng_uniform(&r);
}

float *tu_randv(size_t n, uint64_t seed)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    tu_fill_uniform(x, n, -1.0f, 1.0f, seed);
    return x;
}

void tu_expect_error(herd_status got, herd_status st, const char *needle1, const char *needle2)
{
    if (got != st)
        fail_msg("expected %s, got %s: %s", herd_status_name(st), herd_status_name(got),
                 herd_last_error());
    if (!strstr(herd_last_error(), needle1) || (needle2 && !strstr(herd_last_error(), needle2)))
        fail_msg("message '%s' lacks '%s' / '%s'", herd_last_error(), needle1,
                 needle2 ? needle2 : "");
}

int tu_sanitized(void)
{
    const char *s = getenv("HERD_SANITIZED");
    return s && *s == '1';
}

static struct {
    int count;
    bool essential;
    char names[1024];
} g_skips;

void tu_note_skip(const char *test, bool essential, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    printf("skipped: %s: %s\n", test, why);
    g_skips.count++;
    g_skips.essential |= essential;
    size_t used = strlen(g_skips.names);
    snprintf(g_skips.names + used, sizeof g_skips.names - used, "%s%s", used ? ", " : "", test);
}

int tu_exit_status(int failed, size_t n_tests)
{
    if (failed)
        return 1;
    if (g_skips.count == 0)
        return 0;
    bool all = (size_t)g_skips.count >= n_tests;
    printf("%s: %d of %zu test(s) skipped (%s)%s\n", all || g_skips.essential ? "SKIPPED" : "partly skipped",
           g_skips.count, n_tests, g_skips.names,
           all || g_skips.essential ? "" : "; the others passed");
    return all || g_skips.essential ? TU_SKIP_CODE : 0;
}

#if HERD_HAVE_CUDA
/* Whether the NVIDIA kernel driver lists a GPU the CUDA runtime should see: when
 * CUDA_VISIBLE_DEVICES is set, the user chose what is visible and the runtime's word
 * stands. */
static bool driver_lists_gpu(void)
{
    if (getenv("CUDA_VISIBLE_DEVICES"))
        return false;
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (!d)
        return false;
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(d));)
        found = e->d_name[0] != '.';
    closedir(d);
    return found;
}
#endif

const herd_backend *tu_cuda_or_exit(void)
{
    const herd_backend *gpu = herd_backend_cuda();
    if (gpu)
        return gpu;
#if HERD_HAVE_CUDA
    bool present = herd_backend_cuda_visible() || driver_lists_gpu();
#else
    bool present = false; /* nothing to test: the build has no GPU code */
#endif
    if (!present) {
        printf("SKIPPED: no GPU to test on (%s)\n", herd_last_error());
        exit(TU_SKIP_CODE);
    }
    printf("FAILED: a GPU is present but the CUDA backend did not initialise: %s\n",
           herd_last_error());
    exit(1);
}

const float *tu_fixture_tensor(const herd_st_file *f, const char *name, size_t numel)
{
    int ndim;
    int64_t shape[4];
    const float *p = herd_st_find(f, name, &ndim, shape);
    if (!p)
        fail_msg("fixture has no tensor '%s'", name);
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)shape[i];
    if (n != numel)
        fail_msg("fixture tensor '%s' has %zu values, expected %zu", name, n, numel);
    return p;
}

float *tu_model_host_copy(const herd_model *m, bool buffers)
{
    size_t bytes = (buffers ? m->n_buffer_floats : m->n_param_floats) * sizeof(float);
    float *h = malloc(bytes ? bytes : 1);
    assert_non_null(h);
    herd_status st = m->be->memcpy_d2h(h, buffers ? m->buffers : m->params, bytes);
    if (st != HERD_OK)
        fail_msg("downloading the %s of '%s' from %s: %s", buffers ? "buffers" : "parameters",
                 m->name, m->be->name, herd_last_error());
    return h;
}

void tu_fixture_load_init(herd_model *m, const herd_st_file *f)
{
    char key[160];
    for (int v = 0; v < m->n_views; v++) {
        const herd_tensor_view *tv = &m->views[v];
        snprintf(key, sizeof key, "init.%s", tv->name);
        float *dst = (tv->is_buffer ? m->buffers : m->params) + tv->offset;
        memcpy(dst, tu_fixture_tensor(f, key, tv->numel), tv->numel * sizeof(float));
    }
}
