/*
 * The communication thread: runs the queued operations one at a time, in the order
 * every rank queued them, and is the only caller of MPI after set-up but for a blocking
 * op its caller runs itself while the thread sleeps with nothing queued. Each
 * operation is a non-blocking MPI call polled with MPI_Test (Open MPI progresses
 * it only inside MPI calls), with a short sleep between polls so that a pending
 * reduction does not take a core from the rank's compute threads.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/half.h"
#include "dist/comm_mpi_internal.h"

#define IDLE_POLL_S 20e-6
/* How long a ping-pong yields between polls before the usual wait (wait_yielding). */
#define YIELD_SECONDS 0.005
/* After a reduce-scatter, ZeRO's all-gather follows once the rank has updated its
 * slice: poll that long for it rather than sleep and pay a wake-up, which on busy cores
 * waits for a time slice (measured on lenet5, 2 ranks on 2 cores: exposed communication
 * 1.0 ms per step with the short poll, 0.24-0.5 ms with this one, plain's 0.24-0.74). */
#define ZERO_POLL_S 2e-3
/* Longest sleep between polls of a reduction nobody waits for yet (the metrics). */
#define BACKGROUND_POLL_S 500e-6
#define POLLS_PER_CHECK 16

void comm_mpi_describe_op(const mpi_op *op, char *out, size_t cap)
{
    static const char *kinds[] = {"allreduce", "broadcast", "allreduce_f64", "allgather", "barrier",
                                  "allreduce", "sendrecv", "reference allreduce", "gather",
                                  "clock samples", "allreduce_f64", "reduce-scatter",
                                  "all-gather", "reduce-scatter_f64", "all-gather_f32",
                                  "allreduce (min, max or product)", "allgather", "allgather",
                                  "allreduce (Adasum)"};
    size_t bytes = op->bytes;
    if (op->kind == MPI_OP_ALLREDUCE || op->kind == MPI_OP_ALLGATHERV ||
        op->kind == MPI_OP_ALLGATHERV_F32)
        bytes = op->n * sizeof(float);
    else if (op->kind == MPI_OP_REDUCE_SCATTER)
        bytes = op->n * herd_wire_type_size(op->wire);
    else if (op->kind == MPI_OP_ALLREDUCE_TYPED || op->kind == MPI_OP_REFERENCE_ALLREDUCE)
        bytes = op->n * herd_wire_type_size(op->wire);
    else if (op->kind == MPI_OP_ALLREDUCE_ELEMENTS || op->kind == MPI_OP_ADASUM)
        bytes = op->n * comm_mpi_elem_size(op->elem);
    else if (op->kind == MPI_OP_ALLGATHERV_BYTES || op->kind == MPI_OP_ALLGATHERV_BYTES_NOW)
        for (int r = 0; r < op->count; r++)
            bytes += (size_t)op->counts[r];
    double mib = (double)bytes / (1024.0 * 1024.0);
    if (mib >= 0.1)
        snprintf(out, cap, "%s '%s', %.1f MiB", kinds[op->kind], op->tag, mib);
    else
        snprintf(out, cap, "%s '%s', %zu bytes", kinds[op->kind], op->tag, bytes);
}

static void check_abort_request(comm_mpi *m)
{
    /* Called at every poll: the common case must not take the lock. */
    if (!__atomic_load_n(&m->abort_requested, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&m->mu);
    bool requested = m->abort_requested;
    int code = m->abort_code;
    char msg[sizeof m->abort_msg];
    snprintf(msg, sizeof msg, "%s", m->abort_msg);
    pthread_mutex_unlock(&m->mu);
    if (requested)
        comm_mpi_fatal(m, code, msg);
}

/* Polls req to completion, keeping the stall inspector and abort requests served:
 * flat out for spin_s, then sleeping between polls, up to max_sleep_s (0: never). */
static int wait_request_polling(comm_mpi *m, MPI_Request *req, double spin_s, double max_sleep_s)
{
    double sleep = 1e-6, spin_until = herd_now() + spin_s;
    for (unsigned polls = 1;; polls++) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done)
            return rc;
        /* Between MPI_Tests only what must be: a fragment that arrives waits for the
         * next test, so the clocks are read every POLLS_PER_CHECK tests. */
        if (spin_s > 0 && polls % POLLS_PER_CHECK) /* a background wait tests once per sleep */
            continue;
        comm_mpi_stall_poll(m);
        check_abort_request(m);
        if (max_sleep_s > 0 && herd_now() > spin_until) {
            herd_sleep(sleep);
            sleep = sleep * 2 < max_sleep_s ? sleep * 2 : max_sleep_s;
        }
    }
}

