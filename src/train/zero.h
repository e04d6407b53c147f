/*
 * ZeRO stages 1 and 2 (sharded data parallelism) as offset arithmetic on the flat
 * buffers: rank r of N owns the contiguous slice [bounds[r], bounds[r+1]) of the
 * parameter and gradient buffers (about 1/N each, cut on 64-byte boundaries). Each
 * gradient bucket is reduce-scattered, so a rank receives the sum of its own part
 * only; the optimizer keeps state for and updates that part alone; the parameters are
 * then all-gathered bucket by bucket. Stage 2 also gives the other ranks' gradient
 * pages back once reduced, and reduces every micro-batch into a slice-sized sum.
 */
#ifndef HERD_TRAIN_ZERO_H
#define HERD_TRAIN_ZERO_H

#include "train/buckets.h"

typedef struct herd_zero {
    int stage;      /* 1 or 2 */
    int rank, ranks;
    size_t *bounds; /* ranks + 1 offsets into the flat buffers */
    size_t lo, hi;  /* this rank's slice */
    int *counts;    /* bucket i: counts[i * ranks + r] floats of it belong to rank r */
    int n_buckets;
    float *accum;   /* stage 2 over several micro-batches: the slice's reduced sum so far */
} herd_zero;

/* The slices of n_floats among `ranks`, and each of b's buckets split along them. */
herd_status herd_zero_plan(herd_zero *z, int stage, const herd_buckets *b, size_t n_floats,
                           int rank, int ranks);
void herd_zero_free(herd_zero *z, const herd_backend *be);
static inline const int *herd_zero_counts(const herd_zero *z, int bucket)
{
    return z->counts + (size_t)bucket * (size_t)z->ranks;
}

/* Stage 2, after micro-batch `micro`'s reductions completed (not the last micro-batch):
 * its reduced slice joins the sum (the gradient buffer is then free for the next). */
herd_status herd_zero_accumulate(herd_zero *z, const herd_model *m, int micro);
/* Stage 2, after the last micro-batch's reductions: the slice becomes the whole sum. */
herd_status herd_zero_finish_accumulation(herd_zero *z, const herd_model *m, int n_micro);
/* Starts the all-gather of the updated parameters, bucket by bucket from the first
 * layers' (what the next forward needs first); complete at the communicator's wait_all. */
herd_status herd_zero_gather_params(const herd_zero *z, const herd_buckets *b, herd_model *m,
                                    herd_comm *c);

#endif
