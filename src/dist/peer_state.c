#include "dist/peer_state.h"

#include <stdio.h>
#include <time.h>

herd_peer_state herd_peer_classify(double now, double asking_since, double heard_at,
                                   uint64_t peer_started, uint64_t seq)
{
    /* A status from before the asking began may be old: silence counts only once the
     * peer has had SILENT_AFTER_S to answer. */
    if (asking_since > 0 && now - asking_since >= HERD_PEER_SILENT_AFTER_S &&
        (heard_at <= 0 || now - heard_at >= HERD_PEER_SILENT_AFTER_S))
        return HERD_PEER_SILENT;
    if (heard_at <= 0)
        return HERD_PEER_UNHEARD;
    return peer_started >= seq ? HERD_PEER_ARRIVED : HERD_PEER_NOT_STARTED;
}

void herd_peer_describe_silence(double now, double now_wall, double asking_since, double heard_at,
                                bool same_host, char *out, size_t cap)
{
    const char *why = same_host ? "on this host, so the process is stopped or hung"
                                : "the network between the hosts may be down, or the process is stopped";
    /* Silence counts from the asking: an older last word was not expected to be followed. */
    double since = heard_at > asking_since ? heard_at : asking_since;
    if (heard_at <= 0) {
        snprintf(out, cap, "no answer for %.0f s, and none before; %s", now - since, why);
        return;
    }
    time_t at = (time_t)(now_wall - (now - heard_at));
    struct tm tm;
    char clock[16] = "?";
    if (gmtime_r(&at, &tm))
        strftime(clock, sizeof clock, "%H:%M:%S", &tm);
    snprintf(out, cap, "no answer for %.0f s, last heard at %s UTC; %s", now - since, clock, why);
}