static int wait_request(comm_mpi *m, MPI_Request *req)
{
    return wait_request_polling(m, req, m->spin_s, m->poll_sleep_max_s);
}

int comm_mpi_wait_request(comm_mpi *m, MPI_Request *req) { return wait_request(m, req); }

static MPI_Datatype wire_datatype(const comm_mpi *m, herd_wire_type wire)
{
    return wire == HERD_WIRE_FP32 ? MPI_FLOAT : m->half_type;
}

static MPI_Op wire_sum(const comm_mpi *m, herd_wire_type wire)
{
    return wire == HERD_WIRE_FP32 ? MPI_SUM : wire == HERD_WIRE_FP16 ? m->fp16_sum : m->bf16_sum;
}

/* One in-place MPI_Iallreduce of n elements in their wire type, polled to completion. */
static int iallreduce_wire(comm_mpi *m, void *x, int n, herd_wire_type wire)
{
    MPI_Request req;
    bool picked = m->algo_enabled;
    comm_mpi_algo_pick(m, (size_t)n * herd_wire_type_size(wire));
    int rc = MPI_Iallreduce(MPI_IN_PLACE, x, n, wire_datatype(m, wire), wire_sum(m, wire), m->world,
                            &req);
    comm_mpi_algo_started(m, picked);
    return rc == MPI_SUCCESS ? wait_request(m, &req) : rc;
}

/* Tag of herd's point-to-point messages (collectives never match them). */
#define P2P_TAG 1

static int send_recv(comm_mpi *m, const mpi_op *op)
{
    MPI_Request recv = MPI_REQUEST_NULL, send = MPI_REQUEST_NULL;
    int rc = MPI_SUCCESS;
    if (op->source >= 0)
        rc = MPI_Irecv(op->data, (int)op->recv_bytes, MPI_BYTE, op->source, P2P_TAG, m->world, &recv);
    if (rc == MPI_SUCCESS && op->dest >= 0)
        rc = MPI_Isend(op->src, (int)op->bytes, MPI_BYTE, op->dest, P2P_TAG, m->world, &send);
    if (rc == MPI_SUCCESS) /* a null request completes at once */
        rc = wait_request(m, &recv);
    if (rc == MPI_SUCCESS)
        rc = wait_request(m, &send);
    return rc;
}

/* x[0..n) scaled and cast to the 16-bit wire in m->stage, grown to the largest slice
 * once and then reused. */
static int to_wire(comm_mpi *m, const mpi_op *op, const float *x, int n, char *err, size_t cap)
{
    if ((size_t)n > m->stage_cap) {
        uint16_t *grown = realloc(m->stage, (size_t)n * sizeof *grown);
        if (!grown) {
            snprintf(err, cap, "rank %d on host %s: out of memory for a %zu-byte wire buffer",
                     m->c->rank, m->c->host, (size_t)n * sizeof *grown);
            return MPI_ERR_NO_MEM;
        }
        m->stage = grown;
        m->stage_cap = (size_t)n;
    }
    uint16_t *s = m->stage;
    float scale = op->scale;
    if (op->wire == HERD_WIRE_FP16)
        for (int i = 0; i < n; i++)
            s[i] = herd_float_to_half(x[i] * scale);
    else
        for (int i = 0; i < n; i++)
            s[i] = herd_float_to_bf16(x[i] * scale);
    return MPI_SUCCESS;
}

static void from_wire(herd_wire_type wire, const uint16_t *s, float *x, int n)
{
    if (wire == HERD_WIRE_FP16)
        for (int i = 0; i < n; i++)
            x[i] = herd_half_to_float(s[i]);
    else
        for (int i = 0; i < n; i++)
            x[i] = herd_bf16_to_float(s[i]);
}

