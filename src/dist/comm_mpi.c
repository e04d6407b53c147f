/*
 * The MPI communicator: the caller's side of every operation (set-up and tear-down are
 * comm_mpi_setup.c's).
 * Operations are queued for the communication thread (comm_mpi_thread.c), which
 * calls MPI for them after set-up; asynchronous reductions return at once, blocking
 * collectives wait for the thread to finish them, or run on the caller's thread when
 * the communication thread sleeps with nothing queued.
 */
#include "herd_config.h"
#include "core/error.h"
#include "dist/comm.h"

#if !HERD_HAVE_MPI

herd_status herd_comm_mpi_create(const herd_comm_config *cfg, herd_comm **out)
{
    (void)cfg;
    *out = NULL;
    return HERD_ERR(HERD_ERR_UNSUPPORTED,
                    "herd was built without MPI; install libopenmpi-dev (or another MPI) and "
                    "rebuild with cmake -DHERD_MPI=ON");
}

#else

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/drain.h"
#include "core/log.h"
#include "dist/comm_mpi_internal.h"

void comm_mpi_describe_error(comm_mpi *m, int mpi_err, const char *what, char *out, size_t cap)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(mpi_err, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error %d", mpi_err);
    char who[160];
    comm_mpi_who(m, who, sizeof who);
    snprintf(out, cap, "%s: %s failed: %s", who, what, text);
}

void comm_mpi_who(const comm_mpi *m, char *out, size_t cap)
{
    if (m->group_name[0])
        snprintf(out, cap, "rank %d of %s (job rank %d) on host %s", m->c->rank, m->group_name,
                 m->job_rank, m->c->host);
    else
        snprintf(out, cap, "rank %d on host %s", m->c->rank, m->c->host);
}

/* MPI_Abort asks the launcher to end the job; where the launcher never acts on it (seen
 * once under srun with PMIx: a step whose surviving rank stayed for minutes after its
 * peer's kill), the rank ends itself a while later rather than hang. */
#define ABORT_GRACE_S 30
/* The longest a failing rank waits for the launcher to read its last words. */
#define OUTPUT_READ_MAX_S 10.0
static volatile sig_atomic_t g_abort_code = 1;
static void exit_after_abort(int sig)
{
    (void)sig;
    _exit(g_abort_code);
}

_Noreturn void comm_mpi_fatal_after(comm_mpi *m, int code, const char *msg, double delay_s)
{
    if (delay_s < 0.2)
        delay_s = 0.2;
    /* Armed first: a write blocked on a launcher that stopped reading (this message, or
     * another thread's holding stdout's lock that the wait below flushes) must not keep
     * the rank from ending. */
    g_abort_code = code ? code : 1;
    signal(SIGALRM, exit_after_abort);
    alarm((unsigned)(delay_s + OUTPUT_READ_MAX_S) + ABORT_GRACE_S);
    char who[160];
    comm_mpi_who(m, who, sizeof who);
    herd_log(HERD_LOG_ERROR, "%s: %s", who, msg);
    /* The launcher forwards what the ranks wrote asynchronously; MPICH's Hydra drops
     * what it has not read yet when a rank aborts (about 1 run in 20 lost every
     * message here). A moment lets it read this rank's last words first; longer when
     * the launcher should end the job before this abort (a vanished host). */
    for (double until = herd_now() + delay_s; herd_now() < until;)
        herd_sleep(0.05);
    /* And until the launcher has read them, where the pipe or socket tells: on a loaded
     * machine Hydra waited past the moment above and lost the message (make test, its
     * MPICH pass at low priority: three tests in one run). */
    herd_wait_output_read(OUTPUT_READ_MAX_S);
    MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
    _exit(code ? code : 1); /* MPI_Abort does not return; this only satisfies _Noreturn */
}

_Noreturn void comm_mpi_fatal(comm_mpi *m, int code, const char *msg)
{
    comm_mpi_fatal_after(m, code, msg, 0);
}

static void release_op(comm_mpi *m, mpi_op *op) /* under mu */
{
    op->next = m->free_ops;
    m->free_ops = op;
}

/* Returns an op from the free list (no allocation in steady state), for the caller
 * to fill in whole. */
