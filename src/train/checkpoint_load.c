/* Reading a checkpoint back: DIR/latest names the pair; both files are read and every
 * field, checksum, value and the optimizer's state checked against the run before
 * anything changes, and a refused checkpoint's error names an earlier one that passes.
 * Also fitting the state read to this run (herd_train_state_continue). */
#include "train/checkpoint_file.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/finite.h"
#include "core/log.h"
#include "core/safetensors.h"
#include "nn/weights.h"

/* A required integer in min..max in the state file's metadata. */
static herd_status meta_int(const herd_st_file *f, const char *path, const char *key,
                            unsigned long long min, unsigned long long max, unsigned long long *out)
{
    const char *s = herd_st_meta(f, key);
    if (!s)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field '%s' is missing; " CORRUPT_HINT, path, key);
    char *end = NULL;
    unsigned long long v = 0;
    errno = 0;
    /* strtoull alone would accept "-1" and wrap it. */
    if (isdigit((unsigned char)s[0]))
        v = strtoull(s, &end, 10);
    if (!end || *end != '\0' || errno != 0 || v < min || v > max)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field '%s' is '%.40s', not an integer in %llu..%llu; "
                        CORRUPT_HINT, path, key, s, min, max);
    *out = v;
    return HERD_OK;
}

/* A required finite number in the state file's metadata (ranges: herd_ckpt_check_state). */
static herd_status meta_double(const herd_st_file *f, const char *path, const char *key, double *out)
{
    const char *s = herd_st_meta(f, key);
    if (!s)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field '%s' is missing; " CORRUPT_HINT, path, key);
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !isfinite(v))
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field '%s' is '%.40s', not a finite number; " CORRUPT_HINT,
                        path, key, s);
    *out = v;
    return HERD_OK;
}

/* The state file's counters and position; *osteps the optimizer's step count. */
static herd_status read_state(const herd_st_file *sf, const char *spath, long name_step,
                              herd_train_state *st, long *osteps)
{
    unsigned long long epoch = 0, gstep = 0, seed = 0, batch = 0, ost = 0, ranks = 0, accum = 0, gbatch, n = 0, pos = 0, seen = 0;
    const unsigned long long max_step = HERD_CKPT_MAX_STEP;
    *st = (herd_train_state){0};
    HERD_TRY(meta_int(sf, spath, "epoch", 0, INT_MAX - 1, &epoch));
    HERD_TRY(meta_int(sf, spath, "global_step", 0, max_step, &gstep));
    HERD_TRY(meta_int(sf, spath, "seed", 0, UINT64_MAX, &seed));
    HERD_TRY(meta_int(sf, spath, "batch_size", 1, INT_MAX, &batch));
    HERD_TRY(meta_int(sf, spath, "optimizer_steps", 0, max_step, &ost));
    if ((long)gstep != name_step)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field 'global_step' is %llu but the file's name says %ld; "
                        "the files are mixed up, delete this checkpoint", spath, gstep, name_step);
    if (ost > gstep)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field 'optimizer_steps' is %llu, more than 'global_step' "
                        "%llu; " CORRUPT_HINT, spath, ost, gstep);
    st->legacy = herd_st_meta(sf, "epoch_samples") == NULL;
    if (!st->legacy) {
        HERD_TRY(meta_int(sf, spath, "ranks", 1, INT_MAX, &ranks));
        HERD_TRY(meta_int(sf, spath, "grad_accum", 1, INT_MAX, &accum));
        HERD_TRY(meta_int(sf, spath, "global_batch", 1, LONG_MAX, &gbatch));
        HERD_TRY(meta_int(sf, spath, "train_samples", 1, UINT32_MAX, &n));
        HERD_TRY(meta_int(sf, spath, "epoch_samples", 0, UINT32_MAX, &pos));
        HERD_TRY(meta_int(sf, spath, "epoch_seen", 0, UINT32_MAX, &seen));
        HERD_TRY(meta_double(sf, spath, "epoch_loss_sum", &st->epoch_loss_sum));
        HERD_TRY(meta_double(sf, spath, "epoch_correct", &st->epoch_correct));
        if (gbatch != batch * ranks * accum)
            return HERD_ERR(HERD_ERR_FORMAT, "'%s': field 'global_batch' is %llu, not 'batch_size' x "
                            "'ranks' x 'grad_accum' = %llu; " CORRUPT_HINT, spath, gbatch, batch * ranks * accum);
    }
    /* Checkpoints before these counters were kept: counted from 0, the scale from
     * --loss-scale-init (docs/reliability.md). */
    unsigned long long clipped = 0, skipped = 0, clean = 0;
    if (herd_st_meta(sf, "clipped_steps")) {
        HERD_TRY(meta_int(sf, spath, "clipped_steps", 0, gstep, &clipped));
        HERD_TRY(meta_int(sf, spath, "skipped_steps", 0, gstep, &skipped));
        HERD_TRY(meta_int(sf, spath, "loss_scale_clean_steps", 0, gstep, &clean));
        HERD_TRY(meta_double(sf, spath, "loss_scale", &st->loss_scale));
    }
    /* --deterministic's grid: checked here for its form, against the model when used. */
    const char *grid = herd_st_meta(sf, "exact_grid");
    if (grid) {
        size_t len = strlen(grid);
        if (len == 0 || len >= sizeof st->exact_grid || strspn(grid, "-0123456789,") != len)
            return HERD_ERR(HERD_ERR_FORMAT, "'%s': field 'exact_grid' is not a list of exponents "
                            "(%zu bytes); " CORRUPT_HINT, spath, len);
        memcpy(st->exact_grid, grid, len + 1);
    }
    st->clipped_steps = (long)clipped;
    st->skipped_steps = (long)skipped;
    st->loss_scale_clean = (long)clean;
    st->epoch = (int)epoch;
    st->global_step = (long)gstep;
    st->seed = (uint64_t)seed;
    st->batch_size = (int)batch;
    st->ranks = (int)ranks;
    st->grad_accum = (int)accum;
    st->train_samples = (long)n;
    st->epoch_samples = (long)pos;
    st->epoch_seen = (long)seen;
    *osteps = (long)ost;
    return herd_ckpt_check_state(st, spath);
}

