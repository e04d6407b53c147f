/* How many ranks herd run starts when -np is not given, and this machine's cores
 * (tools/run_plan.h). A launcher's own default (every slot, every core) would give
 * a rank per hardware thread, each with one compute thread: for training that
 * multiplies the global batch by the core count. herd's default keeps a rank per
 * memory domain instead (per GPU, or per NUMA node with its cores as threads), and
 * says what it chose. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tools/run_plan.h"
#include "tools/tools.h"

/* Whether the command trains or runs on a GPU: --device cuda or cuda:N. */
static bool wants_gpu(const run_args *r)
{
    bool given;
    const char *dev = run_cmd_option(r->cmd, r->ncmd, "--device", &given);
    return run_is_herd_command(r->cmd[0]) && dev && strncmp(dev, "cuda", 4) == 0;
}

/* -np from the slots of -H or the hostfile: every one must say its slots. */
static herd_status from_hosts(run_args *r, const run_hosts *fixed, char *why, size_t cap)
{
    for (int i = 0; i < fixed->n; i++)
        if (fixed->v[i].slots <= 0)
            return run_refuse(why, cap, "-np not given, and host '%s' says no slot count to start one rank "
                          "a slot: give -np N, or slots (-H host:N; a hostfile's 'host slots=N')",
                          fixed->v[i].name);
    r->np = run_hosts_slots(fixed);
    snprintf(r->np_how, sizeof r->np_how, "a rank per slot of %s: %ld on %d host(s)",
             r->hosts ? "-H" : "the hostfile", r->np, fixed->n);
    return HERD_OK;
}

/* -np from this machine: a rank per GPU for a command on --device cuda, else a rank per
 * NUMA node. */
static herd_status from_machine(run_args *r, const herd_topo *t, char *why, size_t cap)
{
    if (wants_gpu(r)) {
        if (t->n_gpus < 1)
            return run_refuse(why, cap, "-np not given, and the command asks for --device cuda where herd "
                          "sees no GPU (%s): give -np N", t->gpu_note[0] ? t->gpu_note : "none listed");
        r->np = t->n_gpus;
        snprintf(r->np_how, sizeof r->np_how, "a rank per GPU of this host: %d", t->n_gpus);
        return HERD_OK;
    }
    int nodes = t->numa_count > 0 ? t->numa_count : 1;
    r->np = nodes;
    snprintf(r->np_how, sizeof r->np_how, "a rank per NUMA node of this host: %d node(s), %ld core(s)",
             nodes, r->cores);
    return HERD_OK;
}

herd_status run_size_job(run_args *r, const run_hosts *fixed, long need, char *why, size_t cap)
{
    r->np_how[0] = '\0';
    herd_topo *t = NULL;
    if (herd_topo_discover(&t) != HERD_OK) {
        if (r->np)
            return HERD_OK; /* the cores then come from the operating system's count */
        return run_refuse(why, cap, "-np not given, and this machine's topology could not be read (%s): "
                          "give -np N", herd_last_error());
    }
    r->cores = t->cores > 0 ? t->cores : 0;
    herd_status st = HERD_OK;
    const char *tasks = getenv("SLURM_NTASKS");
    long n;
    if (r->np) {
        /* given */
    } else if (r->discovery) {
        st = run_refuse(why, cap, "-np not given: --host-discovery finds the hosts of each restart; give "
                        "-np N for the first attempt");
    } else if (fixed && fixed->n > 0) {
        st = from_hosts(r, fixed, why, cap);
    } else if (r->kind == LAUNCH_SRUN && tasks && run_parse_long(tasks, 1, 1 << 20, &n)) {
        r->np = n;
        snprintf(r->np_how, sizeof r->np_how, "the Slurm allocation's tasks (SLURM_NTASKS=%ld)", n);
    } else {
        st = from_machine(r, t, why, cap);
    }
    /* The fewest ranks the command runs with, in whole replicas. */
    long unit = r->np_multiple > 1 ? r->np_multiple : 1;
    if (st == HERD_OK && r->np_how[0] && (r->np < need || r->np % unit)) {
        long was = r->np;
        r->np = ((r->np > need ? r->np : need) + unit - 1) / unit * unit;
        size_t len = strlen(r->np_how);
        snprintf(r->np_how + len, sizeof r->np_how - len, "; %ld raised to %ld, the fewest the command "
                 "runs with", was, r->np);
    }
    herd_topo_free(t);
    return st;
}
