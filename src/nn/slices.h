/* A batch run as slices, layer by layer: each slice of the batch is a model of its own
 * (its layers' state and activations, the whole model's parameters, gradients and
 * buffers), and every layer runs on each slice before the next layer starts. A slice's
 * arithmetic is then that of the model run on the slice alone, except batch norm, whose
 * training statistics are the whole batch's: each slice's per-channel sums are added,
 * over every slice of every rank in the batch's own order, before any slice is
 * normalised. That is --deterministic --sync-bn (docs/determinism.md): statistics of
 * the global batch whose bits do not depend on which rank holds which slice. */
#ifndef HERD_NN_SLICES_H
#define HERD_NN_SLICES_H

#include "nn/model.h"

/* What the caller (train) does between the slices' layers. */
typedef struct herd_slice_sums {
    /* rows: this rank's slices' rows of `width` doubles, slice by slice; out: the sum of
     * every slice's row over the whole batch (all ranks), added in the batch's order of
     * slices, so that the bits depend on the slices only. Collective: every rank calls it
     * in the same order. */
    herd_status (*sum_rows)(void *user, const double *rows, int width, double *out);
    /* Slice `slice`'s backward of layer `layer` has written the layer's parameter
     * gradients into grads (the whole model's, or its thread's: herd_slices.threads),
     * overwriting (grad_beta 0); the next slice's overwrites them. With threads, called
     * by one thread at a time. */
    herd_status (*grads_ready)(void *user, int slice, int layer, const float *grads);
    void *user;
    double *rows; /* scratch: slices x the widest row (herd_slices fills it in) */
} herd_slice_sums;

typedef struct herd_slices {
    herd_model *whole;  /* its parameters, gradients and buffers serve every slice */
    herd_model **slice; /* per slice: layers and activations, no storage */
    int n, capacity;
    int size;           /* samples per slice */
    herd_layer_io *io;  /* per slice, for backward */
    /* per slice: a batch norm's layer, inputs, outputs (or input gradients) and output
     * gradients, handed to it together */
    herd_layer **bn;
    const float **bn_x, **bn_dy;
    float **bn_y;
    double *rows;       /* per slice and one more: the widest batch-norm row (2c + 1) */
    size_t rows_capacity;
    /* Set by the caller: the slices' layers other than batch norm run on `threads`
     * threads at once, thread t writing parameter gradients into thread_grads[t] (laid
     * out as the whole model's, host memory). 0 or 1: one after another, into the
     * context's. */
    int threads;
    float **thread_grads;
} herd_slices;

/* n slices of `size` samples of whole (kept between calls: a larger n builds only the
 * slices missing); a slice's input gradient is its model's dinput after backward when
 * whole has one (a pipeline stage past the first). Refuses a model with tied weights,
 * whose gradient two layers far apart write. */
herd_status herd_slices_reshape(herd_slices *s, herd_model *whole, int n, int size);
void herd_slices_free(herd_slices *s);

/* Training forward of slice i from x[i] (size samples), with ctx (the whole model's)
 * and seeds[i] as its seed; sums->sum_rows adds the batch norms' statistics. Slice i's
 * logits are then herd_slices_logits(s, i). */
herd_status herd_slices_forward(herd_slices *s, const herd_run_ctx *ctx, const uint64_t *seeds,
                                const float *const *x, herd_slice_sums *sums);
const float *herd_slices_logits(const herd_slices *s, int i);
/* Backward from dlogits[i]; each layer's parameter gradients of each slice go to
 * sums->grads_ready as soon as they are written. */
herd_status herd_slices_backward(herd_slices *s, const herd_run_ctx *ctx, const uint64_t *seeds,
                                 const float *const *x, const float *const *dlogits,
                                 herd_slice_sums *sums);

/* Batch norm's part (layers/batchnorm.c): layer ls[i] of slice i, training statistics
 * over all slices through sums. `layer` is its index, for grads_ready. */
bool herd_layer_is_batchnorm(const herd_layer *l);
herd_status herd_batchnorm_slices_forward(herd_layer *const *ls, int n, const herd_run_ctx *ctx,
                                          const float *const *x, float *const *y,
                                          herd_slice_sums *sums);
herd_status herd_batchnorm_slices_backward(herd_layer *const *ls, int n, const herd_run_ctx *ctx,
                                           const float *const *x, const float *const *dy,
                                           float *const *dx, herd_slice_sums *sums, int layer);

#endif