/* Returns the whole pages inside x[0..n) to the system (they read as zero after). */
static void release_pages(float *x, size_t n)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)x + page - 1) / page * page, hi = (uintptr_t)(x + n) / page * page;
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advice: a refusal only costs memory */
}

/* A float slice summed on its wire. Like NCCL, a 16-bit wire carries each rank's
 * values already scaled, so that the sum of the ranks cannot overflow where the mean
 * would not; fp32 is scaled after the sum. */
static int reduce_floats(comm_mpi *m, const mpi_op *op, float *x, int n, char *err, size_t cap)
{
    if (op->wire == HERD_WIRE_FP32) {
        int rc = iallreduce_wire(m, x, n, HERD_WIRE_FP32);
        if (rc == MPI_SUCCESS && op->scale != 1.0f)
            for (int i = 0; i < n; i++)
                x[i] *= op->scale;
        return rc;
    }
    int rc = to_wire(m, op, x, n, err, cap);
    if (rc == MPI_SUCCESS)
        rc = iallreduce_wire(m, m->stage, n, op->wire);
    if (rc == MPI_SUCCESS)
        from_wire(op->wire, m->stage, x, n);
    return rc;
}

/* Tag of the ring's messages (the thread runs one op at a time, in the same order on
 * every rank, so they never meet another op's). */
#define RING_TAG 2

void *comm_mpi_scratch(comm_mpi *m, size_t bytes, char *err, size_t cap)
{
    if (bytes > m->ring_cap) {
        void *grown = realloc(m->ring, bytes);
        if (!grown) {
            snprintf(err, cap, "rank %d on host %s: out of memory for a %zu-byte receive buffer",
                     m->c->rank, m->c->host, bytes);
            return NULL;
        }
        m->ring = grown;
        m->ring_cap = bytes;
    }
    return m->ring;
}

/* displs[r]: where rank r's part starts, from counts (m->displs, allocated once). */
static int part_displacements(comm_mpi *m, const int *counts, char *err, size_t cap)
{
    if (!m->displs) {
        m->displs = malloc((size_t)m->c->size * sizeof *m->displs);
        if (!m->displs) {
            snprintf(err, cap, "rank %d on host %s: out of memory for %d displacements",
                     m->c->rank, m->c->host, m->c->size);
            return MPI_ERR_NO_MEM;
        }
    }
    for (int r = 0, at = 0; r < m->c->size; r++) {
        m->displs[r] = at;
        at += counts[r];
    }
    return MPI_SUCCESS;
}

/* A reduce-scatter as a ring: in N-1 steps each rank passes one part's partial sum to
 * the next and adds the one it receives, so it sends (N-1)/N of the buffer, as a ring
 * allreduce's first half does, and ends with the sum of its own part in place. Open
 * MPI's MPI_Ireduce_scatter reduces the whole buffer to one rank and scatters it: 1.25x
 * an allreduce's traffic on 2 ranks, measured. Sums start at the part's next rank; on 2
 * ranks that is the allreduce's result bit for bit (a + b = b + a). */
static int ring_reduce_scatter(comm_mpi *m, char *x, const int *counts, MPI_Datatype type,
                               size_t elem, MPI_Op sum, char *err, size_t cap)
{
    int size = m->c->size, me = m->c->rank, biggest = 0;
    int rc = part_displacements(m, counts, err, cap);
    for (int r = 0; r < size; r++)
        biggest = counts[r] > biggest ? counts[r] : biggest;
    if (rc == MPI_SUCCESS && !comm_mpi_scratch(m, (size_t)biggest * elem, err, cap))
        return MPI_ERR_NO_MEM;
    int next = (me + 1) % size, prev = (me + size - 1) % size;
    for (int k = 0; rc == MPI_SUCCESS && k < size - 1; k++) {
        int send = ((me - k - 1) % size + size) % size, recv = ((me - k - 2) % size + size) % size;
        MPI_Request rq = MPI_REQUEST_NULL, sq = MPI_REQUEST_NULL;
        rc = MPI_Irecv(m->ring, counts[recv], type, prev, RING_TAG, m->world, &rq);
        if (rc == MPI_SUCCESS)
            rc = MPI_Isend(x + (size_t)m->displs[send] * elem, counts[send], type, next, RING_TAG,
                           m->world, &sq);
        if (rc == MPI_SUCCESS)
            rc = wait_request(m, &rq);
        if (rc == MPI_SUCCESS)
            rc = wait_request(m, &sq);
        if (rc == MPI_SUCCESS && counts[recv] > 0)
            rc = MPI_Reduce_local(m->ring, x + (size_t)m->displs[recv] * elem, counts[recv], type,
                                  sum);
    }
    return rc;
}

