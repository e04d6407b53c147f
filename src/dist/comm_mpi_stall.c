/*
 * The stall inspector. Every rank's communication thread keeps running whatever
 * its compute threads do, so it can always say what its rank is doing. While a
 * collective is pending, ranks send their status (activity, collectives started
 * and completed) to rank 0 on a communicator of their own, about once a second
 * and whenever rank 0 asks. Rank 0 compares sequence numbers to name the ranks
 * that have not arrived and answers each waiting rank with that list. Whichever
 * rank waits warns once per collective after stall_warning_s and ends the job
 * after timeout_s, naming the missing ranks: rank 0's list, or rank 0 itself when
 * it has stopped answering (stopped, hung or unreachable). Messages go through
 * the caller's log function (core/log.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"
#include "dist/comm_mpi_internal.h"

#define TAG_STATUS 1
#define TAG_REQUEST 2
#define TAG_VIEW 3
#define POLL_PERIOD_S 0.05
#define STATUS_PERIOD_S 1.0
/* Rank 0 answers a waiting rank's status within a poll; silence this long means
 * its communication thread is not running. */
#define SILENT_AFTER_S (3 * STATUS_PERIOD_S)

int comm_mpi_stall_init(comm_mpi *m)
{
    mpi_stall *s = &m->stall;
    int size = m->c->size;
    s->send_req = MPI_REQUEST_NULL;
    if (m->c->rank != 0)
        return 0;
    s->table = calloc((size_t)size, sizeof *s->table);
    s->received_at = calloc((size_t)size, sizeof *s->received_at);
    s->request_reqs = malloc((size_t)size * sizeof *s->request_reqs);
    s->request_bytes = calloc((size_t)size, 1);
    s->views_out = calloc((size_t)size, sizeof *s->views_out);
    s->view_reqs = malloc((size_t)size * sizeof *s->view_reqs);
    if (!s->table || !s->received_at || !s->request_reqs || !s->request_bytes || !s->views_out ||
        !s->view_reqs)
        return -1;
    for (int r = 0; r < size; r++)
        s->request_reqs[r] = s->view_reqs[r] = MPI_REQUEST_NULL;
    return 0;
}

void comm_mpi_stall_free(comm_mpi *m)
{
    mpi_stall *s = &m->stall;
    free(s->table);
    free(s->received_at);
    free(s->request_reqs);
    free(s->request_bytes);
    free(s->views_out);
    free(s->view_reqs);
    memset(s, 0, sizeof *s);
}

static void fill_status(comm_mpi *m, mpi_rank_status *st, double now)
{
    memset(st, 0, sizeof *st);
    st->rank = m->c->rank;
    st->started = m->started;
    st->completed = m->current ? m->current->seq - 1 : m->started;
    st->pending = m->current != NULL;
    if (m->current) {
        st->pending_age_s = now - m->current_start;
        comm_mpi_describe_op(m->current, st->pending_desc, sizeof st->pending_desc);
    }
    snprintf(st->host, sizeof st->host, "%s", m->c->host);
    pthread_mutex_lock(&m->mu);
    snprintf(st->activity, sizeof st->activity, "%s", m->activity);
    st->activity_age_s = m->activity_time > 0 ? now - m->activity_time : -1;
    pthread_mutex_unlock(&m->mu);
}

static bool request_done(MPI_Request *req)
{
    int done = 1;
    if (*req != MPI_REQUEST_NULL)
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
    return done;
}

static void send_status(comm_mpi *m, double now)
{
    mpi_stall *s = &m->stall;
    if (!request_done(&s->send_req))
        return; /* the previous status is still on its way */
    fill_status(m, &s->out, now);
    if (MPI_Isend(&s->out, sizeof s->out, MPI_BYTE, 0, TAG_STATUS, m->stall_comm, &s->send_req) ==
        MPI_SUCCESS)
        s->last_sent = now;
}

/* Rank != 0: true when rank 0 asked for a status since the last poll. */
static bool asked_for_status(comm_mpi *m)
{
    bool asked = false;
    for (;;) {
        int flag = 0;
        MPI_Iprobe(0, TAG_REQUEST, m->stall_comm, &flag, MPI_STATUS_IGNORE);
        if (!flag)
            return asked;
        MPI_Recv(&m->stall.req_byte, 1, MPI_BYTE, 0, TAG_REQUEST, m->stall_comm, MPI_STATUS_IGNORE);
        asked = true;
    }
}

/* "2 (last: 'epoch 1 step 119: forward' 61 s ago), 3 (...)": the ranks that have
 * not started collective seq, as rank 0 last heard. */
