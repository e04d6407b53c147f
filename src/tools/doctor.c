/*
 * herd doctor: checks of the machine that break or slow down distributed training.
 * Every file is read under a root prefix and the environment comes from an envp, so
 * tests run the checks on fabricated /proc, /sys and /etc trees. Nothing needs root:
 * what cannot be read is reported as "could not check" with the reason.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "herd_config.h"
#if HERD_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "core/build_info.h"
#include "tools/doctor.h"

void doc_path(const herd_doctor_env *e, const char *path, char *out, size_t cap)
{
    const char *root = e->root && *e->root ? e->root : "/";
    size_t n = strlen(root);
    while (n > 0 && root[n - 1] == '/')
        n--;
    snprintf(out, cap, "%.*s%s", (int)n, root, path);
}

DIR *doc_opendir(const herd_doctor_env *e, const char *path, herd_check *c)
{
    char full[4096];
    doc_path(e, path, full, sizeof full);
    DIR *d = opendir(full);
    if (!d && c) {
        int err = errno;
        doc_set(c, HERD_CHECK_SKIP, NULL, "could not check: %s: %s", full, strerror(err));
        errno = err;
    }
    return d;
}

int doc_count_entries(const herd_doctor_env *e, const char *path)
{
    DIR *d = doc_opendir(e, path, NULL);
    if (!d)
        return -errno;
    int n = 0;
    for (struct dirent *de; (de = readdir(d));)
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

long doc_read(const herd_doctor_env *e, const char *path, char *buf, size_t cap)
{
    char full[4096];
    doc_path(e, path, full, sizeof full);
    int fd = open(full, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t len = 0;
    while (len + 1 < cap) {
        ssize_t r = read(fd, buf + len, cap - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int err = errno;
            close(fd);
            return -err;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = '\0';
    return (long)len;
}

const char *doc_getenv(const herd_doctor_env *e, const char *name)
{
    size_t n = strlen(name);
    for (char **v = e->envp; v && *v; v++)
        if (strncmp(*v, name, n) == 0 && (*v)[n] == '=')
            return *v + n + 1;
    return NULL;
}

/* The first of vars that is set (to a number > 0 when positive), as a number; 0 if none. */
static int launcher_number(const herd_doctor_env *e, const char *const vars[3], bool positive)
{
    for (int i = 0; i < 3; i++) {
        const char *v = doc_getenv(e, vars[i]);
        if (v && *v && (!positive || atoi(v) > 0))
            return atoi(v);
    }
    return 0;
}

void herd_doctor_local_ranks(const herd_doctor_env *env, int *local_rank, int *local_size)
{
    static const char *const ranks[3] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                         "SLURM_LOCALID"};
    static const char *const sizes[3] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                         "SLURM_NTASKS_PER_NODE"};
    *local_rank = launcher_number(env, ranks, false);
    *local_size = launcher_number(env, sizes, true);
}

void doc_append(char *buf, size_t cap, const char *sep, const char *s)
{
    size_t used = strnlen(buf, cap);
    for (const char *p = used ? sep : ""; *p && used + 1 < cap; p++)
        buf[used++] = *p;
    for (const char *p = s; *p && used + 1 < cap; p++)
        buf[used++] = *p;
    if (used < cap)
        buf[used] = '\0';
}

void doc_set(herd_check *c, herd_check_status s, const char *fix, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->detail, sizeof c->detail, fmt, ap);
    va_end(ap);
    c->status = s;
    snprintf(c->fix, sizeof c->fix, "%s", fix ? fix : "");
}

static int real_fs_bytes(const char *path, uint64_t *bytes)
{
    struct statvfs s;
    if (statvfs(path, &s) != 0)
        return -errno;
    *bytes = (uint64_t)s.f_blocks * s.f_frsize;
    return 0;
}

static int real_rlimit(int resource, uint64_t *soft)
{
    struct rlimit r;
    if (getrlimit(resource, &r) != 0)
        return -errno;
    *soft = r.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)r.rlim_cur;
    return 0;
}

void herd_doctor_env_default(herd_doctor_env *env, char **envp)
{
    memset(env, 0, sizeof *env);
    env->root = "/";
    env->envp = envp;
    env->fs_bytes = real_fs_bytes;
    env->rlimit = real_rlimit;
    env->probe_cma = herd_probe_cma;
    char why[256];
    herd_nvml *n = herd_nvml_open(why, sizeof why);
    env->cuda_driver_version = herd_nvml_cuda_driver_version(n);
    herd_nvml_close(n);
#if HERD_HAVE_CUDA
    env->cuda_runtime_version = CUDART_VERSION; /* the toolkit herd was built with */
#endif
    env->mpi_library = herd_mpi_library_version(); /* the library loaded, as --version names it */
}

const char *herd_check_status_name(herd_check_status s)
{
    switch (s) {
    case HERD_CHECK_PASS: return "pass";
    case HERD_CHECK_WARN: return "warn";
    case HERD_CHECK_FAIL: return "fail";
    case HERD_CHECK_SKIP: return "skip";
    }
    return "?";
}

