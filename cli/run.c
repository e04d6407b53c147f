/* herd run: launch a multi-process herd job through an MPI launcher (like horovodrun /
 * torchrun).
 *
 * herd does not start processes itself: the launcher already knows how to reach hosts,
 * bind ranks and wire them up, so this only builds a sensible command line for it —
 * Open MPI's mpirun, MPICH's Hydra mpiexec or Slurm's srun, each in its own flags —
 * and execs it; with --max-restarts it runs it, watches it and relaunches it instead
 * (run_supervise.c), each attempt's command built by the same code. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "run.h"
#include "tools/tools.h"

#ifndef HERD_MPI_FAMILY
#define HERD_MPI_FAMILY ""
#endif
#ifndef HERD_MPIEXEC
#define HERD_MPIEXEC ""
#endif

static const char run_help[] =
    "usage: herd run -np N [options] -- COMMAND [ARGS...]\n"
    "\n"
    "Starts N processes of this herd binary running COMMAND (train, eval, bench, models,\n"
    "topo, doctor) through an MPI launcher, one rank per process, each bound to its own\n"
    "cores.\n"
    "\n"
    "  -np N, -n N               number of ranks (required)\n"
    "  -H HOSTS                  hosts and slots, e.g. a:4,b:4 (default: this machine)\n"
    "  --hostfile FILE           hosts, one a line: 'host slots=N' (Open MPI) or 'host:N'\n"
    "                            (Hydra); given to a launcher of the other form as a list\n"
    "  --threads-per-rank T      cores and compute threads per rank (default: this\n"
    "                            machine's cores / ranks per host, at least 1)\n"
    "  --bind-to X               core (default: T cores per rank), hwthread, socket, numa\n"
    "                            or none\n"
    "  -x VAR[=VALUE]            export an environment variable to every rank (repeatable)\n"
    "  --mca KEY VALUE           Open MPI parameter, e.g. --mca btl_tcp_if_include eth0\n"
    "                            (herd leaves btl_vader_single_copy_mechanism to Open MPI\n"
    "                            and to you: herd doctor shows this host's figures)\n"
    "  --mpirun-args \"ARGS\"      more launcher flags, split as a shell splits words ('...'\n"
    "                            and \"...\" quote; repeatable), put before the binary\n"
    "  --mpirun PATH             the launcher binary, its kind read from its --version\n"
    "                            (default: the launcher of herd's own MPI)\n"
    "  --launcher KIND           the flags to speak: openmpi (mpirun), hydra (MPICH's\n"
    "                            mpiexec) or srun (default: --mpirun's kind, else srun inside\n"
    "                            a Slurm allocation, else herd's MPI)\n"
    "  --report-bindings         ask the launcher to print each rank's cores\n"
    "  --dry-run                 print the command (the first attempt's) and exit\n"
    "\n"
    "Restarts, for train with --checkpoint-dir (docs/cluster.md):\n"
    "  --max-restarts K          run and watch the job; when it fails, relaunch it from\n"
    "                            the latest checkpoint, up to K times (not after a set-up\n"
    "                            failure, a usage error, SIGINT or SIGTERM)\n"
    "  --min-np M, --max-np N    each restart runs min(N, slots offered) ranks, waiting\n"
    "                            for M (defaults 1 and -np; -np is the first attempt's)\n"
    "  --host-discovery CMD      shell command printing 'host:slots' lines, asked before\n"
    "                            each attempt (default: -H, the hostfile read again, or\n"
    "                            this machine with -np slots)\n"
    "  --elastic-timeout S       how long to wait for M slots (default 600)\n"
    "  --elastic-batch keep|scale  for train: keep the global batch, or the per-rank\n"
    "                            batch with the lr scaled (default keep)\n"
    "\n"
    "Each rank gets --threads T (unless COMMAND has --threads already) and\n"
    "OMP_NUM_THREADS=T, OPENBLAS_NUM_THREADS=T. More ranks than cores on this machine\n"
    "run oversubscribed and unbound (slow; for testing only). Other hosts must have\n"
    "herd at the same path. Under srun, --mpi= follows herd's MPI (pmix for Open MPI,\n"
    "pmi2 for MPICH; see docs/cluster.md).\n";

/* Prints s so that a POSIX shell reads it back as one word. */
static void print_quoted(FILE *out, const char *s)
{
    bool plain = *s != '\0';
    for (const char *p = s; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=,@%+", *p))
            plain = false;
    if (plain) {
        fputs(s, out);
        return;
    }
    fputc('\'', out);
    for (const char *p = s; *p; p++) {
        if (*p == '\'')
            fputs("'\\''", out);
        else
            fputc(*p, out);
    }
    fputc('\'', out);
}

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

/* True when file is an executable mpirun: a path as given, or found in PATH. */
static bool find_executable(const char *name)
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
    return v && cli_parse_int(v, 1, 4096, &t) ? t : 0; /* 0 = all cores: leave it */
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
static bool user_sets_mca(const char *name, char **mca, int nmca, char **xvars, int nx, const argvec *extra)
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
static void launcher_defaults(char **mca, int *nmca, char **xvars, int nx, const argvec *extra,
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
 * MPI. Returns -1 when fine, else the exit code. */
static int choose_launcher(const char *kind_flag, const char **launcher, bool dry_run, launch_kind *kind,
                           const char **how)
{
    static const char *const defaults[] = {"mpirun", "mpiexec.hydra", "srun"};
    launch_kind own = strcmp(HERD_MPI_FAMILY, "mpich") == 0 ? LAUNCH_HYDRA : LAUNCH_OPENMPI;
    if (kind_flag && !launch_kind_parse(kind_flag, kind))
        return cli_usage_error("run", "--launcher '%s': expected openmpi, hydra or srun", kind_flag);
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
            bool have_srun = find_executable("srun");
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
        return -1;
    }
    if (kind_flag)
        return -1;
    char why[512];
    *how = "its --version";
    if (launch_kind_detect(*launcher, kind, why, sizeof why))
        return -1;
    if (!dry_run && !find_executable(*launcher)) {
        fprintf(stderr, "herd: error: %s not found; install it (Debian/Ubuntu: apt-get install "
                        "openmpi-bin, mpich or slurm-client) or pass --mpirun PATH\n", *launcher);
        return CLI_FAIL;
    }
    if (!dry_run) {
        fprintf(stderr, "herd: error: %s; name its kind with --launcher openmpi|hydra|srun\n", why);
        return CLI_FAIL;
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
    fprintf(stderr, "herd: note: %s\n", why);
    return -1;
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
    if (!t && slurm_cpus && cli_parse_int(slurm_cpus, 1, 4096, &st))
        t = st; /* inside a Slurm allocation: its cores per task */
    if (!t) {
        /* Remote hosts' core counts are unknown here: assume they match this one. */
        t = cores / per_host > 1 ? cores / per_host : 1;
        if (!local)
            fprintf(stderr, "herd: note: assuming %ld cores per host like this one, so %ld "
                            "thread(s) per rank; set --threads-per-rank if not\n", cores, t);
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
static bool launcher_flags(const run_args *r, const run_attempt *at, const sizing *z, argvec *a, char *why,
                           size_t cap)
{
    const run_hosts *h = at->hosts && at->hosts->n ? at->hosts : NULL;
    /* Thread pools of libraries that size themselves from the environment (OpenMP,
     * OpenBLAS) would otherwise each take every core of the host. */
    char omp[64], blas[64], restarts[64];
    char **exported = calloc((size_t)r->nx + 4, sizeof *exported), **mca = calloc((size_t)r->nmca + 10, sizeof *mca);
    if (!exported || !mca) {
        fprintf(stderr, "herd: error: out of memory\n");
        exit(CLI_FAIL);
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
    }
    /* herd's own MPI settings go on a copy: every attempt chooses them afresh. */
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
    bool built = run_launcher_args(&plan, a, why, cap);
    free(exported);
    free(mca);
    return built;
}

static bool cmd_has(const run_args *r, const char *flag)
{
    bool given;
    run_cmd_option(r->cmd, r->ncmd, flag, &given);
    return given;
}

/* Appends the herd command: this binary, COMMAND, --threads T where it takes them, and
 * under supervision what lets each attempt carry on from the last (see docs/cluster.md). */
static void push_command(const run_args *r, const run_attempt *at, const char *self, bool user_given, long t,
                         argvec *a)
{
    argv_push(a, self);
    for (int k = 0; k < r->ncmd; k++)
        argv_push(a, r->cmd[k]);
    if (!user_given && takes_threads(r->cmd, r->ncmd)) {
        argv_push(a, "--threads");
        argv_pushf(a, "%ld", t);
    }
    if (at->restarts < 0)
        return;
    if (!cmd_has(r, "--resume"))
        argv_push(a, "--resume"); /* with no checkpoint yet herd train starts afresh */
    if (!cmd_has(r, "--elastic-batch")) {
        argv_push(a, "--elastic-batch");
        argv_push(a, r->elastic_batch);
    }
    /* The size the user's --batch-size, --grad-accum and --lr were given for. */
    if (!cmd_has(r, "--elastic-ranks")) {
        argv_push(a, "--elastic-ranks");
        argv_pushf(a, "%ld", r->np);
    }
}

int run_build_command(const run_args *r, const run_attempt *at, argvec *a)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1)
        cores = 1;
    sizing z = {.local = !at->hosts || at->hosts->n == 0 || only_this_machine(at->hosts)};
    z.per_host = z.local ? at->np : max_ranks_per_host(at->np, at->hosts->v, at->hosts->n);
    bool user_given;
    long user_t = user_threads(r->cmd, r->ncmd, &user_given);
    long t = z.threads = threads_per_rank(r, z.per_host, cores, z.local, user_t);
    z.env_threads = user_t ? user_t : t;
    /* srun places tasks in its allocation, whose cores this machine's count does not tell. */
    z.oversubscribed = z.local && r->kind != LAUNCH_SRUN && at->np * t > cores;

    /* The ranks run this very binary, by absolute path (the launcher's PATH may differ). */
    char self[PATH_MAX], why[512];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "herd: error: cannot resolve /proc/self/exe: %s\n", strerror(errno));
        return CLI_FAIL;
    }
    self[len] = '\0';
    argv_push(a, r->launcher);
    if (!launcher_flags(r, at, &z, a, why, sizeof why))
        return cli_usage_error("run", "%s", why);
    for (int k = 0; k < r->extra->n; k++)
        argv_push(a, r->extra->v[k]);
    push_command(r, at, self, user_given, t, a);

    cli_line line;
    FILE *out = cli_line_begin(&line, stderr);
    fprintf(out, "herd: launcher: %s (%s)\nherd: launching:", launch_kind_name(r->kind), r->how);
    for (int k = 0; k < a->n; k++) {
        fputc(' ', out);
        print_quoted(out, a->v[k]);
    }
    fputc('\n', out);
    if (z.oversubscribed)
        fprintf(out, "herd: note: %ld rank(s) x %ld thread(s) on %ld core(s): oversubscribed, "
                     "ranks unbound; timings will not mean much\n", at->np, t, cores);
    cli_line_end(&line);
    return -1;
}

