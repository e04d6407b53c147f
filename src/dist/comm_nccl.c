/* The NCCL communicator for gradients in GPU memory (see comm.h). Bootstrapped over
 * the wrapped MPI communicator: rank 0 makes the NCCL unique id and broadcasts it.
 * Reductions run on a communication stream of their own that first waits for an
 * event recorded on the compute stream, so a bucket's reduction overlaps the rest
 * of backward; wait_all makes the compute stream wait for the communication stream,
 * and the optimizer's kernels queue behind it without the host blocking. */
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

typedef struct nccl_impl {
    ncclComm_t comm;
    cudaStream_t stream;        /* communication */
    cudaEvent_t compute_ready;  /* recorded on the compute stream before each reduction */
    cudaEvent_t comm_done;      /* recorded on the communication stream in wait_all */
    void *wire;                 /* fp16/bf16 copies of a bucket (--compress) */
    size_t wire_bytes;
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
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
        if (scale * (float)c->size == 1.0f) {
            HERD_NCCL(ncclAllReduce(buf, buf, n, ncclFloat32, ncclAvg, k->comm, k->stream),
                      "ncclAllReduce (average)");
            return HERD_OK;
        }
#endif
        HERD_NCCL(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, k->comm, k->stream),
                  "ncclAllReduce (sum)");
        return herd_cuda_scale_on(n, buf, scale, k->stream);
    }
    /* Scaled before the cast so that the sum of the ranks' halves cannot overflow
     * where the mean would not. */
    bool bf16 = wire == HERD_WIRE_BF16;
    HERD_TRY(herd_cuda_cast_to_16(n, buf, scale, bf16, k->wire, k->stream));
    HERD_NCCL(ncclAllReduce(k->wire, k->wire, n, bf16 ? ncclBfloat16 : ncclFloat16, ncclSum,
                            k->comm, k->stream),
              "ncclAllReduce (16-bit)");
    return herd_cuda_cast_from_16(n, k->wire, bf16, buf, k->stream);
}

static herd_status nccl_wait_all(herd_comm *c)
{
    nccl_impl *k = impl_of(c);
    /* Host-memory reductions (allreduce_f64_start) go to the host communicator. */
    herd_comm *host = herd_comm_wrapped(c);
    HERD_TRY(host->ops->wait_all(host));
    ncclResult_t async = ncclSuccess;
    HERD_NCCL(ncclCommGetAsyncError(k->comm, &async), "reading the communicator's state");
    if (async != ncclSuccess)
        return HERD_ERR(HERD_ERR_INTERNAL,
                        "NCCL: a reduction failed: %s; rerun with NCCL_DEBUG=WARN for details",
                        ncclGetErrorString(async));
    HERD_CUDA(cudaEventRecord(k->comm_done, k->stream), "recording the reductions' event");
    HERD_CUDA(cudaStreamWaitEvent(herd_cuda_ctx_get()->stream, k->comm_done, 0),
              "ordering the optimizer after the reductions");
    return HERD_OK;
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
    return HERD_OK;
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
    herd_comm *c = herd_comm_wrap(host, &nccl_ops, k);
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
