/* The staged communicator (gradients reduced through host memory, what multi-rank
 * GPU training uses without NCCL) over MPI on 2 or 3 ranks, with the CPU backend as
 * the "device": exact sums and averages of several buckets, the fp16 wire, the
 * buffer broadcast that makes replicas start equal, and a timeline opened on the
 * wrapper recording the reductions the wrapped MPI communicator runs. */
#include <string.h>

#include "mpi_common.h"

#include "backend/backend.h"
#include "obs/timeline.h"

/* Rank 0: the trace's reduction events of rank r (lines of the communication track). */
static int comm_events_of(const char *path, int r)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[1024], track[32];
    snprintf(track, sizeof track, "\"pid\":%d,\"tid\":1,", r);
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, "\"cat\":\"comm\"") && strstr(line, "\"name\":\"allreduce bucket ") &&
             strstr(line, track);
    fclose(f);
    return n;
}

int main(void)
{
    herd_comm *mpi, *c;
    MT_OK(herd_comm_create_default(&(herd_comm_config){0}, &mpi));
    mt_rank = mpi->rank;
    MT_OK(herd_comm_staged_create(mpi, herd_backend_cpu(), &c));
    MT_CHECK(c->rank == mpi->rank && c->size == mpi->size, "identity %d/%d", c->rank, c->size);
    char trace[64]; /* rank 0 writes it */
    mt_shared_tempfile(c, trace);
    herd_timeline *tl;
    MT_OK(herd_timeline_open(trace, c, 8, &tl));
    MT_CHECK(c->trace == herd_timeline_sink(tl) && mpi->trace == herd_timeline_sink(tl),
             "the trace is attached to the wrapped comm");
    const size_t n = 100003, cut = 40000;
    float *g = malloc(n * sizeof *g);
    for (int step = 0; step < 2; step++) { /* the second step reuses the host copies */
        for (size_t i = 0; i < n; i++)
            g[i] = (float)(i % 64) + (float)c->rank; /* integers: exact sums */
        MT_OK(c->ops->allreduce_start(c, g + cut, n - cut, 1.0f, HERD_WIRE_FP32, "bucket 0"));
        MT_OK(c->ops->allreduce_start(c, g, cut, 1.0f / (float)c->size, HERD_WIRE_FP16,
                                      "bucket 1"));
        mt_compute(0.01);
        MT_OK(c->ops->wait_all(c));
        int bad = 0;
        for (size_t i = 0; i < n && bad < 5; i++) {
            float sum = (float)c->size * (float)(i % 64) + (float)(c->size * (c->size - 1) / 2);
            float want = i < cut ? sum / (float)c->size : sum;
            /* fp16 holds these averages exactly only to its 11-bit mantissa */
            float tol = i < cut ? want * 0x1p-10f : 0.0f;
            if (!(g[i] >= want - tol && g[i] <= want + tol)) {
                MT_CHECK(0, "step %d element %zu: %g, want %g", step, i, g[i], want);
                bad++;
            }
        }
    }
    MT_OK(herd_timeline_close(tl));
    MT_CHECK(c->trace == NULL && mpi->trace == NULL, "the trace is detached at close");
    if (c->rank == 0) {
        /* 2 steps of 2 buckets on every rank's communication track. */
        for (int r = 0; r < c->size; r++)
            MT_CHECK(comm_events_of(trace, r) == 4, "rank %d: %d reductions in the trace, want 4", r,
                     comm_events_of(trace, r));
        unlink(trace);
    }
    for (size_t i = 0; i < 1000; i++)
        g[i] = c->rank == 0 ? (float)i : -1.0f;
    MT_OK(herd_comm_broadcast_buffer(c, herd_backend_cpu(), g, 1000 * sizeof *g, 0));
    for (size_t i = 0; i < 1000; i++)
        if (g[i] != (float)i) {
            MT_CHECK(g[i] == (float)i, "broadcast element %zu: %g", i, g[i]);
            break;
        }
    double v = 1.0;
    MT_OK(c->ops->allreduce_f64(c, &v, 1));
    MT_CHECK(v == c->size, "allreduce_f64 through the wrapper: %g", v);
    v = 2.0; /* asynchronous, forwarded to the host: complete at the wrapper's wait_all */
    MT_OK(c->ops->allreduce_f64_start(c, &v, 1, "metrics"));
    MT_OK(c->ops->wait_all(c));
    MT_CHECK(v == 2.0 * c->size, "allreduce_f64_start through the wrapper: %g", v);
    free(g);
    herd_comm_destroy(c);
    herd_comm_destroy(mpi);
    return mt_finish("all checks passed");
}
