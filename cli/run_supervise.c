/* herd run --max-restarts: supervise the MPI job and relaunch it from its latest
 * checkpoint when it fails (as torchrun --max-restarts and Horovod's elastic mode do).
 *
 * The launcher runs in a process group of its own, so that SIGINT and SIGTERM reach it
 * through herd run, which then never restarts. Its stderr passes through a pipe line by
 * line, and on its way herd run reads what failed: herd train's "herd-run: failed" line,
 * Open MPI's notices and srun's. Before each attempt herd run asks where the job may run (a
 * discovery command, the hostfile read again, -H, or this machine) and sizes it. */
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

#include "cli.h"
#include "run.h"
#include "tools/run_tools.h"

int run_parse_supervise_flag(int argc, char **argv, int *i, run_args *r)
{
    const char *a = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    bool np_flag = strcmp(a, "--min-np") == 0 || strcmp(a, "--max-np") == 0;
    long *num = strcmp(a, "--max-restarts") == 0      ? &r->max_restarts
                : strcmp(a, "--min-np") == 0          ? &r->min_np
                : strcmp(a, "--max-np") == 0          ? &r->max_np
                : strcmp(a, "--elastic-timeout") == 0 ? &r->elastic_timeout
                                                      : NULL;
    if (num) {
        /* At most 10000 restarts: their failures are kept, K + 1 records. */
        long lo = np_flag ? 1 : 0, hi = np_flag ? 1 << 20 : num == &r->max_restarts ? 10000 : 1 << 30;
        if (!val || !cli_parse_int(val, lo, hi, num))
            return cli_usage_error("run", "%s needs an integer from %ld to %ld%s%s%s", a, lo, hi,
                                   val ? ", got '" : "", val ? val : "", val ? "'" : "");
    } else if (strcmp(a, "--host-discovery") == 0) {
        if (!val || !*val)
            return cli_usage_error("run", "--host-discovery needs a command printing host:slots lines");
        r->discovery = val;
    } else if (strcmp(a, "--elastic-batch") == 0) {
        if (!val || (strcmp(val, "keep") != 0 && strcmp(val, "scale") != 0))
            return cli_usage_error("run", "--elastic-batch '%s': expected keep or scale", val ? val : "");
        r->elastic_batch = val;
    } else {
        return -2;
    }
    ++*i;
    return -1;
}

/* The elastic flags given without --max-restarts, or NULL. */
static const char *elastic_flag(const run_args *r)
{
    return r->min_np ? "--min-np" : r->max_np ? "--max-np" : r->discovery ? "--host-discovery"
           : r->elastic_timeout >= 0 ? "--elastic-timeout" : r->elastic_batch ? "--elastic-batch" : NULL;
}

/* The fewest ranks train runs with (herd_train_min_ranks), from its --pipeline-stages
 * and --zero; what asks for them into why. Values train refuses count as absent: it
 * says so itself. */
static long train_min_ranks(const run_args *r, long *multiple, char *why, size_t cap)
{
    bool given;
    long stages = 1, zero = 0;
    const char *v = run_cmd_option(r->cmd, r->ncmd, "--pipeline-stages", &given);
    if (!v || !cli_parse_int(v, 1, 64, &stages))
        stages = 1;
    v = run_cmd_option(r->cmd, r->ncmd, "--zero", &given);
    if (!v || !cli_parse_int(v, 1, 2, &zero))
        zero = 0;
    long need = herd_train_min_ranks((int)stages, (int)zero);
    *multiple = stages;
    if (stages > 1 && zero)
        snprintf(why, cap, "train --pipeline-stages %ld --zero %ld needs %ld stages x 2 replicas", stages,
                 zero, stages);
    else if (stages > 1)
        snprintf(why, cap, "train --pipeline-stages %ld needs a rank per stage", stages);
    else
        snprintf(why, cap, "train --zero %ld shards over at least 2 data-parallel ranks", zero);
    return need;
}

