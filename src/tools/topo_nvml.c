/*
 * GPUs through NVML, loaded with dlopen at run time so that one herd binary runs on
 * machines with and without an NVIDIA driver. The few NVML types and prototypes used
 * are declared here (nvml.h is not part of the CUDA toolkit image CI builds with);
 * their layout follows NVML's API reference.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "herd_config.h"
#include "core/error.h"
#include "tools/tools.h"

#if HERD_HAVE_CUDA
#include <cuda_runtime.h>
#endif

typedef int nvml_return;
typedef struct nvmlDevice_st *nvml_device;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_P2P_CAPS_INDEX_READ = 0,
    NVML_P2P_STATUS_OK = 0,
    NVML_NVLINK_DEVICE_TYPE_GPU = 0,
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 2,
    NVML_FEATURE_ENABLED = 1,
    NVML_NVLINK_MAX_LINKS = 18,
};

/* nvmlPciInfo_t (v3 of nvmlDeviceGetPciInfo, v2 of the NVLink remote query). */
typedef struct nvml_pci_info {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} nvml_pci_info;

struct herd_nvml {
    void *lib;
    nvml_return (*shutdown)(void);
    const char *(*error_string)(nvml_return);
    nvml_return (*driver_version)(char *, unsigned);
    nvml_return (*cuda_driver_version)(int *);
    nvml_return (*count)(unsigned *);
    nvml_return (*by_index)(unsigned, nvml_device *);
    nvml_return (*by_bus_id)(const char *, nvml_device *);
    nvml_return (*name)(nvml_device, char *, unsigned);
    nvml_return (*pci_info)(nvml_device, nvml_pci_info *);
    nvml_return (*common_ancestor)(nvml_device, nvml_device, int *);
    nvml_return (*p2p_status)(nvml_device, nvml_device, int, int *);
    nvml_return (*nvlink_state)(nvml_device, unsigned, int *);
    nvml_return (*nvlink_remote_pci)(nvml_device, unsigned, nvml_pci_info *);
    nvml_return (*nvlink_remote_type)(nvml_device, unsigned, int *); /* optional */
};

static void *sym(void *lib, const char *name, bool *missing)
{
    void *p = dlsym(lib, name);
    if (!p)
        *missing = true;
    return p;
}

herd_nvml *herd_nvml_open(char *why, size_t cap)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, cap, "no NVIDIA driver (libnvidia-ml.so.1 not found): no GPUs listed");
        return NULL;
    }
    herd_nvml *n = calloc(1, sizeof *n);
    if (!n) {
        dlclose(lib);
        snprintf(why, cap, "out of memory loading NVML");
        return NULL;
    }
    n->lib = lib;
    bool missing = false;
    nvml_return (*init)(void) = (nvml_return(*)(void))sym(lib, "nvmlInit_v2", &missing);
    /* Casts through void * are how dlsym results become function pointers (POSIX). */
