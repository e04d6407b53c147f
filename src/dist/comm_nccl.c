/* The NCCL communicator for gradients in GPU memory (see comm.h). Bootstrapped over
 * the wrapped MPI communicator: rank 0 makes the NCCL unique id and broadcasts it.
 * Reductions run on a communication stream of their own that first waits for an
 * event recorded on the compute stream, so a bucket's reduction overlaps the rest
 * of backward; wait_all makes the compute stream wait for the communication stream,
 * and the optimizer's kernels queue behind it without the host blocking; wait_ticket
 * does the same up to one operation (an event recorded after each).
 *
 * ZeRO's parts differ in size per rank (a bucket is cut where the ranks' slices of
 * the whole flat buffer fall, so most buckets are one rank's alone: counts like
 * [n, 0]), and ncclReduceScatter/ncclAllGather take one count for every rank. Padding
 * every part to the largest would move and hold up to N times the bucket; instead a
 * reduce-scatter is one ncclReduce per part to the rank that owns it and an all-gather
 * one ncclBroadcast per part from its owner, grouped so that NCCL runs them together
 * (about the bytes on the wire of the collectives themselves, in place, no copies).
 * Point-to-point transfers (pipeline stages) go through host memory and the MPI
 * communicator (comm_device.c). */
#include "herd_config.h"
#include "core/error.h"
#include "dist/comm.h"

#if HERD_HAVE_NCCL
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"

#define HERD_NCCL(call, what)                                                              \
    do {                                                                                   \
        ncclResult_t herd_nr_ = (call);                                                    \
        if (herd_nr_ != ncclSuccess)                                                       \
            return HERD_ERR(HERD_ERR_INTERNAL, "NCCL: %s failed: %s (%s); rerun with "     \
                            "NCCL_DEBUG=WARN for details", what, ncclGetErrorString(herd_nr_), \
                            ncclGetLastError(NULL));                                       \
    } while (0)

/* Events recorded after the last operations, by ticket modulo this: a slot reused by
 * a later operation still orders after the earlier one (one stream, in order). */
#define NCCL_TICKET_EVENTS 64

typedef struct nccl_impl {
    ncclComm_t comm;
    cudaStream_t stream;        /* communication */
    cudaEvent_t compute_ready;  /* recorded on the compute stream before each reduction */
    cudaEvent_t comm_done;      /* recorded on the communication stream in wait_all */
    void *wire;                 /* fp16/bf16 copies of a bucket (--compress) */
    size_t wire_bytes;
    uint64_t queued;            /* operations started: the last one's ticket */
    cudaEvent_t after[NCCL_TICKET_EVENTS]; /* after[t % N]: recorded after operation t */
} nccl_impl;

static nccl_impl *impl_of(herd_comm *c) { return herd_comm_wrapper_impl(c); }

bool herd_have_nccl(void) { return true; }

/* Room for n 16-bit values; the old buffer may still be read by queued reductions. */
static herd_status wire_room(nccl_impl *k, size_t n)
{
    size_t bytes = n * 2;
    if (bytes <= k->wire_bytes)
        return HERD_OK;
    HERD_CUDA(cudaStreamSynchronize(k->stream), "waiting for queued reductions");
    herd_cuda_free(k->wire);
    k->wire = NULL;
    k->wire_bytes = 0;
    if (!(k->wire = herd_cuda_alloc(bytes)))
        return HERD_ERR_NOMEM;
    k->wire_bytes = bytes;
    return HERD_OK;
}

/* The communication stream waits for what the compute stream has queued so far. */
static herd_status order_after_compute(nccl_impl *k)
{
    HERD_CUDA(cudaEventRecord(k->compute_ready, herd_cuda_ctx_get()->stream),
              "recording the gradients' event");
    HERD_CUDA(cudaStreamWaitEvent(k->stream, k->compute_ready, 0),
              "ordering the reduction after backward");
    return HERD_OK;
}

/* An operation was queued: its ticket, and the event that marks its end. */
static herd_status queued(nccl_impl *k)
{
    k->queued++;
    HERD_CUDA(cudaEventRecord(k->after[k->queued % NCCL_TICKET_EVENTS], k->stream),
              "recording a reduction's event");
    return HERD_OK;
}

/* A sum scaled by 1/ranks is NCCL's average, where it has one. */
static bool is_average(const herd_comm *c, float scale)
{
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
    return scale * (float)c->size == 1.0f;
#else
    (void)c, (void)scale;
    return false;
#endif
}

