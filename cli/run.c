/* herd run: launch a multi-process herd job through an MPI launcher (like horovodrun /
 * torchrun).
 *
 * herd does not start processes itself: the launcher already knows how to reach hosts,
 * bind ranks and wire them up, so this only builds a sensible command line for it —
 * Open MPI's mpirun, MPICH's Hydra mpiexec or Slurm's srun, each in its own flags —
 * and execs it; with --max-restarts it runs it, watches it and relaunches it instead,
 * each attempt's command built by the same code. That is the library's run module
 * (src/tools/run_plan.h); this file parses the options, prints and exits. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tools/run_plan.h"

static const char run_help[] =
    "usage: herd run [-np N] [options] -- COMMAND [ARGS...]\n"
    "\n"
    "Starts N processes of this herd binary running COMMAND (train, eval, bench, models,\n"
    "topo, doctor) through an MPI launcher, one rank per process, each bound to its own\n"
    "cores; any other program (python3 script.py: import herd, herd.torch) runs as given.\n"
    "\n"
    "  -np N, -n N               number of ranks (default: a rank per slot of -H or the\n"
    "                            hostfile, the tasks of a Slurm allocation, else a rank\n"
    "                            per GPU for --device cuda, else per NUMA node, each\n"
    "                            with its node's cores as threads; said at start)\n"
    "  -H HOSTS                  hosts and slots, e.g. a:4,b:4 (default: this machine)\n"
    "  --hostfile FILE           hosts, one a line: 'host slots=N' (Open MPI) or 'host:N'\n"
    "                            (Hydra); given to a launcher of the other form as a list\n"
    "  --threads-per-rank T      cores and compute threads per rank (default: this\n"
    "                            machine's cores, not hardware threads, / ranks per host,\n"
    "                            at least 1)\n"
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
    "Restarts, for train with --checkpoint-dir, or a program that resumes itself (Python's\n"
    "herd.train with checkpoint_dir=; docs/cluster.md, docs/python.md):\n"
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

/* A line of the launcher's stderr, passed on by the supervisor in one write. */
static void relay_line(const char *line, size_t len, void *user)
{
    (void)user;
    fwrite(line, 1, len, stderr);
}

/* The launcher's kind and an attempt's command, as one write (run_output.command). */
static void print_command(const run_args *r, const run_command *c, void *user)
{
    (void)user;
    cli_line line;
    FILE *out = cli_line_begin(&line, stderr);
    fprintf(out, "herd: launcher: %s (%s)\nherd: launching:", launch_kind_name(r->kind), r->how);
    for (int k = 0; k < c->argv.n; k++) {
        fputc(' ', out);
        print_quoted(out, c->argv.v[k]);
    }
    fputc('\n', out);
    if (c->oversubscribed)
        fprintf(out, "herd: note: %ld rank(s) x %ld thread(s) on %ld core(s): oversubscribed, "
                     "ranks unbound; timings will not mean much\n", c->np, c->threads, c->cores);
    cli_line_end(&line);
}

/* herd run's exit code for a failure of the run module: a usage error or a failure. */
static int run_error(herd_status st, const char *why)
{
    if (st == HERD_ERR_INVALID_ARG)
        return cli_usage_error("run", "%s", why);
    fprintf(stderr, "herd: error: %s\n", why);
    return CLI_FAIL;
}

