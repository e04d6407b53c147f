/*
 * The machine as training sees it: packages, NUMA nodes, cores and PCI devices from
 * hwloc; GPUs from NVML (topo_nvml.c) placed in hwloc's PCI tree; and, under MPI,
 * where every rank runs.
 */
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "dist/comm.h"
#include "tools/tools.h"

static int numa_of(hwloc_topology_t hw, hwloc_obj_t io)
{
    hwloc_obj_t cpu_side = hwloc_get_non_io_ancestor_obj(hw, io);
    if (!cpu_side || !cpu_side->nodeset || hwloc_bitmap_iszero(cpu_side->nodeset))
        return -1;
    /* A device attached above several nodes (the machine) has no single node. */
    if (hwloc_bitmap_weight(cpu_side->nodeset) != 1)
        return -1;
    return hwloc_bitmap_first(cpu_side->nodeset);
}

static void cpus_near(hwloc_topology_t hw, hwloc_obj_t io, char *buf, size_t cap)
{
    hwloc_obj_t cpu_side = hwloc_get_non_io_ancestor_obj(hw, io);
    if (cpu_side && cpu_side->cpuset)
        hwloc_bitmap_list_snprintf(buf, cap, cpu_side->cpuset);
    else
        snprintf(buf, cap, "?");
}

static void pci_bus_id(hwloc_obj_t pci, char buf[16])
{
    herd_pci_addr a = {pci->attr->pcidev.domain, pci->attr->pcidev.bus, pci->attr->pcidev.dev,
                       pci->attr->pcidev.func};
    herd_pci_format(a, buf);
}

/* The chain of bridges above a PCI device, as the link classifier wants it. */
static void pci_locus(hwloc_topology_t hw, hwloc_obj_t pci, herd_pci_locus *l)
{
    uint64_t chain[64];
    int n = 0;
    memset(l, 0, sizeof *l);
    l->numa = numa_of(hw, pci);
    l->device = pci->gp_index;
    for (hwloc_obj_t p = pci->parent; p && p->type == HWLOC_OBJ_BRIDGE && n < 64; p = p->parent) {
        if (p->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) {
            l->host_bridge = p->gp_index;
            break;
        }
        chain[n++] = p->gp_index;
    }
    l->n_bridges = n < HERD_PCI_MAX_DEPTH ? n : HERD_PCI_MAX_DEPTH;
    for (int i = 0; i < l->n_bridges; i++) /* outermost first */
        l->bridges[i] = chain[n - 1 - i];
}

static const char *pci_kind(unsigned class_id)
{
    switch (class_id >> 8) {
    case 0x01: return "storage";
    case 0x02: return "network";
    case 0x03: return "gpu";
    case 0x06: return "bridge";
    case 0x0c: return (class_id & 0xff) == 0x06 ? "infiniband" : "serial-bus";
    case 0x12: return "accelerator";
    default: return "other";
    }
}

