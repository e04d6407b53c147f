/* Checkpoint directories: input = DIR/latest, FZ_SEP, the weights file, FZ_SEP, the
 * state file (both safetensors; written under the name latest gives when it is a
 * plain file name, else ckpt-1). Loaded into a tiny model (flatten + linear 4 -> 3)
 * with its SGD optimizer. An accepted checkpoint must have: latest holding exactly
 * "ckpt-<global_step>" (surrounding whitespace aside), the state's relations
 * (0 <= epoch <= global_step <= 2^53, positive batch, ranks and accumulation,
 * epoch_seen <= epoch_samples < train_samples, epoch_correct in 0..epoch_seen, a
 * finite loss sum >= 0), and the model's parameters equal to the weights file's
 * tensors, every value finite. Inputs of even size get their files' checksums made
 * valid (when they have the field), so mutations reach the parsers behind it; odd ones
 * keep theirs, and a file whose checksum does not match its bytes must be refused.
 * With HERD_FUZZ_SEED=FILE set, writes a valid input to FILE instead. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "train/checkpoint.h"

static const char *tiny = "{\"layers\": [{\"type\": \"flatten\"}, "
                          "{\"type\": \"linear\", \"name\": \"fc\", \"out\": \"classes\"}]}";

static herd_model *make_model(void)
{
    herd_layer_spec *specs = NULL;
    int n = 0;
    if (herd_model_parse_text(tiny, "tiny.json", 3, &specs, &n) != HERD_OK)
        abort();
    herd_model *m = calloc(1, sizeof *m);
    m->in_c = 1, m->in_h = 2, m->in_w = 2, m->classes = 3;
    if (herd_model_build(m, specs, n, 7) != HERD_OK)
        abort();
    free(specs);
    return m;
}

static herd_optimizer *make_opt(herd_model *m)
{
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    herd_optimizer *o = NULL;
    if (herd_optimizer_create(&cfg, m, &o) != HERD_OK)
        abort();
    return o;
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        abort();
    char *b = NULL;
    size_t cap = 0;
    *n = 0;
    for (;;) {
        if (*n == cap && !(b = realloc(b, cap = cap * 2 + 4096)))
            abort();
        size_t got = fread(b + *n, 1, cap - *n, f);
        if (!got)
            break;
        *n += got;
    }
    fclose(f);
    return b;
}

/* Saves a checkpoint of the tiny model at step 5 and writes it as one input. */
static void write_seed(const char *out)
{
    char dir[512], p[600];
    fz_path(dir, sizeof dir, "seed");
    mkdir(dir, 0700);
    herd_model *m = make_model();
    herd_optimizer *o = make_opt(m);
    for (size_t i = 0; i < m->n_param_floats; i++)
        m->grads[i] = 0.01f * (float)i;
    herd_optimizer_step(o, m, 0.1f);
    herd_train_state st = {.epoch = 1, .global_step = 5, .seed = 42, .batch_size = 2, .ranks = 1,
                           .grad_accum = 1, .train_samples = 8, .epoch_samples = 2, .epoch_seen = 2,
                           .epoch_loss_sum = 1.5, .epoch_correct = 1};
    if (herd_checkpoint_save(dir, m, o, &st, NULL, 2) != HERD_OK) {
        fprintf(stderr, "%s\n", herd_last_error());
        abort();
    }
    FILE *f = fopen(out, "wb");
    const char *names[3] = {"latest", "ckpt-5.safetensors", "ckpt-5.state.safetensors"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        size_t n;
        char *b = slurp(p, &n);
        if (i)
            fputs(FZ_SEP, f);
        fwrite(b, 1, n, f);
        free(b);
        unlink(p);
    }
    fclose(f);
    rmdir(dir);
    herd_optimizer_free(o);
    herd_model_free(m);
}

/* A safetensors file's checksum as herd would compute it; *slot -1 without one. */
static uint64_t file_sum(const uint8_t *b, size_t n, long *slot)
{
    *slot = -1;
    if (n < 8)
        return 0;
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)b[i] << (8 * i);
    size_t at;
    if (herd_st_checksum_slot(b + 8, hlen < n - 8 ? (size_t)hlen : n - 8, &at) != 0)
        return 0;
    *slot = (long)(at + 8);
    return herd_st_checksum(b, n, at + 8);
}

/* Whether the file's recorded checksum matches its bytes (true without one). */
static bool sum_matches(const uint8_t *b, size_t n)
{
    long slot;
    uint64_t sum = file_sum(b, n, &slot);
    char digits[HERD_ST_SUM_DIGITS + 1];
    snprintf(digits, sizeof digits, "%016llx", (unsigned long long)sum);
    return slot < 0 || memcmp(b + slot, digits, HERD_ST_SUM_DIGITS) == 0;
}

/* A copy of the file with its checksum made valid. */
static uint8_t *resummed(const uint8_t *b, size_t n)
{
    uint8_t *c = malloc(n ? n : 1);
    if (!c)
        abort();
    memcpy(c, b, n);
    long slot;
    uint64_t sum = file_sum(c, n, &slot);
    if (slot >= 0) {
        char digits[HERD_ST_SUM_DIGITS + 1];
        snprintf(digits, sizeof digits, "%016llx", (unsigned long long)sum);
        memcpy(c + slot, digits, HERD_ST_SUM_DIGITS);
    }
    return c;
}

static bool all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