static mpi_op *take_op(comm_mpi *m) /* under mu */
{
    mpi_op *op = m->free_ops;
    if (op)
        m->free_ops = op->next;
    else
        op = malloc(sizeof *op);
    return op;
}

static void enqueue(comm_mpi *m, mpi_op *op) /* under mu */
{
    op->seq = ++m->enqueued;
    op->next = NULL;
    if (m->tail)
        m->tail->next = op;
    else
        __atomic_store_n(&m->head, op, __ATOMIC_RELEASE); /* the idle thread polls it unlocked */
    m->tail = op;
    pthread_cond_signal(&m->work_cv);
}

/* Under mu: a free op filled from proto and queued; NULL when out of memory. */
static mpi_op *enqueue_copy(comm_mpi *m, const mpi_op *proto)
{
    mpi_op *op = take_op(m);
    if (op) {
        *op = *proto;
        enqueue(m, op);
    }
    return op;
}

/* Queues a filled-in asynchronous op; wait_all completes it. */
static herd_status enqueue_async(comm_mpi *m, const mpi_op *proto)
{
    pthread_mutex_lock(&m->mu);
    mpi_op *op = enqueue_copy(m, proto);
    pthread_mutex_unlock(&m->mu);
    return op ? HERD_OK : HERD_NOMEM(sizeof *op);
}

static herd_status check_wire(const herd_comm *c, herd_wire_type wire)
{
    if (wire != HERD_WIRE_FP32 && wire != HERD_WIRE_FP16 && wire != HERD_WIRE_BF16)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "rank %d on host %s: unknown wire type %d", c->rank,
                        c->host, (int)wire);
    return HERD_OK;
}

static herd_status mpi_allreduce_start(herd_comm *c, float *buf, size_t n, float scale,
                                       herd_wire_type wire, const char *tag)
{
    if (n && !buf)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "rank %d on host %s: allreduce_start: NULL buffer",
                        c->rank, c->host);
    HERD_TRY(check_wire(c, wire));
    mpi_op op = {.kind = MPI_OP_ALLREDUCE, .buf = buf, .n = n, .scale = scale, .wire = wire,
                 .launched = herd_trace_start(c->trace)};
    snprintf(op.tag, sizeof op.tag, "%s", tag ? tag : "");
    return enqueue_async(c->impl, &op);
}

static herd_status mpi_allreduce_typed_start(herd_comm *c, void *buf, size_t n,
                                             herd_wire_type type, const char *tag)
{
    if (n && !buf)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "rank %d on host %s: allreduce_typed_start: NULL buffer", c->rank, c->host);
    HERD_TRY(check_wire(c, type));
    mpi_op op = {.kind = MPI_OP_ALLREDUCE_TYPED, .data = buf, .n = n, .wire = type};
    snprintf(op.tag, sizeof op.tag, "%s", tag ? tag : "");
    return enqueue_async(c->impl, &op);
}

static herd_status mpi_allreduce_op_start(herd_comm *c, void *buf, size_t n, herd_dtype type,
                                          herd_reduce_op reduce, const char *tag)
{
    if (n && !buf)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "rank %d on host %s: allreduce_op_start: NULL buffer",
                        c->rank, c->host);
    mpi_op op = {.kind = MPI_OP_ALLREDUCE_ELEMENTS, .data = buf, .n = n, .elem = type,
                 .reduce = reduce};
    snprintf(op.tag, sizeof op.tag, "%s", tag ? tag : "");
    return enqueue_async(c->impl, &op);
}

static herd_status mpi_allreduce_adasum_start(herd_comm *c, void *buf, size_t n, herd_dtype type,
                                              const int64_t *counts, size_t n_tensors, const char *tag)
{
    if (n && !buf)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "rank %d on host %s: allreduce_adasum_start: NULL buffer",
                        c->rank, c->host);
    mpi_op op = {.kind = MPI_OP_ADASUM, .data = buf, .n = n, .elem = type, .tensor_counts = counts,
                 .n_tensors = n_tensors, .launched = herd_trace_start(c->trace)};
    snprintf(op.tag, sizeof op.tag, "%s", tag ? tag : "");
    return enqueue_async(c->impl, &op);
}

