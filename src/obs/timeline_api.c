/* The public timeline of a program's own training loop (herd.torch): herd train's trace
 * (timeline.c), with the caller recording the compute track's spans. */
#include "core/clock.h"
#include "core/error.h"
#include "obs/timeline.h"

/* The phases of a step; no layers (a caller's framework runs them). */
static const herd_tl_kind span_kind[] = {
    [HERD_SPAN_STEP] = HERD_TL_STEP,
    [HERD_SPAN_FORWARD] = HERD_TL_FORWARD,
    [HERD_SPAN_BACKWARD] = HERD_TL_BACKWARD,
    [HERD_SPAN_COMM_WAIT] = HERD_TL_COMM_WAIT,
    [HERD_SPAN_OPTIMIZER] = HERD_TL_OPTIMIZER,
};
/* Buffers grow as needed; this only sizes the first ones (a step, its phases and a few
 * gradient buckets). */
#define EVENTS_PER_STEP 16

herd_status herd_timeline_start(herd_dist *d, const char *path, herd_timeline **out)
{
    if (!out)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_timeline_start: out is NULL");
    *out = NULL;
    if (!d)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_timeline_start: no group (herd_dist_init "
                        "first, also for one process)");
    HERD_TRY(herd_timeline_open(path, d, EVENTS_PER_STEP, out));
    herd_timeline_begin_step(*out, 1, 1); /* the reductions that come next are step 1's */
    return HERD_OK;
}

double herd_timeline_now(void) { return herd_now(); }

void herd_timeline_record(herd_timeline *tl, herd_timeline_span what, long step, double t0,
                          double t1)
{
    if (!tl || (unsigned)what > HERD_SPAN_OPTIMIZER)
        return;
    herd_timeline_begin_step(tl, 1, step);
    herd_timeline_add(tl, span_kind[what], NULL, t0, t1);
    /* A step's span comes last: the reductions from now on are the next step's. */
    if (what == HERD_SPAN_STEP)
        herd_timeline_begin_step(tl, 1, step + 1);
}

herd_status herd_timeline_write(herd_timeline *tl)
{
    if (!tl)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_timeline_write: no timeline");
    return herd_timeline_flush(tl);
}

herd_status herd_timeline_stop(herd_timeline *tl)
{
    return tl ? herd_timeline_close(tl) : HERD_OK;
}
