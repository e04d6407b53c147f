/* One training step — forward, loss, backward, gradient reduction, update — and
 * evaluation, shared by herd_train, herd_bench_train and herd_evaluate. */
#ifndef HERD_TRAIN_STEP_H
#define HERD_TRAIN_STEP_H

#include "data/dataset.h"
#include "dist/replica.h"
#include "nn/model.h"
#include "optim/loss_scale.h"
#include "obs/timeline.h"
#include "optim/optim.h"
#include "train/buckets.h"
#include "train/exact_sum.h"
#include "train/phase_clock.h"
#include "train/tied_sum.h"
#include "train/zero.h"

/* How gradients of a step are combined across micro-batches and ranks. */
typedef struct herd_step_plan {
    herd_comm *comm;      /* never NULL: the local communicator for one process */
    herd_buckets buckets;
    herd_wire_type wire;
    bool sync_bn;
    float *dlogits;       /* scratch: gradient of the loss w.r.t. the logits */
    int dlogits_capacity;
    /* Device copies of each batch's images and labels (unused for the CPU backend,
     * which reads the loader's host batch directly); grown once to the largest batch. */
    float *x_dev;
    int32_t *labels_dev;
    int input_capacity;
    herd_loss_scaler *scaler; /* dynamic loss scaling, NULL = none */
    /* One rank on a device with micro-batches: the gradients' scale that
     * herd_apply_step applies (0: none; the buckets scale everywhere else). */
    float device_scale;
    /* With pipeline stages each rank sees only its stage's gradients, so what the update
     * depends on is agreed over this communicator (the job): an overflow found on any
     * rank skips the step everywhere, and clipping's sum of squares counts each stage
     * once per replica (stage_replicas). NULL: the reduced gradients are the same on
     * every rank, which then decides alike alone. */
    herd_comm *stage_job;
    int stage_replicas;
    /* Tensor parallelism: each rank holds a part of every split tensor, so an overflow
     * is agreed over the job (tensor_job), and clipping's sum of squares adds the parts
     * over the tensor group (tensor_sum), whole tensors counted once. NULL: none. */
    herd_comm *tensor_job;
    herd_group_sum tensor_sum;
    herd_comm *tensor_group; /* the same group (--deterministic's sum of squares) */
    /* A token table tied across pipeline stages: the two copies' gradients are summed
     * once reduced, and the norm leaves the last stage's copy out (NULL: none). */
    herd_tied_sum *tied;
    /* --deterministic with stages: this stage's first tensor among the whole model's, and
     * their number (clipping's norm is summed per tensor in that order; 0: not a stage). */
    int first_view, whole_views;
    float clip_grad_norm; /* --clip-grad-norm (0: off) */
    /* Without a loss scaler, a non-finite gradient (found from the sum of squares that
     * clipping takes anyway, agreed over the same ranks) stops training with an error
     * naming `step` and the tensor, before the update; with skip_nonfinite the update
     * is skipped instead and counted in *skipped (NULL: not counted). */
    bool skip_nonfinite;
    long *skipped;
    long step; /* the step's number, for messages */
    /* What a divergence error tells the user to change (NULL: herd train's options). */
    const char *diverged_advice;
    /* --zero: each rank reduces, checks, clips and updates its slice of the buffers and
     * the parameters are all-gathered after the update (NULL: plain allreduce). */
    herd_zero *zero;
    /* ZeRO: the all-gather of the updated parameters runs on into the next forward,
     * each layer waiting for its own bucket's (set by the caller when nothing else
     * reads the parameters between steps, or it calls herd_step_params_ready first). */
    bool overlap_gather;
    bool gather_pending;
    double gather_wait; /* seconds the forward waited for it (exposed communication) */
    /* --deterministic: each micro-batch's gradient goes into exact sums instead of the
     * buckets (exact_sum.h); the caller finishes them before herd_apply_step. NULL: off. */
    herd_exact_sum *exact;
    /* --deterministic's linear layers (nn/layer.h), NULL: the usual GEMMs. With its sums
     * set, a micro-batch runs whole: its linear layers add each slice's gradients to the
     * exact sums themselves, and its loss is taken slice by slice (exact_step.c). */
    herd_exact_linear *exact_linear;
    herd_timeline *timeline; /* --timeline: phases and layers become events (NULL: off) */
    herd_replica_stage replica_stage; /* --check-replicas on a device: the host copy */
    herd_phase_clock clock;  /* the phases on the device's clock, where it has one */
    /* --cuda-graphs: forward and backward replayed from captured graphs (graph_step.h);
     * NULL: off. */
    struct herd_step_graphs *graphs;
} herd_step_plan;

