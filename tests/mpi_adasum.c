/* herd_dist_allreduce_adasum_start (Horovod's Adasum) on 3 and 6 ranks: a rank count past a
 * power of two folds ranks in first (3 = 2 + 1, 6 = 4 + 2, two levels of the tree). Per
 * tensor against the same tree folded here in double over whole vectors (the sums of the
 * dot products run in another order, so within 1e-12 for float64, 1e-6 for float32), every
 * rank the same bits, and the algorithm's fixed points bit for bit: equal vectors stay
 * themselves (the mean), vectors on disjoint supports add up (the sum), a rank of zeros
 * changes nothing (hvd.join's part). float16 and bfloat16 keep their 16 bits on the wire,
 * so only those fixed points are checked for them. Bad counts and types are refused. */
#include <math.h>

#include "core/half.h"
#include "mpi_common.h"

enum { TENSORS = 5, N = 7 + 0 + 33 + 1 + 100, MAX_RANKS = 8 };
static const int64_t counts[TENSORS] = {7, 0, 33, 1, 100};

static double value(int r, int i) /* rank r's value i: any signs, correlated across ranks */
{
    return sin(0.37 * i + 1.3) + 0.6 * cos(1.7 * i * (r + 1) + r);
}

/* a becomes Adasum(a, b), per tensor, in double. */
static void adasum_pair(double *a, const double *b)
{
    size_t at = 0;
    for (int t = 0; t < TENSORS; t++) {
        double dot = 0, aa = 0, bb = 0;
        for (int64_t i = 0; i < counts[t]; i++) {
            dot += a[at + i] * b[at + i];
            aa += a[at + i] * a[at + i];
            bb += b[at + i] * b[at + i];
        }
        double ca = aa > 0 ? 1 - dot / (2 * aa) : 1, cb = bb > 0 ? 1 - dot / (2 * bb) : 1;
        for (int64_t i = 0; i < counts[t]; i++)
            a[at + i] = ca * a[at + i] + cb * b[at + i];
        at += (size_t)counts[t];
    }
}

/* The tree: ranks P + i into rank i, then pairs by bit 0, pairs of pairs by bit 1, ... */
static void reference(int size, double vec[][N], double *out)
{
    int pow2 = 1;
    while (pow2 * 2 <= size)
        pow2 *= 2;
    for (int i = 0; i + pow2 < size; i++)
        adasum_pair(vec[i], vec[i + pow2]);
    for (int bit = 1; bit < pow2; bit *= 2)
        for (int r = 0; r < pow2; r++)
            if (!(r & bit))
                adasum_pair(vec[r], vec[r | bit]);
    memcpy(out, vec[0], sizeof vec[0]);
}

static void run(herd_comm *c, void *buf, herd_dtype t, const char *what)
{
    uint64_t ticket;
    MT_OK(herd_dist_allreduce_adasum_start(c, buf, N, t, counts, TENSORS, what, &ticket));
    MT_OK(herd_dist_wait(c, ticket));
}

/* Every rank's bytes equal rank 0's. */
static void check_same_everywhere(herd_comm *c, const void *buf, size_t bytes, const char *what)
{
    static unsigned char all[MAX_RANKS * N * 8];
    size_t bytes_of[MAX_RANKS];
    for (int r = 0; r < c->size; r++)
        bytes_of[r] = bytes;
    MT_OK(herd_dist_allgather(c, buf, all, bytes_of));
    for (int r = 1; r < c->size; r++)
        MT_CHECK(memcmp(all, all + (size_t)r * bytes, bytes) == 0, "%s: rank %d's bytes differ from rank 0's",
                 what, r);
}

static void check_against_tree(herd_comm *c)
{
    static double vec[MAX_RANKS][N], want[N];
    for (int r = 0; r < c->size; r++)
        for (int i = 0; i < N; i++)
            vec[r][i] = value(r, i);
    reference(c->size, vec, want);
    double x[N], worst = 0;
    float f[N], worst_f = 0;
    for (int i = 0; i < N; i++)
        f[i] = (float)(x[i] = value(c->rank, i));
    run(c, x, HERD_DTYPE_F64, "adasum f64");
    run(c, f, HERD_DTYPE_F32, "adasum f32");
    for (int i = 0; i < N; i++) {
        worst = fmax(worst, fabs(x[i] - want[i]) / fmax(1, fabs(want[i])));
        worst_f = fmaxf(worst_f, (float)(fabs(f[i] - want[i]) / fmax(1, fabs(want[i]))));
    }
    MT_CHECK(worst < 1e-12, "float64 against the tree: %g", worst);
    MT_CHECK(worst_f < 1e-6, "float32 against the tree: %g", worst_f);
    /* Not a sum nor a mean: the test would pass for neither. */
    double sum_diff = 0;
    for (int i = 0; i < N; i++) {
        double s = 0;
        for (int r = 0; r < c->size; r++)
            s += value(r, i);
        sum_diff = fmax(sum_diff, fmin(fabs(x[i] - s), fabs(x[i] - s / c->size)));
    }
    MT_CHECK(sum_diff > 1e-3, "Adasum gave the sum or the mean (%g)", sum_diff);
    check_same_everywhere(c, x, sizeof x, "float64");
    check_same_everywhere(c, f, sizeof f, "float32");
}