/* What every herd run needs: a size and a herd command. -1 when fine, else the exit code. */
static int check_command(const run_args *r)
{
    if (r->np == 0)
        return cli_usage_error("run", "-np N is required");
    if (r->hosts && r->hostfile)
        return cli_usage_error("run", "give either -H or --hostfile, not both");
    if (r->ncmd == 0)
        return cli_usage_error("run", "no command; e.g. herd run -np 2 -- train --model lenet5");
    static const char *const known[] = {"train", "eval", "bench", "models", "topo", "doctor",
                                        "--version", "version"};
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        if (strcmp(r->cmd[0], known[k]) == 0)
            return -1;
    return cli_usage_error("run", "'%s' is not a herd command; herd run starts herd itself "
                           "(train, eval, bench, models, topo, doctor)", r->cmd[0]);
}

/* The hosts of -H or --hostfile into h (none for this machine); -1 or the exit code. */
static int read_fixed_hosts(const run_args *r, run_hosts *h)
{
    char why[PATH_MAX + 128];
    if (r->hosts && !run_parse_host_list(r->hosts, h, why, sizeof why))
        return cli_usage_error("run", "%s", why);
    if (r->hostfile && !run_read_hostfile(r->hostfile, h, why, sizeof why)) {
        fprintf(stderr, "herd: error: %s\n", why);
        return CLI_FAIL;
    }
    return -1;
}

