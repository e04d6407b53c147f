/* safetensors round trips and corruption handling, model weights, and
 * checkpoints (round trip, `latest`, pruning, corrupt files, and on the simulated
 * device: one format with the CPU's, the background writer, a mismatched load). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

#include "backend/backend.h"
#include "core/safetensors.h"
#include "nn/model.h"
#include "optim/optim.h"
#include "train/checkpoint.h"
#include "train/ckpt_writer.h"

/* ------------------------------------------------------------ tiny model */

typedef struct tmodel {
    herd_model m;
    herd_tensor_view views[5];
} tmodel;

static void add_view(tmodel *t, const char *name, int ndim, const int64_t *shape, int is_buffer,
                     int no_decay)
{
    herd_tensor_view *v = &t->views[t->m.n_views++];
    snprintf(v->name, sizeof v->name, "%s", name);
    v->ndim = ndim;
    v->numel = 1;
    for (int i = 0; i < ndim; i++)
        v->numel *= (size_t)(v->shape[i] = shape[i]);
    v->is_buffer = is_buffer;
    v->no_decay = no_decay;
    size_t *n = is_buffer ? &t->m.n_buffer_floats : &t->m.n_param_floats;
    v->offset = *n;
    *n += v->numel;
}

static tmodel *tmodel_new(uint64_t seed)
{
    tmodel *t = calloc(1, sizeof *t);
    t->m.views = t->views;
    t->m.cap_views = 5;
    snprintf(t->m.name, sizeof t->m.name, "tiny");
    t->m.be = herd_backend_cpu();
    add_view(t, "conv1.weight", 4, (int64_t[]){2, 1, 3, 3}, 0, 0);
    add_view(t, "bn1.weight", 1, (int64_t[]){2}, 0, 1);
    add_view(t, "bn1.running_mean", 1, (int64_t[]){2}, 1, 0);
    add_view(t, "bn1.running_var", 1, (int64_t[]){2}, 1, 0);
    add_view(t, "fc.weight", 2, (int64_t[]){3, 8}, 0, 0);
    t->m.params = calloc(t->m.n_param_floats, sizeof(float));
    t->m.grads = calloc(t->m.n_param_floats, sizeof(float));
    t->m.buffers = calloc(t->m.n_buffer_floats, sizeof(float));
    tu_fill_uniform(t->m.params, t->m.n_param_floats, -1, 1, seed);
    tu_fill_uniform(t->m.buffers, t->m.n_buffer_floats, 0, 1, seed + 1);
    return t;
}

static void tmodel_free(tmodel *t)
{
    free(t->m.params);
    free(t->m.grads);
    free(t->m.buffers);
    free(t);
}

static char *join(const char *dir, const char *name)
{
    char *p;
    assert_true(asprintf(&p, "%s/%s", dir, name) > 0);
    return p;
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len + 1);
    assert_int_equal(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

static int exists(const char *dir, const char *name)
{
    char *p = join(dir, name);
    int r = access(p, F_OK) == 0;
    free(p);
    return r;
}

/* Expects a format error whose message names the file. */
static void expect_format_error(herd_status st, const char *path)
{
    if (st != HERD_ERR_FORMAT)
        fail_msg("expected a format error for %s, got %s: %s", path, herd_status_name(st), herd_last_error());
    if (!strstr(herd_last_error(), path))
        fail_msg("error does not name %s: %s", path, herd_last_error());
}

/* ------------------------------------------------------------ safetensors */

static void test_st_round_trip(void **s)
{
    (void)s;
    char *dir = tu_tempdir();
    char *path = join(dir, "t.safetensors");
    float a[6] = {1, -2, 3.5f, 4, 5, 6}, b[1] = {42}, c[4] = {0.25f, -0.5f, 1e-30f, 1e30f};
    herd_st_entry e[] = {
        {.name = "a", .ndim = 2, .shape = {2, 3}, .data = a},
        {.name = "scalar", .ndim = 0, .data = b},
        {.name = "empty", .ndim = 1, .shape = {0}, .data = NULL},
        {.name = "layer.c", .ndim = 4, .shape = {1, 2, 2, 1}, .data = c},
    };
    const char *keys[] = {"epoch", "note"};
    const char *vals[] = {"3", "with \"quotes\" and \xc3\xa9"};
    assert_herd_ok(herd_safetensors_write(path, e, 4, keys, vals, 2));

    size_t len;
    unsigned char *raw = slurp(path, &len);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)raw[i] << (8 * i);
    assert_int_equal(hlen % 8, 0);
    assert_int_equal(len, 8 + hlen + sizeof a + sizeof b + sizeof c);
    assert_int_equal(raw[8], '{');
    free(raw);

    herd_st_file *f;
    assert_herd_ok(herd_safetensors_read(path, &f));
    assert_int_equal(herd_st_count(f), 4);
    assert_string_equal(herd_st_name(f, 0), "a");
    assert_null(herd_st_name(f, 4));
    int ndim;
    int64_t shape[4];
    const float *d = herd_st_find(f, "a", &ndim, shape);
    assert_non_null(d);
    assert_int_equal(ndim, 2);
    assert_int_equal(shape[0], 2);
    assert_int_equal(shape[1], 3);
    assert_memory_equal(d, a, sizeof a);
    d = herd_st_find(f, "scalar", &ndim, shape);
    assert_int_equal(ndim, 0);
    assert_true(d[0] == 42);
    assert_non_null(herd_st_find(f, "empty", &ndim, shape));
    assert_int_equal(shape[0], 0);
    d = herd_st_find(f, "layer.c", &ndim, shape);
    assert_int_equal(ndim, 4);
    assert_memory_equal(d, c, sizeof c);
    assert_null(herd_st_find(f, "nope", NULL, NULL));
    assert_string_equal(herd_st_meta(f, "epoch"), "3");
    assert_string_equal(herd_st_meta(f, "note"), vals[1]);
    assert_null(herd_st_meta(f, "missing"));
    herd_st_free(f);

    /* Duplicate and reserved names are refused before anything is written. */
    herd_st_entry dup[] = {e[0], e[0]};
    assert_int_equal(herd_safetensors_write(path, dup, 2, NULL, NULL, 0), HERD_ERR_INVALID_ARG);
    herd_st_entry reserved = {.name = "__metadata__", .ndim = 1, .shape = {1}, .data = b};
    assert_int_equal(herd_safetensors_write(path, &reserved, 1, NULL, NULL, 0), HERD_ERR_INVALID_ARG);
    /* No temporaries left behind. */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "test $(ls -A %s | wc -l) -eq 1", dir);
    assert_int_equal(system(cmd), 0);

    /* A missing file is an I/O error, not a format error. */
    char *missing = join(dir, "missing.safetensors");
    assert_int_equal(herd_safetensors_read(missing, &f), HERD_ERR_IO);
    assert_non_null(strstr(herd_last_error(), missing));
    free(missing);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

