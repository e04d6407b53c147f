/* Checkpoints: DIR/ckpt-<step>.safetensors (weights), DIR/ckpt-<step>.state.safetensors
 * (optimizer state and counters), and DIR/latest naming the newest. The files are
 * written first and `latest` is swapped last, so a crash at any point leaves
 * `latest` naming a complete checkpoint. */
#include "train/checkpoint.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/safetensors.h"
#include "nn/weights.h"

#define CKPT_KEEP 2

static const char *kind_name(herd_optimizer_kind k) { return k == HERD_OPT_ADAMW ? "adamw" : "sgd"; }

static char *path_join(const char *dir, const char *base, const char *suffix)
{
    char *p = NULL;
    if (asprintf(&p, "%s/%s%s", dir, base, suffix) < 0) {
        HERD_NOMEM(strlen(dir) + strlen(base) + strlen(suffix) + 2);
        return NULL;
    }
    return p;
}

/* Parses "ckpt-<digits>" (+ optional suffix that must match exactly). */
static int parse_ckpt_name(const char *name, const char *suffix, long *step)
{
    if (strncmp(name, "ckpt-", 5) != 0 || !isdigit((unsigned char)name[5]))
        return -1;
    char *end;
    errno = 0;
    long v = strtol(name + 5, &end, 10);
    if (errno != 0 || strcmp(end, suffix) != 0)
        return -1;
    *step = v;
    return 0;
}

static int cmp_long_desc(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x < y) - (x > y);
}

/* Keeps `current` and the newest older checkpoint; deletes the rest that are older.
 * Higher steps (an earlier run's leftovers in the same directory) are left alone
 * rather than guessed about. Failures to delete are not errors: the new checkpoint
 * is already safe. */
static void prune(const char *dir, long current)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    long *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        long s;
        if (parse_ckpt_name(ent->d_name, ".safetensors", &s) != 0 &&
            parse_ckpt_name(ent->d_name, ".state.safetensors", &s) != 0)
            continue;
        if (s >= current)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            long *g = realloc(steps, cap * sizeof *g);
            if (!g)
                break;
            steps = g;
        }
        steps[n++] = s;
    }
    closedir(d);
    if (n == 0) {
        free(steps);
        return;
    }
    qsort(steps, n, sizeof *steps, cmp_long_desc);
    size_t distinct = 1; /* the current checkpoint */
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && steps[i] == steps[i - 1])
            continue;
        if (++distinct <= CKPT_KEEP)
            continue;
        char base[48];
        snprintf(base, sizeof base, "ckpt-%ld", steps[i]);
        char *w = path_join(dir, base, ".safetensors");
        char *s = path_join(dir, base, ".state.safetensors");
        if (w)
            unlink(w);
        if (s)
            unlink(s);
        free(w);
        free(s);
    }
    free(steps);
}

herd_status herd_checkpoint_save(const char *dir, const herd_model *m, herd_optimizer *o,
                                 const herd_train_state *st)
{
    if (!dir || !*dir || !m || !st)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "checkpoint_save: directory, model and state must be given");
    if (!m->be->host_memory)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "checkpoints of a model on '%s' are not supported "
                        "yet (the optimizer state is not staged through the host)", m->be->name);
    if (st->global_step < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "checkpoint_save: global_step %ld is negative", st->global_step);
    HERD_TRY(herd_make_dirs(dir, "--checkpoint-dir"));

    char base[48];
    snprintf(base, sizeof base, "ckpt-%ld", st->global_step);
    char *wpath = path_join(dir, base, ".safetensors");
    char *spath = path_join(dir, base, ".state.safetensors");
    char *lpath = path_join(dir, "latest", "");
    herd_status rc = (wpath && spath && lpath) ? HERD_OK : HERD_ERR_NOMEM;

    if (rc == HERD_OK) {
        const char *keys[] = {"format", "herd_version", "model", "global_step"};
        char gs[32];
        snprintf(gs, sizeof gs, "%ld", st->global_step);
        const char *values[] = {"pt", HERD_VERSION, m->name, gs};
        rc = herd_weights_write(m, wpath, keys, values, 4);
    }
    if (rc == HERD_OK) {
        char epoch[32], step[32], seed[32], batch[32], osteps[32];
        snprintf(epoch, sizeof epoch, "%d", st->epoch);
        snprintf(step, sizeof step, "%ld", st->global_step);
        snprintf(seed, sizeof seed, "%" PRIu64, st->seed);
        snprintf(batch, sizeof batch, "%d", st->batch_size);
        snprintf(osteps, sizeof osteps, "%ld", herd_optimizer_steps(o));
        const char *keys[] = {"epoch", "global_step", "seed", "batch_size", "optimizer",
                              "optimizer_steps", "herd_version"};
        const char *values[] = {epoch, step, seed, batch, o ? kind_name(herd_optimizer_get_kind(o)) : "none",
                                osteps, HERD_VERSION};
        herd_st_entry e[2];
        int n = herd_optimizer_state_count(o);
        for (int i = 0; i < n; i++) {
            size_t numel;
            e[i].data = herd_optimizer_state(o, i, &e[i].name, &numel);
            e[i].ndim = 1;
            memset(e[i].shape, 0, sizeof e[i].shape);
            e[i].shape[0] = (int64_t)numel;
        }
        rc = herd_safetensors_write(spath, e, (size_t)n, keys, values, 7);
    }
    if (rc == HERD_OK) {
        char text[64];
        int len = snprintf(text, sizeof text, "%s\n", base);
        const void *parts[] = {text};
        size_t lens[] = {(size_t)len};
        rc = herd_write_file_atomic(lpath, parts, lens, 1);
    }
    if (rc == HERD_OK)
        prune(dir, st->global_step);
    free(wpath);
    free(spath);
    free(lpath);
    return rc;
}

