#include "core/log.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>

/* Called from the communication thread as well as the caller's: guarded. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static herd_log_fn log_fn;
static void *log_user;

void herd_set_log_fn(herd_log_fn fn, void *user)
{
    pthread_mutex_lock(&log_mu);
    log_fn = fn;
    log_user = user;
    pthread_mutex_unlock(&log_mu);
}

void herd_log(herd_log_level level, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&log_mu);
    if (log_fn)
        log_fn(level, msg, log_user);
    else if (level >= HERD_LOG_ERROR) /* an abort's reason with nobody listening */
        fprintf(stderr, "herd: error: %s\n", msg);
    pthread_mutex_unlock(&log_mu);
}

void herd_log_to_stderr(herd_log_level level, const char *msg, void *user)
{
    const bool *quiet_info = user;
    if (level == HERD_LOG_INFO && quiet_info && *quiet_info)
        return;
    const char *kind = level == HERD_LOG_ERROR ? "error: " : level == HERD_LOG_WARNING ? "warning: " : "";
    /* One line, one write: lines of several ranks or threads never interleave. */
    char line[2200];
    int n = snprintf(line, sizeof line, "herd: %s%s\n", kind, msg);
    if (n >= (int)sizeof line) {
        n = (int)sizeof line - 1;
        line[n - 1] = '\n';
    }
    if (n > 0)
        fwrite(line, 1, (size_t)n, stderr);
    fflush(stderr);
}
