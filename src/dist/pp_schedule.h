/*
 * Pipeline schedules: the order in which one stage runs the forward and backward
 * passes of a step's micro-batches (herd_pp_schedule_kind, herd.h, whose names and
 * parser live in pp_schedule.c). A pure function of (kind, stages, micro-batches,
 * stage), so every rank derives its own list, tests check all lists together without
 * MPI, and herd bench pipeline, herd predict and training share one definition.
 *
 * A stage's activation for micro-batch k arrives from stage s-1 before FWD(k) (stage
 * 0 reads the data) and leaves for s+1 after it; the gradient of its output arrives
 * from s+1 before BWD(k) (the last stage has the loss) and the gradient of its input
 * leaves for s-1 after it. Backward passes run in micro-batch order on every stage,
 * so gradients accumulate in the order of one process accumulating the same
 * micro-batches: the sums are bitwise the same.
 */
#ifndef HERD_DIST_PP_SCHEDULE_H
#define HERD_DIST_PP_SCHEDULE_H

#include "herd/herd.h"

typedef enum herd_pp_op { HERD_PP_FWD = 0, HERD_PP_BWD } herd_pp_op;

typedef struct herd_pp_action {
    herd_pp_op op;
    int mb; /* micro-batch, 0..n-1 */
} herd_pp_action;

/* Stage `stage` of `stages` with n micro-batches: 2n actions into out (capacity 2n).
 * HERD_ERR_INVALID_ARG for an unknown kind, stages < 1, n < 1 or a stage outside
 * 0..stages-1. */
herd_status herd_pp_schedule(herd_pp_schedule_kind kind, int stages, int n, int stage, herd_pp_action *out);

/* The most micro-batches whose activations stage `stage` holds at once (forward done,
 * backward not): min(n, stages - stage) for 1F1B, n for GPipe. */
int herd_pp_max_in_flight(herd_pp_schedule_kind kind, int stages, int n, int stage);

/* The ideal bubble: the share of a step a stage idles when every forward takes the
 * same time and every backward too, (P-1)/(n+P-1). */
double herd_pp_ideal_bubble(int stages, int n);

#endif
