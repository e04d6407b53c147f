/* The failure lines herd run's supervisor reads (dist/failure_line.h), written and
 * parsed together, and what the supervisor makes of a launcher's stderr
 * (tools/run_tools.h): the evidence it keeps and whether it restarts. */
#include <stdio.h>
#include <string.h>

#include "dist/failure_line.h"
#include "testutil.h"
#include "tools/run_tools.h"

static void test_round_trip(void **state)
{
    (void)state;
    char line[512], host64[65];
    herd_failure_line f;
    herd_failure_line_format(line, sizeof line, 3, "node7", 1200, false, "NaN loss at step 1200");
    assert_string_equal(line, "herd-run: failed rank=3 host=node7 step=1200 phase=training: NaN loss at step 1200");
    assert_true(herd_failure_line_parse(line, &f));
    assert_int_equal(f.rank, 3);
    assert_string_equal(f.host, "node7");
    assert_int_equal(f.step, 1200);
    assert_false(f.setup);
    assert_string_equal(f.message, "NaN loss at step 1200");

    /* Set-up, an empty message, and a host name of HOST_NAME_MAX (64) bytes. */
    memset(host64, 'h', 64);
    host64[64] = '\0';
    herd_failure_line_format(line, sizeof line, 0, host64, 0, true, "");
    assert_true(herd_failure_line_parse(line, &f));
    assert_true(f.setup);
    assert_int_equal(f.rank, 0);
    assert_int_equal(f.step, 0);
    assert_string_equal(f.host, host64);
    assert_string_equal(f.message, "");
}

static void test_embedded(void **state)
{
    (void)state;
    herd_failure_line f;
    /* As a launcher passes it on, prefixed, the message holding colons of its own. */
    assert_true(herd_failure_line_parse("[1,2]<stderr>:herd-run: failed rank=2 host=n2 step=5 phase=setup:  "
                                        "cannot read data: no such file (idx.c:40)", &f));
    assert_int_equal(f.rank, 2);
    assert_string_equal(f.host, "n2");
    assert_true(f.setup);
    assert_string_equal(f.message, "cannot read data: no such file (idx.c:40)");
}

static void test_rejected(void **state)
{
    (void)state;
    herd_failure_line f;
    const char *bad[] = {
        "",
        "herd: error: training failed",
        "herd-run: failed",
        "herd-run: failed host=n0 step=1 phase=training: x",          /* no rank */
        "herd-run: failed rank=0 step=1 phase=training: x",           /* no host */
        "herd-run: failed rank=0 host= step=1 phase=training: x",     /* empty host */
        "herd-run: failed rank=0 host=n0 phase=training: x",          /* no step */
        "herd-run: failed rank=0 host=n0 step=1: x",                  /* no phase */
        "herd-run: failed rank=0 host=n0 step=1 phase=training x",    /* no colon */
        "herd-run: failed rank=0 host=n0 step=1 phase=resume: x",     /* unknown phase */
        "herd-run: failed rank=-1 host=n0 step=1 phase=training: x",  /* negative */
        "herd-run: failed rank=x host=n0 step=1 phase=training: x",   /* not a number */
        "herd-run: failed rank=1x host=n0 step=1 phase=training: x",  /* trailing bytes */
        "herd-run: failed rank=99999999999999999999 host=n0 step=1 phase=training: x",
        "herd-run: failed rank=0 host=n0 step=1 phase=training",      /* cut short */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (herd_failure_line_parse(bad[i], &f))
            fail_msg("parsed: '%s'", bad[i]);
    }
    /* A host longer than any host name. */
    char line[512], host[300];
    memset(host, 'h', sizeof host - 1);
    host[sizeof host - 1] = '\0';
    herd_failure_line_format(line, sizeof line, 0, host, 0, true, "x");
    assert_false(herd_failure_line_parse(line, &f));
}

static void test_stall(void **state)
{
    (void)state;
    char item[128], late[256] = "", silent[256] = "", lists[512], msg[1024];
    herd_stall_failure s;
    herd_stall_item(item, sizeof item, 2, "node3", "last: 'epoch 1 step 119: forward' 61 s ago");
    snprintf(late, sizeof late, "%s", item);
    herd_stall_item(item, sizeof item, 1, "node2", "no answer for 12 s");
    snprintf(silent, sizeof silent, "%s", item);

    /* Both lists: the unreachable rank is named, though listed second. */
    herd_stall_lists(lists, sizeof lists, late, silent);
    herd_stall_timeout_format(msg, sizeof msg, 42, "allreduce 4 MiB", 60, lists, "");
    assert_string_equal(msg, "collective #42 (allreduce 4 MiB) did not complete within 60 s (stall timeout); "
                             "ranks not yet arrived: 2 on node3 (last: 'epoch 1 step 119: forward' 61 s ago); "
                             "ranks unreachable: 1 on node2 (no answer for 12 s); ending the job");
    char logged[1200];
    snprintf(logged, sizeof logged, "herd: error: rank 0 on node0 (pid 12): %s", msg);
    assert_true(herd_stall_line_parse(logged, &s));
    assert_true(s.unreachable);
    assert_int_equal(s.rank, 1);
    assert_string_equal(s.host, "node2");

    /* Late ranks only, with a note after them. */
    herd_stall_lists(lists, sizeof lists, late, "");
    herd_stall_timeout_format(msg, sizeof msg, 7, "broadcast", 30, lists, " in 10 s (...)");
    assert_true(herd_stall_line_parse(msg, &s));
    assert_false(s.unreachable);
    assert_int_equal(s.rank, 2);
    assert_string_equal(s.host, "node3");

    /* No rank known, no mark, or a warning (no timeout): nothing. */
    herd_stall_lists(lists, sizeof lists, "", "");
    herd_stall_timeout_format(msg, sizeof msg, 7, "broadcast", 30, lists, "");
    assert_false(herd_stall_line_parse(msg, &s));
    assert_false(herd_stall_line_parse("ranks unreachable: 1 on node2 (no answer for 12 s)", &s));
    assert_false(herd_stall_line_parse("(stall timeout); ranks unreachable: x on node2 (...)", &s));
    assert_false(herd_stall_line_parse("(stall timeout); ranks unreachable: 1 on (...)", &s));
}