static ncclRedOp_t sum_or_average(const herd_comm *c, float scale)
{
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
    if (is_average(c, scale))
        return ncclAvg;
#endif
    (void)c, (void)scale;
    return ncclSum;
}

static herd_status nccl_allreduce_start(herd_comm *c, float *buf, size_t n, float scale,
                                        herd_wire_type wire, const char *tag)
{
    (void)tag;
    nccl_impl *k = impl_of(c);
    if (n == 0)
        return HERD_OK;
    if (!buf)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "allreduce_start: NULL buffer for %zu elements", n);
    if (wire != HERD_WIRE_FP32)
        HERD_TRY(wire_room(k, n)); /* before the event: its zeroing is compute-stream work */
    HERD_TRY(order_after_compute(k));
    if (wire == HERD_WIRE_FP32) {
        HERD_NCCL(ncclAllReduce(buf, buf, n, ncclFloat32, sum_or_average(c, scale), k->comm,
                                k->stream),
                  "ncclAllReduce");
        if (!is_average(c, scale))
            HERD_TRY(herd_cuda_scale_on(n, buf, scale, k->stream));
        return queued(k);
    }
    /* Scaled before the cast so that the sum of the ranks' halves cannot overflow
     * where the mean would not. */
    bool bf16 = wire == HERD_WIRE_BF16;
    HERD_TRY(herd_cuda_cast_to_16(n, buf, scale, bf16, k->wire, k->stream));
    HERD_NCCL(ncclAllReduce(k->wire, k->wire, n, bf16 ? ncclBfloat16 : ncclFloat16, ncclSum,
                            k->comm, k->stream),
              "ncclAllReduce (16-bit)");
    HERD_TRY(herd_cuda_cast_from_16(n, k->wire, bf16, buf, k->stream));
    return queued(k);
}

/* One NCCL call per rank's part of buf (elements of elem bytes), grouped: reduce the
 * part to its rank (reduce) or broadcast it from there, in place. Every rank skips
 * the same empty parts. The group is ended whatever happened inside it. */
static herd_status per_part(herd_comm *c, void *buf, size_t elem, ncclDataType_t type,
                            const int *counts, bool reduce, ncclRedOp_t op)
{
    nccl_impl *k = impl_of(c);
    HERD_NCCL(ncclGroupStart(), "ncclGroupStart");
    ncclResult_t r = ncclSuccess;
    size_t at = 0;
    for (int root = 0; r == ncclSuccess && root < c->size; at += (size_t)counts[root++]) {
        if (counts[root] == 0)
            continue;
        char *part = (char *)buf + at * elem;
        r = reduce ? ncclReduce(part, part, (size_t)counts[root], type, op, root, k->comm, k->stream)
                   : ncclBroadcast(part, part, (size_t)counts[root], type, root, k->comm, k->stream);
    }
    ncclResult_t end = ncclGroupEnd();
    HERD_NCCL(r, reduce ? "ncclReduce (a rank's part)" : "ncclBroadcast (a rank's part)");
    HERD_NCCL(end, "ncclGroupEnd");
    return HERD_OK;
}

static herd_status nccl_reduce_scatter_start(herd_comm *c, float *buf, const int *counts,
                                             float scale, herd_wire_type wire, bool release_rest,
                                             const char *tag)
{
    (void)release_rest, (void)tag; /* host memory only (comm.h) */
    nccl_impl *k = impl_of(c);
    size_t n, at;
    HERD_TRY(herd_comm_parts(c, counts, "reduce_scatter_start", &n, &at));
    size_t mine = (size_t)counts[c->rank];
    if (n == 0)
        return HERD_OK;
    if (!buf)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "reduce_scatter_start: NULL buffer for %zu elements", n);
    if (wire != HERD_WIRE_FP32)
        HERD_TRY(wire_room(k, n));
    HERD_TRY(order_after_compute(k));
    if (wire == HERD_WIRE_FP32) {
        HERD_TRY(per_part(c, buf, sizeof(float), ncclFloat32, counts, true, sum_or_average(c, scale)));
        if (!is_average(c, scale) && mine)
            HERD_TRY(herd_cuda_scale_on(mine, buf + at, scale, k->stream));
        return queued(k);
    }
    /* As allreduce_start: each rank's values scaled, then cast, then summed. */
    bool bf16 = wire == HERD_WIRE_BF16;
    HERD_TRY(herd_cuda_cast_to_16(n, buf, scale, bf16, k->wire, k->stream));
    HERD_TRY(per_part(c, k->wire, 2, bf16 ? ncclBfloat16 : ncclFloat16, counts, true, ncclSum));
    if (mine)
        HERD_TRY(herd_cuda_cast_from_16(mine, (char *)k->wire + at * 2, bf16, buf + at, k->stream));
    return queued(k);
}

