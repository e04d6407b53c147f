/* Choosing a communicator: MPI when an MPI launcher started us, one process otherwise. */
#include <stdlib.h>
#include <string.h>

#include "herd_config.h"
#include "core/error.h"
#include "core/sanitizer.h"
#include "dist/comm.h"
#include "dist/signature.h"

static bool env_set(const char *name)
{
    const char *v = getenv(name);
    return v && *v;
}

bool herd_comm_launched_by_mpi(void)
{
    /* Open MPI's mpirun, Hydra (MPICH) and PMIx launchers set these for every rank. */
    if (env_set("OMPI_COMM_WORLD_SIZE") || env_set("PMI_RANK") || env_set("PMI_SIZE") ||
        env_set("PMIX_RANK"))
        return true;
    /* srun sets SLURM_PROCID for any job step; only a multi-task step is an MPI job. */
    const char *ntasks = getenv("SLURM_NTASKS");
    return env_set("SLURM_PROCID") && ntasks && atoi(ntasks) > 1;
}

#if HERD_ASAN
#include <sanitizer/lsan_interface.h>

/* Under AddressSanitizer: LeakSanitizer asks at exit whether to look for leaks. Open
 * MPI keeps allocations until exit, some in libraries it has unloaded by then, so
 * naming them takes the slow unwinder on every malloc (4x the time of a training run).
 * A process an MPI launcher started is checked only when HERD_LSAN_MPI=1 asks, with
 * ASAN_OPTIONS=fast_unwind_on_malloc=0 (tests/CMakeLists.txt: the tests that do). */
int __lsan_is_turned_off(void)
{
    const char *full = getenv("HERD_LSAN_MPI");
    return herd_comm_launched_by_mpi() && !(full && strcmp(full, "1") == 0);
}
#endif

herd_status herd_comm_create_default(const herd_comm_config *cfg, herd_comm **out)
{
    *out = NULL;
    if (!herd_comm_launched_by_mpi())
        return herd_comm_local_create(out);
#if HERD_HAVE_MPI
    return herd_comm_mpi_create(cfg, out);
#else
    (void)cfg;
    /* Running every rank as its own single-process job would silently train N
     * independent models: refuse instead. */
    return HERD_ERR(HERD_ERR_UNSUPPORTED,
                    "this process was started by an MPI launcher (mpirun/srun) but herd was "
                    "built without MPI; install libopenmpi-dev and rebuild (cmake -DHERD_MPI=ON)");
#endif
}

void herd_comm_destroy(herd_comm *c)
{
    if (c)
        c->ops->destroy(c);
}

herd_status herd_comm_max_f64(herd_comm *c, double *v)
{
    /* The communicators offer a sum only: gather one value per rank, keep the largest. */
    double *all = herd_xcalloc((size_t)c->size, sizeof *all);
    /* Every rank joins the gather or none does: a rank short of memory tells the others. */
    herd_status st = herd_agree(c, all ? HERD_OK : HERD_ERR_NOMEM,
                                "allocating the gather of every rank's value");
    if (st != HERD_OK) {
        free(all);
        return st;
    }
    st = c->ops->allgather(c, v, all, sizeof *v);
    for (int r = 0; st == HERD_OK && r < c->size; r++)
        *v = all[r] > *v ? all[r] : *v;
    free(all);
    return st;
}

herd_status herd_comm_create_backend(const char *name, const herd_comm_config *cfg, herd_comm **out)
{
    *out = NULL;
    if (!name || strcmp(name, "auto") == 0)
        return herd_comm_create_default(cfg, out);
    if (strcmp(name, "local") == 0)
        return herd_comm_local_create(out);
    if (strcmp(name, "mpi") == 0)
        return herd_comm_mpi_create(cfg, out);
    if (strcmp(name, "nccl") == 0)
        return HERD_ERR(HERD_ERR_UNSUPPORTED,
                        "the nccl communicator reduces GPU memory and is built over an MPI one: "
                        "it serves herd bench allreduce --backend nccl and herd train --device "
                        "cuda; use --backend mpi here");
    return HERD_ERR(HERD_ERR_INVALID_ARG, "unknown communicator '%s'; expected auto, local, mpi or nccl",
                    name);
}
