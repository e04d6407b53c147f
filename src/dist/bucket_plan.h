/*
 * The arithmetic of gradient buckets, shared by training (src/train/buckets.c, which
 * reduces them) and herd predict (src/tools/predict_step.c, which times them): runs of
 * parameter tensors, walked from the last one back — the order backward produces
 * them — closed once they hold the bucket size. Pure: no model, no communicator.
 */
#ifndef HERD_DIST_BUCKET_PLAN_H
#define HERD_DIST_BUCKET_PLAN_H

#include <stddef.h>

#include "core/error.h"
#include "herd/herd.h"

/* One parameter tensor: its place in the gradient buffer (floats) and its layer. */
typedef struct herd_param_ref {
    size_t offset, numel;
    int layer;
} herd_param_ref;

typedef struct herd_bucket_span {
    size_t offset, numel; /* floats of the gradient buffer */
    int views;            /* tensors in the bucket */
    /* The lowest layer with a tensor in it: backward has produced the whole bucket
     * once that layer's backward is done. */
    int ready_layer;
} herd_bucket_span;

/* The first bucket's size for a --bucket-mb of bucket_mb: 1 MiB (or less when the
 * buckets are smaller) so that communication starts early in backward. */
double herd_bucket_first_mb(double bucket_mb);

/* Plans buckets over n tensors given in declaration order (offsets increasing and
 * contiguous). out has room for n spans; *n_out receives how many; bucket_of[i]
 * (NULL: not wanted) the bucket of tensor i. Bucket 0 holds the last tensors. */
herd_status herd_bucket_plan(const herd_param_ref *tensors, int n, double bucket_mb,
                             double first_mb, herd_bucket_span *out, int *n_out, int *bucket_of);

/* The buckets of a model at --bucket-mb bucket_mb (the first bucket
 * herd_bucket_first_mb's), from its layers as herd_model_layer_info describes them, in
 * execution order: training's plan (src/train/buckets.c) and herd predict's
 * (src/tools/predict_step.c) are this one derivation. */
typedef struct herd_layer_buckets {
    herd_bucket_span *spans; /* bucket 0 holds the last layers' tensors */
    int n;
    herd_param_ref *tensors; /* every parameter tensor, in declaration order */
    int n_tensors;
    int *bucket_of;          /* per tensor: its bucket */
} herd_layer_buckets;

herd_status herd_bucket_plan_layers(const herd_layer_info *layers, int n_layers, double bucket_mb,
                                    herd_layer_buckets *out);
void herd_layer_buckets_free(herd_layer_buckets *b);

#endif
