/* herd run --max-restarts' child processes (tools/run_internal.h): the launcher started
 * in a process group of its own, so that SIGINT and SIGTERM reach it through herd run;
 * its stderr passed on line by line and read on its way for what failed; the
 * --host-discovery command run under a time limit. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/run_internal.h"

/* SIGINT or SIGTERM received (0: none), and the launcher's process group to pass it to. */
static volatile sig_atomic_t stop_signal, child_group;

static void on_signal(int sig)
{
    stop_signal = sig;
    if (child_group > 0)
        kill(-(pid_t)child_group, sig);
}

/* Passes sig on to the launcher, unless herd run was started ignoring it (nohup, a
 * shell's background job), which the launcher then inherits. */
static void catch_signal(int sig, struct sigaction *old)
{
    struct sigaction act = {.sa_handler = on_signal};
    sigemptyset(&act.sa_mask);
    sigaction(sig, NULL, old);
    if (old->sa_handler != SIG_IGN)
        sigaction(sig, &act, NULL);
}

/* The handlers live here, with the process group they forward to, rather than in the
 * CLI: only the supervisor knows the launcher's group, and it installs them for its own
 * run and puts the old ones back, so the library leaves the process as it found it. */
void run_signals_catch(run_signals *saved)
{
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    stop_signal = 0;
    catch_signal(SIGINT, &saved->old_int);
    catch_signal(SIGTERM, &saved->old_term);
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGCHLD, &dfl, &saved->old_chld); /* an inherited SIG_IGN leaves nothing to wait for */
}

void run_signals_restore(const run_signals *saved)
{
    sigaction(SIGINT, &saved->old_int, NULL);
    sigaction(SIGTERM, &saved->old_term, NULL);
    sigaction(SIGCHLD, &saved->old_chld, NULL);
}

int run_stop_signal(void) { return stop_signal; }