/* The first non-finite value of f's tensors: an error naming the file, the tensor and
 * the index (core/finite.h: one pass over a clean file). */
static herd_status check_finite(const herd_st_file *f, const char *path)
{
    for (size_t t = 0; t < herd_st_count(f); t++) {
        const char *name = herd_st_name(f, t);
        int ndim;
        int64_t shape[4];
        const float *x = herd_st_find(f, name, &ndim, shape);
        size_t n = 1;
        for (int d = 0; d < ndim; d++)
            n *= (size_t)shape[d];
        size_t first = herd_first_nonfinite(x, n), count = 0;
        if (first == n)
            continue;
        for (size_t i = first; i < n; i++)
            count += !isfinite(x[i]);
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': tensor '%s' holds %g at index %zu (%zu of its %zu "
                        "values are not finite); " CORRUPT_HINT, path, name, (double)x[first], first,
                        count, n);
    }
    return HERD_OK;
}

/* A file herd wrote before checksums were kept is read as before, once said. */
static void note_unsummed(const herd_st_file *f, const char *path)
{
    if (!herd_st_meta(f, HERD_ST_SUM_KEY))
        herd_log(HERD_LOG_WARNING, "'%s' has no checksum (written by an older herd): its values are "
                 "checked, a changed byte is not found", path);
}

/* The weights' step must be the state's (a renamed or mixed-up file otherwise loads). */
static herd_status check_pair(const herd_st_file *wf, const char *wpath, const char *spath, long step)
{
    const char *s = herd_st_meta(wf, "global_step");
    if (!s) { /* before herd recorded it: nothing to compare */
        herd_log(HERD_LOG_WARNING, "'%s' does not record its step (written by an older herd): that it "
                 "belongs with '%s' is not checked", wpath, spath);
        return HERD_OK;
    }
    char *end;
    errno = 0;
    long w = isdigit((unsigned char)s[0]) ? strtol(s, &end, 10) : -1;
    if (w < 0 || errno || *end)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field 'global_step' is '%.40s', not a step; " CORRUPT_HINT,
                        wpath, s);
    if (w != step)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s' holds the weights of step %ld but '%s' the state of step "
                        "%ld: the files are from different checkpoints; " CORRUPT_HINT, wpath, w, spath,
                        step);
    return HERD_OK;
}

/* Reads DIR/<base>'s two files and checks everything against m and o, changing
 * nothing: on success the caller owns *wf and *sf. */
