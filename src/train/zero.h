/*
 * ZeRO stages 1 and 2 (sharded data parallelism) as offset arithmetic on the flat
 * buffers: rank r of N owns the contiguous slice [bounds[r], bounds[r+1]) of the
 * parameter and gradient buffers (about 1/N each, cut on 64-byte boundaries). Each
 * gradient bucket is reduce-scattered, so a rank receives the sum of its own part
 * only; the optimizer keeps state for and updates that part alone; the parameters are
 * then all-gathered bucket by bucket. Stage 2 also gives the pages of the other
 * ranks' parts of the gradients back to the system once each bucket is reduced: between
 * steps a rank holds its slice only. Accumulated micro-batches are reduced once, on the
 * last, in both stages: the traffic of one allreduce per step, and the sums of plain
 * data parallelism in its order (a reduction per micro-batch, as DeepSpeed's stage 2
 * does, would multiply the traffic and hold no less here, where backward writes into
 * the one flat buffer).
 */
#ifndef HERD_TRAIN_ZERO_H
#define HERD_TRAIN_ZERO_H

#include "optim/optim.h"
#include "train/buckets.h"
#include "train/checkpoint.h"

typedef struct herd_zero {
    int stage;      /* 1 or 2 */
    int rank, ranks;
    size_t *bounds; /* ranks + 1 offsets into the flat buffers */
    size_t lo, hi;  /* this rank's slice */
    int *counts;    /* bucket i: counts[i * ranks + r] floats of it belong to rank r */
    int n_buckets;
    uint64_t *gather_ticket; /* bucket i's all-gather in the communicator's queue */
} herd_zero;

/* The slices of n_floats among `ranks`, and each of b's buckets split along them. */
herd_status herd_zero_plan(herd_zero *z, int stage, const herd_buckets *b, size_t n_floats,
                           int rank, int ranks);
void herd_zero_free(herd_zero *z);
static inline const int *herd_zero_counts(const herd_zero *z, int bucket)
{
    return z->counts + (size_t)bucket * (size_t)z->ranks;
}

/* Starts the all-gather of the updated parameters, bucket by bucket from the first
 * layers' (what the next forward needs first), noting each one's ticket; complete at
 * the communicator's wait_all, or bucket by bucket at wait_ticket. */
herd_status herd_zero_gather_params(herd_zero *z, const herd_buckets *b, herd_model *m,
                                    herd_comm *c);

/* Checkpoints (zero_ckpt.c), collective over c (the ranks of the slices): rank 0
 * writes the checkpoint in dir with the optimizer state streamed from every rank's
 * slice, a piece at a time, and returns the write's outcome; the others send. keep: as
 * herd_checkpoint_save's. */
herd_status herd_zero_save(const herd_zero *z, herd_comm *c, const char *dir, int keep,
                           const herd_model *m, herd_optimizer *o, const herd_train_state *st);
/* A resume: the whole state rank 0 of c read into `whole` (rank 0 only) becomes each
 * rank's slice in `mine`. */
herd_status herd_zero_scatter_state(const herd_zero *z, herd_comm *c, herd_optimizer *whole,
                                    herd_optimizer *mine);
/* The reverse, for pipeline stages, whose checkpoint travels through each stage's first
 * replica: every rank's slice lands in rank 0's `whole`. */
herd_status herd_zero_gather_state(const herd_zero *z, herd_comm *c, herd_optimizer *mine,
                                   herd_optimizer *whole);

#endif
