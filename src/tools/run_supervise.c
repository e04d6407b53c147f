/* herd run --max-restarts (tools/run_plan.h): supervise the MPI job and relaunch it from
 * its latest checkpoint when it fails (as torchrun --max-restarts and Horovod's elastic
 * mode do).
 *
 * Before each attempt the supervisor asks where the job may run (a discovery command,
 * the hostfile read again, -H, or this machine) and sizes it; it starts the launcher
 * (run_process.c), reads what failed from its stderr (run_failure.c) and decides whether
 * to go again. Its messages ("restart 1/2 after ...", "not restarting: ...", the
 * failures at the end) go to herd's log, which the CLI prints as "herd: ...". */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "tools/run_internal.h"

/* A usage error: why set, HERD_ERR_INVALID_ARG. */
herd_status run_refuse(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return HERD_ERR_INVALID_ARG;
}

/* The elastic flags given without --max-restarts, or NULL. */
static const char *elastic_flag(const run_args *r)
{
    return r->min_np ? "--min-np" : r->max_np ? "--max-np" : r->discovery ? "--host-discovery"
           : r->elastic_timeout >= 0 ? "--elastic-timeout" : r->elastic_batch ? "--elastic-batch" : NULL;
}

herd_status run_check_supervised(run_args *r, const run_hosts *fixed, long need, const char *need_why, char *why,
                                 size_t cap)
{
    const char *elastic = elastic_flag(r);
    if (r->max_restarts < 0)
        return elastic ? run_refuse(why, cap, "%s shapes restarts: it goes with --max-restarts K", elastic) : HERD_OK;
    /* Another program (python3 with herd.train) resumes itself: it reads the attempt,
     * the elastic batch and the ranks from the environment (run_command.c). */
    bool herd = run_is_herd_command(r->cmd[0]);
    if (herd && strcmp(r->cmd[0], "train") != 0)
        return run_refuse(why, cap, "--max-restarts restarts herd train from its checkpoints; '%s' "
                      "has none", r->cmd[0]);
    bool given;
    const char *dir = herd ? run_cmd_option(r->cmd, r->ncmd, "--checkpoint-dir", &given) : "";
    if (herd && (!dir || !*dir))
        return run_refuse(why, cap, "--max-restarts needs train's --checkpoint-dir DIR: each "
                      "restart resumes from the latest checkpoint there");
    if (r->discovery && fixed)
        return run_refuse(why, cap, "--host-discovery finds the hosts; give it without -H or --hostfile");
    /* A restart the discovery shrinks below what train can run would fail at set-up. */
    if (need > 1 && r->min_np && r->min_np < need)
        return run_refuse(why, cap, "--min-np %ld is below the smallest job train can run: %s, so "
                      "%ld ranks; give --min-np %ld or more", r->min_np, need_why, need, need);
    if (need > 1 && r->np < need)
        return run_refuse(why, cap, "-np %ld is below the smallest job train can run: %s, so %ld ranks",
                      r->np, need_why, need);
    if (r->np % r->np_multiple != 0)
        return run_refuse(why, cap, "-np %ld is not a multiple of %ld, the ranks of one replica "
                      "(train's --pipeline-stages x --tensor-parallel)", r->np, r->np_multiple);
    r->min_np = r->min_np ? r->min_np : need;
    r->max_np = r->max_np ? r->max_np : r->np;
    r->elastic_timeout = r->elastic_timeout >= 0 ? r->elastic_timeout : 600;
    r->elastic_batch = r->elastic_batch ? r->elastic_batch : "keep";
    if (r->min_np > r->max_np)
        return run_refuse(why, cap, "--min-np %ld is above --max-np %ld", r->min_np, r->max_np);
    if (r->min_np % r->np_multiple != 0 || r->max_np % r->np_multiple != 0)
        return run_refuse(why, cap, "--%s-np %ld is not a multiple of %ld, the ranks of one replica "
                      "(train's --pipeline-stages x --tensor-parallel)",
                      r->min_np % r->np_multiple ? "min" : "max",
                      r->min_np % r->np_multiple ? r->min_np : r->max_np, r->np_multiple);
    if (r->np < r->min_np || r->np > r->max_np)
        return run_refuse(why, cap, "-np %ld is outside --min-np %ld .. --max-np %ld", r->np,
                      r->min_np, r->max_np);
    long slots = fixed ? run_hosts_slots(fixed) : r->np;
    const char *source = r->hosts ? "-H" : "the hostfile";
    /* A fixed source never offers more: such a job could only wait for nothing. */
    if (fixed && r->min_np > slots)
        return run_refuse(why, cap, "--min-np %ld is more than the %ld slot(s) %s offers", r->min_np,
                      slots, source);
    if (fixed && r->np > slots)
        return run_refuse(why, cap, "-np %ld is more than the %ld slot(s) %s offers (a host without "
                      "a slot count counts 1)", r->np, slots, source);
    return HERD_OK;
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

/* Logs every failure so far and returns code. */
static int stop(supervisor *s, int code)
{
    if (s->nfail)
        herd_log(HERD_LOG_INFO, "%d failure(s):", s->nfail);
    for (int i = 0; i < s->nfail; i++) {
        const herd_run_failure *f = &s->failures[i];
        char when[64], what[512];
        struct tm tm;
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %Z", localtime_r(&f->wall, &tm));
        herd_run_failure_describe(f, what, sizeof what);
        herd_log(HERD_LOG_INFO, "  %d. %.1f s after the start (%s): %s", i + 1, f->at, when, what);
    }
    return code;
}

/* The hosts on offer now (NULL: this machine), or NULL with why set. */
static const run_hosts *offered(supervisor *s, char *why, size_t cap, bool *failed)
{
    const run_args *r = s->r;
    *failed = false;
    if (r->discovery)
        *failed = !run_discover(r->discovery, &s->found, why, cap);
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

/* The most ranks up to usable (whole replicas, at least --min-np) that the command
 * accepts on a restart (train's global batch kept in whole micro-batches: 64 on 4 ranks
 * does not split over 3, but over 2); usable when none does, for train to say why. */
static long fitting(const run_args *r, long attempt, long usable)
{
    for (long np = usable; attempt > 0 && r->np_fits && np >= r->min_np; np -= r->np_multiple)
        if (r->np_fits(r, np)) {
            if (np < usable)
                herd_log(HERD_LOG_INFO, "--elastic-batch keep: train's global batch does not split "
                         "into whole micro-batches over %ld rank(s); over %ld it does", usable, np);
            return np;
        }
    return usable;
}

/* Asks for hosts until they offer --min-np slots (every 2 s, for --elastic-timeout s):
 * -1 with *hosts and *np set, else the exit code, the failures listed. */
static int wait_for_slots(supervisor *s, long attempt, const run_hosts **hosts, long *np)
{
    const run_args *r = s->r;
    double start = run_now(), limit = r->dry_run ? 0 : (double)r->elastic_timeout;
    int fail_code = attempt == 0 ? RUN_EXIT_FAIL : s->last_code;
    bool told = false, failed;
    char why[1024], list[256] = "this machine";
    for (;;) {
        if (run_stop_signal()) {
            herd_log(HERD_LOG_INFO, "not restarting: herd run was asked to stop");
            return stop(s, 128 + run_stop_signal());
        }
        *hosts = offered(s, why, sizeof why, &failed);
        if (failed) {
            herd_log(HERD_LOG_ERROR, "%s", why);
            return stop(s, run_stop_signal() ? 128 + run_stop_signal() : fail_code);
        }
        long slots = *hosts ? run_hosts_slots(*hosts) : r->np, cap = attempt == 0 ? r->np : r->max_np;
        /* Whole pipelines only: 3 slots run 2 ranks of a 2-stage job, not 3 that train refuses. */
        long usable = (slots < cap ? slots : cap) / r->np_multiple * r->np_multiple;
        if (usable >= r->min_np) {
            *np = fitting(r, attempt, usable);
            return -1;
        }
        if (*hosts)
            run_format_hosts((*hosts)->v, (*hosts)->n, true, list, sizeof list);
        if (!told)
            herd_log(HERD_LOG_INFO, "%s offers %ld slot(s) (%s), --min-np needs %ld: waiting up to %ld s",
                     source_name(r), slots, list, r->min_np, r->elastic_timeout);
        told = true;
        double left = start + limit - run_now();
        if (left <= 0) {
            herd_log(HERD_LOG_ERROR, "%s offers %ld slot(s) (%s), fewer than --min-np %ld, after %.0f s of "
                     "waiting", source_name(r), slots, list, r->min_np, limit);
            return stop(s, fail_code);
        }
        run_sleep(left < 2 ? left : 2);
    }
}

/* Runs one attempt: -1 to restart, else herd run's exit code. */
static int attempt(supervisor *s, long k, char **argv)
{
    herd_run_failure *f = &s->failures[s->nfail];
    herd_run_watch w;
    herd_run_watch_init(&w, f);
    int fd;
    char failed[1024];
    pid_t pid = run_launch(argv, &fd, failed, sizeof failed);
    if (pid < 0) {
        herd_log(HERD_LOG_ERROR, "%s", failed);
        return stop(s, RUN_EXIT_FAIL);
    }
    int status = run_watch_launcher(pid, fd, &w, s->t0, s->r->output);
    if (status == 0)
        return 0;
    char st[64], how[128];
    run_status_text(status, st, sizeof st);
    snprintf(how, sizeof how, "the launcher %s", st);
    herd_run_learn(&w, HERD_RUN_EV_LAUNCHER, -1, "", how, run_now() - s->t0);
    f->code = s->last_code = run_exit_code(status);
    s->nfail++;
    const char *why = herd_run_no_restart(f, k, s->r->max_restarts, run_stop_signal() != 0);
    if (!why)
        return -1;
    herd_log(HERD_LOG_INFO, "not restarting: %s", why);
    return stop(s, f->code);
}

static void log_restart(const supervisor *s, long k, long np, const run_hosts *hosts)
{
    char what[512], list[256] = "this machine";
    herd_run_failure_describe(&s->failures[s->nfail - 1], what, sizeof what);
    if (hosts)
        run_format_hosts(hosts->v, hosts->n, true, list, sizeof list);
    herd_log(HERD_LOG_INFO, "restart %ld/%ld after %s: relaunching on %ld rank(s) (%s)", k, s->r->max_restarts,
             what, np, list);
}

herd_status run_supervise(const run_args *r, const run_hosts *fixed, int *code, char *why, size_t cap)
{
    supervisor s = {.r = r, .fixed = fixed, .t0 = run_now(),
                    .failures = calloc((size_t)r->max_restarts + 1, sizeof *s.failures)};
    if (!s.failures) {
        snprintf(why, cap, "out of memory for %ld failure records", r->max_restarts + 1);
        return HERD_ERR_NOMEM;
    }
    run_signals saved;
    run_signals_catch(&saved);
    herd_status st = HERD_OK;
    int rc = -1;
    for (long k = 0; rc < 0; k++) {
        const run_hosts *hosts = NULL;
        long np = 0;
        rc = wait_for_slots(&s, k, &hosts, &np);
        if (rc >= 0)
            break;
        if (k > 0)
            log_restart(&s, k, np, hosts);
        run_command c;
        st = run_build_command(r, &(run_attempt){.np = np, .hosts = hosts, .host_spec = r->hosts,
                                                 .hostfile = r->hostfile, .restarts = k}, &c, why, cap);
        if (st == HERD_OK)
            r->output->command(r, &c, r->output->user);
        if (st != HERD_OK && k > 0) {
            /* Discovery gave what the launcher cannot take: said as herd run's usage error. */
            herd_log(HERD_LOG_ERROR, "%s%s", why, st == HERD_ERR_INVALID_ARG ? "\n(see 'herd run --help')" : "");
            st = HERD_OK;
            rc = stop(&s, s.last_code);
        } else if (st != HERD_OK) {
            rc = RUN_EXIT_FAIL; /* the first attempt's command: the caller says why */
        } else {
            rc = r->dry_run ? 0 : attempt(&s, k, c.argv.v);
        }
        run_argv_free(&c.argv);
    }
    run_signals_restore(&saved);
    run_hosts_free(&s.found);
    free(s.failures);
    *code = rc;
    return st;
}