int herd_doctor_run(const herd_doctor_env *env, herd_check *out)
{
    static const struct {
        const char *name;
        void (*run)(const herd_doctor_env *, herd_check *);
    } checks[] = {
        {"iommu", check_iommu},
        {"pcie_acs", check_acs},
        {"dev_shm", check_shm},
        {"memlock_limit", check_memlock},
        {"stack_limit", check_stack},
        {"systemd_remove_ipc", check_remove_ipc},
        {"transport_settings", check_transports},
        {"shm_single_copy", check_single_copy},
        {"cuda_driver_runtime", check_cuda_versions},
        {"nvidia_uvm", check_nvidia_uvm},
        {"gpus_per_host", check_gpus_per_host},
        {"mpi", check_mpi},
        {"network_interfaces", check_network},
        {"xid_errors", check_xid},
        {"cpu_isa", check_cpu_isa},
    };
    int n = (int)(sizeof checks / sizeof checks[0]);
    for (int i = 0; i < n && i < HERD_DOCTOR_MAX_CHECKS; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].name = checks[i].name;
        checks[i].run(env, &out[i]);
    }
    return n < HERD_DOCTOR_MAX_CHECKS ? n : HERD_DOCTOR_MAX_CHECKS;
}

/* ------------------------------------------------------------ the host's kernel */

static bool has_token(const char *line, const char *token)
{
    size_t n = strlen(token);
    for (const char *p = line; (p = strstr(p, token)); p += n)
        if ((p == line || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' ' || p[n] == '\n'))
            return true;
    return false;
}

void check_iommu(const herd_doctor_env *e, herd_check *c)
{
    char path[4096], cmdline[4096] = "";
    int units = doc_count_entries(e, "/sys/class/iommu");
    if (units < 0 && units != -ENOENT) {
        doc_path(e, "/sys/class/iommu", path, sizeof path);
        doc_set(c, HERD_CHECK_SKIP, NULL, "could not check: %s: %s", path, strerror(-units));
        return;
    }
    units = units < 0 ? 0 : units;
    long len = doc_read(e, "/proc/cmdline", cmdline, sizeof cmdline);
    bool passthrough = len > 0 && (has_token(cmdline, "iommu=pt") || has_token(cmdline, "intel_iommu=off") ||
                                   has_token(cmdline, "amd_iommu=off"));
    if (units == 0)
        doc_set(c, HERD_CHECK_PASS, NULL, "no IOMMU active (/sys/class/iommu is empty)");
    else if (passthrough)
        doc_set(c, HERD_CHECK_PASS, NULL, "IOMMU active (%d unit(s)) in passthrough mode (iommu=pt)", units);
    else
        doc_set(c, HERD_CHECK_WARN,
                "boot with iommu=pt on the kernel command line (or disable the IOMMU in the BIOS "
                "or with intel_iommu=off / amd_iommu=off) on bare-metal GPU hosts",
                "IOMMU active (%d unit(s)) and translating DMA%s: GPU peer-to-peer and GPUDirect "
                "RDMA traffic is remapped, which slows it down or makes NCCL hang",
                units, len < 0 ? " (/proc/cmdline unreadable)" : "");
}

void check_shm(const herd_doctor_env *e, herd_check *c)
{
    char path[4096];
    uint64_t bytes = 0;
    doc_path(e, "/dev/shm", path, sizeof path);
    int rc = e->fs_bytes(path, &bytes);
    const char *fix = "give /dev/shm at least 1 GiB: docker run --shm-size=1g (or --ipc=host); "
                      "Kubernetes: mount an emptyDir with medium: Memory at /dev/shm";
    double mib = (double)bytes / (1 << 20);
    if (rc == -ENOENT)
        doc_set(c, HERD_CHECK_FAIL, fix, "/dev/shm does not exist: Open MPI and NCCL put their "
                "shared-memory transport there");
    else if (rc < 0)
        doc_set(c, HERD_CHECK_SKIP, NULL, "could not check: %s: %s", path, strerror(-rc));
    else if (bytes <= (64u << 20))
        doc_set(c, HERD_CHECK_FAIL, fix, "/dev/shm is %.0f MiB (a container's default): NCCL and "
                "Open MPI's shared-memory transports fail with bus errors or at start-up with "
                "several ranks per host", mib);
    else if (bytes < (1u << 30))
        doc_set(c, HERD_CHECK_WARN, fix, "/dev/shm is %.0f MiB: enough for a few ranks, tight for "
                "8 GPUs' NCCL buffers", mib);
    else
        doc_set(c, HERD_CHECK_PASS, NULL, "/dev/shm is %.1f GiB", mib / 1024);
}

static void format_limit(uint64_t v, char *buf, size_t cap)
{
    if (v == UINT64_MAX)
        snprintf(buf, cap, "unlimited");
    else if (v >= (1u << 20))
        snprintf(buf, cap, "%.0f MiB", (double)v / (1 << 20));
    else
        snprintf(buf, cap, "%.0f KiB", (double)v / 1024);
}

