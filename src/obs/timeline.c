/* The --timeline trace: recording (lock-free, one writer per buffer), clock offsets,
 * merging on rank 0 and the Chrome trace-event JSON (written with cJSON). */
#include "obs/timeline.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"

/* Ping-pongs per rank and measurement; the shortest decides, so a few suffice. */
#define CLOCK_ROUNDS 8
/* Buffers start with room for this many steps (they double when full). */
#define STEPS_PER_BUFFER 64
/* Tracks merged at each flush: compute, communication, then the groups'. */
#define TRACKS (2 + HERD_TL_GROUPS)

typedef struct tl_buffer {
    herd_tl_event *ev;
    size_t n, cap;
    long dropped; /* events lost because the buffer could not grow */
} tl_buffer;

/* A group communicator followed: its thread alone writes `track`. */
typedef struct tl_group {
    herd_timeline *tl;
    herd_comm *comm;
    herd_trace_sink sink; /* ctx: this group */
    tl_buffer track;
    uint8_t number;       /* herd_tl_event.group: 1 + its index */
} tl_group;

struct herd_timeline {
    herd_comm *comm;
    herd_trace_sink sink; /* ctx: this timeline */
    FILE *out;            /* rank 0 */
    char *path;
    tl_buffer compute;    /* written by the training thread only */
    tl_buffer comm_track; /* written by the communication thread only */
    tl_group groups[HERD_TL_GROUPS];
    int n_groups;
    int epoch;
    _Atomic long step;    /* read by the communication thread for its events */
    /* rank 0 */
    double origin;        /* ts 0 */
    double sync_prev, sync_now;
    double *offset_first, *offset_prev, *offset_now; /* per rank, seconds */
    double *rtt; /* per rank: the longest of the round trips that decided an offset */
    long written;
    bool headed;  /* the header is in the file: a failure can still finish it */
    long dropped; /* over all ranks so far */
    /* Scratch of the flush's collectives, allocated at open: a rank failing to allocate
     * right before a collective would leave the others waiting in it. */
    double *clock_samples; /* CLOCK_ROUNDS * 4 per rank */
    int64_t *counts;       /* 2 * TRACKS per rank */
    size_t *bytes_of;      /* 1 per rank */
};

static const struct {
    const char *name, *cat;
    int tid;
} kinds[HERD_TL_KINDS] = {
    [HERD_TL_STEP] = {"step", "step", 0},
    [HERD_TL_DATA_WAIT] = {"data_wait", "phase", 0},
    [HERD_TL_FORWARD] = {"forward", "phase", 0},
    [HERD_TL_BACKWARD] = {"backward", "phase", 0},
    [HERD_TL_COMM_WAIT] = {"comm_wait", "phase", 0},
    [HERD_TL_OPTIMIZER] = {"optimizer", "phase", 0},
    [HERD_TL_FWD_LAYER] = {"fwd ", "layer", 0},
    [HERD_TL_BWD_LAYER] = {"bwd ", "layer", 0},
    [HERD_TL_ALLREDUCE] = {"", "comm", 1}, /* the communicator names it: "allreduce bucket 3" */
    [HERD_TL_CHECKPOINT] = {"checkpoint", "io", 0},
    [HERD_TL_EVALUATE] = {"evaluate", "eval", 0},
    [HERD_TL_RECOMPUTE_LAYER] = {"recompute ", "layer", 0},
};

/* ------------------------------------------------------------ recording */

/* The next free record, growing the buffer when full (rare: it is sized for many
 * steps and emptied at every flush); NULL when memory ran out. */
static herd_tl_event *next_slot(tl_buffer *b)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 1024;
        herd_tl_event *grown = realloc(b->ev, cap * sizeof *grown);
        if (!grown) {
            b->dropped++;
            return NULL;
        }
        b->ev = grown;
        b->cap = cap;
    }
    return &b->ev[b->n++];
}

static void copy_label(char *dst, size_t cap, const char *src)
{
    size_t i = 0;
    for (; src && src[i] && i + 1 < cap; i++)
        dst[i] = src[i];
    dst[i] = '\0';
}

void herd_timeline_begin_step(herd_timeline *tl, int epoch, long step)
{
    tl->epoch = epoch;
    atomic_store_explicit(&tl->step, step, memory_order_relaxed);
}

