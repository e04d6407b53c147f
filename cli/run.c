/* herd run: launch a multi-process herd job through an MPI launcher (like horovodrun /
 * torchrun).
 *
 * herd does not start processes itself: the launcher already knows how to reach hosts,
 * bind ranks and wire them up, so this only builds a sensible command line for it —
 * Open MPI's mpirun, MPICH's Hydra mpiexec or Slurm's srun, each in its own flags —
 * and execs it. */
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
    "                            (herd adds btl_vader_single_copy_mechanism none where\n"
    "                            a probe finds CMA slower than copying; this overrides it)\n"
    "  --mpirun-args \"ARGS\"      more launcher flags, split as a shell splits words ('...'\n"
    "                            and \"...\" quote; repeatable), put before the binary\n"
    "  --mpirun PATH             the launcher binary, its kind read from its --version\n"
    "                            (default: the launcher of herd's own MPI)\n"
    "  --launcher KIND           the flags to speak: openmpi (mpirun), hydra (MPICH's\n"
    "                            mpiexec) or srun (default: --mpirun's kind, else herd's MPI)\n"
    "  --report-bindings         ask the launcher to print each rank's cores\n"
    "  --dry-run                 print the command and exit\n"
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

#define MAX_HOSTS 4096

/* Adds host "name" (len bytes) with slots; false when the list is full. */
static bool add_host(run_host *hosts, int *n, const char *name, size_t len, long slots)
{
    if (*n >= MAX_HOSTS)
        return false;
    hosts[*n].name = strndup(name, len);
    if (!hosts[*n].name) {
        fprintf(stderr, "herd: error: out of memory\n");
        exit(CLI_FAIL);
    }
    hosts[(*n)++].slots = slots;
    return true;
}

/* "host" or "host:N" (len bytes) -> name length and slots (dflt without :N); false when
 * malformed. */
static bool parse_host_slots(const char *p, size_t len, size_t *name_len, long dflt, long *slots)
{
    const char *colon = memchr(p, ':', len);
    *name_len = colon ? (size_t)(colon - p) : len;
    *slots = dflt;
    if (*name_len == 0)
        return false;
    if (!colon)
        return true;
    char num[32];
    size_t nl = len - *name_len - 1;
    if (nl == 0 || nl >= sizeof num)
        return false;
    memcpy(num, colon + 1, nl);
    num[nl] = '\0';
    return cli_parse_int(num, 1, 1 << 20, slots);
}

/* "a:4,b:4" -> hosts (-H without :N means 1 slot, as in Open MPI). */
static int parse_host_list(const char *spec, run_host *hosts)
{
    int n = 0;
    for (const char *p = spec; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p), name_len;
        long slots;
        if (!parse_host_slots(p, len, &name_len, 1, &slots) || !add_host(hosts, &n, p, name_len, slots))
            return -1;
        p = end ? end + 1 : p + len;
    }
    return n;
}

/* Hosts of an Open MPI hostfile ('host slots=N') or a Hydra one ('host:N'); 0 slots
 * when not given (the launcher then counts the host's cores, which we cannot see from
 * here). *colons: the file uses Hydra's form. Returns -1 with errno, or -2 for a bad
 * line (*bad_line set). */
static int parse_hostfile(const char *path, run_host *hosts, bool *colons, int *bad_line)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[1024];
    int n = 0, lineno = 0;
    bool slots_form = false;
    *colons = false;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *tok = strtok(line, " \t\r\n");
        if (!tok)
            continue;
        size_t name_len;
        long slots;
        bool ok = parse_host_slots(tok, strlen(tok), &name_len, 0, &slots);
        *colons |= name_len < strlen(tok);
        for (char *opt; ok && (opt = strtok(NULL, " \t\r\n"));)
            if (strncmp(opt, "slots=", 6) == 0) {
                ok = cli_parse_int(opt + 6, 1, 1 << 20, &slots);
                slots_form = true;
            }
        if (!ok || (*colons && slots_form) || !add_host(hosts, &n, tok, name_len, slots)) {
            *bad_line = lineno;
            fclose(f);
            return -2;
        }
    }
    fclose(f);
    return n;
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