static herd_model *model;
static herd_optimizer *opt;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *seed = getenv("HERD_FUZZ_SEED");
    if (seed && *seed) {
        write_seed(seed);
        exit(0);
    }
    model = make_model();
    opt = make_opt(model);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[3];
    size_t len[3];
    if (fz_split(data, size, part, len, 3) != 3)
        return 0;
    /* latest, trimmed: the name the files are written under when it is a plain one. */
    size_t b = 0, e = len[0];
    while (b < e && isspace(part[0][b]))
        b++;
    while (e > b && isspace(part[0][e - 1]))
        e--;
    char name[80] = "ckpt-1";
    bool plain = e - b > 0 && e - b < 64;
    for (size_t i = b; plain && i < e; i++)
        plain = isalnum(part[0][i]) || part[0][i] == '-' || part[0][i] == '_';
    if (plain) {
        memcpy(name, part[0] + b, e - b);
        name[e - b] = '\0';
    }
    char dir[512], lpath[600], wpath[700], spath[700];
    fz_path(dir, sizeof dir, "ckpt");
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        abort();
    snprintf(lpath, sizeof lpath, "%s/latest", dir);
    snprintf(wpath, sizeof wpath, "%s/%s.safetensors", dir, name);
    snprintf(spath, sizeof spath, "%s/%s.state.safetensors", dir, name);
    bool fix = (size & 1) == 0;
    uint8_t *wdata = fix ? resummed(part[1], len[1]) : NULL;
    uint8_t *sdata = fix ? resummed(part[2], len[2]) : NULL;
    const uint8_t *wbytes = fix ? wdata : part[1], *sbytes = fix ? sdata : part[2];
    bool sums_ok = sum_matches(wbytes, len[1]) && sum_matches(sbytes, len[2]);
    fz_write(lpath, part[0], len[0]);
    fz_write(wpath, wbytes, len[1]);
    fz_write(spath, sbytes, len[2]);
    free(wdata);
    free(sdata);
    herd_train_state st;
    bool found = false;
    herd_status rc = herd_checkpoint_load_latest(dir, model, opt, &st, &found);
    if (rc == HERD_OK) {
        FZ_CHECK(found, "a latest file, yet nothing found");
        FZ_CHECK(sums_ok, "a file whose checksum does not match its bytes was loaded");
        FZ_CHECK(all_finite(model->params, model->n_param_floats) &&
                 all_finite(model->buffers, model->n_buffer_floats), "a non-finite weight was loaded");
        for (int i = 0; i < herd_optimizer_state_count(opt); i++) {
            size_t n;
            const float *x = herd_optimizer_state(opt, i, NULL, &n);
            FZ_CHECK(all_finite(x, n), "a non-finite optimizer state value was loaded");
        }
        char want[64];
        snprintf(want, sizeof want, "ckpt-%ld", st.global_step);
        FZ_CHECK(e - b == strlen(want) && memcmp(part[0] + b, want, e - b) == 0,
                 "latest holds '%.*s' (%zu bytes) for step %ld", (int)(e - b > 60 ? 60 : e - b),
                 (const char *)part[0] + b, e - b, st.global_step);
        FZ_CHECK(st.global_step >= 0 && st.global_step <= HERD_CKPT_MAX_STEP, "global_step %ld", st.global_step);
        FZ_CHECK(st.epoch >= 0 && st.epoch <= st.global_step, "epoch %d", st.epoch);
        FZ_CHECK(st.batch_size >= 1, "batch_size %d", st.batch_size);
        if (!st.legacy) {
            FZ_CHECK(st.ranks >= 1 && st.grad_accum >= 1, "ranks %d grad_accum %d", st.ranks, st.grad_accum);
            FZ_CHECK(st.train_samples >= 1 && st.epoch_samples >= 0 && st.epoch_samples < st.train_samples,
                     "epoch_samples %ld of %ld", st.epoch_samples, st.train_samples);
            FZ_CHECK(st.epoch_seen >= 0 && st.epoch_seen <= st.epoch_samples, "epoch_seen %ld", st.epoch_seen);
            FZ_CHECK(st.epoch_correct >= 0 && st.epoch_correct <= (double)st.epoch_seen,
                     "epoch_correct %g", st.epoch_correct);
            FZ_CHECK(isfinite(st.epoch_loss_sum) && st.epoch_loss_sum >= 0, "loss %g", st.epoch_loss_sum);
        }
        herd_st_file *wf = NULL;
        FZ_CHECK(herd_safetensors_read(wpath, &wf) == HERD_OK, "the weights file does not read alone");
        for (int v = 0; v < model->n_views; v++) {
            const herd_tensor_view *t = &model->views[v];
            int ndim;
            int64_t shape[4];
            const float *src = herd_st_find(wf, t->name, &ndim, shape);
            FZ_CHECK(src != NULL, "tensor '%s' loaded from nowhere", t->name);
            const float *dst = (t->is_buffer ? model->buffers : model->params) + t->offset;
            FZ_CHECK(memcmp(src, dst, t->numel * sizeof(float)) == 0, "tensor '%s' differs from the file",
                     t->name);
        }
        FZ_CHECK(herd_st_count(wf) == (size_t)model->n_views, "%zu tensors in the file, %d in the model",
                 herd_st_count(wf), model->n_views);
        herd_st_free(wf);
    }
    unlink(lpath);
    unlink(wpath);
    unlink(spath);
    return 0;
}
