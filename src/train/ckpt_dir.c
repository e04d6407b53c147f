/* A checkpoint directory's claim: created, test-written, locked, its run checked. */
#include "train/ckpt_dir.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "train/checkpoint_file.h"

#define FLAG "--checkpoint-dir"

static void host_name(char *out, size_t cap)
{
    if (gethostname(out, cap - 1) != 0)
        snprintf(out, cap, "?");
    out[cap - 1] = '\0';
}

static void utc_now(char *out, size_t cap)
{
    time_t t = time(NULL);
    struct tm tm;
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
}

/* A small file written, fsynced and removed: a directory that cannot take it would
 * otherwise fail at the first checkpoint, after training. */
static herd_status test_write(const char *dir)
{
    char host[128], path[4096];
    host_name(host, sizeof host);
    snprintf(path, sizeof path, "%s/.herd-write-test.%s.%ld", dir, host, (long)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const char *step = "create";
    bool ok = fd >= 0;
    if (ok) {
        step = "write";
        ok = write(fd, "herd\n", 5) == 5;
    }
    if (ok) {
        step = "fsync";
        ok = fsync(fd) == 0;
    }
    int err = errno;
    if (fd >= 0 && close(fd) != 0 && ok) {
        step = "close";
        ok = false;
        err = errno;
    }
    if (fd >= 0 && unlink(path) != 0 && ok) {
        step = "remove";
        ok = false;
        err = errno;
    }
    if (!ok)
        return HERD_ERR(HERD_ERR_IO, "checkpoint directory '%s' (" FLAG ") is not writable: cannot %s "
                        "the test file '%s': %s; choose a directory on a file system this user can write",
                        dir, step, path, strerror(err));
    return HERD_OK;
}

/* The lock, or a refusal naming the process that holds it (from the lock file). */
static herd_status take_lock(herd_ckpt_dir *d, const char *dir, double wait_s)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return HERD_ERR(HERD_ERR_IO, "cannot open the lock file '%s' of checkpoint directory '%s' (" FLAG
                        "): %s", path, dir, strerror(errno));
    double deadline = herd_now() + wait_s;
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        if (err == EINTR)
            continue;
        if (err == EWOULDBLOCK && herd_now() < deadline) {
            nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
            continue;
        }
        char owner[512] = "";
        ssize_t n = err == EWOULDBLOCK ? pread(fd, owner, sizeof owner - 1, 0) : -1;
        close(fd);
        if (err != EWOULDBLOCK)
            return HERD_ERR(HERD_ERR_IO, "cannot lock '%s' (" FLAG "): %s", path, strerror(err));
        owner[n > 0 ? n : 0] = '\0';
        owner[strcspn(owner, "\n")] = '\0';
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "checkpoint directory '%s' (" FLAG ") is in use by another herd job (%s; "
                        "lock file '%s'): two jobs in one directory replace each other's checkpoints; "
                        "wait for it to end or stop it, or choose another " FLAG, dir,
                        owner[0] ? owner : "its host and pid not yet written", path);
    }
    /* Who holds it, for the next job's refusal. */
    char host[128], when[32], line[256];
    host_name(host, sizeof host);
    utc_now(when, sizeof when);
    int len = snprintf(line, sizeof line, "pid %ld on host %s, since %s\n", (long)getpid(), host, when);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len) {
        int err = errno;
        close(fd);
        return HERD_ERR(HERD_ERR_IO, "cannot write the lock file '%s' (" FLAG "): %s", path, strerror(err));
    }
    d->lock_fd = fd;
    return HERD_OK;
}

/* A field of run.json, strictly: a string (num NULL) or an integral number. */
static herd_status field(const cJSON *doc, const char *path, const char *key, const char **str,
                         double *num)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, key);
    bool ok = str ? cJSON_IsString(v) : cJSON_IsNumber(v) && v->valuedouble >= 0 &&
                                            v->valuedouble == (double)(long long)v->valuedouble;
    if (!ok)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': field '%s' is missing or not %s; the file records the "
                        "run whose checkpoints the directory holds: restore it, or remove it if they "
                        "are this run's", path, key, str ? "a string" : "a whole number");
    if (str)
        *str = v->valuestring;
    else
        *num = v->valuedouble;
    return HERD_OK;
}

typedef struct recorded {
    const char *model, *data, *started;
    double parameters, seed, global_batch;
} recorded;

static herd_status read_recorded(const cJSON *doc, const char *path, recorded *r)
{
    HERD_TRY(field(doc, path, "model", &r->model, NULL));
    HERD_TRY(field(doc, path, "parameters", NULL, &r->parameters));
    HERD_TRY(field(doc, path, "data", &r->data, NULL));
    HERD_TRY(field(doc, path, "seed", NULL, &r->seed));
    HERD_TRY(field(doc, path, "global_batch", NULL, &r->global_batch));
    return field(doc, path, "started", &r->started, NULL);
}

/* "model 'a' (N parameters) there, 'b' (M) here; seed ..." for what differs: model,
 * data and seed. Empty when the runs are one. */
static void differences(const recorded *r, const herd_run_identity *id, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
#define ADD(...) n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, __VA_ARGS__)
    if (strcmp(r->model, id->model) != 0 || r->parameters != (double)id->parameters)
        ADD("%smodel '%s' (%.0f parameters) there, '%s' (%zu) here", n ? "; " : "", r->model,
            r->parameters, id->model, id->parameters);
    if (strcmp(r->data, id->data) != 0)
        ADD("%sdata '%s' there, '%s' here", n ? "; " : "", r->data, id->data);
    if (r->seed != (double)id->seed)
        ADD("%s--seed %.0f there, %llu here", n ? "; " : "", r->seed, (unsigned long long)id->seed);
#undef ADD
}