/* counts' sum, or a message when it is not a valid split of one MPI call's buffer. */
static herd_status parts_total(const herd_comm *c, const void *buf, const int *counts,
                               const char *what, size_t *n)
{
    *n = 0;
    bool negative = false;
    for (int r = 0; counts && r < c->size; r++) {
        negative = negative || counts[r] < 0;
        *n += counts[r] < 0 ? 0 : (size_t)counts[r];
    }
    if (!counts || negative || *n > INT_MAX || (*n && !buf))
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "rank %d on host %s: %s of %zu values: needs a buffer and every rank's "
                        "count (>= 0, at most %d in all)", c->rank, c->host, what, *n, INT_MAX);
    return HERD_OK;
}

static herd_status mpi_reduce_scatter_start(herd_comm *c, float *buf, const int *counts,
                                            float scale, herd_wire_type wire, bool release_rest,
                                            const char *tag)
{
    size_t n;
    HERD_TRY(parts_total(c, buf, counts, "reduce_scatter_start", &n));
    HERD_TRY(check_wire(c, wire));
    mpi_op op = {.kind = MPI_OP_REDUCE_SCATTER, .buf = buf, .n = n, .counts = counts,
                 .scale = scale, .wire = wire, .release_rest = release_rest,
                 .launched = herd_trace_start(c->trace)};
    snprintf(op.tag, sizeof op.tag, "%s", tag ? tag : "");
    return enqueue_async(c->impl, &op);
}

static herd_status mpi_allgather_start(herd_comm *c, float *buf, const int *counts,
                                       const char *tag)
{
    size_t n;
    HERD_TRY(parts_total(c, buf, counts, "allgather_start", &n));
    mpi_op op = {.kind = MPI_OP_ALLGATHERV, .buf = buf, .n = n, .counts = counts,
                 .wire = HERD_WIRE_FP32, .launched = herd_trace_start(c->trace)};
    snprintf(op.tag, sizeof op.tag, "%s", tag ? tag : "");
    return enqueue_async(c->impl, &op);
}

static herd_status mpi_sendrecv_start(herd_comm *c, const void *sendbuf, size_t send_bytes,
                                      int dest, void *recvbuf, size_t recv_bytes, int src)
{
    if (dest < -1 || dest >= c->size || src < -1 || src >= c->size || send_bytes > INT_MAX ||
        recv_bytes > INT_MAX || (dest >= 0 && send_bytes && !sendbuf) ||
        (src >= 0 && recv_bytes && !recvbuf))
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "rank %d on host %s: sendrecv of %zu bytes to rank %d and %zu bytes from "
                        "rank %d (job of %d ranks; at most %d bytes, buffers not NULL)",
                        c->rank, c->host, send_bytes, dest, recv_bytes, src, c->size, INT_MAX);
    return enqueue_async(c->impl, &(mpi_op){.kind = MPI_OP_SENDRECV, .src = sendbuf,
                                            .bytes = send_bytes, .dest = dest, .data = recvbuf,
                                            .recv_bytes = recv_bytes, .source = src,
                                            .tag = "sendrecv"});
}

static uint64_t mpi_ticket(herd_comm *c)
{
    comm_mpi *m = c->impl;
    pthread_mutex_lock(&m->mu);
    uint64_t t = m->enqueued;
    pthread_mutex_unlock(&m->mu);
    return t;
}

static herd_status mpi_wait_ticket(herd_comm *c, uint64_t ticket)
{
    comm_mpi *m = c->impl;
    pthread_mutex_lock(&m->mu);
    while (m->completed < ticket) {
        m->awaited = ticket;
        pthread_cond_wait(&m->done_cv, &m->mu);
    }
    m->awaited = 0;
    char err[sizeof m->async_error];
    snprintf(err, sizeof err, "%s", m->async_error);
    m->async_error[0] = '\0';
    pthread_mutex_unlock(&m->mu);
    return err[0] ? HERD_ERR(HERD_ERR_INTERNAL, "%s", err) : HERD_OK;
}

