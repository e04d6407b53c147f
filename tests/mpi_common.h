/* Helpers for the MPI test programs (run under mpirun, not cmocka: every rank checks
 * its own results and the job fails when any rank exits non-zero). */
#ifndef HERD_TESTS_MPI_COMMON_H
#define HERD_TESTS_MPI_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/clock.h"
#include "dist/comm.h"

static int mt_rank, mt_failures;

#define MT_CHECK(cond, ...)                                                            \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "rank %d: FAIL %s:%d: %s: ", mt_rank, __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                              \
            fputc('\n', stderr);                                                       \
            mt_failures++;                                                             \
        }                                                                              \
    } while (0)

#define MT_OK(expr)                                                                        \
    do {                                                                                   \
        herd_status mt_st_ = (expr);                                                       \
        if (mt_st_ != HERD_OK) {                                                           \
            fprintf(stderr, "rank %d: %s -> %s: %s\n", mt_rank, #expr, herd_status_name(mt_st_), \
                    herd_last_error());                                                    \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

/* main's last word: exit status 1 when any check failed, else "rank N: <summary>". */
static inline int mt_finish(const char *summary)
{
    if (mt_failures)
        return 1;
    printf("rank %d: %s\n", mt_rank, summary);
    return 0;
}

/* Keeps this thread busy (standing in for backward) for `seconds`. */
static inline double mt_compute(double seconds)
{
    volatile double acc = 0;
    double end = herd_now() + seconds;
    while (herd_now() < end)
        for (int i = 0; i < 2000; i++)
            acc = acc * 0.999 + i;
    return acc;
}

/* The backend a test's device argument names ("cpu", "sim" or "cuda": this rank's GPU
 * bound first); a device this machine lacks ends the test as skipped (77). */
static inline const herd_backend *mt_backend(herd_comm *c, const char *device)
{
    const herd_backend *be = NULL;
    if (strcmp(device, "cpu") == 0) {
        be = herd_backend_cpu();
    } else if (strcmp(device, "sim") == 0) {
        be = herd_backend_sim();
    } else if (strcmp(device, "cuda") == 0) {
        if (herd_dist_bind_device(c, device) == HERD_OK)
            be = herd_backend_cuda();
    } else {
        fprintf(stderr, "rank %d: unknown device '%s' (cpu, sim or cuda)\n", mt_rank, device);
        exit(2);
    }
    if (!be) {
        printf("SKIPPED: rank %d: no %s device here: %s\n", mt_rank, device, herd_last_error());
        exit(77);
    }
    return be;
}

/* One new temporary file's name, made by rank 0, on every rank (path: 64 bytes). */
static inline void mt_shared_tempfile(herd_comm *c, char path[64])
{
    memset(path, 0, 64);
    if (c->rank == 0) {
        snprintf(path, 64, "/tmp/herd_mpi_test_XXXXXX");
        int fd = mkstemp(path);
        MT_CHECK(fd >= 0, "mkstemp");
        close(fd);
    }
    MT_OK(c->ops->broadcast(c, path, 64, 0));
}

#endif