static herd_status read_machine(hwloc_topology_t hw, herd_topo *t)
{
    t->packages = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_PACKAGE);
    t->numa_count = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_NUMANODE);
    t->cores = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_CORE);
    t->pus = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_PU);
    hwloc_obj_t pkg = hwloc_get_obj_by_type(hw, HWLOC_OBJ_PACKAGE, 0);
    const char *model = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : NULL;
    snprintf(t->cpu_model, sizeof t->cpu_model, "%s", model ? model : "unknown CPU");
    for (size_t n = strlen(t->cpu_model); n > 0 && t->cpu_model[n - 1] == ' ';) /* CPUID pads */
        t->cpu_model[--n] = '\0';
    t->numa = calloc(t->numa_count > 0 ? (size_t)t->numa_count : 1, sizeof *t->numa);
    if (!t->numa)
        return HERD_NOMEM(sizeof *t->numa);
    for (int i = 0; i < t->numa_count; i++) {
        hwloc_obj_t node = hwloc_get_obj_by_type(hw, HWLOC_OBJ_NUMANODE, (unsigned)i);
        t->numa[i].os_index = (int)node->os_index;
        t->numa[i].bytes = node->attr ? node->attr->numanode.local_memory : 0;
        hwloc_bitmap_list_snprintf(t->numa[i].cpus, sizeof t->numa[i].cpus, node->cpuset);
    }

    int n_pci = 0, n_nics = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(hw, o));)
        n_pci++;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(hw, o));)
        n_nics++;
    t->pci = calloc(n_pci ? (size_t)n_pci : 1, sizeof *t->pci);
    t->nics = calloc(n_nics ? (size_t)n_nics : 1, sizeof *t->nics);
    if (!t->pci || !t->nics)
        return HERD_NOMEM((size_t)n_pci * sizeof *t->pci);
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(hw, o));) {
        herd_topo_pcidev *d = &t->pci[t->n_pci++];
        pci_bus_id(o, d->bus_id);
        snprintf(d->kind, sizeof d->kind, "%s", pci_kind(o->attr->pcidev.class_id));
        const char *vendor = hwloc_obj_get_info_by_name(o, "PCIVendor");
        const char *device = hwloc_obj_get_info_by_name(o, "PCIDevice");
        if (vendor || device)
            snprintf(d->name, sizeof d->name, "%s %s", vendor ? vendor : "", device ? device : "");
        else
            snprintf(d->name, sizeof d->name, "%04x:%04x", o->attr->pcidev.vendor_id,
                     o->attr->pcidev.device_id);
        d->numa = numa_of(hw, o);
    }
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(hw, o));) {
        hwloc_obj_osdev_type_t type = o->attr->osdev.type;
        if (type != HWLOC_OBJ_OSDEV_NETWORK && type != HWLOC_OBJ_OSDEV_OPENFABRICS)
            continue;
        herd_topo_nic *nic = &t->nics[t->n_nics++];
        snprintf(nic->name, sizeof nic->name, "%s", o->name ? o->name : "?");
        snprintf(nic->kind, sizeof nic->kind, "%s",
                 type == HWLOC_OBJ_OSDEV_NETWORK ? "network" : "openfabrics");
        hwloc_obj_t parent = o->parent;
        if (parent && parent->type == HWLOC_OBJ_PCI_DEVICE)
            pci_bus_id(parent, nic->bus_id);
        else
            snprintf(nic->bus_id, sizeof nic->bus_id, "virtual");
        nic->numa = numa_of(hw, o);
    }
    return HERD_OK;
}

/* Places NVML's GPUs in hwloc's PCI tree: NUMA node, nearby cores, and PCIe link
 * classes from the common ancestor (NVML's own answer stays where hwloc sees no tree). */
static void place_gpus(hwloc_topology_t hw, herd_topo *t)
{
    int g = t->n_gpus, placed = 0;
    for (int i = 0; i < g; i++) {
        herd_topo_gpu *gpu = &t->gpus[i];
        herd_pci_addr a;
        snprintf(gpu->cpus, sizeof gpu->cpus, "?");
        hwloc_obj_t o = herd_pci_parse(gpu->bus_id, &a)
                            ? hwloc_get_pcidev_by_busid(hw, a.domain, a.bus, a.dev, a.func)
                            : NULL;
        if (!o)
            continue;
        gpu->numa = numa_of(hw, o);
        cpus_near(hw, o, gpu->cpus, sizeof gpu->cpus);
        pci_locus(hw, o, &gpu->locus);
        placed++;
    }
    if (placed < g || g == 0)
        return;
    for (int i = 0; i < g; i++)
        for (int j = 0; j < g; j++) {
            herd_link *l = &t->links[i * g + j];
            int nvlinks = l->kind == HERD_LINK_NVLINK ? l->nvlinks : 0;
            *l = herd_link_classify(&t->gpus[i].locus, &t->gpus[j].locus, nvlinks);
        }
    snprintf(t->link_source, sizeof t->link_source, "hwloc PCI tree + NVML NVLinks");
}