void herd_timeline_add(herd_timeline *tl, herd_tl_kind kind, const char *label, double t0,
                       double t1)
{
    herd_tl_event *e = next_slot(&tl->compute);
    if (!e)
        return;
    e->t0 = t0;
    e->t1 = t1;
    e->queued = 0;
    e->a = tl->epoch;
    e->b = atomic_load_explicit(&tl->step, memory_order_relaxed);
    e->kind = (uint8_t)kind;
    e->group = 0;
    copy_label(e->label, sizeof e->label, label);
}

static void record_comm(herd_timeline *tl, tl_buffer *track, uint8_t group, const char *tag,
                        double launched, double t0, double t1, size_t bytes)
{
    herd_tl_event *e = next_slot(track);
    if (!e)
        return;
    e->group = group;
    e->t0 = t0;
    e->t1 = t1;
    e->queued = launched > 0 && launched < t0 ? t0 - launched : 0;
    e->a = (int64_t)bytes;
    e->b = atomic_load_explicit(&tl->step, memory_order_relaxed);
    e->kind = HERD_TL_ALLREDUCE;
    copy_label(e->label, sizeof e->label, tag);
}

void herd_timeline_comm(herd_timeline *tl, const char *tag, double launched, double t0,
                        double t1, size_t bytes)
{
    record_comm(tl, &tl->comm_track, 0, tag, launched, t0, t1, bytes);
}

static void sink_complete(void *tl, herd_tl_kind kind, const char *label, double t0, double t1)
{
    herd_timeline_add(tl, kind, label, t0, t1);
}

static void sink_comm(void *tl, const char *tag, double launched, double t0, double t1,
                      size_t bytes)
{
    herd_timeline_comm(tl, tag, launched, t0, t1, bytes);
}

const herd_trace_sink *herd_timeline_sink(herd_timeline *tl) { return tl ? &tl->sink : NULL; }

/* A group's communication thread: only collectives reach it (never the training
 * thread's events, which go through the timeline's own sink). */
static void group_complete(void *g, herd_tl_kind kind, const char *label, double t0, double t1)
{
    (void)g, (void)kind, (void)label, (void)t0, (void)t1;
}

static void group_comm(void *ctx, const char *tag, double launched, double t0, double t1,
                       size_t bytes)
{
    tl_group *g = ctx;
    record_comm(g->tl, &g->track, g->number, tag, launched, t0, t1, bytes);
}

static void emit_metadata(FILE *f, const char *what, int pid, int tid, const char *key,
                          const char *text, double number, long *written);

herd_status herd_timeline_add_group(herd_timeline *tl, herd_comm *group, const char *name)
{
    if (!tl || !group || !name)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_timeline_add_group: NULL argument");
    if (tl->n_groups == HERD_TL_GROUPS)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "the timeline follows at most %d group "
                        "communicators; '%s' is one more", HERD_TL_GROUPS, name);
    tl_group *g = &tl->groups[tl->n_groups++];
    g->tl = tl;
    g->comm = group;
    g->number = (uint8_t)tl->n_groups;
    g->sink = (herd_trace_sink){.ctx = g, .complete = group_complete, .comm = group_comm};
    if (tl->out)
        for (int r = 0; r < tl->comm->size; r++)
            emit_metadata(tl->out, "thread_name", r, 1 + g->number, "name", name, 0, &tl->written);
    herd_comm_set_trace(group, &g->sink);
    return HERD_OK;
}

/* --------------------------------------------------------------- clocks */

void herd_clock_offset(const double *rounds, int n, double *offset, double *rtt)
{
    *offset = 0;
    *rtt = INFINITY;
    for (int i = 0; i < n; i++) {
        const double *r = rounds + 4 * i;
        double trip = (r[3] - r[0]) - (r[2] - r[1]);
        if (trip < *rtt) {
            *rtt = trip;
            *offset = ((r[1] - r[0]) + (r[2] - r[3])) / 2;
        }
    }
}

double herd_clock_map_apply(const herd_clock_map *m, double t)
{
    double span = m->until - m->since;
    if (!(span > 0) || t - m->offset_since <= m->since)
        return t - m->offset_since;
    if (t - m->offset_until >= m->until)
        return t - m->offset_until;
    /* Solves t0 = t - offset(t0) with the offset linear in rank-0 time t0. */
    double k = (m->offset_until - m->offset_since) / span;
    return (t - m->offset_since + k * m->since) / (1 + k);
}

