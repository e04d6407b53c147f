/*
 * What a waiting rank can say of a peer from the statuses it has (or has not)
 * received: the stall inspector's judgement (comm_mpi_stall.c), kept free of MPI so
 * that it can be tested alone. A peer asked for its status answers within a poll
 * (50 ms) when its communication thread runs and the network carries the answer;
 * silence for HERD_PEER_SILENT_AFTER_S of asking means it cannot: its host or the
 * network between the hosts is gone, or the process is stopped.
 */
#ifndef HERD_DIST_PEER_STATE_H
#define HERD_DIST_PEER_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HERD_PEER_SILENT_AFTER_S 3.0

typedef enum herd_peer_state {
    HERD_PEER_ARRIVED,     /* its last status shows it started the collective */
    HERD_PEER_NOT_STARTED, /* its last status, received recently, shows it has not */
    HERD_PEER_UNHEARD,     /* no status yet, and not asked long enough to judge */
    HERD_PEER_SILENT,      /* asked, and no word from it for SILENT_AFTER_S or more */
} herd_peer_state;

/* Times in seconds on one monotonic clock. asking_since: when the waiting rank began
 * asking the peer (0: not yet); heard_at: its last status (0: none); peer_started:
 * the last collective that status says it started; seq: the pending collective. */
herd_peer_state herd_peer_classify(double now, double asking_since, double heard_at,
                                   uint64_t peer_started, uint64_t seq);

/* "no answer for 12 s, last heard at 23:01:05 UTC; the network between the hosts
 * may be down, or the process is stopped" (same_host: "...; on this host, so the
 * process is stopped or hung"). The silence counts from the later of heard_at and
 * asking_since; now_wall is the wall clock (seconds since the epoch) at now. */
void herd_peer_describe_silence(double now, double now_wall, double asking_since, double heard_at,
                                bool same_host, char *out, size_t cap);

#endif