/* Equal vectors: the mean, which is the vector; disjoint supports: the sum; zeros on
 * one rank: as if it were not there (here: the other ranks' equal vectors, unchanged). */
static void check_fixed_points(herd_comm *c)
{
    static const herd_dtype types[] = {HERD_DTYPE_F32, HERD_DTYPE_F64, HERD_DTYPE_F16, HERD_DTYPE_BF16};
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        herd_dtype t = types[k];
        unsigned char buf[N * 8], want[N * 8];
        for (int mode = 0; mode < 3; mode++) {
            for (int i = 0; i < N; i++) {
                double equal = ldexp(1 + i % 5, i % 7 - 3) * (i % 3 ? 1 : -1); /* exact in 16 bits */
                double v = mode == 0   ? equal
                           : mode == 1 ? (i % c->size == c->rank ? equal : 0)
                                       : (c->rank == c->size - 1 ? 0 : equal);
                double w = equal;
                switch (t) {
                case HERD_DTYPE_F32: ((float *)buf)[i] = (float)v; ((float *)want)[i] = (float)w; break;
                case HERD_DTYPE_F64: ((double *)buf)[i] = v; ((double *)want)[i] = w; break;
                case HERD_DTYPE_F16:
                    ((uint16_t *)buf)[i] = herd_float_to_half((float)v);
                    ((uint16_t *)want)[i] = herd_float_to_half((float)w);
                    break;
                default:
                    ((uint16_t *)buf)[i] = herd_float_to_bf16((float)v);
                    ((uint16_t *)want)[i] = herd_float_to_bf16((float)w);
                    break;
                }
            }
            run(c, buf, t, "fixed point");
            size_t bytes = (size_t)N * (t == HERD_DTYPE_F64 ? 8 : t == HERD_DTYPE_F32 ? 4 : 2);
            static const char *modes[] = {"equal vectors", "disjoint supports", "a rank of zeros"};
            MT_CHECK(memcmp(buf, want, bytes) == 0, "type %d, %s: not the vector", (int)t, modes[mode]);
        }
    }
}

static void check_refusals(herd_comm *c)
{
    float f[4] = {0};
    uint64_t ticket;
    int64_t bad[2] = {3, 2};
    MT_CHECK(herd_dist_allreduce_adasum_start(c, f, 4, HERD_DTYPE_F32, bad, 2, "bad", &ticket) ==
                 HERD_ERR_INVALID_ARG && strstr(herd_last_error(), "hold 5 values, the buffer 4"),
             "counts past the buffer: %s", herd_last_error());
    int64_t negative[2] = {5, -1};
    MT_CHECK(herd_dist_allreduce_adasum_start(c, f, 4, HERD_DTYPE_F32, negative, 2, "bad", &ticket) ==
                 HERD_ERR_INVALID_ARG && strstr(herd_last_error(), "tensor 1 of the Adasum has -1"),
             "a negative count: %s", herd_last_error());
    MT_CHECK(herd_dist_allreduce_adasum_start(c, f, 4, HERD_DTYPE_I32, NULL, 0, "int", &ticket) ==
                 HERD_ERR_INVALID_ARG && strstr(herd_last_error(), "floating-point"),
             "int32 accepted: %s", herd_last_error());
    /* One tensor (counts NULL) of none: a valid no-op on every rank. */
    MT_OK(herd_dist_allreduce_adasum_start(c, f, 0, HERD_DTYPE_F32, NULL, 0, "empty", &ticket));
    MT_OK(herd_dist_wait(c, ticket));
}

int main(void)
{
    herd_comm *c;
    MT_OK(herd_comm_create_default(&(herd_comm_config){0}, &c));
    mt_rank = c->rank;
    MT_CHECK(c->size >= 2 && c->size <= MAX_RANKS, "size %d", c->size);
    check_against_tree(c);
    check_fixed_points(c);
    check_refusals(c);
    herd_comm_destroy(c);
    return mt_finish("all checks passed");
}