static void test_st_truncated(void **s)
{
    (void)s;
    char *dir = tu_tempdir();
    char *path = join(dir, "good.safetensors");
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    herd_st_entry e[] = {{.name = "w", .ndim = 1, .shape = {8}, .data = a},
                         {.name = "v", .ndim = 2, .shape = {2, 2}, .data = a}};
    assert_herd_ok(herd_safetensors_write(path, e, 2, NULL, NULL, 0));
    size_t len;
    unsigned char *raw = slurp(path, &len);
    size_t hlen = raw[0] | (size_t)raw[1] << 8;
    size_t cuts[] = {0, 1, 7, 8, 9, 8 + hlen / 2, 8 + hlen - 1, 8 + hlen, 8 + hlen + 4, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        char name[32];
        snprintf(name, sizeof name, "cut%zu.safetensors", cuts[i]);
        char *p = tu_write_file(dir, name, raw, cuts[i]);
        herd_st_file *f = (herd_st_file *)1;
        expect_format_error(herd_safetensors_read(p, &f), p);
        assert_null(f);
        free(p);
    }
    free(raw);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

/* Writes an 8-byte length, the header text as given, then `data_len` bytes. */
static char *craft(const char *dir, const char *name, const char *header, size_t data_len)
{
    size_t hl = strlen(header);
    unsigned char *b = calloc(1, 8 + hl + data_len);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    char *p = tu_write_file(dir, name, b, 8 + hl + data_len);
    free(b);
    return p;
}

static void test_st_corrupt_headers(void **s)
{
    (void)s;
    char *dir = tu_tempdir();
    static const struct {
        const char *header;
        size_t data;
        const char *why;
    } cases[] = {
        {"{not json", 16, "bad JSON"},
        {"", 16, "empty header"},
        {"[1, 2]", 16, "not an object"},
        {"{\"w\": 5}", 16, "tensor not an object"},
        {"{\"w\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}}", 16, "dtype F16"},
        {"{\"w\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16, "dtype I64"},
        {"{\"w\":{\"dtype\":5,\"shape\":[4],\"data_offsets\":[0,16]}}", 16, "dtype not a string"},
        {"{\"w\":{\"shape\":[4],\"data_offsets\":[0,16]}}", 16, "no dtype"},
        {"{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,16]}}", 16, "no shape"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4]}}", 16, "no offsets"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0]}}", 16, "one offset"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,400]}}", 16, "end past data"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,0]}}", 16, "reversed"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[-16,0]}}", 16, "negative offset"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,1e300]}}", 16, "huge offset"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", 16, "size mismatch"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", 16, "negative dim"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 16, "fractional dim"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,4],\"data_offsets\":[0,16]}}", 16, "5-d"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,16]}}", 16,
         "shape overflow"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", 24, "overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}", 32, "duplicate"},
        {"{\"__metadata__\":{\"epoch\":3}}", 0, "metadata not a string"},
        {"{\"__metadata__\":[\"x\"]}", 0, "metadata not an object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char name[32];
        snprintf(name, sizeof name, "case%zu.safetensors", i);
        char *p = craft(dir, name, cases[i].header, cases[i].data);
        herd_st_file *f = NULL;
        herd_status st = herd_safetensors_read(p, &f);
        if (st != HERD_ERR_FORMAT)
            fail_msg("case '%s': expected a format error, got %s", cases[i].why, herd_status_name(st));
        if (!strstr(herd_last_error(), p))
            fail_msg("case '%s': error does not name the file: %s", cases[i].why, herd_last_error());
        free(p);
    }
    /* A header length bigger than the file. */
    unsigned char huge[16];
    memset(huge, 0xff, sizeof huge);
    char *p = tu_write_file(dir, "huge.safetensors", huge, sizeof huge);
    herd_st_file *f = NULL;
    expect_format_error(herd_safetensors_read(p, &f), p);
    free(p);
    /* A header from another writer: unpadded, keys in any order. */
    p = craft(dir, "other.safetensors",
              "{\"__metadata__\":{},\"w\":{\"data_offsets\":[0,8],\"shape\":[2],\"dtype\":\"F32\"}}", 8);
    assert_herd_ok(herd_safetensors_read(p, &f));
    assert_non_null(herd_st_find(f, "w", NULL, NULL));
    herd_st_free(f);
    free(p);
    tu_rmtree(dir);
    free(dir);
}

/* ------------------------------------------------------------ model weights */

