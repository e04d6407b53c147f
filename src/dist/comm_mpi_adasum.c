/*
 * Horovod's Adasum over MPI (herd_dist_allreduce_adasum_start), on the communication
 * thread: per tensor, two ranks' vectors a and b combine as
 *     (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b,
 * a sum where they are orthogonal, their mean where they are parallel, in a binary tree
 * over the ranks.
 *
 * The tree is walked by vector halving and distance doubling, so each rank sends about
 * twice the buffer in all (an allreduce's traffic): at level k a rank trades half of its
 * current range with rank ^ 2^k and keeps the other half of both sides; the dot product
 * and the squared norms of each tensor are partial over that half, and summed over the
 * 2^(k+1) ranks that hold the rest of it by recursive doubling. After the last level each
 * rank holds one combined part; distance halving gathers them back. Every value is
 * combined by exactly one rank, so every rank ends with the same bits. The side of the
 * tree (a or b) is the rank's bit k, the same on every rank.
 *
 * Rank counts that are not a power of two (Horovod refuses them): the ranks past the
 * largest power of two P are first combined into rank - P, as one level of the tree
 * between the two, and get the result back at the end.
 *
 * The arithmetic is in double; the values stay in their type between levels (16-bit
 * values too: half the bytes on the wire, as Horovod's fp16 Adasum).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "dist/comm_mpi_internal.h"

/* Tag of these messages (one op runs at a time on the thread: none else meets them). */
#define ADASUM_TAG 3

static double load(herd_dtype t, const void *x, size_t i)
{
    switch (t) {
    case HERD_DTYPE_F32: return ((const float *)x)[i];
    case HERD_DTYPE_F64: return ((const double *)x)[i];
    case HERD_DTYPE_F16: return herd_half_to_float(((const uint16_t *)x)[i]);
    default: return herd_bf16_to_float(((const uint16_t *)x)[i]);
    }
}

static void store(herd_dtype t, void *x, size_t i, double v)
{
    switch (t) {
    case HERD_DTYPE_F32: ((float *)x)[i] = (float)v; break;
    case HERD_DTYPE_F64: ((double *)x)[i] = v; break;
    case HERD_DTYPE_F16: ((uint16_t *)x)[i] = herd_float_to_half((float)v); break;
    default: ((uint16_t *)x)[i] = herd_float_to_bf16((float)v); break;
    }
}

typedef struct adasum_run {
    comm_mpi *m;
    herd_dtype type;
    size_t elem; /* the values travel as bytes: the 16-bit types have no MPI type */
    const int64_t *counts;
    size_t tensors;
    double *stats, *peer_stats; /* 3 per tensor: a.b, |a|^2, |b|^2 */
} adasum_run;

/* Sends `bytes` at send to peer and receives recv_bytes into recv, both at once, in pieces
 * of at most one MPI count. */
static int exchange_bytes(adasum_run *r, const void *send, size_t bytes, void *recv, size_t recv_bytes,
                          int peer)
{
    int rc = MPI_SUCCESS;
    for (size_t off = 0; rc == MPI_SUCCESS && (off < bytes || off < recv_bytes); off += COMM_MPI_MAX_PIECE) {
        size_t s = off < bytes ? bytes - off : 0, v = off < recv_bytes ? recv_bytes - off : 0;
        s = s < COMM_MPI_MAX_PIECE ? s : COMM_MPI_MAX_PIECE;
        v = v < COMM_MPI_MAX_PIECE ? v : COMM_MPI_MAX_PIECE;
        MPI_Request rq = MPI_REQUEST_NULL, sq = MPI_REQUEST_NULL;
        if (v)
            rc = MPI_Irecv((char *)recv + off, (int)v, MPI_BYTE, peer, ADASUM_TAG, r->m->world, &rq);
        if (rc == MPI_SUCCESS && s)
            rc = MPI_Isend((const char *)send + off, (int)s, MPI_BYTE, peer, ADASUM_TAG, r->m->world, &sq);
        if (rc == MPI_SUCCESS && v)
            rc = comm_mpi_wait_request(r->m, &rq);
        if (rc == MPI_SUCCESS && s)
            rc = comm_mpi_wait_request(r->m, &sq);
    }
    return rc;
}

/* The same of n values of the buffer's type, and n_recv back. */
static int exchange(adasum_run *r, const void *send, size_t n, void *recv, size_t n_recv, int peer)
{
    return exchange_bytes(r, send, n * r->elem, recv, n_recv * r->elem, peer);
}

/* In LANES partial sums, added in lane order at the end: one fixed order (each part of
 * a tensor is summed by one rank), which the compiler can vectorise. */
#define LANES 8

