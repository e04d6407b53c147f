/* The MPI communicator's collectives on 2 or 3 ranks: exact sums, averages, fp16/bf16
 * wire types, ZeRO's reduce-scatter and all-gather, the public reduce-scatter, alltoall, min, max and
 * product, allgather of parts of any size (blocking and started), blocking
 * collectives (the exact sums' reduce-scatter of doubles among them), local ranks, and how much a 16 MiB reduction
 * overlaps with computation. */
#include <math.h>
#include <string.h>

#include "mpi_common.h"

static void check_fp32_slices(herd_comm *c)
{
    const size_t n = ((size_t)1 << 20) + 13, cuts[] = {0, 1000, 300000, 700001, n};
    float *g = malloc(n * sizeof *g);
    for (size_t i = 0; i < n; i++)
        g[i] = (float)(i % 1000) - 300.0f + (float)c->rank; /* integers: sums are exact */
    const float avg = 1.0f / (float)c->size;
    for (int s = 0; s < 4; s++)
        MT_OK(c->ops->allreduce_start(c, g + cuts[s], cuts[s + 1] - cuts[s], s < 2 ? 1.0f : avg,
                                      HERD_WIRE_FP32, "slice"));
    mt_compute(0.05); /* the caller goes on with backward */
    MT_OK(c->ops->wait_all(c));
    int bad = 0;
    for (size_t i = 0; i < n && bad < 5; i++) {
        float sum = (float)c->size * ((float)(i % 1000) - 300.0f) + (float)(c->size * (c->size - 1) / 2);
        float want = i < cuts[2] ? sum : sum * avg;
        if (g[i] != want) {
            MT_CHECK(g[i] == want, "element %zu: %g, want %g", i, g[i], want);
            bad++;
        }
    }
    free(g);
}

static void check_wire(herd_comm *c, herd_wire_type wire, float scale)
{
    const size_t n = 4099;
    float *g = malloc(n * sizeof *g);
    /* Values that, once scaled (before the cast), lie a little off the wire grid
     * (rounded away on conversion) and whose exact sums are on it, so every order of
     * summation gives the same result. */
    for (size_t i = 0; i < n; i++)
        g[i] = ((float)(i % 16) - 8.0f + 0.5f * (float)c->rank) / scale * (1.0f + 0x1p-12f);
    MT_OK(c->ops->allreduce_start(c, g, n, scale, wire, "wire"));
    MT_OK(c->ops->wait_all(c));
    int bad = 0;
    for (size_t i = 0; i < n && bad < 5; i++) {
        float sum = (float)c->size * ((float)(i % 16) - 8.0f) + 0.25f * (float)(c->size * (c->size - 1));
        if (g[i] != sum) {
            MT_CHECK(g[i] == sum, "wire %d element %zu: %.9g, want %.9g", (int)wire, i, g[i], sum);
            bad++;
        }
    }
    free(g);
}

/* A mean within fp16's range survives the fp16 wire even where the ranks' sum would
 * overflow it (65504): each rank's values are scaled before the cast. */
static void check_wire_headroom(herd_comm *c)
{
    float g[] = {40000.0f, -40000.0f, 60000.0f, 1.0f};
    const size_t n = sizeof g / sizeof *g;
    float want[sizeof g / sizeof *g];
    memcpy(want, g, sizeof g);
    MT_OK(c->ops->allreduce_start(c, g, n, 1.0f / (float)c->size, HERD_WIRE_FP16, "headroom"));
    MT_OK(c->ops->wait_all(c));
    for (size_t i = 0; i < n; i++) /* within fp16's rounding of each rank's share */
        MT_CHECK(isfinite(g[i]) && fabsf(g[i] - want[i]) <= fabsf(want[i]) * 0x1p-9f,
                 "fp16 mean of %g: %g", want[i], g[i]);
}

/* allreduce_f64_start: queued with gradient slices, complete (and exact) at wait_all,
 * in order with them, like the training metrics that travel with the next step. */