static herd_status nccl_allgather_start(herd_comm *c, float *buf, const int *counts, const char *tag)
{
    (void)tag;
    nccl_impl *k = impl_of(c);
    size_t n, at;
    HERD_TRY(herd_comm_parts(c, counts, "allgather_start", &n, &at));
    if (n == 0)
        return HERD_OK;
    if (!buf)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "allgather_start: NULL buffer for %zu elements", n);
    HERD_TRY(order_after_compute(k)); /* the optimizer's update of this rank's part */
    HERD_TRY(per_part(c, buf, sizeof(float), ncclFloat32, counts, false, ncclSum));
    return queued(k);
}

static uint64_t nccl_ticket(herd_comm *c) { return impl_of(c)->queued; }

/* Reports a failed operation as wait_all does. */
static herd_status async_error(nccl_impl *k)
{
    ncclResult_t async = ncclSuccess;
    HERD_NCCL(ncclCommGetAsyncError(k->comm, &async), "reading the communicator's state");
    if (async != ncclSuccess)
        return HERD_ERR(HERD_ERR_INTERNAL,
                        "NCCL: a reduction failed: %s; rerun with NCCL_DEBUG=WARN for details",
                        ncclGetErrorString(async));
    return HERD_OK;
}

/* The compute stream waits for operations up to `ticket` (the host does not). */
static herd_status nccl_wait_ticket(herd_comm *c, uint64_t ticket)
{
    nccl_impl *k = impl_of(c);
    if (ticket > k->queued)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "wait_ticket: ticket %llu, but %llu operations were "
                        "started", (unsigned long long)ticket, (unsigned long long)k->queued);
    HERD_TRY(async_error(k));
    if (ticket == 0)
        return HERD_OK;
    HERD_CUDA(cudaStreamWaitEvent(herd_cuda_ctx_get()->stream,
                                  k->after[ticket % NCCL_TICKET_EVENTS], 0),
              "ordering the forward after the parameters' all-gather");
    return HERD_OK;
}

static herd_status nccl_wait_all(herd_comm *c)
{
    nccl_impl *k = impl_of(c);
    /* Host-memory reductions (allreduce_f64_start) go to the host communicator. */
    herd_comm *host = herd_comm_wrapped(c);
    HERD_TRY(host->ops->wait_all(host));
    HERD_TRY(async_error(k));
    HERD_CUDA(cudaEventRecord(k->comm_done, k->stream), "recording the reductions' event");
    HERD_CUDA(cudaStreamWaitEvent(herd_cuda_ctx_get()->stream, k->comm_done, 0),
              "ordering the optimizer after the reductions");
    return HERD_OK;
}

/* A group's own NCCL communicator, bootstrapped over the group. */
static herd_status nccl_over(herd_comm *host, const herd_backend *be, herd_comm **out)
{
    (void)be;
    return herd_comm_nccl_create(host, out);
}

static herd_status nccl_split(herd_comm *c, int color, int key, const char *name, herd_comm **out)
{
    return herd_comm_wrapper_split(c, color, key, name, nccl_over, out);
}

/* In-place sum of a buffer already in its type (the allreduce benchmark's). */
static herd_status nccl_allreduce_typed_start(herd_comm *c, void *buf, size_t n,
                                              herd_wire_type type, const char *tag)
{
    (void)tag;
    nccl_impl *k = impl_of(c);
    if (n == 0)
        return HERD_OK;
    if (!buf)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "allreduce_typed_start: NULL buffer for %zu elements", n);
    ncclDataType_t t = type == HERD_WIRE_FP16   ? ncclFloat16
                       : type == HERD_WIRE_BF16 ? ncclBfloat16
                                                : ncclFloat32;
    HERD_TRY(order_after_compute(k));
    HERD_NCCL(ncclAllReduce(buf, buf, n, t, ncclSum, k->comm, k->stream), "ncclAllReduce");
    return queued(k);
}

static herd_status nccl_sync(herd_comm *c)
{
    nccl_impl *k = impl_of(c);
    HERD_TRY(nccl_wait_all(c));
    HERD_CUDA(cudaStreamSynchronize(k->stream), "waiting for the reductions");
    return HERD_OK;
}

