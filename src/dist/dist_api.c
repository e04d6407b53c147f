/* The public herd_dist_* API: thin wrappers over the communicator (herd_dist is herd_comm). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/parse.h"
#include "dist/comm.h"
#include "dist/signature.h"

/* A program herd run starts as given (python3) sets the stall inspector's times with
 * these, as herd train does with --stall-warning and --comm-timeout; a value the caller
 * set wins. */
static herd_status seconds_from_env(const char *name, double *seconds)
{
    const char *v = getenv(name);
    if (!v || *seconds > 0)
        return HERD_OK;
    if (!herd_parse_double(v, 0.1, 1e6, seconds))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s must be seconds in [0.1, 1e6], got '%s'", name, v);
    return HERD_OK;
}

herd_status herd_dist_init(const herd_dist_config *cfg, herd_dist **out)
{
    if (!out)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_dist_init: out is NULL");
    herd_comm_config cc = {0};
    if (cfg) {
        cc.stall_warning_s = cfg->stall_warning_s;
        cc.timeout_s = cfg->timeout_s;
    }
    HERD_TRY(seconds_from_env("HERD_STALL_WARNING", &cc.stall_warning_s));
    HERD_TRY(seconds_from_env("HERD_COMM_TIMEOUT", &cc.timeout_s));
    return herd_comm_create_default(&cc, out);
}

int herd_dist_rank(const herd_dist *d) { return d ? d->rank : 0; }
int herd_dist_size(const herd_dist *d) { return d ? d->size : 1; }
int herd_dist_local_rank(const herd_dist *d) { return d ? d->local_rank : 0; }
const char *herd_dist_backend(const herd_dist *d) { return d ? d->ops->name : "local"; }

void herd_dist_abort(herd_dist *d, int code, const char *msg)
{
    if (d) {
        d->ops->abort(d, code, msg);
        return;
    }
    /* No group: abort a group of one, which has the same meaning. */
    herd_comm *local;
    if (herd_comm_local_create(&local) == HERD_OK)
        local->ops->abort(local, code, msg);
}

static void device_free(herd_dist *d);

void herd_dist_free(herd_dist *d)
{
    if (d)
        device_free(d);
    herd_comm_destroy(d);
}

herd_status herd_dist_bind_device(herd_dist *d, const char *device)
{
    if (!d || d->size == 1 || !device || strcmp(device, "cuda") != 0)
        return HERD_OK;
    return herd_backend_cuda_bind(d->local_rank, d->local_size);
}

/* ------------------------------------------- collectives on the caller's memory */

herd_status herd_dist_allreduce_start(herd_dist *d, void *buf, size_t n, herd_dtype type,
                                      float scale, herd_compress wire, const char *name,
                                      uint64_t *ticket)
{
    if (!ticket || (n && !buf) || (unsigned)type > HERD_DTYPE_BF16 ||
        (unsigned)wire > HERD_COMPRESS_BF16 || !(scale == scale))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_dist_allreduce_start: a buffer of %zu values, "
                        "a type, a scale and a ticket to return", n);
    if (type != HERD_DTYPE_F32 && (scale != 1.0f || wire != HERD_COMPRESS_NONE))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: only float32 is scaled or compressed on the "
                        "wire; sum %s values as they are (scale 1, no compression)",
                        name ? name : "allreduce", type == HERD_DTYPE_F64 ? "float64" :
                        type == HERD_DTYPE_F16 ? "float16" : "bfloat16");
    *ticket = 0;
    if (!d || d->size == 1) {
        if (type == HERD_DTYPE_F32 && scale != 1.0f)
            for (size_t i = 0; i < n; i++)
                ((float *)buf)[i] *= scale;
        return HERD_OK;
    }
    herd_status st;
    if (type == HERD_DTYPE_F32) {
        herd_wire_type w = wire == HERD_COMPRESS_FP16 ? HERD_WIRE_FP16
                           : wire == HERD_COMPRESS_BF16 ? HERD_WIRE_BF16 : HERD_WIRE_FP32;
        st = d->ops->allreduce_start(d, buf, n, scale, w, name);
    } else if (type == HERD_DTYPE_F64) {
        if (n > INT_MAX)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: %zu float64 values are beyond one MPI call "
                            "(at most %d): reduce them in parts", name ? name : "allreduce", n, INT_MAX);
        st = d->ops->allreduce_f64_start(d, buf, (int)n, name);
    } else {
        if (!d->ops->allreduce_typed_start)
            return HERD_ERR(HERD_ERR_UNSUPPORTED, "the %s communicator sums no 16-bit values",
                            d->ops->name);
        st = d->ops->allreduce_typed_start(d, buf, n, type == HERD_DTYPE_F16 ? HERD_WIRE_FP16
                                                                              : HERD_WIRE_BF16, name);
    }
    if (st == HERD_OK)
        *ticket = d->ops->ticket(d);
    return st;
}

