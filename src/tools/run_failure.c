/* herd run's supervisor reading the launcher's stderr for what failed, and deciding
 * whether to restart (tools/run_tools.h). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/run_tools.h"

/* The exit code of a usage error, herd's (CLI_USAGE) and the launchers'. */
#define USAGE_CODE 2

const char *herd_run_signal_name(int sig)
{
    static char buf[32];
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev)
        snprintf(buf, sizeof buf, "SIG%s", abbrev);
    else
        snprintf(buf, sizeof buf, "signal %d", sig);
    return buf;
}

void herd_run_watch_init(herd_run_watch *w, herd_run_failure *f)
{
    *f = (herd_run_failure){.rank = -1};
    *w = (herd_run_watch){.f = f, .abort_rank = -1, .block_rank = -1};
}

void herd_run_learn(herd_run_watch *w, herd_run_evidence evidence, long rank, const char *host, const char *how,
                    double at)
{
    herd_run_failure *f = w->f;
    if (f->evidence == HERD_RUN_EV_NONE) {
        f->at = at;
        f->wall = time(NULL);
    }
    if (evidence <= f->evidence)
        return;
    f->evidence = evidence;
    f->rank = rank;
    snprintf(f->host, sizeof f->host, "%s", host);
    snprintf(f->how, sizeof f->how, "%s", how);
}

/* herd train's failure line (dist/failure_line.h). */
static bool herd_line(herd_run_watch *w, const char *line, double at)
{
    herd_failure_line l;
    char how[256];
    if (!herd_failure_line_parse(line, &l))
        return false;
    if (l.setup)
        snprintf(how, sizeof how, "herd train failed in set-up: %s", l.message);
    else
        snprintf(how, sizeof how, "herd train failed at step %ld: %s", l.step, l.message);
    w->f->herd_line = true;
    w->f->setup |= l.setup;
    herd_run_learn(w, HERD_RUN_EV_HERD, l.rank, l.host, how, at);
    return true;
}

/* Open MPI's mpirun: "... noticed that process rank R with PID P on node H exited on
 * signal S (NAME).", "MPI_ABORT was invoked on rank R ..." / "with errorcode N.", and
 * "... exited with non-zero status ..." / "Process name: [[J,S],R]" / "Exit code: N". */
static void open_mpi_line(herd_run_watch *w, const char *line, double at)
{
    const char *p;
    long rank;
    int n;
    char host[64], how[96];
    if ((p = strstr(line, "noticed that process rank ")) &&
        sscanf(p, "noticed that process rank %ld with PID %*d on node %63s exited on signal %d", &rank, host,
               &n) == 3) {
        snprintf(how, sizeof how, "killed by %s", herd_run_signal_name(n));
        w->f->signalled = true;
        herd_run_learn(w, HERD_RUN_EV_SIGNAL, rank, host, how, at);
    } else if ((p = strstr(line, "MPI_ABORT was invoked on rank ")) && sscanf(p, "MPI_ABORT was invoked on "
                                                                                 "rank %ld", &rank) == 1) {
        w->abort_rank = rank;
    } else if (w->abort_rank >= 0 && sscanf(line, " with errorcode %d", &n) == 1) {
        snprintf(how, sizeof how, "called MPI_Abort with error code %d", n);
        herd_run_learn(w, HERD_RUN_EV_EXIT, w->abort_rank, "", how, at);
        w->abort_rank = -1;
    } else if (strstr(line, "exited with non-zero status")) {
        w->nonzero_block = true;
    } else if (w->nonzero_block && (p = strstr(line, "Process name:")) &&
               sscanf(p, "Process name: [[%*d,%*d],%ld]", &rank) == 1) {
        w->block_rank = rank;
    } else if (w->nonzero_block && (p = strstr(line, "Exit code:")) && sscanf(p, "Exit code: %d", &n) == 1) {
        snprintf(how, sizeof how, "exit code %d", n);
        herd_run_learn(w, HERD_RUN_EV_EXIT, w->block_rank, "", how, at);
        w->nonzero_block = false;
    }
}

