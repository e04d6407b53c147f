/* Communicators for gradients in device memory: the shared wrapper, and "staged",
 * which reduces through host memory with the wrapped (MPI) communicator. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "dist/comm.h"
#include "dist/gpu_share.h"

/* ---- the wrapper: host's identity, host's collectives for host memory */

typedef struct wrapper {
    herd_comm *host;
    void *impl;
    herd_comm_ops ops;
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

herd_comm *herd_comm_wrap(herd_comm *host, const herd_comm_ops *own, void *impl)
{
    herd_comm *c = herd_xcalloc(1, sizeof *c + sizeof(wrapper));
    if (!c)
        return NULL;
    wrapper *w = (wrapper *)(c + 1);
    *c = *host; /* rank, size, local rank, host name, timeouts */
    w->host = host;
    w->impl = impl;
    w->ops = *own;
#define FORWARD(op) w->ops.op = w->ops.op ? w->ops.op : fwd_##op
    FORWARD(broadcast);
    FORWARD(allreduce_f64);
    FORWARD(allreduce_f64_start);
    FORWARD(allgather);
    FORWARD(barrier);
    FORWARD(gather);
    FORWARD(clock_samples);
    FORWARD(set_activity);
    FORWARD(abort);
#undef FORWARD
    c->ops = &w->ops;
    c->impl = w;
    return c;
}

static void *impl_of(herd_comm *c) { return herd_comm_wrapper_impl(c); }

/* ---- staged: device -> host copy, host reduction, host -> device copy */

/* A host copy of one device buffer; buckets are the same slices every step, so
 * after the first step no allocation happens. */
typedef struct mirror {
    float *dev;
    size_t n;
    float *host;
    bool pending;
} mirror;

typedef struct staged {
    const herd_backend *be;
    mirror *m;
    int n_m, cap_m;
} staged;

static mirror *mirror_for(staged *s, float *dev, size_t n)
{
    for (int i = 0; i < s->n_m; i++)
        if (s->m[i].dev == dev && s->m[i].n == n)
            return &s->m[i];
    if (s->n_m == s->cap_m) {
        int cap = s->cap_m ? 2 * s->cap_m : 16;
        mirror *grown = realloc(s->m, (size_t)cap * sizeof *grown);
        if (!grown) {
            HERD_NOMEM((size_t)cap * sizeof *grown);
            return NULL;
        }
        s->m = grown;
        s->cap_m = cap;
    }
    float *host = malloc(n ? n * sizeof(float) : 1);
    if (!host) {
        HERD_NOMEM(n * sizeof(float));
        return NULL;
    }
    s->m[s->n_m] = (mirror){.dev = dev, .n = n, .host = host};
    return &s->m[s->n_m++];
}

static herd_status staged_allreduce_start(herd_comm *c, float *buf, size_t n, float scale,
                                          herd_wire_type wire, const char *tag)
{
    staged *s = impl_of(c);
    herd_comm *h = host_of(c);
    if (n && !buf)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "allreduce_start: NULL buffer for %zu elements", n);
    mirror *m = mirror_for(s, buf, n);
    if (!m)
        return HERD_ERR_NOMEM;
    if (m->pending)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "allreduce_start: '%s' is already being reduced; wait_all first", tag);
    /* Synchronous: the gradients are final once the copy returns. */
    HERD_TRY(s->be->memcpy_d2h(m->host, buf, n * sizeof(float)));
    HERD_TRY(h->ops->allreduce_start(h, m->host, n, scale, wire, tag));
    m->pending = true;
    return HERD_OK;
}

static herd_status staged_wait_all(herd_comm *c)
{
    staged *s = impl_of(c);
    herd_comm *h = host_of(c);
    herd_status st = h->ops->wait_all(h);
    for (int i = 0; i < s->n_m; i++) {
        mirror *m = &s->m[i];
        if (m->pending && st == HERD_OK)
            st = s->be->memcpy_h2d(m->dev, m->host, m->n * sizeof(float));
        m->pending = false;
    }
    return st;
}

static void staged_destroy(herd_comm *c)
{
    staged *s = impl_of(c);
    for (int i = 0; i < s->n_m; i++)
        free(s->m[i].host);
    free(s->m);
    free(s);
    free(c);
}

static const herd_comm_ops staged_ops = {
    .name = "mpi-staged",
    .destroy = staged_destroy,
    .allreduce_start = staged_allreduce_start,
    .wait_all = staged_wait_all,
};

herd_status herd_comm_staged_create(herd_comm *host, const herd_backend *be, herd_comm **out)
{
    *out = NULL;
    if (!host || !be)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "staged communicator: NULL host comm or backend");
    staged *s = herd_xcalloc(1, sizeof *s);
    if (!s)
        return HERD_ERR_NOMEM;
    s->be = be;
    if (!(*out = herd_comm_wrap(host, &staged_ops, s))) {
        free(s);
        return HERD_ERR_NOMEM;
    }
    return HERD_OK;
}

herd_status herd_comm_device_create(herd_comm *host, const herd_backend *be, herd_comm **out)
{
    *out = NULL;
    bool nccl; /* not when two ranks share a GPU: the same answer on every rank */
    HERD_TRY(herd_device_reduction(host, be, &nccl));
    return nccl ? herd_comm_nccl_create(host, out) : herd_comm_staged_create(host, be, out);
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
