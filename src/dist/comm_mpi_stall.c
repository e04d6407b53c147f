/*
 * The stall inspector. Every rank's communication thread keeps running whatever
 * its compute threads do, so it can always say what its rank is doing. While a
 * collective is pending, ranks send their status (activity, collectives started
 * and completed) to rank 0 on a communicator of their own, about once a second
 * and whenever rank 0 asks. Rank 0 compares sequence numbers to name the ranks
 * that have not arrived, names the ranks that have stopped answering it as
 * unreachable (dist/peer_state.h), and answers each waiting rank with both lists.
 * Whichever rank waits warns once per collective after stall_warning_s and ends the
 * job after timeout_s, naming them: rank 0's lists, or rank 0 itself when it has
 * stopped answering. Messages go through the caller's log function (core/log.h).
 *
 * A rank whose communicator is freed (its program ends, calls shutdown or sys.exit)
 * first tells rank 0 how many collectives it started. A collective of a higher number,
 * pending anywhere, can then never complete: rank 0 ends the job at once, naming the
 * rank that left, instead of every waiting rank timing out on one that looks hung.
 * Rank 0 leaving judges likewise from the statuses of the ranks that wait for it. Not
 * where point-to-point ops ran (pipeline stages): there the ranks' counts differ.
 *
 * When a rank on another host is unreachable, the abort waits LAUNCHER_GRACE_S: a
 * launcher that has tried to reach a vanished host waits for it (Open MPI's mpirun
 * until TCP gives up, some 15 minutes), while one that notices the loss first (its
 * keepalive, which herd run sets short) ends the job at once (docs/cluster.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"
#include "dist/comm_mpi_internal.h"
#include "dist/failure_line.h"
#include "dist/peer_state.h"

#define TAG_STATUS 1
#define TAG_REQUEST 2
#define TAG_VIEW 3
#define POLL_PERIOD_S 0.05
#define STATUS_PERIOD_S 1.0
#define LAUNCHER_GRACE_S 10.0

int comm_mpi_stall_init(comm_mpi *m)
{
    mpi_stall *s = &m->stall;
    int size = m->c->size;
    s->send_req = MPI_REQUEST_NULL;
    s->hosts = calloc((size_t)size, MPI_HOST_LEN);
    if (!s->hosts)
        return -1;
    int rc = MPI_Allgather(m->c->host, (int)MPI_HOST_LEN, MPI_CHAR, s->hosts, (int)MPI_HOST_LEN,
                           MPI_CHAR, m->stall_comm);
    if (rc != MPI_SUCCESS)
        return rc;
    for (int r = 0; r < size; r++)
        s->hosts[(size_t)(r + 1) * MPI_HOST_LEN - 1] = '\0';
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
    free(s->hosts);
    memset(s, 0, sizeof *s);
}

static void fill_status(comm_mpi *m, mpi_rank_status *st, double now)
{
    memset(st, 0, sizeof *st);
    st->rank = m->c->rank;
    st->started = m->started;
    st->ran_p2p = m->ran_p2p;
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
        MPI_SUCCESS) {
        s->last_sent = now;
        if (m->current && m->current->seq != s->told_seq) {
            s->told_seq = m->current->seq;
            s->told_at = now;
        }
    }
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
        m->stall.root_heard_at = herd_now();
        asked = true;
    }
}

static const char *host_of(const comm_mpi *m, int r)
{
    return m->stall.hosts + (size_t)r * MPI_HOST_LEN;
}

static bool on_my_host(const comm_mpi *m, int r)
{
    return strcmp(host_of(m, r), m->c->host) == 0;
}

/* Appends ", item" (or item first) to a list, cut at its capacity. */
static void add_item(char *list, size_t cap, const char *item)
{
    size_t used = strlen(list);
    if (used + 1 < cap)
        snprintf(list + used, cap - used, "%s%s", used ? ", " : "", item);
}

/* Rank 0: "ranks not yet arrived: 2 on node3 (last: 'epoch 1 step 119: forward' 61 s
 * ago); ranks unreachable: 1 on node2 (no answer for ...)", as rank 0 last heard, for
 * collective seq. Returns how many silent ranks are on hosts other than rank 0's. */
static int describe_missing(comm_mpi *m, uint64_t seq, double now, char *out, size_t cap)
{
    mpi_stall *s = &m->stall;
    char late[1024] = "", silent[1024] = "", item[400], why[200];
    int remote_silent = 0;
    for (int r = 0; r < m->c->size; r++) {
        const mpi_rank_status *st = &s->table[r];
        double heard = s->received_at[r];
        const char *host = host_of(m, r);
        switch (herd_peer_classify(now, r ? s->asking_since : 0, heard, st->started, seq)) {
        case HERD_PEER_ARRIVED:
            continue;
        case HERD_PEER_SILENT:
            herd_peer_describe_silence(now, (double)time(NULL), s->asking_since, heard,
                                       on_my_host(m, r), why, sizeof why);
            herd_stall_item(item, sizeof item, r, host, why);
            add_item(silent, sizeof silent, item);
            remote_silent += !on_my_host(m, r);
            continue;
        case HERD_PEER_UNHEARD:
            herd_stall_item(item, sizeof item, r, host, "no status received");
            break;
        case HERD_PEER_NOT_STARTED:
            if (st->activity_age_s < 0)
                snprintf(why, sizeof why, "no activity recorded");
            else
                snprintf(why, sizeof why, "last: '%s' %.0f s ago", st->activity,
                         st->activity_age_s + (r ? now - heard : 0));
            herd_stall_item(item, sizeof item, r, host, why);
            break;
        }
        add_item(late, sizeof late, item);
    }
    herd_stall_lists(out, cap, late, silent);
    return remote_silent;
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
            v->remote_silent = describe_missing(m, v->seq, now, v->missing, sizeof v->missing);
            MPI_Isend(v, sizeof *v, MPI_BYTE, r, TAG_VIEW, m->stall_comm, &s->view_reqs[r]);
        }
    }
}