static void check_f64_async(herd_comm *c)
{
    /* Dyadic values: every order of the sum is exact, so the check can be ==. */
    double metrics[3] = {0.5 * (c->rank + 1), 0x1p-40 * (c->rank + 1), 0x1p40 + c->rank};
    float g[1000];
    for (int i = 0; i < 1000; i++)
        g[i] = (float)(i + c->rank);
    MT_OK(c->ops->allreduce_f64_start(c, metrics, 3, "metrics"));
    MT_OK(c->ops->allreduce_start(c, g, 1000, 1.0f, HERD_WIRE_FP32, "bucket"));
    mt_compute(0.01);
    MT_OK(c->ops->wait_all(c));
    double n = c->size, ranks = n * (n - 1) / 2;
    double want[3] = {0.5 * (ranks + n), 0x1p-40 * (ranks + n), 0x1p40 * n + ranks};
    for (int k = 0; k < 3; k++)
        MT_CHECK(metrics[k] == want[k], "metrics[%d] = %.17g, want %.17g", k, metrics[k], want[k]);
    for (int i = 0; i < 1000; i++)
        if (g[i] != (float)(n * i + ranks)) {
            MT_CHECK(0, "bucket element %d after the metrics: %g", i, g[i]);
            break;
        }
    MT_CHECK(c->ops->allreduce_f64_start(c, NULL, 2, "bad") == HERD_ERR_INVALID_ARG,
             "a NULL buffer is refused");
}

/* ZeRO's halves: a reduce-scatter gives each rank the allreduce's bits on its part
 * (fp32 and 16-bit wires, parts of every size including none), the all-gather then
 * gives every rank the whole; released pages read as zero. On 2 ranks any values (a sum
 * of two is the same in either order); on more, the ring adds in another order than
 * the allreduce, so values whose sums are exact in every order. */
static void check_zero_parts(herd_comm *c)
{
    const int n = 300000;
    int counts[8], before = 0;
    for (int r = 0, left = n; r < c->size; r++) { /* with 3 ranks, rank 1 owns nothing */
        counts[r] = r == c->size - 1 ? left : r == 1 ? 0 : n / (c->size + 1);
        left -= counts[r];
    }
    for (int r = 0; r < c->rank; r++)
        before += counts[r];
    const herd_wire_type wires[] = {HERD_WIRE_FP32, HERD_WIRE_FP16, HERD_WIRE_BF16};
    float *g = aligned_alloc(4096, ((size_t)n * sizeof *g + 4095) / 4096 * 4096);
    float *ref = malloc((size_t)n * sizeof *ref);
    for (int w = 0; w < 3; w++) {
        bool two = c->size == 2;
        for (int i = 0; i < n; i++)
            g[i] = ref[i] = two ? sinf((float)i * 0.37f + (float)c->rank) * 3.0f
                                : (float)(i % 17 - 8 + c->rank);
        float scale = two ? 1.0f / (float)c->size : 1.0f;
        MT_OK(c->ops->allreduce_start(c, ref, (size_t)n, scale, wires[w], "reference"));
        MT_OK(c->ops->reduce_scatter_start(c, g, counts, scale, wires[w], w == 0, "parts"));
        MT_OK(c->ops->wait_all(c));
        int bad = 0;
        for (int i = before; i < before + counts[c->rank] && bad < 5; i++)
            if (memcmp(&g[i], &ref[i], sizeof *g) != 0) {
                MT_CHECK(0, "wire %d: reduce-scatter element %d = %.9g, allreduce %.9g", w, i,
                         g[i], ref[i]);
                bad++;
            }
        if (w == 0 && c->rank == 0) /* rank 0's part is first: the pages after it went back */
            MT_CHECK(g[2 * n / 3] == 0.0f, "a released page reads %g", g[2 * n / 3]);
        MT_OK(c->ops->allgather_start(c, g, counts, "parts"));
        MT_OK(c->ops->wait_all(c));
        for (int i = 0; i < n && bad < 5; i++)
            if (memcmp(&g[i], &ref[i], sizeof *g) != 0) {
                MT_CHECK(0, "wire %d: all-gather element %d = %.9g, allreduce %.9g", w, i, g[i],
                         ref[i]);
                bad++;
            }
    }
    free(g);
    free(ref);
}

/* herd_dist_reduce_scatter (the public API, Horovod's reducescatter): each rank's part
 * bitwise an allreduce's (values whose sums are exact in any order), uneven counts and an
 * empty part included; counts that do not
 * add up refused before any rank sends. */