/* Collective: a new offset measurement for every rank (kept on rank 0). */
static herd_status measure_clocks(herd_timeline *tl)
{
    herd_comm *c = tl->comm;
    double *samples = tl->clock_samples;
    herd_status st = c->ops->clock_samples(c, CLOCK_ROUNDS, samples);
    if (st == HERD_OK && c->rank == 0) {
        tl->sync_prev = tl->sync_now;
        memcpy(tl->offset_prev, tl->offset_now, (size_t)c->size * sizeof(double));
        tl->sync_now = herd_now();
        for (int r = 1; r < c->size; r++) {
            double rtt;
            herd_clock_offset(samples + (size_t)r * CLOCK_ROUNDS * 4, CLOCK_ROUNDS,
                              &tl->offset_now[r], &rtt);
            tl->rtt[r] = rtt > tl->rtt[r] ? rtt : tl->rtt[r];
        }
    }
    return st;
}

/* ----------------------------------------------------------------- JSON */

/* Prints one cJSON object as an element of the traceEvents array, then frees it. */
static void emit(FILE *f, cJSON *o, long *written)
{
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    if (text) {
        fputs(*written > 0 ? ",\n" : "\n", f);
        fputs(text, f);
        ++*written;
    }
    cJSON_free(text);
    cJSON_Delete(o);
}

static double micros(double s) { return round(s * 1e9) / 1e3; } /* ns resolution */

void herd_timeline_write_events(FILE *f, const herd_tl_event *ev, size_t n, int pid,
                                const herd_clock_map *map, double origin, long *written)
{
    for (size_t i = 0; i < n; i++) {
        const herd_tl_event *e = &ev[i];
        if (e->kind >= HERD_TL_KINDS)
            continue;
        char name[64];
        snprintf(name, sizeof name, "%s%s", kinds[e->kind].name, e->label);
        double t0 = herd_clock_map_apply(map, e->t0), t1 = herd_clock_map_apply(map, e->t1);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "ph", "X");
        cJSON_AddStringToObject(o, "name", name);
        cJSON_AddStringToObject(o, "cat", kinds[e->kind].cat);
        cJSON_AddNumberToObject(o, "ts", micros(t0 - origin));
        cJSON_AddNumberToObject(o, "dur", micros(t1 > t0 ? t1 - t0 : 0));
        cJSON_AddNumberToObject(o, "pid", pid);
        cJSON_AddNumberToObject(o, "tid", e->group ? 1 + e->group : kinds[e->kind].tid);
        cJSON *args = cJSON_AddObjectToObject(o, "args");
        if (e->kind == HERD_TL_STEP) {
            cJSON_AddNumberToObject(args, "epoch", (double)e->a);
            cJSON_AddNumberToObject(args, "step", (double)e->b);
        } else if (e->kind == HERD_TL_ALLREDUCE) {
            cJSON_AddNumberToObject(args, "bytes", (double)e->a);
            cJSON_AddNumberToObject(args, "step", (double)e->b);
            /* On rank 0's clock like ts, so ts - queued_us is the launch there too. */
            double launched = herd_clock_map_apply(map, e->t0 - e->queued);
            cJSON_AddNumberToObject(args, "queued_us", micros(t0 - launched));
        }
        emit(f, o, written);
    }
}

static void emit_metadata(FILE *f, const char *what, int pid, int tid, const char *key,
                          const char *text, double number, long *written)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "ph", "M");
    cJSON_AddStringToObject(o, "name", what);
    cJSON_AddNumberToObject(o, "pid", pid);
    cJSON_AddNumberToObject(o, "tid", tid);
    cJSON *args = cJSON_AddObjectToObject(o, "args");
    if (text)
        cJSON_AddStringToObject(args, key, text);
    else
        cJSON_AddNumberToObject(args, key, number);
    emit(f, o, written);
}