/* ZeRO's reduce-scatter (comm.h). */
static int reduce_scatter(comm_mpi *m, const mpi_op *op, char *err, size_t cap)
{
    int n = (int)op->n, mine = op->counts[m->c->rank]; /* n: the counts' sum, checked */
    float *x = op->buf;
    int rc;
    if (op->wire == HERD_WIRE_FP32) {
        rc = ring_reduce_scatter(m, (char *)x, op->counts, MPI_FLOAT, sizeof *x, MPI_SUM, err, cap);
    } else {
        rc = to_wire(m, op, x, n, err, cap);
        if (rc == MPI_SUCCESS)
            rc = ring_reduce_scatter(m, (char *)m->stage, op->counts, m->half_type,
                                     sizeof *m->stage, wire_sum(m, op->wire), err, cap);
    }
    if (rc != MPI_SUCCESS)
        return rc;
    int before = m->displs[m->c->rank]; /* the ring set them */
    if (op->wire == HERD_WIRE_FP32) {
        if (op->scale != 1.0f) /* after the sum, as the fp32 allreduce */
            for (int i = before; i < before + mine; i++)
                x[i] *= op->scale;
    } else {
        from_wire(op->wire, m->stage + before, x + before, mine);
    }
    if (op->release_rest) {
        release_pages(x, (size_t)before);
        release_pages(x + before + mine, (size_t)(n - before - mine));
    }
    return MPI_SUCCESS;
}

/* ZeRO's all-gather (comm.h): every rank's part is already in place in its buffer. */
static int allgather_parts(comm_mpi *m, const mpi_op *op, char *err, size_t cap)
{
    int rc = part_displacements(m, op->counts, err, cap);
    MPI_Request req;
    if (rc == MPI_SUCCESS)
        rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, op->buf, op->counts, m->displs,
                             MPI_FLOAT, m->world, &req);
    return rc == MPI_SUCCESS ? wait_request(m, &req) : rc;
}

/* Parts of any size, each rank's from its own buffer (or in place). */
static int allgather_bytes(comm_mpi *m, const mpi_op *op, MPI_Request *req, char *err, size_t cap)
{
    int rc = part_displacements(m, op->counts, err, cap), me = m->c->rank;
    if (rc != MPI_SUCCESS)
        return rc;
    const void *src = op->data && op->src == (char *)op->data + m->displs[me] ? MPI_IN_PLACE : op->src;
    return MPI_Iallgatherv(src, op->counts[me], MPI_BYTE, op->data, op->counts, m->displs, MPI_BYTE,
                           m->world, req);
}

/* An allreduce op in int-sized pieces (MPI counts are int): a float slice on its
 * wire, or a buffer already in its wire type summed as it is, polled like every op
 * or (blocking: the reference) with MPI_Allreduce as a user calls it. */
static int reduce_pieces(comm_mpi *m, const mpi_op *op, bool blocking, char *err, size_t cap)
{
    bool floats = op->kind == MPI_OP_ALLREDUCE;
    size_t elem = floats ? sizeof(float) : herd_wire_type_size(op->wire);
    char *base = floats ? (char *)op->buf : op->data;
    int rc = MPI_SUCCESS;
    for (size_t off = 0; off < op->n && rc == MPI_SUCCESS; off += COMM_MPI_MAX_PIECE) {
        int n = (int)(op->n - off < COMM_MPI_MAX_PIECE ? op->n - off : COMM_MPI_MAX_PIECE);
        void *x = base + off * elem;
        if (floats)
            rc = reduce_floats(m, op, x, n, err, cap);
        else if (blocking)
            rc = MPI_Allreduce(MPI_IN_PLACE, x, n, wire_datatype(m, op->wire),
                               wire_sum(m, op->wire), m->world);
        else
            rc = iallreduce_wire(m, x, n, op->wire);
    }
    return rc;
}

