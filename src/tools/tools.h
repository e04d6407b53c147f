/*
 * The cluster tools behind `herd topo`, `herd doctor` and `herd predict`. The
 * library discovers, checks, models and computes; the CLI (cli/topo.c, cli/doctor.c,
 * cli/predict.c) parses options and prints. Internal: not part of the public API.
 */
#ifndef HERD_TOOLS_TOOLS_H
#define HERD_TOOLS_TOOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/herd.h"
#include "dist/bucket_plan.h"

/* ------------------------------------------------------------- topo: links */

/* The link between two GPUs, in the legend of `nvidia-smi topo -m`. */
typedef enum herd_link_kind {
    HERD_LINK_SELF,    /* X: the same GPU */
    HERD_LINK_NVLINK,  /* NV#: a bonded set of # NVLinks */
    HERD_LINK_PIX,     /* at most a single PCIe bridge (one switch) */
    HERD_LINK_PXB,     /* several PCIe bridges, no host bridge */
    HERD_LINK_PHB,     /* through a PCIe host bridge (the CPU) */
    HERD_LINK_NODE,    /* between host bridges within one NUMA node */
    HERD_LINK_SYS,     /* across the interconnect between NUMA nodes (QPI/UPI, xGMI) */
    HERD_LINK_UNKNOWN, /* neither hwloc nor NVML could say */
} herd_link_kind;

typedef struct herd_link {
    herd_link_kind kind;
    int nvlinks; /* for HERD_LINK_NVLINK */
} herd_link;

#define HERD_PCI_MAX_DEPTH 16

/* Where a PCI device sits: its NUMA node, its host bridge, and the PCI bridges from
 * the host bridge down to the device (outermost first). Ids only need to be unique
 * per object (topo.c uses hwloc's gp_index). */
typedef struct herd_pci_locus {
    int numa; /* -1 when unknown */
    uint64_t host_bridge;
    int n_bridges;
    uint64_t bridges[HERD_PCI_MAX_DEPTH];
    uint64_t device;
} herd_pci_locus;

/* The link between two devices from their places in the PCI tree and the number of
 * NVLinks joining them (0 for none). Pure: unit-tested on fabricated trees. */
herd_link herd_link_classify(const herd_pci_locus *a, const herd_pci_locus *b, int nvlinks);
/* The same from NVML's nvmlGpuTopologyLevel_t (0 internal, 10 single, 20 multiple,
 * 30 host bridge, 40 node, 50 system), for GPUs hwloc does not see. */
herd_link herd_link_from_nvml_level(int level, int nvlinks);
/* "X", "NV4", "PIX", ... ("?" for unknown). */
const char *herd_link_name(herd_link l, char buf[8]);

typedef struct herd_pci_addr {
    unsigned domain, bus, dev, func;
} herd_pci_addr;

/* Parses "00000000:3B:00.0" (NVML), "0000:3b:00.0" (CUDA, sysfs) or "3b:00.0". */
bool herd_pci_parse(const char *s, herd_pci_addr *out);
/* The sysfs spelling, "0000:3b:00.0". */
void herd_pci_format(herd_pci_addr a, char buf[16]);

/* ------------------------------------------------------- topo: the machine */

typedef struct herd_topo_numa {
    int os_index;
    char cpus[64]; /* "0-15,32-47" */
    uint64_t bytes;
} herd_topo_numa;

typedef struct herd_topo_pcidev {
    char bus_id[16];
    char kind[24]; /* "gpu", "network", "storage", "bridge", "other" */
    char name[96];
    int numa;
} herd_topo_pcidev;

typedef struct herd_topo_nic {
    char name[32];  /* eth0, ib0, mlx5_0 */
    char kind[24];  /* "network" or "openfabrics" (an RDMA device) */
    char bus_id[16];
    int numa;
} herd_topo_nic;

typedef struct herd_topo_gpu {
    int cuda_index; /* -1 when herd is built without CUDA */
    int nvml_index;
    char name[96];
    char bus_id[16];
    int numa;       /* -1 when unknown */
    char cpus[64];  /* the cores nearest to it */
    herd_pci_locus locus;
} herd_topo_gpu;

typedef struct herd_topo {
    char host[64];
    char cpu_model[96];
    int packages, numa_count, cores, pus;
    herd_topo_numa *numa;
    herd_topo_pcidev *pci;
    int n_pci;
    herd_topo_nic *nics;
    int n_nics;
    herd_topo_gpu *gpus;
    int n_gpus;
    herd_link *links;  /* n_gpus x n_gpus */
    signed char *p2p;  /* n_gpus x n_gpus: 1 peer access, 0 none, -1 unknown */
    char link_source[48];
    char driver[32];   /* NVIDIA driver version, "" without one */
    char gpu_note[256]; /* why no GPUs are listed, or what could not be read */
    void *hw;          /* the hwloc topology */
} herd_topo;