static void test_model_save_load(void **s)
{
    (void)s;
    char *dir = tu_tempdir();
    char *path = join(dir, "w.safetensors");
    tmodel *a = tmodel_new(1), *b = tmodel_new(2);
    assert_herd_ok(herd_model_save(&a->m, path));
    assert_herd_ok(herd_model_load(&b->m, path));
    assert_memory_equal(a->m.params, b->m.params, a->m.n_param_floats * sizeof(float));
    assert_memory_equal(a->m.buffers, b->m.buffers, a->m.n_buffer_floats * sizeof(float));

    /* The file lists every view, buffers included, by name. */
    herd_st_file *f;
    assert_herd_ok(herd_safetensors_read(path, &f));
    assert_int_equal(herd_st_count(f), 5);
    assert_non_null(herd_st_find(f, "bn1.running_var", NULL, NULL));
    assert_string_equal(herd_st_meta(f, "herd_version"), HERD_VERSION);
    herd_st_free(f);

    /* A model the file does not fit: the error names the tensor; nothing changes. */
    tmodel *c = tmodel_new(3);
    float before[64];
    memcpy(before, c->m.params, c->m.n_param_floats * sizeof(float));
    snprintf(c->views[4].name, sizeof c->views[4].name, "head.weight");
    expect_format_error(herd_model_load(&c->m, path), path);
    assert_non_null(strstr(herd_last_error(), "head.weight"));
    assert_memory_equal(before, c->m.params, c->m.n_param_floats * sizeof(float));
    snprintf(c->views[4].name, sizeof c->views[4].name, "fc.weight");
    c->views[4].shape[0] = 8;
    c->views[4].shape[1] = 3;
    expect_format_error(herd_model_load(&c->m, path), path);
    assert_non_null(strstr(herd_last_error(), "fc.weight"));
    assert_non_null(strstr(herd_last_error(), "[3, 8]"));
    /* Fewer views than the file: the extra tensor is named. */
    c->views[4].shape[0] = 3;
    c->views[4].shape[1] = 8;
    c->m.n_views = 4;
    expect_format_error(herd_model_load(&c->m, path), path);
    assert_non_null(strstr(herd_last_error(), "fc.weight"));

    tmodel_free(a);
    tmodel_free(b);
    tmodel_free(c);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

/* ------------------------------------------------------------ checkpoints */

static herd_optimizer *make_opt(tmodel *t, herd_optimizer_kind kind)
{
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    cfg.optimizer = kind;
    cfg.nesterov = true;
    herd_optimizer *o;
    assert_herd_ok(herd_optimizer_create(&cfg, &t->m, &o));
    return o;
}

static void train_steps(tmodel *t, herd_optimizer *o, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++) {
        tu_fill_uniform(t->m.grads, t->m.n_param_floats, -1, 1, seed + (uint64_t)i);
        assert_herd_ok(herd_optimizer_step(o, &t->m, 0.01f));
    }
}