static void check_public_reduce_scatter(herd_comm *c)
{
    enum { N = 1001 };
    int counts[8], before = 0;
    for (int r = 0, left = N; r < c->size; r++) {
        counts[r] = r == c->size - 1 ? left : r == 0 ? 0 : N / c->size + 1;
        left -= counts[r];
    }
    for (int r = 0; r < c->rank; r++)
        before += counts[r];
    static float g[N], ref[N];
    for (int i = 0; i < N; i++)
        g[i] = ref[i] = (float)(i % 13 - 6 + c->rank); /* exact in any order and on bf16 */
    MT_OK(c->ops->allreduce_start(c, ref, N, 0.5f, HERD_WIRE_BF16, "reference"));
    MT_OK(c->ops->wait_all(c));
    MT_OK(herd_dist_reduce_scatter(c, g, N, counts, 0.5f, HERD_COMPRESS_BF16, "public"));
    MT_CHECK(memcmp(g + before, ref + before, (size_t)counts[c->rank] * sizeof *g) == 0,
             "herd_dist_reduce_scatter: rank %d's %d values differ from the allreduce's", c->rank,
             counts[c->rank]);
    counts[0]++;
    MT_CHECK(herd_dist_reduce_scatter(c, g, N, counts, 1.0f, HERD_COMPRESS_NONE, "bad") ==
                 HERD_ERR_INVALID_ARG, "counts summing to %d accepted for %d values", N + 1, N);
}

/* herd_dist_alltoall: rank r sends d + r + 1 ints to rank d, each holding 100 r + d. */
static void check_alltoall(herd_comm *c)
{
    int n = c->size, me = c->rank, send[64] = {0}, recv[64] = {0};
    size_t to[8] = {0}, from[8] = {0}, at = 0;
    for (int d = 0; d < n; d++) {
        to[d] = (size_t)(d + me + 1) * sizeof(int);
        from[d] = (size_t)(me + d + 1) * sizeof(int);
        for (int i = 0; i < d + me + 1; i++)
            send[at++] = 100 * me + d;
    }
    MT_OK(herd_dist_alltoall(c, send, to, recv, from));
    at = 0;
    int bad = 0;
    for (int s = 0; s < n; s++)
        for (int i = 0; i < me + s + 1; i++)
            bad += recv[at++] != 100 * s + me;
    MT_CHECK(bad == 0, "alltoall: %d of %zu values not the sender's", bad, at);
}

/* herd_dist_split (herd.torch's process sets): the even ranks and the odd ones each sum
 * within their group, side by side; a list that differs between ranks is refused on every
 * rank. */
static void check_split(herd_comm *c)
{
    int evens[8], odds[8], ne = 0, no = 0;
    for (int r = 0; r < c->size; r++) {
        if (r % 2)
            odds[no++] = r;
        else
            evens[ne++] = r;
    }
    herd_dist *even = NULL, *odd = NULL;
    MT_OK(herd_dist_split(c, evens, ne, "evens", &even));
    if (no)
        MT_OK(herd_dist_split(c, odds, no, "odds", &odd));
    bool is_even = c->rank % 2 == 0;
    herd_dist *mine = is_even ? even : odd, *other = is_even ? odd : even;
    int group = is_even ? ne : no;
    MT_CHECK(other == NULL, "rank %d got a group it is not in", c->rank);
    MT_CHECK(herd_dist_size(mine) == group && herd_dist_rank(mine) == c->rank / 2,
             "rank %d: rank %d of %d in its group, want %d of %d", c->rank, herd_dist_rank(mine),
             herd_dist_size(mine), c->rank / 2, group);
    float v[3] = {(float)c->rank, 1.0f, 0.5f};
    uint64_t ticket;
    MT_OK(herd_dist_allreduce_start(mine, v, 3, HERD_DTYPE_F32, 1.0f, HERD_COMPRESS_NONE, "group", &ticket));
    MT_OK(herd_dist_wait(mine, ticket));
    float want = 0;
    for (int r = is_even ? 0 : 1; r < c->size; r += 2)
        want += (float)r;
    MT_CHECK(v[0] == want && v[1] == (float)group && v[2] == 0.5f * (float)group,
             "rank %d: group sums %g %g %g, want %g %d %g", c->rank, v[0], v[1], v[2], want, group,
             0.5 * group);
    herd_dist_free(even);
    herd_dist_free(odd);
    int first[1] = {c->rank == 1 ? 1 : 0};
    herd_dist *bad = NULL;
    herd_status st = herd_dist_split(c, first, 1, "differing", &bad);
    MT_CHECK(st == HERD_ERR_INVALID_ARG && bad == NULL &&
                 strstr(herd_last_error(), "rank 1 lists other ranks than rank 0"),
             "differing lists: %d %s", (int)st, herd_last_error());
    int unordered[2] = {1, 0};
    MT_CHECK(herd_dist_split(c, unordered, 2, "unordered", &bad) == HERD_ERR_INVALID_ARG &&
                 strstr(herd_last_error(), "in increasing order"), "unordered: %s", herd_last_error());
    /* A list bad on rank 1 alone: refused there, and on the others naming rank 1 (none
     * left waiting in the split). */
    int one_bad[2] = {0, c->rank == 1 ? c->size : 1};
    st = herd_dist_split(c, one_bad, 2, "one bad", &bad);
    MT_CHECK(st == HERD_ERR_INVALID_ARG && bad == NULL &&
                 strstr(herd_last_error(), c->rank == 1 ? "in increasing order"
                                                        : "rank 1 lists ranks no group can have"),
             "a list bad on rank 1 only: %s", herd_last_error());
}