static void describe_missing(comm_mpi *m, uint64_t seq, double now, char *out, size_t cap)
{
    mpi_stall *s = &m->stall;
    size_t used = 0;
    out[0] = '\0';
    for (int r = 0; r < m->c->size && used + 1 < cap; r++) {
        const mpi_rank_status *st = &s->table[r];
        const char *sep = used ? ", " : "";
        int w;
        if (r != 0 && s->received_at[r] == 0)
            w = snprintf(out + used, cap - used, "%s%d (no status received)", sep, r);
        else if (st->started >= seq)
            continue;
        else if (st->activity_age_s < 0)
            w = snprintf(out + used, cap - used, "%s%d on %s (no activity recorded)", sep, r, st->host);
        else
            w = snprintf(out + used, cap - used, "%s%d on %s (last: '%s' %.0f s ago)", sep, r,
                         st->host, st->activity,
                         st->activity_age_s + (r ? now - s->received_at[r] : 0));
        used = w > 0 && (size_t)w < cap - used ? used + (size_t)w : cap - 1;
    }
    if (!out[0])
        snprintf(out, cap, "none known (statuses may lag by a second)");
}

static void receive_statuses(comm_mpi *m, double now)
{
    mpi_stall *s = &m->stall;
    for (;;) {
        int flag = 0;
        MPI_Status probe;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_STATUS, m->stall_comm, &flag, &probe);
        if (!flag)
            return;
        mpi_rank_status st;
        MPI_Recv(&st, sizeof st, MPI_BYTE, probe.MPI_SOURCE, TAG_STATUS, m->stall_comm,
                 MPI_STATUS_IGNORE);
        st.activity[sizeof st.activity - 1] = '\0';
        st.pending_desc[sizeof st.pending_desc - 1] = '\0';
        st.host[sizeof st.host - 1] = '\0';
        int r = probe.MPI_SOURCE;
        s->table[r] = st;
        s->received_at[r] = now;
        if (st.pending && request_done(&s->view_reqs[r])) { /* tell it whom it waits for */
            mpi_rank_view *v = &s->views_out[r];
            v->seq = st.started;
            describe_missing(m, v->seq, now, v->missing, sizeof v->missing);
            MPI_Isend(v, sizeof *v, MPI_BYTE, r, TAG_VIEW, m->stall_comm, &s->view_reqs[r]);
        }
    }
}

static void request_statuses(comm_mpi *m, double now)
{
    mpi_stall *s = &m->stall;
    for (int r = 1; r < m->c->size; r++)
        if (request_done(&s->request_reqs[r]))
            MPI_Isend(&s->request_bytes[r], 1, MPI_BYTE, r, TAG_REQUEST, m->stall_comm,
                      &s->request_reqs[r]);
    s->last_request = now;
}

/* Rank 0: the collective to judge — its own pending one, or else the oldest one
 * another rank reports pending that rank 0 has not started. */
static bool oldest_pending(comm_mpi *m, double now, uint64_t *seq, double *age, char *desc,
                           size_t cap, int *on_rank)
{
    mpi_stall *s = &m->stall;
    if (m->current) {
        *seq = m->current->seq;
        *age = now - m->current_start;
        *on_rank = 0;
        comm_mpi_describe_op(m->current, desc, cap);
        return true;
    }
    bool found = false;
    for (int r = 1; r < m->c->size; r++) {
        const mpi_rank_status *st = &s->table[r];
        if (s->received_at[r] == 0 || !st->pending || st->started <= m->started)
            continue;
        double a = st->pending_age_s + now - s->received_at[r];
        if (!found || a > *age) {
            found = true;
            *seq = st->started;
            *age = a;
            *on_rank = r;
            snprintf(desc, cap, "%s", st->pending_desc);
        }
    }
    return found;
}

static void inspect_as_rank0(comm_mpi *m, double now)
{
    mpi_stall *s = &m->stall;
    const herd_comm_config *cfg = &m->c->cfg;
    fill_status(m, &s->table[0], now);
    s->received_at[0] = now;
    receive_statuses(m, now);

    uint64_t seq = 0;
    double age = 0;
    int on_rank = 0;
    char desc[112], missing[1024], msg[1400];
    if (!oldest_pending(m, now, &seq, &age, desc, sizeof desc, &on_rank))
        return;
    /* Fresh statuses from everyone before the warning is due. */
    double ask_after = cfg->stall_warning_s / 2 < STATUS_PERIOD_S ? cfg->stall_warning_s / 2 : STATUS_PERIOD_S;
    if (age >= ask_after && now - s->last_request >= STATUS_PERIOD_S)
        request_statuses(m, now);
    if (age < cfg->stall_warning_s)
        return;
    describe_missing(m, seq, now, missing, sizeof missing);
    if (age >= cfg->timeout_s) {
        snprintf(msg, sizeof msg,
                 "collective #%llu (%s) did not complete within %.0f s (stall timeout); ranks not yet "
                 "arrived: %s; ending the job",
                 (unsigned long long)seq, desc, cfg->timeout_s, missing);
        comm_mpi_fatal(m, 1, msg);
    }
    if (s->reported_seq == seq)
        return;
    s->reported_seq = seq;
    herd_log(HERD_LOG_WARNING,
             "collective #%llu (%s) pending for %.0f s on rank %d; ranks not yet arrived: %s",
             (unsigned long long)seq, desc, age, on_rank, missing);
}