int run_check_supervised(run_args *r, const run_hosts *fixed)
{
    const char *elastic = elastic_flag(r);
    if (r->max_restarts < 0)
        return elastic ? cli_usage_error("run", "%s shapes restarts: it goes with --max-restarts K", elastic) : -1;
    if (strcmp(r->cmd[0], "train") != 0)
        return cli_usage_error("run", "--max-restarts restarts herd train from its checkpoints; '%s' "
                               "has none", r->cmd[0]);
    bool given;
    const char *dir = run_cmd_option(r->cmd, r->ncmd, "--checkpoint-dir", &given);
    if (!dir || !*dir)
        return cli_usage_error("run", "--max-restarts needs train's --checkpoint-dir DIR: each "
                               "restart resumes from the latest checkpoint there");
    if (r->discovery && fixed)
        return cli_usage_error("run", "--host-discovery finds the hosts; give it without -H or --hostfile");
    /* A restart the discovery shrinks below what train can run would fail at set-up. */
    char why[160];
    long need = train_min_ranks(r, &r->np_multiple, why, sizeof why);
    if (need > 1 && r->min_np && r->min_np < need)
        return cli_usage_error("run", "--min-np %ld is below the smallest job train can run: %s, so "
                               "%ld ranks; give --min-np %ld or more", r->min_np, why, need, need);
    if (need > 1 && r->np < need)
        return cli_usage_error("run", "-np %ld is below the smallest job train can run: %s, so %ld ranks",
                               r->np, why, need);
    if (r->np % r->np_multiple != 0)
        return cli_usage_error("run", "-np %ld is not a multiple of train's --pipeline-stages %ld", r->np,
                               r->np_multiple);
    r->min_np = r->min_np ? r->min_np : need;
    r->max_np = r->max_np ? r->max_np : r->np;
    r->elastic_timeout = r->elastic_timeout >= 0 ? r->elastic_timeout : 600;
    r->elastic_batch = r->elastic_batch ? r->elastic_batch : "keep";
    if (r->min_np > r->max_np)
        return cli_usage_error("run", "--min-np %ld is above --max-np %ld", r->min_np, r->max_np);
    if (r->min_np % r->np_multiple != 0 || r->max_np % r->np_multiple != 0)
        return cli_usage_error("run", "--%s-np %ld is not a multiple of train's --pipeline-stages %ld",
                               r->min_np % r->np_multiple ? "min" : "max",
                               r->min_np % r->np_multiple ? r->min_np : r->max_np, r->np_multiple);
    if (r->np < r->min_np || r->np > r->max_np)
        return cli_usage_error("run", "-np %ld is outside --min-np %ld .. --max-np %ld", r->np,
                               r->min_np, r->max_np);
    long slots = fixed ? run_hosts_slots(fixed) : r->np;
    const char *source = r->hosts ? "-H" : "the hostfile";
    /* A fixed source never offers more: such a job could only wait for nothing. */
    if (fixed && r->min_np > slots)
        return cli_usage_error("run", "--min-np %ld is more than the %ld slot(s) %s offers", r->min_np,
                               slots, source);
    if (fixed && r->np > slots)
        return cli_usage_error("run", "-np %ld is more than the %ld slot(s) %s offers (a host without "
                               "a slot count counts 1)", r->np, slots, source);
    return -1;
}

/* ---- Child processes and signals ---- */

/* SIGINT or SIGTERM received (0: none), and the launcher's process group to pass it to. */
static volatile sig_atomic_t stop_signal, child_group;

