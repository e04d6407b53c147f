/* The staged communicator (comm.h): buffers of any backend reduced, scattered and
 * gathered through host copies by the wrapped (MPI) communicator. A start copies what
 * the host operation reads out of device memory and queues it on the host; completion
 * (wait_all, or wait_ticket up to its ticket) copies back what it changed. Over a host
 * of one rank there is nothing to exchange: only the scale applies, on the device. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "dist/comm.h"

/* A host copy of one device buffer; buckets are the same slices every step, so
 * after the first step no allocation happens. */
typedef struct mirror {
    float *dev;
    size_t n;
    float *host;      /* NULL over one rank: nothing is copied */
    bool pending;     /* started, not landed */
    size_t back_at;   /* what lands in dev at completion: [back_at, back_at + back_n) */
    size_t back_n;
    float scale;      /* over one rank: applied to that range at completion */
    uint64_t ticket;  /* the host operation's */
} mirror;

typedef struct staged {
    const herd_backend *be;
    mirror *m;
    int n_m, cap_m;
} staged;

static staged *impl_of(herd_comm *c) { return herd_comm_wrapper_impl(c); }

static bool one_rank(herd_comm *c) { return herd_comm_wrapped(c)->size == 1; }

static mirror *mirror_for(herd_comm *c, float *dev, size_t n)
{
    staged *s = impl_of(c);
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
    float *host = NULL;
    if (!one_rank(c) && !(host = malloc(n ? n * sizeof(float) : 1))) {
        HERD_NOMEM(n * sizeof(float));
        return NULL;
    }
    s->m[s->n_m] = (mirror){.dev = dev, .n = n, .host = host};
    return &s->m[s->n_m++];
}

/* buf[0..n)'s mirror, not in flight, with [at, at + len) copied to the host (the
 * part the host operation reads; the copy is synchronous, so buf is final then). */
static herd_status stage_out(herd_comm *c, const char *op, const char *tag, float *buf, size_t n,
                             size_t at, size_t len, mirror **out)
{
    if (n && !buf)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: NULL buffer for %zu elements", op, n);
    mirror *m = mirror_for(c, buf, n);
    if (!m)
        return HERD_ERR_NOMEM;
    if (m->pending)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: '%s' is already in flight; wait_all first", op,
                        tag ? tag : "");
    if (m->host && len)
        HERD_TRY(impl_of(c)->be->memcpy_d2h(m->host + at, buf + at, len * sizeof(float)));
    *out = m;
    return HERD_OK;
}

/* After the host operation was queued: [at, at + len) lands at completion. */
static void stage_pending(herd_comm *c, mirror *m, size_t at, size_t len, float scale)
{
    herd_comm *h = herd_comm_wrapped(c);
    m->pending = true;
    m->back_at = at;
    m->back_n = len;
    m->scale = scale;
    m->ticket = h->ops->ticket ? h->ops->ticket(h) : 0;
}

static herd_status land(herd_comm *c, mirror *m)
{
    const herd_backend *be = impl_of(c)->be;
    m->pending = false;
    if (!m->back_n)
        return HERD_OK;
    float *dev = m->dev + m->back_at;
    if (!m->host) /* the sum over one rank is the value itself; x *= scale */
        return m->scale == 1.0f ? HERD_OK : be->grad_unscale_check(m->back_n, dev, m->scale, NULL);
    return be->memcpy_h2d(dev, m->host + m->back_at, m->back_n * sizeof(float));
}

/* Lands every pending mirror up to `ticket` (all: UINT64_MAX), after a failure too,
 * so none stays in flight; the first failure is returned. */
static herd_status land_up_to(herd_comm *c, uint64_t ticket, herd_status st)
{
    staged *s = impl_of(c);
    for (int i = 0; i < s->n_m; i++) {
        mirror *m = &s->m[i];
        if (!m->pending || m->ticket > ticket)
            continue;
        if (st == HERD_OK)
            st = land(c, m);
        m->pending = false;
    }
    return st;
}

static herd_status staged_allreduce_start(herd_comm *c, float *buf, size_t n, float scale,
                                          herd_wire_type wire, const char *tag)
{
    herd_comm *h = herd_comm_wrapped(c);
    mirror *m;
    HERD_TRY(stage_out(c, "allreduce_start", tag, buf, n, 0, n, &m));
    if (m->host)
        HERD_TRY(h->ops->allreduce_start(h, m->host, n, scale, wire, tag));
    stage_pending(c, m, 0, n, m->host ? 1.0f : scale);
    return HERD_OK;
}

static herd_status staged_reduce_scatter_start(herd_comm *c, float *buf, const int *counts,
                                               float scale, herd_wire_type wire,
                                               bool release_rest, const char *tag)
{
    /* release_rest: the host copy is staging, not the buffer to shrink (comm.h). */
    (void)release_rest;
    herd_comm *h = herd_comm_wrapped(c);
    size_t n, at;
    HERD_TRY(herd_comm_parts(c, counts, "reduce_scatter_start", &n, &at));
    size_t mine = (size_t)counts[c->rank];
    mirror *m;
    HERD_TRY(stage_out(c, "reduce_scatter_start", tag, buf, n, 0, n, &m));
    if (m->host)
        HERD_TRY(h->ops->reduce_scatter_start(h, m->host, counts, scale, wire, false, tag));
    stage_pending(c, m, at, mine, m->host ? 1.0f : scale);
    return HERD_OK;
}

static herd_status staged_allgather_start(herd_comm *c, float *buf, const int *counts,
                                          const char *tag)
{
    herd_comm *h = herd_comm_wrapped(c);
    size_t n, at;
    HERD_TRY(herd_comm_parts(c, counts, "allgather_start", &n, &at));
    size_t mine = (size_t)counts[c->rank];
    mirror *m;
    /* Only this rank's part leaves; every part comes back (its own unchanged). */
    HERD_TRY(stage_out(c, "allgather_start", tag, buf, n, at, mine, &m));
    if (m->host)
        HERD_TRY(h->ops->allgather_start(h, m->host, counts, tag));
    stage_pending(c, m, 0, m->host ? n : 0, 1.0f);
    return HERD_OK;
}

static uint64_t staged_ticket(herd_comm *c)
{
    herd_comm *h = herd_comm_wrapped(c);
    return h->ops->ticket(h);
}

static herd_status staged_wait_ticket(herd_comm *c, uint64_t ticket)
{
    herd_comm *h = herd_comm_wrapped(c);
    return land_up_to(c, ticket, h->ops->wait_ticket(h, ticket));
}

static herd_status staged_wait_all(herd_comm *c)
{
    herd_comm *h = herd_comm_wrapped(c);
    return land_up_to(c, UINT64_MAX, h->ops->wait_all(h));
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

static herd_status staged_split(herd_comm *c, int color, int key, const char *name, herd_comm **out)
{
    return herd_comm_wrapper_split(c, color, key, name, herd_comm_staged_create, out);
}

static const herd_comm_ops staged_ops = {
    .name = "mpi-staged",
    .destroy = staged_destroy,
    .allreduce_start = staged_allreduce_start,
    .wait_all = staged_wait_all,
    .reduce_scatter_start = staged_reduce_scatter_start,
    .allgather_start = staged_allgather_start,
    .ticket = staged_ticket,
    .wait_ticket = staged_wait_ticket,
    .split = staged_split,
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
    if (!(*out = herd_comm_wrap(host, be, &staged_ops, s))) {
        free(s);
        return HERD_ERR_NOMEM;
    }
    return HERD_OK;
}
