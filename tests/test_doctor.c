/* herd doctor: every check on fabricated /proc, /sys, /etc and /dev trees in a temp
 * directory, with a fabricated environment, file system sizes and limits. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/build_info.h"
#include "testutil.h"
#include "tools/doctor.h"

static uint64_t fake_shm_bytes, fake_memlock, fake_stack;
static int fake_fs_error;

static int fake_fs_bytes(const char *path, uint64_t *bytes)
{
    (void)path;
    *bytes = fake_shm_bytes;
    return fake_fs_error;
}

static int fake_rlimit(int resource, uint64_t *soft)
{
    *soft = resource == RLIMIT_MEMLOCK ? fake_memlock : fake_stack;
    return resource == RLIMIT_STACK && fake_stack == 0 ? -EPERM : 0;
}

typedef struct fixture {
    char *root;
    char *envp[8];
    herd_doctor_env env;
    herd_check c;
} fixture;

/* root/rel, creating the directories on the way. */
static void put(fixture *f, const char *rel, const void *data, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", f->root, rel);
    for (char *p = path + strlen(f->root) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *out = fopen(path, "wb");
    assert_non_null(out);
    assert_int_equal(fwrite(data, 1, len, out), len);
    fclose(out);
}

static void put_text(fixture *f, const char *rel, const char *text) { put(f, rel, text, strlen(text)); }

static void make_dir(fixture *f, const char *rel)
{
    char keep[512];
    snprintf(keep, sizeof keep, "%s/.keep", rel); /* dot files are not counted as entries */
    put_text(f, keep, "");
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->root = tu_tempdir();
    f->env.root = f->root;
    f->env.envp = f->envp;
    f->env.fs_bytes = fake_fs_bytes;
    f->env.rlimit = fake_rlimit;
    fake_shm_bytes = 8ull << 30, fake_fs_error = 0;
    fake_memlock = UINT64_MAX, fake_stack = 8u << 20;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    tu_rmtree(f->root);
    free(f->root);
    free(f);
    return 0;
}

/* Runs one check and asserts its status and that the detail mentions want. */
static void expect(fixture *f, void (*check)(const herd_doctor_env *, herd_check *),
                   const char *name, herd_check_status status, const char *want)
{
    memset(&f->c, 0, sizeof f->c);
    check(&f->env, &f->c);
    if (f->c.status != status || !strstr(f->c.detail, want))
        fail_msg("%s: got %s '%s', want %s with '%s'", name, herd_check_status_name(f->c.status),
                 f->c.detail, herd_check_status_name(status), want);
    if (status == HERD_CHECK_WARN || status == HERD_CHECK_FAIL)
        assert_true(f->c.fix[0] != '\0'); /* every problem comes with a fix */
}

/* Runs one check and asserts its status and that the detail mentions want. */
#define EXPECT(f, check, status, want) expect((f), (check), #check, (status), (want))

static void test_iommu(void **state)
{
    fixture *f = *state;
    EXPECT(f, check_iommu, HERD_CHECK_PASS, "no IOMMU"); /* no /sys/class/iommu at all */
    make_dir(f, "sys/class/iommu");
    EXPECT(f, check_iommu, HERD_CHECK_PASS, "no IOMMU");
    make_dir(f, "sys/class/iommu/dmar0");
    put_text(f, "proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on\n");
    EXPECT(f, check_iommu, HERD_CHECK_WARN, "translating DMA");
    put_text(f, "proc/cmdline", "BOOT_IMAGE=/vmlinuz intel_iommu=on iommu=pt quiet\n");
    EXPECT(f, check_iommu, HERD_CHECK_PASS, "passthrough");
}

/* A PCI config space: a bridge (class 0x0604, header type 1) or an endpoint, with an
 * extended capability list at 0x100: AER (id 1), then ACS (id 0xd) with ctrl. */
static void put_config(fixture *f, const char *bdf, bool bridge, long acs_ctrl, size_t len)
{
    unsigned char cfg[4096] = {0};
    cfg[0x0a] = bridge ? 0x04 : 0x00, cfg[0x0b] = bridge ? 0x06 : 0x03;
    cfg[0x0e] = bridge ? 0x01 : 0x00;
    /* AER at 0x100, next 0x148 */
    cfg[0x100] = 0x01, cfg[0x102] = 0x81, cfg[0x103] = 0x14;
    if (acs_ctrl >= 0) { /* ACS at 0x148, last */
        cfg[0x148] = 0x0d, cfg[0x14a] = 0x01;
        cfg[0x148 + 6] = (unsigned char)(acs_ctrl & 0xff), cfg[0x148 + 7] = (unsigned char)(acs_ctrl >> 8);
    }
    char rel[256];
    snprintf(rel, sizeof rel, "sys/bus/pci/devices/%s/config", bdf);
    put(f, rel, cfg, len);
}

static void test_acs(void **state)
{
    fixture *f = *state;
    EXPECT(f, check_acs, HERD_CHECK_SKIP, "could not check");
    assert_non_null(strstr(f->c.detail, "/sys/bus/pci/devices: No such file or directory"));
    put_config(f, "0000:3b:00.0", false, -1, 4096); /* a GPU, not a bridge */
    EXPECT(f, check_acs, HERD_CHECK_PASS, "no PCI-to-PCI bridges");
    put_config(f, "0000:00:01.0", true, 0x11, 4096); /* source validation + upstream forwarding */
    put_config(f, "0000:01:00.0", true, -1, 4096);   /* no ACS capability */
    EXPECT(f, check_acs, HERD_CHECK_PASS, "no ACS redirection on the 2 PCI bridge(s)");
    put_config(f, "0000:02:08.0", true, 0x1d, 4096); /* + P2P request and completion redirect */
    EXPECT(f, check_acs, HERD_CHECK_WARN, "0000:02:08.0");
    assert_non_null(strstr(f->c.detail, "1 of 3"));
    assert_non_null(strstr(f->c.fix, "setpci"));
}

static void test_acs_unprivileged(void **state)
{
    fixture *f = *state;
    /* Without root, sysfs serves only the first 64 bytes of config space. */
    put_config(f, "0000:00:01.0", true, 0x1d, 64);
    put_config(f, "0000:00:02.0", true, 0x1d, 64);
    EXPECT(f, check_acs, HERD_CHECK_SKIP, "readable only by root");
    put_config(f, "0000:00:03.0", true, 0, 4096);
    EXPECT(f, check_acs, HERD_CHECK_PASS, "2 more readable only by root");
}

static void test_shm(void **state)
{
    fixture *f = *state;
    EXPECT(f, check_shm, HERD_CHECK_PASS, "8.0 GiB");
    fake_shm_bytes = 64u << 20;
    EXPECT(f, check_shm, HERD_CHECK_FAIL, "64 MiB");
    assert_non_null(strstr(f->c.fix, "--shm-size"));
    fake_shm_bytes = 512u << 20;
    EXPECT(f, check_shm, HERD_CHECK_WARN, "512 MiB");
    fake_fs_error = -ENOENT;
    EXPECT(f, check_shm, HERD_CHECK_FAIL, "does not exist");
    fake_fs_error = -EACCES;
    EXPECT(f, check_shm, HERD_CHECK_SKIP, "Permission denied");
}

static void test_limits(void **state)
{
    fixture *f = *state;
    EXPECT(f, check_memlock, HERD_CHECK_PASS, "unlimited");
    fake_memlock = 8u << 20;
    EXPECT(f, check_memlock, HERD_CHECK_PASS, "no RDMA device");
    make_dir(f, "sys/class/infiniband/mlx5_0");
    EXPECT(f, check_memlock, HERD_CHECK_FAIL, "8 MiB with 1 RDMA device");
    fake_memlock = 256u << 20;
    EXPECT(f, check_memlock, HERD_CHECK_WARN, "256 MiB");

    EXPECT(f, check_stack, HERD_CHECK_PASS, "8 MiB");
    fake_stack = UINT64_MAX;
    EXPECT(f, check_stack, HERD_CHECK_WARN, "unlimited");
    fake_stack = 256 << 10;
    EXPECT(f, check_stack, HERD_CHECK_WARN, "256 KiB");
    fake_stack = 0; /* the fake getrlimit fails */
    EXPECT(f, check_stack, HERD_CHECK_SKIP, "could not check");
}

static void test_remove_ipc(void **state)
{
    fixture *f = *state;
    EXPECT(f, check_remove_ipc, HERD_CHECK_SKIP, "no /etc/systemd");
    put_text(f, "etc/systemd/logind.conf", "[Login]\n#RemoveIPC=yes\n");
    EXPECT(f, check_remove_ipc, HERD_CHECK_WARN, "default RemoveIPC=yes");
    put_text(f, "etc/systemd/logind.conf", "[Login]\nRemoveIPC = no\n");
    EXPECT(f, check_remove_ipc, HERD_CHECK_PASS, "RemoveIPC=no");
    put_text(f, "etc/systemd/logind.conf.d/50-site.conf", "[Login]\nRemoveIPC=yes\n");
    EXPECT(f, check_remove_ipc, HERD_CHECK_WARN, "has RemoveIPC=yes");
    put_text(f, "etc/systemd/logind.conf.d/90-hpc.conf", "[Login]\nRemoveIPC=no\n");
    EXPECT(f, check_remove_ipc, HERD_CHECK_PASS, "RemoveIPC=no"); /* later drop-ins win */
}

static void test_transports(void **state)
{
    fixture *f = *state;
    f->envp[0] = "PATH=/usr/bin";
    f->envp[1] = "NCCL_P2P_DISABLE=0";
    f->envp[2] = "OMPI_MCA_btl=self,vader,tcp";
    EXPECT(f, check_transports, HERD_CHECK_PASS, "no NCCL_*");
    f->envp[1] = "NCCL_P2P_DISABLE=1";
    EXPECT(f, check_transports, HERD_CHECK_WARN, "NCCL_P2P_DISABLE (environment)");
    f->envp[1] = "NCCL_DEBUG=INFO";
    f->envp[2] = "OMPI_MCA_btl=^vader";
    EXPECT(f, check_transports, HERD_CHECK_WARN, "OMPI_MCA_btl=^vader");
    f->envp[2] = "OMPI_MCA_btl=self,tcp";
    EXPECT(f, check_transports, HERD_CHECK_WARN, "no shared-memory transport");
    f->envp[2] = "OMPI_MCA_btl=^openib";
    EXPECT(f, check_transports, HERD_CHECK_PASS, "no NCCL_*");
    put_text(f, "etc/nccl.conf", "# site settings\nNCCL_IB_DISABLE=1\nNCCL_SOCKET_IFNAME=eth0\n");
    EXPECT(f, check_transports, HERD_CHECK_WARN, "NCCL_IB_DISABLE (/etc/nccl.conf)");
    f->envp[1] = "NCCL_P2P_DISABLE=1"; /* findings in order, one separator between them */
    EXPECT(f, check_transports, HERD_CHECK_WARN,
           "switched off: NCCL_P2P_DISABLE (environment); NCCL_IB_DISABLE (/etc/nccl.conf); traffic");
}

static void test_cuda_versions(void **state)
{
    fixture *f = *state;
    EXPECT(f, check_cuda_versions, HERD_CHECK_SKIP, "built without CUDA");
    f->env.cuda_runtime_version = 13000;
    EXPECT(f, check_cuda_versions, HERD_CHECK_WARN, "no NVIDIA driver is loaded");
    put_text(f, "proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  "
             "535.104.05  Sat Aug 19 01:15:15 UTC 2023\n");
    EXPECT(f, check_cuda_versions, HERD_CHECK_SKIP, "535.104.05"); /* NVML did not answer */
    f->env.cuda_driver_version = 12020;
    EXPECT(f, check_cuda_versions, HERD_CHECK_FAIL, "supports CUDA 12.2");
    f->env.cuda_runtime_version = 12040;
    EXPECT(f, check_cuda_versions, HERD_CHECK_WARN, "minor-version compatibility");
    f->env.cuda_driver_version = 12080;
    EXPECT(f, check_cuda_versions, HERD_CHECK_PASS, "CUDA 12.8, herd is built with CUDA 12.4");
}

static void test_nvidia_uvm(void **state)
{
    fixture *f = *state;
    EXPECT(f, check_nvidia_uvm, HERD_CHECK_SKIP, "could not check");
    put_text(f, "proc/modules", "nvme 49152 2 - Live 0x0\next4 1003520 1 - Live 0x0\n");
    EXPECT(f, check_nvidia_uvm, HERD_CHECK_SKIP, "not loaded");
    put_text(f, "proc/modules", "nvidia_drm 77824 0 - Live 0x0\nnvidia 56717312 1 nvidia_drm, Live 0x0\n");
    EXPECT(f, check_nvidia_uvm, HERD_CHECK_FAIL, "nvidia_uvm is not");
    put_text(f, "proc/modules", "nvidia_uvm 1433600 2 - Live 0x0\nnvidia 56717312 1 nvidia_uvm, Live 0x0\n");
    EXPECT(f, check_nvidia_uvm, HERD_CHECK_PASS, "nvidia_uvm are loaded");
}

static void test_gpus_per_host(void **state)
{
    fixture *f = *state;
    EXPECT(f, check_gpus_per_host, HERD_CHECK_SKIP, "no NVIDIA GPU");
    put_text(f, "proc/driver/nvidia/gpus/0000:3b:00.0/information", "Model: NVIDIA H100\n");
    put_text(f, "proc/driver/nvidia/gpus/0000:5e:00.0/information", "Model: NVIDIA H100\n");
    EXPECT(f, check_gpus_per_host, HERD_CHECK_SKIP, "ranks per host unknown");
    f->envp[0] = "OMPI_COMM_WORLD_LOCAL_SIZE=2";
    EXPECT(f, check_gpus_per_host, HERD_CHECK_PASS, "2 ranks per host, 2 GPU(s) visible");
    /* More ranks than GPUs: they take turns (round robin), and reduce through MPI. */
    f->envp[0] = "OMPI_COMM_WORLD_LOCAL_SIZE=5";
    EXPECT(f, check_gpus_per_host, HERD_CHECK_WARN, "5 ranks per host but 2 GPU(s) visible: "
           "local ranks 0,2,4 share GPU 0; local ranks 1,3 share GPU 1; NCCL cannot put two "
           "ranks on one GPU, so gradients will be reduced by MPI through host memory");
    f->env.ranks_per_host = 1; /* --ranks-per-host wins over the environment */
    EXPECT(f, check_gpus_per_host, HERD_CHECK_WARN, "1 GPU(s) stay idle");
    f->env.ranks_per_host = 2;
    f->envp[1] = "CUDA_VISIBLE_DEVICES=1";
    EXPECT(f, check_gpus_per_host, HERD_CHECK_WARN, "1 GPU(s) visible (CUDA_VISIBLE_DEVICES): "
           "local ranks 0,1 share GPU 0;");
    f->envp[1] = "CUDA_VISIBLE_DEVICES=";
    EXPECT(f, check_gpus_per_host, HERD_CHECK_SKIP, "no NVIDIA GPU visible");
}

/* Which rank of a host prints (local rank 0), and how many ranks the host runs. */
static void test_local_ranks(void **state)
{
    fixture *f = *state;
    int rank = -1, size = -1;
    herd_doctor_local_ranks(&f->env, &rank, &size);
    assert_true(rank == 0 && size == 0); /* not launched: the one rank prints */
    f->envp[0] = "SLURM_LOCALID=3";
    f->envp[1] = "SLURM_NTASKS_PER_NODE=4";
    herd_doctor_local_ranks(&f->env, &rank, &size);
    assert_true(rank == 3 && size == 4);
    f->envp[2] = "OMPI_COMM_WORLD_LOCAL_RANK=0"; /* Open MPI's variables come first */
    f->envp[3] = "OMPI_COMM_WORLD_LOCAL_SIZE=2";
    herd_doctor_local_ranks(&f->env, &rank, &size);
    assert_true(rank == 0 && size == 2);
}

static void put_exec(fixture *f, const char *rel)
{
    put_text(f, rel, "#!/bin/sh\n");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", f->root, rel);
    assert_int_equal(chmod(path, 0755), 0);
}

static void test_mpi(void **state)
{
    fixture *f = *state;
    char link[4096];
    snprintf(link, sizeof link, "%s/usr/bin/mpirun", f->root);
    f->envp[0] = "PATH=/usr/local/bin:/usr/bin";
    f->env.mpi_library = NULL;
    EXPECT(f, check_mpi, HERD_CHECK_WARN, "built without MPI");
    f->env.mpi_library = "Open MPI v4.1.4";
    EXPECT(f, check_mpi, HERD_CHECK_WARN, "no mpirun is in PATH");
    put_exec(f, "usr/bin/mpirun.openmpi");
    assert_int_equal(symlink("mpirun.openmpi", link), 0);
    EXPECT(f, check_mpi, HERD_CHECK_PASS, "launcher /usr/bin/mpirun (mpirun.openmpi)");
    /* Started by another MPI's launcher (herd_mpi_launcher_check, as at start-up). */
    f->envp[1] = "PMI_SIZE=2";
    EXPECT(f, check_mpi, HERD_CHECK_FAIL, "herd uses Open MPI v4.1.4, but a PMI launcher (MPICH's Hydra");
    f->envp[1] = "OMPI_COMM_WORLD_SIZE=2";
    EXPECT(f, check_mpi, HERD_CHECK_PASS, "launcher /usr/bin/mpirun");
    f->env.mpi_library = "MPICH 4.0.2";
    EXPECT(f, check_mpi, HERD_CHECK_FAIL, "herd uses MPICH 4.0.2, but Open MPI's mpirun started it");
    f->env.mpi_library = "Open MPI v4.1.4";
    f->envp[1] = NULL;
    /* The alternatives link points at MPICH's launcher: ranks would not join one job. */
    put_exec(f, "usr/bin/mpirun.mpich");
    unlink(link);
    assert_int_equal(symlink("/usr/bin/mpirun.mpich", link), 0);
    EXPECT(f, check_mpi, HERD_CHECK_FAIL, "mpirun.mpich");
    assert_non_null(strstr(f->c.fix, "update-alternatives"));
}

static herd_cma_probe fake_probe;
static int fake_probe_rc;

static int fake_probe_cma(herd_cma_probe *out)
{
    *out = fake_probe;
    return fake_probe_rc;
}

static void test_single_copy(void **state)
{
    fixture *f = *state;
    f->env.mpi_library = "MPICH Version: 4.0";
    f->env.probe_cma = fake_probe_cma;
    EXPECT(f, check_single_copy, HERD_CHECK_SKIP, "Open MPI's shared-memory transport");
    f->env.mpi_library = "Open MPI v4.1.4";
    f->env.probe_cma = NULL;
    EXPECT(f, check_single_copy, HERD_CHECK_SKIP, "--root");
    f->env.probe_cma = fake_probe_cma;
    fake_probe_rc = -EPERM;
    EXPECT(f, check_single_copy, HERD_CHECK_SKIP, "process_vm_readv fails");
    fake_probe_rc = 0;
    /* Slow CMA is reported, never turned into advice to switch single copy off. */
    fake_probe = (herd_cma_probe){.cma_gbps = 14, .memcpy_gbps = 47};
    EXPECT(f, check_single_copy, HERD_CHECK_PASS, "CMA 14.0 GB/s, memcpy 47.0 GB/s; single copy: "
                                                  "Open MPI's default (cma), which herd run keeps");
    assert_string_equal(f->c.fix, "");
    f->envp[0] = "OMPI_MCA_btl_vader_single_copy_mechanism=none";
    EXPECT(f, check_single_copy, HERD_CHECK_PASS,
           "single copy: none from OMPI_MCA_btl_vader_single_copy_mechanism");
    fake_probe = (herd_cma_probe){.cma_gbps = 40, .memcpy_gbps = 47};
    f->envp[0] = "OMPI_MCA_btl_sm_single_copy_mechanism=cma";
    EXPECT(f, check_single_copy, HERD_CHECK_PASS,
           "CMA 40.0 GB/s, memcpy 47.0 GB/s; single copy: cma from OMPI_MCA_btl_sm_single_copy_mechanism");
}

/* The real probe on this machine: a measurement, or the reason it cannot run. */
static void test_probe_cma_live(void **state)
{
    (void)state;
    herd_cma_probe p;
    int rc = herd_probe_cma(&p);
    if (rc < 0) {
        assert_true(rc == -EPERM || rc == -ENOSYS || rc == -EFAULT || rc == -ESRCH);
        return;
    }
    assert_true(p.cma_gbps > 0 && p.memcpy_gbps > 0);
}

static void test_network(void **state)
{
    fixture *f = *state;
    EXPECT(f, check_network, HERD_CHECK_SKIP, "could not check");
    assert_non_null(strstr(f->c.detail, "/sys/class/net: No such file or directory"));
    put_text(f, "sys/class/net/lo/operstate", "unknown\n");
    put_text(f, "sys/class/net/eth0/operstate", "down\n");
    EXPECT(f, check_network, HERD_CHECK_WARN, "down: eth0");
    put_text(f, "sys/class/net/tun0/operstate", "unknown\n");
    put_text(f, "sys/class/net/tun0/carrier", "1\n");
    EXPECT(f, check_network, HERD_CHECK_PASS, "up: tun0");
    put_text(f, "sys/class/net/eth0/operstate", "up\n");
    EXPECT(f, check_network, HERD_CHECK_PASS, "eth0");
    assert_null(strstr(f->c.detail, "lo"));
}

static void test_xid(void **state)
{
    fixture *f = *state;
    EXPECT(f, check_xid, HERD_CHECK_SKIP, "could not check");
    put_text(f, "dev/kmsg", "6,100,5000,-;eth0: link up\n4,101,6000,-;usb 1-1: new device\n");
    EXPECT(f, check_xid, HERD_CHECK_PASS, "no NVIDIA Xid");
    put_text(f, "dev/kmsg", "6,100,5000,-;eth0: link up\n"
             "4,200,9000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
             "4,201,9100,-;NVRM: Xid (PCI:0000:5e:00): 13, pid=99, Graphics Exception\n"
             "4,202,9200,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n");
    EXPECT(f, check_xid, HERD_CHECK_FAIL, "3 Xid error(s)");
    assert_non_null(strstr(f->c.detail, "codes 79,13"));
    assert_non_null(strstr(f->c.detail, "fallen off the bus"));
}

static void test_xid_unreadable(void **state)
{
    fixture *f = *state;
    /* Unreadable (here: a directory): reported as not checked, never as a pass. */
    make_dir(f, "dev/kmsg");
    EXPECT(f, check_xid, HERD_CHECK_SKIP, "could not check: /dev/kmsg: Is a directory");
}

/* The defaults name the MPI library alone, as --version does: not what follows it there
 * (it once carried "; NCCL ..." along). */
static void test_env_default_mpi(void **state)
{
    (void)state;
    herd_doctor_env env;
    herd_doctor_env_default(&env, NULL);
    const char *mpi = herd_mpi_library_version();
    if (!mpi) {
        assert_null(env.mpi_library);
        assert_non_null(strstr(herd_build_info(), "MPI: none;"));
        return;
    }
    assert_string_equal(env.mpi_library, mpi);
    assert_null(strstr(mpi, "NCCL"));
    assert_null(strpbrk(mpi, ";)"));
    const char *named = strstr(herd_build_info(), "MPI: ");
    assert_non_null(named);
    assert_memory_equal(named + 5, mpi, strlen(mpi));
    assert_int_equal(named[5 + strlen(mpi)], ';');
}

/* The whole run on an empty tree: every check reports, none crashes, names are unique. */
static void test_run_all(void **state)
{
    fixture *f = *state;
    herd_check checks[HERD_DOCTOR_MAX_CHECKS];
    int n = herd_doctor_run(&f->env, checks);
    assert_int_equal(n, 15);
    for (int i = 0; i < n; i++) {
        assert_true(checks[i].detail[0] != '\0');
        for (int j = 0; j < i; j++)
            assert_string_not_equal(checks[i].name, checks[j].name);
    }
    assert_string_equal(herd_check_status_name(HERD_CHECK_SKIP), "skip");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_iommu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_acs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_acs_unprivileged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_ipc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transports, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cuda_versions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nvidia_uvm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gpus_per_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_ranks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mpi, setup, teardown),
        cmocka_unit_test_setup_teardown(test_single_copy, setup, teardown),
        cmocka_unit_test(test_probe_cma_live),
        cmocka_unit_test_setup_teardown(test_network, setup, teardown),
        cmocka_unit_test_setup_teardown(test_xid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_xid_unreadable, setup, teardown),
        cmocka_unit_test(test_env_default_mpi),
        cmocka_unit_test_setup_teardown(test_run_all, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
