#include "dist/replica.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dist/signature.h"

/* Odd multipliers (any odd constant makes multiplication a bijection mod 2^64);
 * these are well-mixing ones from the splitmix/xxhash family of constants. */
#define M1 0x9e3779b97f4a7c15ull
#define M2 0xbf58476d1ce4e5b9ull
#define M3 0x94d049bb133111ebull

/* Every step below is a bijection of the lane for a fixed input word, and a
 * bijection of the word for a fixed lane: a changed word always changes its lane,
 * and later words and the final combination can never map it back. */
static inline uint64_t lane_step(uint64_t h, uint64_t w)
{
    h = (h ^ w) * M1;
    return h ^ (h >> 32);
}

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * M2;
    z = (z ^ (z >> 27)) * M3;
    return z ^ (z >> 31);
}

uint64_t herd_hash_floats(const float *p, size_t n)
{
    /* Eight independent lanes, each fed every eighth 64-bit word (two floats):
     * their multiply chains overlap in the pipeline (one chain alone would be
     * limited by its multiply latency to a fraction of memory bandwidth). */
    enum { LANES = 8, PER_BLOCK = 2 * LANES };
    uint64_t h[LANES];
    for (int l = 0; l < LANES; l++)
        h[l] = M3 * (uint64_t)(l + 1); /* distinct starts: equal words in two lanes differ */
    const unsigned char *b = (const unsigned char *)p;
    size_t blocks = n / PER_BLOCK;
    for (size_t i = 0; i < blocks; i++, b += PER_BLOCK * sizeof(float)) {
        uint64_t w[LANES];
        memcpy(w, b, sizeof w); /* raw bits; memcpy keeps aliasing rules */
        for (int l = 0; l < LANES; l++)
            h[l] = lane_step(h[l], w[l]);
    }
    /* Tail: fewer than PER_BLOCK floats, zero-padded; the length below tells a padded zero
     * from a real one. */
    size_t rest = n - blocks * PER_BLOCK;
    if (rest) {
        uint64_t w[LANES] = {0};
        memcpy(w, b, rest * sizeof(float));
        for (int l = 0; l < LANES; l++)
            h[l] = lane_step(h[l], w[l]);
    }
    uint64_t out = mix64((uint64_t)n * M2);
    for (int l = 0; l < LANES; l++)
        out = mix64(out ^ h[l]);
    return out;
}

herd_status herd_check_replicas(herd_comm *c, const float *params, size_t n,
                                const float *buffers, size_t nb, long step)
{
    if (!c || (!params && n) || (!buffers && nb))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "check_replicas: NULL communicator or array");
    if (c->size <= 1)
        return HERD_OK;
    uint64_t mine[2] = {herd_hash_floats(params, n), herd_hash_floats(buffers, nb)};
    /* Only with --check-replicas, so one small allocation per check is fine. */
    uint64_t *all = herd_xcalloc((size_t)c->size, sizeof mine);
    if (!all)
        return HERD_ERR_NOMEM;
    herd_status st = c->ops->allgather(c, mine, all, sizeof mine);
    if (st != HERD_OK) {
        free(all);
        return st;
    }
    char ranks[256] = "";
    size_t len = 0;
    int bad = 0, first = -1, listed = 0;
    bool params_differ = false, buffers_differ = false;
    for (int r = 1; r < c->size; r++) {
        bool dp = all[2 * r] != all[0], db = all[2 * r + 1] != all[1];
        if (!dp && !db)
            continue;
        params_differ |= dp;
        buffers_differ |= db;
        if (first < 0)
            first = r;
        bad++;
        /* Room for one more ", 12345" and the "and N more" tail. */
        if (len + 40 < sizeof ranks) {
            int w = snprintf(ranks + len, sizeof ranks - len, "%s%d", listed ? ", " : "", r);
            len += (size_t)w;
            listed++;
        }
    }
    if (bad == 0) {
        free(all);
        return HERD_OK;
    }
    if (listed < bad)
        snprintf(ranks + len, sizeof ranks - len, " and %d more", bad - listed);
    const char *what = params_differ && buffers_differ ? "parameters and buffers"
                       : params_differ                 ? "parameters"
                                                       : "buffers (batch-norm running statistics)";
    int k = all[2 * first] != all[0] ? 0 : 1; /* show a hash that differs */
    st = HERD_ERR(HERD_ERR_INTERNAL,
                  "replicas diverged at step %ld: rank%s %s differ%s from rank 0 in their %s "
                  "(%s hash %016" PRIx64 " on rank 0, %016" PRIx64 " on rank %d); every rank "
                  "must apply identical updates: check that all ranks run the same herd build "
                  "and options, and report a bug if they do",
                  step, bad > 1 ? "s" : "", ranks, bad > 1 ? "" : "s", what,
                  k ? "buffer" : "parameter", all[k], all[2 * first + k], first);
    free(all);
    return st;
}

void herd_replica_stage_free(herd_replica_stage *s)
{
    free(s->host);
    s->host = NULL;
    s->floats = 0;
}

static herd_status download(const herd_backend *be, herd_replica_stage *s, const float *params,
                            size_t n, const float *buffers, size_t nb)
{
    if (s->floats < n + nb) {
        free(s->host);
        s->floats = 0;
        if (!(s->host = malloc((n + nb) * sizeof(float))))
            return HERD_NOMEM((n + nb) * sizeof(float));
        s->floats = n + nb;
    }
    HERD_TRY(be->memcpy_d2h(s->host, params, n * sizeof(float)));
    return be->memcpy_d2h(s->host + n, buffers, nb * sizeof(float));
}

herd_status herd_check_replicas_on(herd_comm *c, const herd_backend *be, herd_replica_stage *s,
                                   const float *params, size_t n, const float *buffers,
                                   size_t nb, long step)
{
    if (be->host_memory || !c || c->size <= 1)
        return herd_check_replicas(c, params, n, buffers, nb, step);
    if ((!params && n) || (!buffers && nb))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "check_replicas: NULL array");
    /* Every rank reaches the hashes' all-gather, or none does. */
    HERD_TRY(herd_agree(c, download(be, s, params, n, buffers, nb),
                        "copying the parameters to the host for the replica check"));
    return herd_check_replicas(c, s->host, n, s->host + n, nb, step);
}