/* What every herd run needs: a command. -1 when fine, else the exit code. */
static int check_command(const run_args *r)
{
    if (r->hosts && r->hostfile)
        return cli_usage_error("run", "give either -H or --hostfile, not both");
    if (r->ncmd == 0)
        return cli_usage_error("run", "no command; e.g. herd run -np 2 -- train --model lenet5");
    if (run_is_herd_command(r->cmd[0]) || run_find_executable(r->cmd[0]))
        return -1;
    return cli_usage_error("run", "'%s' is neither a herd command (train, eval, bench, models, "
                           "topo, doctor) nor a program found in PATH", r->cmd[0]);
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

/* The fewest ranks train runs with (herd_train_min_ranks), from its --pipeline-stages,
 * --tensor-parallel and --zero; what asks for them into why. A replica takes stages x
 * parts ranks, so a restart's ranks are a multiple of that. Values train refuses count
 * as absent: it says so itself. */
static long train_min_ranks(const run_args *r, long *multiple, char *why, size_t cap)
{
    bool given;
    long stages = 1, zero = 0, parts = 1;
    const char *v = run_cmd_option(r->cmd, r->ncmd, "--pipeline-stages", &given);
    if (!v || !herd_parse_long(v, 1, 64, &stages))
        stages = 1;
    v = run_cmd_option(r->cmd, r->ncmd, "--tensor-parallel", &given);
    if (!v || !herd_parse_long(v, 1, 64, &parts))
        parts = 1;
    v = run_cmd_option(r->cmd, r->ncmd, "--zero", &given);
    if (!v || !herd_parse_long(v, 1, 2, &zero))
        zero = 0;
    long need = herd_train_min_ranks((int)stages, (int)zero) * parts;
    *multiple = stages * parts;
    if (stages > 1 && parts > 1 && zero)
        snprintf(why, cap, "train --pipeline-stages %ld --tensor-parallel %ld --zero %ld needs "
                 "%ld stages x %ld parts x 2 replicas", stages, parts, zero, stages, parts);
    else if (stages > 1 && parts > 1)
        snprintf(why, cap, "train --pipeline-stages %ld --tensor-parallel %ld needs %ld stages x "
                 "%ld parts", stages, parts, stages, parts);
    else if (stages > 1 && zero)
        snprintf(why, cap, "train --pipeline-stages %ld --zero %ld needs %ld stages x 2 replicas", stages,
                 zero, stages);
    else if (stages > 1)
        snprintf(why, cap, "train --pipeline-stages %ld needs a rank per stage", stages);
    else if (parts > 1 && zero)
        snprintf(why, cap, "train --tensor-parallel %ld --zero %ld needs %ld parts x 2 replicas",
                 parts, zero, parts);
    else if (parts > 1)
        snprintf(why, cap, "train --tensor-parallel %ld needs a rank per part", parts);
    else
        snprintf(why, cap, "train --zero %ld shards over at least 2 data-parallel ranks", zero);
    return need;
}

/* train's global batch kept on np ranks (herd_train_elastic_keeps), from the options
 * that decide it; values train refuses count as absent (it says so itself). */
static bool train_keeps_batch(const run_args *r, long np)
{
    if (strcmp(r->elastic_batch ? r->elastic_batch : "keep", "keep") != 0)
        return true;
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    static const char *const names[] = {"--batch-size", "--grad-accum", "--micro-batches",
                                        "--slice-size", "--pipeline-stages", "--tensor-parallel"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        bool given;
        const char *v = run_cmd_option(r->cmd, r->ncmd, names[i], &given);
        if (v)
            (void)herd_train_config_set(&cfg, names[i], v);
    }
    bool det;
    (void)run_cmd_option(r->cmd, r->ncmd, "--deterministic", &det);
    cfg.deterministic = det;
    return herd_train_elastic_keeps(&cfg, (int)r->np, (int)np);
}

/* Everything before the first launch: the command, the hosts, supervision's flags, the
 * launcher. -1 when fine, else the exit code. */
static int prepare(run_args *r, run_hosts *fixed)
{
    char why[1024];
    int rc = check_command(r);
    if (rc < 0)
        rc = read_fixed_hosts(r, fixed);
    if (rc >= 0)
        return rc;
    char need_why[256];
    long need = train_min_ranks(r, &r->np_multiple, need_why, sizeof need_why);
    if (strcmp(r->cmd[0], "train") == 0)
        r->np_fits = train_keeps_batch;
    const run_hosts *hosts = r->hosts || r->hostfile ? fixed : NULL;
    herd_status st = run_choose_launcher(r, why, sizeof why);
    if (st == HERD_OK)
        st = run_size_job(r, hosts, need, why, sizeof why);
    if (st == HERD_OK && r->np_how[0])
        fprintf(stderr, "herd: -np not given: %ld rank(s), %s; -np N to choose\n", r->np, r->np_how);
    if (st == HERD_OK)
        st = run_check_supervised(r, hosts, need, need_why, why, sizeof why);
    return st != HERD_OK ? run_error(st, why) : rc;
}

static int run_plan_and_exec(run_args *r)
{
    run_hosts fixed = {0};
    int rc = prepare(r, &fixed);
    run_command c = {0};
    char why[1024];
    if (rc < 0 && r->max_restarts >= 0) {
        herd_status st = run_supervise(r, &fixed, &rc, why, sizeof why);
        if (st != HERD_OK)
            rc = run_error(st, why);
    } else if (rc < 0) {
        herd_status st = run_build_command(r, &(run_attempt){.np = r->np, .hosts = &fixed, .host_spec = r->hosts,
                                                             .hostfile = r->hostfile, .restarts = -1}, &c, why,
                                           sizeof why);
        if (st != HERD_OK)
            rc = run_error(st, why);
        else
            print_command(r, &c, NULL);
    }
    run_hosts_free(&fixed);
    /* The exec is the CLI's: a library call must not replace its caller's process. */
    if (rc < 0 && !r->dry_run) {
        execvp(r->launcher, c.argv.v);
        fprintf(stderr, "herd: error: cannot start %s: %s\n", r->launcher, strerror(errno));
        rc = CLI_FAIL;
    }
    run_argv_free(&c.argv);
    return rc < 0 ? CLI_OK : rc;
}

/* Parses argv[*i] when it is one of supervision's flags (leaving *i on its last word):
 * -2 when it is not one, -1 when parsed, else the exit code. */
static int parse_supervise_flag(int argc, char **argv, int *i, run_args *r)
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
        if (!val || !herd_parse_long(val, lo, hi, num))
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

/* Parses one option at argv[*i] into r (leaving *i on its last word): -1 when done,
 * else the exit code. xvars and mca have room for every word of argv. */
static int parse_option(int argc, char **argv, int *i, run_args *r, run_argv *extra)
{
    const char *a = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    char why[1024];
    int rc = parse_supervise_flag(argc, argv, i, r);
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
        if (!val || !herd_parse_long(argv[++*i], 1, 1 << 20, &r->np))
            return cli_usage_error("run", "%s needs a number of ranks >= 1%s%s%s", a,
                                   val ? ", got '" : "", val ? val : "", val ? "'" : "");
    } else if (strcmp(a, "--threads-per-rank") == 0) {
        if (!val || !herd_parse_long(argv[++*i], 1, 4096, &r->tpr))
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
        if (!run_argv_split(extra, argv[++*i], why, sizeof why))
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
    run_argv extra = {0};
    static const run_output output = {.command = print_command, .relay = relay_line};
    run_args r = {.xvars = xvars, .mca = mca, .extra = &extra, .max_restarts = -1, .elastic_timeout = -1,
                  .output = &output};
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
    run_argv_free(&extra);
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
