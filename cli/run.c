/* herd run: launch a multi-process herd job through mpirun (like horovodrun / torchrun).
 *
 * herd does not start processes itself: MPI already knows how to reach hosts, bind
 * ranks and wire them up, so this only builds a sensible mpirun command line —
 * binding, thread counts, root and oversubscription flags — and execs it. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tools/tools.h"

static const char run_help[] =
    "usage: herd run -np N [options] -- COMMAND [ARGS...]\n"
    "\n"
    "Starts N processes of this herd binary running COMMAND (train, bench train, eval,\n"
    "models) through mpirun, one rank per process, each bound to its own cores.\n"
    "\n"
    "  -np N, -n N               number of ranks (required)\n"
    "  -H HOSTS                  hosts and slots, e.g. a:4,b:4 (default: this machine)\n"
    "  --hostfile FILE           Open MPI hostfile ('host slots=N' lines)\n"
    "  --threads-per-rank T      cores and compute threads per rank (default: this\n"
    "                            machine's cores / ranks per host, at least 1)\n"
    "  -x VAR[=VALUE]            export an environment variable to every rank (repeatable)\n"
    "  --mca KEY VALUE           Open MPI parameter, e.g. --mca btl_tcp_if_include eth0\n"
    "                            (herd adds btl_vader_single_copy_mechanism none where\n"
    "                            a probe finds CMA slower than copying; this overrides it)\n"
    "  --mpirun PATH             the launcher binary (default: mpirun from PATH)\n"
    "  --report-bindings         ask mpirun to print each rank's cores\n"
    "  --dry-run                 print the mpirun command and exit\n"
    "\n"
    "Each rank gets --threads T (unless COMMAND has --threads already) and\n"
    "OMP_NUM_THREADS=T, OPENBLAS_NUM_THREADS=T. More ranks than cores on this machine\n"
    "run oversubscribed and unbound (slow; for testing only). Other hosts must have\n"
    "herd at the same path. Under Slurm, use srun directly: srun --mpi=pmix -n N herd\n"
    "train ... (see docs/cluster.md).\n";

/* A growing argv for the mpirun command. */
typedef struct argvec {
    char **v;
    int n, cap;
} argvec;

static void push(argvec *a, const char *s)
{
    if (a->n + 2 > a->cap) {
        a->cap = a->cap ? 2 * a->cap : 64;
        a->v = realloc(a->v, (size_t)a->cap * sizeof *a->v);
        if (!a->v) {
            fprintf(stderr, "herd: error: out of memory\n");
            exit(CLI_FAIL);
        }
    }
    a->v[a->n] = strdup(s);
    if (!a->v[a->n]) {
        fprintf(stderr, "herd: error: out of memory\n");
        exit(CLI_FAIL);
    }
    a->v[++a->n] = NULL;
}

static void argvec_free(argvec *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->v[i]);
    free(a->v);
}

static void pushf(argvec *a, const char *fmt, long v)
{
    char buf[64];
    snprintf(buf, sizeof buf, fmt, v);
    push(a, buf);
}

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
 * Open MPI's default by-slot mapping does. slots[i] <= 0 means unknown. */
static long max_ranks_per_host(long np, const long *slots, int nhosts)
{
    long most = 0, left = np;
    for (int i = 0; i < nhosts && left > 0; i++) {
        long k = slots[i] > 0 ? (slots[i] < left ? slots[i] : left) : (np + nhosts - 1) / nhosts;
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

/* "a:4,b:4" -> slots per host (-H without :N means 1 slot, as in Open MPI). */
static int parse_host_list(const char *spec, long *slots)
{
    int n = 0;
    const char *p = spec;
    while (*p && n < MAX_HOSTS) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        slots[n] = 1;
        if (colon) {
            char num[32];
            size_t nl = len - (size_t)(colon + 1 - p);
            if (nl == 0 || nl >= sizeof num)
                return -1;
            memcpy(num, colon + 1, nl);
            num[nl] = '\0';
            if (!cli_parse_int(num, 1, 1 << 20, &slots[n]))
                return -1;
        }
        if (len == 0 || colon == p)
            return -1;
        n++;
        p = end ? end + 1 : p + len;
    }
    return n;
}

/* Hosts and their slots=N from an Open MPI hostfile; 0 slots when not given
 * (Open MPI then counts the host's cores, which we cannot see from here). */
static int parse_hostfile(const char *path, long *slots)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < MAX_HOSTS) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *tok = strtok(line, " \t\r\n");
        if (!tok)
            continue;
        slots[n] = 0;
        while ((tok = strtok(NULL, " \t\r\n")))
            if (strncmp(tok, "slots=", 6) == 0 && !cli_parse_int(tok + 6, 1, 1 << 20, &slots[n]))
                slots[n] = 0;
        n++;
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