static void nccl_destroy(herd_comm *c)
{
    nccl_impl *k = impl_of(c);
    if (k->stream)
        cudaStreamSynchronize(k->stream);
    if (k->comm)
        ncclCommDestroy(k->comm);
    if (k->compute_ready)
        cudaEventDestroy(k->compute_ready);
    if (k->comm_done)
        cudaEventDestroy(k->comm_done);
    for (int i = 0; i < NCCL_TICKET_EVENTS; i++)
        if (k->after[i])
            cudaEventDestroy(k->after[i]);
    if (k->stream)
        cudaStreamDestroy(k->stream);
    herd_cuda_free(k->wire);
    free(k);
    free(c);
}

static const herd_comm_ops nccl_ops = {
    .name = "nccl",
    .destroy = nccl_destroy,
    .allreduce_start = nccl_allreduce_start,
    .wait_all = nccl_wait_all,
    .device_memory = true,
    .sync = nccl_sync,
    .allreduce_typed_start = nccl_allreduce_typed_start,
    .reduce_scatter_start = nccl_reduce_scatter_start,
    .allgather_start = nccl_allgather_start,
    .ticket = nccl_ticket,
    .wait_ticket = nccl_wait_ticket,
    .split = nccl_split,
    /* p2p_start / p2p_wait: the wrapper's, through host memory and MPI */
    /* the collectives for set-up and metrics: the MPI communicator's, in host memory */
};

static herd_status nccl_setup(herd_comm *c, herd_comm *host, nccl_impl *k)
{
    const herd_cuda_ctx *ctx = herd_cuda_ctx_get();
    HERD_CUDA(cudaSetDevice(ctx->device), "selecting the rank's GPU");
    /* Non-blocking: independent of the legacy default stream's implicit syncs. */
    HERD_CUDA(cudaStreamCreateWithFlags(&k->stream, cudaStreamNonBlocking),
              "creating the communication stream");
    HERD_CUDA(cudaEventCreateWithFlags(&k->compute_ready, cudaEventDisableTiming),
              "creating an event");
    HERD_CUDA(cudaEventCreateWithFlags(&k->comm_done, cudaEventDisableTiming),
              "creating an event");
    for (int i = 0; i < NCCL_TICKET_EVENTS; i++)
        HERD_CUDA(cudaEventCreateWithFlags(&k->after[i], cudaEventDisableTiming),
                  "creating an event");
    ncclUniqueId id;
    memset(&id, 0, sizeof id); /* only rank 0's is used; the others' travel uninitialised otherwise */
    herd_status st = HERD_OK;
    if (host->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess)
            st = HERD_ERR(HERD_ERR_INTERNAL, "NCCL: ncclGetUniqueId failed: %s",
                          ncclGetErrorString(r));
    }
    /* Rank 0's outcome travels with the id, so a failure there stops every rank. */
    struct { ncclUniqueId id; int status; } msg = {id, st};
    HERD_TRY(host->ops->broadcast(host, &msg, sizeof msg, 0));
    if (msg.status != HERD_OK)
        return host->rank == 0 ? st
                               : HERD_ERR(HERD_ERR_INTERNAL, "NCCL: rank 0 could not create "
                                          "the communicator's id");
    HERD_NCCL(ncclCommInitRank(&k->comm, c->size, msg.id, c->rank), "ncclCommInitRank");
    return HERD_OK;
}

herd_status herd_comm_nccl_create(herd_comm *host, herd_comm **out)
{
    *out = NULL;
    if (!host)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "NCCL communicator: NULL host communicator");
    if (!herd_backend_cuda()) {
        char why[400];
        snprintf(why, sizeof why, "%s", herd_last_error());
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "NCCL needs the cuda backend: %s", why);
    }
    nccl_impl *k = herd_xcalloc(1, sizeof *k);
    if (!k)
        return HERD_ERR_NOMEM;
    herd_comm *c = herd_comm_wrap(host, herd_backend_cuda(), &nccl_ops, k);
    if (!c) {
        free(k);
        return HERD_ERR_NOMEM;
    }
    herd_status st = nccl_setup(c, host, k);
    if (st != HERD_OK) {
        nccl_destroy(c);
        return st;
    }
    *out = c;
    return HERD_OK;
}

#else /* built without NCCL */

bool herd_have_nccl(void) { return false; }

herd_status herd_comm_nccl_create(herd_comm *host, herd_comm **out)
{
    (void)host;
    *out = NULL;
    return HERD_ERR(HERD_ERR_UNSUPPORTED,
                    "herd was built without NCCL; install NCCL (libnccl-dev) and rebuild with "
                    "-DHERD_NCCL=ON, or let gradients go through MPI and host memory");
}

#endif
