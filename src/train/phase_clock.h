/* A step's phases on the device's own clock, for backends with a timer (a GPU: its
 * kernels run after the host has queued them, so host clocks put their time wherever
 * the host next waits). Each phase boundary of the step is a mark on the device; at
 * the step's end one wait for its last mark reads them all, and the step's forward,
 * backward, optimizer and exposed communication become the device's time between the
 * marks, adding up to what the device did in the step. On a backend without a timer
 * (the CPU, whose host clocks are right) every call is a test of one pointer. */
#ifndef HERD_TRAIN_PHASE_CLOCK_H
#define HERD_TRAIN_PHASE_CLOCK_H

#include "backend/backend.h"
#include "obs/timeline.h"

/* What the time since the previous mark was. */
typedef enum herd_phase {
    HERD_PHASE_START, /* the step's first mark: the time before it is not the step's */
    HERD_PHASE_GAP,   /* the host's, between micro-batches: no phase */
    HERD_PHASE_FORWARD,
    HERD_PHASE_BACKWARD,
    HERD_PHASE_COMM, /* exposed communication: the device waiting for reductions */
    HERD_PHASE_OPTIMIZER,
    HERD_PHASE_COUNT
} herd_phase;

typedef struct herd_phase_clock {
    const herd_backend *be; /* NULL: host clocks */
    int n;                  /* marks of this step so far (0: no step begun) */
    int first;              /* the slot of this step's first mark in the ring */
    double first_host;      /* herd_now() when the device reached it */
    unsigned char phase[HERD_TIMER_SLOTS];
    double sum[HERD_PHASE_COUNT]; /* seconds of the marks already read this step */
} herd_phase_clock;

/* Device timing when be has a timer, else nothing (host clocks). */
void herd_phase_clock_init(herd_phase_clock *c, const herd_backend *be);
/* Whether the device times the step under way (its phases then come from finish). */
static inline bool herd_phase_clock_timing(const herd_phase_clock *c) { return c->be && c->n > 0; }

herd_status herd_phase_mark_device(herd_phase_clock *c, herd_phase since_last);
/* A phase boundary: `since_last` is what the device did since the previous mark.
 * Marks before a step's START are ignored (steps without device timing: pipelines). */
static inline herd_status herd_phase_mark(herd_phase_clock *c, herd_phase since_last)
{
    return c->be ? herd_phase_mark_device(c, since_last) : HERD_OK;
}

/* The step's end: waits for its last mark and sets t's forward, backward, optimizer
 * and comm_wait to the device's times (leaving data_wait and total), adding the
 * phases to tl (NULL: none) on the host's clock from the step's start (a step of more
 * marks than the ring holds reads the earlier ones on the way: only the last ring's
 * reach tl). Nothing without a step begun by START; the clock is ready for the next
 * step either way. */
herd_status herd_phase_clock_finish(herd_phase_clock *c, herd_phase_times *t, herd_timeline *tl);

#endif
