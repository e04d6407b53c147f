/* herd run's pieces: the command line being built, host lists, the launcher kinds and
 * their flags (run_launcher.c); what run.c decided and builds for each attempt;
 * supervision (run_supervise.c). */
#ifndef HERD_CLI_RUN_H
#define HERD_CLI_RUN_H

#include <stdbool.h>

#include "tools/run_plan.h"

/* A growing, NULL-terminated argv. */
typedef struct argvec {
    char **v;
    int n, cap;
} argvec;

void argv_push(argvec *a, const char *s);
void argv_pushf(argvec *a, const char *fmt, long v);
void argv_free(argvec *a);

/* Splits s into words as a POSIX shell would for plain words, '...' and "..." (\" and
 * \\ inside double quotes, \x outside quotes), appending them to a. Returns false with
 * why set on an unbalanced quote or a trailing backslash. */
bool argv_split(argvec *a, const char *s, char *why, size_t cap);

typedef enum launch_kind { LAUNCH_OPENMPI, LAUNCH_HYDRA, LAUNCH_SRUN } launch_kind;

/* "openmpi", "hydra", "srun" and back; false for another name. */
const char *launch_kind_name(launch_kind k);
bool launch_kind_parse(const char *s, launch_kind *k);
/* The kind of launcher binary path, from what `path --version` prints; false (why set)
 * when it cannot be run or says nothing known. */
bool launch_kind_detect(const char *path, launch_kind *k, char *why, size_t cap);

/* The value of --name V or --name=V in a herd command (cmd[0] the subcommand; stops at
 * "--"), NULL when absent; *given tells whether the flag is there at all. */
const char *run_cmd_option(char *const *cmd, int n, const char *name, bool *given);

/* What herd run decided; run_launcher_args turns it into the launcher's own flags. */
typedef struct run_plan {
    launch_kind kind;
    long np, threads;
    const char *host_spec;  /* -H as given (Open MPI and Hydra take it as it is) */
    const run_host *hosts;  /* from -H or the hostfile; NULL for this machine */
    int nhosts;
    const char *hostfile;   /* --hostfile as given */
    bool hostfile_colons;   /* its lines say host:N (Hydra's form), not slots=N */
    bool oversubscribed;    /* more ranks x threads than this machine's cores */
    const char *bind;       /* core, hwthread, socket, numa, none */
    bool report;
    char **exports;         /* VAR=VALUE or VAR */
    int nexports;
    char **mca;             /* key, value pairs (Open MPI) */
    int nmca;
    const char *mpi_plugin; /* srun --mpi=..., NULL for none */
} run_plan;

/* Appends the launcher's flags for p to a (after the launcher itself). Returns false
 * with why set when the kind cannot express what p asks. */
bool run_launcher_args(const run_plan *p, argvec *a, char *why, size_t cap);

/* What the command line asked for, and (kind, launcher, how) the launcher chosen. */
typedef struct run_args {
    long np, tpr;
    const char *hosts, *hostfile, *launcher, *kind_flag, *bind;
    bool dry_run, report;
    char **xvars, **mca;
    int nx, nmca;
    const argvec *extra; /* --mpirun-args, split */
    char **cmd;
    int ncmd;
    /* Supervision: max_restarts -1 means none (herd run execs the launcher). */
    long max_restarts, min_np, max_np, elastic_timeout;
    long np_multiple; /* a restart's ranks: a multiple of train's pipeline stages */
    const char *discovery, *elastic_batch;
    launch_kind kind;
    const char *how; /* why this kind: "--launcher", "herd's MPI", ... */
} run_args;

/* One launch: its size and hosts. */
typedef struct run_attempt {
    long np;
    const run_hosts *hosts; /* NULL or empty: this machine */
    const char *host_spec;  /* -H as given, NULL for discovered hosts */
    const char *hostfile;   /* --hostfile as given */
    long restarts;          /* the attempt's number under supervision, -1 without */
} run_attempt;

/* Builds the launcher's whole command for one attempt into a and prints it (the
 * launcher's kind, the command, notes). Returns -1 when fine, else the exit code. The
 * same code serves the exec path and every supervised attempt. */
int run_build_command(const run_args *r, const run_attempt *at, argvec *a);

/* run_supervise.c: herd run --max-restarts. run_check_supervised refuses what cannot
 * be supervised before anything starts (static: the hosts -H or the hostfile offer,
 * NULL for this machine); -1 when fine, else the exit code. run_supervise launches,
 * watches and relaunches the job (fixed: -H's hosts), and returns herd run's exit code. */
/* run_parse_supervise_flag parses argv[*i] when it is one of supervision's flags
 * (leaving *i on its last word): -2 when it is not one, -1 when parsed, else the exit
 * code. */
int run_parse_supervise_flag(int argc, char **argv, int *i, run_args *r);
int run_check_supervised(run_args *r, const run_hosts *fixed);
int run_supervise(const run_args *r, const run_hosts *fixed);

#endif
