/*
 * --timeline: a Chrome trace-event JSON file (Perfetto, chrome://tracing) of what
 * every rank did, step by step. Each rank records fixed-size events into buffers of
 * its own — one written only by the training thread (steps, phases, layers,
 * checkpoint, evaluation), one only by the communication thread (reductions), one by
 * each group communicator's thread it follows (herd_timeline_add_group) — so
 * recording takes no lock and formats nothing. At every flush (each epoch and at the
 * end, collectively) the events travel to rank 0, which maps them onto its own clock
 * with offsets measured by ping-pong and appends them to the file.
 *
 * The file: {"traceEvents":[...],"displayTimeUnit":"ms","otherData":{...}}; see
 * docs/observability.md ("Timeline") for every event and field.
 */
#ifndef HERD_OBS_TIMELINE_H
#define HERD_OBS_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/trace.h"
#include "dist/comm.h"

typedef struct herd_timeline herd_timeline;

/* One recorded event. Plain bytes (no pointers): it travels to rank 0 as it is. */
typedef struct herd_tl_event {
    double t0, t1;  /* herd_now() of the recording rank */
    double queued;  /* allreduce: seconds between launch by backward and its start */
    int64_t a, b;   /* step: epoch, step; allreduce: bytes on the wire, step */
    uint8_t kind;   /* herd_tl_kind */
    uint8_t group;  /* a group communicator's collective: 1 + its index, else 0 */
    char label[38]; /* layer name (after the kind's prefix) or the collective's name */
} herd_tl_event;

/* Group communicators a timeline can follow besides its own (tensor group, data group). */
#define HERD_TL_GROUPS 2

/* Collective: rank 0 creates `path` and every rank measures its clock against rank
 * 0's; then comm records its reductions into the trace (herd_comm_set_trace with
 * the timeline's sink) until close or free. events_per_step sizes the buffers (they
 * grow if needed). */
herd_status herd_timeline_open(const char *path, herd_comm *comm, size_t events_per_step,
                               herd_timeline **out);
/* Collective: moves every rank's events into the file and re-measures the clocks
 * (drift between two measurements is corrected linearly). Call with no reduction
 * pending. Fails on every rank when some rank lost events (out of memory). */
herd_status herd_timeline_flush(herd_timeline *tl);
/* Collective: flushes, finishes the file and frees tl; every rank gets rank 0's
 * outcome of writing the file. */
herd_status herd_timeline_close(herd_timeline *tl);
/* Frees tl after a failure, without a collective: first waits out the communicator's
 * pending reductions, which may still record. Rank 0 finishes the file with its own
 * events since the last flush and a trailer that says the run failed (otherData's
 * "ended"), so the trace up to the failure reads as one. */
void herd_timeline_free(herd_timeline *tl);

/* Follows a group communicator too (tensor parallelism's tensor group, the data group of
 * replicas that tensor parallelism or pipeline stages reduce over): its collectives go on a
 * track of their own, named `name`, beside the communication thread's. Every rank adds the
 * same groups in the same order, before the first step; the group's collectives then run
 * on its own thread, which alone writes that track. At most HERD_TL_GROUPS. */
herd_status herd_timeline_add_group(herd_timeline *tl, herd_comm *group, const char *name);

/* The timeline as a trace sink, for the model's run context (herd_run_ctx.trace):
 * its calls are herd_timeline_add and herd_timeline_comm. NULL for a NULL tl. */
const herd_trace_sink *herd_timeline_sink(herd_timeline *tl);

/* Training thread: the step the next events belong to (epoch and step 1-based). */
void herd_timeline_begin_step(herd_timeline *tl, int epoch, long step);
/* Training thread: an event of any kind but HERD_TL_ALLREDUCE. label: the layer
 * name for layer events, otherwise NULL. */
void herd_timeline_add(herd_timeline *tl, herd_tl_kind kind, const char *label, double t0,
                       double t1);
/* Communication thread: a collective named `tag` ("allreduce bucket 3",
 * "all-gather bucket 0") launched at `launched`, run from t0 to t1. */
void herd_timeline_comm(herd_timeline *tl, const char *tag, double launched, double t0,
                        double t1, size_t bytes);

/* ---- the parts below are exposed for the unit tests ---- */

/* NTP-style offset of a peer's clock to ours from ping-pong rounds, each
 * {our send, their receive, their reply, our receive}: the round with the shortest
 * round trip decides (its one-way delays are the most nearly equal). Returns the
 * offset (their clock minus ours) and that round trip, in seconds. */
void herd_clock_offset(const double *rounds, int n, double *offset, double *rtt);

/* A rank's clock offsets at two measurements (rank 0 times `since` and `until`);
 * drift in between is taken as linear. */
typedef struct herd_clock_map {
    double since, until;
    double offset_since, offset_until;
} herd_clock_map;

/* The rank-0 time of that rank's clock reading t. */
double herd_clock_map_apply(const herd_clock_map *m, double t);

/* Writes events of rank `pid` as trace-event objects, ts in µs since rank 0's
 * `origin`; *written counts objects already in the array (for the commas). */
void herd_timeline_write_events(FILE *f, const herd_tl_event *ev, size_t n, int pid,
                                const herd_clock_map *map, double origin, long *written);

#endif
