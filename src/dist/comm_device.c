/* Communicators for buffers in device memory: the wrapper that the staged
 * (comm_staged.c) and NCCL (comm_nccl.c) communicators share, with its point-to-point
 * transfers staged through host buffers, and the choice between them. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "dist/comm.h"
#include "dist/gpu_share.h"

/* ---- the wrapper: host's identity, host's collectives for host memory */

/* A host buffer that one device transfer goes through, from p2p_start to p2p_wait;
 * the pipeline's transfers are the same few sizes every step, so they are reused. */
typedef struct p2p_stage {
    const herd_p2p *req; /* the transfer using it; NULL: free */
    void *dev;           /* a receive's destination (NULL for a send) */
    void *host;
    size_t cap;
} p2p_stage;

typedef struct wrapper {
    herd_comm *host;
    void *impl;
    herd_comm_ops ops;
    void (*own_destroy)(herd_comm *c);
    bool owns_host;
    const herd_backend *be; /* p2p buffers' (NULL: host memory) */
    p2p_stage *stage;
    int n_stage;
} wrapper;

static herd_comm *host_of(herd_comm *c) { return ((wrapper *)c->impl)->host; }

herd_comm *herd_comm_wrapped(const herd_comm *c) { return ((const wrapper *)c->impl)->host; }

void *herd_comm_wrapper_impl(const herd_comm *c) { return ((const wrapper *)c->impl)->impl; }

/* A wrapper's operation table lives inside the wrapper (herd_comm_wrap); every other
 * communicator points at a static table. */
static bool is_wrapper(const herd_comm *c)
{
    return c->impl && c->ops == &((const wrapper *)c->impl)->ops;
}

herd_comm *herd_comm_host_side(herd_comm *c) { return is_wrapper(c) ? herd_comm_wrapped(c) : c; }

void herd_comm_set_trace(herd_comm *c, const herd_trace_sink *trace)
{
    c->trace = trace;
    /* The wrapper holds a copy of the host's fields: the host records the reductions
     * it runs from its own. */
    if (is_wrapper(c))
        herd_comm_set_trace(herd_comm_wrapped(c), trace);
}

static herd_status fwd_broadcast(herd_comm *c, void *buf, size_t bytes, int root)
{
    herd_comm *h = host_of(c);
    return h->ops->broadcast(h, buf, bytes, root);
}

static herd_status fwd_allreduce_f64(herd_comm *c, double *vals, int n)
{
    herd_comm *h = host_of(c);
    return h->ops->allreduce_f64(h, vals, n);
}

static herd_status fwd_allreduce_f64_start(herd_comm *c, double *vals, int n, const char *tag)
{
    herd_comm *h = host_of(c);
    return h->ops->allreduce_f64_start(h, vals, n, tag);
}

static herd_status fwd_reduce_scatter_f64(herd_comm *c, double *vals, const int *counts)
{
    herd_comm *h = host_of(c);
    return h->ops->reduce_scatter_f64(h, vals, counts);
}

static herd_status fwd_allgatherv_f32(herd_comm *c, float *vals, const int *counts)
{
    herd_comm *h = host_of(c);
    return h->ops->allgatherv_f32(h, vals, counts);
}

static herd_status fwd_allgather(herd_comm *c, const void *mine, void *all, size_t bytes)
{
    herd_comm *h = host_of(c);
    return h->ops->allgather(h, mine, all, bytes);
}

static herd_status fwd_barrier(herd_comm *c)
{
    herd_comm *h = host_of(c);
    return h->ops->barrier(h);
}

static herd_status fwd_gather(herd_comm *c, const void *mine, size_t bytes, void *all,
                              const size_t *bytes_of, int root)
{
    herd_comm *h = host_of(c);
    return h->ops->gather(h, mine, bytes, all, bytes_of, root);
}

static herd_status fwd_clock_samples(herd_comm *c, int rounds, double *samples)
{
    herd_comm *h = host_of(c);
    return h->ops->clock_samples(h, rounds, samples);
}

static void fwd_set_activity(herd_comm *c, const char *what)
{
    herd_comm *h = host_of(c);
    h->ops->set_activity(h, what);
}

