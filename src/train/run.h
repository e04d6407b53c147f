/* A training run's private state, shared by the files that run it: train.c (the
 * loop), train_config.c (its configuration), signature.c (what the ranks must hold
 * alike) and ckpt_steps.c (its checkpoints). Only src/train includes it. */
#ifndef HERD_TRAIN_RUN_H
#define HERD_TRAIN_RUN_H

#include <stdbool.h>

#include "herd/herd.h"
#include "obs/observer.h"
#include "train/batch_store.h"
#include "train/checkpoint.h"
#include "train/ckpt_dir.h"
#include "train/ckpt_writer.h"
#include "train/pipeline.h"
#include "train/restarts.h"
#include "train/step.h"
#include "train/tensor_par.h"

/* One step's figures on their way to every rank: loss, accuracy and samples, the
 * stop vote and the agreement on failures since the last step. They travel a step
 * late: the reduction starts when step k ends, ahead of step k+1's gradient buckets in
 * the communicator's queue, and herd_apply_step's wait_all completes it with them, so
 * on a slow link its round trip hides behind step k+1's forward and backward instead
 * of blocking every step. Not with step k's last gradient bucket: buckets are slices of the float
 * gradient buffer reduced on their wire (maybe 16-bit), while these sums are doubles
 * that must stay exact, and a separate reduction queued behind the last bucket would
 * still be waited for before step k+1. A stop, the epoch end and one process deliver
 * at once, so totals, checkpoints, logs and the callback see every step's figures,
 * the same numbers as before, only later. */
typedef struct herd_synced_pass herd_synced_pass;
typedef struct herd_exact_threads herd_exact_threads;

typedef struct step_metrics {
    double stats[8];    /* loss, correct, samples, stop vote, agreement (3), checkpoint vote:
                         * reduced in place */
    herd_status local;  /* this rank's part of the agreement */
    herd_progress p;    /* the step's progress; the reduced figures are filled in on arrival */
    herd_phase_times t; /* the step's own phases, for the observer */
    double train_time;  /* r->train_time after the step */
    double epoch_time;  /* the epoch's step time after the step */
    bool pending;       /* started, not delivered */
} step_metrics;

/* One rank's herd_train, from its arguments to its result. */
typedef struct run {
    herd_model *m;        /* what this rank trains: the model, or its pipeline stage */
    herd_model *whole;    /* the caller's model */
    herd_dataset *train, *test;
    herd_train_config cfg; /* effective: lr scaled, warmup resolved */
    herd_progress_fn progress;
    void *user;
    herd_comm *comm;
    /* The ranks that hold the same parameters and reduce their gradients: comm, or
     * with pipeline stages this stage's group (owned by pp). */
    herd_comm *dp;
    herd_pipeline *pp;      /* pipeline stages, or NULL */
    herd_tensor_par *tp;    /* tensor parallelism, or NULL */
    herd_comm *device_comm; /* gradients in GPU memory across ranks (owned), or NULL */
    herd_loss_scaler scaler;
    herd_loader *loader;
    herd_optimizer *opt;
    herd_step_plan plan;
    herd_zero zero;          /* --zero: the slices (plan.zero points here) */
    herd_timeline *timeline; /* --timeline, else NULL */
    herd_train_state state;
    herd_train_result *res;
    long steps_per_epoch;
    long first_step;      /* global_step when this run began (after a resume) */
    herd_ckpt_writer *writer; /* rank 0's background checkpoint writes, once one is made */
    long saved_step;          /* global_step of the last checkpoint made (-1: none) */
    double last_ckpt_time;    /* rank 0: when training began or the last checkpoint was made */
    bool ckpt_due;            /* --checkpoint-every-seconds voted for a checkpoint */
    herd_restart_log restarts; /* rank 0 of a supervised run (herd run --max-restarts) */
    double train_time;    /* seconds in training steps (excludes evaluation) */
    double train_samples; /* over all ranks */
    bool stop_requested;  /* a progress callback asked to stop */
    long clipped_steps;   /* steps --clip-grad-norm scaled down (this run) */
    herd_status deferred; /* a local failure between collectives, told at the next agreement */
    herd_observer *obs;   /* --logdir / --metrics (rank 0; NULL when not asked) */
    step_metrics metrics; /* the last step's, until delivered (here: it outlives a failure) */
    /* Rank 0 with pipeline stages: the whole model and its optimizer a resume read,
     * until they are handed to the stages. */
    herd_model *ckpt_whole;
    herd_optimizer *ckpt_opt;
    herd_ckpt_dir owner; /* rank 0: the checkpoint directory's lock, held until the end */
    /* --deterministic (exact_step.c): the exact sums (plan.exact points here) and the
     * step's micro-batches kept for a redo. */
    herd_exact_sum exact;
    herd_batch_store kept;
    herd_synced_pass *synced; /* --sync-bn's slices (exact_syncbn.c), once a step ran */
    herd_exact_threads *exact_threads; /* slices on threads (exact_threads.c), or NULL */
    /* The linear layers' exact ops (plan.exact_linear points here with fp32 on a backend
     * that has them); whole: micro-batches run whole (exact_step.c), their linear layers'
     * largest slice values per view in max_bits. */
    herd_exact_linear exact_linear;
    bool exact_whole;
    uint32_t *exact_max_bits;
    int synced_threads; /* --sync-bn's slices: layers on this many threads (exact_syncbn.c) */
} run;