static herd_status verify_checkpoint(const char *dir, const char *base, long step, const herd_model *m,
                                     herd_optimizer *o, herd_st_file **wf, herd_st_file **sf,
                                     herd_train_state *loaded, long *osteps, bool quiet)
{
    *wf = *sf = NULL;
    char *wpath = herd_ckpt_path(dir, base, ".safetensors");
    char *spath = herd_ckpt_path(dir, base, ".state.safetensors");
    herd_status rc = (wpath && spath) ? HERD_OK : HERD_ERR_NOMEM;
    if (rc == HERD_OK)
        rc = herd_safetensors_read(wpath, wf);
    if (rc == HERD_OK)
        rc = herd_safetensors_read(spath, sf);
    if (rc == HERD_OK && !quiet) {
        note_unsummed(*wf, wpath);
        note_unsummed(*sf, spath);
    }
    if (rc == HERD_OK)
        rc = herd_weights_check(m, *wf, wpath);
    if (rc == HERD_OK)
        rc = read_state(*sf, spath, step, loaded, osteps);
    if (rc == HERD_OK)
        rc = quiet && !herd_st_meta(*wf, "global_step") ? HERD_OK : check_pair(*wf, wpath, spath, step);
    if (rc == HERD_OK && o) {
        const char *kind = herd_st_meta(*sf, "optimizer");
        const char *want = herd_ckpt_kind_name(herd_optimizer_get_kind(o));
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
            if (!herd_st_find(*sf, name, &ndim, shape) || ndim != 1 || (size_t)shape[0] != numel)
                rc = HERD_ERR(HERD_ERR_FORMAT,
                              "'%s' lacks optimizer state '%s' of %zu floats; was it saved from a "
                              "different model?", spath, name, numel);
        }
    }
    if (rc == HERD_OK)
        rc = check_finite(*wf, wpath);
    if (rc == HERD_OK)
        rc = check_finite(*sf, spath);
    if (rc != HERD_OK) {
        herd_st_free(*wf);
        herd_st_free(*sf);
        *wf = *sf = NULL;
    }
    free(wpath);
    free(spath);
    return rc;
}

/* The newest checkpoint in dir older than step `below` that passes verify_checkpoint; -1
 * if none. Newer ones are left out: above this run's newest they are another run's
 * leftovers (prune keeps them), not a place to go back to. *seen: how many were older. */
static long earlier_good(const char *dir, long below, const herd_model *m, herd_optimizer *o,
                         size_t *seen)
{
    *seen = 0;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    long *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        long s;
        if (herd_ckpt_parse_name(ent->d_name, ".state.safetensors", &s) != 0 || s >= below)
            continue;
        if (n == cap) {
            long *g = realloc(steps, (cap = cap ? 2 * cap : 8) * sizeof *g);
            if (!g)
                break;
            steps = g;
        }
        steps[n++] = s;
    }
    closedir(d);
    *seen = n;
    if (n > 0) /* qsort's array may not be NULL, even empty */
        qsort(steps, n, sizeof *steps, herd_ckpt_cmp_desc);
    long good = -1;
    for (size_t i = 0; i < n && good < 0; i++) {
        char base[48];
        snprintf(base, sizeof base, "ckpt-%ld", steps[i]);
        herd_st_file *wf, *sf;
        herd_train_state st;
        long osteps;
        if (verify_checkpoint(dir, base, steps[i], m, o, &wf, &sf, &st, &osteps, true) == HERD_OK)
            good = steps[i];
        herd_st_free(wf);
        herd_st_free(sf);
    }
    free(steps);
    return good;
}

/* DIR/latest's checkpoint name and step; *found false when there is none. */
static herd_status read_latest(const char *dir, char text[80], long *step, bool *found)
{
    char *lpath = herd_ckpt_path(dir, "latest", "");
    if (!lpath)
        return HERD_ERR_NOMEM;
    herd_status rc = HERD_OK;
    struct stat sb;
    FILE *lf = NULL;
    if (stat(lpath, &sb) == 0 && S_ISDIR(sb.st_mode))
        rc = HERD_ERR(HERD_ERR_FORMAT, "'%s' is a directory; it should be a file naming the newest "
                      "checkpoint, like 'ckpt-1000': replace it with such a file, or move the directory's "
                      "checkpoints away to start afresh", lpath);
    else if (!(lf = fopen(lpath, "rb")) && errno != ENOENT && errno != ENOTDIR)
        rc = HERD_ERR(HERD_ERR_IO, "cannot read '%s': %s", lpath, strerror(errno));
    if (!lf) {
        free(lpath);
        return rc; /* none yet: a fresh start */
    }
    char raw[81] = "";
    size_t got = fread(raw, 1, 80, lf); /* a name fits in 79 (ckpt- and 19 digits, and more) */
    fclose(lf);
    while (got > 0 && isspace((unsigned char)raw[got - 1]))
        raw[--got] = '\0';
    /* A NUL byte or a tail the 79 bytes cut off would otherwise pass as the name before it. */
    bool clean = got < 80 && memchr(raw, '\0', got) == NULL;
    memcpy(text, raw, 80);
    text[79] = '\0';
    if (!clean || herd_ckpt_parse_name(text, "", step) != 0)
        rc = HERD_ERR(HERD_ERR_FORMAT, "'%s' should hold one checkpoint name like 'ckpt-1000' but "
                      "holds %s'%.40s'; write the name of a checkpoint in the directory into "
                      "it, or move the checkpoints away to start afresh", lpath,
                      got >= 80 ? "80 bytes or more, beginning " : !clean ? "a NUL byte after " : "",
                      text);
    *found = rc == HERD_OK;
    free(lpath);
    return rc;
}

