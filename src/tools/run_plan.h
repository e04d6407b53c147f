/*
 * herd run's launcher and supervisor, the "run" module: host lists and hostfiles
 * (run_hosts.c), the launchers' kinds and flags (run_launcher.c), each attempt's
 * command (run_command.c), and --max-restarts' supervisor (run_supervise.c, with its
 * child processes in run_process.c). The CLI (cli/run.c) parses herd run's options
 * into a run_args, prints what this module hands it (run_output) and turns the result
 * into the exit code; messages of the supervisor go through herd's log. Nothing here
 * prints or exits. Internal: not part of the public API.
 */
#ifndef HERD_TOOLS_RUN_PLAN_H
#define HERD_TOOLS_RUN_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "herd/herd.h"

/* Writes the message into why and returns HERD_ERR_INVALID_ARG: a usage error. */
__attribute__((format(printf, 3, 4))) herd_status run_refuse(char *why, size_t cap, const char *fmt, ...);

/* Strict numbers, as herd's flags take them: an optional '-' and decimal digits
 * (doubles: also a fraction and an exponent), nothing around them, in [lo, hi]. */
bool run_parse_long(const char *s, long lo, long hi, long *out);
bool run_parse_double(const char *s, double lo, double hi, double *out);

/* ------------------------------------------------------------------- hosts */

typedef struct run_host {
    char *name;
    long slots; /* 0: not given */
} run_host;

/* A list of hosts: from -H, a hostfile or a --host-discovery command. */
typedef struct run_hosts {
    run_host *v;
    int n, cap;
    bool colons; /* a hostfile in Hydra's 'host:N' form */
} run_hosts;

#define RUN_MAX_HOSTS 4096

/* Appends host name (len bytes): HERD_ERR_INVALID_ARG when the list has RUN_MAX_HOSTS
 * already, HERD_ERR_NOMEM. Sets no message: the callers say which list. */
herd_status run_hosts_add(run_hosts *h, const char *name, size_t len, long slots);
void run_hosts_clear(run_hosts *h); /* empties h, keeps its storage */
void run_hosts_free(run_hosts *h);
/* The slots h offers, a host of unknown slots counting as 1. */
long run_hosts_slots(const run_hosts *h);
/* Hosts as "a:4,b:4" (slots: with each known slot count) or "a,b", cut to fit out. */
void run_format_hosts(const run_host *v, int n, bool slots, char *out, size_t cap);
/* "host" or "host:N" (len bytes) -> the name's length and slots (dflt without :N, N in
 * 1..2^20); false when malformed. */
bool run_parse_host_slots(const char *p, size_t len, size_t *name_len, long dflt, long *slots);
/* "a:4,b:4" -> h (-H; "a" alone is 1 slot, as in Open MPI). False with why set when
 * malformed or out of memory. */
bool run_parse_host_list(const char *spec, run_hosts *h, char *why, size_t cap);
/* Reads an Open MPI ('host slots=N') or Hydra ('host:N') hostfile into h (emptied
 * first). False with why set when it cannot be read, a line is bad or it has no host. */
bool run_read_hostfile(const char *path, run_hosts *h, char *why, size_t cap);
/* The first byte of name (len bytes) that no host name may hold (',', a space or a control byte), or NULL. */
const char *run_host_name_bad(const char *name, size_t len);
/* The output of a --host-discovery command CMD (Horovod's format: one host or host:slots
 * a line, blank lines ignored), strictly, into h (emptied first); out is modified. False
 * with why set on a bad line or no host. */
bool run_parse_discovery(char *out, const char *cmd, run_hosts *h, char *why, size_t cap);

/* ---------------------------------------------------------- the launcher */

/* A growing, NULL-terminated argv. A failed allocation sets oom, after which pushes do
 * nothing: whoever finishes the vector checks oom once (run_build_command does). */
typedef struct run_argv {
    char **v;
    int n, cap;
    bool oom;
} run_argv;

void run_argv_push(run_argv *a, const char *s);
void run_argv_pushf(run_argv *a, const char *fmt, long v);
void run_argv_free(run_argv *a);

/* Splits s into words as a POSIX shell would for plain words, '...' and "..." (\" and
 * \\ inside double quotes, \x outside quotes), appending them to a. Returns false with
 * why set on an unbalanced quote, a trailing backslash or no memory. */
bool run_argv_split(run_argv *a, const char *s, char *why, size_t cap);

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

/* Appends the launcher's flags for p to a (after the launcher itself):
 * HERD_ERR_INVALID_ARG with why set when the kind cannot express what p asks,
 * HERD_ERR_NOMEM. */
herd_status run_launcher_args(const run_plan *p, run_argv *a, char *why, size_t cap);

/* -------------------------------------------------------------- the job */

typedef struct run_args run_args;

/* One attempt's command, built by run_build_command. */
typedef struct run_command {
    run_argv argv;       /* the launcher, its flags, then this herd and its command */
    long np, threads, cores;
    bool oversubscribed; /* np x threads above this machine's cores: ranks unbound */
} run_command;

