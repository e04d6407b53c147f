/*
 * Pipeline parallelism: the job's ranks form a grid of P stages x D replicas (rank =
 * replica x P + stage, so one pipeline's stages are neighbours and share a host when
 * the launcher fills hosts in order). Each rank holds one stage of the model (a model
 * of its own over a contiguous run of layers: its parameters are a contiguous slice
 * of the whole model's flat buffer), and the ranks of one stage form a group whose
 * gradients are reduced in buckets during the last backward, as in data parallelism.
 *
 * A step runs the stage's schedule (dist/pp_schedule.h) over the step's micro-batches:
 * activations go forward and their gradients back over non-blocking point-to-point
 * transfers posted before they are needed. Each micro-batch in flight has a slot: a
 * copy of the stage's layers with its own activations and saved state, computing with
 * the stage's one set of parameters and gradients.
 */
#ifndef HERD_TRAIN_PIPELINE_H
#define HERD_TRAIN_PIPELINE_H

#include "data/dataset.h"
#include "dist/pp_schedule.h"
#include "nn/model.h"
#include "optim/optim.h"
#include "train/batch_store.h"
#include "train/step.h"
#include "train/tied_sum.h"

#define HERD_PP_MAX_STAGES 64

typedef struct herd_pp_slot {
    herd_model *m;     /* the stage's layers and one micro-batch's activations */
    float *input;      /* stage 0: a copy of the micro-batch; otherwise the received activation */
    int32_t *labels;   /* last stage: the micro-batch's labels */
    float *dy;         /* the gradient of the output: received, or the loss's on the last stage */
    int n;             /* samples */
    int mb;            /* the micro-batch it holds (of the step), for messages */
    herd_p2p recv_act, send_act, recv_grad, send_grad;
    /* --deterministic, a tied token table, the last stage: the slice's gradient of its
     * copy, on its way to the embedding's stage (pipeline_tied.c). */
    float *tied_grad;
    herd_p2p send_tied;
} herd_pp_slot;

typedef struct herd_pipeline {
    int stages, stage, replicas, replica;
    int micro_batches;   /* M: micro-batches per round; a step is grad_accum rounds */
    herd_pp_schedule_kind kind;
    int bounds[HERD_PP_MAX_STAGES + 1];
    herd_comm *job;      /* the stages' job: neighbours, metrics, agreements (not owned) */
    /* With tensor parallelism inside the stages, job is this part's pipelines (the
     * ranks holding the same part of every stage) and world the whole job, where the
     * partition is measured and agreed; tp splits the stage's layers. Otherwise world
     * is job and tp.size 0. */
    herd_comm *world;
    herd_tp_group tp;
    herd_comm *group;    /* this stage's data-parallel group (owned) */
    herd_model *m;       /* this stage, with storage (owned) */
    int micro_size;      /* samples per micro-batch (the loader's batch) */
    size_t in_per_sample, out_per_sample;
    herd_pp_slot *slots;
    int n_slots;
    herd_pp_action *actions;
    long max_in_flight_seen; /* the most slots occupied at once, for the tests */
    int in_flight;
    double partition_cost[HERD_PP_MAX_STAGES]; /* estimated share per stage */
    char partition_text[4096];                  /* printed by rank 0 at the start */
    /* --deterministic: the step's micro-batches as read (stage 0's images, the last
     * stage's labels), for a redo of the step on another grid. */
    herd_batch_store kept;
    /* A language model's head tied to the token table of an embedding on an earlier
     * stage (tied_stage): that stage and the last both hold the table (their tensor
     * part's rows), tied_floats long, at tied_at of their parameters (the last stage's
     * copy ends its own; 0 on the other stages); their gradients are summed after the
     * reduction (tied_sum). */
    bool tied;
    int tied_stage;
    size_t tied_floats, tied_at;
    herd_tied_sum tied_sum;
    /* --deterministic: the table's gradient is summed per slice, as one process sums it
     * inside the slice's backward: the last stage sends each slice's head gradient to the
     * embedding's stage, whose embedding adds to it (tied_slice_*), and its own copy adds
     * nothing to the exact sums (the reduction's tied sum then gives it the table's). */
    bool tied_slices;
    /* --deterministic --sync-bn on a model with batch norm: a step runs every slice of
     * the replica's step through the stage together, layer by layer (pipeline_syncbn.c). */
    bool synced_bn;
    struct herd_pp_synced *synced;
} herd_pipeline;

/* Splits the job and builds this rank's stage of `whole`: the partition from
 * cfg->stage_split or balanced by measured per-layer cost; parameters copied from
 * whole's slice when whole holds parameters, else initialised from cfg->seed (the
 * same values). Collective over job; errors are agreed before return, so every rank
 * fails alike. On a device backend job is a device communicator
 * (herd_comm_device_create): activations travel between stages through host memory,
 * and the stage groups it splits into reduce device gradients. */
herd_status herd_pipeline_create(const herd_train_config *cfg, herd_model *whole, herd_comm *job,
                                 herd_pipeline **out);
/* The same with tensor parallelism inside each stage: job is this rank's part's
 * pipelines (world's ranks holding part tp->rank; rank = replica x P + stage in it),
 * world the whole job (rank = (replica x P + stage) x T + part), and tp the stage's
 * tensor group. Collective over world. */
herd_status herd_pipeline_create_split(const herd_train_config *cfg, herd_model *whole,
                                       herd_comm *world, herd_comm *job, const herd_tp_group *tp,
                                       herd_pipeline **out);
void herd_pipeline_free(herd_pipeline *pp);