static void check_round_trip(herd_optimizer_kind kind)
{
    char *dir = tu_tempdir();
    char *ck = join(dir, "nested/ckpts"); /* created on save */
    tmodel *a = tmodel_new(1);
    herd_optimizer *oa = make_opt(a, kind);
    train_steps(a, oa, 3, 10);
    herd_train_state st = {.epoch = 1, .global_step = 3, .seed = 0xfedcba9876543210ull, .batch_size = 32,
                           .ranks = 2, .grad_accum = 3, .train_samples = 1000, .epoch_samples = 192, .epoch_seen = 192,
                           .epoch_loss_sum = 0.1 + 0.2, .epoch_correct = 17};
    assert_herd_ok(herd_checkpoint_save(ck, &a->m, oa, &st, NULL, 2));

    tmodel *b = tmodel_new(2);
    herd_optimizer *ob = make_opt(b, kind);
    herd_train_state got = {0};
    bool found = false;
    assert_herd_ok(herd_checkpoint_load_latest(ck, &b->m, ob, &got, &found));
    assert_true(found);
    assert_int_equal(got.epoch, 1);
    assert_int_equal(got.global_step, 3);
    assert_true(got.seed == st.seed);
    assert_int_equal(got.batch_size, 32);
    assert_int_equal(got.ranks, 2);
    assert_int_equal(got.grad_accum, 3);
    assert_int_equal(got.train_samples, 1000);
    assert_int_equal(got.epoch_samples, 192);
    assert_int_equal(got.epoch_seen, 192);
    assert_true(got.epoch_loss_sum == 0.1 + 0.2); /* bit for bit: the resumed epoch's sums go on */
    assert_true(got.epoch_correct == 17);
    assert_false(got.legacy);
    assert_int_equal(herd_optimizer_steps(ob), 3);
    assert_memory_equal(a->m.params, b->m.params, a->m.n_param_floats * sizeof(float));
    assert_memory_equal(a->m.buffers, b->m.buffers, a->m.n_buffer_floats * sizeof(float));
    for (int i = 0; i < herd_optimizer_state_count(oa); i++) {
        size_t na, nb;
        float *sa = herd_optimizer_state(oa, i, NULL, &na);
        float *sb = herd_optimizer_state(ob, i, NULL, &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(sa, sb, na * sizeof(float));
    }
    /* Resumed training continues bit for bit. */
    train_steps(a, oa, 2, 99);
    train_steps(b, ob, 2, 99);
    assert_memory_equal(a->m.params, b->m.params, a->m.n_param_floats * sizeof(float));

    /* The other optimizer cannot resume from it. */
    herd_optimizer *oc = make_opt(b, kind == HERD_OPT_SGD ? HERD_OPT_ADAMW : HERD_OPT_SGD);
    char *spath = join(ck, "ckpt-3.state.safetensors");
    expect_format_error(herd_checkpoint_load_latest(ck, &b->m, oc, &got, &found), spath);
    free(spath);
    herd_optimizer_free(oc);

    herd_optimizer_free(oa);
    herd_optimizer_free(ob);
    tmodel_free(a);
    tmodel_free(b);
    free(ck);
    tu_rmtree(dir);
    free(dir);
}

static void test_checkpoint_round_trip_sgd(void **s)
{
    (void)s;
    check_round_trip(HERD_OPT_SGD);
}
static void test_checkpoint_round_trip_adamw(void **s)
{
    (void)s;
    check_round_trip(HERD_OPT_ADAMW);
}

/* ------------------------------------------------------------ on a device */

/* The tiny model with its parameters, gradients and buffers in be's memory: on the
 * simulated device the host cannot read them, so every copy the checkpoint code
 * forgets faults. */
static tmodel *tmodel_on(const herd_backend *be, uint64_t seed)
{
    tmodel *t = tmodel_new(seed);
    float **bufs[] = {&t->m.params, &t->m.grads, &t->m.buffers};
    size_t n[] = {t->m.n_param_floats, t->m.n_param_floats, t->m.n_buffer_floats};
    for (int i = 0; i < 3; i++) {
        float *dev = be->alloc(n[i] * sizeof(float));
        assert_non_null(dev);
        assert_herd_ok(be->memcpy_h2d(dev, *bufs[i], n[i] * sizeof(float)));
        free(*bufs[i]);
        *bufs[i] = dev;
    }
    t->m.be = be;
    return t;
}

static void tmodel_on_free(tmodel *t)
{
    t->m.be->free(t->m.params);
    t->m.be->free(t->m.grads);
    t->m.be->free(t->m.buffers);
    free(t);
}

/* n floats of be's memory, in a host copy the caller frees. */
static float *host_copy(const herd_backend *be, const float *p, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    assert_herd_ok(be->memcpy_d2h(h, p, n * sizeof *h));
    return h;
}

/* The steps of train_steps, with the gradients uploaded. */
static void train_steps_on(tmodel *t, herd_optimizer *o, int n, uint64_t seed)
{
    float *g = malloc(t->m.n_param_floats * sizeof *g);
    for (int i = 0; i < n; i++) {
        tu_fill_uniform(g, t->m.n_param_floats, -1, 1, seed + (uint64_t)i);
        assert_herd_ok(t->m.be->memcpy_h2d(t->m.grads, g, t->m.n_param_floats * sizeof *g));
        assert_herd_ok(herd_optimizer_step(o, &t->m, 0.01f));
    }
    free(g);
}

/* a's and b's parameters, buffers and optimizer state, bit for bit, wherever they live. */
static void assert_same_training(tmodel *a, herd_optimizer *oa, tmodel *b, herd_optimizer *ob)
{
    size_t np = a->m.n_param_floats, nb = a->m.n_buffer_floats;
    float *pa = host_copy(a->m.be, a->m.params, np), *pb = host_copy(b->m.be, b->m.params, np);
    float *ba = host_copy(a->m.be, a->m.buffers, nb), *bb = host_copy(b->m.be, b->m.buffers, nb);
    assert_memory_equal(pa, pb, np * sizeof(float));
    assert_memory_equal(ba, bb, nb * sizeof(float));
    assert_int_equal(herd_optimizer_steps(oa), herd_optimizer_steps(ob));
    for (int i = 0; i < herd_optimizer_state_count(oa); i++) {
        size_t na, nb2;
        herd_optimizer_state(oa, i, NULL, &na);
        herd_optimizer_state(ob, i, NULL, &nb2);
        assert_int_equal(na, nb2);
        float *sa = malloc(na * sizeof *sa), *sb = malloc(na * sizeof *sb);
        assert_herd_ok(herd_optimizer_state_download(oa, i, 0, na, sa));
        assert_herd_ok(herd_optimizer_state_download(ob, i, 0, na, sb));
        assert_memory_equal(sa, sb, na * sizeof(float));
        free(sa);
        free(sb);
    }
    free(pa);
    free(pb);
    free(ba);
    free(bb);
}

static void assert_same_file(const char *x, const char *y)
{
    size_t lx, ly;
    unsigned char *a = slurp(x, &lx), *b = slurp(y, &ly);
    assert_int_equal(lx, ly);
    assert_memory_equal(a, b, lx);
    free(a);
    free(b);
}

/* One format: a checkpoint written from the simulated device is byte for byte the
 * CPU's of the same training, and each resumes on the other, continuing bit for bit. */
static void check_across_devices(herd_optimizer_kind kind)
{
    const herd_backend *dev = herd_backend_sim(), *cpu = herd_backend_cpu();
    const herd_backend *where[2] = {cpu, dev};
    char *dir = tu_tempdir();
    char *ck[2] = {join(dir, "cpu"), join(dir, "sim")};
    tmodel *a[2];
    herd_optimizer *oa[2];
    herd_train_state st = {.epoch = 0, .global_step = 3, .seed = 5, .batch_size = 8, .ranks = 1,
                           .grad_accum = 1, .train_samples = 80, .epoch_samples = 24, .epoch_seen = 24,
                           .epoch_loss_sum = 1.5, .epoch_correct = 4};
    for (int k = 0; k < 2; k++) {
        a[k] = tmodel_on(where[k], 1);
        oa[k] = make_opt(a[k], kind);
        train_steps_on(a[k], oa[k], 3, 10);
        assert_herd_ok(herd_checkpoint_save(ck[k], &a[k]->m, oa[k], &st, NULL, 2));
    }
    assert_same_training(a[0], oa[0], a[1], oa[1]); /* the premise: the same arithmetic */
    char *w[2] = {join(ck[0], "ckpt-3.safetensors"), join(ck[1], "ckpt-3.safetensors")};
    char *sp[2] = {join(ck[0], "ckpt-3.state.safetensors"), join(ck[1], "ckpt-3.state.safetensors")};
    assert_same_file(w[0], w[1]);
    assert_same_file(sp[0], sp[1]);
    /* Written on k, resumed on j (another start, so the load must overwrite it). */
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 2; j++) {
            tmodel *b = tmodel_on(where[j], 2);
            herd_optimizer *ob = make_opt(b, kind);
            herd_train_state got;
            bool found = false;
            assert_herd_ok(herd_checkpoint_load_latest(ck[k], &b->m, ob, &got, &found));
            assert_true(found);
            assert_int_equal(got.global_step, 3);
            assert_same_training(a[j], oa[j], b, ob);
            train_steps_on(b, ob, 2, 99);
            tmodel *c = tmodel_on(where[j], 1); /* the uninterrupted run on j */
            herd_optimizer *oc = make_opt(c, kind);
            train_steps_on(c, oc, 3, 10);
            train_steps_on(c, oc, 2, 99);
            assert_same_training(c, oc, b, ob);
            herd_optimizer_free(oc);
            tmodel_on_free(c);
            herd_optimizer_free(ob);
            tmodel_on_free(b);
        }
    for (int k = 0; k < 2; k++) {
        herd_optimizer_free(oa[k]);
        tmodel_on_free(a[k]);
        free(ck[k]);
        free(w[k]);
        free(sp[k]);
    }
    tu_rmtree(dir);
    free(dir);
}

static void test_checkpoint_across_devices_sgd(void **s)
{
    (void)s;
    check_across_devices(HERD_OPT_SGD);
}

