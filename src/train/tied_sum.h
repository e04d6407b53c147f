/*
 * A token table tied to a head on another pipeline stage (pipeline_tied.c): the stage
 * with the embedding and the last stage each hold it, and after the gradients' reduction
 * each adds the other's gradient to its own, so both update it with the same sum, as
 * Megatron-LM's embedding group does. With ZeRO each rank adds over the part of the
 * table its slice holds, meeting the ranks of the other stage whose slices overlap it.
 * a + b is b + a in floating point: both sides get the same bits, and the two copies
 * stay equal (the checkpoint gather checks they did).
 */
#ifndef HERD_TRAIN_TIED_SUM_H
#define HERD_TRAIN_TIED_SUM_H

#include <stddef.h>

#include "backend/backend.h"
#include "dist/comm.h"

typedef struct herd_tied_part {
    int peer;       /* the job rank holding the same floats of the other copy */
    size_t at, n;   /* this rank's gradient floats [at, at + n) */
    size_t scratch; /* where the peer's arrive in the scratch buffer */
} herd_tied_part;

typedef struct herd_tied_sum {
    herd_comm *job;
    herd_tied_part *parts;
    int n_parts;
    herd_p2p *reqs; /* each part's receive and send */
    float *scratch; /* backend memory, the sum of the parts' n */
    /* The last stage's copy begins here: the gradient norm counts the table once (on the
     * embedding's stage) and stops there. 0: nothing to leave out. */
    size_t copy_at;
} herd_tied_sum;

/* Adds the peers' gradients into grads (backend memory) over the parts. Collective over
 * the ranks holding a copy; a no-op for others. */
herd_status herd_tied_sum_run(herd_tied_sum *t, const herd_backend *be, float *grads);
void herd_tied_sum_free(herd_tied_sum *t, const herd_backend *be);

#endif
