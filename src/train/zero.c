#include "train/zero.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* Slices start on 64-byte boundaries (16 floats): whole cache lines per rank. */
#define ZERO_ALIGN 16

herd_status herd_zero_plan(herd_zero *z, int stage, const herd_buckets *b, size_t n_floats,
                           int rank, int ranks)
{
    memset(z, 0, sizeof *z);
    if ((stage != 1 && stage != 2) || ranks < 2 || rank < 0 || rank >= ranks)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "ZeRO stage %d on rank %d of %d: stages are 1 and "
                        "2, over at least 2 ranks", stage, rank, ranks);
    z->stage = stage;
    z->rank = rank;
    z->ranks = ranks;
    z->n_buckets = b->n;
    z->bounds = herd_xcalloc((size_t)ranks + 1, sizeof *z->bounds);
    z->counts = herd_xcalloc((size_t)(b->n > 0 ? b->n : 1) * (size_t)ranks, sizeof *z->counts);
    z->gather_ticket = herd_xcalloc((size_t)(b->n > 0 ? b->n : 1), sizeof *z->gather_ticket);
    if (!z->bounds || !z->counts || !z->gather_ticket) {
        herd_zero_free(z);
        return HERD_ERR_NOMEM;
    }
    for (int r = 1; r < ranks; r++) {
        size_t at = (n_floats * (size_t)r / (size_t)ranks + ZERO_ALIGN - 1) / ZERO_ALIGN * ZERO_ALIGN;
        z->bounds[r] = at < n_floats ? at : n_floats;
    }
    z->bounds[ranks] = n_floats;
    z->lo = z->bounds[rank];
    z->hi = z->bounds[rank + 1];
    for (int i = 0; i < b->n; i++) {
        size_t begin = b->b[i].offset, end = begin + b->b[i].numel;
        if (b->b[i].numel > (size_t)0x7fffffff) {
            herd_status st = HERD_ERR(HERD_ERR_UNSUPPORTED, "ZeRO: %s holds %zu floats, beyond one "
                                      "MPI call; lower --bucket-mb", b->b[i].tag, b->b[i].numel);
            herd_zero_free(z);
            return st;
        }
        for (int r = 0; r < ranks; r++) {
            size_t lo = begin > z->bounds[r] ? begin : z->bounds[r];
            size_t hi = end < z->bounds[r + 1] ? end : z->bounds[r + 1];
            z->counts[(size_t)i * (size_t)ranks + (size_t)r] = hi > lo ? (int)(hi - lo) : 0;
        }
    }
    return HERD_OK;
}

void herd_zero_free(herd_zero *z)
{
    free(z->bounds);
    free(z->counts);
    free(z->gather_ticket);
    memset(z, 0, sizeof *z);
}

herd_status herd_zero_gather_params(herd_zero *z, const herd_buckets *b, herd_model *m,
                                    herd_comm *c)
{
    for (int i = b->n - 1; i >= 0; i--) {
        HERD_TRY(c->ops->allgather_start(c, m->params + b->b[i].offset, herd_zero_counts(z, i),
                                         b->b[i].tag));
        z->gather_ticket[i] = c->ops->ticket(c);
    }
    return HERD_OK;
}
