/* herd doctor: the MPI library and launcher, network interfaces, GPU Xid errors in
 * the kernel log, and the CPU instructions herd's kernels run on. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/launcher.h"
#include "tools/doctor.h"

/* Follows the symlinks of a path under the root, absolute targets included (Debian's
 * mpirun is an alternatives link to mpirun.openmpi or mpirun.mpich). */
static void resolve_links(const herd_doctor_env *e, const char *path, char cur[PATH_MAX])
{
    snprintf(cur, PATH_MAX, "%s", path);
    for (int hop = 0; hop < 8; hop++) {
        char full[PATH_MAX + 64], target[PATH_MAX];
        doc_path(e, cur, full, sizeof full);
        ssize_t n = readlink(full, target, sizeof target - 1);
        if (n <= 0)
            break;
        target[n] = '\0';
        char joined[PATH_MAX];
        const char *slash = strrchr(cur, '/');
        int dir = target[0] == '/' || !slash ? 0 : (int)(slash - cur) + 1; /* relative to the link */
        if (snprintf(joined, sizeof joined, "%.*s%s", dir, cur, target) >= (int)sizeof joined)
            break;
        memcpy(cur, joined, PATH_MAX);
    }
}

void check_mpi(const herd_doctor_env *e, herd_check *c)
{
    const char *path = doc_getenv(e, "PATH");
    char found[PATH_MAX] = "", resolved[PATH_MAX] = "";
    for (const char *p = path; p && *p && !found[0];) {
        size_t n = strcspn(p, ":");
        char candidate[PATH_MAX], full[PATH_MAX + 64];
        snprintf(candidate, sizeof candidate, "%.*s/mpirun", (int)n, p);
        resolve_links(e, candidate, resolved);
        doc_path(e, resolved, full, sizeof full);
        if (n > 0 && p[0] == '/' && access(full, X_OK) == 0)
            memcpy(found, candidate, sizeof found);
        p += n + (p[n] == ':');
    }
    if (!e->mpi_library) {
        doc_set(c, HERD_CHECK_WARN, "install libopenmpi-dev and rebuild herd (cmake -DHERD_MPI=ON)",
                "herd is built without MPI: it trains in one process only%s%s",
                found[0] ? "; mpirun is at " : "", found);
        return;
    }
    /* Started by another MPI's launcher: the check herd's own start-up makes. */
    if (herd_mpi_launcher_check(e->mpi_library, 0, e->envp) != HERD_OK) {
        doc_set(c, HERD_CHECK_FAIL, "start herd with its own MPI's launcher (herd run does)", "%s",
                herd_last_error());
        return;
    }
    if (!found[0]) {
        doc_set(c, HERD_CHECK_WARN, "install the launcher of the MPI herd uses (Debian: "
                "openmpi-bin) or start ranks with srun --mpi=pmix", "herd uses %s but no mpirun is "
                "in PATH: herd run cannot start jobs", e->mpi_library);
        return;
    }
    const char *slash = strrchr(resolved, '/');
    const char *name = slash ? slash + 1 : resolved;
    bool lib_open = strstr(e->mpi_library, "Open MPI") != NULL;
    bool lib_mpich = strstr(e->mpi_library, "MPICH") || strstr(e->mpi_library, "Intel");
    bool run_mpich = strstr(name, "mpich") || strstr(name, "hydra") || strstr(name, "mpiexec.");
    bool run_open = strstr(name, "openmpi") || strstr(name, "orterun") || strstr(name, "prterun");
    if ((lib_open && run_mpich) || (lib_mpich && run_open))
        doc_set(c, HERD_CHECK_FAIL, "put the launcher of herd's MPI first in PATH (Debian: "
                "update-alternatives --config mpirun)", "%s is %s, but herd uses %s: every rank "
                "would start as a separate one-process job", found, name, e->mpi_library);
    else
        doc_set(c, HERD_CHECK_PASS, NULL, "%s; launcher %s (%s)", e->mpi_library, found, name);
}

void check_network(const herd_doctor_env *e, herd_check *c)
{
    DIR *d = doc_opendir(e, "/sys/class/net", c);
    if (!d)
        return;
    char up[256] = "", down[256] = "";
    int n_up = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.' || strcmp(de->d_name, "lo") == 0)
            continue;
        char file[512], state[32] = "", carrier[8] = "";
        snprintf(file, sizeof file, "/sys/class/net/%s/operstate", de->d_name);
        doc_read(e, file, state, sizeof state);
        state[strcspn(state, "\n")] = '\0';
        snprintf(file, sizeof file, "/sys/class/net/%s/carrier", de->d_name);
        doc_read(e, file, carrier, sizeof carrier);
        /* Virtual links (tun, some veth) report "unknown" while passing traffic. */
        bool is_up = strcmp(state, "up") == 0 || (strcmp(state, "unknown") == 0 && carrier[0] == '1');
        doc_append(is_up ? up : down, sizeof up, " ", de->d_name);
        n_up += is_up;
    }
    closedir(d);
    if (n_up == 0)
        doc_set(c, HERD_CHECK_WARN, "bring an interface up (ip link set IFACE up) or check the "
                "cabling; single-host jobs run over shared memory regardless",
                "no network interface is up besides loopback%s%s: jobs cannot span hosts",
                down[0] ? "; down: " : "", down);
    else
        doc_set(c, HERD_CHECK_PASS, NULL, "up: %s%s%s", up, down[0] ? "; down: " : "", down);
}

typedef struct xid_scan {
    int count, n_codes;
    int codes[16]; /* distinct, in order of appearance */
    char last[200];
} xid_scan;

