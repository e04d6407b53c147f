/* Restart accounting (restarts.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "train/restarts.h"

#define RECORD_BYTES 160

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

herd_status herd_restart_log_open(herd_restart_log *l, const char *dir, int attempt, long resumed_step)
{
    *l = (herd_restart_log){.fd = -1};
    if (attempt < 1 || !dir)
        return HERD_OK;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/progress", dir) >= (int)sizeof path)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "checkpoint directory path too long: '%.80s...'", dir);
    HERD_TRY(herd_make_dirs(dir, "--checkpoint-dir"));
    l->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (l->fd < 0)
        return HERD_ERR(HERD_ERR_IO, "cannot open '%s' to record training's progress for restarts: %s",
                        path, strerror(errno));
    l->restarts = attempt - 1;
    l->resumed_step = resumed_step;
    if (attempt == 1) /* a new job: an older job's record in the directory is not ours */
        return HERD_OK;
    char rec[RECORD_BYTES + 1] = "";
    ssize_t got = pread(l->fd, rec, RECORD_BYTES, 0);
    long step = 0, lost = 0;
    int restarts = 0;
    double at = 0, recovery = 0;
    int used = 0;
    if (got > 0 && sscanf(rec, "herd-progress step=%ld time=%lf restarts=%d lost_steps=%ld recovery_s=%lf%n",
                          &step, &at, &restarts, &lost, &recovery, &used) == 5 && used > 0 &&
        step >= 0 && lost >= 0 && recovery >= 0 && at > 0) {
        l->last_lost = step > resumed_step ? step - resumed_step : 0;
        l->lost_steps = lost + l->last_lost;
        l->recovery_s = recovery;
        l->failed_at = at;
    } else if (got != 0) {
        herd_log(HERD_LOG_WARNING, "'%s' holds no progress record ('%.40s'); this restart's lost steps "
                 "and time are not counted", path, got > 0 ? rec : strerror(errno));
    }
    l->measuring = true;
    return HERD_OK;
}

bool herd_restart_log_step(herd_restart_log *l, long step)
{
    if (l->fd < 0)
        return false;
    double now = wall_now();
    bool first = l->measuring;
    if (first) {
        l->measuring = false;
        if (l->failed_at > 0 && now > l->failed_at)
            l->last_recovery_s = now - l->failed_at;
        l->recovery_s += l->last_recovery_s;
    }
    char rec[RECORD_BYTES];
    int n = snprintf(rec, sizeof rec, "herd-progress step=%ld time=%.6f restarts=%d lost_steps=%ld "
                     "recovery_s=%.6f", step, now, l->restarts, l->lost_steps, l->recovery_s);
    if (n > 0 && n < RECORD_BYTES - 1) {
        memset(rec + n, ' ', RECORD_BYTES - 1 - (size_t)n); /* a fixed size: rewritten in place */
        rec[RECORD_BYTES - 1] = '\n';
        /* Only counting depends on it: a failed write costs the next restart its figures. */
        if (pwrite(l->fd, rec, RECORD_BYTES, 0) != RECORD_BYTES && first)
            herd_log(HERD_LOG_WARNING, "cannot record training's progress for restarts: %s", strerror(errno));
    }
    return first;
}

void herd_restart_log_close(herd_restart_log *l)
{
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
}