typedef struct herd_step_stats {
    double loss_sum; /* summed per-sample loss (a sequence's: the mean over its positions) */
    double correct;  /* correct predictions per sample (a sequence's: the fraction right) */
    long samples;
    bool skipped;       /* inf/NaN gradients (loss scaler, or skip_nonfinite): no update */
    bool clipped;       /* the gradients were scaled down to --clip-grad-norm */
    herd_phase_times t; /* data_wait is filled by the caller */
} herd_step_stats;

herd_status herd_step_plan_init(herd_step_plan *p, herd_model *m, herd_comm *comm,
                                double bucket_mb, herd_wire_type wire, bool sync_bn);
void herd_step_plan_free(herd_step_plan *p, herd_model *m);

/* ZeRO with overlap_gather: waits until the parameters are all here (before anything
 * but the training forward reads them: evaluation, checkpoints, the end). */
herd_status herd_step_params_ready(herd_step_plan *p);

/* Synchronised batch norm's group: the sums are allreduce_f64 over c's ranks. */
herd_group_sum herd_group_of_comm(herd_comm *c);

/* Before the step's last backward: arms the buckets so that each starts its
 * reduction (scaled by 1/(ranks x n_micro)) once backward has produced it, through
 * ctx's after-backward hook. Nothing to do for one process without accumulation. */
void herd_step_arm_reduction(herd_step_plan *p, herd_model *m, int n_micro, herd_run_ctx *ctx);

/* Whether m's loss writes its gradient over the logits (no buffer of their size for it). */
bool herd_step_loss_in_place(const herd_model *m);
/* The batch in the backend's memory (dev: copies there, kept for the next batch, or
 * the host batch itself on the CPU), the model's activations and, unless the loss writes
 * over the logits, the loss gradient's buffer grown to its size. */
herd_status herd_step_inputs(herd_model *m, herd_step_plan *p, const herd_batch *host,
                             herd_batch *dev);

/* Where the loss writes its gradient: over the logits, or the plan's buffer. */
float *herd_step_dlogits(const herd_model *m, const herd_step_plan *p);
/* The loss of `rows` rows of logits against their labels, added to s (per sample; under
 * --deterministic on the exact grid, a slice at a time); its gradient into dlogits,
 * times share (these rows' part of the mean's: 1 for the whole micro-batch) and the
 * loss scaler's scale. */
herd_status herd_step_loss(herd_model *m, herd_step_plan *p, const float *logits,
                           const int32_t *labels, int rows, float label_smoothing, float share,
                           float *dlogits, herd_step_stats *s);
/* The last layer over `samples` samples of its input (x: the model's input) a chunk at a
 * time, after the other layers' forward: its forward, the loss (added to s; its gradient
 * into dlogits, a chunk's, weighted by the chunk's share of the samples) and its backward
 * (chunk_step.c). ctx's grad_beta is the first chunk's; the after_backward hook runs after
 * the last chunk. */
herd_status herd_step_head_chunks(herd_model *m, herd_step_plan *p, herd_run_ctx *ctx,
                                  const float *x, const int32_t *labels, int samples,
                                  float label_smoothing, float *dlogits, herd_step_stats *s);
/* herd_micro_step's body when the last layer runs in chunks (train/chunk_step.c): ctx
 * its context, b the batch in the backend's memory, t0 its start. */