static void test_checkpoint_across_devices_adamw(void **s)
{
    (void)s;
    check_across_devices(HERD_OPT_ADAMW);
}

/* The background writer on a device: what it writes is the state when it was handed
 * the job, though the steps after change device memory while the thread writes. */
static void test_writer_on_device(void **s)
{
    (void)s;
    char *dir = tu_tempdir();
    tmodel *a = tmodel_on(herd_backend_sim(), 1), *ref = tmodel_on(herd_backend_cpu(), 1);
    herd_optimizer *oa = make_opt(a, HERD_OPT_ADAMW), *oref = make_opt(ref, HERD_OPT_ADAMW);
    train_steps_on(a, oa, 3, 10);
    train_steps_on(ref, oref, 3, 10);
    herd_train_state st = {.epoch = 0, .global_step = 3, .seed = 5, .batch_size = 8, .ranks = 1,
                           .grad_accum = 1, .train_samples = 80, .epoch_samples = 24};
    herd_ckpt_writer *w;
    assert_herd_ok(herd_ckpt_writer_create(&w));
    assert_herd_ok(herd_ckpt_writer_submit(w, dir, 2, &a->m, oa, &st));
    train_steps_on(a, oa, 4, 50); /* while the thread may still write */
    assert_herd_ok(herd_ckpt_writer_wait(w));
    herd_ckpt_writer_free(w);

    tmodel *b = tmodel_on(herd_backend_sim(), 2);
    herd_optimizer *ob = make_opt(b, HERD_OPT_ADAMW);
    herd_train_state got;
    bool found = false;
    assert_herd_ok(herd_checkpoint_load_latest(dir, &b->m, ob, &got, &found));
    assert_true(found);
    assert_same_training(ref, oref, b, ob);
    herd_optimizer_free(oa);
    herd_optimizer_free(ob);
    herd_optimizer_free(oref);
    tmodel_on_free(a);
    tmodel_on_free(b);
    tmodel_on_free(ref);
    tu_rmtree(dir);
    free(dir);
}

/* A checkpoint of another model loaded into a device model: refused before anything
 * changes, on the device as on the CPU, and the directory's files stay as they were. */
static void test_device_load_mismatch(void **s)
{
    (void)s;
    char *dir = tu_tempdir();
    tmodel *a = tmodel_on(herd_backend_cpu(), 1);
    herd_optimizer *oa = make_opt(a, HERD_OPT_SGD);
    herd_train_state st = {.epoch = 1, .global_step = 4, .seed = 5, .batch_size = 8, .ranks = 1,
                           .grad_accum = 1, .train_samples = 32};
    assert_herd_ok(herd_checkpoint_save(dir, &a->m, oa, &st, NULL, 2));
    char *wpath = join(dir, "ckpt-4.safetensors"), *spath = join(dir, "ckpt-4.state.safetensors");
    size_t lw, ls;
    unsigned char *w0 = slurp(wpath, &lw), *s0 = slurp(spath, &ls);

    tmodel *b = tmodel_on(herd_backend_sim(), 2);
    b->views[4].shape[0] = 4; /* fc.weight [4, 6] instead of [3, 8]: another model */
    b->views[4].shape[1] = 6;
    herd_optimizer *ob = make_opt(b, HERD_OPT_SGD);
    float *before = host_copy(b->m.be, b->m.params, b->m.n_param_floats);
    herd_train_state got = {0};
    bool found = true;
    expect_format_error(herd_checkpoint_load_latest(dir, &b->m, ob, &got, &found), wpath);
    assert_false(found);
    assert_non_null(strstr(herd_last_error(), "fc.weight"));
    float *after = host_copy(b->m.be, b->m.params, b->m.n_param_floats);
    assert_memory_equal(before, after, b->m.n_param_floats * sizeof(float));
    size_t lw2, ls2;
    unsigned char *w1 = slurp(wpath, &lw2), *s1 = slurp(spath, &ls2);
    assert_true(lw == lw2 && ls == ls2);
    assert_memory_equal(w0, w1, lw);
    assert_memory_equal(s0, s1, ls);
    free(w0);
    free(w1);
    free(s0);
    free(s1);
    free(before);
    free(after);
    free(wpath);
    free(spath);
    herd_optimizer_free(oa);
    herd_optimizer_free(ob);
    tmodel_on_free(a);
    tmodel_on_free(b);
    tu_rmtree(dir);
    free(dir);
}

static void test_checkpoint_latest_and_prune(void **s)
{
    (void)s;
    char *dir = tu_tempdir();
    tmodel *a = tmodel_new(1);
    herd_optimizer *o = make_opt(a, HERD_OPT_SGD);
    for (long step = 10; step <= 40; step += 10) {
        train_steps(a, o, 1, (uint64_t)step);
        herd_train_state st = {.epoch = (int)(step / 10), .global_step = step, .seed = 1, .batch_size = 8,
                               .ranks = 1, .grad_accum = 1, .train_samples = 80};
        assert_herd_ok(herd_checkpoint_save(dir, &a->m, o, &st, NULL, 2));
    }
    char *lpath = join(dir, "latest");
    size_t len;
    char *latest = (char *)slurp(lpath, &len);
    latest[len] = '\0';
    assert_string_equal(latest, "ckpt-40\n");
    free(latest);
    assert_true(exists(dir, "ckpt-40.safetensors") && exists(dir, "ckpt-40.state.safetensors"));
    assert_true(exists(dir, "ckpt-30.safetensors") && exists(dir, "ckpt-30.state.safetensors"));
    assert_false(exists(dir, "ckpt-20.safetensors") || exists(dir, "ckpt-20.state.safetensors"));
    assert_false(exists(dir, "ckpt-10.safetensors") || exists(dir, "ckpt-10.state.safetensors"));

    tmodel *b = tmodel_new(5);
    herd_optimizer *ob = make_opt(b, HERD_OPT_SGD);
    herd_train_state got;
    bool found;
    assert_herd_ok(herd_checkpoint_load_latest(dir, &b->m, ob, &got, &found));
    assert_true(found);
    assert_int_equal(got.global_step, 40);
    assert_int_equal(got.epoch, 4);
    assert_memory_equal(a->m.params, b->m.params, a->m.n_param_floats * sizeof(float));

    herd_optimizer_free(o);
    herd_optimizer_free(ob);
    tmodel_free(a);
    tmodel_free(b);
    free(lpath);
    tu_rmtree(dir);
    free(dir);
}

