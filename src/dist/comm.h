/*
 * Communicators: a table of functions, one implementation per engine —
 * single-process (comm_local.c), MPI (comm_mpi.c), NCCL (comm_nccl.c). herd never writes
 * a transport of its own; MPI carries everything between processes and machines.
 *
 * Gradient reductions are asynchronous: allreduce_start hands a slice of the
 * contiguous gradient buffer to the communicator, which reduces it in place (the
 * sum, scaled by `scale`) while the caller computes; wait blocks until every
 * started reduction is complete. The MPI communicator runs them on a dedicated
 * thread so they progress during backward (Open MPI does not progress
 * non-blocking collectives by itself).
 *
 * Every call returns HERD_OK or a status with herd_last_error() set. A collective
 * that does not complete within the stall timeout returns HERD_ERR_TIMEOUT-style
 * errors naming the ranks that have not arrived (see herd_comm_config).
 */
#ifndef HERD_DIST_COMM_H
#define HERD_DIST_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/trace.h"
#include "herd/herd.h"

typedef enum herd_wire_type {
    HERD_WIRE_FP32 = 0, /* gradients travel as they are */
    HERD_WIRE_FP16,     /* cast to IEEE half for the reduction and back (Horovod's compression) */
    HERD_WIRE_BF16,     /* cast to bfloat16 */
} herd_wire_type;

static inline size_t herd_wire_type_size(herd_wire_type t) { return t == HERD_WIRE_FP32 ? 4 : 2; }

typedef struct herd_comm_config {
    double stall_warning_s; /* a collective pending this long prints who has not arrived (60) */
    double timeout_s;       /* ...and this long aborts the whole job, non-zero exit (300) */
} herd_comm_config;

typedef struct herd_comm herd_comm;

/* A point-to-point transfer in flight (p2p_start .. p2p_wait). */
typedef struct herd_p2p {
    unsigned char request[16]; /* the engine's request handle */
    bool active;
    bool send;
    int peer;
    size_t bytes;
} herd_p2p;

