/*
 * The communication benchmarks behind `herd bench allreduce` and `herd bench p2p`:
 * everything the CLI sees of them. They run on herd's own communicators, so they
 * measure what training gets; a bench_session holds that communicator, opaque here,
 * and offers only what the CLI needs (who this rank is, the host names, abort).
 * Nothing here prints: the CLI formats the results. The rest of the machinery is in
 * tools/bench_internal.h, for src/tools and the tests only.
 */
#ifndef HERD_TOOLS_BENCH_TOOLS_H
#define HERD_TOOLS_BENCH_TOOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/herd.h"

/* ------------------------------------------------------------------ session */

typedef struct bench_session bench_session;

/* backend: "auto", "local" or "mpi"; with gpu_reductions also "nccl", which reduces
 * GPU memory over an MPI communicator, local rank i on GPU i. Close with
 * bench_session_close. */
herd_status bench_session_open(const char *backend, bool gpu_reductions, bench_session **out);
void bench_session_close(bench_session *s);
int bench_session_rank(const bench_session *s);
int bench_session_size(const bench_session *s);
const char *bench_session_host(const bench_session *s);    /* this rank's host name */
const char *bench_session_backend(const bench_session *s); /* "local", "mpi", "nccl" */
/* Ends every process of the job with this exit code (after printing msg): for a rank
 * that fails while the others wait in a collective. */
void bench_session_abort(bench_session *s, int code, const char *msg);

typedef struct bench_host {
    char name[64];
} bench_host;

/* Collective: every rank's host name, in rank order (size entries; free() them). */
herd_status bench_session_hosts(bench_session *s, bench_host **out);

/* ------------------------------------------------------------ allreduce */

typedef enum bench_type { BENCH_FLOAT, BENCH_HALF, BENCH_BFLOAT16 } bench_type;

const char *bench_type_name(bench_type t); /* "float", "half", "bfloat16" */
bool bench_parse_type(const char *name, bench_type *out);
size_t bench_type_size(bench_type t); /* bytes per element */

typedef struct bench_allreduce_config {
    uint64_t min_bytes, max_bytes; /* the sweep; the per-tensor size with fused_tensors */
    int factor;                    /* next size = size * factor */
    int iters, warmup;
    bench_type type;        /* element type of the buffers */
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
herd_status bench_allreduce(bench_session *s, const bench_allreduce_config *cfg,
                            bench_allreduce_result *out);
void bench_allreduce_result_free(bench_allreduce_result *r);
/* The JSON that `herd predict --from-bench` reads (see README). */
herd_status bench_allreduce_write_json(const bench_allreduce_config *cfg,
                                       const bench_allreduce_result *r, const char *path);
/* Elements of the type in `bytes`: whole elements, at least one. */
uint64_t bench_allreduce_count(bench_type type, uint64_t bytes);

/* ------------------------------------------------------------- pipeline */

/* Synthetic pipeline stages: one rank per stage runs the real schedule (GPipe or
 * 1F1B) over M micro-batches whose forward costs stage_ms and backward
 * backward_ratio x stage_ms (slept, or spun), exchanging `bytes` of activations and
 * gradients with its neighbours, so the bubble is measured without a model's noise. */
typedef struct bench_pipeline_config {
    int micro_batches;
    double stage_ms, backward_ratio;
    herd_pp_schedule_kind schedule;
    int steps, warmup;
    size_t bytes;
    bool spin;    /* busy-wait instead of sleeping (a core per rank) */
} bench_pipeline_config;

#define BENCH_PIPELINE_MAX_STAGES 64
typedef struct bench_pipeline_result {
    int stages;
    double step_ms;                 /* mean over the timed steps of the slowest rank's step */
    double ideal_step_ms;           /* (M + P - 1) x (forward + backward) */
    double measured_bubble;         /* 1 - busy / step, the stages' mean */
    double ideal_bubble;            /* (P - 1) / (M + P - 1) */
    double busy_ms[BENCH_PIPELINE_MAX_STAGES];   /* per stage and step: computing */
    double bubble[BENCH_PIPELINE_MAX_STAGES];    /* per stage */
} bench_pipeline_result;

/* Collective over the session's ranks (the stages); every rank gets the result. */
herd_status bench_pipeline(bench_session *s, const bench_pipeline_config *cfg,
                           bench_pipeline_result *out);

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
herd_status bench_p2p_ranks(bench_session *s, const bench_p2p_config *cfg, bench_p2p_matrices *out);
/* The GPUs this process sees: *count 0 when none, with the reason in why;
 * HERD_ERR_UNSUPPORTED when herd was built without CUDA. */
herd_status bench_p2p_gpu_count(int *count, char *why, size_t cap);
/* cudaMemcpyPeer between every pair of visible GPUs, with peer access enabled
 * where the hardware allows it or disabled (staged through the host). */
herd_status bench_p2p_gpus(const bench_p2p_config *cfg, bool peer_access, bench_p2p_matrices *out);
/* Whether GPU i can access GPU j directly (for the printed access matrix). */
herd_status bench_p2p_gpu_can_access(int i, int j, bool *yes);
void bench_p2p_matrices_free(bench_p2p_matrices *m);

#endif