herd_status herd_checkpoint_latest_weights(const char *dir, char *path, size_t cap)
{
    if (!dir || !path || cap == 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "checkpoint_latest_weights: directory and path must be given");
    char text[80];
    long step;
    bool found = false;
    HERD_TRY(read_latest(dir, text, &step, &found));
    if (!found)
        return HERD_ERR(HERD_ERR_IO, "'%s' holds no checkpoint ('%s/latest' is missing): give the "
                        "directory a training run's --checkpoint-dir wrote, or a .safetensors file",
                        dir, dir);
    if ((size_t)snprintf(path, cap, "%s/%s.safetensors", dir, text) >= cap)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "checkpoint_latest_weights: the path "
                        "'%s/%s.safetensors' does not fit in %zu bytes", dir, text, cap);
    return HERD_OK;
}

/* What reading the pair costs at most, counted against --memory-limit before it is
 * spent: each file's tensors stay until applied, and each file is first read whole
 * (herd_safetensors_read), the larger of those two buffers at the peak. A file that
 * cannot be stat'ed counts 0 here; reading it says why. */
static herd_status read_buffers_hold(const char *dir, const char *base, uint64_t *held)
{
    char *wpath = herd_ckpt_path(dir, base, ".safetensors");
    char *spath = herd_ckpt_path(dir, base, ".state.safetensors");
    herd_status rc = wpath && spath ? HERD_OK : HERD_ERR_NOMEM;
    struct stat ws, ss;
    uint64_t w = rc == HERD_OK && stat(wpath, &ws) == 0 ? (uint64_t)ws.st_size : 0;
    uint64_t s = rc == HERD_OK && stat(spath, &ss) == 0 ? (uint64_t)ss.st_size : 0;
    uint64_t bytes = w + s + (w > s ? w : s);
    if (rc == HERD_OK && (rc = herd_host_memory_hold(bytes, HERD_MEM_CHECKPOINT)) != HERD_OK)
        rc = HERD_ERR(rc, "resuming from '%s' and '%s': %s", wpath, spath, herd_last_error());
    *held = rc == HERD_OK ? bytes : 0;
    free(wpath);
    free(spath);
    return rc;
}

/* No DIR/latest: a fresh start (*step -1), unless checkpoints lie there. latest is
 * written last, so a job killed between its first checkpoint's files and latest leaves
 * them without it (as does a deleted latest): the newest that passes every check is
 * resumed from, said in a warning; starting over would prune them. */
static herd_status no_latest(const char *dir, const herd_model *m, herd_optimizer *o, long *step)
{
    size_t seen;
    *step = earlier_good(dir, LONG_MAX, m, o, &seen);
    if (*step >= 0)
        herd_log(HERD_LOG_WARNING, "--resume: '%s/latest' is missing; resuming from 'ckpt-%ld', "
                 "the newest checkpoint in '%s' that passes every check", dir, *step, dir);
    else if (seen > 0)
        return HERD_ERR(HERD_ERR_FORMAT, "--resume: '%s/latest' is missing and none of the %zu "
                        "checkpoints in '%s' passes the checks (another model's, or damaged): move "
                        "them away to start afresh, or choose another --checkpoint-dir",
                        dir, seen, dir);
    return HERD_OK;
}