/* Polls a ping-pong message, yielding the core between polls: with more ranks than
 * cores the peer must run to answer, and a plain spin costs a scheduler time slice
 * per round trip (measured: 7.9 ms instead of 1 us on 2 oversubscribed cores). */
static int wait_yielding(comm_mpi *m, MPI_Request *req)
{
    double give_up = herd_now() + YIELD_SECONDS;
    for (;;) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done)
            return rc;
        if (herd_now() > give_up) /* a peer still busy elsewhere: the usual wait */
            return wait_request(m, req);
        sched_yield();
    }
}

/* The timeline's ping-pongs (see clock_samples in comm.h). A poll that notices a
 * message late only lengthens that round's round trip, and the estimator keeps the
 * shortest round. */
static int clock_rounds(comm_mpi *m, const mpi_op *op)
{
    enum { CLOCK_TAG = 7001 };
    int me = m->c->rank, rc = MPI_SUCCESS;
    for (int peer = 1; peer < m->c->size && rc == MPI_SUCCESS; peer++) {
        if (me != 0 && me != peer)
            continue;
        for (int i = 0; i < op->count && rc == MPI_SUCCESS; i++) {
            MPI_Request recv = MPI_REQUEST_NULL, send = MPI_REQUEST_NULL;
            double times[2];
            char ping = 1;
            if (me == 0) {
                double *s = (double *)op->data + ((size_t)peer * (size_t)op->count + (size_t)i) * 4;
                rc = MPI_Irecv(times, 2, MPI_DOUBLE, peer, CLOCK_TAG, m->world, &recv);
                s[0] = herd_now();
                if (rc == MPI_SUCCESS)
                    rc = MPI_Isend(&ping, 1, MPI_BYTE, peer, CLOCK_TAG, m->world, &send);
                if (rc == MPI_SUCCESS)
                    rc = wait_yielding(m, &send);
                if (rc == MPI_SUCCESS)
                    rc = wait_yielding(m, &recv);
                s[3] = herd_now();
                s[1] = times[0];
                s[2] = times[1];
            } else {
                rc = MPI_Irecv(&ping, 1, MPI_BYTE, 0, CLOCK_TAG, m->world, &recv);
                if (rc == MPI_SUCCESS)
                    rc = wait_yielding(m, &recv);
                times[0] = herd_now();
                times[1] = herd_now();
                if (rc == MPI_SUCCESS)
                    rc = MPI_Isend(times, 2, MPI_DOUBLE, 0, CLOCK_TAG, m->world, &send);
                if (rc == MPI_SUCCESS)
                    rc = wait_yielding(m, &send);
            }
        }
    }
    return rc;
}

