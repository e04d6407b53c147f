/* herd topo: the machine as training sees it, and where each rank of a job runs. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tools/tools.h"

static const char topo_help[] =
    "usage: herd topo [--json]\n"
    "\n"
    "Prints this machine's packages, NUMA nodes, cores, PCI devices (GPUs, NICs, storage)\n"
    "and network interfaces (hwloc), and its NVIDIA GPUs (NVML, when a driver is present):\n"
    "PCI bus id, NUMA node, nearby cores, the link between every pair in the legend of\n"
    "'nvidia-smi topo -m', and whether each pair has peer-to-peer access.\n"
    "Under mpirun (mpirun -np N herd topo), rank 0 also prints every rank's host, the\n"
    "cores it is bound to and its GPU (the local rank's).\n"
    "\n"
    "  --json    one JSON object instead of the tables\n";

static const char legend[] =
    "  X = self, NV# = # bonded NVLinks, PIX = at most one PCIe bridge (one switch),\n"
    "  PXB = several PCIe bridges without the host bridge, PHB = through a PCIe host bridge,\n"
    "  NODE = between host bridges of one NUMA node, SYS = across NUMA nodes (QPI/UPI, xGMI)\n";

static void print_numa(int numa) { numa >= 0 ? printf("%-5d", numa) : printf("%-5s", "?"); }

static void print_matrix_header(int g)
{
    printf("      ");
    for (int j = 0; j < g; j++)
        printf(" GPU%-3d", j);
    printf("\n");
}

static void print_text(const herd_topo *t, const herd_rank_place *ranks, int n_ranks)
{
    printf("host %s: %d package(s), %d NUMA node(s), %d core(s), %d hardware thread(s); %s\n",
           t->host, t->packages, t->numa_count, t->cores, t->pus, t->cpu_model);
    for (int i = 0; i < t->numa_count; i++)
        printf("  NUMA node %d: cpus %s, %.1f GiB\n", t->numa[i].os_index, t->numa[i].cpus,
               (double)t->numa[i].bytes / (1 << 30));
    printf("PCI devices (%d):\n", t->n_pci);
    for (int i = 0; i < t->n_pci; i++) {
        printf("  %s  %-11s NUMA ", t->pci[i].bus_id, t->pci[i].kind);
        print_numa(t->pci[i].numa);
        printf(" %s\n", t->pci[i].name);
    }
    printf("network interfaces (%d):\n", t->n_nics);
    for (int i = 0; i < t->n_nics; i++) {
        printf("  %-12s %-11s %-12s NUMA ", t->nics[i].name, t->nics[i].kind, t->nics[i].bus_id);
        print_numa(t->nics[i].numa);
        printf("\n");
    }
    int g = t->n_gpus;
    if (g == 0) {
        printf("GPUs: %s\n", t->gpu_note[0] ? t->gpu_note : "none");
    } else {
        printf("GPUs (%d; driver %s; links from %s):\n", g, t->driver[0] ? t->driver : "?",
               t->link_source);
        if (t->gpu_note[0])
            printf("  note: %s\n", t->gpu_note);
        printf("  %-5s %-5s %-13s %-5s %-14s %s\n", "cuda", "nvml", "bus id", "NUMA", "cpus", "name");
        for (int i = 0; i < g; i++) {
            const herd_topo_gpu *p = &t->gpus[i];
            char cuda[16] = "-";
            if (p->cuda_index >= 0)
                snprintf(cuda, sizeof cuda, "%d", p->cuda_index);
            printf("  %-5s %-5d %-13s ", cuda, p->nvml_index, p->bus_id);
            print_numa(p->numa);
            printf(" %-14s %s\n", p->cpus, p->name);
        }
        printf("link matrix:\n");
        print_matrix_header(g);
        for (int i = 0; i < g; i++) {
            printf("  GPU%-2d", i);
            for (int j = 0; j < g; j++) {
                char name[8];
                printf(" %-6s", herd_link_name(t->links[i * g + j], name));
            }
            printf("\n");
        }
        fputs(legend, stdout);
        printf("peer-to-peer access (NVML, read):\n");
        print_matrix_header(g);
        for (int i = 0; i < g; i++) {
            printf("  GPU%-2d", i);
            for (int j = 0; j < g; j++) {
                signed char p = t->p2p[i * g + j];
                printf(" %-6s", i == j ? "X" : p > 0 ? "OK" : p == 0 ? "no" : "?");
            }
            printf("\n");
        }
    }
    if (n_ranks > 1) {
        printf("ranks (%d):\n  %-5s %-20s %-6s %-14s %s\n", n_ranks, "rank", "host", "local",
               "cpus", "GPU");
        for (int r = 0; r < n_ranks; r++) {
            const herd_rank_place *p = &ranks[r];
            char gpu[32] = "none";
            if (p->gpu >= 0)
                snprintf(gpu, sizeof gpu, "%d (%s)", p->gpu, p->gpu_bus_id);
            printf("  %-5d %-20s %-6d %-14s %s\n", p->rank, p->host, p->local_rank, p->cpus, gpu);
        }
    }
}

static cJSON *numa_json(int numa) { return numa >= 0 ? cJSON_CreateNumber(numa) : cJSON_CreateNull(); }

static void print_json(const herd_topo *t, const herd_rank_place *ranks, int n_ranks)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "host", t->host);
    cJSON_AddStringToObject(o, "cpu_model", t->cpu_model);
    cJSON_AddNumberToObject(o, "packages", t->packages);
    cJSON_AddNumberToObject(o, "cores", t->cores);
    cJSON_AddNumberToObject(o, "hardware_threads", t->pus);
    cJSON *numa = cJSON_AddArrayToObject(o, "numa_nodes");
    for (int i = 0; i < t->numa_count; i++) {
        cJSON *n = cJSON_CreateObject();
        cJSON_AddNumberToObject(n, "os_index", t->numa[i].os_index);
        cJSON_AddStringToObject(n, "cpus", t->numa[i].cpus);
        cJSON_AddNumberToObject(n, "memory_bytes", (double)t->numa[i].bytes);
        cJSON_AddItemToArray(numa, n);
    }
    cJSON *pci = cJSON_AddArrayToObject(o, "pci_devices");
    for (int i = 0; i < t->n_pci; i++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "bus_id", t->pci[i].bus_id);
        cJSON_AddStringToObject(d, "kind", t->pci[i].kind);
        cJSON_AddStringToObject(d, "name", t->pci[i].name);
        cJSON_AddItemToObject(d, "numa", numa_json(t->pci[i].numa));
        cJSON_AddItemToArray(pci, d);
    }
    cJSON *nics = cJSON_AddArrayToObject(o, "network_interfaces");
    for (int i = 0; i < t->n_nics; i++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "name", t->nics[i].name);
        cJSON_AddStringToObject(d, "kind", t->nics[i].kind);
        cJSON_AddStringToObject(d, "bus_id", t->nics[i].bus_id);
        cJSON_AddItemToObject(d, "numa", numa_json(t->nics[i].numa));
        cJSON_AddItemToArray(nics, d);
    }
    int g = t->n_gpus;
    cJSON_AddStringToObject(o, "driver", t->driver);
    cJSON_AddStringToObject(o, "gpu_note", t->gpu_note);
    cJSON_AddStringToObject(o, "link_source", t->link_source);
    cJSON *gpus = cJSON_AddArrayToObject(o, "gpus");
    cJSON *links = cJSON_AddArrayToObject(o, "links");
    cJSON *p2p = cJSON_AddArrayToObject(o, "p2p");
    for (int i = 0; i < g; i++) {
        const herd_topo_gpu *p = &t->gpus[i];
        cJSON *d = cJSON_CreateObject();
        cJSON_AddItemToObject(d, "cuda_index", p->cuda_index >= 0 ? cJSON_CreateNumber(p->cuda_index)
                                                                  : cJSON_CreateNull());
        cJSON_AddNumberToObject(d, "nvml_index", p->nvml_index);
        cJSON_AddStringToObject(d, "name", p->name);
        cJSON_AddStringToObject(d, "bus_id", p->bus_id);
        cJSON_AddItemToObject(d, "numa", numa_json(p->numa));
        cJSON_AddStringToObject(d, "cpus", p->cpus);
        cJSON_AddItemToArray(gpus, d);
        cJSON *lrow = cJSON_CreateArray(), *prow = cJSON_CreateArray();
        for (int j = 0; j < g; j++) {
            char name[8];
            signed char v = t->p2p[i * g + j];
            cJSON_AddItemToArray(lrow, cJSON_CreateString(herd_link_name(t->links[i * g + j], name)));
            cJSON_AddItemToArray(prow, v < 0 ? cJSON_CreateNull() : cJSON_CreateBool(v > 0));
        }
        cJSON_AddItemToArray(links, lrow);
        cJSON_AddItemToArray(p2p, prow);
    }
    cJSON *rs = cJSON_AddArrayToObject(o, "ranks");
    for (int r = 0; r < n_ranks; r++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "rank", ranks[r].rank);
        cJSON_AddStringToObject(d, "host", ranks[r].host);
        cJSON_AddNumberToObject(d, "local_rank", ranks[r].local_rank);
        cJSON_AddStringToObject(d, "cpus", ranks[r].cpus);
        cJSON_AddItemToObject(d, "gpu", ranks[r].gpu >= 0 ? cJSON_CreateNumber(ranks[r].gpu)
                                                          : cJSON_CreateNull());
        cJSON_AddStringToObject(d, "gpu_bus_id", ranks[r].gpu_bus_id);
        cJSON_AddItemToArray(rs, d);
    }
    cli_print_json(o);
}

int cmd_topo(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    bool json = false;
    int opt;
    optind = 1;
    while ((opt = cli_getopt(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'j': json = true; break;
        case 'h': fputs(topo_help, stdout); return CLI_OK;
        default: return cli_usage_error("topo", "unknown option");
        }
    }
    if (optind < argc)
        return cli_usage_error("topo", "unexpected argument '%s'", argv[optind]);
    herd_dist *dist = NULL;
    herd_topo *t = NULL;
    herd_rank_place *ranks = NULL;
    herd_status st;
    int rc = CLI_FAIL;
    if ((st = herd_dist_init(NULL, &dist)) != HERD_OK)
        return cli_fail(st, "cannot join the distributed job");
    if ((st = herd_topo_discover(&t)) != HERD_OK)
        cli_fail(st, "cannot read this machine's topology");
    else if ((st = herd_topo_rank_places(dist, t, &ranks)) != HERD_OK)
        cli_fail(st, "cannot gather where the ranks run");
    else {
        if (herd_dist_rank(dist) == 0) {
            if (json)
                print_json(t, ranks, herd_dist_size(dist));
            else
                print_text(t, ranks, herd_dist_size(dist));
            fflush(stdout);
        }
        rc = CLI_OK;
    }
    if (rc != CLI_OK && herd_dist_size(dist) > 1)
        herd_dist_abort(dist, rc, "herd topo failed on this rank; stopping the job");
    free(ranks);
    herd_topo_free(t);
    herd_dist_free(dist);
    return rc;
}