/* Rank 0: the opening of the file and one process (track group) per rank. */
static void write_header(herd_timeline *tl, const char *hosts)
{
    FILE *f = tl->out;
    fputs("{\"traceEvents\":[", f);
    for (int r = 0; r < tl->comm->size; r++) {
        char name[96];
        snprintf(name, sizeof name, "rank %d (%s)", r, hosts + (size_t)r * sizeof tl->comm->host);
        emit_metadata(f, "process_name", r, 0, "name", name, 0, &tl->written);
        emit_metadata(f, "process_sort_index", r, 0, "sort_index", NULL, r, &tl->written);
        emit_metadata(f, "thread_name", r, 0, "name", "compute", 0, &tl->written);
        emit_metadata(f, "thread_name", r, 1, "name", "communication", 0, &tl->written);
    }
    tl->headed = true;
}

static cJSON *micros_array(const double *s, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(micros(s[i])));
    return a;
}

/* Rank 0: closes the array and adds what a reader needs to judge the merge; after a
 * failure (complete false) it says the other ranks' last events are missing. */
static void write_trailer(herd_timeline *tl, bool complete)
{
    int n = tl->comm->size;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "herd_version", HERD_VERSION);
    if (!complete)
        cJSON_AddStringToObject(o, "ended", n > 1 ? "by a failure: the other ranks' events since "
                                "the last flush (epoch end) are not in the file"
                                                  : "by a failure");
    cJSON_AddNumberToObject(o, "ranks", n);
    cJSON_AddItemToObject(o, "clock_offsets_us", micros_array(tl->offset_first, n));
    cJSON_AddItemToObject(o, "clock_offsets_end_us", micros_array(tl->offset_now, n));
    cJSON_AddItemToObject(o, "clock_rtt_us", micros_array(tl->rtt, n));
    cJSON_AddNumberToObject(o, "dropped_events", (double)tl->dropped);
    char *text = cJSON_PrintUnformatted(o);
    fprintf(tl->out, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":%s}\n", text ? text : "{}");
    cJSON_free(text);
    cJSON_Delete(o);
}

/* ------------------------------------------------------------- lifecycle */

/* Stops the communicators recording into tl. */
static void detach(herd_timeline *tl)
{
    if (tl->comm->trace == &tl->sink)
        herd_comm_set_trace(tl->comm, NULL);
    for (int i = 0; i < tl->n_groups; i++)
        if (tl->groups[i].comm->trace == &tl->groups[i].sink)
            herd_comm_set_trace(tl->groups[i].comm, NULL);
}

void herd_timeline_free(herd_timeline *tl)
{
    if (!tl)
        return;
    /* After a failure the communication threads may still record. */
    if (tl->comm->trace == &tl->sink)
        (void)tl->comm->ops->wait_all(tl->comm);
    for (int i = 0; i < tl->n_groups; i++)
        if (tl->groups[i].comm->trace == &tl->groups[i].sink)
            (void)tl->groups[i].comm->ops->wait_all(tl->groups[i].comm);
    detach(tl);
    if (tl->out && tl->headed) { /* rank 0 after a failure: its own last events, a valid file */
        herd_clock_map map = {tl->sync_prev, tl->sync_now, tl->offset_prev[0], tl->offset_now[0]};
        tl_buffer *own[TRACKS] = {&tl->compute, &tl->comm_track};
        int n_tracks = 2;
        for (int i = 0; i < tl->n_groups; i++)
            own[n_tracks++] = &tl->groups[i].track;
        for (int t = 0; t < n_tracks; t++)
            if (own[t]->n > 0)
                herd_timeline_write_events(tl->out, own[t]->ev, own[t]->n, 0, &map, tl->origin,
                                           &tl->written);
        write_trailer(tl, false);
    }
    if (tl->out)
        fclose(tl->out);
    free(tl->path);
    free(tl->compute.ev);
    free(tl->comm_track.ev);
    for (int i = 0; i < tl->n_groups; i++)
        free(tl->groups[i].track.ev);
    free(tl->offset_first);
    free(tl->offset_prev);
    free(tl->offset_now);
    free(tl->rtt);
    free(tl->clock_samples);
    free(tl->counts);
    free(tl->bytes_of);
    free(tl);
}

/* Every rank's outcome combined, so that all fail (or not) together. A rank that
 * failed keeps its own error; the others get rank 0's message when rank 0 failed (it
 * writes the file), otherwise that of the one rank that failed, or a count. */
