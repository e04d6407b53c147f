/* The public API's sums on device memory (herd_dist_allreduce_device_start, what
 * herd.torch's CUDA tensors go through) on 2 or 3 ranks, on the device named by argv[1]
 * ("sim", the default: the simulated device, whose memory the host cannot touch; "cuda":
 * one GPU per rank, through NCCL, or ranks sharing one through MPI): exact sums and means
 * of several buffers started before any is waited for (one empty), waited for out of
 * order, beside a sum of host memory; a group of one scaling its buffer; a first call
 * that fails on one rank failing on every rank (none left waiting); another device in
 * the same process and a bad call refused. */
#include "mpi_common.h"

static const herd_backend *be;

static float *dev_alloc(size_t n)
{
    float *d = be->alloc((n ? n : 1) * sizeof *d);
    MT_CHECK(d != NULL, "allocating %zu floats on %s", n, be->name);
    if (!d)
        exit(1);
    return d;
}

/* Rank r's value i: small integers, so that every sum and mean is exact. */
static float value(int r, size_t i) { return (float)((int)((i * 7 + 3) % 11) - 5) * (float)(r + 1); }

static void check_sums(herd_dist *d, const char *device)
{
    enum { BUFS = 4 };
    const size_t n[BUFS] = {100003, 0, 1, 4096};
    const float scale[BUFS] = {1.0f, 1.0f, 0.5f, 1.0f / (float)d->size};
    float *dev[BUFS], *host[BUFS];
    uint64_t ticket[BUFS];
    for (int b = 0; b < BUFS; b++) {
        host[b] = malloc((n[b] ? n[b] : 1) * sizeof *host[b]);
        for (size_t i = 0; i < n[b]; i++)
            host[b][i] = value(d->rank, i + (size_t)b);
        dev[b] = dev_alloc(n[b]);
        MT_OK(be->memcpy_h2d(dev[b], host[b], n[b] * sizeof *host[b]));
    }
    /* A sum of host memory between them: its tickets are counted apart. */
    double f64[3] = {1.0, (double)d->rank, 0.25};
    uint64_t host_ticket;
    for (int b = 0; b < BUFS; b++) {
        char name[32];
        snprintf(name, sizeof name, "device buffer %d", b);
        MT_OK(herd_dist_allreduce_device_start(d, device, dev[b], n[b], scale[b], name, &ticket[b]));
        if (b == 1)
            MT_OK(herd_dist_allreduce_start(d, f64, 3, HERD_DTYPE_F64, 1.0f, HERD_COMPRESS_NONE,
                                            "host values", &host_ticket));
    }
    MT_OK(herd_dist_wait(d, ticket[BUFS - 1])); /* the last: every one before it too */
    MT_OK(herd_dist_wait(d, ticket[0]));
    MT_OK(herd_dist_wait(d, host_ticket));
    int ranks = d->size;
    MT_CHECK(f64[0] == ranks && f64[1] == ranks * (ranks - 1) / 2.0 && f64[2] == 0.25 * ranks,
             "the host sum beside them: %g %g %g", f64[0], f64[1], f64[2]);
    for (int b = 0; b < BUFS; b++) {
        MT_OK(be->memcpy_d2h(host[b], dev[b], n[b] * sizeof *host[b]));
        size_t wrong = 0;
        for (size_t i = 0; i < n[b]; i++) {
            float want = 0.0f;
            for (int r = 0; r < ranks; r++)
                want += value(r, i + (size_t)b);
            wrong += host[b][i] != want * scale[b];
        }
        MT_CHECK(wrong == 0, "buffer %d: %zu of %zu values are not the sum times %g", b, wrong,
                 n[b], (double)scale[b]);
        be->free(dev[b]);
        free(host[b]);
    }
}

static void check_refusals(herd_dist *d, const char *device)
{
    float *buf = dev_alloc(8);
    uint64_t ticket;
    const char *other = strcmp(device, "sim") == 0 ? "cuda" : "sim";
    herd_status st = herd_dist_allreduce_device_start(d, other, buf, 8, 1.0f, "other", &ticket);
    MT_CHECK(st == HERD_ERR_INVALID_ARG && strstr(herd_last_error(), "one device a process"),
             "%s memory after %s refused: %s", other, device, herd_last_error());
    st = herd_dist_allreduce_device_start(d, device, buf, 8, 1.0f, "no ticket", NULL);
    MT_CHECK(st == HERD_ERR_INVALID_ARG, "a call without a ticket refused: %s", herd_last_error());
    st = herd_dist_allreduce_device_start(d, "cpu", buf, 8, 1.0f, "cpu", &ticket);
    MT_CHECK(st == HERD_ERR_INVALID_ARG, "cpu memory refused: %s", herd_last_error());
    be->free(buf);
}

/* Rank 1 names a device it cannot use in the first device collective: every rank fails
 * it, the others naming rank 1, and the next call on the right device works. */
static void check_failed_setup(herd_dist *d, const char *device)
{
    float *buf = dev_alloc(4);
    uint64_t ticket;
    herd_status st = herd_dist_allreduce_device_start(d, d->rank == 1 ? "nosuch" : device, buf, 4,
                                                      1.0f, "set-up", &ticket);
    MT_CHECK(st != HERD_OK, "a set-up failing on rank 1 fails here too");
    if (d->rank != 1)
        MT_CHECK(strstr(herd_last_error(), "rank 1") != NULL, "the error names rank 1: %s",
                 herd_last_error());
    be->free(buf);
}

/* A group of one (no communicator): the buffer scaled in place, through the host. */
static void check_alone(const char *device)
{
    float h[5] = {1, -2, 3, 0.5f, 8}, *buf = dev_alloc(5);
    MT_OK(be->memcpy_h2d(buf, h, sizeof h));
    uint64_t ticket = 99;
    MT_OK(herd_dist_allreduce_device_start(NULL, device, buf, 5, 0.25f, "alone", &ticket));
    MT_OK(herd_dist_wait(NULL, ticket));
    float got[5];
    MT_OK(be->memcpy_d2h(got, buf, sizeof got));
    for (int i = 0; i < 5; i++)
        MT_CHECK(got[i] == h[i] * 0.25f, "alone, value %d: %g", i, (double)got[i]);
    MT_CHECK(ticket == 0, "a group of one's ticket is 0: %llu", (unsigned long long)ticket);
    be->free(buf);
}

int main(int argc, char **argv)
{
    const char *device = argc > 1 ? argv[1] : "sim";
    herd_dist *d;
    MT_OK(herd_dist_init(NULL, &d));
    mt_rank = d->rank;
    be = mt_backend(d, device);
    check_alone(device);
    check_failed_setup(d, device);
    check_sums(d, device);
    check_sums(d, device); /* again, on the communicator the first call made */
    check_refusals(d, device);
    herd_dist_free(d);
    char summary[64];
    snprintf(summary, sizeof summary, "all checks passed on %s", device);
    return mt_finish(summary);
}