/* Everything before the first launch: the command, the hosts, supervision's flags, the
 * launcher. -1 when fine, else the exit code. */
static int prepare(run_args *r, run_hosts *fixed)
{
    int rc = check_command(r);
    if (rc < 0)
        rc = read_fixed_hosts(r, fixed);
    if (rc < 0)
        rc = run_check_supervised(r, r->hosts || r->hostfile ? fixed : NULL);
    if (rc < 0)
        rc = choose_launcher(r->kind_flag, &r->launcher, r->dry_run, &r->kind, &r->how);
    /* A dry run only shows the command, so it works where the launcher is not installed. */
    if (rc < 0 && !r->dry_run && !find_executable(r->launcher)) {
        fprintf(stderr, "herd: error: %s not found%s; install it (Debian/Ubuntu: apt-get install %s) "
                        "or pass --mpirun PATH\n", r->launcher, strchr(r->launcher, '/') ? "" : " in PATH",
                launcher_packages[r->kind]);
        return CLI_FAIL;
    }
    if (rc < 0 && geteuid() == 0 && r->kind == LAUNCH_OPENMPI) {
        /* Open MPI refuses root without these; older mpirun versions only read the
         * environment, newer ones the flag. */
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
    return rc;
}

static int run_plan_and_exec(run_args *r)
{
    run_hosts fixed = {0};
    int rc = prepare(r, &fixed);
    argvec a = {0};
    if (rc < 0 && r->max_restarts >= 0)
        rc = run_supervise(r, &fixed);
    else if (rc < 0)
        rc = run_build_command(r, &(run_attempt){.np = r->np, .hosts = &fixed, .host_spec = r->hosts,
                                                 .hostfile = r->hostfile, .restarts = -1}, &a);
    run_hosts_free(&fixed);
    if (rc < 0 && !r->dry_run) {
        execvp(r->launcher, a.v);
        fprintf(stderr, "herd: error: cannot start %s: %s\n", r->launcher, strerror(errno));
        rc = CLI_FAIL;
    }
    argv_free(&a);
    return rc < 0 ? CLI_OK : rc;
}

/* Parses one option at argv[*i] into r (leaving *i on its last word): -1 when done,
 * else the exit code. xvars and mca have room for every word of argv. */
static int parse_option(int argc, char **argv, int *i, run_args *r, argvec *extra)
{
    const char *a = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    char why[1024];
    int rc = run_parse_supervise_flag(argc, argv, i, r);
    if (rc != -2)
        return rc;
    /* Options whose value is taken as it is (checked later). */
    static const struct {
        const char *flag, *needs;
    } words[] = {{"-H", "a host list such as a:4,b:4"}, {"--host", "a host list such as a:4,b:4"},
                 {"--hostfile", "a file"}, {"--mpirun", "a path"}, {"--launcher", "openmpi, hydra or srun"}};
    const char **dst[] = {&r->hosts, &r->hosts, &r->hostfile, &r->launcher, &r->kind_flag};
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
        if (strcmp(a, words[k].flag) == 0) {
            if (!val)
                return cli_usage_error("run", "%s needs %s", a, words[k].needs);
            *dst[k] = argv[++*i];
            return -1;
        }
    if (strcmp(a, "-np") == 0 || strcmp(a, "-n") == 0 || strcmp(a, "--np") == 0) {
        if (!val || !cli_parse_int(argv[++*i], 1, 1 << 20, &r->np))
            return cli_usage_error("run", "%s needs a number of ranks >= 1%s%s%s", a,
                                   val ? ", got '" : "", val ? val : "", val ? "'" : "");
    } else if (strcmp(a, "--threads-per-rank") == 0) {
        if (!val || !cli_parse_int(argv[++*i], 1, 4096, &r->tpr))
            return cli_usage_error("run", "--threads-per-rank needs an integer >= 1%s%s%s",
                                   val ? ", got '" : "", val ? val : "", val ? "'" : "");
    } else if (strcmp(a, "--bind-to") == 0) {
        static const char *const kinds[] = {"core", "hwthread", "socket", "numa", "none"};
        r->bind = val ? argv[++*i] : "";
        bool known = false;
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
            known |= strcmp(r->bind, kinds[k]) == 0;
        if (!known)
            return cli_usage_error("run", "--bind-to '%s': expected core, hwthread, socket, numa "
                                   "or none", r->bind);
    } else if (strcmp(a, "-x") == 0) {
        if (!val || val[0] == '\0' || val[0] == '=')
            return cli_usage_error("run", "-x needs a variable name, VAR or VAR=VALUE");
        r->xvars[r->nx++] = argv[++*i];
    } else if (strcmp(a, "--mca") == 0) {
        if (*i + 2 >= argc)
            return cli_usage_error("run", "--mca needs a key and a value");
        r->mca[r->nmca++] = argv[++*i];
        r->mca[r->nmca++] = argv[++*i];
    } else if (strcmp(a, "--mpirun-args") == 0) {
        if (!val)
            return cli_usage_error("run", "--mpirun-args needs the flags as one argument");
        if (!argv_split(extra, argv[++*i], why, sizeof why))
            return cli_usage_error("run", "--mpirun-args: %s", why);
    } else if (strcmp(a, "--dry-run") == 0) {
        r->dry_run = true;
    } else if (strcmp(a, "--report-bindings") == 0) {
        r->report = true;
    } else {
        return cli_usage_error("run", "unknown option '%s'", a);
    }
    return -1;
}

static int run_with(int argc, char **argv, char **xvars, char **mca)
{
    argvec extra = {0};
    run_args r = {.xvars = xvars, .mca = mca, .extra = &extra, .max_restarts = -1, .elastic_timeout = -1};
    int rc = -1, i;
    /* Hand-parsed: mpirun-style single-dash -np, and everything from the first
     * non-option (or after --) belongs to the command. */
    for (i = 1; i < argc && rc < 0; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        if (argv[i][0] != '-')
            break;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(run_help, stdout);
            rc = CLI_OK;
        } else {
            rc = parse_option(argc, argv, &i, &r, &extra);
        }
    }
    if (rc < 0) {
        r.cmd = argv + i;
        r.ncmd = argc - i;
        rc = run_plan_and_exec(&r);
    }
    argv_free(&extra);
    return rc;
}

int cmd_run(int argc, char **argv)
{
    char **xvars = calloc((size_t)argc + 1, sizeof *xvars), **mca = calloc((size_t)argc + 1, sizeof *mca);
    int rc = CLI_FAIL;
    if (xvars && mca)
        rc = run_with(argc, argv, xvars, mca);
    else
        fprintf(stderr, "herd: error: out of memory\n");
    free(xvars);
    free(mca);
    return rc;
}
