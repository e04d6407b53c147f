/* Which launcher started this process, from the variables launchers set for every rank. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dist/launcher.h"

extern char **environ;

typedef enum mpi_family { FAMILY_ANY, FAMILY_OPENMPI, FAMILY_MPICH } mpi_family;

static const struct {
    const char *size_var; /* the job's size, as the launcher tells every rank */
    const char *name;
    mpi_family family;    /* the MPI that can join this launcher's job */
} launchers[] = {
    {"OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun", FAMILY_OPENMPI},
    {"PMI_SIZE", "a PMI launcher (MPICH's Hydra mpiexec, or srun --mpi=pmi2)", FAMILY_MPICH},
    /* srun sets it for every task of a step, whatever --mpi says (1 task: no job). */
    {"SLURM_STEP_NUM_TASKS", "Slurm's srun", FAMILY_ANY},
};

static const char *lookup(char **envp, const char *name)
{
    size_t n = strlen(name);
    for (char **v = envp ? envp : environ; v && *v; v++)
        if (strncmp(*v, name, n) == 0 && (*v)[n] == '=')
            return *v + n + 1;
    return NULL;
}

static mpi_family family_of(const char *mpi_library)
{
    if (strstr(mpi_library, "Open MPI"))
        return FAMILY_OPENMPI;
    if (strstr(mpi_library, "MPICH") || strstr(mpi_library, "Intel"))
        return FAMILY_MPICH;
    return FAMILY_ANY;
}

herd_status herd_mpi_launcher_check(const char *mpi_library, int mpi_size, char **envp)
{
    if (!mpi_library || mpi_size > 1)
        return HERD_OK;
    mpi_family mine = family_of(mpi_library);
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++) {
        const char *v = lookup(envp, launchers[i].size_var);
        long size = v ? strtol(v, NULL, 10) : 0;
        if (size <= 1)
            continue;
        bool foreign = mpi_size == 1 || (launchers[i].family != FAMILY_ANY && mine != FAMILY_ANY &&
                                         launchers[i].family != mine);
        if (!foreign)
            continue;
        /* srun fits any MPI: what is missing is the plugin, not another build. */
        bool srun = launchers[i].family == FAMILY_ANY;
        return HERD_ERR(HERD_ERR_UNSUPPORTED,
                        "herd uses %s, but %s started it as one of %ld %s (%s=%s), a job this MPI "
                        "cannot join: every %s would train alone. %s",
                        mpi_library, launchers[i].name, size, srun ? "tasks" : "ranks",
                        launchers[i].size_var, v, srun ? "task" : "rank",
                        srun ? "Give srun the plugin of herd's MPI (--mpi=pmix for Open MPI, "
                               "--mpi=pmi2 for MPICH; srun --mpi=list shows what Slurm has)"
                             : "Start herd with its own MPI's launcher (herd run does; --dry-run "
                               "shows the command), or build herd against the launcher's MPI "
                               "(cmake -DHERD_MPI=openmpi or mpich)");
    }
    return HERD_OK;
}

herd_status herd_mpi_launcher_check_before_init(const char *mpi_library)
{
    /* Under srun the variables of several launchers can be set at once (--mpi=pmi2 sets
     * PMI_SIZE, which an Open MPI with Slurm's PMI support joins): left to the check
     * after MPI_Init, which sees whether the job was joined. */
    const char *srun = lookup(NULL, "SLURM_STEP_NUM_TASKS");
    if (srun && strtol(srun, NULL, 10) > 1)
        return HERD_OK;
    return herd_mpi_launcher_check(mpi_library, 0, NULL);
}
