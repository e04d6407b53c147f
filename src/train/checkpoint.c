/* Checkpoints: DIR/ckpt-<step>.safetensors (weights), DIR/ckpt-<step>.state.safetensors
 * (optimizer state and counters), and DIR/latest naming the newest. The files are
 * written first and `latest` is swapped last, so a crash at any point leaves
 * `latest` naming a complete checkpoint. */
#include "train/checkpoint_file.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/safetensors.h"
#include "nn/weights.h"

const char *herd_ckpt_kind_name(herd_optimizer_kind k) { return k == HERD_OPT_ADAMW ? "adamw" : "sgd"; }

char *herd_ckpt_path(const char *dir, const char *base, const char *suffix)
{
    char *p = NULL;
    if (asprintf(&p, "%s/%s%s", dir, base, suffix) < 0) {
        HERD_NOMEM(strlen(dir) + strlen(base) + strlen(suffix) + 2);
        return NULL;
    }
    return p;
}

/* Parses "ckpt-<digits>" (+ optional suffix that must match exactly). */
int herd_ckpt_parse_name(const char *name, const char *suffix, long *step)
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

int herd_ckpt_cmp_desc(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x < y) - (x > y);
}

/* Keeps `current` and the newest keep - 1 older checkpoints (keep 0: every one);
 * deletes the rest that are older. Higher steps (an earlier run's leftovers in the
 * same directory) are left alone rather than guessed about. Failures to delete are not
 * errors: the new checkpoint is already safe. */
static void prune(const char *dir, long current, int keep)
{
    if (keep <= 0)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    long *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        long s;
        if (herd_ckpt_parse_name(ent->d_name, ".safetensors", &s) != 0 &&
            herd_ckpt_parse_name(ent->d_name, ".state.safetensors", &s) != 0)
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
    qsort(steps, n, sizeof *steps, herd_ckpt_cmp_desc);
    size_t distinct = 1; /* the current checkpoint */
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && steps[i] == steps[i - 1])
            continue;
        if (++distinct <= (size_t)keep)
            continue;
        char base[48];
        snprintf(base, sizeof base, "ckpt-%ld", steps[i]);
        char *w = herd_ckpt_path(dir, base, ".safetensors");
        char *s = herd_ckpt_path(dir, base, ".state.safetensors");
        if (w)
            unlink(w);
        if (s)
            unlink(s);
        free(w);
        free(s);
    }
    free(steps);
}

/* Relations between the fields (each already in its own range). */
herd_status herd_ckpt_check_state(const herd_train_state *st, const char *path)
{
    if (st->global_step < 0 || st->global_step > HERD_CKPT_MAX_STEP)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field 'global_step' is %ld, not in 0..%ld; " CORRUPT_HINT,
                        path, st->global_step, HERD_CKPT_MAX_STEP);
    if (st->epoch < 0 || st->epoch > st->global_step)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field 'epoch' is %d but 'global_step' is %ld: every "
                        "epoch takes at least one step; " CORRUPT_HINT, path, st->epoch, st->global_step);
    if (st->batch_size < 1)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field 'batch_size' is %d, not positive; " CORRUPT_HINT,
                        path, st->batch_size);
    if (st->clipped_steps < 0 || st->clipped_steps > st->global_step || st->skipped_steps < 0 ||
        st->skipped_steps > st->global_step)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field '%s' is %ld, not in 0..%ld ('global_step'); "
                        CORRUPT_HINT, path, st->clipped_steps < 0 || st->clipped_steps > st->global_step
                        ? "clipped_steps" : "skipped_steps", st->clipped_steps < 0 ||
                        st->clipped_steps > st->global_step ? st->clipped_steps : st->skipped_steps,
                        st->global_step);
    if (!(st->loss_scale >= 0) || !isfinite(st->loss_scale) || st->loss_scale_clean < 0)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field 'loss_scale' is %.9g with %ld clean steps, not a "
                        "finite scale >= 0 (0: none); " CORRUPT_HINT, path, st->loss_scale,
                        st->loss_scale_clean);
    if (st->legacy)
        return HERD_OK;
    if (st->ranks < 1 || st->grad_accum < 1)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field '%s' is %d, not positive; " CORRUPT_HINT, path,
                        st->ranks < 1 ? "ranks" : "grad_accum", st->ranks < 1 ? st->ranks : st->grad_accum);
    if (st->train_samples < 1 || st->train_samples > (long)UINT32_MAX)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field 'train_samples' is %ld, not in 1..%lu; " CORRUPT_HINT,
                        path, st->train_samples, (unsigned long)UINT32_MAX);
    if (st->epoch_samples < 0 || st->epoch_samples >= st->train_samples)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field 'epoch_samples' is %ld, not in 0..%ld (below "
                        "'train_samples'); " CORRUPT_HINT, path, st->epoch_samples, st->train_samples - 1);
    if (st->epoch_samples > 0 && st->global_step <= st->epoch)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field 'global_step' is %ld, but %d whole epochs and "
                        "part of another take more steps; " CORRUPT_HINT, path, st->global_step, st->epoch);
    if (st->epoch_seen < 0 || st->epoch_seen > st->epoch_samples)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field 'epoch_seen' is %ld, not in 0..%ld ('epoch_samples'); "
                        CORRUPT_HINT, path, st->epoch_seen, st->epoch_samples);
    double correct = st->epoch_correct, loss = st->epoch_loss_sum;
    /* Not necessarily whole: a sequence counts the fraction of its positions right. */
    if (!(correct >= 0 && correct <= (double)st->epoch_seen))
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field 'epoch_correct' is %.17g, not a number in "
                        "0..%ld ('epoch_seen'); " CORRUPT_HINT, path, correct, st->epoch_seen);
    if (!(loss >= 0) || !isfinite(loss) || (st->epoch_seen == 0 && loss != 0))
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field 'epoch_loss_sum' is %.17g, not a finite sum >= 0 "
                        "(0 when 'epoch_seen' is); " CORRUPT_HINT, path, loss);
    return HERD_OK;
}

