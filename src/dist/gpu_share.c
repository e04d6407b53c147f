/* Which ranks share a GPU (gpu_share.h). */
#include "dist/gpu_share.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/comm.h"
#include "dist/signature.h"

/* Ranks listed per GPU before the list is cut: the line stays readable. */
enum { LISTED_RANKS = 16 };

static bool same_gpu(const herd_gpu_seat *a, const herd_gpu_seat *b)
{
    return a->id[0] && strcmp(a->id, b->id) == 0 && strcmp(a->host, b->host) == 0;
}

/* Appends sep (when msg is not empty) and item; false, with "..." where it fits,
 * when the item does not. */
static bool append(char *msg, size_t cap, const char *sep, const char *item)
{
    size_t len = strlen(msg);
    int need = snprintf(NULL, 0, "%s%s", len ? sep : "", item);
    if (len + (size_t)need < cap) {
        snprintf(msg + len, cap - len, "%s%s", len ? sep : "", item);
        return true;
    }
    snprintf(msg + len, cap - len, "%s...", len ? sep : "");
    return false;
}

int herd_gpu_shared(const herd_gpu_seat *seats, int n, const char *who, char *msg, size_t cap)
{
    if (msg && cap)
        msg[0] = '\0';
    bool room = msg && cap;
    int groups = 0;
    for (int r = 0; r < n; r++) {
        bool first = seats[r].id[0] != '\0';
        for (int q = 0; q < r && first; q++)
            first = !same_gpu(&seats[q], &seats[r]);
        int members = 1;
        for (int q = r + 1; q < n && first; q++)
            members += same_gpu(&seats[q], &seats[r]);
        if (!first || members < 2)
            continue;
        groups++;
        if (!room)
            continue;
        char item[320];
        int len = snprintf(item, sizeof item, "%s %d", who, r);
        for (int q = r + 1, listed = 1; q < n && len < (int)sizeof item; q++) {
            if (!same_gpu(&seats[q], &seats[r]))
                continue;
            if (listed++ == LISTED_RANKS) {
                len += snprintf(item + len, sizeof item - (size_t)len, ",... (%d ranks)", members);
                break;
            }
            len += snprintf(item + len, sizeof item - (size_t)len, ",%d", q);
        }
        if (len < (int)sizeof item && seats[r].host[0])
            len += snprintf(item + len, sizeof item - (size_t)len, " on host %s", seats[r].host);
        if (len < (int)sizeof item)
            snprintf(item + len, sizeof item - (size_t)len, " share %s", seats[r].name);
        room = append(msg, cap, "; ", item);
    }
    return groups;
}

herd_status herd_gpu_share_check(herd_comm *c, const herd_backend *be, bool *shared,
                                 char *line, size_t cap)
{
    *shared = false;
    if (line && cap)
        line[0] = '\0';
    if (c->size == 1)
        return HERD_OK;
    herd_gpu_seat mine = {0};
    snprintf(mine.host, sizeof mine.host, "%s", c->host);
    herd_status st = HERD_OK;
    if (be->device_identity) {
        int ordinal = -1;
        st = be->device_identity(&ordinal, mine.id, sizeof mine.id);
        snprintf(mine.name, sizeof mine.name, "GPU %d (%s)", ordinal, mine.id);
    }
    herd_gpu_seat *all = calloc((size_t)c->size, sizeof *all);
    if (st == HERD_OK && !all)
        st = HERD_NOMEM((size_t)c->size * sizeof *all);
    st = herd_agree(c, st, "reading the identity of its GPU");
    if (st == HERD_OK)
        st = c->ops->allgather(c, &mine, all, sizeof mine);
    if (st == HERD_OK)
        *shared = herd_gpu_shared(all, c->size, "ranks", line, cap) > 0;
    free(all);
    return st;
}

herd_status herd_device_reduction(herd_comm *c, const herd_backend *be, bool *nccl)
{
    *nccl = false;
    bool shared;
    char line[1024];
    HERD_TRY(herd_gpu_share_check(c, be, &shared, line, sizeof line));
    bool cuda = strcmp(be->name, "cuda") == 0;
    *nccl = cuda && herd_have_nccl() && c->size > 1 && !shared;
    if (c->rank != 0 || c->size == 1)
        return HERD_OK;
    if (shared)
        herd_log(HERD_LOG_INFO, "%s: " HERD_GPU_SHARE_WHY ", so gradients are reduced by MPI "
                 "through host memory", line);
    else if (*nccl)
        herd_log(HERD_LOG_INFO, "gradients reduced by NCCL between the GPUs");
    else
        herd_log(HERD_LOG_INFO, "%sgradients reduced by MPI through host memory",
                 cuda ? "NCCL not built in: " : "");
    return HERD_OK;
}