/* Whether the ranks' op counts line up (no point-to-point op anywhere, as rank 0 heard). */
static bool counts_line_up(const comm_mpi *m)
{
    const mpi_stall *s = &m->stall;
    if (m->ran_p2p)
        return false;
    for (int r = 1; r < m->c->size; r++)
        if (s->received_at[r] && s->table[r].ran_p2p)
            return false;
    return true;
}

/* Rank 0: ends the job when collective seq (pending on rank `on_rank`, described by
 * desc) waits for a rank that has left before starting it. */
static void judge_departures(comm_mpi *m, uint64_t seq, const char *desc, int on_rank)
{
    mpi_stall *s = &m->stall;
    if (!counts_line_up(m))
        return;
    for (int r = 1; r < m->c->size; r++) {
        const mpi_rank_status *st = &s->table[r];
        if (!s->received_at[r] || !st->leaving || st->started >= seq)
            continue;
        char msg[600];
        snprintf(msg, sizeof msg, "rank %d on %s left the job after %llu collectives (its program "
                 "ended, or called shutdown or exit) while rank %d waits for it in collective #%llu "
                 "(%s), which cannot complete: every rank must make the same collectives; ending "
                 "the job", r, host_of(m, r), (unsigned long long)st->started, on_rank,
                 (unsigned long long)seq, desc);
        comm_mpi_fatal_after(m, 1, msg, 0);
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
    if (s->asking_since == 0)
        s->asking_since = now;
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

/* Ends the job naming the missing ranks; later when a host may have vanished. */
_Noreturn static void stall_timeout(comm_mpi *m, uint64_t seq, const char *desc,
                                    const char *missing, bool remote_silent)
{
    char msg[1400];
    char grace[128] = "";
    if (remote_silent)
        snprintf(grace, sizeof grace, " in %.0f s (the launcher first has that long to notice a lost "
                 "host and end it)", LAUNCHER_GRACE_S);
    herd_stall_timeout_format(msg, sizeof msg, seq, desc, m->c->cfg.timeout_s, missing, grace);
    comm_mpi_fatal_after(m, 1, msg, remote_silent ? LAUNCHER_GRACE_S : 0);
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
    char desc[112], missing[1024];
    if (!oldest_pending(m, now, &seq, &age, desc, sizeof desc, &on_rank))
        return;
    judge_departures(m, seq, desc, on_rank);
    if (seq != s->judged_seq) { /* silence counts from the first request about this one */
        s->judged_seq = seq;
        s->asking_since = 0;
    }
    /* Fresh statuses from everyone before the warning is due. */
    double ask_after = cfg->stall_warning_s / 2 < STATUS_PERIOD_S ? cfg->stall_warning_s / 2 : STATUS_PERIOD_S;
    if (age >= ask_after && now - s->last_request >= STATUS_PERIOD_S)
        request_statuses(m, now);
    if (age < cfg->stall_warning_s)
        return;
    int remote_silent = describe_missing(m, seq, now, missing, sizeof missing);
    if (age >= cfg->timeout_s)
        stall_timeout(m, seq, desc, missing, remote_silent > 0);
    if (s->reported_seq == seq)
        return;
    s->reported_seq = seq;
    herd_log(HERD_LOG_WARNING, "collective #%llu (%s) pending for %.0f s on rank %d; %s",
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
        s->view_at = s->root_heard_at = now;
    }
}

/* Rank != 0: whom the pending collective waits for ("ranks ...: ..."), or false while
 * rank 0's first answer may still come. *remote_silent: a rank on another host has
 * gone silent (rank 0 itself, or one rank 0 names). */
static bool missing_as_other(comm_mpi *m, double now, bool at_timeout, char *out, size_t cap,
                             bool *remote_silent)
{
    mpi_stall *s = &m->stall;
    uint64_t seq = m->current->seq;
    *remote_silent = false;
    /* This rank sends its status every second while it waits, and rank 0 answers each:
     * only silence matters here, whatever rank 0 has started. At the timeout, a rank 0
     * that has left a status about this collective unanswered for a whole period is
     * silent too, though it spoke (of an earlier one) less than SILENT_AFTER_S ago:
     * it answers within a poll when it runs. */
    bool unanswered = at_timeout && s->told_seq == seq && now - s->told_at >= STATUS_PERIOD_S &&
                      !(s->view_at > 0 && s->view_in.seq == seq);
    if (unanswered ||
        herd_peer_classify(now, m->current_start, s->root_heard_at, seq, seq) == HERD_PEER_SILENT) {
        char why[200];
        herd_peer_describe_silence(now, (double)time(NULL), unanswered ? s->told_at : m->current_start,
                                   s->root_heard_at, on_my_host(m, 0), why, sizeof why);
        snprintf(out, cap, "ranks unreachable: 0 on %s (%s)", host_of(m, 0), why);
        *remote_silent = !on_my_host(m, 0);
        return true;
    }
    if (s->view_at > 0 && s->view_in.seq == seq) {
        snprintf(out, cap, "%s", s->view_in.missing);
        *remote_silent = s->view_in.remote_silent > 0;
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
    char desc[112], missing[1100];
    comm_mpi_describe_op(m->current, desc, sizeof desc);
    bool remote_silent = false;
    bool known = missing_as_other(m, now, age >= cfg->timeout_s, missing, sizeof missing, &remote_silent);
    if (age >= cfg->timeout_s)
        stall_timeout(m, m->current->seq, desc,
                      known ? missing : "ranks not yet arrived: unknown (rank 0 has not answered yet)",
                      remote_silent);
    if (known && s->warned_seq != m->current->seq) {
        s->warned_seq = m->current->seq;
        herd_log(HERD_LOG_WARNING, "rank %d on host %s: collective #%llu (%s) pending for %.0f s; %s",
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

/* One sleep of a teardown wait, 1 ms doubling to 4 ms: a rank that ends first may wait
 * seconds for one still saving, and each wake-up costs a system call and two context
 * switches (on a virtual machine, several microseconds each). */
static void teardown_sleep(double *delay_s)
{
    herd_sleep(*delay_s);
    if (*delay_s < 0.004)
        *delay_s *= 2;
}

static void complete_request(MPI_Request *req)
{
    double until = herd_now() + 5.0, delay = 0.001;
    while (!request_done(req) && herd_now() < until)
        teardown_sleep(&delay);
    if (*req != MPI_REQUEST_NULL) { /* a peer that has gone away: give the message up */
        MPI_Cancel(req);
        MPI_Request_free(req);
    }
}

/* Rank 0 leaving: a rank whose status says it waits in a collective rank 0 never
 * started ends the job, naming rank 0. */
static void judge_own_departure(comm_mpi *m)
{
    mpi_stall *s = &m->stall;
    if (!counts_line_up(m))
        return;
    for (int r = 1; r < m->c->size; r++) {
        const mpi_rank_status *st = &s->table[r];
        if (!s->received_at[r] || !st->pending || st->leaving || st->started <= m->started)
            continue;
        char msg[600];
        snprintf(msg, sizeof msg, "rank 0 on %s left the job after %llu collectives (its program "
                 "ended, or called shutdown or exit) while rank %d waits for it in collective #%llu "
                 "(%s), which cannot complete: every rank must make the same collectives; ending "
                 "the job", m->c->host, (unsigned long long)m->started, r,
                 (unsigned long long)st->started, st->pending_desc);
        comm_mpi_fatal_after(m, 1, msg, 0);
    }
}

void comm_mpi_stall_drain(comm_mpi *m)
{
    mpi_stall *s = &m->stall;
    if (m->c->size < 2)
        return;
    complete_request(&s->send_req);
    if (m->c->rank != 0) { /* the departure notice: how many collectives this rank made */
        fill_status(m, &s->out, herd_now());
        s->out.leaving = 1;
        if (MPI_Isend(&s->out, sizeof s->out, MPI_BYTE, 0, TAG_STATUS, m->stall_comm,
                      &s->send_req) == MPI_SUCCESS)
            complete_request(&s->send_req);
    }
    if (s->request_reqs)
        for (int r = 1; r < m->c->size; r++) {
            complete_request(&s->request_reqs[r]);
            complete_request(&s->view_reqs[r]);
        }
    /* Once every rank is here no more inspector messages are sent: receive the rest. */
    MPI_Request barrier;
    if (MPI_Ibarrier(m->stall_comm, &barrier) == MPI_SUCCESS)
        /* A collective cannot be cancelled: wait for everyone. Rank 0 meanwhile hears
         * who waits for it, or has left before a collective another rank waits in. */
        for (double delay = 0.001; !request_done(&barrier);) {
            if (m->c->rank == 0) {
                receive_statuses(m, herd_now());
                judge_own_departure(m);
                uint64_t seq;
                double age;
                char desc[112];
                int on_rank;
                if (oldest_pending(m, herd_now(), &seq, &age, desc, sizeof desc, &on_rank))
                    judge_departures(m, seq, desc, on_rank);
            }
            teardown_sleep(&delay);
        }
    if (m->c->rank == 0 && s->view_reqs) /* answers sent while waiting */
        for (int r = 1; r < m->c->size; r++)
            complete_request(&s->view_reqs[r]);
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
