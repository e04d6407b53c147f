/* Helpers shared by herd doctor's checks (doctor.c, doctor_gpu.c). */
#ifndef HERD_TOOLS_DOCTOR_H
#define HERD_TOOLS_DOCTOR_H

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>

#include "tools/tools.h"

/* path under env->root (path is absolute: "/proc/cmdline"). */
void doc_path(const herd_doctor_env *e, const char *path, char *out, size_t cap);
/* Opens a directory under the root; NULL with errno set on failure, and then c (when
 * not NULL) is marked "could not check: PATH: reason". */
DIR *doc_opendir(const herd_doctor_env *e, const char *path, herd_check *c);
/* Entries other than . and .. of a directory under the root, or -errno. */
int doc_count_entries(const herd_doctor_env *e, const char *path);
/* Reads at most cap-1 bytes of a file under the root, NUL-terminated; returns the length
 * or -errno. */
long doc_read(const herd_doctor_env *e, const char *path, char *buf, size_t cap);
/* A variable of env->envp, NULL when unset. */
const char *doc_getenv(const herd_doctor_env *e, const char *name);
/* Appends sep (when buf is not empty) and s to buf, truncating at cap. */
void doc_append(char *buf, size_t cap, const char *sep, const char *s);
/* Sets the outcome; fix may be NULL. */
void doc_set(herd_check *c, herd_check_status s, const char *fix, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

void check_iommu(const herd_doctor_env *e, herd_check *c);
void check_acs(const herd_doctor_env *e, herd_check *c);
void check_shm(const herd_doctor_env *e, herd_check *c);
void check_memlock(const herd_doctor_env *e, herd_check *c);
void check_stack(const herd_doctor_env *e, herd_check *c);
void check_remove_ipc(const herd_doctor_env *e, herd_check *c);
void check_transports(const herd_doctor_env *e, herd_check *c);
void check_single_copy(const herd_doctor_env *e, herd_check *c);
void check_cuda_versions(const herd_doctor_env *e, herd_check *c);
void check_nvidia_uvm(const herd_doctor_env *e, herd_check *c);
void check_gpus_per_host(const herd_doctor_env *e, herd_check *c);
void check_mpi(const herd_doctor_env *e, herd_check *c);
void check_network(const herd_doctor_env *e, herd_check *c);
void check_xid(const herd_doctor_env *e, herd_check *c);
void check_cpu_isa(const herd_doctor_env *e, herd_check *c);

#endif