void check_memlock(const herd_doctor_env *e, herd_check *c)
{
    uint64_t soft;
    int rc = e->rlimit(RLIMIT_MEMLOCK, &soft);
    if (rc < 0) {
        doc_set(c, HERD_CHECK_SKIP, NULL, "could not check: getrlimit: %s", strerror(-rc));
        return;
    }
    char lim[32];
    format_limit(soft, lim, sizeof lim);
    int rdma = doc_count_entries(e, "/sys/class/infiniband");
    rdma = rdma < 0 ? 0 : rdma;
    const char *fix = "raise it: ulimit -l unlimited, '* - memlock unlimited' in "
                      "/etc/security/limits.conf, LimitMEMLOCK=infinity for systemd services, "
                      "docker run --ulimit memlock=-1";
    if (soft == UINT64_MAX)
        doc_set(c, HERD_CHECK_PASS, NULL, "locked-memory limit unlimited");
    else if (rdma == 0)
        doc_set(c, HERD_CHECK_PASS, NULL, "locked-memory limit %s; no RDMA device "
                "(/sys/class/infiniband), so nothing needs to pin memory", lim);
    else if (soft < (64u << 20))
        doc_set(c, HERD_CHECK_FAIL, fix, "locked-memory limit %s with %d RDMA device(s): "
                "InfiniBand/RoCE transports (UCX, NCCL) cannot register their buffers", lim, rdma);
    else
        doc_set(c, HERD_CHECK_WARN, fix, "locked-memory limit %s with %d RDMA device(s): large "
                "registrations (GPUDirect RDMA) may fail; unlimited is the usual setting", lim, rdma);
}

void check_stack(const herd_doctor_env *e, herd_check *c)
{
    uint64_t soft;
    int rc = e->rlimit(RLIMIT_STACK, &soft);
    char lim[32];
    if (rc < 0) {
        doc_set(c, HERD_CHECK_SKIP, NULL, "could not check: getrlimit: %s", strerror(-rc));
        return;
    }
    format_limit(soft, lim, sizeof lim);
    if (soft == UINT64_MAX)
        doc_set(c, HERD_CHECK_WARN, "use a finite stack: ulimit -s 8192 (the usual default)",
                "stack limit unlimited: Linux then lays out memory mappings the legacy way "
                "(bottom-up, no randomisation), and libraries that size thread stacks from this "
                "limit reserve huge ones");
    else if (soft < (1u << 20))
        doc_set(c, HERD_CHECK_WARN, "ulimit -s 8192", "stack limit %s is small: deep call chains in "
                "MPI and CUDA libraries can overflow it", lim);
    else
        doc_set(c, HERD_CHECK_PASS, NULL, "stack limit %s", lim);
}

/* The last RemoveIPC= of logind.conf and its drop-ins (later files override). */
static int remove_ipc_setting(const herd_doctor_env *e, const char *file, int current)
{
    char text[16384];
    if (doc_read(e, file, text, sizeof text) < 0)
        return current;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        line += strspn(line, " \t");
        if (strncmp(line, "RemoveIPC", 9) != 0)
            continue;
        char *v = line + 9 + strspn(line + 9, " \t");
        if (*v++ != '=')
            continue;
        v += strspn(v, " \t");
        current = strncmp(v, "no", 2) == 0 || strncmp(v, "false", 5) == 0 || *v == '0' ? 0 : 1;
    }
    return current;
}

void check_remove_ipc(const herd_doctor_env *e, herd_check *c)
{
    char path[4096];
    doc_path(e, "/etc/systemd", path, sizeof path);
    if (access(path, F_OK) != 0) {
        doc_set(c, HERD_CHECK_SKIP, NULL, "does not apply: no /etc/systemd (not a systemd host, "
                "or a container)");
        return;
    }
    int setting = remove_ipc_setting(e, "/etc/systemd/logind.conf", -1);
    doc_path(e, "/etc/systemd/logind.conf.d", path, sizeof path);
    struct dirent **names = NULL;
    int n = scandir(path, &names, NULL, alphasort); /* drop-ins apply in name order */
    for (int i = 0; i < n; i++) {
        size_t len = strlen(names[i]->d_name);
        if (len > 5 && strcmp(names[i]->d_name + len - 5, ".conf") == 0) {
            char file[512];
            snprintf(file, sizeof file, "/etc/systemd/logind.conf.d/%s", names[i]->d_name);
            setting = remove_ipc_setting(e, file, setting);
        }
        free(names[i]);
    }
    free(names);
    const char *fix = "set RemoveIPC=no in /etc/systemd/logind.conf and restart systemd-logind";
    if (setting == 0)
        doc_set(c, HERD_CHECK_PASS, NULL, "systemd-logind keeps IPC objects (RemoveIPC=no)");
    else
        doc_set(c, HERD_CHECK_WARN, fix, "systemd-logind %s: when a user's last session ends "
                "(an ssh logout) their shared memory and semaphores are deleted, killing MPI and "
                "NCCL jobs they left running (root and system users are exempt)", setting == 1 ? "has RemoveIPC=yes" :
                "uses its default RemoveIPC=yes");
}
