/*
 * Shared state of the MPI communicator (comm_mpi.c: set-up and the caller's side;
 * comm_mpi_thread.c: the communication thread; comm_mpi_stall.c: the stall inspector).
 *
 * One thread at a time calls MPI for a communicator once it is created: its
 * communication thread, or the caller of a blocking op that runs the op itself while
 * the thread sleeps with nothing queued. So MPI_THREAD_SERIALIZED suffices, and every
 * MPI call made is non-blocking: whoever waits can always answer the stall inspector,
 * however long a collective waits.
 */
#ifndef HERD_DIST_COMM_MPI_INTERNAL_H
#define HERD_DIST_COMM_MPI_INTERNAL_H

#include <mpi.h>
#include <pthread.h>

#include "dist/comm.h"

/* Buffers larger than this go to MPI in pieces (MPI counts are int). */
#define COMM_MPI_MAX_PIECE ((size_t)1 << 28)

typedef enum mpi_op_kind {
    MPI_OP_ALLREDUCE, /* asynchronous gradient slice */
    MPI_OP_BROADCAST,
    MPI_OP_ALLREDUCE_F64,
    MPI_OP_ALLGATHER,
    MPI_OP_BARRIER,
    MPI_OP_ALLREDUCE_TYPED,     /* asynchronous, a half/bf16/float buffer as it is */
    MPI_OP_SENDRECV,            /* asynchronous point to point */
    MPI_OP_REFERENCE_ALLREDUCE, /* blocking MPI_Allreduce, timed, for the benchmark */
    MPI_OP_GATHER,
    MPI_OP_CLOCK_SAMPLES,
    MPI_OP_ALLREDUCE_F64_ASYNC, /* asynchronous allreduce_f64 (allreduce_f64_start) */
    MPI_OP_REDUCE_SCATTER,      /* asynchronous: ZeRO's gradient slices */
    MPI_OP_ALLGATHERV,          /* asynchronous: ZeRO's parameter slices */
    MPI_OP_REDUCE_SCATTER_F64,  /* blocking: host doubles (reduce_scatter_f64) */
    MPI_OP_ALLGATHERV_F32,      /* blocking: allgatherv_f32 */
    MPI_OP_ALLREDUCE_ELEMENTS,  /* asynchronous: min, max or product (allreduce_op_start) */
    MPI_OP_ALLGATHERV_BYTES,    /* asynchronous: parts of any size (allgatherv) */
    MPI_OP_ALLGATHERV_BYTES_NOW, /* the same, blocking */
    MPI_OP_ADASUM,              /* asynchronous: Horovod's Adasum (comm_mpi_adasum.c) */
} mpi_op_kind;

typedef struct mpi_op {
    struct mpi_op *next;
    mpi_op_kind kind;
    uint64_t seq; /* 1, 2, ... in the order every rank starts them */
    /* allreduce */
    float *buf;
    size_t n;
    float scale;
    herd_wire_type wire;
    herd_dtype elem;       /* allreduce_op_start: the values' type and the reduction */
    herd_reduce_op reduce;
    const int64_t *tensor_counts; /* Adasum: the tensors in data, back to back (NULL: one) */
    size_t n_tensors;
    /* blocking collectives */
    void *data;
    const void *src;
    size_t bytes;
    int root, count;
    /* sendrecv: src (bytes) goes to dest, data (recv_bytes) comes from source */
    int dest, source;
    size_t recv_bytes;
    double *seconds; /* reference allreduce: where the thread writes the time */
    const int *counts, *displs; /* gather, on root: bytes from each rank and where they go;
                                 * reduce-scatter and all-gather: each rank's values */
    bool release_rest;          /* reduce-scatter: return the other ranks' pages */
    double launched;        /* allreduce with a timeline: when backward handed it over */
    char tag[48];
    bool done;      /* set by the thread; the caller of a blocking op waits for it */
    char error[384]; /* "" or what failed, for the waiting caller */
} mpi_op;

/* What one rank tells rank 0 about itself. Ages, not times: clocks differ across hosts. */
typedef struct mpi_rank_status {
    int32_t rank;
    int32_t pending; /* a collective is started and not complete */
    int32_t leaving; /* the rank's communicator is being freed: it starts no more */
    int32_t ran_p2p; /* point-to-point ops ran: its count does not line up with others' */
    uint64_t started, completed;
    double pending_age_s, activity_age_s;
    char activity[96];
    char pending_desc[112];
    char host[64];
} mpi_rank_status;