static herd_status mpi_wait_all(herd_comm *c)
{
    comm_mpi *m = c->impl;
    pthread_mutex_lock(&m->mu);
    while (m->completed < m->enqueued)
        pthread_cond_wait(&m->done_cv, &m->mu);
    char err[sizeof m->async_error];
    snprintf(err, sizeof err, "%s", m->async_error);
    m->async_error[0] = '\0';
    pthread_mutex_unlock(&m->mu);
    return err[0] ? HERD_ERR(HERD_ERR_INTERNAL, "%s", err) : HERD_OK;
}

/* Under mu: whether the caller may run a blocking op itself. Only when the thread
 * sleeps with nothing queued, so that the op keeps its place in every rank's order
 * and one thread at a time calls MPI; and only an op of polled non-blocking calls (the
 * benchmark's timed loops and the clock rounds stay on the thread). */
static bool may_run_inline(const comm_mpi *m, mpi_op_kind kind)
{
    bool polled = kind == MPI_OP_BROADCAST || kind == MPI_OP_ALLREDUCE_F64 ||
                  kind == MPI_OP_ALLGATHER || kind == MPI_OP_BARRIER || kind == MPI_OP_GATHER ||
                  kind == MPI_OP_REDUCE_SCATTER_F64 || kind == MPI_OP_ALLGATHERV_F32 ||
                  kind == MPI_OP_ALLGATHERV_BYTES_NOW;
    return polled && m->inline_blocking && m->thread_idle && !m->inline_busy && !m->head &&
           !m->abort_requested;
}

/* Runs a blocking op on the caller's thread (under mu on entry and return): a
 * small collective, such as batch norm's statistics, then costs no hand-off to the
 * thread and back, two wake-ups that on cores shared by more ranks each wait for a
 * time slice. */
static herd_status run_inline(comm_mpi *m, const mpi_op *proto)
{
    mpi_op op = *proto;
    op.seq = ++m->enqueued;
    m->inline_busy = true;
    pthread_mutex_unlock(&m->mu);
    char err[sizeof op.error] = "";
    comm_mpi_run_op(m, &op, err, sizeof err);
    pthread_mutex_lock(&m->mu);
    m->completed = op.seq;
    m->inline_busy = false;
    if (m->head) /* queued meanwhile by another thread: the communication thread's now */
        pthread_cond_signal(&m->work_cv);
    return err[0] ? HERD_ERR(HERD_ERR_INTERNAL, "%s", err) : HERD_OK;
}

/* Runs a filled-in blocking op: itself when it may, else queued for the thread,
 * waiting until the thread has run it. */
static herd_status run_blocking(comm_mpi *m, const mpi_op *proto)
{
    pthread_mutex_lock(&m->mu);
    if (may_run_inline(m, proto->kind)) {
        herd_status st = run_inline(m, proto);
        pthread_mutex_unlock(&m->mu);
        return st;
    }
    mpi_op *op = enqueue_copy(m, proto);
    if (!op) {
        pthread_mutex_unlock(&m->mu);
        return HERD_NOMEM(sizeof *op);
    }
    while (!op->done)
        pthread_cond_wait(&m->done_cv, &m->mu);
    char err[sizeof op->error];
    snprintf(err, sizeof err, "%s", op->error);
    release_op(m, op);
    pthread_mutex_unlock(&m->mu);
    return err[0] ? HERD_ERR(HERD_ERR_INTERNAL, "%s", err) : HERD_OK;
}

static herd_status mpi_broadcast(herd_comm *c, void *buf, size_t bytes, int root)
{
    if (root < 0 || root >= c->size || bytes > INT_MAX)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "rank %d on host %s: broadcast of %zu bytes from root %d (job of %d ranks)",
                        c->rank, c->host, bytes, root, c->size);
    return run_blocking(c->impl, &(mpi_op){.kind = MPI_OP_BROADCAST, .data = buf, .bytes = bytes,
                                           .root = root, .tag = "broadcast"});
}

static herd_status mpi_allreduce_f64(herd_comm *c, double *vals, int n)
{
    if (n < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "rank %d on host %s: allreduce_f64 of %d values",
                        c->rank, c->host, n);
    return run_blocking(c->impl, &(mpi_op){.kind = MPI_OP_ALLREDUCE_F64, .data = vals, .count = n,
                                           .bytes = (size_t)n * sizeof(double), .tag = "metrics"});
}