herd_status herd_topo_discover(herd_topo **out);
void herd_topo_free(herd_topo *t);

/* Where one rank of a job runs. */
typedef struct herd_rank_place {
    int rank, local_rank;
    char host[64];
    char cpus[64]; /* the cores it is bound to ("0-1"), all of them when unbound */
    int gpu;       /* its GPU (the local rank's), -1 when none */
    char gpu_bus_id[16];
} herd_rank_place;

/* Gathers every rank's place (a collective: every rank calls it). out: one entry per
 * rank of the group. */
herd_status herd_topo_rank_places(herd_dist *d, const herd_topo *t, herd_rank_place **out);

/* -------------------------------------------------------------- NVML (dlopen) */

typedef struct herd_nvml herd_nvml;
/* Loads libnvidia-ml.so.1 and initialises it. NULL with why[] set when there is no
 * driver: the binary runs the same on machines without one. */
herd_nvml *herd_nvml_open(char *why, size_t cap);
void herd_nvml_close(herd_nvml *n);
/* The CUDA version the driver supports (12020 for 12.2), 0 when unknown. */
int herd_nvml_cuda_driver_version(herd_nvml *n);
/* Fills t->gpus, t->links' NVLink counts, t->p2p and t->driver from NVML. */
herd_status herd_nvml_fill_gpus(herd_nvml *n, herd_topo *t);

/* ------------------------------------------------------- shared-memory probe */

/* Cross-memory attach against memcpy, 4 MiB read in 512 KiB pieces (shm_probe.c):
 * figures to report, not a rule for choosing Open MPI's single copy. */
typedef struct herd_cma_probe {
    double cma_gbps, memcpy_gbps;
} herd_cma_probe;

/* Forks a peer and reads its memory with process_vm_readv; 0, or -errno when CMA
 * cannot be used here (EPERM: ptrace restrictions). Takes a few milliseconds. */
int herd_probe_cma(herd_cma_probe *out);

/* ------------------------------------------------------------------- doctor */

typedef enum herd_check_status {
    HERD_CHECK_PASS,
    HERD_CHECK_WARN,
    HERD_CHECK_FAIL,
    HERD_CHECK_SKIP, /* could not check, or does not apply: detail says why */
} herd_check_status;

typedef struct herd_check {
    const char *name;
    herd_check_status status;
    char detail[512];
    char fix[384];
} herd_check;

/* What the checks look at. Every file path is read under root; the environment is
 * envp; the rest can be replaced by tests. herd_doctor_env_default fills it for
 * this machine. */
typedef struct herd_doctor_env {
    const char *root;  /* "/" */
    char **envp;
    /* Total bytes of the file system at path; -errno on failure. */
    int (*fs_bytes)(const char *path, uint64_t *bytes);
    /* Soft limit of an RLIMIT_ resource; UINT64_MAX means unlimited. */
    int (*rlimit)(int resource, uint64_t *soft);
    int cuda_driver_version;  /* from NVML: 12020 for 12.2; 0 unknown / no driver */
    int cuda_runtime_version; /* from the build: 0 when built without CUDA */
    const char *mpi_library;  /* MPI library version from the build, NULL without MPI */
    int ranks_per_host;       /* 0: take it from the launcher's environment */
    /* herd_probe_cma, or a test's stand-in; NULL skips the measurement (--root). */
    int (*probe_cma)(herd_cma_probe *out);
} herd_doctor_env;

void herd_doctor_env_default(herd_doctor_env *env, char **envp);
/* This rank's place on its host from the launcher's variables in env->envp (Open MPI,
 * MPICH's Hydra, Slurm): *local_rank 0 when not launched, *local_size 0 when unknown. */
void herd_doctor_local_ranks(const herd_doctor_env *env, int *local_rank, int *local_size);

#define HERD_DOCTOR_MAX_CHECKS 16
/* Runs every check; returns how many it wrote into out (at most HERD_DOCTOR_MAX_CHECKS). */
int herd_doctor_run(const herd_doctor_env *env, herd_check *out);
const char *herd_check_status_name(herd_check_status s); /* "pass", "warn", "fail", "skip" */

/* ------------------------------------------------------------------ predict */

/* Per-message latency alpha (seconds) and per-byte time beta (seconds/byte) of one link. */
typedef struct herd_alpha_beta {
    double alpha_s, beta_s_per_byte;
} herd_alpha_beta;