/* Floats of the optimizer's state copied out at a time while the file is written: the
 * host holds one such piece, not a copy of the state. */
#define DOWNLOAD_FLOATS ((size_t)1 << 22)

/* An optimizer's state tensor, given to the file a downloaded piece at a time
 * (herd_part_source). The tensors share buf: each is written whole before the next. */
typedef struct state_download {
    herd_optimizer *o;
    int tensor;
    size_t done, numel;
    float *buf;
} state_download;

static herd_status next_download(void *user, const void **piece, size_t *bytes)
{
    state_download *d = user;
    size_t n = d->numel - d->done < DOWNLOAD_FLOATS ? d->numel - d->done : DOWNLOAD_FLOATS;
    HERD_TRY(herd_optimizer_state_download(d->o, d->tensor, d->done, n, d->buf));
    d->done += n;
    *piece = d->buf;
    *bytes = n * sizeof(float);
    return HERD_OK;
}

/* The state file: the counters and position as metadata, and o's state, copied out of
 * the backend's memory a piece at a time (the host cannot read a device's), or
 * streamed from the slices. */
static herd_status write_state(const char *spath, herd_optimizer *o, const herd_train_state *st,
                               const herd_state_slices *slices)
{
    char v[17][40];
    snprintf(v[0], sizeof v[0], "%d", st->epoch);
    snprintf(v[1], sizeof v[1], "%ld", st->global_step);
    snprintf(v[2], sizeof v[2], "%" PRIu64, st->seed);
    snprintf(v[3], sizeof v[3], "%d", st->batch_size);
    snprintf(v[4], sizeof v[4], "%d", st->ranks);
    snprintf(v[5], sizeof v[5], "%d", st->grad_accum);
    snprintf(v[6], sizeof v[6], "%ld", (long)st->batch_size * st->ranks * st->grad_accum);
    snprintf(v[7], sizeof v[7], "%ld", st->train_samples);
    snprintf(v[8], sizeof v[8], "%ld", st->epoch_samples);
    snprintf(v[9], sizeof v[9], "%.17g", st->epoch_loss_sum);
    snprintf(v[10], sizeof v[10], "%.17g", st->epoch_correct);
    snprintf(v[11], sizeof v[11], "%ld", slices ? slices->optimizer_steps : herd_optimizer_steps(o));
    snprintf(v[12], sizeof v[12], "%ld", st->epoch_seen);
    snprintf(v[13], sizeof v[13], "%ld", st->clipped_steps);
    snprintf(v[14], sizeof v[14], "%ld", st->skipped_steps);
    snprintf(v[15], sizeof v[15], "%.9g", st->loss_scale);
    snprintf(v[16], sizeof v[16], "%ld", st->loss_scale_clean);
    const char *keys[] = {"epoch", "global_step", "seed", "batch_size", "ranks", "grad_accum",
                          "global_batch", "train_samples", "epoch_samples", "epoch_loss_sum",
                          "epoch_correct", "optimizer_steps", "epoch_seen", "clipped_steps",
                          "skipped_steps", "loss_scale", "loss_scale_clean_steps", "optimizer",
                          "herd_version", "exact_grid"};
    const char *values[] = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11],
                            v[12], v[13], v[14], v[15], v[16],
                            o ? herd_ckpt_kind_name(herd_optimizer_get_kind(o)) : "none", HERD_VERSION,
                            st->exact_grid};
    size_t n_keys = st->exact_grid[0] ? 20 : 19; /* the grid only where there is one */
    herd_st_entry e[HERD_CKPT_MAX_STATE] = {0};
    state_download down[HERD_CKPT_MAX_STATE];
    float *buf = NULL;
    int n = herd_optimizer_state_count(o);
    n = n < HERD_CKPT_MAX_STATE ? n : HERD_CKPT_MAX_STATE;
    for (int i = 0; i < n; i++) {
        size_t numel;
        herd_optimizer_state(o, i, &e[i].name, &numel);
        if (slices) { /* streamed from the ranks that hold the slices */
            e[i].next = slices->next[i];
            e[i].user = slices->user[i];
            numel = slices->numel;
        } else { /* in the backend's memory, a device's too: copied out a piece at a time */
            size_t floats = numel < DOWNLOAD_FLOATS ? numel : DOWNLOAD_FLOATS; /* the tensors' common size */
            if (!buf && !(buf = herd_xcalloc(floats ? floats : 1, sizeof *buf)))
                return HERD_ERR_NOMEM;
            down[i] = (state_download){.o = o, .tensor = i, .numel = numel, .buf = buf};
            e[i].next = next_download;
            e[i].user = &down[i];
        }
        e[i].ndim = 1;
        e[i].shape[0] = (int64_t)numel;
    }
    herd_status rc = herd_safetensors_write(spath, e, (size_t)n, keys, values, n_keys);
    free(buf);
    return rc;
}

