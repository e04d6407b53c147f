/* herd run's command for each attempt (tools/run_plan.h): which launcher, how many
 * threads each rank gets, the launcher's defaults and flags, and the herd command the
 * ranks run. The CLI prints the result (run_output.command); this file only builds it. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "herd_config.h"
#include "core/error.h"
#include "core/log.h"
#include "tools/run_plan.h"

/* The most ranks any host gets when np ranks fill the slots in order, as
 * Open MPI's default by-slot mapping does. slots <= 0 means unknown. */
static long max_ranks_per_host(long np, const run_host *hosts, int nhosts)
{
    long most = 0, left = np;
    for (int i = 0; i < nhosts && left > 0; i++) {
        long slots = hosts[i].slots;
        long k = slots > 0 ? (slots < left ? slots : left) : (np + nhosts - 1) / nhosts;
        if (k > left)
            k = left;
        if (k > most)
            most = k;
        left -= k;
    }
    /* More ranks than slots: mpirun will refuse or oversubscribe; spread evenly for T. */
    if (left > 0 && nhosts > 0)
        most = (np + nhosts - 1) / nhosts;
    return most > 0 ? most : 1;
}

/* True when name is an executable: a path as given, or found in PATH. */
bool run_find_executable(const char *name)
{
    if (strchr(name, '/'))
        return access(name, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/bin:/bin";
    char buf[PATH_MAX];
    for (const char *p = path;;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > 0 && len + strlen(name) + 2 < sizeof buf) {
            snprintf(buf, sizeof buf, "%.*s/%s", (int)len, p, name);
            if (access(buf, X_OK) == 0)
                return true;
        }
        if (!end)
            return false;
        p = end + 1;
    }
}

/* Subcommands that take --threads, and so get the per-rank thread count. */
static bool takes_threads(char **cmd, int n)
{
    return strcmp(cmd[0], "train") == 0 || strcmp(cmd[0], "eval") == 0 ||
           (strcmp(cmd[0], "bench") == 0 && n > 1 && strcmp(cmd[1], "train") == 0);
}

const char *run_cmd_option(char *const *cmd, int n, const char *name, bool *given)
{
    size_t len = strlen(name);
    *given = false;
    for (int i = 1; i < n && strcmp(cmd[i], "--") != 0; i++) {
        if (strncmp(cmd[i], name, len) != 0 || (cmd[i][len] != '=' && cmd[i][len] != '\0'))
            continue;
        *given = true;
        if (cmd[i][len] == '=')
            return cmd[i] + len + 1;
        return i + 1 < n ? cmd[i + 1] : NULL;
    }
    return NULL;
}

/* The value of --threads N / --threads=N in the command, or 0. */
static long user_threads(char **cmd, int n, bool *given)
{
    const char *v = run_cmd_option(cmd, n, "--threads", given);
    long t;
    return v && run_parse_long(v, 1, 4096, &t) ? t : 0; /* 0 = all cores: leave it */
}

static bool exports(char **xvars, int nx, const char *name)
{
    size_t len = strlen(name);
    for (int i = 0; i < nx; i++)
        if (strncmp(xvars[i], name, len) == 0 && (xvars[i][len] == '\0' || xvars[i][len] == '='))
            return true;
    return false;
}

/* Whether the user set Open MPI parameter `name`: --mca, -x or the environment
 * (OMPI_MCA_name), or anywhere in --mpirun-args. */
static bool user_sets_mca(const char *name, char **mca, int nmca, char **xvars, int nx, const run_argv *extra)
{
    char var[96];
    snprintf(var, sizeof var, "OMPI_MCA_%s", name);
    if (getenv(var) || exports(xvars, nx, var))
        return true;
    for (int i = 0; i < nmca; i += 2)
        if (strcmp(mca[i], name) == 0)
            return true;
    for (int k = 0; extra && k < extra->n; k++)
        if (strcmp(extra->v[k], name) == 0 || strstr(extra->v[k], var))
            return true;
    return false;
}