double herd_ring_allreduce_s(const herd_alpha_beta *ab, int n, double bytes);
double herd_tree_allreduce_s(const herd_alpha_beta *ab, int n, double bytes);

/* A link as the allreduce sees it: either a given alpha-beta (points == 0) or the table
 * of `herd bench allreduce -J` (points sizes, increasing), read between measured sizes
 * as straight lines: piecewise alpha-beta whose breaks (eager to rendezvous, ...) are
 * wherever the measurement bends. */
#define HERD_COMM_LINK_MAX_POINTS 256
typedef struct herd_comm_link {
    herd_alpha_beta given;
    int ranks;  /* of the measurement (0 when given) */
    int points;
    double bytes[HERD_COMM_LINK_MAX_POINTS], time_s[HERD_COMM_LINK_MAX_POINTS];
    /* Leave-one-out: each inner size against the line between its neighbours; the worst
     * relative error says how far the table can be off between its sizes. */
    double max_rel_residual;
    double worst_bytes; /* where */
} herd_comm_link;

herd_status herd_comm_link_from_bench_file(const char *path, herd_comm_link *out);
herd_status herd_comm_link_from_bench_json(const char *json, herd_comm_link *out);
herd_comm_link herd_comm_link_given(double alpha_s, double beta_s_per_byte);
/* The alpha-beta of the segment holding `bytes`, per ring step for the measured rank
 * count. Below the table: the smallest size's time (latency); above it: the last
 * segment's line (or the largest size's bandwidth if that line falls), and
 * *extrapolated (NULL: not wanted) is set. */
herd_alpha_beta herd_comm_link_segment(const herd_comm_link *l, double bytes, bool *extrapolated);
/* One allreduce of `bytes` among n ranks: the table's time itself at the measured rank
 * count, else the faster of ring and tree with the segment's alpha-beta. */
double herd_comm_link_allreduce_s(const herd_comm_link *l, int n, double bytes);

/* How the training metrics (7 doubles: loss, correct, samples, stop vote, failure
 * agreement) travel each step. */
typedef enum herd_metrics_exchange {
    HERD_METRICS_LAST_BUCKET, /* appended to the last gradient bucket: no extra message */
    HERD_METRICS_STEP_LATE,   /* their own reduction, queued at the step's end, done during the next */
    HERD_METRICS_BLOCKING,    /* a blocking reduction after the update (herd before issue 12) */
} herd_metrics_exchange;
#define HERD_METRICS_BYTES 56.0

/* One worker's step, split as the n-worker step is simulated. */
typedef struct herd_step_model {
    int n_layers;
    const double *backward_s;    /* per layer, execution order */
    const int *sync_bn_channels; /* per layer: channels of a batch norm exchanging its
                                    statistics (--sync-bn), else 0; NULL: none */
    const herd_bucket_span *buckets; /* herd_bucket_plan's, bucket 0 = the last layers */
    int n_buckets;
    double wire_bytes_per_float;     /* 4, or 2 with --compress */
    double forward_s, other_s;       /* other: data wait, optimizer, the rest of the step */
    herd_metrics_exchange metrics;
} herd_step_model;

typedef struct herd_step_prediction {
    double compute_s;  /* forward + backward + other */
    double comm_s;     /* every collective of the step, one after another */
    double serial_s;   /* compute + comm: nothing overlaps */
    double step_s;     /* simulated: buckets reduced on the communication thread as backward makes them */
    double exposed_s;  /* step - compute */
    int collectives;
} herd_step_prediction;

/* Simulates one step of n workers: each bucket's reduction starts when backward has
 * produced it and the communication thread is free (reductions run one after another),
 * blocking exchanges stop compute until they are done. */
herd_status herd_predict_step(const herd_comm_link *link, int n, const herd_step_model *m,
                              herd_step_prediction *out);

/* A pipeline step (--pipeline-stages): the schedule of dist/pp_schedule.h simulated
 * stage by stage, each micro-batch's activations and gradients taking transfer_s
 * between stages s and s+1, then each stage group's gradient allreduce (not overlapped:
 * an upper bound) and the rest of the step. */
#define HERD_PREDICT_MAX_STAGES 64
typedef struct herd_pipeline_model {
    int stages, micro_batches;
    herd_pp_schedule_kind schedule;
    double forward_s[HERD_PREDICT_MAX_STAGES];  /* one micro-batch through stage s */
    double backward_s[HERD_PREDICT_MAX_STAGES];
    double transfer_s[HERD_PREDICT_MAX_STAGES]; /* from stage s to s+1, each way */
    double allreduce_s[HERD_PREDICT_MAX_STAGES]; /* stage s's gradients among its replicas */
    /* A language model's token table on stage tied_stage and its copy on the last: once
     * both have reduced their gradients they exchange them, tied_s each way at once
     * (0: no copy). */
    int tied_stage;
    double tied_s;
    double other_s;
} herd_pipeline_model;