herd_status herd_checkpoint_save(const char *dir, const herd_model *m, herd_optimizer *o,
                                 const herd_train_state *st, const herd_state_slices *slices,
                                 int keep)
{
    if (!dir || !*dir || !m || !st)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "checkpoint_save: directory, model and state must be given");
    if (st->legacy)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "checkpoint_save: a legacy state has no position to save");
    if (herd_ckpt_check_state(st, "checkpoint_save") != HERD_OK)
        return HERD_ERR_INVALID_ARG; /* a bug in the caller; the message names the field */
    HERD_TRY(herd_make_dirs(dir, "--checkpoint-dir"));

    char base[48];
    snprintf(base, sizeof base, "ckpt-%ld", st->global_step);
    char *wpath = herd_ckpt_path(dir, base, ".safetensors");
    char *spath = herd_ckpt_path(dir, base, ".state.safetensors");
    char *lpath = herd_ckpt_path(dir, "latest", "");
    herd_status rc = (wpath && spath && lpath) ? HERD_OK : HERD_ERR_NOMEM;

    if (rc == HERD_OK) {
        const char *keys[] = {"format", "herd_version", "model", "global_step"};
        char gs[32];
        snprintf(gs, sizeof gs, "%ld", st->global_step);
        const char *values[] = {"pt", HERD_VERSION, m->name, gs};
        rc = herd_weights_write(m, wpath, keys, values, 4);
    }
    if (rc == HERD_OK)
        rc = write_state(spath, o, st, slices);
    if (rc == HERD_OK) {
        char text[64];
        int len = snprintf(text, sizeof text, "%s\n", base);
        const void *parts[] = {text};
        size_t lens[] = {(size_t)len};
        rc = herd_write_file_atomic(lpath, parts, lens, 1);
    }
    if (rc == HERD_OK)
        prune(dir, st->global_step, keep);
    free(wpath);
    free(spath);
    free(lpath);
    return rc;
}

/* "<name>.tmp.XXXXXX" of a file herd_checkpoint_save writes (herd_write_file_atomic's
 * temporaries); nothing else in the directory is touched. */
static bool is_stale_tmp(const char *name)
{
    const char *tmp = strstr(name, ".tmp.");
    if (!tmp || strlen(tmp + 5) != 6)
        return false;
    char base[256];
    size_t len = (size_t)(tmp - name);
    if (len >= sizeof base)
        return false;
    memcpy(base, name, len);
    base[len] = '\0';
    long step;
    return strcmp(base, "latest") == 0 || herd_ckpt_parse_name(base, ".safetensors", &step) == 0 ||
           herd_ckpt_parse_name(base, ".state.safetensors", &step) == 0;
}

herd_status herd_checkpoint_remove_stale(const char *dir, int *removed)
{
    *removed = 0;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT || errno == ENOTDIR
                   ? HERD_OK
                   : HERD_ERR(HERD_ERR_IO, "cannot list the checkpoint directory '%s': %s", dir,
                              strerror(errno));
    herd_status rc = HERD_OK;
    struct dirent *ent;
    while (rc == HERD_OK && (ent = readdir(d)) != NULL) {
        if (!is_stale_tmp(ent->d_name))
            continue;
        char *path = herd_ckpt_path(dir, ent->d_name, "");
        if (!path)
            rc = HERD_ERR_NOMEM;
        else if (unlink(path) != 0 && errno != ENOENT)
            rc = HERD_ERR(HERD_ERR_IO, "cannot remove '%s', left by an interrupted checkpoint write: "
                          "%s; remove it by hand", path, strerror(errno));
        else
            ++*removed;
        free(path);
    }
    closedir(d);
    return rc;
}