typedef struct herd_comm_ops {
    const char *name; /* "local", "mpi" */
    void (*destroy)(herd_comm *c);

    /* Starts an in-place sum of buf[0..n) over all ranks, multiplied by scale (1/size
     * for averaging): an fp32 wire sums, then scales; a 16-bit wire scales each rank's
     * values before the cast and sums the scaled values, so a sum cannot overflow
     * where the mean would not. Returns at once; buf must stay untouched until wait. */
    herd_status (*allreduce_start)(herd_comm *c, float *buf, size_t n, float scale,
                                   herd_wire_type wire, const char *tag);
    /* Blocks until every started reduction has completed. */
    herd_status (*wait_all)(herd_comm *c);
    /* allreduce_f64 without the wait: starts an in-place sum of vals[0..n) (host
     * memory, every communicator) that completes at wait_all, in order with the
     * reductions started around it; vals must stay untouched until then. For small
     * values that may arrive later (the training metrics) instead of costing a round
     * trip where they are produced. */
    herd_status (*allreduce_f64_start)(herd_comm *c, double *vals, int n, const char *tag);
    /* True when the buffers of the reductions above are GPU memory (NCCL). */
    bool device_memory;

    /* The operations below may be NULL: not supported by this communicator. */

    /* Blocks the host until every started reduction's result is in memory. NULL when
     * wait_all already does (host memory); NCCL's wait_all only orders later GPU work. */
    herd_status (*sync)(herd_comm *c);

    /* Like allreduce_start, but buf already holds n elements of `type` (float, IEEE
     * half or bfloat16), summed in that type: no cast, no scale. */
    herd_status (*allreduce_typed_start)(herd_comm *c, void *buf, size_t n, herd_wire_type type,
                                         const char *tag);
    /* herd_dist_allreduce_op_start's min, max or product of buf[0..n) of `type` (not a
     * 16-bit float), element by element, in place; asynchronous like allreduce_start. */
    herd_status (*allreduce_op_start)(herd_comm *c, void *buf, size_t n, herd_dtype type,
                                      herd_reduce_op op, const char *tag);
    /* herd_dist_allreduce_adasum_start's Adasum of buf[0..n) of `type` (float32, float64,
     * float16 or bfloat16), per tensor of counts[0..n_tensors) (NULL: one), in place;
     * asynchronous like allreduce_start, counts untouched until complete. */
    herd_status (*allreduce_adasum_start)(herd_comm *c, void *buf, size_t n, herd_dtype type,
                                          const int64_t *counts, size_t n_tensors, const char *tag);
    /* Point to point, for the link benchmarks: sends send_bytes of sendbuf to rank
     * dest and receives recv_bytes into recvbuf from rank src, both at once; a rank
     * of -1 skips that side. Asynchronous like allreduce_start (complete at wait_all). */
    herd_status (*sendrecv_start)(herd_comm *c, const void *sendbuf, size_t send_bytes, int dest,
                                  void *recvbuf, size_t recv_bytes, int src);
    /* The engine's own blocking allreduce (MPI_Allreduce) called directly, `iters`
     * times back to back in place on buf, bypassing herd's queue: the reference that
     * herd's overhead is measured against. *seconds: the time on this rank. */
    herd_status (*time_reference_allreduce)(herd_comm *c, void *buf, size_t n,
                                            herd_wire_type type, int iters, double *seconds);

    /* ZeRO's two halves of an allreduce, queued like allreduce_start and complete at
     * wait_all. buf[0..n) is split among the ranks in rank order: rank r's part holds
     * counts[r] elements (counts sums to n; caller-owned and untouched until wait_all,
     * like buf). reduce_scatter_start: this rank's part of buf becomes the sum of that
     * part over the ranks, scaled and on its wire as allreduce_start; the rest of buf
     * is left undefined. With release_rest (host memory only) the whole pages of buf
     * outside this rank's part go back to the system once reduced, reading as zero
     * after: ZeRO-2 holds only its part of the gradients. allgather_start: every
     * rank's part of buf, as that rank holds it, lands in every rank's buf (fp32,
     * exact: replicas stay bitwise equal). */
    herd_status (*reduce_scatter_start)(herd_comm *c, float *buf, const int *counts, float scale,
                                        herd_wire_type wire, bool release_rest, const char *tag);
    herd_status (*allgather_start)(herd_comm *c, float *buf, const int *counts, const char *tag);
    /* The queued operations' count so far: the ticket of the last one started.
     * wait_ticket blocks until every operation up to that ticket has completed (the
     * ones started after it may still run), reporting failures as wait_all does. */
    uint64_t (*ticket)(herd_comm *c);
    herd_status (*wait_ticket)(herd_comm *c, uint64_t ticket);

    /* Blocking collectives for set-up and metrics (small). */
    herd_status (*broadcast)(herd_comm *c, void *buf, size_t bytes, int root);
    herd_status (*allreduce_f64)(herd_comm *c, double *vals, int n); /* in-place sum */
    /* Host memory, blocking: vals[0..n) is split among the ranks in rank order as in
     * reduce_scatter_start (counts[r] values for rank r, summing to n); this rank's part
     * becomes that part's sum over the ranks, the rest is left undefined. Half an
     * allreduce's traffic, for sums whose parts each rank finishes alone before an
     * all-gather of something smaller (--deterministic's exact sums: doubles in, fp32
     * means out). */
    herd_status (*reduce_scatter_f64)(herd_comm *c, double *vals, const int *counts);
    /* Host memory, blocking: allgather_start's in-place all-gather of rank r's counts[r]
     * floats (the finished parts above). */
    herd_status (*allgatherv_f32)(herd_comm *c, float *vals, const int *counts);
    herd_status (*allgather)(herd_comm *c, const void *mine, void *all, size_t bytes);
    /* Host memory: rank r's bytes_of[r] bytes (mine on this rank) land in every rank's
     * all, in rank order (bytes_of the same on every rank, summing to at most INT_MAX).
     * wait: blocking; else queued like allreduce_start and done at wait_ticket, with
     * bytes_of, mine and all untouched until then. */
    herd_status (*allgatherv)(herd_comm *c, const void *mine, void *all, const int *bytes_of,
                              bool wait, const char *tag);
    herd_status (*barrier)(herd_comm *c);
    /* Variable-size gather to root: rank r's `bytes` land in root's `all` at offset
     * bytes_of[0] + ... + bytes_of[r-1] (bytes_of and all are read on root only). */
    herd_status (*gather)(herd_comm *c, const void *mine, size_t bytes, void *all,
                          const size_t *bytes_of, int root);
    /* Clock comparison (the timeline's offsets): rank 0 runs `rounds` ping-pongs with
     * every other rank in turn. On rank 0, samples[(r * rounds + i) * 4 + k] is round i
     * with rank r: rank 0's send time, r's receive and reply times, rank 0's receive
     * time (herd_now() of each side); rank 0's own rows are zero. Other ranks' samples
     * are left untouched. */
    herd_status (*clock_samples)(herd_comm *c, int rounds, double *samples);

    /* Pipelines. split: the ranks of c with the same color form a new communicator,
     * ordered by key (MPI_Comm_split); collective over c, blocking, call with nothing
     * pending. `name` ("stage group 1") prefixes its stall reports. The new
     * communicator has its own queue and thread and lives until destroyed (before c).
     * p2p_start: a non-blocking send or receive of `bytes` between this rank and rank
     * `peer` of c with `tag`, outside the queue of collectives, called from the
     * training thread; transfers complete in any order. p2p_wait blocks until it is
     * done; past the stall timeout it ends the job naming `what` ("stage 1: the
     * activations of micro-batch 3 from stage 0") and the peer's rank and host. A
     * receive may get up to `bytes`: p2p_wait sets req->bytes to what arrived. */
    herd_status (*split)(herd_comm *c, int color, int key, const char *name, herd_comm **out);
    herd_status (*p2p_start)(herd_comm *c, herd_p2p *req, bool send, void *buf, size_t bytes,
                             int peer, int tag);
    herd_status (*p2p_wait)(herd_comm *c, herd_p2p *req, const char *what);
    /* Moves posted transfers on without waiting (MPI progresses a large message only
     * inside MPI calls, on both sides): cheap, for between layers. */
    void (*p2p_progress)(herd_comm *c);

    /* Records what this rank is doing, for the stall inspector's report
     * ("epoch 3 step 120: backward"). */
    void (*set_activity)(herd_comm *c, const char *what);
    /* Ends every process of the job with this exit code (after printing msg). */
    void (*abort)(herd_comm *c, int code, const char *msg);
} herd_comm_ops;