/* out[0..3) = a.b, |a|^2, |b|^2 over a[from..to), b[from..to). */
static void dot_and_norms(herd_dtype t, const void *a, const void *b, size_t from, size_t to, double *out)
{
    double d[LANES] = {0}, x2[LANES] = {0}, y2[LANES] = {0};
    size_t i = from;
    if (t == HERD_DTYPE_F32) {
        const float *x = a, *y = b;
        for (; i + LANES <= to; i += LANES)
            for (int k = 0; k < LANES; k++) {
                double u = x[i + k], v = y[i + k];
                d[k] += u * v;
                x2[k] += u * u;
                y2[k] += v * v;
            }
    } else if (t == HERD_DTYPE_F64) {
        const double *x = a, *y = b;
        for (; i + LANES <= to; i += LANES)
            for (int k = 0; k < LANES; k++) {
                d[k] += x[i + k] * y[i + k];
                x2[k] += x[i + k] * x[i + k];
                y2[k] += y[i + k] * y[i + k];
            }
    }
    for (; i < to; i++) { /* the tail, and the 16-bit types */
        double u = load(t, a, i), v = load(t, b, i);
        d[0] += u * v;
        x2[0] += u * u;
        y2[0] += v * v;
    }
    out[0] = out[1] = out[2] = 0;
    for (int k = 0; k < LANES; k++) {
        out[0] += d[k];
        out[1] += x2[k];
        out[2] += y2[k];
    }
}

/* Each tensor's a.b, |a|^2 and |b|^2 over the values [lo, hi) of the buffer, where a
 * and b hold those values (a[i - lo], b[i - lo]). */
static void partial_stats(adasum_run *r, const void *a, const void *b, size_t lo, size_t hi)
{
    memset(r->stats, 0, 3 * r->tensors * sizeof *r->stats);
    size_t start = 0;
    for (size_t t = 0; t < r->tensors; t++) {
        size_t end = start + (size_t)r->counts[t];
        size_t from = start > lo ? start : lo, to = end < hi ? end : hi;
        if (to > from)
            dot_and_norms(r->type, a, b, from - lo, to - lo, r->stats + 3 * t);
        start = end;
    }
}

/* The stats summed with peer's: the lower rank's first on both sides, so both end with
 * the same bits. */
static int pair_sum(adasum_run *r, int rank, int peer)
{
    size_t n = 3 * r->tensors;
    int rc = exchange_bytes(r, r->stats, n * sizeof *r->stats, r->peer_stats, n * sizeof *r->stats, peer);
    bool lower = rank < peer;
    for (size_t i = 0; rc == MPI_SUCCESS && i < n; i++)
        r->stats[i] = lower ? r->stats[i] + r->peer_stats[i] : r->peer_stats[i] + r->stats[i];
    return rc;
}

/* The stats summed over the 2^(level+1) ranks whose ranks differ from ours in bits
 * 0..level only, by recursive doubling: all of them end with the same bits. */
static int group_sum(adasum_run *r, int rank, int level)
{
    int rc = MPI_SUCCESS;
    for (int j = 0; j <= level && rc == MPI_SUCCESS; j++)
        rc = pair_sum(r, rank, rank ^ (1 << j));
    return rc;
}

/* out[i] = ca a[i] + cb b[i] over [from, to), in double (out may be a or b). */
static void scaled_add(herd_dtype t, void *out, const void *a, const void *b, size_t from, size_t to,
                       double ca, double cb)
{
    if (t == HERD_DTYPE_F32) {
        float *o = out;
        const float *x = a, *y = b;
        for (size_t i = from; i < to; i++)
            o[i] = (float)(ca * x[i] + cb * y[i]);
    } else if (t == HERD_DTYPE_F64) {
        double *o = out;
        const double *x = a, *y = b;
        for (size_t i = from; i < to; i++)
            o[i] = ca * x[i] + cb * y[i];
    } else {
        for (size_t i = from; i < to; i++)
            store(t, out, i, ca * load(t, a, i) + cb * load(t, b, i));
    }
}

/* out[i - lo] = ca a[i - lo] + cb b[i - lo] over [lo, hi), each tensor with its own
 * coefficients from the (summed) stats. A zero vector keeps coefficient 1: its term is
 * zero, and the other vector passes through whole. */
static void combine(adasum_run *r, void *out, const void *a, const void *b, size_t lo, size_t hi)
{
    size_t start = 0;
    for (size_t t = 0; t < r->tensors; t++) {
        size_t end = start + (size_t)r->counts[t];
        size_t from = start > lo ? start : lo, to = end < hi ? end : hi;
        double dot = r->stats[3 * t], aa = r->stats[3 * t + 1], bb = r->stats[3 * t + 2];
        double ca = aa > 0 ? 1.0 - dot / (2.0 * aa) : 1.0, cb = bb > 0 ? 1.0 - dot / (2.0 * bb) : 1.0;
        if (to > from)
            scaled_add(r->type, out, a, b, from - lo, to - lo, ca, cb);
        start = end;
    }
}

/* One level of the tree between this rank and peer over x[lo, hi): the lower rank (the
 * tree's a side) keeps the first half, the other the second; each receives the peer's
 * values of its half into `other`, sums the half's stats over `level`'s group (-1: with
 * the peer alone) and combines it in place. [*keep_lo, *keep_hi): the half kept. */
