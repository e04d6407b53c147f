/* herd doctor: transport settings, the NVIDIA driver against herd's CUDA runtime,
 * nvidia_uvm, and GPUs per host. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/gpu_share.h"
#include "tools/doctor.h"

static bool truthy(const char *v) { return v && *v && strcmp(v, "0") != 0; }

/* Adds one finding, "; " between findings. */
static void append(char *buf, size_t cap, const char *fmt, const char *a, const char *b)
{
    char item[256];
    snprintf(item, sizeof item, fmt, a, b);
    doc_append(buf, cap, "; ", item);
}

/* NCCL_* variables that switch a transport off, from the environment or nccl.conf. */
static void nccl_findings(const char *name, const char *value, const char *where, char *out, size_t cap)
{
    static const char *const disabling[] = {"NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE"};
    for (size_t i = 0; i < sizeof disabling / sizeof disabling[0]; i++)
        if (strcmp(name, disabling[i]) == 0 && truthy(value))
            append(out, cap, "%s (%s)", name, where);
    if (strcmp(name, "NCCL_P2P_LEVEL") == 0 && value && strcmp(value, "LOC") == 0)
        append(out, cap, "%s=LOC (%s)", name, where);
}

/* Open MPI's btl list: "^vader" excludes, "self,tcp" includes only what it names. */
static bool btl_drops_shared_memory(const char *v)
{
    if (!v || !*v)
        return false;
    bool exclude = v[0] == '^', has_sm = false;
    for (const char *p = v + exclude; *p;) {
        size_t n = strcspn(p, ",");
        has_sm |= (n == 5 && strncmp(p, "vader", 5) == 0) || (n == 2 && strncmp(p, "sm", 2) == 0);
        p += n + (p[n] == ',');
    }
    return exclude ? has_sm : !has_sm;
}

void check_transports(const herd_doctor_env *e, herd_check *c)
{
    char found[384] = "";
    for (char **v = e->envp; v && *v; v++) {
        if (strncmp(*v, "NCCL_", 5) != 0)
            continue;
        char name[64];
        const char *eq = strchr(*v, '=');
        if (!eq || eq - *v >= (long)sizeof name)
            continue;
        snprintf(name, sizeof name, "%.*s", (int)(eq - *v), *v);
        nccl_findings(name, eq + 1, "environment", found, sizeof found);
    }
    char conf[8192];
    if (doc_read(e, "/etc/nccl.conf", conf, sizeof conf) > 0) {
        for (char *line = strtok(conf, "\n"); line; line = strtok(NULL, "\n")) {
            char *eq = strchr(line, '=');
            if (line[0] == '#' || !eq)
                continue;
            *eq = '\0';
            nccl_findings(line, eq + 1, "/etc/nccl.conf", found, sizeof found);
        }
    }
    const char *btl = doc_getenv(e, "OMPI_MCA_btl");
    if (btl_drops_shared_memory(btl))
        append(found, sizeof found, "OMPI_MCA_btl=%s%s (no shared-memory transport)", btl, "");
    if (found[0])
        doc_set(c, HERD_CHECK_WARN, "unset these unless you are working around a known problem "
                "(a broken P2P path, a missing RDMA stack)", "transports switched off: %s; traffic "
                "between local ranks then goes through the host or the network", found);
    else
        doc_set(c, HERD_CHECK_PASS, NULL, "no NCCL_* or OMPI_MCA_btl setting disables a transport "
                "(environment and /etc/nccl.conf)");
}

static void cuda_version_text(int v, char *buf, size_t cap)
{
    snprintf(buf, cap, "%d.%d", v / 1000, v % 1000 / 10);
}

void check_cuda_versions(const herd_doctor_env *e, herd_check *c)
{
    char kernel[512] = "";
    long len = doc_read(e, "/proc/driver/nvidia/version", kernel, sizeof kernel);
    bool driver_loaded = len > 0;
    kernel[strcspn(kernel, "\n")] = '\0';
    char drv[16], rt[16];
    cuda_version_text(e->cuda_driver_version, drv, sizeof drv);
    cuda_version_text(e->cuda_runtime_version, rt, sizeof rt);
    const char *fix = "install an NVIDIA driver that supports herd's CUDA version (see the CUDA "
                      "release notes' driver table), or rebuild herd with the toolkit the driver supports";
    if (e->cuda_runtime_version == 0)
        doc_set(c, HERD_CHECK_SKIP, NULL, "does not apply: herd is built without CUDA%s",
                driver_loaded ? " (an NVIDIA driver is loaded; rebuild with CUDA to use it)" : "");
    else if (!driver_loaded && e->cuda_driver_version == 0)
        doc_set(c, HERD_CHECK_WARN, "install the NVIDIA driver, or train on CPU (--device cpu)",
                "herd is built with CUDA %s but no NVIDIA driver is loaded "
                "(/proc/driver/nvidia/version is missing): --device cuda will fail", rt);
    else if (e->cuda_driver_version == 0)
        doc_set(c, HERD_CHECK_SKIP, NULL, "could not check: the driver is loaded (%s) but NVML "
                "(libnvidia-ml.so.1) did not say which CUDA version it supports", kernel);
    else if (e->cuda_driver_version / 1000 < e->cuda_runtime_version / 1000)
        doc_set(c, HERD_CHECK_FAIL, fix, "the driver supports CUDA %s, older than the major "
                "version herd is built with (CUDA %s): no CUDA call will work", drv, rt);
    else if (e->cuda_driver_version < e->cuda_runtime_version)
        doc_set(c, HERD_CHECK_WARN, fix, "the driver supports CUDA %s, older than herd's CUDA %s: "
                "it runs under minor-version compatibility, but code needing newer PTX fails", drv, rt);
    else
        doc_set(c, HERD_CHECK_PASS, NULL, "the driver supports CUDA %s, herd is built with CUDA %s", drv, rt);
}