/* Open MPI copies large messages between local ranks with CMA by default; where CMA
 * reads at under half memcpy's speed, copying through shared memory is cheaper (see
 * src/tools/shm_probe.c). Measured here, said aloud, and never over the user's own
 * setting. Remote hosts are assumed to behave like this one. */
static void choose_single_copy(argvec *a, char **mca, int nmca, char **xvars, int nx, long per_host)
{
    static const char *const names[] = {"btl_vader_single_copy_mechanism",
                                        "btl_sm_single_copy_mechanism"};
    if (per_host < 2)
        return;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char var[64];
        snprintf(var, sizeof var, "OMPI_MCA_%s", names[k]);
        if (getenv(var) || exports(xvars, nx, var))
            return;
        for (int i = 0; i < nmca; i += 2)
            if (strcmp(mca[i], names[k]) == 0)
                return;
    }
    herd_cma_probe p;
    if (herd_probe_cma(&p) < 0 || !p.cma_slower)
        return;
    push(a, "--mca");
    push(a, names[0]);
    push(a, "none");
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
 * user's own setting (--mca, -x or the environment) wins. */
static void keepalive_defaults(argvec *a, char **mca, int nmca, char **xvars, int nx)
{
    static const char *const params[][2] = {{"oob_tcp_keepalive_time", "5"},
                                            {"oob_tcp_keepalive_intvl", "2"},
                                            {"oob_tcp_keepalive_probes", "5"}};
    for (size_t k = 0; k < sizeof params / sizeof params[0]; k++) {
        char var[64];
        snprintf(var, sizeof var, "OMPI_MCA_%s", params[k][0]);
        bool set = getenv(var) || exports(xvars, nx, var);
        for (int i = 0; i < nmca && !set; i += 2)
            set = strcmp(mca[i], params[k][0]) == 0;
        if (!set) {
            push(a, "--mca");
            push(a, params[k][0]);
            push(a, params[k][1]);
        }
    }
}

