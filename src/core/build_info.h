/* Pieces of herd_build_info() (include/herd/herd.h) that callers need on their own. */
#ifndef HERD_CORE_BUILD_INFO_H
#define HERD_CORE_BUILD_INFO_H

/* The MPI library actually loaded, as --version names it ("Open MPI v4.1.4");
 * NULL when herd is built without MPI. */
const char *herd_mpi_library_version(void);

#endif
