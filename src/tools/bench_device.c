/*
 * The session and buffers of the communication benchmarks: MPI (or one process)
 * in host memory, or NCCL on one GPU per rank, bootstrapped through MPI, with
 * device buffers filled from and checked in host copies.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "tools/bench_internal.h"

static herd_status no_host_memory(size_t bytes)
{
    return HERD_ERR(HERD_ERR_NOMEM, "benchmark: cannot allocate %zu bytes; try a smaller maximum "
                    "size (-e)", bytes);
}

struct bench_session {
    herd_comm *comm;
    herd_comm *host; /* the MPI communicator NCCL is built over; NULL otherwise */
};

/* NCCL wraps an MPI communicator and binds local rank i to GPU i, as training does. */
static herd_status open_nccl(bench_session *s)
{
    if (!herd_have_nccl())
        return herd_comm_nccl_create(NULL, &s->comm); /* says how to build it in */
    HERD_TRY(herd_comm_create_backend("auto", NULL, &s->host));
    HERD_TRY(herd_dist_bind_device(s->host, "cuda"));
    return herd_comm_nccl_create(s->host, &s->comm);
}

herd_status bench_session_open(const char *backend, bool gpu_reductions, bench_session **out)
{
    bench_session *s = herd_xcalloc(1, sizeof *s);
    if (!(*out = s))
        return HERD_ERR_NOMEM;
    herd_status st = gpu_reductions && backend && strcmp(backend, "nccl") == 0
                         ? open_nccl(s)
                         : herd_comm_create_backend(backend, NULL, &s->comm);
    if (st != HERD_OK) {
        bench_session_close(s);
        *out = NULL;
    }
    return st;
}

void bench_session_close(bench_session *s)
{
    if (!s)
        return;
    herd_comm_destroy(s->comm);
    herd_comm_destroy(s->host);
    free(s);
}

herd_comm *bench_session_comm(const bench_session *s) { return s->comm; }
int bench_session_rank(const bench_session *s) { return s->comm->rank; }
int bench_session_size(const bench_session *s) { return s->comm->size; }
const char *bench_session_host(const bench_session *s) { return s->comm->host; }
const char *bench_session_backend(const bench_session *s) { return s->comm->ops->name; }

void bench_session_abort(bench_session *s, int code, const char *msg)
{
    s->comm->ops->abort(s->comm, code, msg);
}

herd_status bench_session_hosts(bench_session *s, bench_host **out)
{
    herd_comm *c = s->comm;
    _Static_assert(sizeof(bench_host) == sizeof c->host, "one host name per bench_host");
    bench_host *all = herd_xcalloc((size_t)c->size, sizeof *all);
    if (!(*out = all))
        return HERD_ERR_NOMEM;
    herd_status st = c->ops->allgather(c, c->host, all, sizeof c->host);
    if (st != HERD_OK) {
        free(all);
        *out = NULL;
        return st;
    }
    for (int r = 0; r < c->size; r++)
        all[r].name[sizeof all[r].name - 1] = '\0';
    return HERD_OK;
}

herd_status bench_mem_alloc(bench_mem *m, size_t bytes, bool device)
{
    memset(m, 0, sizeof *m);
    if (device && !(m->gpu = herd_backend_cuda())) /* says why: not built, no GPU */
        return HERD_ERR_UNSUPPORTED;
    if (!(m->host = herd_aligned_alloc(bytes)))
        return no_host_memory(bytes);
    if (m->gpu && !(m->dev = m->gpu->alloc(bytes))) {
        bench_mem_free(m);
        return HERD_ERR(HERD_ERR_NOMEM, "cannot allocate %zu bytes of GPU memory; try a smaller "
                        "maximum size (-e)", bytes);
    }
    return HERD_OK;
}

void bench_mem_free(bench_mem *m)
{
    herd_aligned_free(m->host);
    if (m->dev)
        m->gpu->free(m->dev);
    memset(m, 0, sizeof *m);
}

herd_status bench_mem_upload(bench_mem *m, size_t bytes)
{
    return m->dev ? m->gpu->memcpy_h2d(m->dev, m->host, bytes) : HERD_OK;
}

herd_status bench_mem_download(bench_mem *m, size_t bytes)
{
    return m->dev ? m->gpu->memcpy_d2h(m->host, m->dev, bytes) : HERD_OK;
}
