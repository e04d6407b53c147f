/* The staged communicator (buffers of a device reduced through host memory, what
 * multi-rank GPU training uses without NCCL) over MPI on 2 or 3 ranks, on the device
 * named by argv[1] ("cpu", the default, or "sim", the simulated device whose memory
 * the host cannot touch): exact sums and averages of several buckets, the fp16 wire,
 * the buffer broadcast that makes replicas start equal, and a timeline opened on the
 * wrapper recording the reductions the wrapped MPI communicator runs ("cuda": the same
 * over GPU memory, one GPU per rank, or ranks sharing one). ZeRO's halves:
 * a reduce-scatter over uneven parts (one of them empty) lands each rank's sum in its
 * part, bitwise the MPI communicator's on host memory; all-gathers land every rank's
 * part, one ticket at a time. Pipelines: a split gives groups that reduce device
 * buffers, and point-to-point transfers carry device buffers between ranks. */
#include <string.h>

#include "mpi_common.h"

#include "backend/backend.h"
#include "obs/timeline.h"

static const herd_backend *be;

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

static float *dev_alloc(size_t n)
{
    float *d = be->alloc(n * sizeof *d);
    MT_CHECK(d != NULL, "allocating %zu floats on %s", n, be->name);
    if (!d)
        exit(1);
    return d;
}

static void up(float *d, const float *h, size_t n) { MT_OK(be->memcpy_h2d(d, h, n * sizeof *h)); }
static void down(float *h, const float *d, size_t n) { MT_OK(be->memcpy_d2h(h, d, n * sizeof *h)); }