static herd_status mpi_reduce_scatter_f64(herd_comm *c, double *vals, const int *counts)
{
    size_t n;
    HERD_TRY(parts_total(c, vals, counts, "reduce_scatter_f64", &n));
    return run_blocking(c->impl, &(mpi_op){.kind = MPI_OP_REDUCE_SCATTER_F64, .data = vals, .n = n,
                                           .counts = counts, .bytes = n * sizeof(double),
                                           .tag = "exact sums"});
}

static herd_status mpi_allgatherv_f32(herd_comm *c, float *vals, const int *counts)
{
    size_t n;
    HERD_TRY(parts_total(c, vals, counts, "allgatherv_f32", &n));
    return run_blocking(c->impl, &(mpi_op){.kind = MPI_OP_ALLGATHERV_F32, .buf = vals, .n = n,
                                           .counts = counts, .tag = "exact means"});
}

static herd_status mpi_allreduce_f64_start(herd_comm *c, double *vals, int n, const char *tag)
{
    if (n < 0 || (n && !vals))
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "rank %d on host %s: allreduce_f64_start of %d values%s", c->rank, c->host,
                        n, n && !vals ? " from a NULL buffer" : "");
    mpi_op op = {.kind = MPI_OP_ALLREDUCE_F64_ASYNC, .data = vals, .count = n,
                 .bytes = (size_t)n * sizeof(double)};
    snprintf(op.tag, sizeof op.tag, "%s", tag ? tag : "");
    return enqueue_async(c->impl, &op);
}

static herd_status mpi_allgather(herd_comm *c, const void *mine, void *all, size_t bytes)
{
    if (bytes > INT_MAX / (size_t)c->size)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "rank %d on host %s: allgather of %zu bytes per rank",
                        c->rank, c->host, bytes);
    return run_blocking(c->impl, &(mpi_op){.kind = MPI_OP_ALLGATHER, .src = mine, .data = all,
                                           .bytes = bytes, .tag = "allgather"});
}

static herd_status mpi_allgatherv(herd_comm *c, const void *mine, void *all, const int *bytes_of,
                                  bool wait, const char *tag)
{
    size_t total;
    HERD_TRY(parts_total(c, all, bytes_of, "allgather", &total));
    if (bytes_of[c->rank] && !mine)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "rank %d on host %s: allgather of %d bytes from NULL",
                        c->rank, c->host, bytes_of[c->rank]);
    mpi_op op = {.kind = wait ? MPI_OP_ALLGATHERV_BYTES_NOW : MPI_OP_ALLGATHERV_BYTES, .src = mine,
                 .data = all, .counts = bytes_of, .count = c->size};
    snprintf(op.tag, sizeof op.tag, "%s", tag ? tag : "");
    return wait ? run_blocking(c->impl, &op) : enqueue_async(c->impl, &op);
}

static herd_status mpi_time_reference_allreduce(herd_comm *c, void *buf, size_t n,
                                                herd_wire_type type, int iters, double *seconds)
{
    if ((n && !buf) || iters < 0 || !seconds)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "rank %d on host %s: time_reference_allreduce of %zu elements, %d times",
                        c->rank, c->host, n, iters);
    HERD_TRY(check_wire(c, type));
    return run_blocking(c->impl, &(mpi_op){.kind = MPI_OP_REFERENCE_ALLREDUCE, .data = buf, .n = n,
                                           .wire = type, .count = iters, .seconds = seconds,
                                           .tag = "reference allreduce"});
}

static herd_status mpi_barrier(herd_comm *c)
{
    return run_blocking(c->impl, &(mpi_op){.kind = MPI_OP_BARRIER, .tag = "barrier"});
}

