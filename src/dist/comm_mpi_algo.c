/*
 * Which algorithm Open MPI's non-blocking allreduce uses, chosen per call by size.
 *
 * herd reduces gradients with MPI_Iallreduce (the stall inspector needs a request it
 * can poll). Open MPI's libnbc picks a binomial tree for every in-place call and for
 * fewer than 4 ranks, whatever the size: on 2 ranks here that is 2-2.5x slower than
 * the blocking MPI_Allreduce from 256 KiB up. Its recursive doubling matches the
 * blocking call for small buffers, recursive halving (Rabenseifner) for medium ones
 * and its ring for large ones (docs/performance.md). The choice is libnbc's control
 * variable coll_libnbc_iallreduce_algorithm, which it reads at every call, so herd
 * sets it through the MPI tool interface (MPI_T) before each reduction.
 *
 * When the user set OMPI_MCA_coll_libnbc_iallreduce_algorithm, or the MPI library
 * has no such variable (MPICH, another Open MPI), herd leaves the choice to MPI.
 */
#include <stdlib.h>

#include "dist/comm_mpi_internal.h"

enum { NBC_RING = 1, NBC_RABENSEIFNER = 3, NBC_RECURSIVE_DOUBLING = 4 };
/* From here up ring wins over recursive halving on 2 ranks over shared memory. */
#define RING_FROM_BYTES (4u << 20)
/* Below this recursive doubling (log p rounds, the whole buffer each) beats recursive
 * halving (2 log p rounds, less data): measured up to 64 KiB on 2 ranks, where both
 * move the same bytes. With more ranks doubling moves log p times the buffer; with
 * shared memory's ~1.5 us per message and ~10 GB/s the α-β crossover falls near
 * 32-60 KiB for 4-16 ranks, so the smaller bound. */
#define DOUBLING_BELOW_BYTES_2_RANKS (128u << 10)
#define DOUBLING_BELOW_BYTES (32u << 10)

void comm_mpi_algo_init(comm_mpi *m)
{
    m->algo_enabled = false;
    const char *user = getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
    if (user && *user)
        return;
    int provided, index, count;
    if (MPI_T_init_thread(MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return;
    m->algo_tool_open = true;
    if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) != MPI_SUCCESS ||
        MPI_T_cvar_handle_alloc(index, NULL, &m->algo_handle, &count) != MPI_SUCCESS)
        return;
    if (count != 1) {
        MPI_T_cvar_handle_free(&m->algo_handle);
        return;
    }
    m->algo_enabled = true;
}

/* The algorithm is one setting of the process, read when a collective starts. With
 * several communicators (pipeline stage groups) each has its own thread: every pick
 * and the start it is for happen under one lock, or another thread's pick could
 * change the algorithm of a start on one rank and not on its peers, and the ranks'
 * schedules would not match (MPI_ERR_TRUNCATE). */
static pthread_mutex_t algo_mu = PTHREAD_MUTEX_INITIALIZER;
static int algo_current = -1; /* under algo_mu */

void comm_mpi_algo_pick(comm_mpi *m, size_t bytes)
{
    if (!m->algo_enabled)
        return;
    pthread_mutex_lock(&algo_mu);
    size_t doubling_below = m->c->size == 2 ? DOUBLING_BELOW_BYTES_2_RANKS : DOUBLING_BELOW_BYTES;
    int want = bytes >= RING_FROM_BYTES   ? NBC_RING
               : bytes < doubling_below ? NBC_RECURSIVE_DOUBLING
                                        : NBC_RABENSEIFNER;
    if (want == algo_current)
        return;
    if (MPI_T_cvar_write(m->algo_handle, &want) == MPI_SUCCESS)
        algo_current = want;
    else
        m->algo_enabled = false; /* read-only in this library: MPI's own choice stays */
}

void comm_mpi_algo_started(comm_mpi *m, bool picked)
{
    if (picked)
        pthread_mutex_unlock(&algo_mu);
    (void)m;
}

void comm_mpi_algo_fini(comm_mpi *m)
{
    if (m->algo_enabled)
        MPI_T_cvar_handle_free(&m->algo_handle);
    if (m->algo_tool_open)
        MPI_T_finalize();
    m->algo_enabled = m->algo_tool_open = false;
}
