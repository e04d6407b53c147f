/* herd run's launchers (tools/run_plan.h): the command line being built, which kind a
 * launcher binary is, and each kind's own flags for ranks, hosts, binding, threads and
 * exported variables (Open MPI's mpirun, MPICH's Hydra mpiexec, Slurm's srun). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/run_plan.h"

void run_argv_push(run_argv *a, const char *s)
{
    if (a->oom)
        return;
    if (a->n + 2 > a->cap) {
        char **v = realloc(a->v, (size_t)(a->cap ? 2 * a->cap : 64) * sizeof *v);
        if (!v) {
            a->oom = true;
            return;
        }
        a->v = v;
        a->cap = a->cap ? 2 * a->cap : 64;
    }
    if (!(a->v[a->n] = strdup(s))) {
        a->oom = true;
        return;
    }
    a->v[++a->n] = NULL;
}

void run_argv_pushf(run_argv *a, const char *fmt, long v)
{
    char buf[64];
    snprintf(buf, sizeof buf, fmt, v);
    run_argv_push(a, buf);
}

void run_argv_free(run_argv *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->v[i]);
    free(a->v);
}

bool run_argv_split(run_argv *a, const char *s, char *why, size_t cap)
{
    size_t len = strlen(s);
    char *word = malloc(len + 1);
    if (!word)
        a->oom = true;
    if (a->oom) {
        snprintf(why, cap, "out of memory");
        return false;
    }
    size_t n = 0;
    bool in_word = false;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (ch == ' ' || ch == '\t' || ch == '\n') {
            if (in_word) {
                word[n] = '\0';
                run_argv_push(a, word);
                n = 0;
                in_word = false;
            }
            continue;
        }
        in_word = true;
        if (ch == '\'' || ch == '"') {
            size_t open = i;
            for (i++; i < len && s[i] != ch; i++) {
                if (ch == '"' && s[i] == '\\' && (s[i + 1] == '"' || s[i + 1] == '\\'))
                    i++;
                word[n++] = s[i];
            }
            if (i == len) {
                snprintf(why, cap, "unbalanced %c quote at character %zu of '%s'", ch, open + 1, s);
                free(word);
                return false;
            }
        } else if (ch == '\\') {
            if (i + 1 == len) {
                snprintf(why, cap, "a backslash ends '%s'", s);
                free(word);
                return false;
            }
            word[n++] = s[++i];
        } else {
            word[n++] = ch;
        }
    }
    if (in_word) {
        word[n] = '\0';
        run_argv_push(a, word);
    }
    free(word);
    if (a->oom)
        snprintf(why, cap, "out of memory");
    return !a->oom;
}

static const char *const kind_names[] = {"openmpi", "hydra", "srun"};

const char *launch_kind_name(launch_kind k) { return kind_names[k]; }

bool launch_kind_parse(const char *s, launch_kind *k)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(s, kind_names[i]) == 0) {
            *k = (launch_kind)i;
            return true;
        }
    return false;
}

bool launch_kind_detect(const char *path, launch_kind *k, char *why, size_t cap)
{
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(why, cap, "pipe: %s", strerror(errno));
        return false;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, cap, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return false;
    }
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        execlp(path, path, "--version", (char *)NULL);
        dprintf(1, "herd-exec-failed: %s", strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    char out[4096], rest[512];
    size_t n = 0;
    ssize_t got;
    while (n < sizeof out - 1 && (got = read(fds[0], out + n, sizeof out - 1 - n)) > 0)
        n += (size_t)got;
    while (read(fds[0], rest, sizeof rest) > 0) /* the rest, so the child can finish */
        ;
    out[n] = '\0';
    close(fds[0]);
    waitpid(pid, NULL, 0);
    static const struct {
        const char *says;
        launch_kind kind;
    } signs[] = {{"Open MPI", LAUNCH_OPENMPI}, {"OpenRTE", LAUNCH_OPENMPI}, {"HYDRA", LAUNCH_HYDRA},
                 {"Intel(R) MPI", LAUNCH_HYDRA}, {"slurm", LAUNCH_SRUN}};
    for (size_t i = 0; i < sizeof signs / sizeof signs[0]; i++)
        if (strstr(out, signs[i].says)) {
            *k = signs[i].kind;
            return true;
        }
    const char *failed = strstr(out, "herd-exec-failed: ");
    if (failed)
        snprintf(why, cap, "cannot run '%s --version': %s", path, failed + strlen("herd-exec-failed: "));
    else
        snprintf(why, cap, "'%s --version' names no launcher herd knows (it printed '%.*s')", path,
                 (int)strcspn(out, "\n"), out);
    return false;
}