static void fwd_abort(herd_comm *c, int code, const char *msg)
{
    herd_comm *h = host_of(c);
    h->ops->abort(h, code, msg);
}

static void fwd_p2p_progress(herd_comm *c)
{
    herd_comm *h = host_of(c);
    h->ops->p2p_progress(h);
}

static bool p2p_direct(const wrapper *w) { return !w->be || w->be->host_memory; }

static p2p_stage *stage_of(wrapper *w, const herd_p2p *req)
{
    for (int i = 0; i < w->n_stage; i++)
        if (w->stage[i].req == req)
            return &w->stage[i];
    return NULL;
}

/* A free host buffer of at least `bytes`: the smallest that fits, else a free one
 * grown, else a new one. */
static p2p_stage *stage_for(wrapper *w, size_t bytes)
{
    p2p_stage *fit = NULL, *spare = NULL;
    for (int i = 0; i < w->n_stage; i++) {
        p2p_stage *s = &w->stage[i];
        if (s->req)
            continue;
        if (s->cap >= bytes && (!fit || s->cap < fit->cap))
            fit = s;
        spare = spare ? spare : s;
    }
    if (fit)
        return fit;
    if (!spare) {
        p2p_stage *grown = realloc(w->stage, (size_t)(w->n_stage + 1) * sizeof *grown);
        if (!grown) {
            HERD_NOMEM((size_t)(w->n_stage + 1) * sizeof *grown);
            return NULL;
        }
        w->stage = grown;
        spare = &w->stage[w->n_stage++];
        *spare = (p2p_stage){0};
    }
    void *host = malloc(bytes ? bytes : 1);
    if (!host) {
        HERD_NOMEM(bytes);
        return NULL;
    }
    free(spare->host);
    spare->host = host;
    spare->cap = bytes;
    return spare;
}

static herd_status wrap_p2p_start(herd_comm *c, herd_p2p *req, bool send, void *buf, size_t bytes,
                                  int peer, int tag)
{
    wrapper *w = c->impl;
    herd_comm *h = w->host;
    if (p2p_direct(w))
        return h->ops->p2p_start(h, req, send, buf, bytes, peer, tag);
    if (stage_of(w, req))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "p2p_start: a transfer with rank %d is still in flight "
                        "in this request; p2p_wait for it first", req->peer);
    if (bytes && !buf)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "p2p_start: NULL buffer for %zu bytes", bytes);
    p2p_stage *s = stage_for(w, bytes);
    if (!s)
        return HERD_ERR_NOMEM;
    /* A send's bytes leave the device now: the caller may reuse buf at once, as the
     * host transfer's buffer is this copy. */
    if (send && bytes)
        HERD_TRY(w->be->memcpy_d2h(s->host, buf, bytes));
    HERD_TRY(h->ops->p2p_start(h, req, send, s->host, bytes, peer, tag));
    s->req = req;
    s->dev = send ? NULL : buf;
    return HERD_OK;
}

static herd_status wrap_p2p_wait(herd_comm *c, herd_p2p *req, const char *what)
{
    wrapper *w = c->impl;
    herd_comm *h = w->host;
    herd_status st = h->ops->p2p_wait(h, req, what);
    p2p_stage *s = p2p_direct(w) ? NULL : stage_of(w, req);
    if (!s)
        return st;
    /* A receive's bytes enter the device once they are all here. */
    if (st == HERD_OK && s->dev && req->bytes)
        st = w->be->memcpy_h2d(s->dev, s->host, req->bytes);
    s->req = NULL;
    s->dev = NULL;
    return st;
}

static void wrap_destroy(herd_comm *c)
{
    wrapper *w = c->impl;
    herd_comm *owned = w->owns_host ? w->host : NULL;
    for (int i = 0; i < w->n_stage; i++)
        free(w->stage[i].host);
    free(w->stage);
    w->own_destroy(c); /* frees c, and w inside it */
    herd_comm_destroy(owned);
}

void herd_comm_wrapper_own_host(herd_comm *c) { ((wrapper *)c->impl)->owns_host = true; }

