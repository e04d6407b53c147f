/*
 * herd run's supervisor, its reading and deciding: what the launcher's stderr says
 * failed (herd train's failure line, the stall inspector's timeout, Open MPI's and
 * srun's notices), and whether a failed attempt is worth another. Pure: no process,
 * no printing; src/tools/run_supervise.c launches, passes the lines on and logs. Also
 * herd train's view of the failure line (cli/train.c). Internal: not part of the
 * public API.
 */
#ifndef HERD_TOOLS_RUN_TOOLS_H
#define HERD_TOOLS_RUN_TOOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "dist/failure_line.h"

/* Evidence of what failed, weakest first: a stronger kind replaces a weaker one. A lost
 * host outranks the stall it causes on the ranks that lost it. */
typedef enum herd_run_evidence {
    HERD_RUN_EV_NONE,
    HERD_RUN_EV_LAUNCHER, /* only the launcher's exit status */
    HERD_RUN_EV_EXIT,     /* a rank's exit code or MPI_Abort */
    HERD_RUN_EV_HERD,     /* herd train's failure line */
    HERD_RUN_EV_STALL,    /* the stall inspector's timeout */
    HERD_RUN_EV_HOST,     /* a host lost */
    HERD_RUN_EV_SIGNAL,   /* a rank killed by a signal */
} herd_run_evidence;

/* One failed attempt, as its launcher's stderr and exit told it. */
typedef struct herd_run_failure {
    double at;   /* seconds after the job's start, at the first sign of it */
    time_t wall;
    long rank;   /* -1: unknown */
    char host[HERD_FAILURE_HOST_LEN]; /* "": unknown */
    char how[256];
    herd_run_evidence evidence;
    bool herd_line; /* herd train printed its failure line */
    bool setup;     /* ... saying it failed before training began */
    bool signalled; /* a rank died of a signal */
    int code;       /* the launcher's exit code */
} herd_run_failure;

/* What the launcher's stderr has said so far in its messages of several lines. */
typedef struct herd_run_watch {
    herd_run_failure *f;
    long abort_rank;    /* "MPI_ABORT was invoked on rank R": its errorcode is next */
    bool nonzero_block; /* inside "exited with non-zero status": name, then code */
    long block_rank;
    bool lost_daemon;   /* after "lost communication with a remote daemon": its host next */
} herd_run_watch;

/* A watch over f, emptied (rank unknown, no evidence). */
void herd_run_watch_init(herd_run_watch *w, herd_run_failure *f);
/* Reads one line of the launcher's stderr (no '\n'), at seconds after the job's start. */
void herd_run_watch_line(herd_run_watch *w, const char *line, double at);
/* Records evidence (host "" for unknown), kept when stronger than what f has. */
void herd_run_learn(herd_run_watch *w, herd_run_evidence evidence, long rank, const char *host, const char *how,
                    double at);
/* "rank R on H (how)", "rank R (how)", "H (how)" or "how". */
void herd_run_failure_describe(const herd_run_failure *f, char *out, size_t cap);

/* Whether a failed attempt (number attempt, from 0) is worth another: NULL, or why not.
 * stopping: herd run was asked to stop. */
const char *herd_run_no_restart(const herd_run_failure *f, long attempt, long max_restarts, bool stopping);

/* "SIGKILL", or "signal N" for a number without a name (in a static buffer). */
const char *herd_run_signal_name(int sig);

#endif