/* A required non-negative integer (at most max) in the state file's metadata. */
static herd_status meta_int(const herd_st_file *f, const char *path, const char *key,
                            unsigned long long max, unsigned long long *out)
{
    const char *s = herd_st_meta(f, key);
    char *end = NULL;
    unsigned long long v = 0;
    errno = 0;
    /* strtoull alone would accept "-1" and wrap it. */
    if (s && isdigit((unsigned char)s[0]))
        v = strtoull(s, &end, 10);
    if (!end || *end != '\0' || errno != 0 || v > max)
        return HERD_ERR(HERD_ERR_FORMAT,
                        "'%s': metadata '%s' is missing or not an integer in range; the checkpoint is "
                        "corrupt, delete it or point DIR/latest at an older one", path, key);
    *out = v;
    return HERD_OK;
}

herd_status herd_checkpoint_load_latest(const char *dir, herd_model *m, herd_optimizer *o,
                                        herd_train_state *st, bool *found)
{
    if (!dir || !m || !st || !found)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "checkpoint_load_latest: directory, model, state and found must be given");
    if (!m->be->host_memory)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "checkpoints of a model on '%s' are not supported "
                        "yet (the optimizer state is not staged through the host)", m->be->name);
    *found = false;
    char *lpath = path_join(dir, "latest", "");
    if (!lpath)
        return HERD_ERR_NOMEM;
    FILE *lf = fopen(lpath, "rb");
    if (!lf) {
        int err = errno;
        herd_status rc = HERD_OK;
        if (err != ENOENT && err != ENOTDIR)
            rc = HERD_ERR(HERD_ERR_IO, "cannot read '%s': %s", lpath, strerror(err));
        free(lpath);
        return rc; /* no checkpoint yet: a fresh start */
    }
    char text[80] = {0};
    size_t got = fread(text, 1, sizeof text - 1, lf);
    fclose(lf);
    while (got > 0 && isspace((unsigned char)text[got - 1]))
        text[--got] = '\0';
    long step;
    if (parse_ckpt_name(text, "", &step) != 0) {
        herd_status rc = HERD_ERR(HERD_ERR_FORMAT,
                                  "'%s' should name a checkpoint like 'ckpt-1000' but holds '%.40s'; "
                                  "fix or delete it to start afresh", lpath, text);
        free(lpath);
        return rc;
    }
    free(lpath);

    char *wpath = path_join(dir, text, ".safetensors");
    char *spath = path_join(dir, text, ".state.safetensors");
    herd_st_file *wf = NULL, *sf = NULL;
    herd_status rc = (wpath && spath) ? HERD_OK : HERD_ERR_NOMEM;
    if (rc == HERD_OK)
        rc = herd_safetensors_read(wpath, &wf);
    if (rc == HERD_OK)
        rc = herd_safetensors_read(spath, &sf);
    if (rc == HERD_OK)
        rc = herd_weights_check(m, wf, wpath);

    unsigned long long epoch = 0, gstep = 0, seed = 0, batch = 0, osteps = 0;
    if (rc == HERD_OK)
        rc = meta_int(sf, spath, "epoch", INT_MAX, &epoch);
    if (rc == HERD_OK)
        rc = meta_int(sf, spath, "global_step", LONG_MAX, &gstep);
    if (rc == HERD_OK)
        rc = meta_int(sf, spath, "seed", UINT64_MAX, &seed);
    if (rc == HERD_OK)
        rc = meta_int(sf, spath, "batch_size", INT_MAX, &batch);
    if (rc == HERD_OK)
        rc = meta_int(sf, spath, "optimizer_steps", LONG_MAX, &osteps);
    if (rc == HERD_OK && (long)gstep != step)
        rc = HERD_ERR(HERD_ERR_FORMAT, "'%s' says global_step %llu but its name says %ld; the files "
                      "are mixed up, delete this checkpoint", spath, gstep, step);
    if (rc == HERD_OK && o) {
        const char *kind = herd_st_meta(sf, "optimizer");
        const char *want = kind_name(herd_optimizer_get_kind(o));
        if (!kind || strcmp(kind, want) != 0)
            rc = HERD_ERR(HERD_ERR_FORMAT,
                          "'%s' was saved with optimizer '%s' but this run uses '%s'; resume with the "
                          "same optimizer or start without --resume", spath, kind ? kind : "(none)", want);
        for (int i = 0; rc == HERD_OK && i < herd_optimizer_state_count(o); i++) {
            const char *name;
            size_t numel;
            herd_optimizer_state(o, i, &name, &numel);
            int ndim;
            int64_t shape[4];
            if (!herd_st_find(sf, name, &ndim, shape) || ndim != 1 || (size_t)shape[0] != numel)
                rc = HERD_ERR(HERD_ERR_FORMAT,
                              "'%s' lacks optimizer state '%s' of %zu floats; was it saved from a "
                              "different model?", spath, name, numel);
        }
    }
    /* Only now that both files are known good does anything change. */
    if (rc == HERD_OK) {
        rc = herd_weights_apply(m, wf);
        for (int i = 0; rc == HERD_OK && o && i < herd_optimizer_state_count(o); i++) {
            const char *name;
            size_t numel;
            float *dst = herd_optimizer_state(o, i, &name, &numel);
            memcpy(dst, herd_st_find(sf, name, NULL, NULL), numel * sizeof(float));
        }
        herd_optimizer_set_steps(o, (long)osteps);
        st->epoch = (int)epoch;
        st->global_step = (long)gstep;
        st->seed = (uint64_t)seed;
        st->batch_size = (int)batch;
        *found = true;
    }
    herd_st_free(wf);
    herd_st_free(sf);
    free(wpath);
    free(spath);
    return rc;
}
