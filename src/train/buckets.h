/*
 * Gradient buckets: runs of parameter gradients, in reverse layer order, that are
 * reduced together as soon as backward has produced all of them. Because every
 * gradient lives in one contiguous buffer, a bucket is an offset and a length —
 * the reduction works on the buffer in place, no copies.
 */
#ifndef HERD_TRAIN_BUCKETS_H
#define HERD_TRAIN_BUCKETS_H

#include "dist/bucket_plan.h"
#include "dist/comm.h"
#include "nn/model.h"

typedef struct herd_bucket {
    size_t offset, numel; /* floats in model->grads */
    int views;            /* parameter tensors in the bucket */
    int pending;          /* tensors whose gradient backward has not produced yet */
    char tag[32];         /* "bucket 3" for the stall inspector and timeline */
} herd_bucket;

typedef struct herd_buckets {
    herd_bucket *b;
    int n;
    int *bucket_of_layer;  /* last bucket index a layer's tensors belong to, -1 if none */
    int *first_bucket_of_layer;
    herd_comm *comm;
    const herd_model *model;
    float scale;           /* applied after the sum: 1 / (ranks x micro-batches) */
    herd_wire_type wire;
    int launched;
    /* ZeRO (train/zero.h): bucket i is reduce-scattered, split among the ranks as
     * split[i * ranks + r]; NULL: allreduced. release_rest: stage 2's page release. */
    const int *split;
    int ranks;
    bool release_rest;
} herd_buckets;

/* Plans buckets over m's parameters (herd_bucket_plan_layers, as herd predict does):
 * the first (last layers') bucket holds about herd_bucket_first_mb(bucket_mb) MiB so
 * communication starts early, the rest bucket_mb MiB. */
herd_status herd_buckets_plan(const herd_model *m, double bucket_mb, herd_buckets *out);
void herd_buckets_free(herd_buckets *b);

/* Before backward: every bucket waits for all its tensors again. */
void herd_buckets_arm(herd_buckets *b, herd_comm *comm, float scale, herd_wire_type wire);
/* After layer `layer`'s backward: starts the reduction of every bucket that is now complete. */
herd_status herd_buckets_layer_done(herd_buckets *b, const herd_model *m, int layer);

#endif