struct herd_comm {
    const herd_comm_ops *ops;
    int rank, size;             /* in the job */
    int local_rank, local_size; /* on this host */
    char host[64];
    herd_comm_config cfg;
    void *impl;
    /* Set while a --timeline trace is recorded: the communicator adds each gradient
     * reduction to it (set and cleared by the training thread with nothing pending). */
    const herd_trace_sink *trace;
    /* The job's communicator as the public API hands it out (herd_dist) may carry a
     * device communicator over itself, made by the first collective on device memory
     * (dist_api.c) and freed with it by herd_dist_free. */
    struct herd_dist_device *device;
};

/* Single process: every collective is the identity. */
herd_status herd_comm_local_create(herd_comm **out);
/* MPI (MPI_COMM_WORLD). HERD_ERR_UNSUPPORTED when herd was built without MPI. */
herd_status herd_comm_mpi_create(const herd_comm_config *cfg, herd_comm **out);
/* By name: "auto" (or NULL: herd_comm_create_default), "local", "mpi". "nccl" gives
 * HERD_ERR_UNSUPPORTED here: it reduces GPU memory over an MPI communicator, so it is
 * made with herd_comm_nccl_create / herd_comm_device_create below. */
herd_status herd_comm_create_backend(const char *name, const herd_comm_config *cfg, herd_comm **out);
/* True when this process was started by an MPI launcher (mpirun, srun). */
bool herd_comm_launched_by_mpi(void);
/* MPI when launched by an MPI launcher and built with MPI, otherwise local. */
herd_status herd_comm_create_default(const herd_comm_config *cfg, herd_comm **out);
void herd_comm_destroy(herd_comm *c);
/* *v becomes its largest value over the ranks (a collective's time is its slowest rank's). */
herd_status herd_comm_max_f64(herd_comm *c, double *v);