/* The value of --threads N / --threads=N in the command, or 0. */
static long user_threads(char **cmd, int n, bool *given)
{
    *given = false;
    for (int i = 1; i < n; i++) {
        const char *v = NULL;
        if (strcmp(cmd[i], "--") == 0)
            break;
        if (strcmp(cmd[i], "--threads") == 0 && i + 1 < n)
            v = cmd[i + 1];
        else if (strncmp(cmd[i], "--threads=", 10) == 0)
            v = cmd[i] + 10;
        if (v) {
            long t;
            *given = true;
            return cli_parse_int(v, 1, 4096, &t) ? t : 0; /* 0 = all cores: leave it */
        }
    }
    return 0;
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

/* Open MPI copies large messages between local ranks with CMA by default; where CMA
 * reads at under half memcpy's speed, copying through shared memory is cheaper (see
 * src/tools/shm_probe.c). Measured here, said aloud, and never over the user's own
 * setting. Remote hosts are assumed to behave like this one. Adds the --mca pair. */
static void choose_single_copy(char **mca, int *nmca, char **xvars, int nx, const argvec *extra,
                               long per_host)
{
    static const char *const names[] = {"btl_vader_single_copy_mechanism",
                                        "btl_sm_single_copy_mechanism"};
    if (per_host < 2)
        return;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (user_sets_mca(names[k], mca, *nmca, xvars, nx, extra))
            return;
    herd_cma_probe p;
    if (herd_probe_cma(&p) < 0 || !p.cma_slower)
        return;
    mca[(*nmca)++] = (char *)names[0];
    mca[(*nmca)++] = "none";
    fprintf(stderr, "herd: note: CMA reads another process's memory at %.1f GB/s here against "
                    "memcpy's %.1f GB/s, so local ranks copy through shared memory instead "
                    "(keep CMA with --mca %s cma)\n", p.cma_gbps, p.memcpy_gbps, names[0]);
}

/* Open MPI's mpirun hears that a host has vanished only from TCP keepalive on its
 * connection to that host's daemon (by default after 300 s idle and 9 probes 20 s
 * apart), and not at all once it has sent the daemon something, which it does when a
 * rank aborts: then it waits for the host until TCP gives up, some 15 minutes. With
 * these, a host unreachable for 10-15 s ends the job (mpirun's "lost communication
 * with a remote daemon"), and the cut-off daemons lose their lifeline likewise;
 * herd's stall timeout leaves the launcher 10 s for it before its own abort
 * (src/dist/comm_mpi_stall.c). docs/cluster.md has the why and the trade-off. The
 * user's own setting (--mca, -x, --mpirun-args or the environment) wins. */
static void keepalive_defaults(char **mca, int *nmca, char **xvars, int nx, const argvec *extra)
{
    static const char *const params[][2] = {{"oob_tcp_keepalive_time", "5"},
                                            {"oob_tcp_keepalive_intvl", "2"},
                                            {"oob_tcp_keepalive_probes", "5"}};
    int given = *nmca;
    for (size_t k = 0; k < sizeof params / sizeof params[0]; k++)
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
        /* The launcher CMake found for herd's MPI, when it is of that kind. */
        *launcher = *kind == own && HERD_MPIEXEC[0] ? HERD_MPIEXEC : defaults[*kind];
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

/* What the command line asked for. */
typedef struct run_args {
    long np, tpr;
    const char *hosts, *hostfile, *launcher, *kind_flag, *bind;
    bool dry_run, report;
    char **xvars, **mca;
    int nx, nmca;
    const argvec *extra; /* --mpirun-args, split */
    char **cmd;
    int ncmd;
} run_args;

/* The packages that bring each kind's launcher (Debian). */
static const char *const launcher_packages[] = {"openmpi-bin", "mpich", "slurm-client"};

static int run_plan_and_exec(run_args *r)
{
    if (r->np == 0)
        return cli_usage_error("run", "-np N is required");
    if (r->hosts && r->hostfile)
        return cli_usage_error("run", "give either -H or --hostfile, not both");
    if (r->ncmd == 0)
        return cli_usage_error("run", "no command; e.g. herd run -np 2 -- train --model lenet5");
    static const char *const known[] = {"train", "eval", "bench", "models", "topo", "doctor",
                                        "--version", "version"};
    bool ok = false;
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        ok |= strcmp(r->cmd[0], known[k]) == 0;
    if (!ok)
        return cli_usage_error("run", "'%s' is not a herd command; herd run starts herd itself "
                               "(train, eval, bench, models, topo, doctor)", r->cmd[0]);
    launch_kind kind;
    const char *launcher = r->launcher, *how = NULL;
    int rc = choose_launcher(r->kind_flag, &launcher, r->dry_run, &kind, &how);
    if (rc >= 0)
        return rc;

    /* How many ranks share a host, and how many cores each may use. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1)
        cores = 1;
    static run_host hosts[MAX_HOSTS];
    int nhosts = 0, bad_line = 0;
    bool colons = false;
    bool local = !r->hosts && !r->hostfile;
    if (r->hosts && (nhosts = parse_host_list(r->hosts, hosts)) <= 0)
        return cli_usage_error("run", "bad host list '%s'; expected host[:slots],... such as a:4,b:4", r->hosts);
    if (r->hostfile && (nhosts = parse_hostfile(r->hostfile, hosts, &colons, &bad_line)) <= 0) {
        if (nhosts == -2)
            fprintf(stderr, "herd: error: %s:%d: expected 'host', 'host slots=N' or 'host:N' "
                            "(one form per file)\n", r->hostfile, bad_line);
        else
            fprintf(stderr, "herd: error: cannot read hosts from '%s': %s\n", r->hostfile,
                    nhosts < 0 ? strerror(errno) : "no host lines");
        return CLI_FAIL;
    }
    long per_host = local ? r->np : max_ranks_per_host(r->np, hosts, nhosts);
    bool user_given;
    long user_t = user_threads(r->cmd, r->ncmd, &user_given);
    long t = r->tpr;
    const char *slurm_cpus = getenv("SLURM_CPUS_PER_TASK");
    long st;
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
    /* srun places tasks in its allocation, whose cores this machine's count does not tell. */
    bool oversubscribed = local && kind != LAUNCH_SRUN && r->np * t > cores;

    /* Thread pools of libraries that size themselves from the environment (OpenMP,
     * OpenBLAS) would otherwise each take every core of the host. */
    long env_t = user_t ? user_t : t;
    char omp[64], blas[64];
    char **exported = calloc((size_t)r->nx + 2, sizeof *exported);
    if (!exported) {
        fprintf(stderr, "herd: error: out of memory\n");
        return CLI_FAIL;
    }
    int nexp = 0;
    snprintf(omp, sizeof omp, "OMP_NUM_THREADS=%ld", env_t);
    snprintf(blas, sizeof blas, "OPENBLAS_NUM_THREADS=%ld", env_t);
    if (!exports(r->xvars, r->nx, "OMP_NUM_THREADS"))
        exported[nexp++] = omp;
    if (!exports(r->xvars, r->nx, "OPENBLAS_NUM_THREADS"))
        exported[nexp++] = blas;
    for (int k = 0; k < r->nx; k++)
        exported[nexp++] = r->xvars[k];
    if (kind == LAUNCH_OPENMPI) {
        choose_single_copy(r->mca, &r->nmca, r->xvars, r->nx, r->extra, per_host);
        keepalive_defaults(r->mca, &r->nmca, r->xvars, r->nx, r->extra);
    }
    const char *plugin = strcmp(HERD_MPI_FAMILY, "openmpi") == 0 ? "pmix"
                         : strcmp(HERD_MPI_FAMILY, "mpich") == 0 ? "pmi2" : NULL;
    for (int k = 0; k < r->extra->n; k++)
        if (strncmp(r->extra->v[k], "--mpi", 5) == 0)
            plugin = NULL; /* the user's own --mpi= */
    run_plan plan = {.kind = kind, .np = r->np, .threads = t, .host_spec = r->hosts,
                     .hosts = nhosts ? hosts : NULL,
                     .nhosts = nhosts, .hostfile = r->hostfile, .hostfile_colons = colons,
                     .oversubscribed = oversubscribed, .bind = r->bind ? r->bind : "core",
                     .report = r->report, .exports = exported, .nexports = nexp, .mca = r->mca,
                     .nmca = r->nmca, .mpi_plugin = plugin};
    argvec a = {0};
    char why[512];
    argv_push(&a, launcher);
    bool built = run_launcher_args(&plan, &a, why, sizeof why);
    free(exported);
    for (int k = 0; k < nhosts; k++)
        free(hosts[k].name);
    if (!built) {
        argv_free(&a);
        return cli_usage_error("run", "%s", why);
    }
    for (int k = 0; k < r->extra->n; k++)
        argv_push(&a, r->extra->v[k]);

    /* The ranks run this very binary, by absolute path (the launcher's PATH may differ). */
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "herd: error: cannot resolve /proc/self/exe: %s\n", strerror(errno));
        argv_free(&a);
        return CLI_FAIL;
    }
    self[len] = '\0';
    argv_push(&a, self);
    for (int k = 0; k < r->ncmd; k++)
        argv_push(&a, r->cmd[k]);
    if (!user_given && takes_threads(r->cmd, r->ncmd)) {
        argv_push(&a, "--threads");
        argv_pushf(&a, "%ld", t);
    }

    /* A dry run only shows the command, so it works where the launcher is not installed. */
    if (!r->dry_run && !find_executable(launcher)) {
        fprintf(stderr, "herd: error: %s not found%s; install it (Debian/Ubuntu: apt-get install %s) "
                        "or pass --mpirun PATH\n", launcher, strchr(launcher, '/') ? "" : " in PATH",
                launcher_packages[kind]);
        argv_free(&a);
        return CLI_FAIL;
    }
    fprintf(stderr, "herd: launcher: %s (%s)\nherd: launching:", launch_kind_name(kind), how);
    for (int k = 0; k < a.n; k++) {
        fputc(' ', stderr);
        print_quoted(stderr, a.v[k]);
    }
    fputc('\n', stderr);
    if (oversubscribed)
        fprintf(stderr, "herd: note: %ld rank(s) x %ld thread(s) on %ld core(s): oversubscribed, "
                        "ranks unbound; timings will not mean much\n", r->np, t, cores);
    fflush(stderr);
    if (r->dry_run) {
        argv_free(&a);
        return CLI_OK;
    }

    if (geteuid() == 0 && kind == LAUNCH_OPENMPI) {
        /* Open MPI refuses root without these; older mpirun versions only read the
         * environment, newer ones the flag. */
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
    execvp(launcher, a.v);
    fprintf(stderr, "herd: error: cannot start %s: %s\n", launcher, strerror(errno));
    argv_free(&a);
    return CLI_FAIL;
}

/* xvars has argc + 2 slots and mca argc + 8 (the -x and --mca values, and herd's own:
 * single copy and keepalive). */
static int run_with(int argc, char **argv, char **xvars, char **mca)
{
    long np = 0, tpr = 0;
    const char *hosts = NULL, *hostfile = NULL, *launcher = NULL, *kind_flag = NULL, *bind = NULL;
    bool dry_run = false, report = false;
    int nx = 0, nmca = 0, i;
    argvec extra = {0};
    char why[1024];

    /* Hand-parsed: mpirun-style single-dash -np, and everything from the first
     * non-option (or after --) belongs to the command. */
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-')
            break;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(run_help, stdout);
            return CLI_OK;
        } else if (strcmp(a, "-np") == 0 || strcmp(a, "-n") == 0 || strcmp(a, "--np") == 0) {
            if (!has_val || !cli_parse_int(argv[++i], 1, 1 << 20, &np))
                return cli_usage_error("run", "%s needs a number of ranks >= 1%s%s%s", a,
                                       has_val ? ", got '" : "", has_val ? argv[i] : "", has_val ? "'" : "");
        } else if (strcmp(a, "-H") == 0 || strcmp(a, "--host") == 0) {
            if (!has_val)
                return cli_usage_error("run", "%s needs a host list such as a:4,b:4", a);
            hosts = argv[++i];
        } else if (strcmp(a, "--hostfile") == 0) {
            if (!has_val)
                return cli_usage_error("run", "--hostfile needs a file");
            hostfile = argv[++i];
        } else if (strcmp(a, "--threads-per-rank") == 0) {
            if (!has_val || !cli_parse_int(argv[++i], 1, 4096, &tpr))
                return cli_usage_error("run", "--threads-per-rank needs an integer >= 1%s%s%s",
                                       has_val ? ", got '" : "", has_val ? argv[i] : "", has_val ? "'" : "");
        } else if (strcmp(a, "--bind-to") == 0) {
            static const char *const kinds[] = {"core", "hwthread", "socket", "numa", "none"};
            bind = has_val ? argv[++i] : "";
            bool known = false;
            for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
                known |= strcmp(bind, kinds[k]) == 0;
            if (!known)
                return cli_usage_error("run", "--bind-to '%s': expected core, hwthread, socket, numa "
                                       "or none", bind);
        } else if (strcmp(a, "-x") == 0) {
            if (!has_val || argv[i + 1][0] == '\0' || argv[i + 1][0] == '=')
                return cli_usage_error("run", "-x needs a variable name, VAR or VAR=VALUE");
            xvars[nx++] = argv[++i];
        } else if (strcmp(a, "--mca") == 0) {
            if (i + 2 >= argc)
                return cli_usage_error("run", "--mca needs a key and a value");
            mca[nmca++] = argv[++i];
            mca[nmca++] = argv[++i];
        } else if (strcmp(a, "--mpirun-args") == 0) {
            if (!has_val) {
                argv_free(&extra);
                return cli_usage_error("run", "--mpirun-args needs the flags as one argument");
            }
            if (!argv_split(&extra, argv[++i], why, sizeof why)) {
                argv_free(&extra);
                return cli_usage_error("run", "--mpirun-args: %s", why);
            }
        } else if (strcmp(a, "--mpirun") == 0) {
            if (!has_val)
                return cli_usage_error("run", "--mpirun needs a path");
            launcher = argv[++i];
        } else if (strcmp(a, "--launcher") == 0) {
            if (!has_val)
                return cli_usage_error("run", "--launcher needs openmpi, hydra or srun");
            kind_flag = argv[++i];
        } else if (strcmp(a, "--dry-run") == 0) {
            dry_run = true;
        } else if (strcmp(a, "--report-bindings") == 0) {
            report = true;
        } else {
            argv_free(&extra);
            return cli_usage_error("run", "unknown option '%s'", a);
        }
    }
    int rc = run_plan_and_exec(&(run_args){.np = np, .tpr = tpr, .hosts = hosts, .hostfile = hostfile,
                                           .launcher = launcher, .kind_flag = kind_flag, .bind = bind,
                                           .dry_run = dry_run, .report = report, .xvars = xvars,
                                           .nx = nx, .mca = mca, .nmca = nmca, .extra = &extra,
                                           .cmd = argv + i, .ncmd = argc - i});
    argv_free(&extra);
    return rc;
}

int cmd_run(int argc, char **argv)
{
    char **xvars = calloc((size_t)argc + 2, sizeof *xvars), **mca = calloc((size_t)argc + 8, sizeof *mca);
    int rc = CLI_FAIL;
    if (xvars && mca)
        rc = run_with(argc, argv, xvars, mca);
    else
        fprintf(stderr, "herd: error: out of memory\n");
    free(xvars);
    free(mca);
    return rc;
}