/* xvars and mca have argc slots each (the -x and --mca values). */
static int run_with(int argc, char **argv, char **xvars, char **mca)
{
    long np = 0, tpr = 0;
    const char *hosts = NULL, *hostfile = NULL, *mpirun = "mpirun";
    bool dry_run = false, report = false;
    int nx = 0, nmca = 0, i;

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
        } else if (strcmp(a, "-x") == 0) {
            if (!has_val || argv[i + 1][0] == '\0' || argv[i + 1][0] == '=')
                return cli_usage_error("run", "-x needs a variable name, VAR or VAR=VALUE");
            xvars[nx++] = argv[++i];
        } else if (strcmp(a, "--mca") == 0) {
            if (i + 2 >= argc)
                return cli_usage_error("run", "--mca needs a key and a value");
            mca[nmca++] = argv[++i];
            mca[nmca++] = argv[++i];
        } else if (strcmp(a, "--mpirun") == 0) {
            if (!has_val)
                return cli_usage_error("run", "--mpirun needs a path");
            mpirun = argv[++i];
        } else if (strcmp(a, "--dry-run") == 0) {
            dry_run = true;
        } else if (strcmp(a, "--report-bindings") == 0) {
            report = true;
        } else {
            return cli_usage_error("run", "unknown option '%s'", a);
        }
    }
    char **cmd = argv + i;
    int ncmd = argc - i;
    if (np == 0)
        return cli_usage_error("run", "-np N is required");
    if (hosts && hostfile)
        return cli_usage_error("run", "give either -H or --hostfile, not both");
    if (ncmd == 0)
        return cli_usage_error("run", "no command; e.g. herd run -np 2 -- train --model lenet5");
    static const char *const known[] = {"train", "eval", "bench", "models", "--version", "version"};
    bool ok = false;
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        ok |= strcmp(cmd[0], known[k]) == 0;
    if (!ok)
        return cli_usage_error("run", "'%s' is not a herd command; herd run starts herd itself "
                               "(train, eval, bench, models)", cmd[0]);

    /* How many ranks share a host, and how many cores each may use. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1)
        cores = 1;
    static long slots[MAX_HOSTS];
    int nhosts = 0;
    bool local = !hosts && !hostfile;
    if (hosts && (nhosts = parse_host_list(hosts, slots)) <= 0)
        return cli_usage_error("run", "bad host list '%s'; expected host[:slots],... such as a:4,b:4", hosts);
    if (hostfile && (nhosts = parse_hostfile(hostfile, slots)) <= 0) {
        fprintf(stderr, "herd: error: cannot read hosts from '%s': %s\n", hostfile,
                nhosts < 0 ? strerror(errno) : "no host lines");
        return CLI_FAIL;
    }
    long per_host = local ? np : max_ranks_per_host(np, slots, nhosts);
    bool user_given;
    long user_t = user_threads(cmd, ncmd, &user_given);
    long t = tpr;
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
    bool oversubscribed = local && np * t > cores;

    argvec a = {0};
    push(&a, mpirun);
    if (geteuid() == 0)
        push(&a, "--allow-run-as-root");
    push(&a, "-np");
    pushf(&a, "%ld", np);
    if (hosts) {
        push(&a, "-H");
        push(&a, hosts);
    }
    if (hostfile) {
        push(&a, "--hostfile");
        push(&a, hostfile);
    }
    if (oversubscribed) {
        /* Binding would stack ranks on the same cores; let the kernel share them. */
        push(&a, "--oversubscribe");
        push(&a, "--bind-to");
        push(&a, "none");
    } else {
        /* slot:PE=T gives each rank T consecutive cores of its own (Open MPI >= 4). */
        push(&a, "--bind-to");
        push(&a, "core");
        push(&a, "--map-by");
        pushf(&a, "slot:PE=%ld", t);
    }
    if (report)
        push(&a, "--report-bindings");
    for (int k = 0; k < nmca; k += 2) {
        push(&a, "--mca");
        push(&a, mca[k]);
        push(&a, mca[k + 1]);
    }
    choose_single_copy(&a, mca, nmca, xvars, nx, per_host);
    keepalive_defaults(&a, mca, nmca, xvars, nx);
    /* Thread pools of libraries that size themselves from the environment (OpenMP,
     * OpenBLAS) would otherwise each take every core of the host. */
    long env_t = user_t ? user_t : t;
    if (!exports(xvars, nx, "OMP_NUM_THREADS")) {
        push(&a, "-x");
        pushf(&a, "OMP_NUM_THREADS=%ld", env_t);
    }
    if (!exports(xvars, nx, "OPENBLAS_NUM_THREADS")) {
        push(&a, "-x");
        pushf(&a, "OPENBLAS_NUM_THREADS=%ld", env_t);
    }
    for (int k = 0; k < nx; k++) {
        push(&a, "-x");
        push(&a, xvars[k]);
    }

    /* The ranks run this very binary, by absolute path (mpirun's PATH may differ). */
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "herd: error: cannot resolve /proc/self/exe: %s\n", strerror(errno));
        argvec_free(&a);
        return CLI_FAIL;
    }
    self[len] = '\0';
    push(&a, self);
    for (int k = 0; k < ncmd; k++)
        push(&a, cmd[k]);
    if (!user_given && takes_threads(cmd, ncmd)) {
        push(&a, "--threads");
        pushf(&a, "%ld", t);
    }

    /* A dry run only shows the command, so it works where MPI is not installed. */
    if (!dry_run && !find_executable(mpirun)) {
        fprintf(stderr, "herd: error: %s not found%s; install Open MPI (Debian/Ubuntu: apt-get "
                        "install openmpi-bin) or pass --mpirun PATH\n",
                mpirun, strchr(mpirun, '/') ? "" : " in PATH");
        argvec_free(&a);
        return CLI_FAIL;
    }
    fputs("herd: launching:", stderr);
    for (int k = 0; k < a.n; k++) {
        fputc(' ', stderr);
        print_quoted(stderr, a.v[k]);
    }
    fputc('\n', stderr);
    if (oversubscribed)
        fprintf(stderr, "herd: note: %ld rank(s) x %ld thread(s) on %ld core(s): oversubscribed, "
                        "ranks unbound; timings will not mean much\n", np, t, cores);
    fflush(stderr);
    if (dry_run) {
        argvec_free(&a);
        return CLI_OK;
    }

    if (geteuid() == 0) {
        /* Open MPI refuses root without these; older mpirun versions only read the
         * environment, newer ones the flag. */
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
    execvp(mpirun, a.v);
    fprintf(stderr, "herd: error: cannot start %s: %s\n", mpirun, strerror(errno));
    argvec_free(&a);
    return CLI_FAIL;
}

int cmd_run(int argc, char **argv)
{
    char **xvars = calloc((size_t)argc, sizeof *xvars), **mca = calloc((size_t)argc, sizeof *mca);
    int rc = CLI_FAIL;
    if (xvars && mca)
        rc = run_with(argc, argv, xvars, mca);
    else
        fprintf(stderr, "herd: error: out of memory\n");
    free(xvars);
    free(mca);
    return rc;
}