herd_status herd_checkpoint_load_latest(const char *dir, herd_model *m, herd_optimizer *o,
                                        herd_train_state *st, bool *found)
{
    if (!dir || !m || !st || !found)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "checkpoint_load_latest: directory, model, state and found must be given");
    *found = false;
    char text[80];
    long step;
    bool have = false;
    HERD_TRY(read_latest(dir, text, &step, &have));
    if (!have) {
        HERD_TRY(no_latest(dir, m, o, &step));
        if (step < 0)
            return HERD_OK;
        snprintf(text, sizeof text, "ckpt-%ld", step);
    }
    uint64_t held;
    HERD_TRY(read_buffers_hold(dir, text, &held));
    herd_st_file *wf, *sf;
    herd_train_state loaded;
    long osteps = 0;
    herd_status rc = verify_checkpoint(dir, text, step, m, o, &wf, &sf, &loaded, &osteps, false);
    if (rc != HERD_OK && rc != HERD_ERR_NOMEM) {
        char why[1024];
        snprintf(why, sizeof why, "%s", herd_last_error());
        size_t seen;
        long good = earlier_good(dir, step, m, o, &seen); /* under the same hold: one pair at a time */
        if (good >= 0)
            rc = HERD_ERR(rc, "%s. '%s/ckpt-%ld' passes every check: to resume from it, run "
                          "printf 'ckpt-%ld\\n' > '%s/latest' and then this command again", why, dir,
                          good, good, dir);
        else
            rc = HERD_ERR(rc, "%s. No older checkpoint in '%s' passes the checks either", why, dir);
    }
    /* Only now that both files are known good does anything change. */
    if (rc == HERD_OK)
        rc = herd_weights_apply(m, wf);
    for (int i = 0; rc == HERD_OK && o && i < herd_optimizer_state_count(o); i++) {
        const char *name;
        size_t numel;
        herd_optimizer_state(o, i, &name, &numel);
        rc = herd_optimizer_state_upload(o, i, 0, numel, herd_st_find(sf, name, NULL, NULL));
    }
    if (rc == HERD_OK) {
        herd_optimizer_set_steps(o, osteps);
        *st = loaded;
        *found = true;
    }
    herd_st_free(wf);
    herd_st_free(sf);
    herd_host_memory_release(held, HERD_MEM_CHECKPOINT);
    return rc;
}

herd_status herd_train_state_continue(herd_train_state *st, const herd_train_state *now,
                                      long steps_per_epoch, const char *dir)
{
    long global_batch = (long)now->batch_size * now->ranks * now->grad_accum;
    if (st->legacy) {
        /* Older checkpoints kept only the step: the position follows from it when the
         * steps per epoch are this run's, which only the user can vouch for. */
        long step_in_epoch = st->global_step - (long)st->epoch * steps_per_epoch;
        if (st->seed != now->seed || st->batch_size != now->batch_size || step_in_epoch < 0 ||
            step_in_epoch >= steps_per_epoch)
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "the checkpoint in '%s' comes from an older herd that does not record its "
                            "position in the epoch (step %ld, %d epochs done, seed %llu, batch size %d); "
                            "at this run's %ld steps per epoch, seed %llu and batch size %d it does not "
                            "fall inside epoch %d: resume with the ranks, --batch-size, --grad-accum, "
                            "--train-samples and --seed it was trained with",
                            dir, st->global_step, st->epoch, (unsigned long long)st->seed,
                            st->batch_size, steps_per_epoch, (unsigned long long)now->seed,
                            now->batch_size, st->epoch + 1);
        st->epoch_samples = step_in_epoch * global_batch;
        st->epoch_seen = 0; /* the sums are unknown: the epoch's figures cover this run's part */
        st->epoch_loss_sum = st->epoch_correct = 0;
    } else if (st->epoch_samples > 0 && st->seed != now->seed) {
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "the checkpoint in '%s' stopped %ld samples into epoch %d, whose order comes "
                        "from seed %llu; seed %llu orders it differently, so the epoch cannot be "
                        "continued: resume with --seed %llu",
                        dir, st->epoch_samples, st->epoch + 1, (unsigned long long)st->seed,
                        (unsigned long long)now->seed, (unsigned long long)st->seed);
    } else if (st->epoch_samples > 0 && st->train_samples != now->train_samples) {
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "the checkpoint in '%s' stopped %ld of %ld samples into epoch %d; this run has "
                        "%ld training samples, whose permutation differs, so the epoch cannot be "
                        "continued: resume with the same data and --train-samples (the ranks, "
                        "--batch-size and --grad-accum may change), or from a checkpoint at an epoch end",
                        dir, st->epoch_samples, st->train_samples, st->epoch + 1, now->train_samples);
    }
    st->legacy = false;
    st->seed = now->seed;
    st->batch_size = now->batch_size;
    st->ranks = now->ranks;
    st->grad_accum = now->grad_accum;
    st->train_samples = now->train_samples;
    return HERD_OK;
}
