/*
 * The inside of the communication benchmarks (tools/bench_tools.h is the CLI's
 * view): the session's communicator, the buffers, and the helpers the
 * implementations and the tests share.
 */
#ifndef HERD_TOOLS_BENCH_INTERNAL_H
#define HERD_TOOLS_BENCH_INTERNAL_H

#include "dist/comm.h"
#include "tools/bench_tools.h"

/* The communicator the session measures (NCCL's wraps the session's MPI one). */
herd_comm *bench_session_comm(const bench_session *s);
herd_wire_type bench_wire_type(bench_type t);

/* A benchmark buffer: host memory, plus a GPU copy when the communicator reduces GPU
 * memory. Results are filled and checked on the host side. */
typedef struct bench_mem {
    void *host, *dev;
    const struct herd_backend *gpu; /* dev's backend (cuda); NULL for host memory only */
} bench_mem;

herd_status bench_mem_alloc(bench_mem *m, size_t bytes, bool device);
void bench_mem_free(bench_mem *m);
herd_status bench_mem_upload(bench_mem *m, size_t bytes);   /* host -> GPU (no-op without one) */
herd_status bench_mem_download(bench_mem *m, size_t bytes); /* GPU -> host */
static inline void *bench_mem_target(const bench_mem *m) { return m->dev ? m->dev : m->host; }

/* Busbw over algbw for n ranks: 2(n-1)/n, as nccl-tests defines it for allreduce. */
double bench_allreduce_bus_factor(int ranks);
herd_status bench_p2p_matrices_alloc(int n, bench_p2p_matrices *m);

#endif
