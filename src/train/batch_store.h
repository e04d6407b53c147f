/* A step's micro-batches kept as the loader gave them (its slots are reused), for
 * --deterministic's redo of the step on another grid (exact_step.c, pipeline.c). */
#ifndef HERD_TRAIN_BATCH_STORE_H
#define HERD_TRAIN_BATCH_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "data/dataset.h"

typedef struct herd_batch_store {
    int max_n;                 /* samples a micro-batch holds at most */
    size_t x_per_sample;       /* floats kept per sample (0: the images are not kept) */
    size_t labels_per_sample;  /* labels kept per sample (0: none) */
    float *x;
    int32_t *labels;
    int *n;
    int capacity;              /* micro-batches the buffers hold */
} herd_batch_store;

/* What to keep: x_per_sample floats and labels_per_sample labels of up to max_n samples. */
void herd_batch_store_init(herd_batch_store *s, int max_n, size_t x_per_sample,
                           size_t labels_per_sample);
void herd_batch_store_free(herd_batch_store *s);
/* Keeps b as micro-batch j of the step, growing the store as needed. */
herd_status herd_batch_store_put(herd_batch_store *s, int j, const herd_batch *b);
/* Micro-batch j as kept (what was not kept is NULL). */
herd_batch herd_batch_store_get(const herd_batch_store *s, int j);

#endif
