/* Faults for tests/mpi_faults.sh: `warn` (rank 1 joins 3 s late), `timeout` (rank 1
 * never joins), `stop0` (rank 0 stops itself with SIGSTOP), `kill` (rank 1 dies from
 * SIGKILL mid-job), `leave` and `leave0` (rank 1, or rank 0, frees its communicator and
 * ends while the others start another collective: a stall timeout of 30 s, not waited for). A second argument `blocking` makes the late collective a blocking
 * one, which its caller runs itself (the communication thread idle): the caller then
 * serves the stall inspector. */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "mpi_common.h"

/* The library's messages, printed as the CLI prints them. */
static void print_log(herd_log_level level, const char *msg, void *user)
{
    (void)user;
    fprintf(stderr, "herd: %s: %s\n", level == HERD_LOG_ERROR ? "error" : "warning", msg);
}

/* A straggler outside any collective: short bursts of work between sleeps. Flat out it
 * took a core for its 3 s (and until the job was ended) in each of four cases, which the
 * test's peers and the suite's other tests wait on; the stall inspector sees the same
 * rank either way (its communication thread answers, its activity names the step). */
static void straggle(double seconds)
{
    double end = herd_now() + seconds;
    while (herd_now() < end) {
        mt_compute(0.002);
        herd_sleep(0.018);
    }
}

int main(int argc, char **argv)
{
    herd_set_log_fn(print_log, NULL);
    const char *mode = argc > 1 ? argv[1] : "";
    herd_comm_config cfg = {0};
    if (strcmp(mode, "warn") == 0)
        cfg = (herd_comm_config){.stall_warning_s = 1, .timeout_s = 30};
    else if (strcmp(mode, "timeout") == 0)
        cfg = (herd_comm_config){.stall_warning_s = 1, .timeout_s = 3};
    else if (strcmp(mode, "stop0") == 0) /* rank 0 counts as silent after 3 s */
        cfg = (herd_comm_config){.stall_warning_s = 1, .timeout_s = 6};
    else if (strcmp(mode, "leave") == 0 || strcmp(mode, "leave0") == 0)
        cfg = (herd_comm_config){.stall_warning_s = 20, .timeout_s = 30};
    else if (strcmp(mode, "kill") != 0) {
        fprintf(stderr, "usage: mpi_faults warn|timeout|stop0|kill|leave|leave0 [blocking]\n");
        return 2;
    }
    herd_comm *c;
    MT_OK(herd_comm_create_default(&cfg, &c));
    mt_rank = c->rank;
    float g[1000];
    for (int i = 0; i < 1000; i++)
        g[i] = (float)c->rank;
    c->ops->set_activity(c, "epoch 1 step 1: forward");
    MT_OK(c->ops->allreduce_start(c, g, 1000, 1.0f, HERD_WIRE_FP32, "bucket 0"));
    MT_OK(c->ops->wait_all(c));

    if (c->rank == (strcmp(mode, "leave0") == 0 ? 0 : 1) && strncmp(mode, "leave", 5) == 0) {
        herd_comm_destroy(c); /* as a program that ends, or calls shutdown, here */
        return 0;
    }
    if (c->rank == 0 && strcmp(mode, "stop0") == 0) {
        c->ops->set_activity(c, "epoch 1 step 2: forward");
        raise(SIGSTOP); /* every thread stops, the communication thread too */
    }
    if (c->rank == 1 && strcmp(mode, "stop0") != 0 && strncmp(mode, "leave", 5) != 0) {
        if (strcmp(mode, "kill") == 0)
            kill(getpid(), SIGKILL);
        c->ops->set_activity(c, "epoch 1 step 2: forward");
        straggle(strcmp(mode, "warn") == 0 ? 3.0 : 60.0); /* busy, not in a collective */
    }
    c->ops->set_activity(c, "epoch 1 step 2: backward");
    float want = (float)(c->size * (c->size - 1) / 2) * (float)c->size;
    if (argc > 2 && strcmp(argv[2], "blocking") == 0) {
        double d[1000];
        for (int i = 0; i < 1000; i++)
            d[i] = g[i];
        MT_OK(c->ops->allreduce_f64(c, d, 1000));
        MT_CHECK(d[0] == want && d[999] == want, "%g, want %g", d[0], (double)want);
    } else {
        MT_OK(c->ops->allreduce_start(c, g, 1000, 1.0f, HERD_WIRE_FP32, "bucket 3"));
        MT_OK(c->ops->wait_all(c));
        MT_CHECK(g[0] == want && g[999] == want, "%g, want %g", g[0], want);
    }
    MT_OK(c->ops->barrier(c));
    herd_comm_destroy(c);
    return mt_finish("done");
}