/* Gradients in device memory (comm_device.c, comm_staged.c, comm_nccl.c). Each wraps
 * `host` (not owned; it must outlive the wrapper): the gradient operations
 * (allreduce_start, reduce_scatter_start, allgather_start, ticket, wait_ticket) take
 * buffers of backend `be`, and so do p2p_start/p2p_wait, whose transfers go through
 * host buffers (copied out at the start of a send, in at the end of a receive); split
 * gives a wrapper of the same kind over a split of host. Every other call goes to
 * `host` with host memory as before.
 *   nccl:   NCCL on the ranks of host (bootstrapped through it), one GPU per rank;
 *           reductions run on a communication stream that waits for the gradients'
 *           producers, and wait_all / wait_ticket order the compute stream after them
 *           (the host does not block). HERD_ERR_UNSUPPORTED when built without NCCL.
 *   staged: copies each buffer to host memory, reduces it with `host`, and copies it
 *           back in wait_all / wait_ticket (any backend; MPI through host memory for a
 *           GPU). Over a host of one rank nothing is copied: a scale applies on the
 *           device.
 *   device: nccl for the cuda backend when built with NCCL and host has several
 *           ranks, else staged.
 * release_rest (ZeRO-2's page release) is for host memory only: a wrapper reduces into
 * the device buffer, which stays whole. */
struct herd_backend;
herd_status herd_comm_nccl_create(herd_comm *host, herd_comm **out);
herd_status herd_comm_staged_create(herd_comm *host, const struct herd_backend *be,
                                    herd_comm **out);
herd_status herd_comm_device_create(herd_comm *host, const struct herd_backend *be,
                                    herd_comm **out);
/* One process's communicator for buffers of be: local for host memory, else a device
 * wrapper over a local communicator that it owns (pipeline stages of one replica). */
herd_status herd_comm_device_local_create(const struct herd_backend *be, herd_comm **out);
/* counts' sum over c's ranks (*n) and where c's rank's part begins in it (*mine_at),
 * for reduce_scatter_start and allgather_start; an error naming op when counts is
 * NULL or holds a negative count. */
herd_status herd_comm_parts(const herd_comm *c, const int *counts, const char *op, size_t *n,
                            size_t *mine_at);
/* Broadcast of a buffer in be's memory (through the host for a device backend). */
herd_status herd_comm_broadcast_buffer(herd_comm *c, const struct herd_backend *be, void *buf,
                                       size_t bytes, int root);
/* The wrappers' common part: a comm with host's identity and own's operations, where
 * the blocking collectives, allreduce_f64_start, p2p_progress, set_activity and abort
 * forward to host when own leaves them NULL (own's wait_all must then also complete
 * host's), and p2p_start/p2p_wait stage be's buffers through host memory around host's
 * (be NULL or host memory: forwarded as they are). own must define allreduce_start and
 * wait_all (the device-memory reductions are what a wrapper is for). own->destroy frees
 * impl and then the comm itself (one free(c)). NULL when out of memory. */
herd_comm *herd_comm_wrap(herd_comm *host, const struct herd_backend *be,
                          const herd_comm_ops *own, void *impl);
/* From now on destroying wrapper c destroys its host after it (a split's, or a local
 * communicator made for it). */
void herd_comm_wrapper_own_host(herd_comm *c);
/* A wrapper's split: host's split, wrapped by `make` into a wrapper of c's kind that
 * owns it. */
typedef herd_status (*herd_comm_wrap_fn)(herd_comm *host, const struct herd_backend *be,
                                         herd_comm **out);
herd_status herd_comm_wrapper_split(herd_comm *c, int color, int key, const char *name,
                                    herd_comm_wrap_fn make, herd_comm **out);
herd_comm *herd_comm_wrapped(const herd_comm *c); /* host */
/* The communicator for host buffers among c's ranks: the host of a wrapper (whose own
 * p2p and reductions take device buffers), else c itself. */
herd_comm *herd_comm_host_side(herd_comm *c);
void *herd_comm_wrapper_impl(const herd_comm *c);
/* Attaches a trace sink to c (NULL detaches), and to the host c wraps if it is a
 * wrapper: the communicator that runs a reduction records it. Call with nothing pending. */
void herd_comm_set_trace(herd_comm *c, const herd_trace_sink *trace);

#endif