/* --keep-checkpoints: 0 keeps every checkpoint, N the N newest (both files of each). */
static void test_checkpoint_keep(void **s)
{
    (void)s;
    const int keeps[] = {0, 1, 3};
    for (size_t k = 0; k < sizeof keeps / sizeof *keeps; k++) {
        char *dir = tu_tempdir();
        tmodel *a = tmodel_new(1);
        herd_optimizer *o = make_opt(a, HERD_OPT_SGD);
        for (long step = 10; step <= 50; step += 10) {
            train_steps(a, o, 1, (uint64_t)step);
            herd_train_state st = {.epoch = (int)(step / 10), .global_step = step, .seed = 1,
                                   .batch_size = 8, .ranks = 1, .grad_accum = 1, .train_samples = 80};
            assert_herd_ok(herd_checkpoint_save(dir, &a->m, o, &st, NULL, keeps[k]));
        }
        for (long step = 10; step <= 50; step += 10) {
            char w[48], st[48];
            snprintf(w, sizeof w, "ckpt-%ld.safetensors", step);
            snprintf(st, sizeof st, "ckpt-%ld.state.safetensors", step);
            bool kept = keeps[k] == 0 || step > 50 - 10L * keeps[k];
            assert_int_equal(exists(dir, w), kept);
            assert_int_equal(exists(dir, st), kept);
        }
        herd_optimizer_free(o);
        tmodel_free(a);
        tu_rmtree(dir);
        free(dir);
    }
}

static void test_checkpoint_none(void **s)
{
    (void)s;
    char *dir = tu_tempdir();
    tmodel *a = tmodel_new(1);
    herd_optimizer *o = make_opt(a, HERD_OPT_SGD);
    herd_train_state st = {.epoch = 7};
    bool found = true;
    assert_herd_ok(herd_checkpoint_load_latest(dir, &a->m, o, &st, &found));
    assert_false(found);
    assert_int_equal(st.epoch, 7);
    char *missing = join(dir, "does/not/exist");
    found = true;
    assert_herd_ok(herd_checkpoint_load_latest(missing, &a->m, o, &st, &found));
    assert_false(found);
    free(missing);
    herd_optimizer_free(o);
    tmodel_free(a);
    tu_rmtree(dir);
    free(dir);
}

/* Unwritable destinations are I/O errors naming the path, not crashes. */
static void test_write_failures(void **s)
{
    (void)s;
    char *dir = tu_tempdir();
    tmodel *a = tmodel_new(1);
    herd_optimizer *o = make_opt(a, HERD_OPT_SGD);
    char *file = tu_write_file(dir, "plain-file", "x", 1);
    herd_train_state st = {.global_step = 1, .batch_size = 1, .ranks = 1, .grad_accum = 1, .train_samples = 1};
    assert_int_equal(herd_checkpoint_save(file, &a->m, o, &st, NULL, 2), HERD_ERR_IO);
    assert_non_null(strstr(herd_last_error(), file));
    char *bad = join(dir, "no/such/dir/w.safetensors");
    assert_int_equal(herd_model_save(&a->m, bad), HERD_ERR_IO);
    assert_non_null(strstr(herd_last_error(), bad));
    free(bad);
    free(file);
    herd_optimizer_free(o);
    tmodel_free(a);
    tu_rmtree(dir);
    free(dir);
}

static void test_checkpoint_corrupt(void **s)
{
    (void)s;
    char *dir = tu_tempdir();
    tmodel *a = tmodel_new(1);
    herd_optimizer *o = make_opt(a, HERD_OPT_ADAMW);
    train_steps(a, o, 2, 3);
    herd_train_state st = {.epoch = 1, .global_step = 2, .seed = 9, .batch_size = 4, .ranks = 1,
                           .grad_accum = 1, .train_samples = 8};
    assert_herd_ok(herd_checkpoint_save(dir, &a->m, o, &st, NULL, 2));
    char *wpath = join(dir, "ckpt-2.safetensors");
    char *spath = join(dir, "ckpt-2.state.safetensors");
    size_t wlen, slen;
    unsigned char *w = slurp(wpath, &wlen), *sdata = slurp(spath, &slen);

    tmodel *b = tmodel_new(2);
    herd_optimizer *ob = make_opt(b, HERD_OPT_ADAMW);
    float before[64];
    memcpy(before, b->m.params, b->m.n_param_floats * sizeof(float));
    herd_train_state got = {0};
    bool found = true;

    /* Truncated state file, at several points. */
    size_t cuts[] = {0, 5, slen / 2, slen - 3};
    for (size_t i = 0; i < 4; i++) {
        free(tu_write_file(dir, "ckpt-2.state.safetensors", sdata, cuts[i]));
        expect_format_error(herd_checkpoint_load_latest(dir, &b->m, ob, &got, &found), spath);
        assert_false(found);
    }
    free(tu_write_file(dir, "ckpt-2.state.safetensors", sdata, slen));
    /* Truncated weights. */
    free(tu_write_file(dir, "ckpt-2.safetensors", w, wlen - 1));
    expect_format_error(herd_checkpoint_load_latest(dir, &b->m, ob, &got, &found), wpath);
    free(tu_write_file(dir, "ckpt-2.safetensors", w, wlen));
    /* Missing weights: an I/O error naming the file. */
    unlink(wpath);
    assert_int_equal(herd_checkpoint_load_latest(dir, &b->m, ob, &got, &found), HERD_ERR_IO);
    assert_non_null(strstr(herd_last_error(), wpath));
    free(tu_write_file(dir, "ckpt-2.safetensors", w, wlen));
    /* A garbled `latest`. */
    char *lpath = join(dir, "latest");
    free(tu_write_file(dir, "latest", "../etc/passwd\n", 14));
    expect_format_error(herd_checkpoint_load_latest(dir, &b->m, ob, &got, &found), lpath);
    free(tu_write_file(dir, "latest", "", 0));
    expect_format_error(herd_checkpoint_load_latest(dir, &b->m, ob, &got, &found), lpath);
    /* Nothing was changed by the failed loads. */
    assert_memory_equal(before, b->m.params, b->m.n_param_floats * sizeof(float));
    assert_int_equal(herd_optimizer_steps(ob), 0);
    /* Restored, it loads again. */
    free(tu_write_file(dir, "latest", "ckpt-2\n", 7));
    assert_herd_ok(herd_checkpoint_load_latest(dir, &b->m, ob, &got, &found));
    assert_true(found);
    assert_int_equal(herd_optimizer_steps(ob), 2);

    free(lpath);
    free(w);
    free(sdata);
    free(wpath);
    free(spath);
    herd_optimizer_free(o);
    herd_optimizer_free(ob);
    tmodel_free(a);
    tmodel_free(b);
    tu_rmtree(dir);
    free(dir);
}

