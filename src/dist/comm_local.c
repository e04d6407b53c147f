/* The single-process communicator: a group of one, every collective the identity. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "dist/comm.h"

static void local_destroy(herd_comm *c) { free(c); }

static herd_status local_allreduce_start(herd_comm *c, float *buf, size_t n, float scale,
                                         herd_wire_type wire, const char *tag)
{
    (void)c, (void)wire, (void)tag;
    if (n && !buf)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "allreduce_start: NULL buffer for %zu elements", n);
    /* The sum over one rank is the value itself; only the scale applies. */
    if (scale != 1.0f)
        for (size_t i = 0; i < n; i++)
            buf[i] *= scale;
    return HERD_OK;
}

/* One rank's part is the whole buffer. */
static herd_status local_reduce_scatter_start(herd_comm *c, float *buf, const int *counts,
                                              float scale, herd_wire_type wire, bool release_rest,
                                              const char *tag)
{
    (void)release_rest;
    if (!counts || counts[0] < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "reduce_scatter_start: no count for the one rank");
    return local_allreduce_start(c, buf, (size_t)counts[0], scale, wire, tag);
}

static herd_status local_allgather_start(herd_comm *c, float *buf, const int *counts,
                                         const char *tag)
{
    (void)c, (void)buf, (void)tag;
    if (!counts || counts[0] < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "allgather_start: no count for the one rank");
    return HERD_OK;
}

static uint64_t local_ticket(herd_comm *c)
{
    (void)c;
    return 0; /* every operation completes as it starts */
}

static herd_status local_wait_ticket(herd_comm *c, uint64_t ticket)
{
    (void)c, (void)ticket;
    return HERD_OK;
}

static herd_status local_wait_all(herd_comm *c)
{
    (void)c;
    return HERD_OK;
}

static herd_status local_allreduce_typed_start(herd_comm *c, void *buf, size_t n,
                                               herd_wire_type type, const char *tag)
{
    (void)c, (void)type, (void)tag;
    if (n && !buf)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "allreduce_typed_start: NULL buffer for %zu elements", n);
    return HERD_OK; /* the sum over one rank is the value itself */
}

/* The only peer is this process: a send to itself is what it receives. */
static herd_status local_sendrecv_start(herd_comm *c, const void *sendbuf, size_t send_bytes,
                                        int dest, void *recvbuf, size_t recv_bytes, int src)
{
    (void)c;
    if (dest > 0 || src > 0 || dest < -1 || src < -1)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "sendrecv: peers %d and %d but the job has one rank",
                        dest, src);
    if ((dest == 0) != (src == 0) || (dest == 0 && send_bytes != recv_bytes))
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "sendrecv: a one-rank job can only send to itself what it receives "
                        "(sending %zu bytes to %d, receiving %zu from %d)",
                        send_bytes, dest, recv_bytes, src);
    if (dest == 0 && send_bytes && sendbuf != recvbuf)
        memmove(recvbuf, sendbuf, send_bytes);
    return HERD_OK;
}

static herd_status local_broadcast(herd_comm *c, void *buf, size_t bytes, int root)
{
    (void)c, (void)buf, (void)bytes;
    if (root != 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "broadcast: root %d but the job has one rank", root);
    return HERD_OK;
}

static herd_status local_allreduce_f64(herd_comm *c, double *vals, int n)
{
    (void)c, (void)vals, (void)n;
    return HERD_OK;
}

static herd_status local_reduce_scatter_f64(herd_comm *c, double *vals, const int *counts)
{
    (void)c, (void)vals;
    if (!counts || counts[0] < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "reduce_scatter_f64: no count for the one rank");
    return HERD_OK; /* one rank's part is the whole buffer, its sum itself */
}

static herd_status local_allgatherv_f32(herd_comm *c, float *vals, const int *counts)
{
    (void)c, (void)vals;
    if (!counts || counts[0] < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "allgatherv_f32: no count for the one rank");
    return HERD_OK;
}

static herd_status local_allreduce_f64_start(herd_comm *c, double *vals, int n, const char *tag)
{
    (void)tag;
    return local_allreduce_f64(c, vals, n);
}

static herd_status local_allgather(herd_comm *c, const void *mine, void *all, size_t bytes)
{
    (void)c;
    if (bytes && mine != all)
        memmove(all, mine, bytes);
    return HERD_OK;
}

static herd_status local_barrier(herd_comm *c)
{
    (void)c;
    return HERD_OK;
}

static herd_status local_gather(herd_comm *c, const void *mine, size_t bytes, void *all,
                                const size_t *bytes_of, int root)
{
    (void)c;
    if (root != 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "gather: root %d but the job has one rank", root);
    if (bytes != bytes_of[0])
        return HERD_ERR(HERD_ERR_INVALID_ARG, "gather: %zu bytes sent but %zu expected", bytes,
                        bytes_of[0]);
    if (bytes && mine != all)
        memmove(all, mine, bytes);
    return HERD_OK;
}

/* One rank has no other clock to compare with: rank 0's rows are zero. */
static herd_status local_clock_samples(herd_comm *c, int rounds, double *samples)
{
    (void)c;
    if (rounds > 0)
        memset(samples, 0, (size_t)rounds * 4 * sizeof *samples);
    return HERD_OK;
}

static void local_set_activity(herd_comm *c, const char *what) { (void)c, (void)what; }

/* Abort means "end the job now", and the job is this process: this is the one place
 * where library code ends the process. */
static void local_abort(herd_comm *c, int code, const char *msg)
{
    herd_log(HERD_LOG_ERROR, "abort on host %s: %s", c->host, msg ? msg : "(no message)");
    exit(code);
}

static const herd_comm_ops local_ops = {
    .name = "local",
    .destroy = local_destroy,
    .allreduce_start = local_allreduce_start,
    .reduce_scatter_start = local_reduce_scatter_start,
    .allgather_start = local_allgather_start,
    .ticket = local_ticket,
    .wait_ticket = local_wait_ticket,
    .wait_all = local_wait_all,
    .allreduce_f64_start = local_allreduce_f64_start,
    .allreduce_typed_start = local_allreduce_typed_start,
    .sendrecv_start = local_sendrecv_start,
    .time_reference_allreduce = NULL, /* one process: no engine to compare with */
    .broadcast = local_broadcast,
    .allreduce_f64 = local_allreduce_f64,
    .reduce_scatter_f64 = local_reduce_scatter_f64,
    .allgatherv_f32 = local_allgatherv_f32,
    .allgather = local_allgather,
    .barrier = local_barrier,
    .gather = local_gather,
    .clock_samples = local_clock_samples,
    .set_activity = local_set_activity,
    .abort = local_abort,
};

herd_status herd_comm_local_create(herd_comm **out)
{
    *out = NULL;
    herd_comm *c = herd_xcalloc(1, sizeof *c);
    if (!c)
        return HERD_ERR_NOMEM;
    c->ops = &local_ops;
    c->rank = 0;
    c->size = 1;
    c->local_rank = 0;
    c->local_size = 1;
    if (gethostname(c->host, sizeof c->host - 1) != 0)
        snprintf(c->host, sizeof c->host, "unknown");
    *out = c;
    return HERD_OK;
}
