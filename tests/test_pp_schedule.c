/* Pipeline schedules without MPI: every stage's list is simulated together, event by
 * event. FWD(s,k) may start once stage s is free and FWD(s-1,k) has finished; BWD(s,k)
 * once FWD(s,k) is done and BWD(s+1,k) has finished. For every P, M and both kinds:
 * no deadlock, each action once, backward in micro-batch order, the in-flight bound
 * reached and never passed, and with uniform costs the makespan (M+P-1)(f+b), i.e.
 * the ideal bubble. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/pp_schedule.h"
#include "testutil.h"

enum { MAX_P = 8, MAX_N = 4 * MAX_P + 3 };

typedef struct sim {
    double makespan;
    int max_in_flight[MAX_P];
} sim;

/* cost(s, op): a stage's forward and backward times. Returns false on deadlock. */
static bool simulate(herd_pp_schedule_kind kind, int P, int n, const double *fwd, const double *bwd, sim *out,
                     char *why, size_t cap)
{
    herd_pp_action acts[MAX_P][2 * MAX_N];
    double fdone[MAX_P][MAX_N], bdone[MAX_P][MAX_N];
    int next[MAX_P] = {0}, in_flight[MAX_P] = {0}, last_bwd[MAX_P];
    double free_at[MAX_P] = {0};
    for (int s = 0; s < P; s++) {
        assert_int_equal(herd_pp_schedule(kind, P, n, s, acts[s]), HERD_OK);
        last_bwd[s] = -1;
        out->max_in_flight[s] = 0;
        for (int k = 0; k < n; k++)
            fdone[s][k] = bdone[s][k] = -1;
    }
    int left = 2 * n * P;
    while (left > 0) {
        /* Of the stages whose next action can start, the one that starts earliest. */
        int pick = -1;
        double pick_at = INFINITY;
        for (int s = 0; s < P; s++) {
            if (next[s] == 2 * n)
                continue;
            herd_pp_action a = acts[s][next[s]];
            double ready;
            if (a.op == HERD_PP_FWD)
                ready = s == 0 ? 0 : fdone[s - 1][a.mb];
            else
                ready = fdone[s][a.mb] < 0 ? -1 : s == P - 1 ? fdone[s][a.mb] : bdone[s + 1][a.mb];
            if (ready < 0)
                continue;
            double at = ready > free_at[s] ? ready : free_at[s];
            if (at < pick_at)
                pick_at = at, pick = s;
        }
        if (pick < 0) {
            herd_pp_action a = acts[0][next[0] < 2 * n ? next[0] : 0];
            snprintf(why, cap, "%s P=%d n=%d: deadlock with %d actions left (stage 0 waits at %s %d)",
                     herd_pp_schedule_name(kind), P, n, left, a.op == HERD_PP_FWD ? "FWD" : "BWD", a.mb);
            return false;
        }
        herd_pp_action a = acts[pick][next[pick]++];
        if (a.op == HERD_PP_FWD) {
            if (fdone[pick][a.mb] >= 0) {
                snprintf(why, cap, "stage %d runs FWD %d twice", pick, a.mb);
                return false;
            }
            fdone[pick][a.mb] = free_at[pick] = pick_at + fwd[pick];
            if (++in_flight[pick] > out->max_in_flight[pick])
                out->max_in_flight[pick] = in_flight[pick];
        } else {
            if (a.mb != last_bwd[pick] + 1) {
                snprintf(why, cap, "stage %d runs BWD %d after BWD %d: not in micro-batch order",
                         pick, a.mb, last_bwd[pick]);
                return false;
            }
            last_bwd[pick] = a.mb;
            bdone[pick][a.mb] = free_at[pick] = pick_at + bwd[pick];
            in_flight[pick]--;
        }
        left--;
    }
    out->makespan = 0;
    for (int s = 0; s < P; s++)
        out->makespan = free_at[s] > out->makespan ? free_at[s] : out->makespan;
    return true;
}

