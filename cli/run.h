/* herd run's pieces: the launcher kinds and their flags (run_launcher.c), the command
 * line being built, and what run.c decided. */
#ifndef HERD_CLI_RUN_H
#define HERD_CLI_RUN_H

#include <stdbool.h>

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

typedef struct run_host {
    char *name;
    long slots; /* 0: not given */
} run_host;

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

#endif
