/*
 * Groups and point to point for pipelines. A split is a new communicator with its
 * own queue and thread (the data-parallel group of a stage reduces its gradients
 * there, overlapped with backward as for the whole job). Point-to-point transfers
 * (activations and their gradients between stages) are posted and completed by the
 * training thread itself on a duplicate communicator of their own, so they neither
 * wait behind queued collectives nor delay them; that needs MPI_THREAD_MULTIPLE.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/comm_mpi_internal.h"

_Static_assert(sizeof(MPI_Request) <= sizeof(((herd_p2p *)0)->request),
               "herd_p2p.request must hold an MPI_Request");

/* Flat-out polling first (a message already on its way lands within microseconds),
 * then sleeps growing to this, so a stage waiting for its neighbour frees the core. */
#define P2P_SPIN_S 0.0005
#define P2P_MAX_SLEEP_S 50e-6

static herd_status need_multiple(comm_mpi *m, const char *what)
{
    if (m->thread_level >= MPI_THREAD_MULTIPLE)
        return HERD_OK;
    char who[160];
    comm_mpi_who(m, who, sizeof who);
    return HERD_ERR(HERD_ERR_UNSUPPORTED,
                    "%s: %s needs MPI_THREAD_MULTIPLE, but the MPI library provides %s; use an MPI "
                    "built with thread support (Open MPI >= 3 and MPICH provide it)",
                    who, what, comm_mpi_thread_level_name(m->thread_level));
}

herd_status comm_mpi_split(herd_comm *c, int color, int key, const char *name, herd_comm **out)
{
    comm_mpi *m = c->impl;
    *out = NULL;
    HERD_TRY(need_multiple(m, "splitting the job into groups"));
    MPI_Comm part;
    /* On the point-to-point duplicate: the training thread owns it, so no collective
     * of the communication thread runs on it meanwhile. */
    int rc = MPI_Comm_split(m->p2p, color, key, &part);
    if (rc != MPI_SUCCESS) {
        char err[384];
        comm_mpi_describe_error(m, rc, "MPI_Comm_split", err, sizeof err);
        return HERD_ERR(HERD_ERR_INTERNAL, "%s", err);
    }
    herd_status st = comm_mpi_create_on(part, &c->cfg, m->thread_level, name, out);
    MPI_Comm_free(&part); /* the new communicator holds duplicates */
    return st;
}

herd_status comm_mpi_p2p_start(herd_comm *c, herd_p2p *req, bool send, void *buf, size_t bytes,
                               int peer, int tag)
{
    comm_mpi *m = c->impl;
    HERD_TRY(need_multiple(m, "point-to-point transfers between pipeline stages"));
    if (bytes > (size_t)INT32_MAX || peer < 0 || peer >= c->size || peer == c->rank || tag < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "point-to-point %s of %zu bytes with rank %d (tag %d) from rank %d of %d: "
                        "peer, size or tag out of range",
                        send ? "send" : "receive", bytes, peer, tag, c->rank, c->size);
    memset(req, 0, sizeof *req);
    MPI_Request r;
    int rc = send ? MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, m->p2p, &r)
                  : MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, m->p2p, &r);
    if (rc != MPI_SUCCESS) {
        char err[384];
        comm_mpi_describe_error(m, rc, send ? "MPI_Isend" : "MPI_Irecv", err, sizeof err);
        return HERD_ERR(HERD_ERR_INTERNAL, "%s", err);
    }
    memcpy(req->request, &r, sizeof r);
    req->active = true;
    req->send = send;
    req->peer = peer;
    req->bytes = bytes;
    return HERD_OK;
}

herd_status comm_mpi_p2p_wait(herd_comm *c, herd_p2p *req, const char *what)
{
    comm_mpi *m = c->impl;
    if (!req->active)
        return HERD_OK;
    MPI_Request r;
    memcpy(&r, req->request, sizeof r);
    double start = herd_now(), sleep = 1e-6;
    bool warned = false;
    for (;;) {
        int done = 0;
        MPI_Status status;
        int rc = MPI_Test(&r, &done, &status);
        if (rc != MPI_SUCCESS) {
            char err[384], op[256];
            snprintf(op, sizeof op, "%s (%s rank %d)", what, req->send ? "send to" : "receive from",
                     req->peer);
            comm_mpi_describe_error(m, rc, op, err, sizeof err);
            req->active = false;
            return HERD_ERR(HERD_ERR_INTERNAL, "%s", err);
        }
        if (done) {
            req->active = false;
            /* A receive may get less than it was posted for (a pipeline posts for a
             * whole micro-batch before it knows the epoch's short last one): bytes
             * becomes what arrived, for the caller to check; more is MPI's truncation
             * error above. */
            if (!req->send) {
                int got = 0;
                MPI_Get_count(&status, MPI_BYTE, &got);
                if (got < 0 || (size_t)got > req->bytes)
                    return HERD_ERR(HERD_ERR_INTERNAL,
                                    "%s: posted for %zu bytes from rank %d, got %d; the stages "
                                    "disagree on the micro-batch size or the model",
                                    what, req->bytes, req->peer, got);
                req->bytes = (size_t)got;
            }
            return HERD_OK;
        }
        double age = herd_now() - start;
        if (age < P2P_SPIN_S)
            continue;
        const char *peer_host = m->stall.hosts ? m->stall.hosts + (size_t)req->peer * MPI_HOST_LEN : "?";
        if (age >= c->cfg.timeout_s) {
            char msg[768];
            snprintf(msg, sizeof msg,
                     "%s: no progress for %.0f s (%s rank %d on host %s; --comm-timeout %.0f s); that "
                     "rank has stopped, failed or is stuck: look for its own message above",
                     what, age, req->send ? "sending to" : "receiving from", req->peer, peer_host,
                     c->cfg.timeout_s);
            c->ops->abort(c, 1, msg);
        }
        if (!warned && age >= c->cfg.stall_warning_s) {
            char who[160];
            comm_mpi_who(m, who, sizeof who);
            herd_log(HERD_LOG_WARNING, "%s: %s: waiting for %.0f s (%s rank %d on host %s)", who,
                     what, age, req->send ? "sending to" : "receiving from", req->peer, peer_host);
            warned = true;
        }
        herd_sleep(sleep);
        sleep = sleep * 2 < P2P_MAX_SLEEP_S ? sleep * 2 : P2P_MAX_SLEEP_S;
    }
}

void comm_mpi_p2p_progress(herd_comm *c)
{
    comm_mpi *m = c->impl;
    int flag;
    /* Any MPI call runs the progress engine; a probe that matches nothing costs least. */
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, m->p2p, &flag, MPI_STATUS_IGNORE);
}