herd_status herd_chunked_micro_step(herd_model *m, herd_step_plan *p, herd_run_ctx *ctx,
                                    const herd_batch *b, int micro, int n_micro,
                                    float label_smoothing, herd_step_stats *s, double t0);

/* Evaluation's forward of n samples and their summed loss and hits (rows of a sequence
 * each), the last layer a chunk at a time where it runs in chunks (chunk_step.c). */
herd_status herd_eval_loss(herd_model *m, const herd_run_ctx *ctx, const float *x,
                           const int32_t *labels, int n, double *loss, long *correct);

/* --deterministic's whole passes (herd_exact_linear's sums): the linear layers add each
 * slice to the exact sums themselves, and the loss is taken a slice at a time. */
bool herd_step_whole_passes(const herd_step_plan *p);
/* The end of a micro-batch's forward: its time (*t1: now), the phase mark, and the wait
 * for ZeRO's gathered parameters counted as communication, not forward. */
herd_status herd_step_forward_done(herd_step_plan *p, herd_step_stats *s, double *t1);
/* The end of a micro-batch's backward: the phase mark, forward (from t0 to t1) and
 * backward (from t1 to now) times, and their timeline events. */
herd_status herd_step_backward_done(herd_step_plan *p, herd_step_stats *s, double t0, double t1);

/* Forward and backward of micro-batch `micro` of `n_micro` in a step: gradients
 * accumulate over the micro-batches, and on the last one the buckets start their
 * reductions during backward. Adds to *s. */
herd_status herd_micro_step(herd_model *m, herd_step_plan *p, const herd_batch *b, int micro,
                            int n_micro, float label_smoothing, uint64_t seed, herd_step_stats *s);
/* Waits for the reductions (exposed communication) and updates the weights (with a
 * loss scaler: unscales first, and skips the update when gradients overflowed, here or
 * on any rank of stage_job, or of comm with ZeRO); with clip_grad_norm, clips after
 * that. With ZeRO the update is the rank's slice's, and every rank leaves with the
 * whole updated parameters (all-gathered). */
herd_status herd_apply_step(herd_model *m, herd_optimizer *o, herd_step_plan *p, float lr,
                            herd_step_stats *s);

/* One evaluation batch (host memory): adds nothing itself, returns the batch's summed
 * loss, correct predictions and samples (all 0 on a rank that does not compute them). */
typedef herd_status (*herd_eval_batch_fn)(void *user, const herd_batch *b, double *loss,
                                         double *correct, double *samples);
/* Evaluation of the slice_index-th of `slices` contiguous slices of ds, batch by batch
 * through fn; the sums are reduced over comm (every rank of comm calls it, with any
 * failure agreed) and every rank gets the result. */
herd_status herd_eval_sliced(herd_dataset *ds, int batch_size, int slice_index, int slices,
                             herd_comm *comm, herd_eval_batch_fn fn, void *user,
                             herd_eval_result *r);

/* One rank's compute threads: requested when above 0, else OMP_NUM_THREADS when set
 * and not empty (refused when not a count from 1 to 4096), else cores / local_ranks, at
 * least 1. */
herd_status herd_rank_threads(int requested, const char *omp_num_threads, int cores, int local_ranks,
                              int *out);
/* herd_rank_threads for this process (its OMP_NUM_THREADS, the cores it may run on). */
herd_status herd_process_rank_threads(int requested, int local_ranks, int *used);
/* The same, set on be; *used is the count. */
herd_status herd_set_rank_threads(const struct herd_backend *be, int requested, int local_ranks,
                                  int *used);
/* Mean loss and accuracy over a whole dataset in evaluation mode; with a
 * communicator of several ranks each evaluates a slice and the sums are reduced. */
herd_status herd_eval_dataset(herd_model *m, herd_dataset *ds, int batch_size, herd_comm *comm,
                              herd_eval_result *r);

#endif