/* ------------------------------------------- collectives on device memory */

/* Device tickets carry this bit: the device communicator counts its own. */
#define DEVICE_TICKET (UINT64_C(1) << 63)

typedef struct herd_dist_device {
    char name[8];            /* the device's name as given ("cuda", "sim") */
    const herd_backend *be;
    herd_comm *comm;         /* over d: NCCL, or MPI through host memory */
    float *probe;            /* one value of device memory the host reads to wait */
} herd_dist_device;

static void device_free(herd_dist *d)
{
    herd_dist_device *dev = d->device;
    if (!dev)
        return;
    herd_comm_destroy(dev->comm);
    if (dev->probe)
        dev->be->free(dev->probe);
    free(dev);
    d->device = NULL;
}

/* The backend of a device's memory; host memory is refused. */
static herd_status device_backend(const char *device, const herd_backend **be)
{
    HERD_TRY(herd_backend_for(device, be));
    if ((*be)->host_memory)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "'%s' memory is host memory: use "
                        "herd_dist_allreduce_start", device);
    return HERD_OK;
}

/* d's device communicator, made on the first call (collectively: every rank makes its
 * first device collective together, as it must start every collective together). */
static herd_status device_of(herd_dist *d, const char *device, herd_dist_device **out)
{
    if (d->device) {
        if (strcmp(d->device->name, device) != 0)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "collectives on %s memory, but this process's "
                            "device collectives run on %s: one device a process", device,
                            d->device->name);
        *out = d->device;
        return HERD_OK;
    }
    /* Collective from here: a rank whose device or memory failed still joins the
     * agreement, so every rank fails together (none waits in the communicator's set-up). */
    const herd_backend *be = NULL;
    herd_status st = device_backend(device, &be);
    herd_dist_device *dev = st == HERD_OK ? herd_xcalloc(1, sizeof *dev) : NULL;
    if (st == HERD_OK && !dev)
        st = HERD_ERR_NOMEM; /* the allocator said why */
    if (dev) {
        snprintf(dev->name, sizeof dev->name, "%s", device);
        dev->be = be;
        dev->probe = be->alloc(sizeof *dev->probe);
        if (!dev->probe)
            st = HERD_ERR_NOMEM;
    }
    st = herd_agree(d, st, "making the device collectives' backend and memory");
    if (st == HERD_OK)
        st = herd_comm_device_create(d, be, &dev->comm);
    if (st != HERD_OK) {
        d->device = dev; /* freed with what it holds (NULL: nothing) */
        device_free(d);
        return st;
    }
    d->device = *out = dev;
    return HERD_OK;
}

/* buf *= scale for a group of one, as the host path scales: through host memory (the
 * backends have no scaling op, and one process's sum needs no speed). */
static herd_status scale_through_host(const herd_backend *be, float *buf, size_t n, float scale)
{
    float *host = malloc(n * sizeof *host);
    if (!host)
        return HERD_NOMEM(n * sizeof *host);
    herd_status st = be->memcpy_d2h(host, buf, n * sizeof *host);
    for (size_t i = 0; st == HERD_OK && i < n; i++)
        host[i] *= scale;
    if (st == HERD_OK)
        st = be->memcpy_h2d(buf, host, n * sizeof *host);
    free(host);
    return st;
}

herd_status herd_dist_allreduce_op_start(herd_dist *d, void *buf, size_t n, herd_dtype type,
                                         herd_reduce_op op, const char *name, uint64_t *ticket)
{
    const char *what = name ? name : "allreduce";
    if (!ticket || (n && !buf) || (unsigned)type > HERD_DTYPE_I64 || (unsigned)op > HERD_REDUCE_PRODUCT)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_dist_allreduce_op_start: a buffer of %zu values, "
                        "a type, min, max or product, and a ticket to return", n);
    if (type == HERD_DTYPE_F16 || type == HERD_DTYPE_BF16)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: the min, max or product of %s values: convert them "
                        "to float32 first (exact for min and max)", what,
                        type == HERD_DTYPE_F16 ? "float16" : "bfloat16");
    *ticket = 0;
    if (!d || d->size == 1)
        return HERD_OK;
    if (!d->ops->allreduce_op_start)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "%s: the %s communicator has no min, max or product",
                        what, d->ops->name);
    herd_status st = d->ops->allreduce_op_start(d, buf, n, type, op, name);
    if (st == HERD_OK)
        *ticket = d->ops->ticket(d);
    return st;
}