/* Where the module's output goes: the CLI prints both. */
typedef struct run_output {
    /* An attempt's command, just before it starts (and for --dry-run). */
    void (*command)(const run_args *r, const run_command *c, void *user);
    /* A line of the launcher's stderr passing through the supervisor, '\n' included. */
    void (*relay)(const char *line, size_t len, void *user);
    void *user;
} run_output;

/* What herd run's command line asked for (cli/run.c parses it), and (kind, launcher,
 * how) the launcher chosen by run_choose_launcher. */
struct run_args {
    long np, tpr;
    const char *hosts, *hostfile, *launcher, *kind_flag, *bind;
    bool dry_run, report;
    char **xvars, **mca;
    int nx, nmca;
    const run_argv *extra; /* --mpirun-args, split */
    char **cmd;
    int ncmd;
    /* Supervision: max_restarts -1 means none (herd run execs the launcher). */
    long max_restarts, min_np, max_np, elastic_timeout;
    long np_multiple; /* a restart's ranks: a multiple of train's stages x tensor parts */
    /* Whether the command runs on np ranks as well as on the first attempt's (train's
     * --elastic-batch keep: its global batch in whole micro-batches); NULL: any. A
     * restart takes the most offered ranks it accepts. */
    bool (*np_fits)(const struct run_args *r, long np);
    long cores;       /* this machine's cores (hwloc's, not hardware threads); 0: unknown */
    char np_how[192]; /* how the ranks were chosen when -np was not given; "" when it was */
    const char *discovery, *elastic_batch;
    launch_kind kind;
    const char *how; /* why this kind: "--launcher", "herd's MPI", ... */
    const run_output *output;
};

/* One launch: its size and hosts. */
typedef struct run_attempt {
    long np;
    const run_hosts *hosts; /* NULL or empty: this machine */
    const char *host_spec;  /* -H as given, NULL for discovered hosts */
    const char *hostfile;   /* --hostfile as given */
    long restarts;          /* the attempt's number under supervision, -1 without */
} run_attempt;

/* Sets r's launcher, kind and how: --launcher, else --mpirun's own --version, else
 * herd's MPI (srun inside a Slurm allocation); unless a dry run, the launcher must be
 * there. Notes go to herd's log. HERD_ERR_INVALID_ARG (a usage error) or
 * HERD_ERR_UNSUPPORTED (no such launcher here) with why set. */
herd_status run_choose_launcher(run_args *r, char *why, size_t cap);

/* Whether cmd is a subcommand of herd (train, eval, bench, models, topo, doctor,
 * version): herd run starts this binary with it; any other program (python3) is
 * started as given. */
bool run_is_herd_command(const char *cmd);
/* True when name is an executable: a path as given, or found in PATH. */
bool run_find_executable(const char *name);

/* Builds the launcher's whole command for one attempt into c (zeroed first; free
 * c->argv with run_argv_free): the same code serves the exec path and every supervised
 * attempt. HERD_ERR_INVALID_ARG (the launcher cannot express it), HERD_ERR_IO or
 * HERD_ERR_NOMEM with why set. */
herd_status run_build_command(const run_args *r, const run_attempt *at, run_command *c, char *why, size_t cap);

/* Reads this machine's cores into r->cores and, when -np was not given, chooses it:
 * the slots of -H or the hostfile (each must say them), the Slurm allocation's tasks
 * under srun, else this machine's: a rank per GPU for a herd command on --device cuda,
 * else a rank per NUMA node (a launcher's own default, a rank per core, would multiply
 * the global batch); at least need ranks, in whole multiples of r->np_multiple.
 * r->np_how says which. HERD_ERR_INVALID_ARG (a usage error) with why set when none
 * of that tells (--host-discovery, a host without slots, --device cuda and no GPU). */
herd_status run_size_job(run_args *r, const run_hosts *fixed, long need, char *why, size_t cap);

/* ------------------------------------------------------------- supervision */

/* herd run's exit code when the job could not start or its hosts never came. */
#define RUN_EXIT_FAIL 1

/* Refuses what cannot be supervised, before anything starts, and fills in supervision's
 * defaults (--min-np, --max-np, --elastic-timeout, --elastic-batch). fixed: the hosts
 * -H or the hostfile offer, NULL for this machine. need: the fewest ranks train's
 * command runs with and need_why what asks for them, and r->np_multiple its pipeline
 * stages: the caller reads them through the public API (herd_train_min_ranks, in
 * src/train, above this layer). HERD_ERR_INVALID_ARG (a usage error) with why set. */
herd_status run_check_supervised(run_args *r, const run_hosts *fixed, long need, const char *need_why, char *why,
                                 size_t cap);

/* herd run --max-restarts: launches, watches and relaunches the job (fixed: -H's
 * hosts) until it succeeds, fails for good or runs out of restarts, handing each
 * attempt's command to r->output->command and the launcher's stderr to
 * r->output->relay; SIGINT and SIGTERM are passed on to the launcher while it runs.
 * *code: herd run's exit code (0, the last launcher's, 128 + a signal, or
 * RUN_EXIT_FAIL). Not HERD_OK, with why set, when the first attempt's command cannot
 * be built (HERD_ERR_INVALID_ARG: a usage error) or memory runs out. */
herd_status run_supervise(const run_args *r, const run_hosts *fixed, int *code, char *why, size_t cap);

#endif