/* Open MPI's mpirun hears that a host has vanished only from TCP keepalive on its
 * connection to that host's daemon (by default after 300 s idle and 9 probes 20 s
 * apart), and not at all once it has sent the daemon something, which it does when a
 * rank aborts: then it waits for the host until TCP gives up, some 15 minutes. With
 * these, a host unreachable for 10-15 s ends the job (mpirun's "lost communication
 * with a remote daemon"), and the cut-off daemons lose their lifeline likewise;
 * herd's stall timeout leaves the launcher 10 s for it before its own abort
 * (src/dist/comm_mpi_stall.c). docs/cluster.md has the why and the trade-off.
 * Supervised (herd run --max-restarts), the ranks left after one dies are killed at
 * once instead of after mpirun's 1 s grace, which herd's ranks do not use: a restart
 * trains again 0.85 s after a kill instead of 1.9 s (docs/performance.md). The user's
 * own setting (--mca, -x, --mpirun-args or the environment) wins. */
static void launcher_defaults(char **mca, int *nmca, char **xvars, int nx, const run_argv *extra,
                              bool supervised)
{
    static const char *const params[][2] = {{"oob_tcp_keepalive_time", "5"},
                                            {"oob_tcp_keepalive_intvl", "2"},
                                            {"oob_tcp_keepalive_probes", "5"},
                                            {"odls_base_sigkill_timeout", "0"}};
    size_t n = sizeof params / sizeof params[0] - (supervised ? 0 : 1);
    int given = *nmca;
    for (size_t k = 0; k < n; k++)
        if (!user_sets_mca(params[k][0], mca, given, xvars, nx, extra)) {
            mca[(*nmca)++] = (char *)params[k][0];
            mca[(*nmca)++] = (char *)params[k][1];
        }
}

/* The launcher's kind and binary: --launcher, else --mpirun's own --version, else herd's
 * MPI. */
static herd_status choose_launcher(const char *kind_flag, const char **launcher, bool dry_run, launch_kind *kind,
                                   const char **how, char *why, size_t cap)
{
    static const char *const defaults[] = {"mpirun", "mpiexec.hydra", "srun"};
    launch_kind own = strcmp(HERD_MPI_FAMILY, "mpich") == 0 ? LAUNCH_HYDRA : LAUNCH_OPENMPI;
    if (kind_flag && !launch_kind_parse(kind_flag, kind)) {
        snprintf(why, cap, "--launcher '%s': expected openmpi, hydra or srun", kind_flag);
        return HERD_ERR_INVALID_ARG;
    }
    *how = "--launcher";
    if (!*launcher) {
        if (!kind_flag) {
            *kind = own;
            *how = "herd's MPI";
        }
        /* Inside a Slurm allocation srun knows its nodes, cores and PMI: it starts the
         * ranks, as on clusters users expect (--launcher picks herd's MPI's own). */
        const char *job = getenv("SLURM_JOB_ID");
        static char slurm_how[160];
        if (!kind_flag && job && *job) {
            bool have_srun = run_find_executable("srun");
            if (have_srun)
                snprintf(slurm_how, sizeof slurm_how, "inside Slurm job %s; --launcher %s for herd's "
                         "MPI's own", job, launch_kind_name(own));
            else
                snprintf(slurm_how, sizeof slurm_how, "herd's MPI: inside Slurm job %s, but srun is "
                         "not in PATH", job);
            *how = slurm_how;
            if (have_srun)
                *kind = LAUNCH_SRUN;
        }
        /* The launcher CMake found for herd's MPI, when it is of that kind. */
        *launcher = *kind == own && HERD_MPIEXEC[0] != '\0' ? HERD_MPIEXEC : defaults[*kind];
        return HERD_OK;
    }
    if (kind_flag)
        return HERD_OK;
    char detect_why[512];
    *how = "its --version";
    if (launch_kind_detect(*launcher, kind, detect_why, sizeof detect_why))
        return HERD_OK;
    if (!dry_run && !run_find_executable(*launcher)) {
        snprintf(why, cap, "%s not found; install it (Debian/Ubuntu: apt-get install openmpi-bin, mpich or "
                           "slurm-client) or pass --mpirun PATH", *launcher);
        return HERD_ERR_UNSUPPORTED;
    }
    if (!dry_run) {
        snprintf(why, cap, "%s; name its kind with --launcher openmpi|hydra|srun", detect_why);
        return HERD_ERR_UNSUPPORTED;
    }
    /* A dry run may show a launcher that is not here (srun off the cluster): its name. */
    const char *slash = strrchr(*launcher, '/'), *name = slash ? slash + 1 : *launcher;
    *kind = own;
    *how = "a dry run: from herd's MPI, as neither --version nor the name tells";
    if (strstr(name, "srun") || strstr(name, "hydra") || strstr(name, "mpich") ||
        strstr(name, "openmpi") || strstr(name, "orterun")) {
        *kind = strstr(name, "srun") ? LAUNCH_SRUN : strstr(name, "hydra") || strstr(name, "mpich")
                                                         ? LAUNCH_HYDRA : LAUNCH_OPENMPI;
        *how = "a dry run: from its name";
    }
    herd_log(HERD_LOG_INFO, "note: %s", detect_why);
    return HERD_OK;
}