static herd_status mpi_gather(herd_comm *c, const void *mine, size_t bytes, void *all,
                              const size_t *bytes_of, int root)
{
    if (root < 0 || root >= c->size || bytes > INT_MAX)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "rank %d on host %s: gather of %zu bytes to root %d (job of %d ranks)",
                        c->rank, c->host, bytes, root, c->size);
    int *counts = NULL;
    if (c->rank == root) { /* MPI counts are int: the whole gather must fit */
        counts = herd_xcalloc(2 * (size_t)c->size, sizeof *counts);
        if (!counts)
            return HERD_ERR_NOMEM;
        size_t total = 0;
        for (int r = 0; r < c->size; r++) {
            counts[r] = (int)bytes_of[r];
            counts[c->size + r] = (int)total;
            total += bytes_of[r];
            if (bytes_of[r] > INT_MAX || total > INT_MAX) {
                free(counts);
                return HERD_ERR(HERD_ERR_INVALID_ARG,
                                "rank %d on host %s: a gather of more than 2 GiB (%zu bytes so "
                                "far) is beyond one MPI call; send it in parts",
                                c->rank, c->host, total);
            }
        }
    }
    herd_status st = run_blocking(c->impl, &(mpi_op){.kind = MPI_OP_GATHER, .src = mine,
                                                     .data = all, .bytes = bytes, .root = root,
                                                     .counts = counts,
                                                     .displs = counts ? counts + c->size : NULL,
                                                     .tag = "gather"});
    free(counts);
    return st;
}

static herd_status mpi_clock_samples(herd_comm *c, int rounds, double *samples)
{
    if (rounds < 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "rank %d on host %s: %d clock rounds", c->rank,
                        c->host, rounds);
    if (c->rank == 0)
        memset(samples, 0, (size_t)rounds * 4 * sizeof *samples);
    return run_blocking(c->impl, &(mpi_op){.kind = MPI_OP_CLOCK_SAMPLES, .data = samples,
                                           .count = rounds, .tag = "clock samples"});
}

static void mpi_set_activity(herd_comm *c, const char *what)
{
    comm_mpi *m = c->impl;
    pthread_mutex_lock(&m->mu);
    snprintf(m->activity, sizeof m->activity, "%s", what ? what : "");
    m->activity_time = herd_now();
    pthread_mutex_unlock(&m->mu);
}

/* MPI_Abort ends every rank: the documented way library code ends the process. The
 * thread makes the call so that two threads never call MPI at once. */
static void mpi_abort(herd_comm *c, int code, const char *msg)
{
    comm_mpi *m = c->impl;
    if (!m->thread_started)
        comm_mpi_fatal(m, code, msg ? msg : "abort");
    pthread_mutex_lock(&m->mu);
    m->abort_code = code;
    snprintf(m->abort_msg, sizeof m->abort_msg, "%s", msg ? msg : "abort");
    __atomic_store_n(&m->abort_requested, true, __ATOMIC_RELEASE);
    pthread_cond_signal(&m->work_cv);
    pthread_mutex_unlock(&m->mu);
    for (;;)
        pause(); /* the thread's MPI_Abort ends this process */
}

const herd_comm_ops comm_mpi_ops = {
    .name = "mpi",
    .destroy = comm_mpi_destroy,
    .allreduce_start = mpi_allreduce_start,
    .reduce_scatter_start = mpi_reduce_scatter_start,
    .allgather_start = mpi_allgather_start,
    .ticket = mpi_ticket,
    .wait_ticket = mpi_wait_ticket,
    .wait_all = mpi_wait_all,
    .allreduce_f64_start = mpi_allreduce_f64_start,
    .reduce_scatter_f64 = mpi_reduce_scatter_f64,
    .allgatherv_f32 = mpi_allgatherv_f32,
    .allreduce_typed_start = mpi_allreduce_typed_start,
    .allreduce_op_start = mpi_allreduce_op_start,
    .allreduce_adasum_start = mpi_allreduce_adasum_start,
    .allgatherv = mpi_allgatherv,
    .sendrecv_start = mpi_sendrecv_start,
    .time_reference_allreduce = mpi_time_reference_allreduce,
    .broadcast = mpi_broadcast,
    .allreduce_f64 = mpi_allreduce_f64,
    .allgather = mpi_allgather,
    .barrier = mpi_barrier,
    .gather = mpi_gather,
    .clock_samples = mpi_clock_samples,
    .split = comm_mpi_split,
    .p2p_start = comm_mpi_p2p_start,
    .p2p_wait = comm_mpi_p2p_wait,
    .p2p_progress = comm_mpi_p2p_progress,
    .set_activity = mpi_set_activity,
    .abort = mpi_abort,
};

#endif