herd_status herd_dist_allreduce_adasum_start(herd_dist *d, void *buf, size_t n, herd_dtype type,
                                             const int64_t *counts, size_t n_tensors, const char *name,
                                             uint64_t *ticket)
{
    const char *what = name ? name : "allreduce";
    if (!ticket || (n && !buf) || (counts && !n_tensors))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_dist_allreduce_adasum_start: a buffer of %zu "
                        "values, its tensors' counts (or NULL) and a ticket to return", n);
    if (type != HERD_DTYPE_F32 && type != HERD_DTYPE_F64 && type != HERD_DTYPE_F16 &&
        type != HERD_DTYPE_BF16)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: Adasum combines floating-point values (float32, "
                        "float64, float16, bfloat16), not herd_dtype %d", what, (int)type);
    uint64_t total = 0;
    for (size_t t = 0; counts && t < n_tensors; t++) {
        if (counts[t] < 0)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: tensor %zu of the Adasum has %lld values",
                            what, t, (long long)counts[t]);
        total += (uint64_t)counts[t];
    }
    if (counts && total != n)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: the Adasum's %zu tensors hold %llu values, the "
                        "buffer %zu", what, n_tensors, (unsigned long long)total, n);
    *ticket = 0;
    if (!d || d->size == 1)
        return HERD_OK;
    if (!d->ops->allreduce_adasum_start)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "%s: the %s communicator has no Adasum", what,
                        d->ops->name);
    herd_status st = d->ops->allreduce_adasum_start(d, buf, n, type, counts, n_tensors, name);
    if (st == HERD_OK)
        *ticket = d->ops->ticket(d);
    return st;
}

herd_status herd_dist_allreduce_device_start(herd_dist *d, const char *device, void *buf,
                                             size_t n, float scale, const char *name,
                                             uint64_t *ticket)
{
    if (!ticket || !device || (n && !buf) || !(scale == scale))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_dist_allreduce_device_start: a device, a "
                        "buffer of %zu values, a scale and a ticket to return", n);
    *ticket = 0;
    if (!d || d->size == 1) { /* a group of one: the sum is the buffer, scaled */
        const herd_backend *be;
        HERD_TRY(device_backend(device, &be));
        return scale == 1.0f || n == 0 ? HERD_OK : scale_through_host(be, buf, n, scale);
    }
    herd_dist_device *dev = NULL;
    HERD_TRY(device_of(d, device, &dev));
    HERD_TRY(dev->comm->ops->allreduce_start(dev->comm, buf, n, scale, HERD_WIRE_FP32, name));
    *ticket = dev->comm->ops->ticket(dev->comm) | DEVICE_TICKET;
    return HERD_OK;
}

herd_status herd_dist_wait(herd_dist *d, uint64_t ticket)
{
    if (!d || d->size == 1 || ticket == 0)
        return HERD_OK;
    if (!(ticket & DEVICE_TICKET))
        return d->ops->wait_ticket(d, ticket);
    herd_dist_device *dev = d->device;
    if (!dev)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_dist_wait: device ticket %llu, but no "
                        "collective ran on device memory", (unsigned long long)(ticket & ~DEVICE_TICKET));
    /* The device's stream is ordered after the collective; the host waits for that
     * stream by reading from it (a read returns when the value may be used). */
    HERD_TRY(dev->comm->ops->wait_ticket(dev->comm, ticket & ~DEVICE_TICKET));
    float value;
    return dev->be->memcpy_d2h(&value, dev->probe, sizeof value);
}

herd_status herd_dist_broadcast(herd_dist *d, void *buf, size_t bytes, int root)
{
    if (!d)
        return root == 0 ? HERD_OK : HERD_ERR(HERD_ERR_INVALID_ARG, "broadcast from root %d in a "
                                                "group of one", root);
    if (root < 0 || root >= d->size)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "broadcast from root rank %d, but the job has ranks "
                        "0..%d", root, d->size - 1);
    return d->ops->broadcast(d, buf, bytes, root);
}