/* The packages that bring each kind's launcher (Debian). */
static const char *const launcher_packages[] = {"openmpi-bin", "mpich", "slurm-client"};

/* Cores and compute threads per rank: --threads-per-rank, the command's own --threads,
 * Slurm's cores per task, else this machine's cores shared by a host's ranks. */
static long threads_per_rank(const run_args *r, long per_host, long cores, bool local, long user_t)
{
    const char *slurm_cpus = getenv("SLURM_CPUS_PER_TASK");
    long t = r->tpr, st;
    if (!t && user_t)
        t = user_t; /* bind as many cores as the command will use */
    if (!t && slurm_cpus && run_parse_long(slurm_cpus, 1, 4096, &st))
        t = st; /* inside a Slurm allocation: its cores per task */
    if (!t) {
        /* Remote hosts' core counts are unknown here: assume they match this one. */
        t = cores / per_host > 1 ? cores / per_host : 1;
        if (!local)
            herd_log(HERD_LOG_INFO, "note: assuming %ld cores per host like this one, so %ld thread(s) per "
                     "rank; set --threads-per-rank if not", cores, t);
    }
    return t;
}

/* How an attempt's ranks share the hosts' cores. */
typedef struct sizing {
    bool local;          /* every rank on this machine */
    long per_host;       /* the most ranks on one host */
    long threads;        /* cores and compute threads per rank */
    long env_threads;    /* OMP_NUM_THREADS: the command's own --threads, else threads */
    bool oversubscribed; /* more ranks x threads than this machine's cores */
} sizing;

/* Whether every host names this machine (localhost, a loopback address, its own
 * name): such a job shares this machine's cores as one without hosts does, and may
 * have to be oversubscribed (a --host-discovery printing localhost:3 on 2 cores). */
static bool only_this_machine(const run_hosts *h)
{
    char self[256] = "";
    gethostname(self, sizeof self - 1);
    size_t short_len = strcspn(self, ".");
    for (int i = 0; i < h->n; i++) {
        const char *n = h->v[i].name;
        if (strcmp(n, "localhost") != 0 && strncmp(n, "127.", 4) != 0 && strcmp(n, "::1") != 0 &&
            strcmp(n, self) != 0 && !(strlen(n) == short_len && strncmp(n, self, short_len) == 0))
            return false;
    }
    return true;
}

/* The launcher's own flags for one attempt: hosts, binding, exported variables (thread
 * pools, the user's -x, and under supervision the attempt's number) and MPI settings. */