/* herd_dist_allreduce_op_start (Horovod's Min, Max and Product): every type against the
 * ranks' values folded here, bit for bit; a NaN on one rank wins a min or a max, -0 < +0,
 * integer products wrap as MPI's do; 16-bit floats refused, naming the conversion. */
static double op_value(herd_dtype t, int r, int i)
{
    if (t == HERD_DTYPE_F32 || t == HERD_DTYPE_F64) {
        if (i == 0 && r == 1)
            return NAN;
        if (i == 1)
            return r == 0 ? -0.0 : 0.0;
        if (i == 2 && r == 0)
            return -INFINITY;
        return ldexp((i + r) % 3 == 0 ? -1.0 : 1.0, (i * 7 + r * 3) % 5 - 2); /* exact products */
    }
    double v = (i * 7 + r * 5) % 9 - 4;
    return t == HERD_DTYPE_U8 ? v + 4 : t == HERD_DTYPE_I64 ? v * 1e12 + i : v;
}

static double op_fold(herd_reduce_op op, double a, double b)
{
    if (op == HERD_REDUCE_PRODUCT)
        return a * b;
    if (isnan(a) || isnan(b))
        return NAN;
    if (a == b) /* -0 and +0: min takes the negative one */
        return (signbit(a) != 0) == (op == HERD_REDUCE_MIN) ? a : b;
    return (a < b) == (op == HERD_REDUCE_MIN) ? a : b;
}

static void op_store(herd_dtype t, void *buf, int i, double v, uint64_t wrapped)
{
    switch (t) {
    case HERD_DTYPE_F32: ((float *)buf)[i] = (float)v; break;
    case HERD_DTYPE_F64: ((double *)buf)[i] = v; break;
    case HERD_DTYPE_I8: ((uint8_t *)buf)[i] = (uint8_t)wrapped; break;
    case HERD_DTYPE_U8: ((uint8_t *)buf)[i] = (uint8_t)wrapped; break;
    case HERD_DTYPE_I16: ((uint16_t *)buf)[i] = (uint16_t)wrapped; break;
    case HERD_DTYPE_I32: ((uint32_t *)buf)[i] = (uint32_t)wrapped; break;
    default: ((uint64_t *)buf)[i] = wrapped; break;
    }
}

