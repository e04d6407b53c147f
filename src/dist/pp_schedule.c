#include "dist/pp_schedule.h"

#include <string.h>

#include "core/error.h"

const char *herd_pp_schedule_name(herd_pp_schedule_kind k)
{
    switch (k) {
    case HERD_PP_SCHEDULE_1F1B: return "1f1b";
    case HERD_PP_SCHEDULE_GPIPE: return "gpipe";
    }
    return "unknown";
}

herd_status herd_pp_schedule_parse(const char *name, herd_pp_schedule_kind *out)
{
    static const herd_pp_schedule_kind all[] = {HERD_PP_SCHEDULE_1F1B, HERD_PP_SCHEDULE_GPIPE};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (strcmp(name, herd_pp_schedule_name(all[i])) == 0) {
            *out = all[i];
            return HERD_OK;
        }
    return HERD_ERR(HERD_ERR_INVALID_ARG, "pipeline schedule '%s' is not known; use 1f1b or gpipe",
                    name ? name : "(null)");
}

int herd_pp_max_in_flight(herd_pp_schedule_kind kind, int stages, int n, int stage)
{
    if (kind == HERD_PP_SCHEDULE_GPIPE)
        return n;
    int bound = stages - stage;
    return bound < n ? bound : n;
}

double herd_pp_ideal_bubble(int stages, int n)
{
    return (double)(stages - 1) / (double)(n + stages - 1);
}

herd_status herd_pp_schedule(herd_pp_schedule_kind kind, int stages, int n, int stage, herd_pp_action *out)
{
    if ((unsigned)kind > HERD_PP_SCHEDULE_GPIPE)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "pipeline schedule %d is not known: 0 (1f1b) or 1 (gpipe)",
                        (int)kind);
    if (stages < 1 || n < 1 || stage < 0 || stage >= stages)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "pipeline schedule: stage %d of %d stages with %d micro-batches is not valid",
                        stage, stages, n);
    int k = 0, fwd = 0, bwd = 0;
    /* GPipe warms up with every forward; 1F1B with as many as the stages after this
     * one need to fill, so that the last stage starts backward as soon as it can. */
    int warmup = kind == HERD_PP_SCHEDULE_GPIPE ? n : herd_pp_max_in_flight(kind, stages, n, stage) - 1;
    if (warmup < 0)
        warmup = 0;
    for (; fwd < warmup; fwd++)
        out[k++] = (herd_pp_action){HERD_PP_FWD, fwd};
    for (; fwd < n; fwd++, bwd++) { /* steady state: one forward, one backward */
        out[k++] = (herd_pp_action){HERD_PP_FWD, fwd};
        out[k++] = (herd_pp_action){HERD_PP_BWD, bwd};
    }
    for (; bwd < n; bwd++)
        out[k++] = (herd_pp_action){HERD_PP_BWD, bwd};
    return HERD_OK;
}