typedef struct herd_pipeline_prediction {
    double step_s;
    double bubble;       /* 1 - busy / (the step without allreduce and other), stages' mean */
    double ideal_bubble; /* (P-1)/(M+P-1) */
    double busy_s[HERD_PREDICT_MAX_STAGES];
} herd_pipeline_prediction;

herd_status herd_predict_pipeline(const herd_pipeline_model *m, herd_pipeline_prediction *out);

typedef struct herd_predict_row {
    int workers;
    double ring_s, tree_s; /* all gradients as one message */
    double comm_s;         /* the step's collectives */
    double step_s, efficiency;                 /* communication after backward */
    double step_overlap_s, efficiency_overlap; /* buckets overlapping backward */
} herd_predict_row;

/* rows[i] for i + 1 workers, i < workers; grad_bytes for the ring/tree columns. */
herd_status herd_predict_scaling(const herd_comm_link *link, const herd_step_model *m,
                                 double grad_bytes, int workers, herd_predict_row *rows);
/* The largest worker count whose efficiency stays >= threshold (0 when none). */
int herd_predict_max_workers(const herd_predict_row *rows, int workers, double threshold,
                             bool overlap);

/* What herd predict models of one worker's step (predict_step.c). */
typedef struct herd_predict_opts {
    double bucket_mb;          /* as herd train --bucket-mb */
    int grad_bytes_per_param;  /* 4, or 2 with --compress */
    bool sync_bn;
    herd_metrics_exchange metrics;
    double step_s;             /* given; <= 0: measured's */
    double backward_fraction;  /* of the step; < 0: measured's, or 2/3 of a given step */
} herd_predict_opts;

/* A model's step as herd predict simulates it: the step's backward split over the
 * layers by their backward FLOPs (known for any model without another run, and what
 * the heavy layers' time follows), its gradient buckets as herd train plans them. */
typedef struct herd_predict_plan {
    herd_step_model sm;        /* points into the arrays below */
    double *backward_s;        /* per layer */
    int *bn_channels;          /* per layer */
    herd_layer_buckets buckets;
    char (*layer_names)[64];
    double grad_bytes, step_s, backward_total_s;
} herd_predict_plan;

/* measured: one worker's step from herd_bench_train (NULL when opts->step_s is given). */
herd_status herd_predict_plan_build(const herd_model *m, const herd_predict_opts *opts,
                                    const herd_bench_result *measured, herd_predict_plan *out);
void herd_predict_plan_free(herd_predict_plan *p);

/* One pipeline of `stages` stages (--pipeline-stages) of plan's model: the step's
 * forward and backward split over the layers by FLOPs, the layers over the stages as
 * herd train splits them, each stage's share divided among the micro-batches, each
 * boundary's activations one message each way over link. */
typedef struct herd_predict_pipeline_plan {
    herd_pipeline_model pm;
    herd_pipeline_prediction pr;
    int bounds[HERD_PREDICT_MAX_STAGES + 1]; /* stage s: layers bounds[s] .. bounds[s+1]-1 */
    double micro_batch;                      /* samples per micro-batch */
} herd_predict_pipeline_plan;

/* One replica split over `parts` tensor-parallel ranks (--tensor-parallel): each layer's
 * share of the step (forward and backward by FLOPs, as the plan splits them) scaled by
 * the part's FLOPs over the whole's, plus the tensor group's sums, each blocking: an
 * all-gather of every part's values (parts - 1 messages of the values' bytes over
 * link, one after another), and the rest of the step as it is. */
typedef struct herd_predict_tensor_plan {
    int parts;
    double compute_s;      /* forward and backward of one part */
    double exchange_s;     /* the tensor group's sums */
    double step_s;         /* compute + exchange + the rest */
    int sums;              /* per step */
    double sum_bytes;      /* per step, what one rank sends */
    double part_params;    /* parameters one rank holds */
} herd_predict_tensor_plan;

herd_status herd_predict_plan_tensor(const herd_model *m, const herd_comm_link *link,
                                     const herd_predict_plan *p, int parts, int batch,
                                     herd_predict_tensor_plan *out);

herd_status herd_predict_plan_pipeline(const herd_model *m, const herd_comm_link *link,
                                       const herd_predict_plan *p, int stages, int micro_batches,
                                       int batch, herd_pp_schedule_kind schedule,
                                       herd_predict_pipeline_plan *out);

#endif
