/* Several ranks on one GPU: which ranks share one, from a table of (host, GPU
 * identity), and the line that names them (herd_gpu_shared); the collective's
 * answer in one process, where no GPU can be shared. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#include "dist/comm.h"
#include "dist/gpu_share.h"

static herd_gpu_seat seat(const char *host, const char *id, int ordinal)
{
    herd_gpu_seat s = {0};
    snprintf(s.host, sizeof s.host, "%s", host);
    snprintf(s.id, sizeof s.id, "%s", id);
    snprintf(s.name, sizeof s.name, "GPU %d (%s)", ordinal, id);
    return s;
}

static void test_one_gpu_each(void **state)
{
    (void)state;
    /* The same bus id on two hosts is two GPUs; an empty id is never shared. */
    herd_gpu_seat t[] = {seat("a", "00000000:1B:00.0", 0), seat("a", "00000000:3B:00.0", 1),
                         seat("b", "00000000:1B:00.0", 0), seat("b", "", 0), seat("b", "", 0)};
    char msg[256] = "stale";
    assert_int_equal(herd_gpu_shared(t, 5, "ranks", msg, sizeof msg), 0);
    assert_string_equal(msg, "");
    assert_int_equal(herd_gpu_shared(t, 0, "ranks", msg, sizeof msg), 0);
    assert_int_equal(herd_gpu_shared(t, 5, "ranks", NULL, 0), 0);
}

static void test_shared_groups(void **state)
{
    (void)state;
    /* 2 hosts of 1 GPU and 3 ranks each, ranks placed by slot (a, b, a, b, ...): on each
     * host, each rank's round-robin GPU is that host's only one. Rank 6 is on its own. */
    herd_gpu_seat t[7];
    for (int r = 0; r < 6; r++)
        t[r] = seat(r % 2 ? "nodeB" : "nodeA", "00000000:1B:00.0", 0);
    t[6] = seat("nodeC", "00000000:1B:00.0", 0);
    char msg[512];
    assert_int_equal(herd_gpu_shared(t, 7, "ranks", msg, sizeof msg), 2);
    assert_string_equal(msg, "ranks 0,2,4 on host nodeA share GPU 0 (00000000:1B:00.0); "
                             "ranks 1,3,5 on host nodeB share GPU 0 (00000000:1B:00.0)");
    /* The count needs no message; a short buffer cuts the line, never overflows. */
    assert_int_equal(herd_gpu_shared(t, 7, "ranks", NULL, 0), 2);
    char shortmsg[80];
    memset(shortmsg, 'x', sizeof shortmsg);
    assert_int_equal(herd_gpu_shared(t, 7, "ranks", shortmsg, sizeof shortmsg), 2);
    assert_non_null(memchr(shortmsg, '\0', sizeof shortmsg));
    assert_true(strncmp(shortmsg, "ranks 0,2,4 on host nodeA", 25) == 0);
    assert_non_null(strstr(shortmsg, "..."));
}

static void test_doctor_form(void **state)
{
    (void)state;
    /* herd doctor's form: one host (no "on host"), local ranks, GPUs by index. */
    herd_gpu_seat t[5];
    for (int r = 0; r < 5; r++) {
        t[r] = (herd_gpu_seat){0};
        snprintf(t[r].id, sizeof t[r].id, "%d", r % 2);
        snprintf(t[r].name, sizeof t[r].name, "GPU %d", r % 2);
    }
    char msg[256];
    assert_int_equal(herd_gpu_shared(t, 5, "local ranks", msg, sizeof msg), 2);
    assert_string_equal(msg, "local ranks 0,2,4 share GPU 0; local ranks 1,3 share GPU 1");
}

static void test_long_list(void **state)
{
    (void)state;
    /* 40 ranks on one GPU: the first 16 named, then the count. */
    herd_gpu_seat t[40];
    for (int r = 0; r < 40; r++)
        t[r] = seat("h", "00000000:1B:00.0", 0);
    char msg[512];
    assert_int_equal(herd_gpu_shared(t, 40, "ranks", msg, sizeof msg), 1);
    assert_string_equal(msg, "ranks 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,... (40 ranks) on "
                             "host h share GPU 0 (00000000:1B:00.0)");
}

static herd_status fake_identity(int *ordinal, char *id, size_t cap)
{
    *ordinal = 0;
    snprintf(id, cap, "fake-gpu");
    return HERD_OK;
}

static void test_one_process(void **state)
{
    (void)state;
    /* A job of one rank shares nothing, whatever the backend says, and gathers nothing. */
    herd_comm *local, *c;
    assert_herd_ok(herd_comm_local_create(&local));
    herd_backend be = *herd_backend_cpu();
    be.host_memory = false;
    be.device_identity = fake_identity;
    bool shared = true, nccl = true;
    char line[64] = "stale";
    assert_herd_ok(herd_gpu_share_check(local, &be, &shared, line, sizeof line));
    assert_false(shared);
    assert_string_equal(line, "");
    be.name = "cuda"; /* one rank: nothing to exchange, never NCCL */
    assert_herd_ok(herd_device_reduction(local, &be, &nccl));
    assert_false(nccl);
    be.name = "cpu";
    assert_herd_ok(herd_comm_device_create(local, &be, &c));
    assert_string_equal(c->ops->name, "mpi-staged");
    herd_comm_destroy(c);
    herd_comm_destroy(local);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_gpu_each),
        cmocka_unit_test(test_shared_groups),
        cmocka_unit_test(test_doctor_form),
        cmocka_unit_test(test_long_list),
        cmocka_unit_test(test_one_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