herd_status herd_dist_allgather(herd_dist *d, const void *mine, void *all, const size_t *bytes_of)
{
    int size = d ? d->size : 1;
    if (!bytes_of || (!all && bytes_of[0]))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_dist_allgather: every rank's byte count and a "
                        "buffer for them all");
    if (size == 1) {
        if (bytes_of[0] && all != mine)
            memmove(all, mine, bytes_of[0]);
        return HERD_OK;
    }
    bool equal = true;
    size_t total = 0;
    for (int r = 0; r < size; r++) {
        equal &= bytes_of[r] == bytes_of[0];
        total += bytes_of[r];
    }
    if (equal)
        return d->ops->allgather(d, mine, all, bytes_of[0]);
    if (d->ops->allgatherv && total <= INT_MAX) { /* parts of other sizes, in one collective */
        int *counts = herd_xcalloc((size_t)size, sizeof *counts);
        if (!counts)
            return HERD_ERR_NOMEM;
        for (int r = 0; r < size; r++)
            counts[r] = (int)bytes_of[r];
        herd_status st = d->ops->allgatherv(d, mine, all, counts, true, "allgather");
        free(counts);
        return st;
    }
    /* Otherwise to rank 0, then from it to all. */
    HERD_TRY(d->ops->gather(d, mine, bytes_of[d->rank], all, bytes_of, 0));
    return d->ops->broadcast(d, all, total, 0);
}

herd_status herd_dist_allgather_start(herd_dist *d, const void *mine, void *all, const int *bytes_of,
                                      const char *name, uint64_t *ticket)
{
    int size = d ? d->size : 1;
    if (!ticket || !bytes_of || (!all && bytes_of[0]))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_dist_allgather_start: every rank's byte count, "
                        "a buffer for them all and a ticket to return");
    *ticket = 0;
    if (size == 1) {
        if (bytes_of[0] > 0 && all != mine)
            memmove(all, mine, (size_t)bytes_of[0]);
        return bytes_of[0] < 0 ? HERD_ERR(HERD_ERR_INVALID_ARG, "%s of %d bytes", name ? name :
                                          "allgather", bytes_of[0]) : HERD_OK;
    }
    if (!d->ops->allgatherv)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "%s: the %s communicator has no allgather of parts of "
                        "other sizes", name ? name : "allgather", d->ops->name);
    herd_status st = d->ops->allgatherv(d, mine, all, bytes_of, false, name);
    if (st == HERD_OK)
        *ticket = d->ops->ticket(d);
    return st;
}

herd_status herd_dist_reduce_scatter(herd_dist *d, float *buf, size_t n, const int *counts,
                                     float scale, herd_compress wire, const char *name)
{
    uint64_t ticket;
    HERD_TRY(herd_dist_reduce_scatter_start(d, buf, n, counts, scale, wire, name, &ticket));
    return herd_dist_wait(d, ticket);
}

herd_status herd_dist_reduce_scatter_start(herd_dist *d, float *buf, size_t n, const int *counts,
                                           float scale, herd_compress wire, const char *name,
                                           uint64_t *ticket)
{
    if (!ticket)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: no ticket to return", name ? name : "reduce_scatter");
    *ticket = 0;
    int size = d ? d->size : 1;
    size_t total = 0;
    bool negative = false;
    for (int r = 0; counts && r < size; r++) {
        negative |= counts[r] < 0;
        total += counts[r] < 0 ? 0 : (size_t)counts[r];
    }
    if (!counts || negative || total != n || (n && !buf) || (unsigned)wire > HERD_COMPRESS_BF16 ||
        !(scale == scale))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: %zu values and every rank's count of them "
                        "(>= 0, summing to %zu; got %zu), a scale and a wire", name ? name :
                        "reduce_scatter", n, n, total);
    if (size == 1) {
        for (size_t i = 0; i < n; i++)
            buf[i] *= scale;
        return HERD_OK;
    }
    herd_wire_type w = wire == HERD_COMPRESS_FP16 ? HERD_WIRE_FP16
                       : wire == HERD_COMPRESS_BF16 ? HERD_WIRE_BF16 : HERD_WIRE_FP32;
    HERD_TRY(d->ops->reduce_scatter_start(d, buf, counts, scale, w, false, name));
    *ticket = d->ops->ticket(d);
    return HERD_OK;
}

herd_status herd_dist_alltoall(herd_dist *d, const void *send, const size_t *send_bytes,
                               void *recv, const size_t *recv_bytes)
{
    uint64_t ticket;
    HERD_TRY(herd_dist_alltoall_start(d, send, send_bytes, recv, recv_bytes, &ticket));
    return herd_dist_wait(d, ticket);
}