/* train_config.c (and herd_train_config_check, public: the arguments alone, checked
 * before any rank talks to another; herd_train agrees on its result) */
herd_status herd_train_check_shapes(const herd_model *m, herd_dataset *train, herd_dataset *test);
/* The replicas of the model: ranks, or with pipeline stages the pipelines. */
int herd_run_replicas(const run *r);
/* --deterministic's samples per slice (--slice-size, or its default). */
int herd_slice_size(const herd_train_config *c);
/* r->cfg becomes the effective configuration (elastic fit, lr scaling, warmup). */
herd_status herd_run_resolve_config(run *r, const herd_train_config *cfg);
/* The pipeline's and ZeRO's arguments against the job and the model. */
herd_status herd_run_check_pipeline(const run *r);
herd_status herd_run_check_tensor(const run *r);
herd_status herd_run_check_zero(const run *r);

/* grid.c: collective; the pipeline stages (r->pp) and tensor parts (r->tp) of the
 * configuration, r->m this rank's part of the model, r->dp its data-parallel group. */
herd_status herd_run_build_grid(run *r);

/* exact_step.c: --deterministic. Setup refuses what the exact sums do not cover (the
 * same on every rank: model, data and configuration are agreed); a step runs its
 * n_micro micro-batches through them, again when the grid asks (every rank alike). */
herd_status herd_run_exact_setup(run *r);
herd_status herd_run_exact_micro_steps(run *r, int n_micro, uint64_t seed, herd_step_stats *s);
void herd_run_exact_free(run *r);
/* The place in the global batch of this rank's micro-batch j's slice i (its dropout
 * stream): the loader gives rank k of N micro-batch j as the global batch's (j * N + k)-th
 * piece of B samples, so its slice i is slice (j * N + k) * B / s + i. */
uint64_t herd_run_slice_place(const run *r, int j, int i);
/* A pass's start: the exact sums empty for its n_micro micro-batches; its slices here. */
int herd_run_exact_begin(run *r, int n_micro, bool written_first);
/* Slice i of micro-batch b (batch-major: an offset and a count). */
herd_batch herd_run_exact_slice(const run *r, const herd_batch *b, int i);
/* Micro-batch j of the step: from the loader (kept for a redo) or as kept. */
herd_status herd_run_exact_micro_batch(run *r, int j, int n_micro, bool from_loader,
                                       herd_step_stats *s, herd_batch *b);

/* exact_threads.c: --deterministic on `threads` threads, each slice whole on one, when
 * the model can (host memory, no pipeline stages or tensor parts, batch norm per slice);
 * else nothing (the slices run one after another). The pass is exact_step.c's pass. */
herd_status herd_run_exact_threads_setup(run *r, int threads);
herd_status herd_run_exact_threads_pass(run *r, int n_micro, uint64_t seed, bool from_loader,
                                        herd_step_stats *s);
void herd_run_exact_threads_free(run *r);

/* exact_syncbn.c: --deterministic --sync-bn on a model with batch norm (synced_bn): one
 * pass over the step's slices, all of this rank's at once, layer by layer, batch norm's
 * statistics over the global batch. */
bool herd_run_synced_bn(const run *r);
herd_status herd_run_synced_pass(run *r, int n_micro, uint64_t seed, bool from_loader,
                                 herd_step_stats *s);
void herd_run_synced_free(run *r);

/* signature.c: collective; every rank learns of a difference and which. */
herd_status herd_run_check_signature(run *r);

/* ckpt_steps.c */
/* Collective: rank 0 claims the directory and, with --resume, reads the checkpoint;
 * every rank takes its part. */
herd_status herd_run_prepare_checkpoints(run *r);
/* Collective: every rank calls it; rank 0 writes. */
herd_status herd_run_save_checkpoint(run *r);
/* Collective: rank 0 waits for its background write; every rank learns the outcome. */
herd_status herd_run_finish_checkpoint_writes(run *r);
/* The run's counters (and --deterministic's grid) from the state a resume read (or the
 * fresh state's zeros). */
herd_status herd_run_resume_counters(run *r);
/* Frees what whole_for_checkpoint made for rank 0 (the caller's model stays). */
void herd_run_release_whole(run *r, herd_model *m, herd_optimizer *o);

#endif