/* One optimizer step's forward and backward over n micro-batches read from loader
 * (every stage reads the same batches; stage 0 uses the images, the last stage the
 * labels), gradients accumulated and reduced in the stage group's buckets during the
 * last backward. Adds the last stage's loss, correct and samples to *s. */
herd_status herd_pipeline_forward_backward(herd_pipeline *pp, herd_step_plan *plan,
                                           herd_loader *loader, int n, float label_smoothing,
                                           uint64_t seed, herd_step_stats *s);
/* Loss and accuracy over ds through the pipeline: replica d evaluates the d-th of D
 * slices. Collective over the job; every rank gets the result. */
herd_status herd_pipeline_evaluate(herd_pipeline *pp, herd_dataset *ds, int batch_size,
                                   herd_eval_result *r);

/* The whole model's parameters, buffers and (with opt, on every rank alike) optimizer
 * state on job rank 0, into whole (holding storage there) and whole_opt: replica 0's
 * stages send their slices. Collective over the job; other ranks pass NULL wholes. */
herd_status herd_pipeline_gather(herd_pipeline *pp, herd_optimizer *opt, herd_model *whole,
                                 herd_optimizer *whole_opt);
/* The reverse: job rank 0's whole model and optimizer state go to every rank's stage
 * (replica 0 by point to point, then within each stage group). */
herd_status herd_pipeline_scatter(herd_pipeline *pp, herd_optimizer *opt, herd_model *whole,
                                  herd_optimizer *whole_opt);

/* A tied token table (pipeline_tied.c). find: whether this stage holds one of its two
 * copies, from whole (local). share: the floats of the stage's parameters that are the
 * whole model's (all but the last stage's copy). copy: the table's stage gives the last
 * stage its values, and with opt its optimizer state (of the first replica only when
 * first_replica; collective over the job). plan: the gradient sums of plan's reduced
 * gradients (its ZeRO slice, or all), set as plan->tied (collective, agreed).
 * check: replica 0's copy against its table, an error when they differ (collective
 * over world, agreed). */
herd_status herd_pipeline_tied_find(herd_pipeline *pp, const herd_model *whole);
size_t herd_pipeline_whole_share(const herd_pipeline *pp);
herd_status herd_pipeline_tied_copy(herd_pipeline *pp, herd_optimizer *opt, bool first_replica);
herd_status herd_pipeline_tied_plan(herd_pipeline *pp, herd_step_plan *plan);
herd_status herd_pipeline_tied_check(herd_pipeline *pp);
/* --deterministic's per-slice sums of a tied table (tied_slices). setup: after the
 * stage is built (the slots' buffers, the embedding starting from the head's gradient).
 * out: the last stage, after a slice's backward, sends its copy's gradient and zeroes it.
 * in: the embedding's stage, before a slice's backward, starts receiving it into the
 * table's gradient (the caller waits, timed). done: the slot's send out, before the slot
 * sends again and at a round's end. */
herd_status herd_pipeline_tied_slices_setup(herd_pipeline *pp, const herd_model *whole);
herd_status herd_pipeline_tied_slice_out(herd_pipeline *pp, herd_pp_slot *sl);
herd_status herd_pipeline_tied_slice_in(herd_pipeline *pp, herd_p2p *req);
herd_status herd_pipeline_tied_slice_done(herd_pipeline *pp, herd_pp_slot *sl);

/* Tensor parts inside the stages (pipeline_parts.c). take_part: this rank's part of
 * its stage from whole's parameters and buffers (through the host on a device).
 * move_parts: between the first replica's stage parts and world rank 0's whole model
 * (to_rank0: gathered; else handed out), parameters, buffers and, with opt, each
 * optimizer state (laid out as the parameters). Collective over world. */
herd_status herd_pipeline_take_part(herd_pipeline *pp, const herd_model *whole);
herd_status herd_pipeline_move_parts(herd_pipeline *pp, herd_optimizer *opt, herd_model *whole,
                                     herd_optimizer *whole_opt, bool to_rank0);
/* The index of stage s's first tensor among the whole model's. */
int herd_pipeline_stage_first_view(const herd_pipeline *pp, const herd_model *whole, int s);

/* --deterministic --sync-bn (pipeline_syncbn.c): one pass over the step's n slices (a
 * micro-batch each), all at once. Batch norm normalises over the global batch (every
 * slice of every replica, summed in the global batch's order), so a stage takes every
 * slice's input before its first layer runs: no two stages compute at once, the price of
 * one process's statistics. Gradients go into plan->exact (begun by the caller).
 * from_kept: a redo, the step's micro-batches as kept. Collective over the job. */
herd_status herd_pipeline_synced_pass(herd_pipeline *pp, herd_step_plan *plan, herd_loader *loader,
                                      int n, float label_smoothing, uint64_t seed, bool from_kept,
                                      herd_step_stats *s);
void herd_pipeline_synced_free(herd_pipeline *pp);

/* --deterministic (pipeline_exact.c): the index of the stage's first tensor among the
 * whole model's; the whole model's exact grid as a checkpoint's text, from every stage's
 * (collective over the job; "" without a grid), and a checkpoint's text into this
 * stage's grid. */
int herd_pipeline_first_view(const herd_pipeline *pp, const herd_model *whole);
herd_status herd_pipeline_exact_grid_text(herd_pipeline *pp, const herd_model *whole,
                                          const herd_exact_sum *e, char *buf, size_t size);
herd_status herd_pipeline_set_exact_grid_text(herd_pipeline *pp, const herd_model *whole,
                                              herd_exact_sum *e, const char *text);

#endif