static herd_status write_identity(const char *path, const herd_run_identity *id)
{
    char when[32];
    utc_now(when, sizeof when);
    cJSON *doc = cJSON_CreateObject();
    if (!doc)
        return HERD_NOMEM(1024);
    cJSON_AddStringToObject(doc, "model", id->model);
    cJSON_AddNumberToObject(doc, "parameters", (double)id->parameters);
    cJSON_AddStringToObject(doc, "data", id->data);
    cJSON_AddNumberToObject(doc, "train_samples", (double)id->train_samples);
    cJSON_AddNumberToObject(doc, "seed", (double)id->seed);
    cJSON_AddNumberToObject(doc, "global_batch", (double)id->global_batch);
    cJSON_AddStringToObject(doc, "started", when);
    char *text = cJSON_Print(doc);
    cJSON_Delete(doc);
    if (!text)
        return HERD_NOMEM(1024);
    /* Written, fsynced, renamed. Not herd_write_file_atomic: its test hook
     * (HERD_TEST_KILL_IN_WRITE) counts the checkpoints' own writes. The lock makes the
     * temporary's fixed name safe. */
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    FILE *f = fopen(tmp, "w");
    bool ok = f && fprintf(f, "%s\n", text) > 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno;
    if (f && fclose(f) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = false;
        err = errno;
    }
    free(text);
    if (ok)
        return HERD_OK;
    unlink(tmp);
    return HERD_ERR(HERD_ERR_IO, "cannot write the run record '%s' (" FLAG "): %s", path, strerror(err));
}

/* Whether dir holds a checkpoint: latest, or a checkpoint file without it (latest
 * deleted, or lost with a file system's last writes). */
static bool holds_checkpoints(const char *dir, const char *latest)
{
    struct stat sb;
    if (stat(latest, &sb) == 0)
        return true;
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool any = false;
    long step;
    struct dirent *ent;
    while (!any && (ent = readdir(d)) != NULL)
        any = herd_ckpt_parse_name(ent->d_name, ".safetensors", &step) == 0 ||
              herd_ckpt_parse_name(ent->d_name, ".state.safetensors", &step) == 0;
    closedir(d);
    return any;
}

/* run.json against this run: the rules of docs/reliability.md. */
static herd_status check_identity(const char *dir, const herd_run_identity *id, bool resume)
{
    char path[4096], latest[4096];
    snprintf(path, sizeof path, "%s/run.json", dir);
    snprintf(latest, sizeof latest, "%s/latest", dir);
    struct stat sb;
    bool has_ckpt = holds_checkpoints(dir, latest);
    bool has_record = stat(path, &sb) == 0;
    /* No checkpoint: nothing to continue or protect; this run's record replaces any. */
    if (!has_ckpt || !has_record)
        return write_identity(path, id);
    char *text;
    HERD_TRY(herd_read_text(path, "run record", "check the directory's permissions", &text));
    cJSON *doc = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        return HERD_ERR(HERD_ERR_FORMAT, "'%s' is not a JSON object; the file records the run whose "
                        "checkpoints the directory holds: restore it, or remove it if they are this run's",
                        path);
    }
    recorded r = {0};
    herd_status st = read_recorded(doc, path, &r);
    char diff[2048] = "";
    if (st == HERD_OK)
        differences(&r, id, diff, sizeof diff);
    if (st == HERD_OK && diff[0] && resume)
        st = HERD_ERR(HERD_ERR_INVALID_ARG, "--resume: the checkpoints in '%s' are of another run "
                      "(started %s): %s; resume with that run's --model, --data and --seed, or choose "
                      "another " FLAG, dir, r.started, diff);
    else if (st == HERD_OK && diff[0])
        st = HERD_ERR(HERD_ERR_INVALID_ARG, "'%s' holds the checkpoints of another run (model '%s', data "
                      "'%s', seed %.0f, started %s), which this run would overwrite: %s; resume that run "
                      "with its own flags and --resume, or choose another " FLAG, dir, r.model, r.data,
                      r.seed, r.started, diff);
    else if (st == HERD_OK && resume && r.global_batch != (double)id->global_batch)
        herd_log(HERD_LOG_INFO, "resuming the run started %s in '%s' with a global batch of %ld "
                 "samples instead of its %.0f (allowed: the position in the epoch is kept in samples)",
                 r.started, dir, id->global_batch, r.global_batch);
    cJSON_Delete(doc);
    /* A new run in the directory of an earlier one of its kind: its own record. */
    if (st == HERD_OK && !resume)
        st = write_identity(path, id);
    return st;
}

herd_status herd_ckpt_dir_claim(herd_ckpt_dir *d, const char *dir, const herd_run_identity *id,
                                bool resume, double wait_s)
{
    if (!dir || !*dir)
        return HERD_ERR(HERD_ERR_INVALID_ARG, FLAG " is empty: name a directory");
    HERD_TRY(herd_make_dirs(dir, FLAG));
    HERD_TRY(test_write(dir));
    HERD_TRY(take_lock(d, dir, wait_s));
    herd_status st = check_identity(dir, id, resume);
    if (st != HERD_OK)
        herd_ckpt_dir_release(d);
    return st;
}

void herd_ckpt_dir_release(herd_ckpt_dir *d)
{
    if (d->lock_fd >= 0)
        close(d->lock_fd); /* the lock goes with its last descriptor */
    d->lock_fd = -1;
}