double run_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void run_sleep(double t)
{
    struct timespec ts = {.tv_sec = (time_t)t, .tv_nsec = (long)((t - (double)(time_t)t) * 1e9)};
    while (!stop_signal && nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* "exited with status N" or "was killed by SIGX" for a wait status, into out. */
void run_status_text(int status, char *out, size_t cap)
{
    if (WIFSIGNALED(status))
        snprintf(out, cap, "was killed by %s", herd_run_signal_name(WTERMSIG(status)));
    else
        snprintf(out, cap, "exited with status %d", WEXITSTATUS(status));
}

int run_exit_code(int status)
{
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

/* In a child before exec: its own process group (so that a timeout or a forwarded
 * signal reaches everything it starts) and no terminal input (a background group
 * reading the terminal would stop). exec resets the caught signals and keeps the
 * ignored ones. */
static void child_setup(void)
{
    setpgid(0, 0);
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0 && null != 0) {
        dup2(null, 0);
        close(null);
    }
}

/* ---- Host discovery ---- */

/* The discovery command's time limit: 30 s; tests shorten it. */
static double discovery_timeout(void)
{
    const char *v = getenv("HERD_RUN_DISCOVERY_TIMEOUT");
    double t;
    return v && run_parse_double(v, 0.1, 86400, &t) ? t : 30;
}

/* Reads fd into a growing buffer until EOF. False past 1 MiB, on a signal (why set)
 * or at the deadline (why empty). */
static bool read_all(int fd, double deadline, char **out, size_t *n, char *why, size_t cap)
{
    size_t size = 4096;
    *n = 0;
    *out = malloc(size);
    for (;;) {
        if (!*out) {
            snprintf(why, cap, "out of memory reading its output");
            return false;
        }
        double left = deadline - run_now();
        if (stop_signal || left <= 0) {
            snprintf(why, cap, "%s%s", stop_signal ? "stopped by " : "",
                     stop_signal ? herd_run_signal_name(stop_signal) : "");
            return false;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0)
            continue;
        ssize_t got = read(fd, *out + *n, size - *n - 1);
        if (got == 0)
            break;
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            snprintf(why, cap, "cannot read its output: %s", strerror(errno));
            return false;
        }
        *n += (size_t)got;
        if (*n > 1 << 20) {
            snprintf(why, cap, "printed more than 1 MiB");
            return false;
        }
        if (*n + 1 == size) {
            char *more = realloc(*out, size *= 2);
            if (!more)
                free(*out);
            *out = more;
        }
    }
    (*out)[*n] = '\0';
    return true;
}

/* Waits for pid until the deadline (then kills its group); its wait status, or -1. */
static int reap_by(pid_t pid, double deadline)
{
    int status;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            return status;
        if (w < 0 && errno != EINTR)
            return -1;
        if (run_now() >= deadline || stop_signal) {
            kill(-pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            return -1;
        }
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
    }
}

/* Runs cmd with /bin/sh -c, stderr passed through; its stdout into *out (freed by the
 * caller). False with why set when it cannot run, fails or overruns its time. */
static bool run_discovery(const char *cmd, char **out, char *why, size_t cap)
{
    double limit = discovery_timeout();
    int fds[2];
    *out = NULL;
    if (pipe2(fds, O_CLOEXEC) != 0) {
        snprintf(why, cap, "--host-discovery: pipe: %s", strerror(errno));
        return false;
    }
    pid_t pid = fork();
    if (pid == 0) {
        child_setup();
        dup2(fds[1], 1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    if (pid < 0) {
        snprintf(why, cap, "--host-discovery: fork: %s", strerror(errno));
        close(fds[0]);
        return false;
    }
    setpgid(pid, pid);
    size_t n = 0;
    char reason[256] = "";
    double deadline = run_now() + limit;
    bool ok = read_all(fds[0], deadline, out, &n, reason, sizeof reason);
    close(fds[0]);
    int status = reap_by(pid, ok ? deadline : 0); /* past the deadline: killed, -1 */
    if (!ok && !reason[0])
        status = -1;
    if (status < 0 && !reason[0])
        snprintf(reason, sizeof reason, "did not finish within %g s; killed", limit);
    else if (ok && status != 0)
        run_status_text(status, reason, sizeof reason);
    else if (ok && memchr(*out, '\0', n))
        snprintf(reason, sizeof reason, "printed a NUL byte");
    if (!reason[0])
        return true;
    snprintf(why, cap, "--host-discovery '%s' %s", cmd, reason);
    free(*out);
    *out = NULL;
    return false;
}

/* Asks the discovery command for hosts (Horovod's format: one host:slots a line,
 * "host" alone 1 slot, blank lines ignored), strictly, into h. */
bool run_discover(const char *cmd, run_hosts *h, char *why, size_t cap)
{
    char *out;
    run_hosts_clear(h);
    if (!run_discovery(cmd, &out, why, cap))
        return false;
    bool ok = run_parse_discovery(out, cmd, h, why, cap);
    free(out);
    return ok;
}

/* ---- One attempt ---- */

/* The launcher's stderr on its way through: whole lines passed on and read. */
typedef struct pump {
    int fd;
    char buf[4096];
    size_t n;
} pump;

/* The launcher's stderr as herd run reads it: what failed, timed from the job's start,
 * and where its lines go on to. */
typedef struct watch {
    herd_run_watch *w;
    double t0;
    const run_output *out;
} watch;

static void pass_line(watch *w, char *line, size_t len)
{
    line[len] = '\n'; /* the line and its end in one call: one write where it goes */
    w->out->relay(line, len + 1, w->out->user);
    line[len] = '\0';
    herd_run_watch_line(w->w, line, run_now() - w->t0);
}

/* Reads what is there; false at the end of the stream. A line longer than the buffer
 * passes in pieces (only its first is read for failures). */
static bool pump_read(pump *p, watch *w)
{
    ssize_t got = read(p->fd, p->buf + p->n, sizeof p->buf - 1 - p->n);
    if (got < 0 && (errno == EINTR || errno == EAGAIN))
        return true;
    if (got <= 0) {
        if (p->n)
            pass_line(w, p->buf, p->n);
        p->n = 0;
        return false;
    }
    p->n += (size_t)got;
    char *start = p->buf, *nl;
    while ((nl = memchr(start, '\n', p->n - (size_t)(start - p->buf)))) {
        pass_line(w, start, (size_t)(nl - start));
        start = nl + 1;
    }
    p->n -= (size_t)(start - p->buf);
    memmove(p->buf, start, p->n);
    if (p->n == sizeof p->buf - 1) {
        pass_line(w, p->buf, p->n);
        p->n = 0;
    }
    return true;
}

pid_t run_launch(char **argv, int *err, char *why, size_t cap)
{
    int errp[2], execp[2]; /* execp carries exec's errno, and closes when exec works */
    if (pipe2(errp, O_CLOEXEC) != 0) {
        snprintf(why, cap, "pipe: %s", strerror(errno));
        return -1;
    }
    if (pipe2(execp, O_CLOEXEC) != 0) {
        snprintf(why, cap, "pipe: %s", strerror(errno));
        close(errp[0]);
        close(errp[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        child_setup();
        dup2(errp[1], 2);
        execvp(argv[0], argv);
        int e = errno;
        ssize_t told = write(execp[1], &e, sizeof e);
        _exit(told < 0 ? 126 : 127);
    }
    close(errp[1]);
    close(execp[1]);
    int e = 0;
    if (pid > 0) {
        setpgid(pid, pid); /* also here: a signal may come before the child's own call */
        child_group = pid;
        if (stop_signal)
            kill(-pid, stop_signal);
        while (read(execp[0], &e, sizeof e) < 0 && errno == EINTR)
            ;
    }
    close(execp[0]);
    if (pid < 0 || e) {
        snprintf(why, cap, "cannot start %s: %s", argv[0], strerror(pid < 0 ? errno : e));
        if (pid > 0)
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        child_group = 0;
        close(errp[0]);
        return -1;
    }
    *err = errp[0];
    return pid;
}

int run_watch_launcher(pid_t pid, int fd, herd_run_watch *hw, double t0, const run_output *out)
{
    watch wt = {.w = hw, .t0 = t0, .out = out}, *w = &wt;
    pump p = {.fd = fd};
    bool open = true;
    int status = 0;
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (open && poll(&pfd, 1, 200) > 0)
            open = pump_read(&p, w);
        pid_t got = waitpid(pid, &status, open ? WNOHANG : 0);
        if (got == pid)
            break;
        if (got < 0 && errno != EINTR) {
            status = 1 << 8; /* lost (ECHILD): a failure with exit code 1 */
            break;
        }
    }
    child_group = 0;
    /* Its last words may still be in the pipe, which a rank it left behind may hold
     * open: read on for at most a second. */
    double until = run_now() + 1;
    while (open && run_now() < until) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ready = poll(&pfd, 1, 100);
        if (ready == 0)
            break;
        if (ready > 0)
            open = pump_read(&p, w);
    }
    if (p.n)
        pass_line(w, p.buf, p.n);
    close(fd);
    return status;
}