herd_status herd_comm_wrapper_split(herd_comm *c, int color, int key, const char *name,
                                    herd_comm_wrap_fn make, herd_comm **out)
{
    *out = NULL;
    wrapper *w = c->impl;
    herd_comm *h = w->host, *part;
    if (!h->ops->split)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "the %s communicator cannot split into groups",
                        h->ops->name);
    HERD_TRY(h->ops->split(h, color, key, name, &part));
    herd_status st = make(part, w->be, out);
    if (st != HERD_OK) {
        herd_comm_destroy(part);
        return st;
    }
    herd_comm_wrapper_own_host(*out);
    return HERD_OK;
}

herd_comm *herd_comm_wrap(herd_comm *host, const herd_backend *be, const herd_comm_ops *own,
                          void *impl)
{
    herd_comm *c = herd_xcalloc(1, sizeof *c + sizeof(wrapper));
    if (!c)
        return NULL;
    wrapper *w = (wrapper *)(c + 1);
    *c = *host; /* rank, size, local rank, host name, timeouts */
    w->host = host;
    w->impl = impl;
    w->ops = *own;
    w->own_destroy = own->destroy;
    w->ops.destroy = wrap_destroy;
    w->be = be;
#define FORWARD(op) w->ops.op = w->ops.op ? w->ops.op : fwd_##op
    FORWARD(broadcast);
    FORWARD(allreduce_f64);
    FORWARD(allreduce_f64_start);
    FORWARD(reduce_scatter_f64);
    FORWARD(allgatherv_f32);
    FORWARD(allgather);
    FORWARD(barrier);
    FORWARD(gather);
    FORWARD(clock_samples);
    FORWARD(set_activity);
    FORWARD(abort);
#undef FORWARD
    if (host->ops->p2p_start && !own->p2p_start) {
        w->ops.p2p_start = wrap_p2p_start;
        w->ops.p2p_wait = wrap_p2p_wait;
        w->ops.p2p_progress = own->p2p_progress ? own->p2p_progress : fwd_p2p_progress;
    }
    c->ops = &w->ops;
    c->impl = w;
    return c;
}

herd_status herd_comm_device_create(herd_comm *host, const herd_backend *be, herd_comm **out)
{
    *out = NULL;
    bool nccl; /* not when two ranks share a GPU: the same answer on every rank */
    HERD_TRY(herd_device_reduction(host, be, &nccl));
    return nccl ? herd_comm_nccl_create(host, out) : herd_comm_staged_create(host, be, out);
}

herd_status herd_comm_device_local_create(const herd_backend *be, herd_comm **out)
{
    *out = NULL;
    herd_comm *local;
    HERD_TRY(herd_comm_local_create(&local));
    if (be->host_memory) {
        *out = local;
        return HERD_OK;
    }
    herd_status st = herd_comm_device_create(local, be, out);
    if (st != HERD_OK) {
        herd_comm_destroy(local);
        return st;
    }
    herd_comm_wrapper_own_host(*out);
    return HERD_OK;
}

herd_status herd_comm_parts(const herd_comm *c, const int *counts, const char *op, size_t *n,
                            size_t *mine_at)
{
    *n = *mine_at = 0;
    if (!counts)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: no counts of the ranks' parts", op);
    for (int r = 0; r < c->size; r++) {
        if (counts[r] < 0)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: rank %d's part holds %d elements", op, r,
                            counts[r]);
        if (r == c->rank)
            *mine_at = *n;
        *n += (size_t)counts[r];
    }
    return HERD_OK;
}

herd_status herd_comm_broadcast_buffer(herd_comm *c, const herd_backend *be, void *buf,
                                       size_t bytes, int root)
{
    if (be->host_memory || c->size == 1)
        return c->ops->broadcast(c, buf, bytes, root);
    void *host = malloc(bytes ? bytes : 1);
    if (!host)
        return HERD_NOMEM(bytes);
    herd_status st = be->memcpy_d2h(host, buf, bytes);
    /* Every rank joins the broadcast even after a failed copy, so none hangs. */
    herd_status b = c->ops->broadcast(c, host, bytes, root);
    if (st == HERD_OK && b == HERD_OK && c->rank != root)
        st = be->memcpy_h2d(buf, host, bytes);
    free(host);
    return st != HERD_OK ? st : b;
}
