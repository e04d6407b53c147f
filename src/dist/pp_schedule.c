#include "dist/pp_schedule.h"

#include <string.h>

#include "core/error.h"

const char *herd_pp_kind_name(herd_pp_kind k) { return k == HERD_PP_GPIPE ? "gpipe" : "1f1b"; }

herd_status herd_pp_kind_parse(const char *name, herd_pp_kind *out)
{
    if (name && strcmp(name, "1f1b") == 0)
        *out = HERD_PP_1F1B;
    else if (name && strcmp(name, "gpipe") == 0)
        *out = HERD_PP_GPIPE;
    else
        return HERD_ERR(HERD_ERR_INVALID_ARG, "pipeline schedule '%s' is not known; use 1f1b or gpipe",
                        name ? name : "(null)");
    return HERD_OK;
}

int herd_pp_max_in_flight(herd_pp_kind kind, int stages, int n, int stage)
{
    if (kind == HERD_PP_GPIPE)
        return n;
    int bound = stages - stage;
    return bound < n ? bound : n;
}

double herd_pp_ideal_bubble(int stages, int n)
{
    return (double)(stages - 1) / (double)(n + stages - 1);
}

herd_status herd_pp_schedule(herd_pp_kind kind, int stages, int n, int stage, herd_pp_action *out)
{
    if (stages < 1 || n < 1 || stage < 0 || stage >= stages)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "pipeline schedule: stage %d of %d stages with %d micro-batches is not valid",
                        stage, stages, n);
    int k = 0, fwd = 0, bwd = 0;
    /* GPipe warms up with every forward; 1F1B with as many as the stages after this
     * one need to fill, so that the last stage starts backward as soon as it can. */
    int warmup = kind == HERD_PP_GPIPE ? n : herd_pp_max_in_flight(kind, stages, n, stage) - 1;
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