static int level_step(adasum_run *r, char *x, size_t lo, size_t hi, void *other, int rank, int peer,
                      int level, size_t *keep_lo, size_t *keep_hi)
{
    bool lower = rank < peer;
    size_t elem = r->elem, mid = lo + (hi - lo) / 2;
    *keep_lo = lower ? lo : mid;
    *keep_hi = lower ? mid : hi;
    size_t give_lo = lower ? mid : lo, give_hi = lower ? hi : mid;
    int rc = exchange(r, x + give_lo * elem, give_hi - give_lo, other, *keep_hi - *keep_lo, peer);
    char *mine = x + *keep_lo * elem;
    const void *a = lower ? (const void *)mine : other, *b = lower ? other : (const void *)mine;
    if (rc == MPI_SUCCESS) {
        partial_stats(r, a, b, *keep_lo, *keep_hi);
        rc = level < 0 ? pair_sum(r, rank, peer) : group_sum(r, rank, level);
    }
    if (rc == MPI_SUCCESS)
        combine(r, mine, a, b, *keep_lo, *keep_hi);
    return rc;
}

/* Among ranks 0..pow2-1: x becomes the tree's combination of their vectors. */
static int halve_and_double(adasum_run *r, char *x, size_t n, void *other, int rank, int pow2)
{
    size_t elem = r->elem, lo_at[32], hi_at[32], lo = 0, hi = n;
    int levels = 0, rc = MPI_SUCCESS;
    for (int bit = 1; bit < pow2 && rc == MPI_SUCCESS; bit *= 2, levels++) {
        lo_at[levels] = lo;
        hi_at[levels] = hi;
        rc = level_step(r, x, lo_at[levels], hi_at[levels], other, rank, rank ^ bit, levels, &lo, &hi);
    }
    /* Back down the levels: each rank's combined part to its partners. */
    for (int k = levels - 1; k >= 0 && rc == MPI_SUCCESS; k--) {
        bool lower = !(rank & (1 << k));
        size_t mid = lo_at[k] + (hi_at[k] - lo_at[k]) / 2;
        size_t other_lo = lower ? mid : lo_at[k], other_hi = lower ? hi_at[k] : mid;
        rc = exchange(r, x + lo * elem, hi - lo, x + other_lo * elem, other_hi - other_lo, rank ^ (1 << k));
        lo = lo_at[k];
        hi = hi_at[k];
    }
    return rc;
}

/* Rank i and rank i + pow2 combined into rank i's x, as one level of the tree between the
 * two (each combines half; rank i + pow2 then hands its half over), so that neither
 * does all of it while the other waits. */
static int fold(adasum_run *r, char *x, size_t n, void *other, int rank, int peer)
{
    size_t lo, hi;
    int rc = level_step(r, x, 0, n, other, rank, peer, -1, &lo, &hi);
    size_t mid = n / 2, elem = r->elem;
    if (rc == MPI_SUCCESS && rank < peer)
        rc = exchange(r, NULL, 0, x + mid * elem, n - mid, peer);
    else if (rc == MPI_SUCCESS)
        rc = exchange(r, x + lo * elem, hi - lo, NULL, 0, peer);
    return rc;
}

int comm_mpi_adasum(comm_mpi *m, const mpi_op *op, char *err, size_t cap)
{
    int size = m->c->size, rank = m->c->rank, pow2 = 1;
    while (pow2 * 2 <= size)
        pow2 *= 2;
    size_t n = op->n, elem = comm_mpi_elem_size(op->elem);
    int64_t whole = (int64_t)n;
    adasum_run r = {.m = m, .type = op->elem, .elem = elem,
                    .counts = op->tensor_counts ? op->tensor_counts : &whole,
                    .tensors = op->tensor_counts ? op->n_tensors : 1};
    /* The partner's half (the whole vector from a rank folded in), and the stats. */
    void *other = comm_mpi_scratch(m, n ? n * elem : 1, err, cap);
    r.stats = malloc(6 * (r.tensors ? r.tensors : 1) * sizeof *r.stats);
    if (!other || !r.stats) {
        free(r.stats);
        if (!err[0])
            snprintf(err, cap, "rank %d on host %s: out of memory for Adasum's statistics of %zu "
                     "tensors", rank, m->c->host, r.tensors);
        return MPI_ERR_NO_MEM;
    }
    r.peer_stats = r.stats + 3 * r.tensors;
    char *x = op->data;
    int rc = MPI_SUCCESS;
    if (rank >= pow2) { /* folded in: half combined here, the result back at the end */
        rc = fold(&r, x, n, other, rank, rank - pow2);
        if (rc == MPI_SUCCESS)
            rc = exchange(&r, NULL, 0, x, n, rank - pow2);
    } else {
        bool folds = rank + pow2 < size; /* this rank's vector is a, the folded-in rank's b */
        if (folds)
            rc = fold(&r, x, n, other, rank, rank + pow2);
        if (rc == MPI_SUCCESS)
            rc = halve_and_double(&r, x, n, other, rank, pow2);
        if (rc == MPI_SUCCESS && folds)
            rc = exchange(&r, x, n, NULL, 0, rank + pow2);
    }
    free(r.stats);
    return rc;
}
