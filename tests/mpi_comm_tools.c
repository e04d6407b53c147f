/* The MPI communicator's operations for the benchmarks, on 2 or 3 ranks: sums of
 * half/bf16/float buffers as they are, point-to-point messages (a ring, one-sided,
 * large enough for rendezvous), the timed MPI_Allreduce reference, and the largest
 * value over the ranks. */
#include <string.h>

#include "core/half.h"
#include "mpi_common.h"

/* Rank r holds i % 5 + r: every partial sum is a small integer, exact in all three. */
static float value(size_t i, int r) { return (float)(i % 5) + (float)r; }

static void check_typed(herd_comm *c, herd_wire_type type, bool reference)
{
    const size_t n = 3001;
    float *f = malloc(n * sizeof *f);
    uint16_t *h = malloc(n * sizeof *h);
    void *buf = type == HERD_WIRE_FP32 ? (void *)f : (void *)h;
    for (size_t i = 0; i < n; i++) {
        f[i] = value(i, c->rank);
        h[i] = type == HERD_WIRE_FP16 ? herd_float_to_half(f[i]) : herd_float_to_bf16(f[i]);
    }
    if (reference) {
        double seconds = -1;
        MT_OK(c->ops->time_reference_allreduce(c, buf, n, type, 1, &seconds));
        MT_CHECK(seconds >= 0, "reference time %g", seconds);
    } else {
        MT_OK(c->ops->allreduce_typed_start(c, buf, n, type, "typed"));
        MT_OK(c->ops->wait_all(c));
    }
    int bad = 0;
    for (size_t i = 0; i < n && bad < 5; i++) {
        float want = 0;
        for (int r = 0; r < c->size; r++)
            want += value(i, r);
        float got = type == HERD_WIRE_FP32   ? f[i]
                    : type == HERD_WIRE_FP16 ? herd_half_to_float(h[i])
                                             : herd_bf16_to_float(h[i]);
        if (got != want) {
            MT_CHECK(got == want, "type %d%s element %zu: %g, want %g", (int)type,
                     reference ? " (reference)" : "", i, got, want);
            bad++;
        }
    }
    free(f);
    free(h);
}

static void check_sendrecv(herd_comm *c)
{
    const size_t n = (size_t)1 << 20; /* past the eager limit: both sides must be posted */
    int next = (c->rank + 1) % c->size, prev = (c->rank + c->size - 1) % c->size;
    unsigned char *out = malloc(n), *in = calloc(n, 1);
    for (size_t i = 0; i < n; i++)
        out[i] = (unsigned char)(i * 3 + (size_t)c->rank);
    MT_OK(c->ops->sendrecv_start(c, out, n, next, in, n, prev));
    mt_compute(0.005); /* the caller goes on while the thread moves the messages */
    MT_OK(c->ops->wait_all(c));
    for (size_t i = 0; i < n; i++)
        if (in[i] != (unsigned char)(i * 3 + (size_t)prev)) {
            MT_CHECK(0, "ring byte %zu from rank %d: %d", i, prev, in[i]);
            break;
        }

    /* One side each: rank 0 sends, the last rank receives; queued messages keep order. */
    int last = c->size - 1, a = 0;
    if (c->rank == 0) {
        int msgs[2] = {11, 22};
        MT_OK(c->ops->sendrecv_start(c, &msgs[0], sizeof(int), last, NULL, 0, -1));
        MT_OK(c->ops->sendrecv_start(c, &msgs[1], sizeof(int), last, NULL, 0, -1));
        MT_OK(c->ops->wait_all(c));
    } else if (c->rank == last) {
        int b = 0;
        MT_OK(c->ops->sendrecv_start(c, NULL, 0, -1, &a, sizeof a, 0));
        MT_OK(c->ops->sendrecv_start(c, NULL, 0, -1, &b, sizeof b, 0));
        MT_OK(c->ops->wait_all(c));
        MT_CHECK(a == 11 && b == 22, "received %d then %d", a, b);
    }
    MT_CHECK(c->ops->sendrecv_start(c, out, 4, c->size, NULL, 0, -1) == HERD_ERR_INVALID_ARG,
             "a send to rank %d (of %d) is refused", c->size, c->size);
    MT_OK(c->ops->barrier(c));
    free(out);
    free(in);
}

/* The benchmarks' "slowest rank": every rank gets the largest value, wherever it is. */
static void check_max(herd_comm *c)
{
    for (int top = 0; top < c->size; top++) {
        double v = c->rank == top ? 7.5 : -(double)c->rank;
        MT_OK(herd_comm_max_f64(c, &v));
        MT_CHECK(v == 7.5, "max with rank %d on top: %g", top, v);
    }
}

int main(void)
{
    herd_comm *c;
    MT_OK(herd_comm_create_backend("mpi", &(herd_comm_config){0}, &c));
    mt_rank = c->rank;
    MT_CHECK(c->ops->allreduce_typed_start && c->ops->sendrecv_start && c->ops->time_reference_allreduce,
             "the mpi communicator has every benchmark operation");
    const herd_wire_type types[] = {HERD_WIRE_FP32, HERD_WIRE_FP16, HERD_WIRE_BF16};
    for (int t = 0; t < 3; t++) {
        check_typed(c, types[t], false);
        check_typed(c, types[t], true);
    }
    check_sendrecv(c);
    check_max(c);
    herd_comm_destroy(c);
    return mt_finish("all checks passed");
}