/* The rank count, then the hostfile when it is in this launcher's form (colons: Hydra's
 * host:N), else the hosts as a list. flags: the rank, hostfile and host-list flags. */
static void push_ranks_and_hosts(const run_plan *p, run_argv *a, const char *const flags[3],
                                 bool colons, char *list, size_t cap)
{
    run_argv_push(a, flags[0]);
    run_argv_pushf(a, "%ld", p->np);
    if (p->hostfile && p->hostfile_colons == colons) {
        run_argv_push(a, flags[1]);
        run_argv_push(a, p->hostfile);
    } else if (p->nhosts > 0) {
        run_format_hosts(p->hosts, p->nhosts, true, list, cap);
        run_argv_push(a, flags[2]);
        run_argv_push(a, p->host_spec ? p->host_spec : list);
    }
}

static bool openmpi_args(const run_plan *p, run_argv *a, char *list, size_t cap)
{
    if (geteuid() == 0)
        run_argv_push(a, "--allow-run-as-root");
    push_ranks_and_hosts(p, a, (const char *[]){"-np", "--hostfile", "-H"}, false, list, cap);
    if (p->oversubscribed)
        run_argv_push(a, "--oversubscribe"); /* and unbound, unless asked: ranks would share cores */
    run_argv_push(a, "--bind-to");
    if (strcmp(p->bind, "core") == 0 && !p->oversubscribed) {
        /* slot:PE=T gives each rank T consecutive cores of its own (Open MPI >= 4). */
        run_argv_push(a, "core");
        run_argv_push(a, "--map-by");
        run_argv_pushf(a, "slot:PE=%ld", p->threads);
    } else {
        run_argv_push(a, p->oversubscribed && strcmp(p->bind, "core") == 0 ? "none" : p->bind);
    }
    if (p->report)
        run_argv_push(a, "--report-bindings");
    for (int k = 0; k < p->nmca; k += 2) {
        run_argv_push(a, "--mca");
        run_argv_push(a, p->mca[k]);
        run_argv_push(a, p->mca[k + 1]);
    }
    for (int k = 0; k < p->nexports; k++) {
        run_argv_push(a, "-x");
        run_argv_push(a, p->exports[k]);
    }
    return true;
}

static bool hydra_args(const run_plan *p, run_argv *a, char *list, size_t cap, char *why, size_t wcap)
{
    if (p->report) {
        snprintf(why, wcap, "Hydra has no --report-bindings; herd topo under it shows each rank's "
                            "cores (herd run --launcher hydra -np N -- topo)");
        return false;
    }
    push_ranks_and_hosts(p, a, (const char *[]){"-n", "-f", "-hosts"}, true, list, cap);
    /* core:T and hwthread:T bind each rank to T of them; Hydra shares cores by itself. */
    run_argv_push(a, "-bind-to");
    if (p->oversubscribed && strcmp(p->bind, "core") == 0)
        run_argv_push(a, "none");
    else if (strcmp(p->bind, "core") == 0 || strcmp(p->bind, "hwthread") == 0) {
        char b[64];
        snprintf(b, sizeof b, "%s:%ld", p->bind, p->threads);
        run_argv_push(a, b);
    } else
        run_argv_push(a, p->bind);
    for (int k = 0; k < p->nexports; k++) {
        const char *eq = strchr(p->exports[k], '=');
        char name[256];
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - p->exports[k]) : 255, p->exports[k]);
        const char *value = eq ? eq + 1 : getenv(name);
        if (!value) {
            snprintf(why, wcap, "-x %s: %s is not set here, and Hydra exports values (-genv NAME "
                                "VALUE); give -x %s=VALUE", name, name, name);
            return false;
        }
        run_argv_push(a, "-genv");
        run_argv_push(a, name);
        run_argv_push(a, value);
    }
    return true;
}