static herd_status launcher_flags(const run_args *r, const run_attempt *at, const sizing *z, run_argv *a,
                                  char *why, size_t cap)
{
    const run_hosts *h = at->hosts && at->hosts->n ? at->hosts : NULL;
    /* Thread pools of libraries that size themselves from the environment (OpenMP,
     * OpenBLAS) would otherwise each take every core of the host. */
    char omp[64], blas[64], restarts[64], elastic_batch[64], elastic_ranks[64];
    char **exported = calloc((size_t)r->nx + 6, sizeof *exported), **mca = calloc((size_t)r->nmca + 10, sizeof *mca);
    if (!exported || !mca) {
        free(exported);
        free(mca);
        snprintf(why, cap, "out of memory");
        return HERD_ERR_NOMEM;
    }
    int nexp = 0, nmca = r->nmca;
    snprintf(omp, sizeof omp, "OMP_NUM_THREADS=%ld", z->env_threads);
    snprintf(blas, sizeof blas, "OPENBLAS_NUM_THREADS=%ld", z->env_threads);
    if (!exports(r->xvars, r->nx, "OMP_NUM_THREADS"))
        exported[nexp++] = omp;
    if (!exports(r->xvars, r->nx, "OPENBLAS_NUM_THREADS"))
        exported[nexp++] = blas;
    for (int k = 0; k < r->nx; k++)
        exported[nexp++] = r->xvars[k];
    if (at->restarts >= 0) { /* herd train prints its failures for herd run to read */
        snprintf(restarts, sizeof restarts, "HERD_RUN_RESTARTS=%ld", at->restarts);
        exported[nexp++] = restarts;
        exported[nexp++] = "HERD_RUN_SUPERVISED=1";
        /* What herd train gets as --elastic-batch and --elastic-ranks, for a program
         * that is not herd (Python's herd.train reads them). */
        snprintf(elastic_batch, sizeof elastic_batch, "HERD_RUN_ELASTIC_BATCH=%s",
                 r->elastic_batch ? r->elastic_batch : "keep");
        snprintf(elastic_ranks, sizeof elastic_ranks, "HERD_RUN_ELASTIC_RANKS=%ld", r->np);
        exported[nexp++] = elastic_batch;
        exported[nexp++] = elastic_ranks;
    }
    /* herd's own MPI settings go on a copy: every attempt chooses them afresh. */
    if (r->nmca > 0)
        memcpy(mca, r->mca, (size_t)r->nmca * sizeof *mca);
    /* Not the shared-memory single copy: no probe herd can run here predicts which of
     * Open MPI's two transports is faster for a job's messages (docs/cluster.md). */
    if (r->kind == LAUNCH_OPENMPI)
        launcher_defaults(mca, &nmca, r->xvars, r->nx, r->extra, at->restarts >= 0);
    const char *plugin = strcmp(HERD_MPI_FAMILY, "openmpi") == 0 ? "pmix"
                         : strcmp(HERD_MPI_FAMILY, "mpich") == 0 ? "pmi2" : NULL;
    for (int k = 0; k < r->extra->n; k++)
        if (strncmp(r->extra->v[k], "--mpi", 5) == 0)
            plugin = NULL; /* the user's own --mpi= */
    run_plan plan = {.kind = r->kind, .np = at->np, .threads = z->threads, .host_spec = at->host_spec,
                     .hosts = h ? h->v : NULL, .nhosts = h ? h->n : 0, .hostfile = at->hostfile,
                     .hostfile_colons = h && h->colons, .oversubscribed = z->oversubscribed,
                     .bind = r->bind ? r->bind : "core", .report = r->report, .exports = exported,
                     .nexports = nexp, .mca = mca, .nmca = nmca, .mpi_plugin = plugin};
    herd_status st = run_launcher_args(&plan, a, why, cap);
    free(exported);
    free(mca);
    return st;
}

static bool cmd_has(const run_args *r, const char *flag)
{
    bool given;
    run_cmd_option(r->cmd, r->ncmd, flag, &given);
    return given;
}

bool run_is_herd_command(const char *cmd)
{
    static const char *const known[] = {"train", "eval", "bench", "models", "topo", "doctor",
                                        "--version", "version"};
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        if (strcmp(cmd, known[k]) == 0)
            return true;
    return false;
}

/* Appends the herd command: this binary, COMMAND, --threads T where it takes them, and
 * under supervision what lets each attempt carry on from the last (see docs/cluster.md). */