/* The state file rewritten with its tensors and metadata, one key replaced (value
 * NULL: left out). */
static const char *const state_keys[] = {"epoch", "global_step", "seed", "batch_size", "ranks",
                                         "grad_accum", "global_batch", "train_samples",
                                         "epoch_samples", "epoch_loss_sum", "epoch_correct",
                                         "optimizer_steps", "epoch_seen", "optimizer", "herd_version"};
#define N_STATE_KEYS (sizeof state_keys / sizeof state_keys[0])

static void rewrite_state(const char *spath, const herd_st_file *orig, const char *key, const char *value)
{
    herd_st_entry e[4];
    size_t n = herd_st_count(orig);
    for (size_t i = 0; i < n; i++) {
        e[i].name = herd_st_name(orig, i);
        memset(e[i].shape, 0, sizeof e[i].shape);
        e[i].data = herd_st_find(orig, e[i].name, &e[i].ndim, e[i].shape);
    }
    const char *keys[N_STATE_KEYS], *values[N_STATE_KEYS];
    size_t m = 0;
    for (size_t i = 0; i < N_STATE_KEYS; i++) {
        bool is_key = key && strcmp(state_keys[i], key) == 0;
        if (is_key && !value)
            continue;
        values[m] = is_key ? value : herd_st_meta(orig, state_keys[i]);
        if (values[m])
            keys[m++] = state_keys[i];
    }
    assert_herd_ok(herd_safetensors_write(spath, e, n, keys, values, m));
}

/* Every field of the state file is checked; the error names the file, the field and
 * the value, and nothing is loaded. */
static void test_checkpoint_bad_fields(void **s)
{
    (void)s;
    char *dir = tu_tempdir();
    tmodel *a = tmodel_new(1);
    herd_optimizer *o = make_opt(a, HERD_OPT_ADAMW);
    train_steps(a, o, 2, 3);
    herd_train_state st = {.epoch = 1, .global_step = 2, .seed = 9, .batch_size = 4, .ranks = 2,
                           .grad_accum = 1, .train_samples = 40, .epoch_samples = 8, .epoch_seen = 8,
                           .epoch_loss_sum = 9.5, .epoch_correct = 3};
    assert_herd_ok(herd_checkpoint_save(dir, &a->m, o, &st, NULL, 2));
    char *spath = join(dir, "ckpt-2.state.safetensors");
    herd_st_file *orig;
    assert_herd_ok(herd_safetensors_read(spath, &orig));
    const struct { const char *key, *value; } bad[] = {
        {"global_step", "9223372036854775807"}, {"global_step", "3"}, {"global_step", "-1"},
        {"global_step", NULL}, {"epoch", "2147483647"}, {"epoch", "5"}, {"epoch", "x"},
        {"epoch", NULL}, {"seed", "18446744073709551616"}, {"seed", "-3"}, {"batch_size", "0"},
        {"batch_size", "2147483648"}, {"ranks", "0"}, {"ranks", NULL}, {"grad_accum", "0"},
        {"global_batch", "9"}, {"train_samples", "0"}, {"train_samples", "8"},
        {"train_samples", "4294967296"}, {"epoch_samples", "40"}, {"epoch_samples", "1e3"},
        {"epoch_loss_sum", "nan"}, {"epoch_loss_sum", "-1"}, {"epoch_loss_sum", "inf"},
        {"epoch_loss_sum", ""}, {"epoch_correct", "9"},
        {"epoch_correct", "-0.5"}, /* 2.5 is fine: a sequence counts the fraction right */ {"optimizer_steps", "3"}, {"optimizer_steps", " 2"},
        {"epoch_seen", "9"}, {"epoch_seen", NULL}, {"optimizer", "sgd"},
    };
    tmodel *b = tmodel_new(2);
    herd_optimizer *ob = make_opt(b, HERD_OPT_ADAMW);
    float before[64];
    memcpy(before, b->m.params, b->m.n_param_floats * sizeof(float));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rewrite_state(spath, orig, bad[i].key, bad[i].value);
        herd_train_state got = {0};
        bool found = true;
        expect_format_error(herd_checkpoint_load_latest(dir, &b->m, ob, &got, &found), spath);
        assert_false(found);
        if (strcmp(bad[i].key, "optimizer") != 0 && !strstr(herd_last_error(), bad[i].key))
            fail_msg("%s=%s: the error does not name the field: %s", bad[i].key,
                     bad[i].value ? bad[i].value : "(missing)", herd_last_error());
        if (bad[i].value && *bad[i].value && !strstr(herd_last_error(), bad[i].value) &&
            strcmp(bad[i].key, "optimizer") != 0)
            fail_msg("%s=%s: the error does not name the value: %s", bad[i].key, bad[i].value,
                     herd_last_error());
    }
    assert_memory_equal(before, b->m.params, b->m.n_param_floats * sizeof(float));
    /* A checkpoint of an older herd (no position) loads, marked as such. */
    const char *newer[] = {"ranks", "grad_accum", "global_batch", "train_samples", "epoch_samples",
                           "epoch_loss_sum", "epoch_correct", "epoch_seen"};
    rewrite_state(spath, orig, NULL, NULL);
    herd_st_free(orig);
    assert_herd_ok(herd_safetensors_read(spath, &orig));
    for (size_t i = 0; i < sizeof newer / sizeof newer[0]; i++) {
        rewrite_state(spath, orig, newer[i], NULL);
        herd_st_free(orig);
        assert_herd_ok(herd_safetensors_read(spath, &orig));
    }
    herd_train_state got = {0};
    bool found = false;
    assert_herd_ok(herd_checkpoint_load_latest(dir, &b->m, ob, &got, &found));
    assert_true(found && got.legacy);
    assert_int_equal(got.global_step, 2);
    herd_st_free(orig);
    free(spath);
    herd_optimizer_free(o);
    herd_optimizer_free(ob);
    tmodel_free(a);
    tmodel_free(b);
    tu_rmtree(dir);
    free(dir);
}

