/* A step's phases on the device's clock (phase_clock.h). */
#include "train/phase_clock.h"

#include <string.h>

#include "core/clock.h"
#include "core/error.h"

void herd_phase_clock_init(herd_phase_clock *c, const herd_backend *be)
{
    memset(c, 0, sizeof *c);
    c->be = be->timer_mark && be->timer_elapsed ? be : NULL;
}

static int slot_of(const herd_phase_clock *c, int i) { return (c->first + i) % HERD_TIMER_SLOTS; }

/* Adds the intervals between the marks so far to c->sum, with one wait (for the last
 * mark), and to tl from the host's time of the first mark (an idle device reaches a
 * mark as the host records it: each step starts after the last one's wait); the last
 * mark begins what follows. */
static herd_status read_marks(herd_phase_clock *c, herd_timeline *tl)
{
    static const herd_tl_kind kinds[HERD_PHASE_COUNT] = {
        [HERD_PHASE_FORWARD] = HERD_TL_FORWARD, [HERD_PHASE_BACKWARD] = HERD_TL_BACKWARD,
        [HERD_PHASE_COMM] = HERD_TL_COMM_WAIT, [HERD_PHASE_OPTIMIZER] = HERD_TL_OPTIMIZER};
    int last = c->n - 1;
    double span;
    HERD_TRY(c->be->timer_elapsed(slot_of(c, 0), slot_of(c, last), &span));
    double at = c->first_host; /* the host's time of the device reaching each mark */
    for (int i = 1; i <= last; i++) {
        double dt;
        HERD_TRY(c->be->timer_elapsed(slot_of(c, i - 1), slot_of(c, i), &dt));
        herd_phase ph = (herd_phase)c->phase[i];
        c->sum[ph] += dt;
        if (tl && ph != HERD_PHASE_GAP && ph != HERD_PHASE_START)
            herd_timeline_add(tl, kinds[ph], NULL, at, at + dt);
        at += dt;
    }
    c->first = slot_of(c, last);
    c->first_host += span;
    c->n = 1;
    c->phase[0] = HERD_PHASE_START;
    return HERD_OK;
}

herd_status herd_phase_mark_device(herd_phase_clock *c, herd_phase since_last)
{
    if (since_last == HERD_PHASE_START) {
        c->n = 0;
        memset(c->sum, 0, sizeof c->sum);
        c->first_host = herd_now();
    } else if (c->n == 0) {
        return HERD_OK; /* no step begun: host clocks */
    }
    if (c->n == HERD_TIMER_SLOTS) /* the ring is full: read it (one wait) and go on */
        HERD_TRY(read_marks(c, NULL));
    HERD_TRY(c->be->timer_mark(slot_of(c, c->n)));
    /* A host preempted between its clock reading and the mark would shift every phase
     * of the step from its layers: where the backend knows the mark's time, use it. */
    if (since_last == HERD_PHASE_START && c->be->timer_host_time)
        HERD_TRY(c->be->timer_host_time(slot_of(c, 0), &c->first_host));
    c->phase[c->n++] = (unsigned char)since_last;
    return HERD_OK;
}

herd_status herd_phase_clock_finish(herd_phase_clock *c, herd_phase_times *t, herd_timeline *tl)
{
    if (!c->be || c->n == 0)
        return HERD_OK;
    herd_status st = read_marks(c, tl);
    c->n = 0;
    HERD_TRY(st);
    t->forward = c->sum[HERD_PHASE_FORWARD];
    t->backward = c->sum[HERD_PHASE_BACKWARD];
    t->comm_wait = c->sum[HERD_PHASE_COMM];
    t->optimizer = c->sum[HERD_PHASE_OPTIMIZER];
    return HERD_OK;
}