static void push_command(const run_args *r, const run_attempt *at, const char *self, bool user_given, long t,
                         run_argv *a)
{
    /* Another program (python3 script.py, for herd.torch) runs as given: its threads come
     * from OMP_NUM_THREADS and its own flags, and it is not supervised. */
    bool herd = run_is_herd_command(r->cmd[0]);
    if (herd)
        run_argv_push(a, self);
    for (int k = 0; k < r->ncmd; k++)
        run_argv_push(a, r->cmd[k]);
    if (!herd)
        return;
    if (!user_given && takes_threads(r->cmd, r->ncmd)) {
        run_argv_push(a, "--threads");
        run_argv_pushf(a, "%ld", t);
    }
    if (at->restarts < 0)
        return;
    if (!cmd_has(r, "--resume"))
        run_argv_push(a, "--resume"); /* with no checkpoint yet herd train starts afresh */
    if (!cmd_has(r, "--elastic-batch")) {
        run_argv_push(a, "--elastic-batch");
        run_argv_push(a, r->elastic_batch);
    }
    /* The size the user's --batch-size, --grad-accum and --lr were given for. */
    if (!cmd_has(r, "--elastic-ranks")) {
        run_argv_push(a, "--elastic-ranks");
        run_argv_pushf(a, "%ld", r->np);
    }
}

herd_status run_build_command(const run_args *r, const run_attempt *at, run_command *c, char *why, size_t cap)
{
    *c = (run_command){.np = at->np, .cores = r->cores > 0 ? r->cores : sysconf(_SC_NPROCESSORS_ONLN)};
    if (c->cores < 1)
        c->cores = 1;
    sizing z = {.local = !at->hosts || at->hosts->n == 0 || only_this_machine(at->hosts)};
    z.per_host = z.local ? at->np : max_ranks_per_host(at->np, at->hosts->v, at->hosts->n);
    bool user_given;
    long user_t = user_threads(r->cmd, r->ncmd, &user_given);
    long t = c->threads = z.threads = threads_per_rank(r, z.per_host, c->cores, z.local, user_t);
    z.env_threads = user_t ? user_t : t;
    /* srun places tasks in its allocation, whose cores this machine's count does not tell. */
    c->oversubscribed = z.oversubscribed = z.local && r->kind != LAUNCH_SRUN && at->np * t > c->cores;

    /* The ranks run this very binary, by absolute path (the launcher's PATH may differ). */
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        snprintf(why, cap, "cannot resolve /proc/self/exe: %s", strerror(errno));
        return HERD_ERR_IO;
    }
    self[len] = '\0';
    run_argv *a = &c->argv;
    run_argv_push(a, r->launcher);
    HERD_TRY(launcher_flags(r, at, &z, a, why, cap));
    for (int k = 0; k < r->extra->n; k++)
        run_argv_push(a, r->extra->v[k]);
    push_command(r, at, self, user_given, t, a);
    if (a->oom) {
        snprintf(why, cap, "out of memory building the launcher's command");
        return HERD_ERR_NOMEM;
    }
    return HERD_OK;
}

herd_status run_choose_launcher(run_args *r, char *why, size_t cap)
{
    HERD_TRY(choose_launcher(r->kind_flag, &r->launcher, r->dry_run, &r->kind, &r->how, why, cap));
    /* A dry run only shows the command, so it works where the launcher is not installed. */
    if (!r->dry_run && !run_find_executable(r->launcher)) {
        snprintf(why, cap, "%s not found%s; install it (Debian/Ubuntu: apt-get install %s) or pass --mpirun PATH",
                 r->launcher, strchr(r->launcher, '/') ? "" : " in PATH", launcher_packages[r->kind]);
        return HERD_ERR_UNSUPPORTED;
    }
    if (geteuid() == 0 && r->kind == LAUNCH_OPENMPI) {
        /* Open MPI refuses root without these; older mpirun versions only read the
         * environment, newer ones the flag. */
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
    return HERD_OK;
}