/* What rank 0 answers a waiting rank: which ranks have not started collective seq,
 * and which have gone silent. */
typedef struct mpi_rank_view {
    uint64_t seq;
    int32_t remote_silent; /* silent ranks on a host other than rank 0's */
    char missing[1024];    /* "ranks not yet arrived: ...; ranks unreachable: ..." */
} mpi_rank_view;

#define MPI_HOST_LEN sizeof(((herd_comm *)0)->host)

typedef struct mpi_stall {
    double last_poll, last_sent, last_request;
    mpi_rank_status out; /* the buffer of the status send in flight */
    MPI_Request send_req;
    char req_byte;
    MPI_Request *request_reqs; /* rank 0: one "report now" per rank */
    char *request_bytes;
    /* rank 0: the last status of every rank and when it arrived */
    mpi_rank_status *table;
    double *received_at;
    mpi_rank_view *views_out; /* rank 0: the view in flight to each rank */
    MPI_Request *view_reqs;
    uint64_t judged_seq; /* rank 0: the collective it asks about, asking since when */
    double asking_since;
    char *hosts; /* every rank's host name, MPI_HOST_LEN each, gathered at set-up */
    /* other ranks: rank 0's last view and when it came; the last word from rank 0 */
    mpi_rank_view view_in;
    double view_at, root_heard_at;
    uint64_t told_seq; /* the pending collective our statuses name, first sent when */
    double told_at;
    uint64_t warned_seq;   /* our own pending op already warned about */
    uint64_t reported_seq; /* rank 0: the op whose job-wide report is printed */
} mpi_stall;

typedef struct comm_mpi {
    herd_comm *c;
    MPI_Comm world; /* a duplicate of MPI_COMM_WORLD (or of a group) for the collectives */
    MPI_Comm stall_comm;
    /* Point to point from the training thread (comm_mpi_p2p.c): its own duplicate, so
     * its messages never match the communication thread's. */
    MPI_Comm p2p;
    int thread_level;     /* what MPI_Init_thread provided */
    int job_rank;         /* in MPI_COMM_WORLD */
    char group_name[48];  /* "" for the whole job, else the split's name ("stage group 1") */
    MPI_Datatype half_type;
    MPI_Op fp16_sum, bf16_sum;
    bool initialized_mpi; /* we called MPI_Init_thread, so we finalize */
    double poll_sleep_max_s;
    double spin_s; /* how long a wait polls flat out before sleeping */

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    /* under mu */
    mpi_op *head, *tail, *free_ops;
    uint64_t enqueued, completed;
    uint64_t awaited; /* the ticket wait_ticket waits for (0: none) */
    bool shutdown;
    bool abort_requested;
    int abort_code;
    char abort_msg[512];
    char async_error[384];
    char activity[96];
    double activity_time;
    /* A blocking op may run on its caller's thread (comm_mpi.c: run_blocking) while the
     * thread sleeps in wait_for_work (thread_idle) with nothing queued; the thread then
     * stays there, calling no MPI, until the caller is done (inline_busy). */
    bool thread_idle, inline_busy;
    bool inline_blocking; /* HERD_MPI_INLINE (default 1): allowed at all */

    /* owned by the thread, or by the caller running a blocking op itself */
    mpi_op *current;
    double current_start;
    uint64_t started; /* seq of the last op handed to MPI */
    bool ran_p2p;     /* a point-to-point op ran: ranks' op counts no longer line up */
    uint16_t *stage;  /* fp16/bf16 wire buffer, grown to the largest slice, then reused */
    size_t stage_cap;
    int *displs;      /* ZeRO's parts: where each rank's starts */
    void *ring;       /* the reduce-scatter's and Adasum's receive buffer, grown as needed */
    size_t ring_cap;
    mpi_stall stall;

    /* libnbc's allreduce algorithm per size (comm_mpi_algo.c) */
    bool algo_tool_open, algo_enabled;
    MPI_T_cvar_handle algo_handle;
} comm_mpi;

void comm_mpi_algo_init(comm_mpi *m);
/* Before every MPI_Iallreduce of this many bytes, on the communication thread; when
 * m->algo_enabled was true, it holds a process-wide lock until comm_mpi_algo_started
 * (called right after the start, with picked = that value of algo_enabled). */
