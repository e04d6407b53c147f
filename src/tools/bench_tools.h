/*
 * The communication benchmarks behind `herd bench allreduce` and `herd bench p2p`.
 * They run on herd's own communicators (dist/comm.h), so they measure what
 * training gets. Nothing here prints: the CLI formats the results.
 */
#ifndef HERD_TOOLS_BENCH_TOOLS_H
#define HERD_TOOLS_BENCH_TOOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dist/comm.h"

/* ------------------------------------------------ communicator and buffers */

/* "auto", "local", "mpi" or "nccl". NCCL wraps an MPI communicator (*host) and binds
 * local rank i to GPU i; *host is NULL otherwise. Close both with bench_comm_close. */
herd_status bench_comm_open(const char *backend, herd_comm **comm, herd_comm **host);
void bench_comm_close(herd_comm *comm, herd_comm *host);

/* A benchmark buffer: host memory, plus a GPU copy when the communicator reduces GPU
 * memory. Results are filled and checked on the host side. */
typedef struct bench_mem {
    void *host, *dev;
    const struct herd_backend *gpu; /* dev's backend (cuda); NULL for host memory only */
} bench_mem;

herd_status bench_mem_alloc(bench_mem *m, size_t bytes, bool device);
void bench_mem_free(bench_mem *m);
herd_status bench_mem_upload(bench_mem *m, size_t bytes);   /* host -> GPU (no-op without one) */
herd_status bench_mem_download(bench_mem *m, size_t bytes); /* GPU -> host */
static inline void *bench_mem_target(const bench_mem *m) { return m->dev ? m->dev : m->host; }

/* ------------------------------------------------------------ allreduce */

typedef struct bench_allreduce_config {
    uint64_t min_bytes, max_bytes; /* the sweep; the per-tensor size with fused_tensors */
    int factor;                    /* next size = size * factor */
    int iters, warmup;
    herd_wire_type type;  /* element type of the buffers */
    bool compare_reference; /* also time MPI_Allreduce directly on the same buffers */
    int fused_tensors;      /* > 0: compare K separate reductions with one fused one */
    bool corrupt;           /* test hook: one rank flips one reduced element */
} bench_allreduce_config;

typedef struct bench_allreduce_row {
    uint64_t bytes, count;
    double time_us, algbw_gbps, busbw_gbps; /* time: the slowest rank's mean per reduction */
    int64_t wrong;                          /* elements not equal to the exact sum, all ranks */
    double ref_time_us, ref_busbw_gbps;     /* MPI_Allreduce; negative when not measured */
} bench_allreduce_row;

typedef struct bench_allreduce_result {
    const char *backend; /* the communicator's name */
    int ranks, hosts;
    bench_allreduce_row *rows;
    int n_rows;
    double avg_busbw_gbps, ref_avg_busbw_gbps; /* mean over the rows (ref: -1 if not measured) */
    int64_t wrong;                             /* over every row, every rank */
    /* fused_tensors > 0: one reduction per tensor against one of the packed tensors */
    double unfused_us, fused_us;
} bench_allreduce_result;

/* Collective: every rank calls it with the same config and gets the same result. */
herd_status bench_allreduce(herd_comm *c, const bench_allreduce_config *cfg,
                            bench_allreduce_result *out);
void bench_allreduce_result_free(bench_allreduce_result *r);
/* The JSON that `herd predict --from-bench` reads (see README). */
herd_status bench_allreduce_write_json(const bench_allreduce_config *cfg,
                                       const bench_allreduce_result *r, const char *path);
const char *bench_type_name(herd_wire_type t); /* "float", "half", "bfloat16" */
bool bench_parse_type(const char *name, herd_wire_type *out);
/* Elements of the type in `bytes`: whole elements, at least one. */
uint64_t bench_allreduce_count(herd_wire_type type, uint64_t bytes);
/* Busbw over algbw for n ranks: 2(n-1)/n, as nccl-tests defines it for allreduce. */
double bench_allreduce_bus_factor(int ranks);

/* ------------------------------------------------------------------ p2p */

typedef struct bench_p2p_config {
    size_t bw_bytes; /* message size for bandwidth */
    int bw_reps;     /* messages per bandwidth measurement */
    size_t lat_bytes;
    int lat_reps;    /* round trips per latency measurement */
} bench_p2p_config;

/* Row-major n x n matrices: [i * n + j] is from i to j; NaN where not measured. */
typedef struct bench_p2p_matrices {
    int n;
    double *uni_gbps, *bi_gbps, *lat_us;
} bench_p2p_matrices;

/* Every pair of ranks in turn through the communicator's sendrecv; collective,
 * every rank gets the matrices. */
herd_status bench_p2p_ranks(herd_comm *c, const bench_p2p_config *cfg, bench_p2p_matrices *out);
/* The GPUs this process sees: *count 0 when none, with the reason in why;
 * HERD_ERR_UNSUPPORTED when herd was built without CUDA. */
herd_status bench_p2p_gpu_count(int *count, char *why, size_t cap);
/* cudaMemcpyPeer between every pair of visible GPUs, with peer access enabled
 * where the hardware allows it or disabled (staged through the host). */
herd_status bench_p2p_gpus(const bench_p2p_config *cfg, bool peer_access, bench_p2p_matrices *out);
/* Whether GPU i can access GPU j directly (for the printed access matrix). */
herd_status bench_p2p_gpu_can_access(int i, int j, bool *yes);
void bench_p2p_matrices_free(bench_p2p_matrices *m);
herd_status bench_p2p_matrices_alloc(int n, bench_p2p_matrices *m);

#endif