static bool module_loaded(const char *modules, const char *name)
{
    size_t n = strlen(name);
    for (const char *line = modules; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL)
        if (strncmp(line, name, n) == 0 && line[n] == ' ')
            return true;
    return false;
}

void check_nvidia_uvm(const herd_doctor_env *e, herd_check *c)
{
    static char modules[1 << 16];
    long len = doc_read(e, "/proc/modules", modules, sizeof modules);
    if (len < 0)
        doc_set(c, HERD_CHECK_SKIP, NULL, "could not check: /proc/modules: %s", strerror((int)-len));
    else if (!module_loaded(modules, "nvidia"))
        doc_set(c, HERD_CHECK_SKIP, NULL, "does not apply: the nvidia kernel module is not loaded");
    else if (!module_loaded(modules, "nvidia_uvm"))
        doc_set(c, HERD_CHECK_FAIL, "load it: sudo modprobe nvidia-uvm (or nvidia-modprobe -u -c=0)",
                "nvidia is loaded but nvidia_uvm is not: CUDA cannot create a context "
                "(cudaErrorUnknown / no CUDA-capable device)");
    else
        doc_set(c, HERD_CHECK_PASS, NULL, "nvidia and nvidia_uvm are loaded");
}

/* More ranks than GPUs: ranks take GPUs round robin (herd_backend_cuda_bind), and a job
 * whose ranks share one reduces through MPI; named the way training names them. */
static void shared_gpus(herd_check *c, int ranks, int visible, const char *seen)
{
    herd_gpu_seat *seats = calloc((size_t)ranks, sizeof *seats);
    if (!seats) {
        doc_set(c, HERD_CHECK_SKIP, NULL, "could not check: out of memory for %d ranks", ranks);
        return;
    }
    for (int r = 0; r < ranks; r++) {
        snprintf(seats[r].id, sizeof seats[r].id, "%d", r % visible);
        snprintf(seats[r].name, sizeof seats[r].name, "GPU %d", r % visible);
    }
    char who[320]; /* with the rest of the line, within the check's detail */
    herd_gpu_shared(seats, ranks, "local ranks", who, sizeof who);
    free(seats);
    doc_set(c, HERD_CHECK_WARN, "for NCCL, start at most one rank per GPU (mpirun -npernode N) "
            "or unset CUDA_VISIBLE_DEVICES restrictions", "%d ranks per host but %s: %s; "
            HERD_GPU_SHARE_WHY ", so gradients will be reduced by MPI through host memory",
            ranks, seen, who);
}

void check_gpus_per_host(const herd_doctor_env *e, herd_check *c)
{
    int gpus = doc_count_entries(e, "/proc/driver/nvidia/gpus");
    gpus = gpus < 0 ? 0 : gpus;
    const char *cvd = doc_getenv(e, "CUDA_VISIBLE_DEVICES");
    int visible = gpus;
    if (cvd) { /* a list of indices or UUIDs; empty or -1 hides every GPU */
        int listed = *cvd && strcmp(cvd, "-1") != 0 ? 1 : 0;
        for (const char *p = cvd; listed && *p; p++)
            listed += *p == ',';
        visible = listed < gpus ? listed : gpus;
    }
    int local_rank, ranks = e->ranks_per_host;
    if (ranks <= 0)
        herd_doctor_local_ranks(e, &local_rank, &ranks);
    char seen[96];
    snprintf(seen, sizeof seen, "%d GPU(s) visible%s", visible, cvd ? " (CUDA_VISIBLE_DEVICES)" : "");
    if (visible == 0)
        doc_set(c, HERD_CHECK_SKIP, NULL, "does not apply: no NVIDIA GPU visible (%d in "
                "/proc/driver/nvidia/gpus): ranks train on CPU cores", gpus);
    else if (ranks == 0)
        doc_set(c, HERD_CHECK_SKIP, NULL, "could not check: %s, ranks per host unknown; run it under "
                "the launcher (mpirun -np N herd doctor) or give --ranks-per-host N", seen);
    else if (ranks > visible)
        shared_gpus(c, ranks, visible, seen);
    else if (ranks < visible)
        doc_set(c, HERD_CHECK_WARN, "start one rank per GPU", "%d rank(s) per host and %s: %d "
                "GPU(s) stay idle", ranks, seen, visible - ranks);
    else
        doc_set(c, HERD_CHECK_PASS, NULL, "%d ranks per host, %s: one each", ranks, seen);
}