static void check_reduce_ops(herd_comm *c)
{
    enum { N = 40 };
    static const herd_dtype types[] = {HERD_DTYPE_F32, HERD_DTYPE_F64, HERD_DTYPE_I8, HERD_DTYPE_U8,
                                       HERD_DTYPE_I16, HERD_DTYPE_I32, HERD_DTYPE_I64};
    static const size_t sizes[] = {4, 8, 1, 1, 2, 4, 8};
    for (size_t k = 0; k < sizeof types / sizeof *types; k++)
        for (int op = HERD_REDUCE_MIN; op <= HERD_REDUCE_PRODUCT; op++) {
            herd_dtype t = types[k];
            bool integer = t >= HERD_DTYPE_I8; /* wrapped as MPI's products are: in uint64 */
            uint64_t got[N], want[N], ticket;
            for (int i = 0; i < N; i++) {
                double v = op_value(t, 0, i);
                uint64_t w = integer ? (uint64_t)(int64_t)v : 0;
                for (int r = 1; r < c->size; r++) {
                    double x = op_value(t, r, i);
                    v = op_fold((herd_reduce_op)op, v, x);
                    if (integer)
                        w = op == HERD_REDUCE_PRODUCT ? w * (uint64_t)(int64_t)x : (uint64_t)(int64_t)v;
                }
                op_store(t, want, i, v, w);
                double mine = op_value(t, c->rank, i);
                op_store(t, got, i, mine, integer ? (uint64_t)(int64_t)mine : 0);
            }
            MT_OK(herd_dist_allreduce_op_start(c, got, N, t, (herd_reduce_op)op, "ops", &ticket));
            MT_OK(herd_dist_wait(c, ticket));
            int bad = -1;
            for (int i = 0; i < N && bad < 0; i++) {
                bool same = memcmp((char *)got + i * sizes[k], (char *)want + i * sizes[k], sizes[k]) == 0;
                if (t == HERD_DTYPE_F32 && isnan(((float *)want)[i]))
                    same = isnan(((float *)got)[i]);
                if (t == HERD_DTYPE_F64 && isnan(((double *)want)[i]))
                    same = isnan(((double *)got)[i]);
                bad = same ? -1 : i;
            }
            MT_CHECK(bad < 0, "allreduce_op_start type %d op %d: value %d differs from the fold", (int)t,
                     op, bad);
        }
    float f[1] = {1};
    uint64_t ticket;
    MT_CHECK(herd_dist_allreduce_op_start(c, f, 1, HERD_DTYPE_BF16, HERD_REDUCE_MAX, "half", &ticket) ==
                 HERD_ERR_INVALID_ARG && strstr(herd_last_error(), "convert them to float32"),
             "bfloat16 max: %s", herd_last_error());
    MT_CHECK(herd_dist_allreduce_op_start(c, f, 1, HERD_DTYPE_F32, (herd_reduce_op)3, "op", &ticket) ==
                 HERD_ERR_INVALID_ARG, "op 3 accepted");
}

/* herd_dist_allgather with parts of other sizes (one MPI_Iallgatherv) and
 * herd_dist_allgather_start: rank r's 3r + 1 bytes (none from rank 0 asynchronously),
 * from its own buffer and in place, a sum queued behind it; a negative count refused. */
static void check_public_allgather(herd_comm *c)
{
    unsigned char mine[64], all[256];
    size_t bytes_of[8], total = 0, at = 0;
    int counts[8];
    for (int r = 0; r < c->size; r++) {
        bytes_of[r] = (size_t)(3 * r + 1);
        counts[r] = r == 0 ? 0 : 3 * r + 1;
        total += bytes_of[r];
    }
    for (size_t i = 0; i < bytes_of[c->rank]; i++)
        mine[i] = (unsigned char)(c->rank * 16 + (int)i);
    MT_OK(herd_dist_allgather(c, mine, all, bytes_of));
    int wrong = 0;
    for (int r = 0; r < c->size; r++)
        for (size_t i = 0; i < bytes_of[r]; i++)
            wrong += all[at++] != (unsigned char)(r * 16 + (int)i);
    MT_CHECK(wrong == 0 && at == total, "allgather of parts of other sizes: %d of %zu bytes wrong", wrong, at);
    memset(all, 0xff, sizeof all);
    int before = 0;
    for (int r = 0; r < c->rank; r++)
        before += counts[r];
    memcpy(all + before, mine, (size_t)counts[c->rank]); /* in place on odd ranks */
    uint64_t gathered, summed;
    float one = 1.0f;
    MT_OK(herd_dist_allgather_start(c, c->rank % 2 ? all + before : mine, all, counts, "async", &gathered));
    MT_OK(herd_dist_allreduce_start(c, &one, 1, HERD_DTYPE_F32, 1.0f, HERD_COMPRESS_NONE, "behind", &summed));
    MT_OK(herd_dist_wait(c, gathered));
    wrong = 0, at = 0;
    for (int r = 0; r < c->size; r++)
        for (int i = 0; i < counts[r]; i++)
            wrong += all[at++] != (unsigned char)(r * 16 + i);
    MT_CHECK(wrong == 0 && all[at] == 0xff, "allgather_start: %d of %zu bytes wrong", wrong, at);
    MT_OK(herd_dist_wait(c, summed));
    MT_CHECK(one == (float)c->size, "the sum behind the allgather: %g", one);
    counts[1] = -1;
    MT_CHECK(herd_dist_allgather_start(c, mine, all, counts, "bad", &gathered) == HERD_ERR_INVALID_ARG,
             "a negative count accepted");
}