herd_status herd_topo_discover(herd_topo **out)
{
    *out = NULL;
    herd_topo *t = calloc(1, sizeof *t);
    if (!t)
        return HERD_NOMEM(sizeof *t);
    if (gethostname(t->host, sizeof t->host - 1) != 0)
        snprintf(t->host, sizeof t->host, "unknown");
    hwloc_topology_t hw;
    if (hwloc_topology_init(&hw) != 0) {
        free(t);
        return HERD_ERR(HERD_ERR_INTERNAL, "hwloc_topology_init failed");
    }
    /* Bridges and the PCI devices that matter (GPUs, NICs, storage), not every function. */
    hwloc_topology_set_io_types_filter(hw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    /* hwloc's Linux component reads the PCI tree from sysfs itself. Its libpciaccess
     * plugin ("pci") adds only device names from pci.ids and leaks at exit (the sanitizer build
     * fails on it); the OpenCL and GL plugins start vendor runtimes for nothing. */
    hwloc_topology_set_components(hw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
    hwloc_topology_set_components(hw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "opencl");
    hwloc_topology_set_components(hw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "gl");
    if (hwloc_topology_load(hw) != 0) {
        hwloc_topology_destroy(hw);
        free(t);
        return HERD_ERR(HERD_ERR_INTERNAL, "hwloc could not read this machine's topology; "
                        "check that /sys and /proc are mounted");
    }
    t->hw = hw;
    snprintf(t->link_source, sizeof t->link_source, "none");
    herd_status st = read_machine(hw, t);
    herd_nvml *nvml = st == HERD_OK ? herd_nvml_open(t->gpu_note, sizeof t->gpu_note) : NULL;
    if (nvml) {
        st = herd_nvml_fill_gpus(nvml, t);
        herd_nvml_close(nvml);
        if (st == HERD_OK && t->n_gpus == 0 && !t->gpu_note[0])
            snprintf(t->gpu_note, sizeof t->gpu_note, "the NVIDIA driver sees no GPU");
    }
    if (st == HERD_OK)
        place_gpus(hw, t);
    if (st != HERD_OK) {
        herd_topo_free(t);
        return st;
    }
    *out = t;
    return HERD_OK;
}

void herd_topo_free(herd_topo *t)
{
    if (!t)
        return;
    if (t->hw)
        hwloc_topology_destroy((hwloc_topology_t)t->hw);
    free(t->numa);
    free(t->pci);
    free(t->nics);
    free(t->gpus);
    free(t->links);
    free(t->p2p);
    free(t);
}

herd_status herd_topo_rank_places(herd_dist *c, const herd_topo *t, herd_rank_place **out)
{
    *out = NULL;
    herd_rank_place mine = {.rank = c->rank, .local_rank = c->local_rank, .gpu = -1};
    snprintf(mine.host, sizeof mine.host, "%s", c->host);
    hwloc_topology_t hw = (hwloc_topology_t)t->hw;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set)
        return HERD_NOMEM(64);
    if (hwloc_get_cpubind(hw, set, HWLOC_CPUBIND_PROCESS) == 0)
        hwloc_bitmap_list_snprintf(mine.cpus, sizeof mine.cpus, set);
    else
        snprintf(mine.cpus, sizeof mine.cpus, "?");
    hwloc_bitmap_free(set);
    /* herd's convention: the rank with local index i uses GPU i of its host. */
    if (c->local_rank < t->n_gpus) {
        mine.gpu = c->local_rank;
        snprintf(mine.gpu_bus_id, sizeof mine.gpu_bus_id, "%s", t->gpus[c->local_rank].bus_id);
    }
    herd_rank_place *all = herd_xcalloc((size_t)c->size, sizeof *all);
    if (!all)
        return HERD_ERR_NOMEM;
    herd_status st = c->ops->allgather(c, &mine, all, sizeof mine);
    if (st != HERD_OK) {
        free(all);
        return st;
    }
    *out = all;
    return HERD_OK;
}
