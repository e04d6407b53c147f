/* Whether herd's MPI joined the job of the launcher that started this process. An MPI
 * started by another MPI's launcher (MPICH under Open MPI's mpirun, or the reverse, or
 * srun without a PMI plugin this MPI speaks) finds no job to join and runs alone: N
 * launched ranks would each train their own model and exit 0. */
#ifndef HERD_DIST_LAUNCHER_H
#define HERD_DIST_LAUNCHER_H

#include "herd/herd.h"

/* HERD_OK, or HERD_ERR_UNSUPPORTED with a message naming herd's MPI (mpi_library, as
 * herd --version names it) and the launcher found in envp (NULL: this process's
 * environment), and what to do. mpi_size is MPI_COMM_WORLD's size: a size of 1 under a
 * launcher that started more ranks is the mismatch. With mpi_size 0 (MPI not started,
 * as in herd doctor) the launcher's family is compared with the library's instead. */
herd_status herd_mpi_launcher_check(const char *mpi_library, int mpi_size, char **envp);
/* The same from this process's environment alone, before MPI starts: another MPI's
 * launcher (by family) is refused without starting MPI; under srun HERD_OK (what srun's
 * plugin gives is known only after MPI_Init). */
herd_status herd_mpi_launcher_check_before_init(const char *mpi_library);

#endif