#define LOAD(field, name) *(void **)&n->field = sym(lib, name, &missing)
    LOAD(shutdown, "nvmlShutdown");
    LOAD(error_string, "nvmlErrorString");
    LOAD(driver_version, "nvmlSystemGetDriverVersion");
    LOAD(cuda_driver_version, "nvmlSystemGetCudaDriverVersion");
    LOAD(count, "nvmlDeviceGetCount_v2");
    LOAD(by_index, "nvmlDeviceGetHandleByIndex_v2");
    LOAD(by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
    LOAD(name, "nvmlDeviceGetName");
    LOAD(pci_info, "nvmlDeviceGetPciInfo_v3");
    LOAD(common_ancestor, "nvmlDeviceGetTopologyCommonAncestor");
    LOAD(p2p_status, "nvmlDeviceGetP2PStatus");
    LOAD(nvlink_state, "nvmlDeviceGetNvLinkState");
    LOAD(nvlink_remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    bool optional_missing = false;
    *(void **)&n->nvlink_remote_type = sym(lib, "nvmlDeviceGetNvLinkRemoteDeviceType", &optional_missing);
#undef LOAD
    if (missing) {
        snprintf(why, cap, "libnvidia-ml.so.1 lacks functions herd needs (driver too old?): no "
                 "GPUs listed; update the NVIDIA driver");
        dlclose(lib);
        free(n);
        return NULL;
    }
    nvml_return rc = init();
    if (rc != NVML_SUCCESS) {
        snprintf(why, cap, "NVML did not initialise (%s): no GPUs listed; check that the NVIDIA "
                 "kernel module is loaded (nvidia-smi)", n->error_string(rc));
        dlclose(lib);
        free(n);
        return NULL;
    }
    return n;
}

void herd_nvml_close(herd_nvml *n)
{
    if (!n)
        return;
    n->shutdown();
    dlclose(n->lib);
    free(n);
}

int herd_nvml_cuda_driver_version(herd_nvml *n)
{
    int v = 0;
    if (!n || n->cuda_driver_version(&v) != NVML_SUCCESS)
        return 0;
    return v;
}

static bool normalize_bus_id(const char *nvml_id, char out[16])
{
    herd_pci_addr a;
    if (!herd_pci_parse(nvml_id, &a))
        return false;
    herd_pci_format(a, out);
    return true;
}

/* NVLinks between GPU i and every other GPU: direct links count per pair; links into
 * NVSwitches join every pair of switch-attached GPUs with min(links of each). */
static void count_nvlinks(herd_nvml *n, nvml_device *dev, herd_topo *t, int *pair, int *to_switch)
{
    int g = t->n_gpus;
    for (int i = 0; i < g; i++) {
        for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; link++) {
            int active = 0;
            nvml_return rc = n->nvlink_state(dev[i], link, &active);
            if (rc == NVML_ERROR_INVALID_ARGUMENT || rc == NVML_ERROR_NOT_SUPPORTED)
                break; /* past this GPU's links, or no NVLink at all */
            if (rc != NVML_SUCCESS || active != NVML_FEATURE_ENABLED)
                continue;
            int type = NVML_NVLINK_DEVICE_TYPE_GPU;
            if (n->nvlink_remote_type && n->nvlink_remote_type(dev[i], link, &type) != NVML_SUCCESS)
                type = NVML_NVLINK_DEVICE_TYPE_GPU;
            if (type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
                to_switch[i]++;
                continue;
            }
            nvml_pci_info remote;
            char id[16];
            if (n->nvlink_remote_pci(dev[i], link, &remote) != NVML_SUCCESS ||
                !normalize_bus_id(remote.bus_id, id))
                continue;
            for (int j = 0; j < g; j++)
                if (j != i && strcmp(t->gpus[j].bus_id, id) == 0)
                    pair[i * g + j]++;
        }
    }
    for (int i = 0; i < g; i++)
        for (int j = 0; j < g; j++)
            if (i != j && to_switch[i] > 0 && to_switch[j] > 0)
                pair[i * g + j] += to_switch[i] < to_switch[j] ? to_switch[i] : to_switch[j];
}

/* The GPUs in CUDA's order (what --device cuda and the ranks' local indices refer to),
 * each matched to its NVML handle by PCI bus id: the two orders can differ. */