static void run_op(comm_mpi *m, mpi_op *op, char *err, size_t cap)
{
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_SUCCESS;
    const char *what = "";
    bool picked;
    switch (op->kind) {
    case MPI_OP_ALLREDUCE:
    case MPI_OP_ALLREDUCE_TYPED:
        what = "MPI_Iallreduce";
        rc = reduce_pieces(m, op, false, err, cap);
        break;
    case MPI_OP_REFERENCE_ALLREDUCE: {
        what = "MPI_Allreduce";
        double start = MPI_Wtime();
        for (int i = 0; i < op->count && rc == MPI_SUCCESS; i++)
            rc = reduce_pieces(m, op, true, err, cap);
        *op->seconds = MPI_Wtime() - start;
        break;
    }
    case MPI_OP_SENDRECV:
        what = "MPI_Isend/MPI_Irecv";
        rc = send_recv(m, op);
        break;
    case MPI_OP_BROADCAST:
        what = "MPI_Ibcast";
        rc = MPI_Ibcast(op->data, (int)op->bytes, MPI_BYTE, op->root, m->world, &req);
        break;
    case MPI_OP_ALLREDUCE_F64:
    case MPI_OP_ALLREDUCE_F64_ASYNC:
        what = "MPI_Iallreduce";
        picked = m->algo_enabled;
        comm_mpi_algo_pick(m, (size_t)op->count * sizeof(double));
        rc = MPI_Iallreduce(MPI_IN_PLACE, op->data, op->count, MPI_DOUBLE, MPI_SUM, m->world, &req);
        comm_mpi_algo_started(m, picked);
        break;
    case MPI_OP_ALLGATHER: {
        what = "MPI_Iallgather";
        /* MPI forbids aliasing the send buffer with the receive buffer. */
        const void *src = op->data && op->src == (char *)op->data + (size_t)m->c->rank * op->bytes
                              ? MPI_IN_PLACE
                              : op->src;
        rc = MPI_Iallgather(src, (int)op->bytes, MPI_BYTE, op->data, (int)op->bytes, MPI_BYTE,
                            m->world, &req);
        break;
    }
    case MPI_OP_BARRIER:
        what = "MPI_Ibarrier";
        rc = MPI_Ibarrier(m->world, &req);
        break;
    case MPI_OP_GATHER: {
        what = "MPI_Igatherv";
        bool root = m->c->rank == op->root;
        /* No arithmetic on a NULL data pointer (nothing gathered): undefined behaviour. */
        const void *src = root && op->data && op->src == (char *)op->data + op->displs[op->root]
                              ? MPI_IN_PLACE
                              : op->src;
        rc = MPI_Igatherv(src, (int)op->bytes, MPI_BYTE, op->data, op->counts, op->displs,
                          MPI_BYTE, op->root, m->world, &req);
        break;
    }
    case MPI_OP_REDUCE_SCATTER:
        what = "MPI_Ireduce_scatter";
        rc = reduce_scatter(m, op, err, cap);
        break;
    case MPI_OP_ALLGATHERV:
    case MPI_OP_ALLGATHERV_F32:
        what = "MPI_Iallgatherv";
        rc = allgather_parts(m, op, err, cap);
        break;
    case MPI_OP_REDUCE_SCATTER_F64:
        what = "the exact sums' reduce-scatter";
        rc = ring_reduce_scatter(m, op->data, op->counts, MPI_DOUBLE, sizeof(double), MPI_SUM, err,
                                 cap);
        break;
    case MPI_OP_ALLGATHERV_BYTES:
    case MPI_OP_ALLGATHERV_BYTES_NOW:
        what = "MPI_Iallgatherv";
        rc = allgather_bytes(m, op, &req, err, cap);
        break;
    case MPI_OP_ALLREDUCE_ELEMENTS:
        what = "MPI_Iallreduce";
        rc = comm_mpi_reduce_elements(m, op);
        break;
    case MPI_OP_ADASUM:
        what = "Adasum's MPI_Isend/MPI_Irecv";
        rc = comm_mpi_adasum(m, op, err, cap);
        break;
    case MPI_OP_CLOCK_SAMPLES:
        rc = clock_rounds(m, op);
        if (rc != MPI_SUCCESS)
            comm_mpi_describe_error(m, rc, "clock ping-pong", err, cap);
        return;
    }
    /* The asynchronous allreduce_f64 (the training metrics) runs while the training
     * thread computes, and the next step does not need it for a whole forward and
     * backward: no spin and sparse polls, which would take the core from that thread
     * (measured on one-core hosts: forward and backward slower by milliseconds). */
    bool background = op->kind == MPI_OP_ALLREDUCE_F64_ASYNC;
    double max_sleep = background && m->poll_sleep_max_s > 0 ? BACKGROUND_POLL_S : m->poll_sleep_max_s;
    if (rc == MPI_SUCCESS)
        rc = wait_request_polling(m, &req, background ? 0 : m->spin_s, max_sleep);
    if (rc != MPI_SUCCESS && !err[0]) /* an op that said what failed keeps its own words */
        comm_mpi_describe_error(m, rc, what, err, cap);
}

void comm_mpi_run_op(comm_mpi *m, mpi_op *op, char *err, size_t cap)
{
    m->current = op;
    m->current_start = herd_now();
    m->started = op->seq;
    m->ran_p2p |= op->kind == MPI_OP_SENDRECV;
    run_op(m, op, err, cap);
    m->current = NULL;
}