/* Slurm's srun: "srun: error: H: task R: Killed" (strsignal's words, perhaps with " (core
 * dumped)") or "srun: error: H: task R: Exited with exit code N"; of "tasks 0-1" the
 * first is named. */
static void srun_line(herd_run_watch *w, const char *line, double at)
{
    const char *p = strstr(line, "srun: error: ");
    if (!p)
        return;
    p += strlen("srun: error: ");
    size_t hl = strcspn(p, ": ");
    const char *t = p + hl;
    if (hl == 0 || hl >= 64 || strncmp(t, ": task", 6) != 0)
        return;
    char host[64], how[96], *end;
    snprintf(host, sizeof host, "%.*s", (int)hl, p);
    t += 6 + (t[6] == 's');
    long rank = strtol(t, &end, 10);
    const char *msg = strstr(end, ": ");
    int n;
    if (end == t || *end == '\0' || !msg || rank < 0)
        return;
    msg += 2;
    if (sscanf(msg, "Exited with exit code %d", &n) == 1) {
        snprintf(how, sizeof how, "exit code %d", n);
        herd_run_learn(w, HERD_RUN_EV_EXIT, rank, host, how, at);
        return;
    }
    for (n = 1; n < NSIG; n++) {
        const char *name = strsignal(n);
        size_t len = name ? strlen(name) : 0;
        if (len && strncmp(msg, name, len) == 0 && (msg[len] == '\0' || msg[len] == ' ')) {
            snprintf(how, sizeof how, "killed by %s", herd_run_signal_name(n));
            w->f->signalled = true;
            herd_run_learn(w, HERD_RUN_EV_SIGNAL, rank, host, how, at);
            return;
        }
    }
}

/* herd's stall inspector ending the job (dist/failure_line.h). */
static void herd_stall_line(herd_run_watch *w, const char *line, double at)
{
    herd_stall_failure s;
    if (herd_stall_line_parse(line, &s))
        herd_run_learn(w, HERD_RUN_EV_STALL, s.rank, s.host,
                       s.unreachable ? "unreachable at the stall timeout" : "stalled past the stall timeout", at);
}

/* Open MPI's mpirun when a host's daemon stops answering: "ORTE has lost communication
 * with a remote daemon." then "Remote daemon: [[J,D],V] on node H". */
static void lost_daemon_line(herd_run_watch *w, const char *line, double at)
{
    const char *p;
    char host[64];
    if (strstr(line, "lost communication with a remote daemon"))
        w->lost_daemon = true;
    else if (w->lost_daemon && (p = strstr(line, "Remote daemon:")) &&
             sscanf(p, "Remote daemon: [[%*d,%*d],%*d] on node %63s", host) == 1) {
        herd_run_learn(w, HERD_RUN_EV_HOST, -1, host, "host lost: mpirun's connection to its daemon there broke",
                       at);
        w->lost_daemon = false;
    }
}

void herd_run_failure_describe(const herd_run_failure *f, char *out, size_t cap)
{
    if (f->rank < 0 && f->host[0])
        snprintf(out, cap, "%s (%s)", f->host, f->how);
    else if (f->rank < 0)
        snprintf(out, cap, "%s", f->how);
    else if (f->host[0])
        snprintf(out, cap, "rank %ld on %s (%s)", f->rank, f->host, f->how);
    else
        snprintf(out, cap, "rank %ld (%s)", f->rank, f->how);
}

void herd_run_watch_line(herd_run_watch *w, const char *line, double at)
{
    if (herd_line(w, line, at))
        return;
    herd_stall_line(w, line, at);
    lost_daemon_line(w, line, at);
    open_mpi_line(w, line, at);
    srun_line(w, line, at);
}

const char *herd_run_no_restart(const herd_run_failure *f, long attempt, long max_restarts, bool stopping)
{
    if (stopping)
        return "herd run was asked to stop";
    if (f->setup && !f->signalled)
        return "herd train failed before training began, which another attempt would repeat";
    if (f->code == USAGE_CODE && !f->herd_line)
        return "the launcher exited with code 2, a usage error";
    if (attempt >= max_restarts)
        return "no restarts left";
    return NULL;
}