/* Rank != 0: keeps rank 0's latest answer. */
static void receive_views(comm_mpi *m, double now)
{
    mpi_stall *s = &m->stall;
    for (;;) {
        int flag = 0;
        MPI_Iprobe(0, TAG_VIEW, m->stall_comm, &flag, MPI_STATUS_IGNORE);
        if (!flag)
            return;
        MPI_Recv(&s->view_in, sizeof s->view_in, MPI_BYTE, 0, TAG_VIEW, m->stall_comm,
                 MPI_STATUS_IGNORE);
        s->view_in.missing[sizeof s->view_in.missing - 1] = '\0';
        s->view_at = now;
    }
}

/* Rank != 0: whom the pending collective waits for, or false while rank 0's first
 * answer may still come. */
static bool missing_as_other(comm_mpi *m, double now, char *out, size_t cap)
{
    mpi_stall *s = &m->stall;
    double heard = s->view_at > m->current_start ? s->view_at : m->current_start;
    if (s->view_at > 0 && s->view_in.seq == m->current->seq && now - s->view_at < SILENT_AFTER_S) {
        snprintf(out, cap, "%s", s->view_in.missing);
        return true;
    }
    if (now - heard >= SILENT_AFTER_S) {
        snprintf(out, cap, "0 (no answer from rank 0 for %.0f s: stopped, hung or unreachable)",
                 now - heard);
        return true;
    }
    return false;
}

static void inspect_as_other(comm_mpi *m, double now)
{
    mpi_stall *s = &m->stall;
    const herd_comm_config *cfg = &m->c->cfg;
    bool asked = asked_for_status(m);
    if (asked || (m->current && now - s->last_sent >= STATUS_PERIOD_S))
        send_status(m, now);
    receive_views(m, now);
    if (!m->current)
        return;
    double age = now - m->current_start;
    if (age < cfg->stall_warning_s)
        return;
    char desc[112], missing[1100], msg[1400];
    comm_mpi_describe_op(m->current, desc, sizeof desc);
    bool known = missing_as_other(m, now, missing, sizeof missing);
    if (age >= cfg->timeout_s) {
        snprintf(msg, sizeof msg,
                 "collective #%llu (%s) did not complete within %.0f s (stall timeout); ranks not "
                 "yet arrived: %s; ending the job",
                 (unsigned long long)m->current->seq, desc, cfg->timeout_s,
                 known ? missing : "unknown (rank 0 has not answered yet)");
        comm_mpi_fatal(m, 1, msg);
    }
    if (known && s->warned_seq != m->current->seq) {
        s->warned_seq = m->current->seq;
        herd_log(HERD_LOG_WARNING,
                 "rank %d on host %s: collective #%llu (%s) pending for %.0f s; ranks not yet "
                 "arrived: %s",
                 m->c->rank, m->c->host, (unsigned long long)m->current->seq, desc, age, missing);
    }
}

void comm_mpi_stall_poll(comm_mpi *m)
{
    mpi_stall *s = &m->stall;
    if (m->c->size < 2)
        return;
    double now = herd_now();
    if (now - s->last_poll < POLL_PERIOD_S)
        return;
    s->last_poll = now;
    if (m->c->rank == 0)
        inspect_as_rank0(m, now);
    else
        inspect_as_other(m, now);
}

static void complete_request(MPI_Request *req)
{
    double until = herd_now() + 5.0;
    while (!request_done(req) && herd_now() < until) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (*req != MPI_REQUEST_NULL) { /* a peer that has gone away: give the message up */
        MPI_Cancel(req);
        MPI_Request_free(req);
    }
}

void comm_mpi_stall_drain(comm_mpi *m)
{
    mpi_stall *s = &m->stall;
    if (m->c->size < 2)
        return;
    complete_request(&s->send_req);
    if (s->request_reqs)
        for (int r = 1; r < m->c->size; r++) {
            complete_request(&s->request_reqs[r]);
            complete_request(&s->view_reqs[r]);
        }
    /* Once every rank is here no more inspector messages are sent: receive the rest. */
    MPI_Request barrier;
    if (MPI_Ibarrier(m->stall_comm, &barrier) == MPI_SUCCESS)
        while (!request_done(&barrier)) { /* a collective cannot be cancelled: wait for everyone */
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, m->stall_comm, &flag, &st);
        if (!flag)
            break;
        union {
            mpi_rank_status status;
            mpi_rank_view view;
        } sink;
        MPI_Recv(&sink, sizeof sink, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, m->stall_comm,
                 MPI_STATUS_IGNORE);
    }
}