static void check_blocking(herd_comm *c)
{
    unsigned char b[1000];
    for (size_t i = 0; i < sizeof b; i++)
        b[i] = (unsigned char)(i * 7 + (size_t)c->rank);
    int root = c->size - 1;
    MT_OK(c->ops->broadcast(c, b, sizeof b, root));
    for (size_t i = 0; i < sizeof b; i++)
        if (b[i] != (unsigned char)(i * 7 + (size_t)root)) {
            MT_CHECK(0, "broadcast byte %zu", i);
            break;
        }

    double v[2] = {c->rank, 1.5};
    MT_OK(c->ops->allreduce_f64(c, v, 2));
    MT_CHECK(v[0] == c->size * (c->size - 1) / 2 && v[1] == 1.5 * c->size, "%g %g", v[0], v[1]);

    /* The exact sums' reduce-scatter: each rank's part (rank 1's empty with 3 ranks) the
     * exact sum of integers held in doubles, past 2^31 and negative; then each rank's part
     * as floats all-gathered in place; misuse refused. */
    enum { N_F64 = 100003 };
    double *d = malloc(N_F64 * sizeof *d);
    int parts[8], first = 0;
    for (int r = 0, left = N_F64; r < c->size; r++) {
        parts[r] = r == c->size - 1 ? left : r == 1 ? 0 : N_F64 / c->size;
        left -= parts[r];
    }
    for (int r = 0; r < c->rank; r++)
        first += parts[r];
    for (int i = 0; i < N_F64; i++)
        d[i] = ldexp((double)(i % 1001) - 500.0, 33) + (double)(c->rank * 7 + i);
    MT_OK(c->ops->reduce_scatter_f64(c, d, parts));
    int wrong = 0;
    for (int i = first; i < first + parts[c->rank]; i++) {
        double want = c->size * ldexp((double)(i % 1001) - 500.0, 33) +
                      (double)(7 * c->size * (c->size - 1) / 2 + c->size * i);
        wrong += d[i] != want;
    }
    MT_CHECK(wrong == 0, "reduce_scatter_f64: %d of %d values wrong", wrong, parts[c->rank]);
    float *f = calloc(N_F64, sizeof *f);
    for (int i = first; i < first + parts[c->rank]; i++)
        f[i] = (float)d[i];
    MT_OK(c->ops->allgatherv_f32(c, f, parts));
    wrong = 0;
    for (int i = 0; i < N_F64; i++)
        wrong += f[i] != (float)(c->size * ldexp((double)(i % 1001) - 500.0, 33) +
                                 (double)(7 * c->size * (c->size - 1) / 2 + c->size * i));
    MT_CHECK(wrong == 0, "allgatherv_f32: %d of %d values wrong", wrong, N_F64);
    parts[0] = -1;
    MT_CHECK(c->ops->reduce_scatter_f64(c, d, parts) == HERD_ERR_INVALID_ARG,
             "a negative count is refused");
    MT_CHECK(c->ops->allgatherv_f32(c, f, parts) == HERD_ERR_INVALID_ARG,
             "a negative count is refused");
    free(f);
    free(d);

    int mine = c->rank * 10 + 1, all[8] = {0};
    MT_OK(c->ops->allgather(c, &mine, all, sizeof mine));
    for (int r = 0; r < c->size; r++)
        MT_CHECK(all[r] == r * 10 + 1, "allgather[%d] = %d", r, all[r]);
    int inplace[8] = {0};
    inplace[c->rank] = c->rank + 100;
    MT_OK(c->ops->allgather(c, &inplace[c->rank], inplace, sizeof(int)));
    for (int r = 0; r < c->size; r++)
        MT_CHECK(inplace[r] == r + 100, "in-place allgather[%d] = %d", r, inplace[r]);
    MT_OK(c->ops->barrier(c));

    /* mpirun on one machine: every rank shares the host. */
    char hosts[8][64];
    MT_OK(c->ops->allgather(c, c->host, hosts, 64));
    int same = 0, below = 0;
    for (int r = 0; r < c->size; r++) {
        same += strcmp(hosts[r], c->host) == 0;
        below += r < c->rank && strcmp(hosts[r], c->host) == 0;
    }
    MT_CHECK(c->local_size == same && c->local_rank == below, "local rank %d of %d, want %d of %d",
             c->local_rank, c->local_size, below, same);
}

/* A blocking op behind queued reductions waits its turn (it may not run on the caller
 * while the thread has work: every rank must start collectives in one order), and the
 * same ops with every blocking one handed to the thread (HERD_MPI_INLINE=0, read when a
 * communicator is made) give the same results. */