static void expect_refused(herd_train_state st, const herd_train_state *now, long spe, const char *what)
{
    assert_int_equal(herd_train_state_continue(&st, now, spe, "DIR"), HERD_ERR_INVALID_ARG);
    if (!strstr(herd_last_error(), what) || !strstr(herd_last_error(), "DIR"))
        fail_msg("the refusal does not say '%s': %s", what, herd_last_error());
}

/* Mid-epoch, other ranks, batch or --grad-accum continue; another permutation does not. */
static void test_state_continue(void **s)
{
    (void)s;
    herd_train_state saved = {.epoch = 1, .global_step = 30, .seed = 5, .batch_size = 16, .ranks = 1,
                              .grad_accum = 1, .train_samples = 400, .epoch_samples = 160, .epoch_seen = 160,
                              .epoch_loss_sum = 20, .epoch_correct = 100};
    herd_train_state now = {.seed = 5, .batch_size = 8, .ranks = 2, .grad_accum = 4, .train_samples = 400};
    herd_train_state st = saved;
    assert_herd_ok(herd_train_state_continue(&st, &now, 7, "DIR"));
    assert_int_equal(st.epoch_samples, 160);
    assert_true(st.epoch_loss_sum == 20 && st.epoch_correct == 100);
    assert_int_equal(st.ranks, 2);
    assert_int_equal(st.grad_accum, 4);
    assert_int_equal(st.batch_size, 8);
    herd_train_state other = now;
    other.seed = 6;
    expect_refused(saved, &other, 7, "--seed 5");
    other = now;
    other.train_samples = 300;
    expect_refused(saved, &other, 7, "--train-samples");
    /* At an epoch boundary nothing of the old permutation is left: anything continues. */
    herd_train_state boundary = saved;
    boundary.epoch_samples = boundary.epoch_seen = 0;
    boundary.epoch_loss_sum = boundary.epoch_correct = 0;
    st = boundary;
    assert_herd_ok(herd_train_state_continue(&st, &other, 5, "DIR"));
    assert_int_equal(st.train_samples, 300);
    /* An older checkpoint: the step gives the position only at this run's steps per epoch. */
    herd_train_state legacy = {.epoch = 2, .global_step = 27, .seed = 5, .batch_size = 8, .legacy = true};
    st = legacy;
    assert_herd_ok(herd_train_state_continue(&st, &now, 12, "DIR"));
    assert_int_equal(st.epoch_samples, 3 * 64);
    assert_int_equal(st.epoch_seen, 0); /* its sums are unknown */
    assert_false(st.legacy);
    expect_refused(legacy, &now, 7, "older herd");   /* step 27 is past epoch 3 at 7 per epoch */
    expect_refused(legacy, &now, 14, "older herd");  /* ... and before it at 14 */
}

/* Temporaries of interrupted checkpoint writes go; nothing else does. */
static void test_checkpoint_stale_tmp(void **s)
{
    (void)s;
    char *dir = tu_tempdir();
    const char *stale[] = {"ckpt-30.safetensors.tmp.a1B2c3", "ckpt-30.state.safetensors.tmp.zzzzzz",
                           "latest.tmp.Q9w8e7"};
    const char *kept[] = {"latest", "ckpt-30.safetensors", "notes.tmp.abcdef",
                          "ckpt-30.safetensors.tmp.toolong1", "ckpt-x.safetensors.tmp.abcdef"};
    for (size_t i = 0; i < 3; i++)
        free(tu_write_file(dir, stale[i], "x", 1));
    for (size_t i = 0; i < 5; i++)
        free(tu_write_file(dir, kept[i], "x", 1));
    int removed = -1;
    assert_herd_ok(herd_checkpoint_remove_stale(dir, &removed));
    assert_int_equal(removed, 3);
    for (size_t i = 0; i < 3; i++)
        assert_false(exists(dir, stale[i]));
    for (size_t i = 0; i < 5; i++)
        assert_true(exists(dir, kept[i]));
    assert_herd_ok(herd_checkpoint_remove_stale(dir, &removed));
    assert_int_equal(removed, 0);
    char *missing = join(dir, "none");
    assert_herd_ok(herd_checkpoint_remove_stale(missing, &removed));
    assert_int_equal(removed, 0);
    free(missing);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_st_round_trip),
        cmocka_unit_test(test_st_truncated),
        cmocka_unit_test(test_st_corrupt_headers),
        cmocka_unit_test(test_model_save_load),
        cmocka_unit_test(test_checkpoint_round_trip_sgd),
        cmocka_unit_test(test_checkpoint_round_trip_adamw),
        cmocka_unit_test(test_checkpoint_latest_and_prune),
        cmocka_unit_test(test_checkpoint_keep),
        cmocka_unit_test(test_checkpoint_none),
        cmocka_unit_test(test_checkpoint_corrupt),
        cmocka_unit_test(test_write_failures),
        cmocka_unit_test(test_checkpoint_bad_fields),
        cmocka_unit_test(test_state_continue),
        cmocka_unit_test(test_checkpoint_stale_tmp),
        cmocka_unit_test(test_checkpoint_across_devices_sgd),
        cmocka_unit_test(test_checkpoint_across_devices_adamw),
        cmocka_unit_test(test_writer_on_device),
        cmocka_unit_test(test_device_load_mismatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