void comm_mpi_algo_pick(comm_mpi *m, size_t bytes);
void comm_mpi_algo_started(comm_mpi *m, bool picked);
void comm_mpi_algo_fini(comm_mpi *m);

void *comm_mpi_thread_main(void *arg);
/* Runs op (started, polled to completion, the stall inspector served meanwhile) without
 * retiring it; err gets what failed, or "". The thread's, or a caller's holding
 * inline_busy. */
void comm_mpi_run_op(comm_mpi *m, mpi_op *op, char *err, size_t cap);
/* Polls req to completion as the thread's ops do (the stall inspector served). */
int comm_mpi_wait_request(comm_mpi *m, MPI_Request *req);
/* allreduce_op_start's op, run on the thread (comm_mpi_elements.c); the bytes of a value. */
int comm_mpi_reduce_elements(comm_mpi *m, const mpi_op *op);
size_t comm_mpi_elem_size(herd_dtype t);
/* The thread's receive buffer (m->ring) of at least `bytes`, kept for the next op; NULL,
 * with err set, when out of memory. */
void *comm_mpi_scratch(comm_mpi *m, size_t bytes, char *err, size_t cap);
/* allreduce_adasum_start's op, run on the thread; err says what failed, if it can. */
int comm_mpi_adasum(comm_mpi *m, const mpi_op *op, char *err, size_t cap);
/* Operations whose caller does not wait for them (completed by wait_all). */
static inline bool comm_mpi_op_is_async(mpi_op_kind k)
{
    return k == MPI_OP_ALLREDUCE || k == MPI_OP_ALLREDUCE_TYPED || k == MPI_OP_SENDRECV ||
           k == MPI_OP_ALLREDUCE_F64_ASYNC || k == MPI_OP_REDUCE_SCATTER || k == MPI_OP_ALLGATHERV ||
           k == MPI_OP_ALLREDUCE_ELEMENTS || k == MPI_OP_ALLGATHERV_BYTES || k == MPI_OP_ADASUM;
}
/* Sets MPI_ERRORS_RETURN-style failures into an "rank R on host H: ..." message. */
void comm_mpi_describe_error(comm_mpi *m, int mpi_err, const char *what, char *out, size_t cap);
const char *comm_mpi_thread_level_name(int level);
/* "rank 2 on host node1", or "rank 1 of stage group 0 (job rank 3) on host node1". */
void comm_mpi_who(const comm_mpi *m, char *out, size_t cap);
/* A communicator over `base` (a duplicate of MPI_COMM_WORLD or a split of it) with its
 * own queue, thread and stall inspector; MPI is initialised already. */
herd_status comm_mpi_create_on(MPI_Comm base, const herd_comm_config *cfg, int thread_level,
                               const char *group_name, herd_comm **out);
/* The caller's side of every operation (comm_mpi.c); its destroy is comm_mpi_setup.c's. */
extern const herd_comm_ops comm_mpi_ops;
void comm_mpi_destroy(herd_comm *c);
herd_status comm_mpi_split(herd_comm *c, int color, int key, const char *name, herd_comm **out);
herd_status comm_mpi_p2p_start(herd_comm *c, herd_p2p *req, bool send, void *buf, size_t bytes,
                               int peer, int tag);
herd_status comm_mpi_p2p_wait(herd_comm *c, herd_p2p *req, const char *what);
void comm_mpi_p2p_progress(herd_comm *c);
/* "allreduce 'bucket 3', 1.0 MiB" */
void comm_mpi_describe_op(const mpi_op *op, char *out, size_t cap);
/* Prints msg (with rank and host) and ends the job with MPI_Abort; never returns. */
_Noreturn void comm_mpi_fatal(comm_mpi *m, int code, const char *msg);
/* The same, MPI_Abort only after delay_s (the launcher may end the job first). */
_Noreturn void comm_mpi_fatal_after(comm_mpi *m, int code, const char *msg, double delay_s);

/* 0, -1 when out of memory, or the MPI error of gathering the host names. */
int comm_mpi_stall_init(comm_mpi *m);
void comm_mpi_stall_free(comm_mpi *m);
/* Exchanges statuses, prints warnings, aborts after the timeout. Called by the
 * thread between polls; rate-limits itself. */
void comm_mpi_stall_poll(comm_mpi *m);
/* Completes the inspector's messages before the communicator goes away. */
void comm_mpi_stall_drain(comm_mpi *m);

#endif