static void check_blocking_order(herd_comm *c)
{
    enum { N = 1 << 16 };
    float *g = malloc(N * sizeof *g);
    for (int i = 0; i < N; i++)
        g[i] = (float)(c->rank + i % 7);
    MT_OK(c->ops->allreduce_start(c, g, N, 1.0f, HERD_WIRE_FP32, "before the blocking op"));
    double v = c->rank + 1;
    MT_OK(c->ops->allreduce_f64(c, &v, 1));
    MT_OK(c->ops->wait_all(c));
    MT_CHECK(v == c->size * (c->size + 1) / 2, "allreduce_f64 behind a queued one: %g", v);
    float want = (float)(c->size * (c->size - 1) / 2 + c->size * ((N - 1) % 7));
    MT_CHECK(g[N - 1] == want, "queued allreduce %g, want %g", g[N - 1], want);
    free(g);

    MT_CHECK(setenv("HERD_MPI_INLINE", "0", 1) == 0, "setenv");
    herd_comm *queued;
    MT_OK(c->ops->split(c, 0, c->rank, "every blocking op queued", &queued));
    unsetenv("HERD_MPI_INLINE");
    check_blocking(queued);
    herd_comm_destroy(queued);
    MT_CHECK(setenv("HERD_MPI_INLINE", "yes", 1) == 0, "setenv");
    herd_comm *refused = NULL;
    herd_status st = c->ops->split(c, 0, c->rank, "refused", &refused);
    unsetenv("HERD_MPI_INLINE");
    MT_CHECK(st != HERD_OK && strstr(herd_last_error(), "HERD_MPI_INLINE='yes' is not 0 or 1"),
             "HERD_MPI_INLINE=yes: status %d, '%s'", (int)st, herd_last_error());
    if (refused)
        herd_comm_destroy(refused);
}

/* The timeline's ops: a gather of different sizes per rank, and ping-pongs whose
 * times, on one host's shared monotonic clock, must follow cause and effect. */
static void check_timeline_ops(herd_comm *c)
{
    size_t bytes_of[8], total = 0;
    for (int r = 0; r < c->size; r++)
        total += bytes_of[r] = (size_t)(3 * r + 1);
    unsigned char mine[32], all[256];
    for (size_t i = 0; i < bytes_of[c->rank]; i++)
        mine[i] = (unsigned char)(c->rank * 16 + (int)i);
    memset(all, 0xff, sizeof all);
    MT_OK(c->ops->gather(c, mine, bytes_of[c->rank], all, bytes_of, 0));
    if (c->rank == 0) {
        size_t at = 0;
        for (int r = 0; r < c->size; r++)
            for (size_t i = 0; i < bytes_of[r]; i++, at++)
                MT_CHECK(all[at] == (unsigned char)(r * 16 + (int)i), "gather: rank %d byte %zu", r, i);
        MT_CHECK(at == total && all[total] == 0xff, "gather wrote past %zu bytes", total);
    }

    enum { ROUNDS = 4 };
    double samples[8 * ROUNDS * 4];
    MT_OK(c->ops->clock_samples(c, ROUNDS, samples));
    for (int r = 1; c->rank == 0 && r < c->size; r++)
        for (int i = 0; i < ROUNDS; i++) {
            const double *t = samples + ((size_t)r * ROUNDS + (size_t)i) * 4;
            MT_CHECK(t[0] > 0 && t[0] <= t[1] && t[1] <= t[2] && t[2] <= t[3],
                     "rank %d round %d: times %.9f %.9f %.9f %.9f out of order", r, i, t[0], t[1],
                     t[2], t[3]);
        }
}

static double process_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Prints how much of a 16 MiB reduction completes while this thread computes. */
static void measure_overlap(herd_comm *c)
{
    const size_t n = (size_t)4 << 20;
    float *g = calloc(n, sizeof *g);
    MT_OK(c->ops->allreduce_start(c, g, n, 1.0f, HERD_WIRE_FP32, "warm-up"));
    MT_OK(c->ops->wait_all(c));
    MT_OK(c->ops->barrier(c));
    double t0 = herd_now(), cpu0 = process_cpu_s();
    MT_OK(c->ops->allreduce_start(c, g, n, 1.0f, HERD_WIRE_FP32, "alone"));
    MT_OK(c->ops->wait_all(c));
    double alone = herd_now() - t0, cpu = process_cpu_s() - cpu0;
    MT_OK(c->ops->barrier(c));
    t0 = herd_now();
    MT_OK(c->ops->allreduce_start(c, g, n, 1.0f, HERD_WIRE_FP32, "overlapped"));
    mt_compute(alone);
    double t1 = herd_now();
    MT_OK(c->ops->wait_all(c));
    double left = herd_now() - t1;
    double overlapped = alone > 0 ? 1.0 - left / alone : 0;
    if (overlapped < 0)
        overlapped = 0;
    printf("rank %d: 16 MiB allreduce alone %.1f ms (%.0f%% of a core busy); computing %.1f ms meanwhile left %.1f ms to "
           "wait: %.0f%% overlapped (total %.1f ms)\n",
           c->rank, 1e3 * alone, 100 * cpu / alone, 1e3 * (t1 - t0), 1e3 * left, 100 * overlapped, 1e3 * (herd_now() - t0));
    free(g);
}