static bool srun_args(const run_plan *p, run_argv *a, char *list, size_t cap, char *why, size_t wcap)
{
    run_argv_push(a, "-n");
    run_argv_pushf(a, "%ld", p->np);
    if (p->nhosts > 0) {
        /* srun takes a node list and one count per node, so the slots must agree. */
        for (int i = 1; i < p->nhosts; i++)
            if (p->hosts[i].slots != p->hosts[0].slots) {
                snprintf(why, wcap, "srun starts the same number of tasks on every node, but the "
                                    "hosts have %ld and %ld slots", p->hosts[0].slots, p->hosts[i].slots);
                return false;
            }
        run_format_hosts(p->hosts, p->nhosts, false, list, cap);
        run_argv_push(a, "-w");
        run_argv_push(a, list);
        if (p->hosts[0].slots > 0)
            run_argv_pushf(a, "--ntasks-per-node=%ld", p->hosts[0].slots);
    }
    run_argv_pushf(a, "--cpus-per-task=%ld", p->threads);
    static const char *const binds[][2] = {{"core", "cores"}, {"hwthread", "threads"},
                                           {"socket", "sockets"}, {"numa", "ldoms"}, {"none", "none"}};
    const char *bind = "cores";
    for (size_t i = 0; i < sizeof binds / sizeof binds[0]; i++)
        if (strcmp(p->bind, binds[i][0]) == 0)
            bind = binds[i][1];
    char flag[64];
    snprintf(flag, sizeof flag, "--cpu-bind=%s%s", p->report ? "verbose," : "", bind);
    run_argv_push(a, flag);
    if (p->mpi_plugin) {
        snprintf(flag, sizeof flag, "--mpi=%s", p->mpi_plugin);
        run_argv_push(a, flag);
    }
    /* --export=ALL keeps the environment (srun's default) and adds ours; commas part it. */
    size_t need = 16;
    for (int k = 0; k < p->nexports; k++) {
        if (strchr(p->exports[k], ',')) {
            snprintf(why, wcap, "-x %s: srun's --export cannot carry a comma; set the variable "
                                "in the environment instead (srun passes it on)", p->exports[k]);
            return false;
        }
        need += strlen(p->exports[k]) + 1;
    }
    char *exp = malloc(need);
    if (!exp) {
        a->oom = true; /* said by run_launcher_args */
        return false;
    }
    strcpy(exp, "--export=ALL");
    for (int k = 0; k < p->nexports; k++) {
        strcat(exp, ",");
        strcat(exp, p->exports[k]);
    }
    run_argv_push(a, exp);
    free(exp);
    return true;
}

herd_status run_launcher_args(const run_plan *p, run_argv *a, char *why, size_t cap)
{
    if (p->nmca > 0 && p->kind != LAUNCH_OPENMPI) {
        snprintf(why, cap, "--mca is Open MPI's; %s takes MPI settings as environment variables "
                           "(-x) or its own flags (--mpirun-args)", launch_kind_name(p->kind));
        return HERD_ERR_INVALID_ARG;
    }
    size_t list_cap = 64;
    for (int i = 0; i < p->nhosts; i++)
        list_cap += strlen(p->hosts[i].name) + 24;
    char *list = malloc(list_cap);
    bool ok = list && (p->kind == LAUNCH_OPENMPI ? openmpi_args(p, a, list, list_cap)
                       : p->kind == LAUNCH_HYDRA ? hydra_args(p, a, list, list_cap, why, cap)
                                                 : srun_args(p, a, list, list_cap, why, cap));
    free(list);
    if (!list || a->oom) {
        snprintf(why, cap, "out of memory building the launcher's command");
        return HERD_ERR_NOMEM;
    }
    return ok ? HERD_OK : HERD_ERR_INVALID_ARG;
}