static void on_signal(int sig)
{
    stop_signal = sig;
    if (child_group > 0)
        kill(-(pid_t)child_group, sig);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* "exited with status N" or "was killed by SIGX" for a wait status, into out. */
static void status_text(int status, char *out, size_t cap)
{
    if (WIFSIGNALED(status))
        snprintf(out, cap, "was killed by %s", herd_run_signal_name(WTERMSIG(status)));
    else
        snprintf(out, cap, "exited with status %d", WEXITSTATUS(status));
}

static int exit_code(int status)
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
    return v && cli_parse_float(v, 0.1, 86400, &t) ? t : 30;
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
            fprintf(stderr, "herd: error: out of memory\n");
            exit(CLI_FAIL);
        }
        double left = deadline - now_s();
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
        if (*n + 1 == size)
            *out = realloc(*out, size *= 2);
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
        if (now_s() >= deadline || stop_signal) {
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
    double deadline = now_s() + limit;
    bool ok = read_all(fds[0], deadline, out, &n, reason, sizeof reason);
    close(fds[0]);
    int status = reap_by(pid, ok ? deadline : 0); /* past the deadline: killed, -1 */
    if (!ok && !reason[0])
        status = -1;
    if (status < 0 && !reason[0])
        snprintf(reason, sizeof reason, "did not finish within %g s; killed", limit);
    else if (ok && status != 0)
        status_text(status, reason, sizeof reason);
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
static bool discover(const char *cmd, run_hosts *h, char *why, size_t cap)
{
    char *out;
    run_hosts_clear(h);
    if (!run_discovery(cmd, &out, why, cap))
        return false;
    bool ok = run_parse_discovery(out, cmd, h, why, cap);
    free(out);
    return ok;
}

/* ---- Failures ---- */

/* How much a piece of evidence tells about which rank failed and how; a later line
 * replaces an earlier one's account only when it tells more. A rank killed by a signal
 * outranks herd's own lines, which other ranks print as they notice the loss. */
/* ---- What failed: read by tools/run_tools.h ---- */

/* ---- One attempt ---- */

/* The launcher's stderr on its way through: whole lines passed on and read. */
typedef struct pump {
    int fd;
    char buf[4096];
    size_t n;
} pump;

/* The launcher's stderr as herd run reads it: what failed, timed from the job's start. */
typedef struct watch {
    herd_run_watch w;
    double t0;
} watch;

static void pass_line(watch *w, char *line, size_t len)
{
    line[len] = '\n'; /* one write for the line and its end (stderr is unbuffered) */
    fwrite(line, 1, len + 1, stderr);
    line[len] = '\0';
    herd_run_watch_line(&w->w, line, now_s() - w->t0);
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

/* Starts argv in its own process group, its stderr into *err. The pid, or -1 (said). */
static pid_t launch(char **argv, int *err)
{
    int errp[2], execp[2]; /* execp carries exec's errno, and closes when exec works */
    if (pipe2(errp, O_CLOEXEC) != 0) {
        fprintf(stderr, "herd: error: pipe: %s\n", strerror(errno));
        return -1;
    }
    if (pipe2(execp, O_CLOEXEC) != 0) {
        fprintf(stderr, "herd: error: pipe: %s\n", strerror(errno));
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
        fprintf(stderr, "herd: error: cannot start %s: %s\n", argv[0], strerror(pid < 0 ? errno : e));
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

/* Passes the launcher's stderr on until it exits; its wait status. */
static int watch_launcher(pid_t pid, int fd, watch *w)
{
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
    double until = now_s() + 1;
    while (open && now_s() < until) {
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

/* ---- The supervisor ---- */

typedef struct supervisor {
    const run_args *r;
    const run_hosts *fixed; /* -H's hosts */
    run_hosts found;        /* discovered, or the hostfile as last read */
    herd_run_failure *failures; /* max_restarts + 1 */
    int nfail;
    int last_code;
    double t0;
} supervisor;

/* Prints every failure so far and returns code. */
static int stop(supervisor *s, int code)
{
    if (s->nfail)
        fprintf(stderr, "herd: %d failure(s):\n", s->nfail);
    for (int i = 0; i < s->nfail; i++) {
        const herd_run_failure *f = &s->failures[i];
        char when[64], what[512];
        struct tm tm;
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %Z", localtime_r(&f->wall, &tm));
        herd_run_failure_describe(f, what, sizeof what);
        fprintf(stderr, "herd:   %d. %.1f s after the start (%s): %s\n", i + 1, f->at, when, what);
    }
    return code;
}

/* The hosts on offer now (NULL: this machine), or NULL with why set. */
static const run_hosts *offered(supervisor *s, char *why, size_t cap, bool *failed)
{
    const run_args *r = s->r;
    *failed = false;
    if (r->discovery)
        *failed = !discover(r->discovery, &s->found, why, cap);
    else if (r->hostfile)
        *failed = !run_read_hostfile(r->hostfile, &s->found, why, cap);
    else
        return r->hosts ? s->fixed : NULL;
    return *failed ? NULL : &s->found;
}

/* Where does the job's size come from, for messages. */
static const char *source_name(const run_args *r)
{
    return r->discovery ? "--host-discovery" : r->hostfile ? "the hostfile" : r->hosts ? "-H" : "this machine";
}

static void sleep_s(double t)
{
    struct timespec ts = {.tv_sec = (time_t)t, .tv_nsec = (long)((t - (double)(time_t)t) * 1e9)};
    while (!stop_signal && nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Asks for hosts until they offer --min-np slots (every 2 s, for --elastic-timeout s):
 * -1 with *hosts and *np set, else the exit code, the failures listed. */
static int wait_for_slots(supervisor *s, long attempt, const run_hosts **hosts, long *np)
{
    const run_args *r = s->r;
    double start = now_s(), limit = r->dry_run ? 0 : (double)r->elastic_timeout;
    int fail_code = attempt == 0 ? CLI_FAIL : s->last_code;
    bool told = false, failed;
    char why[1024], list[256] = "this machine";
    for (;;) {
        if (stop_signal) {
            fprintf(stderr, "herd: not restarting: herd run was asked to stop\n");
            return stop(s, 128 + stop_signal);
        }
        *hosts = offered(s, why, sizeof why, &failed);
        if (failed) {
            fprintf(stderr, "herd: error: %s\n", why);
            return stop(s, stop_signal ? 128 + stop_signal : fail_code);
        }
        long slots = *hosts ? run_hosts_slots(*hosts) : r->np, cap = attempt == 0 ? r->np : r->max_np;
        /* Whole pipelines only: 3 slots run 2 ranks of a 2-stage job, not 3 that train refuses. */
        long usable = (slots < cap ? slots : cap) / r->np_multiple * r->np_multiple;
        if (usable >= r->min_np) {
            *np = usable;
            return -1;
        }
        if (*hosts)
            run_format_hosts((*hosts)->v, (*hosts)->n, true, list, sizeof list);
        if (!told)
            fprintf(stderr, "herd: %s offers %ld slot(s) (%s), --min-np needs %ld: waiting up to %ld s\n",
                    source_name(r), slots, list, r->min_np, r->elastic_timeout);
        told = true;
        double left = start + limit - now_s();
        if (left <= 0) {
            fprintf(stderr, "herd: error: %s offers %ld slot(s) (%s), fewer than --min-np %ld, after "
                            "%.0f s of waiting\n", source_name(r), slots, list, r->min_np, limit);
            return stop(s, fail_code);
        }
        sleep_s(left < 2 ? left : 2);
    }
}

/* Runs one attempt: -1 to restart, else herd run's exit code. */
static int attempt(supervisor *s, long k, char **argv)
{
    herd_run_failure *f = &s->failures[s->nfail];
    watch w = {.t0 = s->t0};
    herd_run_watch_init(&w.w, f);
    int fd;
    pid_t pid = launch(argv, &fd);
    if (pid < 0)
        return stop(s, CLI_FAIL);
    int status = watch_launcher(pid, fd, &w);
    if (status == 0)
        return CLI_OK;
    char st[64], how[128];
    status_text(status, st, sizeof st);
    snprintf(how, sizeof how, "the launcher %s", st);
    herd_run_learn(&w.w, HERD_RUN_EV_LAUNCHER, -1, "", how, now_s() - s->t0);
    f->code = s->last_code = exit_code(status);
    s->nfail++;
    const char *why = herd_run_no_restart(f, k, s->r->max_restarts, stop_signal != 0);
    if (!why)
        return -1;
    fprintf(stderr, "herd: not restarting: %s\n", why);
    return stop(s, f->code);
}

static void print_restart(const supervisor *s, long k, long np, const run_hosts *hosts)
{
    char what[512], list[256] = "this machine";
    herd_run_failure_describe(&s->failures[s->nfail - 1], what, sizeof what);
    if (hosts)
        run_format_hosts(hosts->v, hosts->n, true, list, sizeof list);
    fprintf(stderr, "herd: restart %ld/%ld after %s: relaunching on %ld rank(s) (%s)\n", k, s->r->max_restarts,
            what, np, list);
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

int run_supervise(const run_args *r, const run_hosts *fixed)
{
    supervisor s = {.r = r, .fixed = fixed, .t0 = now_s(),
                    .failures = calloc((size_t)r->max_restarts + 1, sizeof *s.failures)};
    if (!s.failures) {
        fprintf(stderr, "herd: error: out of memory\n");
        return CLI_FAIL;
    }
    struct sigaction old_int, old_term, old_chld, dfl = {.sa_handler = SIG_DFL};
    stop_signal = 0;
    catch_signal(SIGINT, &old_int);
    catch_signal(SIGTERM, &old_term);
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGCHLD, &dfl, &old_chld); /* an inherited SIG_IGN leaves nothing to wait for */
    int rc = -1;
    for (long k = 0; rc < 0; k++) {
        const run_hosts *hosts = NULL;
        long np = 0;
        rc = wait_for_slots(&s, k, &hosts, &np);
        if (rc >= 0)
            break;
        if (k > 0)
            print_restart(&s, k, np, hosts);
        run_command c;
        char why[1024];
        herd_status st = run_build_command(r, &(run_attempt){.np = np, .hosts = hosts, .host_spec = r->hosts,
                                                             .hostfile = r->hostfile, .restarts = k}, &c, why,
                                           sizeof why);
        if (st == HERD_OK)
            r->output->command(r, &c, r->output->user);
        if (st != HERD_OK && k > 0) {
            fprintf(stderr, "herd: error: %s\n%s", why, st == HERD_ERR_INVALID_ARG ? "(see 'herd run --help')\n" : "");
            rc = stop(&s, s.last_code); /* discovery gave what the launcher cannot take */
        } else if (st != HERD_OK) {
            rc = st == HERD_ERR_INVALID_ARG ? cli_usage_error("run", "%s", why) : (fprintf(stderr, "herd: error: %s\n", why), CLI_FAIL);
        } else if (r->dry_run) {
            rc = CLI_OK;
        } else {
            rc = attempt(&s, k, c.argv.v);
        }
        run_argv_free(&c.argv);
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGCHLD, &old_chld, NULL);
    run_hosts_free(&s.found);
    free(s.failures);
    return rc;
}
