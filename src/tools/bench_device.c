/*
 * The communicator and buffers of the communication benchmarks: MPI (or one
 * process) in host memory, or NCCL on one GPU per rank, bootstrapped through MPI,
 * with device buffers filled from and checked in host copies.
 */
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "tools/bench_tools.h"

static herd_status no_host_memory(size_t bytes)
{
    return HERD_ERR(HERD_ERR_NOMEM, "benchmark: cannot allocate %zu bytes; try a smaller maximum "
                    "size (-e)", bytes);
}

herd_status bench_comm_open(const char *backend, herd_comm **comm, herd_comm **host)
{
    *comm = *host = NULL;
    if (!backend || strcmp(backend, "nccl") != 0)
        return herd_comm_create_backend(backend, NULL, comm);
    if (!herd_have_nccl())
        return herd_comm_nccl_create(NULL, comm); /* says how to build it in */
    HERD_TRY(herd_comm_create_backend("auto", NULL, host));
    /* Local rank i drives GPU i, as in training. */
    herd_status st = herd_dist_bind_device(*host, "cuda");
    if (st == HERD_OK)
        st = herd_comm_nccl_create(*host, comm);
    if (st != HERD_OK) {
        herd_comm_destroy(*host);
        *host = NULL;
    }
    return st;
}

void bench_comm_close(herd_comm *comm, herd_comm *host)
{
    herd_comm_destroy(comm);
    herd_comm_destroy(host);
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