static void test_every_grid(void **state)
{
    (void)state;
    const double ratios[][2] = {{1, 2}, {1, 1}, {2, 1}};
    char why[160];
    for (int kind = 0; kind < 2; kind++)
        for (int P = 1; P <= MAX_P; P++)
            for (int n = 1; n <= 4 * P + 3; n++)
                for (int r = 0; r < 4; r++) {
                    double fwd[MAX_P], bwd[MAX_P];
                    for (int s = 0; s < P; s++) {
                        /* r == 3: unequal stages */
                        fwd[s] = r < 3 ? ratios[r][0] : 1 + 0.37 * s;
                        bwd[s] = r < 3 ? ratios[r][1] : 2.5 - 0.21 * s;
                    }
                    sim out;
                    if (!simulate((herd_pp_schedule_kind)kind, P, n, fwd, bwd, &out, why, sizeof why))
                        fail_msg("%s", why);
                    for (int s = 0; s < P; s++) {
                        int bound = herd_pp_max_in_flight((herd_pp_schedule_kind)kind, P, n, s);
                        if (out.max_in_flight[s] != bound)
                            fail_msg("%s P=%d n=%d stage %d: at most %d in flight, the bound is %d",
                                     herd_pp_schedule_name((herd_pp_schedule_kind)kind), P, n, s,
                                     out.max_in_flight[s], bound);
                    }
                    if (r < 3) {
                        double unit = fwd[0] + bwd[0];
                        double want = (n + P - 1) * unit;
                        if (fabs(out.makespan - want) > 1e-9)
                            fail_msg("%s P=%d n=%d f=%g b=%g: makespan %g, ideal %g",
                                     herd_pp_schedule_name((herd_pp_schedule_kind)kind), P, n, fwd[0], bwd[0],
                                     out.makespan, want);
                        double bubble = 1 - n * unit / out.makespan;
                        assert_true(fabs(bubble - herd_pp_ideal_bubble(P, n)) < 1e-12);
                    }
                }
}

static void test_bad_arguments(void **state)
{
    (void)state;
    herd_pp_action acts[8];
    assert_int_equal(herd_pp_schedule(HERD_PP_SCHEDULE_1F1B, 0, 2, 0, acts), HERD_ERR_INVALID_ARG);
    assert_int_equal(herd_pp_schedule(HERD_PP_SCHEDULE_1F1B, 2, 0, 0, acts), HERD_ERR_INVALID_ARG);
    assert_int_equal(herd_pp_schedule(HERD_PP_SCHEDULE_GPIPE, 2, 2, 2, acts), HERD_ERR_INVALID_ARG);
    /* A kind outside the enum is refused, not run as 1F1B. */
    assert_int_equal(herd_pp_schedule((herd_pp_schedule_kind)2, 2, 2, 0, acts), HERD_ERR_INVALID_ARG);
    herd_pp_schedule_kind k = HERD_PP_SCHEDULE_1F1B;
    for (int kind = 0; kind < 2; kind++) { /* every name parses back to its kind */
        const char *name = herd_pp_schedule_name((herd_pp_schedule_kind)kind);
        assert_int_equal(herd_pp_schedule_parse(name, &k), HERD_OK);
        assert_int_equal(k, kind);
    }
    assert_string_equal(herd_pp_schedule_name(HERD_PP_SCHEDULE_GPIPE), "gpipe");
    assert_string_equal(herd_pp_schedule_name(HERD_PP_SCHEDULE_1F1B), "1f1b");
    assert_int_equal(herd_pp_schedule_parse(NULL, &k), HERD_ERR_INVALID_ARG);
    assert_int_equal(herd_pp_schedule_parse("GPipe", &k), HERD_ERR_INVALID_ARG);
    assert_int_equal(herd_pp_schedule_parse("zb", &k), HERD_ERR_INVALID_ARG);
    assert_int_equal(k, HERD_PP_SCHEDULE_GPIPE); /* a refused name leaves *out alone */
    assert_non_null(strstr(herd_last_error(), "1f1b or gpipe"));
    assert_non_null(strstr(herd_last_error(), "'zb'"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_grid),
        cmocka_unit_test(test_bad_arguments),
    };
    return tu_run(tests, NULL, NULL);
}