herd_status herd_dist_alltoall_start(herd_dist *d, const void *send, const size_t *send_bytes,
                                     void *recv, const size_t *recv_bytes, uint64_t *ticket)
{
    if (!ticket)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "alltoall: no ticket to return");
    *ticket = 0;
    int size = d ? d->size : 1, me = d ? d->rank : 0;
    if (!send_bytes || !recv_bytes)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "alltoall: every rank's byte counts, sent and "
                        "received");
    size_t *sent_at = calloc(2 * (size_t)size, sizeof *sent_at), sent = 0, got = 0;
    if (!sent_at)
        return HERD_NOMEM(2 * (size_t)size * sizeof *sent_at);
    size_t *got_at = sent_at + size;
    for (int r = 0; r < size; r++) {
        sent_at[r] = sent, got_at[r] = got;
        sent += send_bytes[r], got += recv_bytes[r];
    }
    herd_status st = HERD_OK;
    if ((sent && !send) || (got && !recv) || send_bytes[me] != recv_bytes[me])
        st = HERD_ERR(HERD_ERR_INVALID_ARG, "alltoall: buffers for %zu bytes out and %zu in, "
                      "and this rank's part to itself the same size both ways (%zu, %zu)", sent,
                      got, send_bytes[me], recv_bytes[me]);
    if (st == HERD_OK && send_bytes[me])
        memmove((char *)recv + got_at[me], (const char *)send + sent_at[me], send_bytes[me]);
    /* Round k pairs every rank with the one k after it, so each round's sends and
     * receives meet; the rounds run in order on the communication thread. */
    for (int k = 1; st == HERD_OK && k < size; k++) {
        int to = (me + k) % size, from = (me - k + size) % size;
        st = d->ops->sendrecv_start(d, (const char *)send + sent_at[to], send_bytes[to], to,
                                    (char *)recv + got_at[from], recv_bytes[from], from);
    }
    if (st == HERD_OK && size > 1)
        *ticket = d->ops->ticket(d);
    free(sent_at);
    return st;
}

herd_status herd_dist_barrier(herd_dist *d) { return d ? d->ops->barrier(d) : HERD_OK; }

/* A digest of the list, the same on every rank that names the same ranks. */
static uint64_t ranks_digest(const int *ranks, int n)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++)
        h = (h ^ (uint32_t)ranks[i]) * 1099511628211ull;
    return h ? h : 1; /* 0 stands for a list no group can have */
}

herd_status herd_dist_split(herd_dist *d, const int *ranks, int n, const char *name,
                            herd_dist **out)
{
    if (!out)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_dist_split: out is NULL");
    *out = NULL;
    int size = d ? d->size : 1, me = d ? d->rank : 0;
    bool member = false, ordered = ranks && n >= 1 && n <= size;
    for (int i = 0; ordered && i < n; i++) {
        ordered = ranks[i] >= 0 && ranks[i] < size && (i == 0 || ranks[i] > ranks[i - 1]);
        member |= ordered && ranks[i] == me;
    }
    const char *what = name ? name : "process set";
    if (size == 1)
        return ordered ? HERD_OK /* the job's one rank: a group of one */
                       : HERD_ERR(HERD_ERR_INVALID_ARG, "%s: %d rank(s): give rank 0, the job's one", what, n);
    /* Every rank compares its list with rank 0's before any returns (a list that is bad
     * on one rank only must not leave the others in the split): different lists would
     * pair one group's collectives with another's. */
    uint64_t mine = ordered ? ranks_digest(ranks, n) : 0;
    uint64_t *every = malloc((size_t)size * sizeof *every);
    if (!every)
        return HERD_NOMEM((size_t)size * sizeof *every);
    herd_status st = d->ops->allgather(d, &mine, every, sizeof mine);
    int differs = -1;
    bool unusable = false; /* the rank that differs gave a list no group can have */
    for (int r = 0; st == HERD_OK && r < size && differs < 0; r++)
        if (every[r] != every[0] || every[r] == 0)
            differs = r, unusable = every[r] == 0;
    free(every);
    if (st == HERD_OK && !ordered)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: %d rank(s): give 1 to %d distinct ranks of the "
                        "job (0 to %d), in increasing order", what, n, size, size - 1);
    if (st == HERD_OK && differs >= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: rank %d lists %s; every rank of the job gives the "
                        "same list", what, differs, unusable ? "ranks no group can have" :
                        "other ranks than rank 0");
    if (st == HERD_OK && !d->ops->split)
        st = HERD_ERR(HERD_ERR_UNSUPPORTED, "the %s communicator cannot split into groups",
                      d->ops->name);
    HERD_TRY(st);
    /* The others form a group too (MPI_Comm_split gives every rank one), freed at once. */
    herd_comm *part = NULL;
    HERD_TRY(d->ops->split(d, member ? 0 : 1, me, what, &part));
    if (!member || (part && part->size == 1)) {
        herd_comm_destroy(part);
        return HERD_OK;
    }
    *out = part;
    return HERD_OK;
}

void herd_dist_set_activity(herd_dist *d, const char *what)
{
    if (d && d->ops->set_activity)
        d->ops->set_activity(d, what);
}