static herd_status agree(herd_timeline *tl, herd_status st)
{
    herd_comm *c = tl->comm;
    if (c->size == 1)
        return st;
    bool failed = st != HERD_OK;
    /* failed ranks, their statuses and numbers summed (exact for one), rank 0's status */
    double v[4] = {failed, failed ? st : 0, failed ? c->rank : 0, c->rank == 0 ? st : 0};
    HERD_TRY(c->ops->allreduce_f64(c, v, 4));
    if (v[0] == 0)
        return HERD_OK;
    int teller = v[3] != HERD_OK ? 0 : v[0] == 1 ? (int)v[2] : -1;
    herd_status status = (herd_status)(v[3] != HERD_OK ? v[3] : v[1]);
    char msg[512] = "";
    herd_status told = HERD_OK;
    if (teller >= 0) {
        if (c->rank == teller)
            snprintf(msg, sizeof msg, "%s", herd_last_error());
        told = c->ops->broadcast(c, msg, sizeof msg, teller);
    }
    if (failed)
        return st;
    if (told != HERD_OK)
        return told;
    if (teller < 0)
        return HERD_ERR(HERD_ERR_INTERNAL, "the timeline failed on %d ranks; see their errors",
                        (int)v[0]);
    return HERD_ERR(status, "rank %d failed: %s", teller, msg);
}

static herd_status open_all(herd_timeline *tl, const char *path, size_t events_per_step)
{
    herd_comm *c = tl->comm;
    size_t n = (size_t)c->size;
    tl->path = strdup(path);
    tl->offset_first = herd_xcalloc(n, sizeof(double));
    tl->offset_prev = herd_xcalloc(n, sizeof(double));
    tl->offset_now = herd_xcalloc(n, sizeof(double));
    tl->rtt = herd_xcalloc(n, sizeof(double));
    tl->clock_samples = herd_xcalloc(n * CLOCK_ROUNDS * 4, sizeof(double));
    tl->counts = herd_xcalloc(n * 2 * TRACKS, sizeof(int64_t));
    tl->bytes_of = herd_xcalloc(n, sizeof(size_t));
    char *hosts = herd_xcalloc(n, sizeof c->host);
    size_t cap = (events_per_step ? events_per_step : 16) * STEPS_PER_BUFFER;
    tl->compute.ev = herd_xcalloc(cap, sizeof(herd_tl_event));
    tl->compute.cap = cap;
    tl->comm_track.ev = herd_xcalloc(cap / 4 + 16, sizeof(herd_tl_event));
    tl->comm_track.cap = cap / 4 + 16;
    herd_status st = HERD_OK;
    if (!tl->path || !tl->offset_first || !tl->offset_prev || !tl->offset_now || !tl->rtt ||
        !tl->clock_samples || !tl->counts || !tl->bytes_of || !hosts || !tl->compute.ev ||
        !tl->comm_track.ev)
        st = HERD_ERR_NOMEM;
    if (st == HERD_OK && c->rank == 0 && !(tl->out = fopen(path, "w")))
        st = HERD_ERR(HERD_ERR_IO, "cannot create the timeline '%s': %s; check the directory "
                      "exists and is writable", path, strerror(errno));
    /* Every rank learns whether any failed before the collectives below. */
    herd_status agreed = agree(tl, st);
    st = st != HERD_OK ? st : agreed;
    if (st == HERD_OK)
        st = c->ops->allgather(c, c->host, hosts, sizeof c->host);
    /* ts 0 before the exchange: a rank it releases early may record at once. */
    tl->origin = herd_now();
    if (st == HERD_OK)
        st = measure_clocks(tl);
    if (st == HERD_OK && c->rank == 0) {
        tl->sync_prev = tl->sync_now;
        memcpy(tl->offset_first, tl->offset_now, n * sizeof(double));
        memcpy(tl->offset_prev, tl->offset_now, n * sizeof(double));
        write_header(tl, hosts);
    }
    free(hosts);
    return st;
}

herd_status herd_timeline_open(const char *path, herd_comm *comm, size_t events_per_step,
                               herd_timeline **out)
{
    *out = NULL;
    if (!path || !*path || !comm)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "the timeline needs a file name and a communicator");
    herd_timeline *tl = herd_xcalloc(1, sizeof *tl);
    if (!tl)
        return HERD_ERR_NOMEM;
    tl->comm = comm;
    tl->sink = (herd_trace_sink){.ctx = tl, .complete = sink_complete, .comm = sink_comm};
    herd_status st = open_all(tl, path, events_per_step);
    if (st != HERD_OK) {
        herd_timeline_free(tl);
        return st;
    }
    herd_comm_set_trace(comm, &tl->sink);
    *out = tl;
    return HERD_OK;
}

