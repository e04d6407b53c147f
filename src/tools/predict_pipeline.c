/* herd predict --pipeline-stages: one step of a pipeline simulated as the stages run
 * their schedule (tools.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dist/pp_schedule.h"
#include "tools/tools.h"

herd_status herd_predict_pipeline(const herd_pipeline_model *m, herd_pipeline_prediction *out)
{
    int P = m->stages, n = m->micro_batches;
    memset(out, 0, sizeof *out);
    if (P < 1 || P > HERD_PREDICT_MAX_STAGES || n < 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "predict: %d stages and %d micro-batches: need 1..%d "
                        "stages and at least one micro-batch", P, n, HERD_PREDICT_MAX_STAGES);
    herd_pp_action *acts = calloc((size_t)P * 2 * (size_t)n, sizeof *acts);
    double *fdone = malloc((size_t)P * (size_t)n * sizeof *fdone);
    double *bdone = malloc((size_t)P * (size_t)n * sizeof *bdone);
    int *next = calloc((size_t)P, sizeof *next);
    double *free_at = calloc((size_t)P, sizeof *free_at);
    herd_status st = acts && fdone && bdone && next && free_at ? HERD_OK : HERD_ERR_NOMEM;
    for (int s = 0; st == HERD_OK && s < P; s++)
        st = herd_pp_schedule(m->schedule, P, n, s, acts + (size_t)s * 2 * n);
    for (int i = 0; st == HERD_OK && i < P * n; i++)
        fdone[i] = bdone[i] = -1;
    /* Event by event: of the stages whose next action's inputs have arrived, the one
     * that can start first goes (the schedule is deadlock-free: pp_schedule's test). */
    for (int left = 2 * P * n; st == HERD_OK && left > 0; left--) {
        int pick = -1;
        double pick_at = INFINITY;
        for (int s = 0; s < P; s++) {
            if (next[s] == 2 * n)
                continue;
            herd_pp_action a = acts[(size_t)s * 2 * n + next[s]];
            double ready;
            if (a.op == HERD_PP_FWD)
                ready = s == 0 ? 0 : fdone[(s - 1) * n + a.mb] < 0 ? -1 : fdone[(s - 1) * n + a.mb] + m->transfer_s[s - 1];
            else if (fdone[s * n + a.mb] < 0)
                ready = -1;
            else if (s == P - 1)
                ready = fdone[s * n + a.mb];
            else
                ready = bdone[(s + 1) * n + a.mb] < 0 ? -1 : bdone[(s + 1) * n + a.mb] + m->transfer_s[s];
            if (ready < 0)
                continue;
            double at = fmax(ready, free_at[s]);
            if (at < pick_at)
                pick_at = at, pick = s;
        }
        if (pick < 0) {
            st = HERD_ERR(HERD_ERR_INTERNAL, "predict: the pipeline schedule stalled");
            break;
        }
        herd_pp_action a = acts[(size_t)pick * 2 * n + next[pick]++];
        double cost = a.op == HERD_PP_FWD ? m->forward_s[pick] : m->backward_s[pick];
        (a.op == HERD_PP_FWD ? fdone : bdone)[pick * n + a.mb] = free_at[pick] = pick_at + cost;
        out->busy_s[pick] += cost;
    }
    if (st == HERD_OK) {
        double compute = 0, step = 0;
        for (int s = 0; s < P; s++) {
            compute = fmax(compute, free_at[s]);
            step = fmax(step, free_at[s] + m->allreduce_s[s]);
        }
        if (m->tied_s > 0) {
            int t = m->tied_stage;
            step = fmax(step, fmax(free_at[t] + m->allreduce_s[t],
                                   free_at[P - 1] + m->allreduce_s[P - 1]) + m->tied_s);
        }
        out->step_s = step + m->other_s;
        for (int s = 0; s < P; s++)
            out->bubble += (1 - out->busy_s[s] / compute) / P;
        out->ideal_bubble = herd_pp_ideal_bubble(P, n);
    }
    free(acts), free(fdone), free(bdone), free(next), free(free_at);
    return st;
}