static void check_allreduce(herd_comm *mpi, herd_comm *c)
{
    char trace[64]; /* rank 0 writes it */
    mt_shared_tempfile(c, trace);
    herd_timeline *tl;
    MT_OK(herd_timeline_open(trace, c, 8, &tl));
    MT_CHECK(c->trace == herd_timeline_sink(tl) && mpi->trace == herd_timeline_sink(tl),
             "the trace is attached to the wrapped comm");
    const size_t n = 100003, cut = 40000;
    float *g = malloc(n * sizeof *g), *d = dev_alloc(n);
    for (int step = 0; step < 2; step++) { /* the second step reuses the host copies */
        for (size_t i = 0; i < n; i++)
            g[i] = (float)(i % 64) + (float)c->rank; /* integers: exact sums */
        up(d, g, n);
        MT_OK(c->ops->allreduce_start(c, d + cut, n - cut, 1.0f, HERD_WIRE_FP32, "bucket 0"));
        MT_OK(c->ops->allreduce_start(c, d, cut, 1.0f / (float)c->size, HERD_WIRE_FP16,
                                      "bucket 1"));
        mt_compute(0.01);
        MT_OK(c->ops->wait_all(c));
        down(g, d, n);
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
    up(d, g, 1000);
    MT_OK(herd_comm_broadcast_buffer(c, be, d, 1000 * sizeof *g, 0));
    down(g, d, 1000);
    for (size_t i = 0; i < 1000; i++)
        if (g[i] != (float)i) {
            MT_CHECK(g[i] == (float)i, "broadcast element %zu: %g", i, g[i]);
            break;
        }
    be->free(d);
    free(g);
}

/* Values whose sums round: the reduce-scatter must add them as the host does. */
static float value(size_t i, int rank) { return 1.0f / (float)(i % 97 + 1) + 0.3f * (float)rank; }

static void check_zero_halves(herd_comm *mpi, herd_comm *c)
{
    /* Uneven parts, rank 1's empty (a bucket cut where the ranks' slices fall). */
    int counts[3] = {700, 0, 301};
    if (c->size == 2)
        counts[1] = 301;
    size_t n = 0, at = 0;
    for (int r = 0; r < c->size; r++) {
        at = r == c->rank ? n : at;
        n += (size_t)counts[r];
    }
    size_t mine = (size_t)counts[c->rank];
    float *h = malloc(n * sizeof *h), *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    float *d = dev_alloc(n);
    for (herd_wire_type wire = HERD_WIRE_FP32; wire <= HERD_WIRE_BF16; wire++) {
        /* The reference: MPI's own reduce-scatter on host memory. */
        for (size_t i = 0; i < n; i++)
            want[i] = h[i] = value(i, c->rank);
        MT_OK(mpi->ops->reduce_scatter_start(mpi, want, counts, 1.0f / (float)c->size, wire, false,
                                             "reference"));
        MT_OK(mpi->ops->wait_all(mpi));
        up(d, h, n);
        MT_OK(c->ops->reduce_scatter_start(c, d, counts, 1.0f / (float)c->size, wire, true, "rs"));
        MT_OK(c->ops->wait_all(c));
        down(got, d, n);
        MT_CHECK(memcmp(got + at, want + at, mine * sizeof *got) == 0,
                 "wire %d: the reduce-scatter's part differs from MPI's on the host", (int)wire);
    }

    /* All-gathers of two buffers; the first one's ticket lands it alone. */
    float *d2 = dev_alloc(n), *h2 = malloc(n * sizeof *h2);
    for (size_t i = 0; i < n; i++)
        h[i] = h2[i] = -1.0f;
    for (size_t i = at; i < at + mine; i++) {
        h[i] = value(i, c->rank);
        h2[i] = 2.0f * value(i, c->rank);
    }
    up(d, h, n);
    up(d2, h2, n);
    MT_OK(c->ops->allgather_start(c, d, counts, "ag 1"));
    uint64_t first = c->ops->ticket(c);
    MT_OK(c->ops->allgather_start(c, d2, counts, "ag 0"));
    MT_CHECK(c->ops->ticket(c) > first, "tickets grow: %llu after %llu",
             (unsigned long long)c->ops->ticket(c), (unsigned long long)first);
    MT_OK(c->ops->wait_ticket(c, first));
    down(got, d, n);
    size_t from = 0;
    for (int r = 0; r < c->size; r++) {
        int bad = 0;
        for (size_t i = from; i < from + (size_t)counts[r] && !bad; i++)
            bad = got[i] != value(i, r);
        MT_CHECK(!bad, "all-gather at its ticket: rank %d's part is not there", r);
        from += (size_t)counts[r];
    }
    MT_OK(c->ops->wait_all(c));
    down(got, d2, n);
    from = 0;
    for (int r = 0; r < c->size; r++) {
        int bad = 0;
        for (size_t i = from; i < from + (size_t)counts[r] && !bad; i++)
            bad = got[i] != 2.0f * value(i, r);
        MT_CHECK(!bad, "all-gather at wait_all: rank %d's part is not there", r);
        from += (size_t)counts[r];
    }
    be->free(d);
    be->free(d2);
    free(h);
    free(h2);
    free(want);
    free(got);
}

static void check_split_and_p2p(herd_comm *c)
{
    /* Groups of the even and the odd ranks, each reducing a device buffer. */
    herd_comm *g;
    MT_OK(c->ops->split(c, c->rank % 2, c->rank, "test group", &g));
    MT_CHECK(g->size == (c->size + 1 - c->rank % 2) / 2 && g->rank == c->rank / 2,
             "split: rank %d of %d", g->rank, g->size);
    float h[4] = {1, 2, 3, (float)c->rank}, *d = dev_alloc(4);
    up(d, h, 4);
    MT_OK(g->ops->allreduce_start(g, d, 4, 1.0f, HERD_WIRE_FP32, "group"));
    MT_OK(g->ops->wait_all(g));
    down(h, d, 4);
    float ranks = 0;
    for (int r = c->rank % 2; r < c->size; r += 2)
        ranks += (float)r;
    MT_CHECK(h[0] == (float)g->size && h[2] == 3.0f * (float)g->size && h[3] == ranks,
             "the group's sum: %g %g %g", h[0], h[2], h[3]);
    herd_comm_destroy(g);

    /* Rank 0 and 1 swap device buffers; on a device the sender may reuse its buffer
     * at once (its bytes left in a host copy). */
    if (c->rank > 1)
        goto done;
    enum { N = 5000 };
    float *out = dev_alloc(N), *in = dev_alloc(N), *hv = malloc(N * sizeof *hv);
    for (int i = 0; i < N; i++)
        hv[i] = (float)(i + 10000 * c->rank);
    up(out, hv, N);
    int peer = 1 - c->rank;
    herd_p2p rq, sq;
    MT_OK(c->ops->p2p_start(c, &rq, false, in, N * sizeof(float), peer, 7));
    MT_OK(c->ops->p2p_start(c, &sq, true, out, N * sizeof(float), peer, 7));
    if (!be->host_memory)
        MT_OK(be->fill(N, -5.0f, out));
    c->ops->p2p_progress(c);
    MT_OK(c->ops->p2p_wait(c, &sq, "test: sending"));
    MT_OK(c->ops->p2p_wait(c, &rq, "test: receiving"));
    down(hv, in, N);
    int bad = 0;
    for (int i = 0; i < N && !bad; i++)
        bad = hv[i] != (float)(i + 10000 * peer);
    MT_CHECK(!bad, "p2p: the device buffer from rank %d differs", peer);
    be->free(out);
    be->free(in);
    free(hv);
done:
    be->free(d);
}

int main(int argc, char **argv)
{
    const char *device = argc > 1 ? argv[1] : "cpu";
    herd_comm *mpi, *c;
    MT_OK(herd_comm_create_default(&(herd_comm_config){0}, &mpi));
    mt_rank = mpi->rank;
    be = mt_backend(mpi, device);
    MT_OK(herd_comm_staged_create(mpi, be, &c));
    MT_CHECK(c->rank == mpi->rank && c->size == mpi->size, "identity %d/%d", c->rank, c->size);
    check_allreduce(mpi, c);
    check_zero_halves(mpi, c);
    check_split_and_p2p(c);
    double v = 1.0;
    MT_OK(c->ops->allreduce_f64(c, &v, 1));
    MT_CHECK(v == c->size, "allreduce_f64 through the wrapper: %g", v);
    v = 2.0; /* asynchronous, forwarded to the host: complete at the wrapper's wait_all */
    MT_OK(c->ops->allreduce_f64_start(c, &v, 1, "metrics"));
    MT_OK(c->ops->wait_all(c));
    MT_CHECK(v == 2.0 * c->size, "allreduce_f64_start through the wrapper: %g", v);
    herd_comm_destroy(c);
    herd_comm_destroy(mpi);
    char summary[64];
    snprintf(summary, sizeof summary, "all checks passed on %s", device);
    return mt_finish(summary);
}