/* Collective: one track's events of every rank onto rank 0, then into the file.
 * n_of[stride * r] is rank r's number of events. */
static herd_status merge_track(herd_timeline *tl, tl_buffer *b, const int64_t *n_of, int stride)
{
    herd_comm *c = tl->comm;
    size_t *bytes_of = tl->bytes_of, total = 0;
    herd_tl_event *all = NULL;
    herd_status st = HERD_OK;
    for (int r = 0; r < c->size; r++)
        total += bytes_of[r] = (size_t)n_of[stride * r] * sizeof(herd_tl_event);
    if (c->rank == 0 && total && !(all = malloc(total)))
        st = HERD_NOMEM(total);
    /* MPI's gather cannot shrink once started: all ranks first learn that rank 0 has room. */
    herd_status agreed = agree(tl, st);
    st = st != HERD_OK ? st : agreed;
    if (st == HERD_OK)
        st = c->ops->gather(c, b->ev, b->n * sizeof(herd_tl_event), all, bytes_of, 0);
    if (st == HERD_OK && c->rank == 0) {
        size_t at = 0;
        for (int r = 0; r < c->size; r++) {
            herd_clock_map map = {tl->sync_prev, tl->sync_now, tl->offset_prev[r], tl->offset_now[r]};
            size_t n = (size_t)n_of[stride * r];
            if (n > 0) /* none at all: `all` is NULL, and NULL + 0 is undefined */
                herd_timeline_write_events(tl->out, all + at, n, r, &map, tl->origin, &tl->written);
            at += n;
        }
    }
    free(all);
    b->n = 0;
    return st;
}

herd_status herd_timeline_flush(herd_timeline *tl)
{
    herd_comm *c = tl->comm;
    HERD_TRY(measure_clocks(tl));
    /* Every rank follows the same groups (herd_timeline_add_group), so the tracks match. */
    tl_buffer *tracks[TRACKS] = {&tl->compute, &tl->comm_track};
    int n_tracks = 2;
    for (int i = 0; i < tl->n_groups; i++)
        tracks[n_tracks++] = &tl->groups[i].track;
    int64_t mine[2 * TRACKS] = {0}; /* each track's events, then each one's dropped */
    for (int t = 0; t < n_tracks; t++) {
        mine[t] = (int64_t)tracks[t]->n;
        mine[TRACKS + t] = tracks[t]->dropped;
    }
    int64_t *counts = tl->counts;
    herd_status st = c->ops->allgather(c, mine, counts, sizeof mine);
    for (int t = 0; st == HERD_OK && t < n_tracks; t++)
        st = merge_track(tl, tracks[t], counts + t, 2 * TRACKS);
    long dropped = 0;
    for (int r = 0; st == HERD_OK && r < c->size; r++)
        for (int t = 0; t < n_tracks; t++)
            dropped += (long)counts[2 * TRACKS * r + TRACKS + t];
    for (int t = 0; t < n_tracks; t++)
        tracks[t]->dropped = 0;
    tl->dropped += dropped;
    if (tl->out)
        fflush(tl->out); /* a reader (or a crash) sees whole epochs */
    HERD_TRY(st);
    if (dropped > 0)
        return HERD_ERR(HERD_ERR_NOMEM, "the timeline lost %ld events: out of memory for its "
                        "buffers; trace a shorter run or free memory", dropped);
    return HERD_OK;
}

herd_status herd_timeline_close(herd_timeline *tl)
{
    herd_status st = herd_timeline_flush(tl);
    detach(tl); /* nothing is pending: the last reductions are in the file */
    herd_status wrote = HERD_OK;
    if (tl->out) {
        write_trailer(tl, true);
        bool failed = ferror(tl->out) != 0;
        failed |= fclose(tl->out) != 0;
        tl->out = NULL;
        if (failed)
            wrote = HERD_ERR(HERD_ERR_IO, "cannot write the timeline '%s': %s", tl->path,
                             strerror(errno));
    }
    herd_status agreed = agree(tl, wrote);
    herd_timeline_free(tl);
    return st != HERD_OK ? st : agreed;
}