/* Groups of even and odd ranks reduce on their own; a ring of point-to-point
 * transfers, posted in an order that deadlocks unless they are non-blocking. */
static void check_split_and_p2p(herd_comm *c)
{
    herd_comm *g;
    char name[32];
    snprintf(name, sizeof name, "group %d", c->rank % 2);
    MT_OK(c->ops->split(c, c->rank % 2, c->rank, name, &g));
    MT_CHECK(g->rank == c->rank / 2 && g->size == (c->size - c->rank % 2 + 1) / 2,
             "group rank %d of %d", g->rank, g->size);
    double v = c->rank;
    MT_OK(g->ops->allreduce_f64(g, &v, 1));
    double want = 0;
    for (int r = c->rank % 2; r < c->size; r += 2)
        want += r;
    MT_CHECK(v == want, "group sum %g, want %g", v, want);
    float bucket[3] = {1, 2, 3};
    MT_OK(g->ops->allreduce_start(g, bucket, 3, 1.0f, HERD_WIRE_FP32, "group bucket"));
    MT_OK(g->ops->wait_all(g));
    MT_CHECK(bucket[2] == 3.0f * (float)g->size, "group bucket %g", bucket[2]);
    herd_comm_destroy(g);

    enum { N = 1 << 18 }; /* large enough for the rendezvous protocol */
    int *out = malloc(N * sizeof *out), *in = malloc(N * sizeof *in);
    for (int i = 0; i < N; i++)
        out[i] = c->rank * 1000003 + i;
    int next = (c->rank + 1) % c->size, prev = (c->rank + c->size - 1) % c->size;
    herd_p2p recv, send;
    MT_OK(c->ops->p2p_start(c, &send, true, out, N * sizeof *out, next, 7));
    MT_OK(c->ops->p2p_start(c, &recv, false, in, N * sizeof *in, prev, 7));
    MT_OK(c->ops->p2p_wait(c, &recv, "ring receive"));
    MT_OK(c->ops->p2p_wait(c, &send, "ring send"));
    for (int i = 0; i < N; i++)
        if (in[i] != prev * 1000003 + i) {
            MT_CHECK(0, "ring element %d: %d", i, in[i]);
            break;
        }
    herd_p2p bad;
    MT_CHECK(c->ops->p2p_start(c, &bad, true, out, 4, c->rank, 7) == HERD_ERR_INVALID_ARG,
             "a send to itself was accepted");
    free(out);
    free(in);
}

int main(void)
{
    herd_comm *c;
    MT_OK(herd_comm_create_default(&(herd_comm_config){0}, &c));
    mt_rank = c->rank;
    MT_CHECK(strcmp(c->ops->name, "mpi") == 0, "backend %s", c->ops->name);
    MT_CHECK(c->size >= 2 && c->size <= 8, "size %d", c->size);
    MT_CHECK(c->cfg.stall_warning_s == 60 && c->cfg.timeout_s == 300, "defaults %g %g",
             c->cfg.stall_warning_s, c->cfg.timeout_s);
    c->ops->set_activity(c, "mpi_collectives: checks");
    check_fp32_slices(c);
    check_wire(c, HERD_WIRE_FP16, 1.0f);
    check_wire(c, HERD_WIRE_BF16, 0.5f);
    check_wire(c, HERD_WIRE_FP16, 1.0f / (float)c->size);
    check_wire_headroom(c);
    check_zero_parts(c);
    check_public_reduce_scatter(c);
    check_alltoall(c);
    check_split(c);
    check_reduce_ops(c);
    check_public_allgather(c);
    check_blocking(c);
    check_blocking_order(c);
    check_f64_async(c);
    check_timeline_ops(c);
    check_split_and_p2p(c);
    measure_overlap(c);
    herd_comm_destroy(c);
    return mt_finish("all checks passed");
}