/* The supervisor's reading: the herd line and the stall are kept by strength. */
static void test_watch(void **state)
{
    (void)state;
    herd_run_failure f;
    herd_run_watch w;
    char what[512], line[512];
    herd_run_watch_init(&w, &f);
    herd_run_watch_line(&w, "epoch 1 step 3 loss 2.30", 1.0);
    assert_int_equal(f.evidence, HERD_RUN_EV_NONE);
    herd_failure_line_format(line, sizeof line, 1, "n1", 17, false, "NaN loss");
    herd_run_watch_line(&w, line, 2.5);
    assert_int_equal(f.evidence, HERD_RUN_EV_HERD);
    assert_true(f.herd_line);
    assert_false(f.setup);
    assert_true(f.at == 2.5);
    herd_run_failure_describe(&f, what, sizeof what);
    assert_string_equal(what, "rank 1 on n1 (herd train failed at step 17: NaN loss)");

    /* A weaker sign later changes nothing; a stronger one (a signal) wins. */
    herd_run_learn(&w, HERD_RUN_EV_LAUNCHER, -1, "", "the launcher exited with status 1", 3);
    assert_int_equal(f.rank, 1);
    herd_run_watch_line(&w, "mpirun noticed that process rank 0 with PID 77 on node n0 exited on signal 9 (Killed).",
                        4);
    assert_int_equal(f.evidence, HERD_RUN_EV_SIGNAL);
    assert_true(f.signalled);
    herd_run_failure_describe(&f, what, sizeof what);
    assert_string_equal(what, "rank 0 on n0 (killed by SIGKILL)");
    assert_true(f.at == 2.5); /* timed from the first sign */

    /* The stall timeout as comm_mpi_stall.c writes it. */
    herd_run_watch_init(&w, &f);
    char lists[256], item[128];
    herd_stall_item(item, sizeof item, 3, "n3", "no answer for 5 s");
    herd_stall_lists(lists, sizeof lists, "", item);
    herd_stall_timeout_format(line, sizeof line, 9, "allreduce", 60, lists, "");
    herd_run_watch_line(&w, line, 1);
    herd_run_failure_describe(&f, what, sizeof what);
    assert_string_equal(what, "rank 3 on n3 (unreachable at the stall timeout)");
}

static void test_restart_decision(void **state)
{
    (void)state;
    herd_run_failure f;
    herd_run_watch w;
    herd_run_watch_init(&w, &f);
    f.code = 1;
    assert_null(herd_run_no_restart(&f, 0, 2, false));
    assert_string_equal(herd_run_no_restart(&f, 2, 2, false), "no restarts left");
    assert_string_equal(herd_run_no_restart(&f, 0, 2, true), "herd run was asked to stop");
    f.code = 2; /* a usage error from the launcher repeats; herd train's exit 2 with its line need not */
    assert_string_equal(herd_run_no_restart(&f, 0, 2, false), "the launcher exited with code 2, a usage error");
    f.herd_line = true;
    assert_null(herd_run_no_restart(&f, 0, 2, false));
    /* Set-up failures repeat, unless a rank was killed (the kill, not set-up, failed it). */
    char line[256];
    herd_failure_line_format(line, sizeof line, 1, "n1", 0, true, "cannot read data");
    herd_run_watch_line(&w, line, 1);
    assert_string_equal(herd_run_no_restart(&f, 0, 2, false),
                        "herd train failed before training began, which another attempt would repeat");
    herd_run_watch_line(&w, "srun: error: n1: task 1: Killed", 2);
    assert_true(f.signalled);
    assert_null(herd_run_no_restart(&f, 0, 2, false));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_embedded),
        cmocka_unit_test(test_rejected),
        cmocka_unit_test(test_stall),
        cmocka_unit_test(test_watch),
        cmocka_unit_test(test_restart_decision),
    };
    return tu_run(tests, NULL, NULL);
}
