/* Several ranks on one GPU, decided at start over MPI (2 or 3 ranks) with a stand-in
 * device backend whose GPU identity the test chooses: the same answer on every rank,
 * rank 0's one line naming the ranks, the host and the GPU, the staged communicator
 * reducing for them, the same id on other hosts not counted as shared, and a rank that
 * cannot read its identity stopping every rank. */
#include <stdio.h>
#include <string.h>

#include "mpi_common.h"

#include "backend/backend.h"
#include "core/error.h"
#include "dist/gpu_share.h"

static enum { DISTINCT, PAIRED, SAME, FAIL_LAST } mode;
static int lines;
static char last_line[1024];

static void capture(herd_log_level level, const char *msg, void *user)
{
    (void)user;
    if (level == HERD_LOG_INFO) {
        lines++;
        snprintf(last_line, sizeof last_line, "%s", msg);
    }
}

/* DISTINCT: one GPU per rank; PAIRED: ranks 0 and 1 on GPU 0, rank 2 on GPU 1; SAME:
 * one bus id everywhere; FAIL_LAST: the last rank cannot read it. */
static int fake_size;
static herd_status fake_identity(int *ordinal, char *id, size_t cap)
{
    *ordinal = mode == DISTINCT ? mt_rank : mode == PAIRED ? mt_rank / 2 : 0;
    if (mode == FAIL_LAST && mt_rank == fake_size - 1)
        return HERD_ERR(HERD_ERR_INTERNAL, "fake GPU: no identity here");
    snprintf(id, cap, "0000:%02d:00.0", *ordinal);
    return HERD_OK;
}

/* The collective's answer, checked to be every rank's; it logs nothing itself. */
static bool check(herd_comm *mpi, const herd_backend *be, char *line, size_t cap)
{
    lines = 0;
    bool shared = false;
    MT_OK(herd_gpu_share_check(mpi, be, &shared, line, cap));
    int all[3] = {0}, mine = shared;
    MT_OK(mpi->ops->allgather(mpi, &mine, all, sizeof mine));
    for (int r = 0; r < mpi->size; r++)
        MT_CHECK(all[r] == mine, "rank %d says shared=%d, this rank %d", r, all[r], mine);
    MT_CHECK(lines == 0, "the check logged %d lines", lines);
    return shared;
}

/* The job's device communicator: MPI through host memory here (no GPU, so no NCCL),
 * reducing correctly; rank 0 alone logs one line, which is returned. */
static void device_comm(herd_comm *mpi, const herd_backend *be)
{
    herd_comm *c;
    lines = 0;
    last_line[0] = '\0';
    MT_OK(herd_comm_device_create(mpi, be, &c));
    MT_CHECK(strcmp(c->ops->name, "mpi-staged") == 0, "device comm %s", c->ops->name);
    MT_CHECK(lines == (mpi->rank == 0), "device_create logged %d lines", lines);
    float g[5];
    for (int i = 0; i < 5; i++)
        g[i] = (float)(i + mpi->rank);
    MT_OK(c->ops->allreduce_start(c, g, 5, 1.0f, HERD_WIRE_FP32, "bucket 0"));
    MT_OK(c->ops->wait_all(c));
    for (int i = 0; i < 5; i++) {
        float want = (float)(mpi->size * i + mpi->size * (mpi->size - 1) / 2);
        MT_CHECK(g[i] == want, "element %d: %g, want %g", i, g[i], want);
    }
    herd_comm_destroy(c);
}

int main(void)
{
    herd_set_log_fn(capture, NULL);
    herd_comm *mpi;
    MT_OK(herd_comm_create_default(&(herd_comm_config){0}, &mpi));
    mt_rank = mpi->rank;
    fake_size = mpi->size;
    if (mpi->size > 3) {
        fprintf(stderr, "mpi_gpu_share: run it on 2 or 3 ranks\n");
        return 77;
    }
    herd_backend be = *herd_backend_cpu(); /* host memory read through the copies only */
    be.host_memory = false;
    be.device_identity = fake_identity;

    char line[512];
    mode = DISTINCT;
    MT_CHECK(!check(mpi, &be, line, sizeof line), "one GPU per rank: nothing shared");
    MT_CHECK(strcmp(line, "") == 0, "line '%s'", line);
    device_comm(mpi, &be);
    if (mpi->rank == 0)
        MT_CHECK(strcmp(last_line, "gradients reduced by MPI through host memory") == 0,
                 "logged '%s'", last_line);

    mode = PAIRED;
    MT_CHECK(check(mpi, &be, line, sizeof line), "ranks 0 and 1 share GPU 0");
    char want[1024];
    snprintf(want, sizeof want, "ranks 0,1 on host %s share GPU 0 (0000:00:00.0)", mpi->host);
    MT_CHECK(strcmp(line, want) == 0, "line '%s', want '%s'", line, want);
    device_comm(mpi, &be);
    if (mpi->rank == 0) {
        snprintf(want, sizeof want, "ranks 0,1 on host %s share GPU 0 (0000:00:00.0): NCCL "
                 "cannot put two ranks on one GPU, so gradients are reduced by MPI through "
                 "host memory", mpi->host);
        MT_CHECK(strcmp(last_line, want) == 0, "logged '%s', want '%s'", last_line, want);
    }

    /* One bus id on every rank, but each rank on a host of its own: nothing shared. */
    mode = SAME;
    char host[sizeof mpi->host];
    memcpy(host, mpi->host, sizeof host);
    snprintf(mpi->host, sizeof mpi->host, "node%d", mpi->rank);
    MT_CHECK(!check(mpi, &be, NULL, 0), "the same bus id on other hosts is another GPU");
    memcpy(mpi->host, host, sizeof host);
    MT_CHECK(check(mpi, &be, NULL, 0), "one bus id on one host: shared");

    /* A rank that cannot say which GPU it has stops them all; the next collective works. */
    mode = FAIL_LAST;
    herd_comm *c = NULL;
    herd_status st = herd_comm_device_create(mpi, &be, &c);
    MT_CHECK(c == NULL, "a communicator after a failure");
    MT_CHECK(st != HERD_OK, "a failed identity on rank %d passed", mpi->size - 1);
    if (mpi->rank != mpi->size - 1)
        MT_CHECK(strstr(herd_last_error(), "identity of its GPU") != NULL, "error: %s",
                 herd_last_error());
    else
        MT_CHECK(strstr(herd_last_error(), "no identity here") != NULL, "error: %s",
                 herd_last_error());
    MT_OK(mpi->ops->barrier(mpi));

    herd_comm_destroy(mpi);
    return mt_finish("shared GPUs found, named and reduced through MPI");
}
