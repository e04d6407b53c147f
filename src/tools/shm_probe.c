/*
 * How fast cross-memory attach (CMA, process_vm_readv) reads another process's
 * memory here, against memcpy: figures for herd doctor to report. Open MPI's
 * shared-memory transport moves a large message either with one CMA read by the
 * receiver (btl_vader_single_copy_mechanism = cma, its default) or by copying it into
 * a shared segment and out again (none). "One CMA read against two memcpys" does not
 * predict which is faster: on herd's 2-core VM CMA read at a fifth of memcpy's speed
 * on two days, and a 2.6 MB MPI_Allreduce was 1.7-1.8 times slower with CMA on one and
 * 2.2-2.7 times faster on the other (docs/cluster.md).
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "tools/tools.h"

/* A gradient bucket's order of size, read in Open MPI-sized pieces. */
#define PROBE_BYTES ((size_t)4 << 20)
#define PROBE_CHUNK ((size_t)512 << 10)
#define PROBE_PASSES 8

static double best_cma_seconds(pid_t peer, char *dst, char *remote, int *err)
{
    double best = 1e30;
    for (int pass = 0; pass < PROBE_PASSES && !*err; pass++) {
        double start = herd_now();
        for (size_t off = 0; off < PROBE_BYTES; off += PROBE_CHUNK) {
            struct iovec local = {dst + off, PROBE_CHUNK}, far = {remote + off, PROBE_CHUNK};
            if (process_vm_readv(peer, &local, 1, &far, 1, 0) != (ssize_t)PROBE_CHUNK) {
                *err = errno ? errno : EIO;
                break;
            }
        }
        double t = herd_now() - start;
        best = t < best ? t : best;
    }
    return best;
}

static double best_memcpy_seconds(char *dst, const char *src)
{
    double best = 1e30;
    for (int pass = 0; pass < PROBE_PASSES; pass++) {
        double start = herd_now();
        for (size_t off = 0; off < PROBE_BYTES; off += PROBE_CHUNK)
            memcpy(dst + off, src + off, PROBE_CHUNK);
        double t = herd_now() - start;
        best = t < best ? t : best;
        __asm__ volatile("" ::"r"(dst) : "memory"); /* keep every pass */
    }
    return best;
}

int herd_probe_cma(herd_cma_probe *out)
{
    memset(out, 0, sizeof *out);
    char *src = herd_aligned_alloc(PROBE_BYTES), *dst = herd_aligned_alloc(PROBE_BYTES);
    int ready[2] = {-1, -1}, err = 0;
    if (!src || !dst || pipe(ready) != 0) {
        err = src && dst ? errno : ENOMEM;
        goto done;
    }
    memset(src, 1, PROBE_BYTES);
    memset(dst, 0, PROBE_BYTES);
    pid_t child = fork();
    if (child < 0) {
        err = errno;
        goto done;
    }
    if (child == 0) {
        /* Writing makes the pages the child's own, as a peer rank's buffer is. */
        memset(src, 2, PROBE_BYTES);
        char c = 1;
        ssize_t w = write(ready[1], &c, 1);
        (void)w;
        pause(); /* until the parent kills it */
        _exit(0);
    }
    char c;
    if (read(ready[0], &c, 1) != 1)
        err = EIO;
    double cma = err ? 0 : best_cma_seconds(child, dst, src, &err);
    if (!err && dst[0] != 2)
        err = EIO; /* read something, but not the child's memory */
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    if (!err) {
        out->cma_gbps = (double)PROBE_BYTES / cma / 1e9;
        out->memcpy_gbps = (double)PROBE_BYTES / best_memcpy_seconds(dst, src) / 1e9;
    }
done:
    if (ready[0] >= 0) {
        close(ready[0]);
        close(ready[1]);
    }
    herd_aligned_free(src);
    herd_aligned_free(dst);
    return -err;
}