static void scan_line(xid_scan *x, const char *line)
{
    const char *xid = strstr(line, "NVRM: Xid");
    if (!xid)
        return;
    x->count++;
    snprintf(x->last, sizeof x->last, "%s", xid);
    /* "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus." */
    const char *colon = strstr(xid, "): ");
    int code = colon ? atoi(colon + 3) : -1;
    for (int i = 0; i < x->n_codes; i++)
        if (x->codes[i] == code)
            return;
    if (x->n_codes < 16)
        x->codes[x->n_codes++] = code;
}

/* Scans the kernel log, /dev/kmsg: one record per read(), EAGAIN at the end (a plain
 * file, in tests, ends with 0 instead). Returns 0 or -errno. */
static int scan_kernel_log(const herd_doctor_env *e, xid_scan *x)
{
    char path[4096], buf[16384 + 1];
    doc_path(e, "/dev/kmsg", path, sizeof path);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t carry = 0;
    for (long records = 0; records < 10000000; records++) {
        ssize_t r = read(fd, buf + carry, sizeof buf - 1 - carry);
        if (r < 0 && (errno == EPIPE || errno == EINTR))
            continue; /* a record was overwritten while reading: go on with the next */
        if (r < 0 && errno != EAGAIN) {
            int err = errno;
            close(fd);
            return -err;
        }
        if (r <= 0)
            break;
        size_t len = carry + (size_t)r;
        buf[len] = '\0';
        char *line = buf, *nl;
        while ((nl = strchr(line, '\n'))) {
            *nl = '\0';
            scan_line(x, line);
            line = nl + 1;
        }
        carry = len - (size_t)(line - buf);
        if (carry == sizeof buf - 1) { /* a line longer than the buffer: scan what we have */
            scan_line(x, line);
            carry = 0;
        }
        memmove(buf, line, carry);
    }
    buf[carry] = '\0';
    scan_line(x, buf);
    close(fd);
    return 0;
}

void check_xid(const herd_doctor_env *e, herd_check *c)
{
    xid_scan x = {0};
    int rc = scan_kernel_log(e, &x);
    if (rc < 0) {
        bool denied = rc == -EACCES || rc == -EPERM;
        doc_set(c, HERD_CHECK_SKIP, NULL, "could not check: /dev/kmsg: %s%s", strerror(-rc),
                denied ? " (reading the kernel log needs root or kernel.dmesg_restrict=0; try "
                         "'sudo dmesg | grep -i xid')" : "");
    } else if (x.count) {
        char codes[128] = "", item[16];
        for (int i = 0; i < x.n_codes; i++) {
            snprintf(item, sizeof item, "%d", x.codes[i]);
            doc_append(codes, sizeof codes, ",", item);
        }
        doc_set(c, HERD_CHECK_FAIL, "look the codes up in NVIDIA's Xid table (docs.nvidia.com/deploy/"
                "xid-errors); 48, 63, 64, 79, 94 and 95 usually need a GPU reset or service; check "
                "nvidia-smi -q", "%d Xid error(s) in the kernel log since boot (codes %s); the last: %s",
                x.count, codes, x.last);
    } else {
        doc_set(c, HERD_CHECK_PASS, NULL, "no NVIDIA Xid errors in the kernel log");
    }
}

/* Information, not advice: which of Open MPI's shared-memory transports (one CMA read,
 * or copy-in/copy-out) is faster depends on the message size and the day, and these two
 * figures did not predict it (docs/cluster.md), so herd run leaves the choice alone. */
void check_single_copy(const herd_doctor_env *e, herd_check *c)
{
    if (!e->mpi_library || !strstr(e->mpi_library, "Open MPI")) {
        doc_set(c, HERD_CHECK_SKIP, NULL, "applies to Open MPI's shared-memory transport; herd "
                "uses %s", e->mpi_library ? e->mpi_library : "no MPI");
        return;
    }
    if (!e->probe_cma) {
        doc_set(c, HERD_CHECK_SKIP, NULL, "not measured: it times this host's memory, not the "
                "--root tree's");
        return;
    }
    const char *var = "OMPI_MCA_btl_vader_single_copy_mechanism";
    const char *set = doc_getenv(e, var);
    if (!set)
        set = doc_getenv(e, var = "OMPI_MCA_btl_sm_single_copy_mechanism");
    herd_cma_probe p;
    int rc = e->probe_cma(&p);
    if (rc < 0) {
        doc_set(c, HERD_CHECK_SKIP, NULL, "process_vm_readv fails here (%s), so Open MPI "
                "copies through shared memory anyway", strerror(-rc));
        return;
    }
    char in_force[128];
    if (set)
        snprintf(in_force, sizeof in_force, "%s from %s", set, var);
    else
        snprintf(in_force, sizeof in_force, "Open MPI's default (cma)");
    doc_set(c, HERD_CHECK_PASS, NULL, "CMA %.1f GB/s, memcpy %.1f GB/s; single copy: %s, which "
            "herd run keeps; for your message sizes time both with bench/single_copy.sh",
            p.cma_gbps, p.memcpy_gbps, in_force);
}

/* Not a fault: a cluster's nodes may differ, and a bf16 job needs every node's to have
 * bf16 instructions, so say what this one offers. */
void check_cpu_isa(const herd_doctor_env *e, herd_check *c)
{
    (void)e;
    const char *isa = herd_cpu_isa();
    doc_set(c, HERD_CHECK_PASS, NULL, "oneDNN dispatches to %s; --precision bf16 %s", isa,
            strstr(isa, "bf16: native") ? "runs natively" : "is refused on this CPU");
}
