/*
 * Point-to-point bandwidth and latency between every pair of ranks, through the
 * communicator's sendrecv (so through MPI's shared memory or network transport,
 * as training's traffic goes). Pairs run one at a time, between barriers, so a
 * slow pair is not hidden by another pair's traffic.
 *
 * Every measurement queues all its messages at once: the communication thread runs
 * them in order, which keeps a ping-pong a ping-pong (each send follows the receive
 * before it) without a hand-off between threads per message.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "tools/bench_internal.h"

herd_status bench_p2p_matrices_alloc(int n, bench_p2p_matrices *m)
{
    memset(m, 0, sizeof *m);
    size_t cells = (size_t)n * (size_t)n;
    m->uni_gbps = herd_xcalloc(3 * cells, sizeof(double)); /* one block for the three */
    if (!m->uni_gbps)
        return HERD_ERR_NOMEM;
    m->bi_gbps = m->uni_gbps + cells;
    m->lat_us = m->bi_gbps + cells;
    m->n = n;
    return HERD_OK;
}

void bench_p2p_matrices_free(bench_p2p_matrices *m)
{
    free(m->uni_gbps);
    memset(m, 0, sizeof *m);
}

/* One rank's side of `reps` messages to (or from) peer, then a one-byte
 * acknowledgement back, so the sender's clock covers the last delivery. */
static herd_status stream(herd_comm *c, char *buf, size_t bytes, int reps, int peer, bool sender)
{
    const herd_comm_ops *o = c->ops;
    for (int i = 0; i < reps; i++)
        HERD_TRY(sender ? o->sendrecv_start(c, buf, bytes, peer, NULL, 0, -1)
                        : o->sendrecv_start(c, NULL, 0, -1, buf, bytes, peer));
    HERD_TRY(sender ? o->sendrecv_start(c, NULL, 0, -1, buf, 1, peer)
                    : o->sendrecv_start(c, buf, 1, peer, NULL, 0, -1));
    return o->wait_all(c);
}

/* Both ranks send and receive `reps` messages at once. */
static herd_status exchange(herd_comm *c, char *out, char *in, size_t bytes, int reps, int peer)
{
    for (int i = 0; i < reps; i++)
        HERD_TRY(c->ops->sendrecv_start(c, out, bytes, peer, in, bytes, peer));
    return c->ops->wait_all(c);
}

/* `reps` round trips; the first rank of the pair serves. */
static herd_status ping_pong(herd_comm *c, char *buf, size_t bytes, int reps, int peer, bool first)
{
    const herd_comm_ops *o = c->ops;
    for (int i = 0; i < reps; i++) {
        if (first) {
            HERD_TRY(o->sendrecv_start(c, buf, bytes, peer, NULL, 0, -1));
            HERD_TRY(o->sendrecv_start(c, NULL, 0, -1, buf, bytes, peer));
        } else {
            HERD_TRY(o->sendrecv_start(c, NULL, 0, -1, buf, bytes, peer));
            HERD_TRY(o->sendrecv_start(c, buf, bytes, peer, NULL, 0, -1));
        }
    }
    return o->wait_all(c);
}

/* Rank i's figures for the pair (i, j), measured when this rank is i or j. The
 * initiator's clock is the one recorded; the other rank's cells stay 0. */
static herd_status measure_pair(herd_comm *c, const bench_p2p_config *cfg, int i, int j,
                                char *out, char *in, bench_p2p_matrices *m)
{
    int n = c->size, me = c->rank, peer = me == i ? j : i;
    bool first = me == i;
    /* i -> j, then j -> i */
    for (int dir = 0; dir < 2; dir++) {
        bool sender = (dir == 0) == first;
        HERD_TRY(stream(c, out, cfg->bw_bytes, 1, peer, sender)); /* warm-up: connection set-up */
        double start = herd_now();
        HERD_TRY(stream(c, out, cfg->bw_bytes, cfg->bw_reps, peer, sender));
        double t = herd_now() - start;
        if (sender)
            m->uni_gbps[me * n + peer] = (double)cfg->bw_bytes * cfg->bw_reps / t / 1e9;
    }
    HERD_TRY(exchange(c, out, in, cfg->bw_bytes, 1, peer));
    double start = herd_now();
    HERD_TRY(exchange(c, out, in, cfg->bw_bytes, cfg->bw_reps, peer));
    double t = herd_now() - start;
    HERD_TRY(ping_pong(c, out, cfg->lat_bytes, cfg->lat_reps / 10 + 1, peer, first));
    start = herd_now();
    HERD_TRY(ping_pong(c, out, cfg->lat_bytes, cfg->lat_reps, peer, first));
    double lat = (herd_now() - start) / (2.0 * cfg->lat_reps);
    if (first) { /* both directions at once, and a round trip: the same figure both ways */
        m->bi_gbps[i * n + j] = m->bi_gbps[j * n + i] = 2.0 * cfg->bw_bytes * cfg->bw_reps / t / 1e9;
        m->lat_us[i * n + j] = m->lat_us[j * n + i] = 1e6 * lat;
    }
    return HERD_OK;
}

herd_status bench_p2p_ranks(bench_session *s, const bench_p2p_config *cfg, bench_p2p_matrices *out)
{
    herd_comm *c = bench_session_comm(s);
    memset(out, 0, sizeof *out);
    if (cfg->bw_bytes < 1 || cfg->bw_reps < 1 || cfg->lat_reps < 1 || cfg->lat_bytes < 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "p2p benchmark: message sizes and repetitions must be positive");
    if (!c->ops->sendrecv_start)
        return HERD_ERR(HERD_ERR_UNSUPPORTED,
                        "the %s communicator has no point-to-point messages; try --backend mpi",
                        c->ops->name);
    size_t bytes = cfg->bw_bytes > cfg->lat_bytes ? cfg->bw_bytes : cfg->lat_bytes;
    char *out_buf = herd_aligned_alloc(bytes), *in_buf = herd_aligned_alloc(bytes);
    herd_status st = out_buf && in_buf ? bench_p2p_matrices_alloc(c->size, out)
                                       : HERD_NOMEM(2 * bytes);
    int n = c->size;
    for (int i = 0; st == HERD_OK && i < n; i++)
        for (int j = i + 1; st == HERD_OK && j < n; j++) {
            st = c->ops->barrier(c);
            if (st == HERD_OK && (c->rank == i || c->rank == j))
                st = measure_pair(c, cfg, i, j, out_buf, in_buf, out);
        }
    /* Every cell was filled by one rank and is 0 on the others: a sum gathers them. */
    if (st == HERD_OK && n > 1)
        st = c->ops->allreduce_f64(c, out->uni_gbps, 3 * n * n);
    for (int i = 0; st == HERD_OK && i < n; i++)
        out->uni_gbps[i * n + i] = out->bi_gbps[i * n + i] = out->lat_us[i * n + i] = NAN;
    herd_aligned_free(out_buf);
    herd_aligned_free(in_buf);
    if (st != HERD_OK)
        bench_p2p_matrices_free(out);
    return st;
}
