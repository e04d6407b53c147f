/*
 * Trace sink: how the layers (nn) and the communicators (dist) report timed events
 * without knowing who records them, so neither depends on obs. obs/timeline.c is the
 * recorder behind --timeline (herd_timeline_sink); train hands its sink to the model's
 * run context, and the timeline attaches it to the communicator. With no sink
 * attached (NULL) an event costs one pointer test: no clock is read.
 */
#ifndef HERD_CORE_TRACE_H
#define HERD_CORE_TRACE_H

#include <stddef.h>

#include "core/clock.h"

/* What an event is; the recorder gives each its name, category and track. */
typedef enum herd_tl_kind {
    HERD_TL_STEP,       /* cat "step", a whole optimizer step */
    HERD_TL_DATA_WAIT,  /* cat "phase" ... */
    HERD_TL_FORWARD,
    HERD_TL_BACKWARD,
    HERD_TL_COMM_WAIT,
    HERD_TL_OPTIMIZER,
    HERD_TL_FWD_LAYER,  /* cat "layer": "fwd <layer>" */
    HERD_TL_BWD_LAYER,  /* "bwd <layer>" */
    HERD_TL_ALLREDUCE,  /* cat "comm" on the communication track: "allreduce <tag>",
                         * "reduce-scatter <tag>", "all-gather <tag>" */
    HERD_TL_CHECKPOINT, /* cat "io" */
    HERD_TL_EVALUATE,   /* cat "eval" */
    HERD_TL_RECOMPUTE_LAYER, /* cat "layer": "recompute <layer>", a forward re-run in backward */
    HERD_TL_KINDS
} herd_tl_kind;

typedef struct herd_trace_sink {
    void *ctx; /* the recorder */
    /* Training thread's track: an event of any kind but HERD_TL_ALLREDUCE, from t0 to
     * t1 (herd_now()). label: the layer name for layer events, otherwise NULL. */
    void (*complete)(void *ctx, herd_tl_kind kind, const char *label, double t0, double t1);
    /* Communication thread's track: a collective on the gradients or parameters
     * ("allreduce bucket 3"), launched at `launched`, run from t0 to t1. */
    void (*comm)(void *ctx, const char *tag, double launched, double t0, double t1,
                 size_t bytes);
} herd_trace_sink;

/* The start of an event: the time when a sink is attached, otherwise 0 (no clock read). */
static inline double herd_trace_start(const herd_trace_sink *s) { return s ? herd_now() : 0; }

/* Ends an event begun at t0 (herd_trace_start) now, on the training thread's track. */
static inline void herd_trace_end(const herd_trace_sink *s, herd_tl_kind kind, const char *label,
                                  double t0)
{
    if (s)
        s->complete(s->ctx, kind, label, t0, herd_now());
}

#endif
