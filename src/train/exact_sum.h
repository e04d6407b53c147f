/* Exact gradient sums for --deterministic (docs/determinism.md): every slice's gradient
 * (one micro-batch's, computed alone) is rounded once to a grid 2^E per tensor and added
 * as an integer held in a double. Integers below 2^53 add exactly in doubles, so the sum
 * over a rank's slices and the reduction over the ranks give the same bits in any order,
 * for any number of ranks or micro-batches; the mean is converted back once (each rank
 * its part of the sums, then the fp32 means gathered). Batch
 * norm's running statistics (the model's buffers) are summed the same way, each slice's
 * from the step's snapshot, so the step leaves their mean over its slices.
 *
 * The grid must be the same on every rank before a slice is rounded, so it comes from
 * the step before (its largest slice value, gathered exactly): E = exponent - 30, leaving
 * 2^(53 - 30) / slices of headroom. A slice beyond it, or the first step (no grid yet),
 * makes every rank redo the step's slices with the grid of the values just seen. */
#ifndef HERD_TRAIN_EXACT_SUM_H
#define HERD_TRAIN_EXACT_SUM_H

#include <stdbool.h>

#include "dist/comm.h"
#include "nn/model.h"

typedef struct herd_exact_sum {
    /* Integers on the views' grids: n_param_floats gradients, then n_buffer_floats buffers. */
    double *acc;
    float *view_max;  /* per view: this step's largest |slice value| on this rank */
    float *all_max;   /* gathered: size × n_views */
    int *grid;        /* per view: E, a value is integer × 2^E */
    bool have_grid;
    long slices;      /* this step's slices on every rank together */
    float *step_buffers; /* the buffers as the step found them (herd_exact_sum_keep_buffers) */
    float *host;         /* a device model's gradients and buffers, read back (else NULL) */
    int ranks;   /* the most ranks a finish may sum over (init's) */
    int *counts; /* the finish's parts per rank: of the sums, the gradients, the buffers */
    /* --compress: each slice value is rounded to bf16 or IEEE half before it is added
     * (the rounding a compressed wire makes, at one fixed place: per slice). */
    enum { HERD_EXACT_ROUND_NONE, HERD_EXACT_ROUND_FP16, HERD_EXACT_ROUND_BF16 } round16;
    /* --sync-bn: batch norm's running statistics are updated once per step from the
     * global batch's statistics, the same bytes on every rank: not summed. */
    bool buffers_synced;
    /* --tensor-parallel: the model is one part of each split tensor, the other parts on
     * the ranks of this group (not owned; NULL: none). Each view's maximum is taken over
     * them too, so the grid (and a checkpoint's) is the whole tensor's, the same on every
     * part, and so is the redo verdict. */
    herd_comm *tensor_group;
    float *group_max; /* the group's maxima side by side */
} herd_exact_sum;

/* Zeroed, round16 NONE: set it after init for --compress. */
herd_status herd_exact_sum_init(herd_exact_sum *e, const herd_model *m, int ranks);
/* The tensor-parallel parts' group (see tensor_group), set once after init. */
herd_status herd_exact_sum_set_tensor_group(herd_exact_sum *e, const herd_model *m, herd_comm *g);
void herd_exact_sum_free(herd_exact_sum *e);
/* A new step of `slices` slices over all ranks: the sums start at zero (unless
 * written_first: the step's first adds write every sum instead). */
void herd_exact_sum_begin(herd_exact_sum *e, const herd_model *m, long slices, bool written_first);
/* Batch-norm running statistics (m->buffers): each slice's forward updates them from
 * the buffers as the step found them, so that the slices' order does not matter. Keep
 * them at the start of a step, restore them before every slice (a redo's too). */
herd_status herd_exact_sum_keep_buffers(herd_exact_sum *e, const herd_model *m);
herd_status herd_exact_sum_restore_buffers(const herd_exact_sum *e, herd_model *m);
/* Adds the slice gradient in m->grads and the buffers its forward left (a device
 * backend's through host copies: each add reads the values back). */
herd_status herd_exact_sum_add(herd_exact_sum *e, const herd_model *m);
/* The same from host memory laid out as m->grads and m->buffers (a thread's own copies,
 * exact_threads.c). Not thread-safe: one caller at a time. */
