/* Host-to-device copies that do not wait for the device (the backend's memcpy_h2d).
 *
 * A copy from pageable memory cannot be asynchronous, and waiting for it meant waiting
 * for every kernel queued before it: each step's batch drained the device and then
 * crossed at pageable speed (resnet50 bf16 at batch 64 on an H200: 6.2 ms of a 39 ms
 * step, with the device idle before it). So the bytes go into pinned staging first
 * (one host memcpy, while the device may still be running earlier kernels) and cross
 * by DMA in stream order. The caller may reuse its buffer on return, as before; later
 * kernels see the data because they run after the copy on the same stream.
 *
 * Two staging buffers alternate, each with an event marking the end of the copy that
 * last read it: a buffer is refilled only once that copy is done, which by then it
 * almost always is. Copies larger than STAGE_MAX (a whole model's weights at load)
 * are made directly and waited for, rather than pinning that much host memory. */
#include <pthread.h>
#include <string.h>

#include "backend/cuda/cuda.h"

#define STAGE_SLOTS 2
#define STAGE_MAX ((size_t)256 << 20)
#define STAGE_MIN ((size_t)1 << 20)

typedef struct stage {
    void *ptr; /* pinned */
    size_t bytes;
    cudaEvent_t done; /* recorded after the copy that last read ptr */
} stage;

static stage g_stages[STAGE_SLOTS];
static int g_next;
/* The backend's ops run on one thread, but an upload costs a lock nothing next to its
 * memcpy, and a second caller (a communicator's completion) then cannot share a slot. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static herd_status direct(void *dst, const void *src, size_t bytes)
{
    cudaStream_t s = herd_cuda_ctx_get()->stream;
    HERD_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), "host-to-device copy");
    HERD_CUDA(cudaStreamSynchronize(s), "host-to-device copy");
    return HERD_OK;
}

/* The slot's buffer, free to overwrite and at least `bytes` long. */
static herd_status take(stage *st, size_t bytes)
{
    if (!st->done)
        HERD_CUDA(cudaEventCreateWithFlags(&st->done, cudaEventDisableTiming),
                  "staging event");
    else
        HERD_CUDA(cudaEventSynchronize(st->done), "waiting for a staged copy");
    if (bytes <= st->bytes)
        return HERD_OK;
    if (st->ptr)
        cudaFreeHost(st->ptr);
    st->ptr = NULL;
    st->bytes = 0;
    size_t want = bytes < STAGE_MIN ? STAGE_MIN : bytes;
    HERD_CUDA(cudaMallocHost(&st->ptr, want), "pinned staging for host-to-device copies");
    st->bytes = want;
    return HERD_OK;
}

static herd_status staged(stage *st, void *dst, const void *src, size_t bytes)
{
    HERD_TRY(take(st, bytes));
    memcpy(st->ptr, src, bytes);
    cudaStream_t s = herd_cuda_ctx_get()->stream;
    HERD_CUDA(cudaMemcpyAsync(dst, st->ptr, bytes, cudaMemcpyHostToDevice, s),
              "host-to-device copy");
    HERD_CUDA(cudaEventRecord(st->done, s), "staged copy event");
    return HERD_OK;
}

herd_status herd_cuda_upload(void *dst, const void *src, size_t bytes)
{
    if (bytes > STAGE_MAX)
        return direct(dst, src, bytes);
    pthread_mutex_lock(&g_mu);
    stage *st = &g_stages[g_next];
    g_next = (g_next + 1) % STAGE_SLOTS;
    herd_status rc = staged(st, dst, src, bytes);
    pthread_mutex_unlock(&g_mu);
    return rc;
}

void herd_cuda_upload_release(void)
{
    for (int i = 0; i < STAGE_SLOTS; i++) {
        stage *st = &g_stages[i];
        if (st->done) {
            cudaEventSynchronize(st->done);
            cudaEventDestroy(st->done);
        }
        if (st->ptr)
            cudaFreeHost(st->ptr);
        *st = (stage){0};
    }
    g_next = 0;
}