/* Runs the head of the queue, then retires it. */
static void run_head(comm_mpi *m, mpi_op *op)
{
    char err[sizeof op->error] = "";
    comm_mpi_run_op(m, op, err, sizeof err);
    /* Recorded before the op is retired: wait_all then orders it before the reader. */
    const herd_trace_sink *trace = m->c->trace;
    bool gradients = op->kind == MPI_OP_ALLREDUCE || op->kind == MPI_OP_REDUCE_SCATTER ||
                     op->kind == MPI_OP_ALLGATHERV || op->kind == MPI_OP_ADASUM;
    if (gradients && trace) {
        size_t wire_bytes = op->n * (op->kind == MPI_OP_ADASUM ? comm_mpi_elem_size(op->elem)
                                                               : herd_wire_type_size(op->wire));
        const char *kind = op->kind == MPI_OP_ALLREDUCE        ? "allreduce"
                           : op->kind == MPI_OP_REDUCE_SCATTER ? "reduce-scatter"
                           : op->kind == MPI_OP_ADASUM         ? "adasum"
                                                               : "all-gather";
        char name[80];
        snprintf(name, sizeof name, "%s %s", kind, op->tag);
        trace->comm(trace->ctx, name, op->launched, m->current_start, herd_now(), wire_bytes);
    }

    pthread_mutex_lock(&m->mu);
    __atomic_store_n(&m->head, op->next, __ATOMIC_RELEASE);
    if (!m->head)
        m->tail = NULL;
    m->completed = op->seq;
    if (comm_mpi_op_is_async(op->kind)) {
        if (err[0] && !m->async_error[0]) /* the first failure is the informative one */
            snprintf(m->async_error, sizeof m->async_error, "%s", err);
        op->next = m->free_ops;
        m->free_ops = op;
    } else {
        snprintf(op->error, sizeof op->error, "%s", err);
        op->done = true;
    }
    /* Wake the waiters only when one can proceed: the owner of a blocking op, wait_all
     * once the queue is empty, or wait_ticket at its ticket. Waking wait_all after every
     * queued op costs a context switch each, which with few cores delays the next
     * reduction. */
    if (!comm_mpi_op_is_async(op->kind) || !m->head || (m->awaited && op->seq >= m->awaited))
        pthread_cond_broadcast(&m->done_cv);
    pthread_mutex_unlock(&m->mu);
}

/* Under mu: sleeps until there is work, or for a while (the stall inspector's turn).
 * While a caller runs a blocking op itself (inline_busy) it sleeps on: that caller
 * serves the inspector and an abort, and only one thread calls MPI for this queue.
 * thread_idle, set since the thread's last MPI call, ends here. */
static void wait_for_work(comm_mpi *m)
{
    bool timed_out = false;
    m->thread_idle = true;
    while (m->inline_busy || (!timed_out && !m->head && !m->shutdown && !m->abort_requested)) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 50 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        timed_out = pthread_cond_timedwait(&m->work_cv, &m->mu, &until) == ETIMEDOUT;
    }
    m->thread_idle = false;
}

void *comm_mpi_thread_main(void *arg)
{
    comm_mpi *m = arg;
    mpi_op_kind last = MPI_OP_BARRIER;
    for (;;) {
        /* Briefly poll for the next op before sleeping: reductions arrive in bursts
         * (buckets in backward), and a wake-up costs tens of microseconds. */
        double poll_until = herd_now() + (last == MPI_OP_REDUCE_SCATTER ? ZERO_POLL_S : IDLE_POLL_S);
        while (!__atomic_load_n(&m->head, __ATOMIC_ACQUIRE) && herd_now() < poll_until)
            sched_yield();
        pthread_mutex_lock(&m->mu);
        wait_for_work(m);
        mpi_op *op = m->head;
        bool stop = m->shutdown && !op;
        pthread_mutex_unlock(&m->mu);
        check_abort_request(m);
        if (op) {
            last = op->kind;
            run_head(m, op);
        }
        else if (stop)
            break;
        comm_mpi_stall_poll(m);
        pthread_mutex_lock(&m->mu); /* no MPI from here until wait_for_work returns */
        m->thread_idle = true;
        pthread_mutex_unlock(&m->mu);
    }
    comm_mpi_stall_drain(m);
    return NULL;
}