herd_status herd_exact_sum_add_host(herd_exact_sum *e, const herd_model *m, const float *grads,
                                    const float *buffers);
/* The gradients of views first..first+count-1 only (one layer's, as soon as a slice's
 * backward of that layer wrote them: nn/slices.h), from grads: the model's own, or a
 * thread's in host memory laid out as them. */
herd_status herd_exact_sum_add_grad_views(herd_exact_sum *e, const herd_model *m, int first,
                                          int count, const float *grads);
/* The two halves, where forward and backward of a slice lie apart (pipeline stages):
 * the buffers right after the slice's forward, the gradient after its backward. */
herd_status herd_exact_sum_add_buffers(herd_exact_sum *e, const herd_model *m);
herd_status herd_exact_sum_add_grads(herd_exact_sum *e, const herd_model *m);
/* Slices added by kernels that took each view's largest |value| as float bits (at or
 * above 0x7f800000: not finite) instead of herd_exact_sum_add: the maxima into the sums'
 * own, from which the finish reads the redo verdict as for slices added here. */
void herd_exact_sum_take_max(herd_exact_sum *e, const herd_model *m, const uint32_t *max_bits);
/* Sums over the ranks of c and writes the mean into m->grads, and the buffers' mean over
 * the slices into m->buffers; *redo: the step's slices must be computed again (restore,
 * begin, add..., finish), every rank alike. */
herd_status herd_exact_sum_finish(herd_exact_sum *e, herd_model *m, herd_comm *c, bool *redo);
/* The same where m is one part of a model (a pipeline stage) whose other parts finish
 * beside it on the ranks of `agree`: the redo is decided for the whole model, as one
 * process holding all of it would (no grid, or a slice past the headroom with every
 * value finite, in any part). Collective over agree as well as c. */
herd_status herd_exact_sum_finish_agreed(herd_exact_sum *e, herd_model *m, herd_comm *c,
                                         herd_comm *agree, bool *redo);

/* The gradients' sum of squares for clipping under --deterministic: each tensor's in the
 * backend's fixed blocks, then added in the whole model's tensor order, so a pipeline stage
 * (views first_view.. of whole_views; 0: m is whole) gets one process's bits. With
 * tensor_group (m one part of each split tensor) a split tensor's sum adds its parts'
 * in part order, a whole one counts once. With job (the pipeline's ranks) every rank
 * gets the whole model's sum: the ranks that contribute (one replica per stage) write
 * their stage's tensors. Collective over tensor_group, then job. */
herd_status herd_exact_sum_squares(const herd_model *m, int first_view, int whole_views,
                                   herd_comm *tensor_group, herd_comm *job, bool contribute,
                                   double *out);

/* A slice's summed loss on a fixed grid (2^-28): such values add exactly in doubles, in
 * any order, while the totals stay below 2^25, so the reported loss does not depend on
 * the split either. Inf and NaN stay as they are. */
double herd_exact_loss(double slice_loss);

/* n exponents as the checkpoint's text (empty when they do not fit), and back: exactly
 * n, each a grid an fp32 value can need; anything else is an error naming the place. */
void herd_exact_grid_format(const int *grid, int n, char *buf, size_t size);
herd_status herd_exact_grid_parse(const char *text, int n, const char *model, int *grid);
/* The grid as text for a checkpoint ("" without one): one exponent per view, buffers'
 * too (a model without buffers writes what it wrote before they were summed). */
void herd_exact_sum_grid_text(const herd_exact_sum *e, const herd_model *m, char *buf, size_t size);
/* The grid from a checkpoint's text: exactly one exponent per view, each a grid an fp32
 * value can need; anything else is an error naming the place. */
herd_status herd_exact_sum_set_grid_text(herd_exact_sum *e, const herd_model *m, const char *text);

/* --sync-bn: rows of `width` doubles, one per slice of this rank's step (micro-batch j's
 * slice i at j * per_micro + i), gathered from every rank of c and added in the global
 * batch's order of slices (micro-batch, then rank, then slice), which no partition of the
 * batch changes. *scratch (*cap doubles) grows to hold the gathered rows. Collective. */
herd_status herd_exact_sum_rows(herd_comm *c, const double *rows, int n_local, int per_micro,
                                int width, double **scratch, size_t *cap, double *out);

#endif