static herd_status list_gpus(herd_nvml *n, herd_topo *t, nvml_device **devs)
{
    unsigned count = 0;
    nvml_return rc = n->count(&count);
    if (rc != NVML_SUCCESS)
        return HERD_ERR(HERD_ERR_INTERNAL, "NVML could not count the GPUs: %s", n->error_string(rc));
    int listed = (int)count;
#if HERD_HAVE_CUDA
    int cuda_count = 0;
    cudaError_t ce = cudaGetDeviceCount(&cuda_count);
    if (ce != cudaSuccess) {
        snprintf(t->gpu_note, sizeof t->gpu_note, "the CUDA runtime sees no GPU (%s): GPUs "
                 "listed in NVML's order, without CUDA indices", cudaGetErrorString(ce));
        cuda_count = 0;
    } else {
        listed = cuda_count;
    }
#endif
    t->gpus = calloc(listed ? (size_t)listed : 1, sizeof *t->gpus);
    *devs = calloc(listed ? (size_t)listed : 1, sizeof **devs);
    if (!t->gpus || !*devs)
        return HERD_NOMEM(listed * sizeof *t->gpus);
    for (int i = 0; i < listed; i++) {
        herd_topo_gpu *g = &t->gpus[t->n_gpus];
        nvml_device d;
        g->cuda_index = -1;
        g->nvml_index = -1;
#if HERD_HAVE_CUDA
        if (cuda_count > 0) {
            char cuda_bus[32];
            if (cudaDeviceGetPCIBusId(cuda_bus, sizeof cuda_bus, i) != cudaSuccess ||
                n->by_bus_id(cuda_bus, &d) != NVML_SUCCESS)
                return HERD_ERR(HERD_ERR_INTERNAL, "CUDA device %d has no NVML device with its "
                                "PCI bus id; check the driver installation (nvidia-smi)", i);
            g->cuda_index = i;
        } else
#endif
        if (n->by_index((unsigned)i, &d) != NVML_SUCCESS)
            continue;
        nvml_pci_info pci;
        if (n->pci_info(d, &pci) != NVML_SUCCESS || !normalize_bus_id(pci.bus_id, g->bus_id))
            return HERD_ERR(HERD_ERR_INTERNAL, "NVML gave no PCI bus id for GPU %d", i);
        /* NVML's own index of the device, for reading nvidia-smi next to herd topo. */
        for (unsigned k = 0; k < count; k++) {
            nvml_device other;
            if (n->by_index(k, &other) == NVML_SUCCESS && other == d)
                g->nvml_index = (int)k;
        }
        if (n->name(d, g->name, sizeof g->name) != NVML_SUCCESS)
            snprintf(g->name, sizeof g->name, "NVIDIA GPU");
        g->numa = -1;
        (*devs)[t->n_gpus++] = d;
    }
    return HERD_OK;
}

herd_status herd_nvml_fill_gpus(herd_nvml *n, herd_topo *t)
{
    nvml_device *dev = NULL;
    if (n->driver_version(t->driver, sizeof t->driver) != NVML_SUCCESS)
        t->driver[0] = '\0';
    herd_status st = list_gpus(n, t, &dev);
    int g = t->n_gpus;
    int *pair = NULL, *to_switch = NULL;
    if (st == HERD_OK && g > 0) {
        pair = calloc((size_t)g * g, sizeof *pair);
        to_switch = calloc((size_t)g, sizeof *to_switch);
        t->links = calloc((size_t)g * g, sizeof *t->links);
        t->p2p = calloc((size_t)g * g, 1);
        if (!pair || !to_switch || !t->links || !t->p2p)
            st = HERD_NOMEM((size_t)g * g * sizeof *t->links);
    }
    if (st == HERD_OK && g > 0) {
        count_nvlinks(n, dev, t, pair, to_switch);
        for (int i = 0; i < g; i++)
            for (int j = 0; j < g; j++) {
                int level = 0, p2p = 0;
                herd_link l = {HERD_LINK_UNKNOWN, 0};
                if (i == j)
                    l.kind = HERD_LINK_SELF;
                else if (n->common_ancestor(dev[i], dev[j], &level) == NVML_SUCCESS)
                    l = herd_link_from_nvml_level(level, pair[i * g + j]);
                else if (pair[i * g + j] > 0)
                    l = (herd_link){HERD_LINK_NVLINK, pair[i * g + j]};
                t->links[i * g + j] = l;
                if (i == j)
                    t->p2p[i * g + j] = 1;
                else if (n->p2p_status(dev[i], dev[j], NVML_P2P_CAPS_INDEX_READ, &p2p) == NVML_SUCCESS)
                    t->p2p[i * g + j] = p2p == NVML_P2P_STATUS_OK;
                else
                    t->p2p[i * g + j] = -1;
            }
        snprintf(t->link_source, sizeof t->link_source, "NVML");
    }
    /* The NVLink counts stay with the links; topo.c reclassifies PCIe paths from hwloc. */
    free(pair);
    free(to_switch);
    free(dev);
    return st;
}
