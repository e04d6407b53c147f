/* The stall inspector's judgement of a peer from its last status (dist/peer_state.h):
 * arrived, not started, unheard, or silent (unreachable or stopped), and the words. */
#include <string.h>

#include "dist/peer_state.h"
#include "testutil.h"

static void test_classify(void **state)
{
    (void)state;
    const double T = HERD_PEER_SILENT_AFTER_S;
    /* Heard recently: its sequence numbers decide. */
    assert_int_equal(herd_peer_classify(100, 90, 99.5, 7, 7), HERD_PEER_ARRIVED);
    assert_int_equal(herd_peer_classify(100, 90, 99.5, 8, 7), HERD_PEER_ARRIVED);
    assert_int_equal(herd_peer_classify(100, 90, 99.5, 6, 7), HERD_PEER_NOT_STARTED);
    /* Asked for T s and more with no answer: silent, whatever its last status said
     * (the partition case: it had arrived, then the network went). */
    assert_int_equal(herd_peer_classify(100, 100 - T, 100 - T, 7, 7), HERD_PEER_SILENT);
    assert_int_equal(herd_peer_classify(100, 90, 50, 6, 7), HERD_PEER_SILENT);
    assert_int_equal(herd_peer_classify(100, 90, 0, 0, 7), HERD_PEER_SILENT);
    /* Not asked long enough: an old status is all there is, not silence. */
    assert_int_equal(herd_peer_classify(100, 100 - T + 0.5, 50, 6, 7), HERD_PEER_NOT_STARTED);
    assert_int_equal(herd_peer_classify(100, 100 - T + 0.5, 50, 7, 7), HERD_PEER_ARRIVED);
    assert_int_equal(herd_peer_classify(100, 0, 50, 6, 7), HERD_PEER_NOT_STARTED);
    assert_int_equal(herd_peer_classify(100, 0, 0, 0, 7), HERD_PEER_UNHEARD);
    assert_int_equal(herd_peer_classify(100, 99, 0, 0, 7), HERD_PEER_UNHEARD);
}

static void test_describe(void **state)
{
    (void)state;
    char out[256];
    /* now = 100 on the monotonic clock is 23:01:20 UTC; heard at 88 = 23:01:08; asked
     * since 90, so 10 s without an answer. */
    double wall = 1795993280.0; /* 2026-11-29 23:01:20 UTC */
    herd_peer_describe_silence(100, wall, 90, 88, false, out, sizeof out);
    assert_string_equal(out, "no answer for 10 s, last heard at 23:01:08 UTC; the network between "
                             "the hosts may be down, or the process is stopped");
    /* Heard after the asking began: the silence counts from then. */
    herd_peer_describe_silence(100, wall, 90, 95, false, out, sizeof out);
    assert_string_equal(out, "no answer for 5 s, last heard at 23:01:15 UTC; the network between "
                             "the hosts may be down, or the process is stopped");
    herd_peer_describe_silence(100, wall, 94, 0, true, out, sizeof out);
    assert_string_equal(out, "no answer for 6 s, and none before; on this host, so the process is "
                             "stopped or hung");
    /* Cut to the buffer, terminated. */
    char small[12];
    herd_peer_describe_silence(100, wall, 90, 88, false, small, sizeof small);
    assert_int_equal(strlen(small), sizeof small - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classify),
        cmocka_unit_test(test_describe),
    };
    return tu_run(tests, NULL, NULL);
}
