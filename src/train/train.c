/* The training loop: epochs of shuffled batches (each rank its own shard), LR
 * schedule, gradient reduction, evaluation, checkpoints and resume, progress. */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/testhook.h"
#include "dist/replica.h"
#include "dist/signature.h"
#include "obs/observer.h"
#include "train/checkpoint.h"
#include "train/ckpt_dir.h"
#include "train/ckpt_writer.h"
#include "train/restarts.h"
#include "train/pipeline.h"
#include "train/step.h"

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

/* An epoch's figures over all ranks; a resumed epoch's start with the checkpoint's. */
typedef struct epoch_totals {
    double sums[3];     /* loss, correct, samples */
    double run_samples; /* this run's share of them: the throughput's */
} epoch_totals;

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
} run;

static herd_status validate(const herd_train_config *c)
{
    if (c->epochs <= 0 || c->batch_size <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "epochs (%d) and batch size (%d) must be positive",
                        c->epochs, c->batch_size);
    if (!(c->lr > 0) || !isfinite(c->lr))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "learning rate must be positive, got %g", c->lr);
    if (c->momentum < 0 || c->momentum >= 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "momentum must be in [0, 1), got %g", c->momentum);
    if (c->nesterov && c->momentum == 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "Nesterov momentum needs --momentum > 0");
    if (c->weight_decay < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "weight decay must be >= 0, got %g", c->weight_decay);
    if (c->label_smoothing < 0 || c->label_smoothing >= 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "label smoothing must be in [0, 1), got %g",
                        c->label_smoothing);
    if (c->warmup_epochs > c->epochs)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "warmup epochs must be at most the epochs, got %g",
                        c->warmup_epochs);
    if (c->resume && !c->checkpoint_dir)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "--resume needs --checkpoint-dir");
    if (c->checkpoint_dir && !*c->checkpoint_dir)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "--checkpoint-dir is empty: name a directory");
    if (c->n_milestones < 0 || c->n_milestones > HERD_MAX_MILESTONES)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "at most %d milestones", HERD_MAX_MILESTONES);
    if (c->grad_accum < 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "gradient accumulation needs at least 1 micro-batch");
    if ((unsigned)c->compress > HERD_COMPRESS_BF16)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "compress is 0 (none), 1 (fp16) or 2 (bf16)");
    if (!(c->bucket_mb > 0))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bucket size must be positive, got %g MiB", c->bucket_mb);
    if (c->pipeline_stages > HERD_PP_MAX_STAGES || c->micro_batches < 0 ||
        c->pipeline_stages < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "pipeline stages must be in 1..%d and micro-batches at "
                        "least 1, got %d and %d", HERD_PP_MAX_STAGES, c->pipeline_stages,
                        c->micro_batches);
    if ((unsigned)c->pp_schedule > HERD_PP_SCHEDULE_GPIPE)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "pipeline schedule is 0 (1f1b) or 1 (gpipe)");
    if (c->micro_batches > 1 && c->batch_size % c->micro_batches != 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "--batch-size %d does not divide into --micro-batches %d; pick a batch size "
                        "that is a multiple of the micro-batches", c->batch_size, c->micro_batches);
    if (c->zero_stage < 0 || c->zero_stage > 2)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "ZeRO stage %d is not offered: 0 (off), 1 "
                        "(optimizer state sharded) or 2 (and gradients)", c->zero_stage);
    if (!(c->clip_grad_norm >= 0.0f) || !isfinite(c->clip_grad_norm))
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "gradient clipping needs a maximum norm > 0 (or 0 for none), got %g",
                        (double)c->clip_grad_norm);
    if (c->dynamic_loss_scale && (!(c->loss_scale_init >= 1.0f) || !isfinite(c->loss_scale_init) ||
                                  c->loss_scale_window < 1))
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "loss scaling needs an initial scale >= 1 (got %g) and a window >= 1 step "
                        "(got %d)",
                        (double)c->loss_scale_init, c->loss_scale_window);
    return HERD_OK;
}

/* The replicas of the model: ranks, or with pipeline stages the pipelines. */
static int replicas(const run *r)
{
    int stages = r->cfg.pipeline_stages;
    return stages > 1 && r->comm->size % stages == 0 ? r->comm->size / stages : r->comm->size;
}

/* An elastic run on another number of replicas than its batch was given for:
 * keep the global batch (fewest micro-batches whose size is at most the given one)
 * or the per-rank batch with lr scaled. Every rank computes the same. */
static herd_status resolve_elastic(run *r)
{
    herd_train_config *c = &r->cfg;
    int stages = c->pipeline_stages > 1 ? c->pipeline_stages : 1;
    int n0 = c->elastic_ranks, n = replicas(r);
    if (n0 < 0 || (unsigned)c->elastic_batch > HERD_ELASTIC_SCALE)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "elastic ranks must be >= 0 (got %d) and the elastic "
                        "batch keep or scale", n0);
    if (n0 % stages != 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "elastic ranks %d are not whole pipelines of %d stages",
                        n0, stages);
    n0 /= stages; /* the replicas the batch was given for: ranks count every stage */
    if (n0 == 0 || n0 == n)
        return HERD_OK;
    long g0 = (long)n0 * c->batch_size * c->grad_accum;
    bool rank0 = r->comm->rank == 0;
    if (c->elastic_batch == HERD_ELASTIC_SCALE) {
        long g = (long)n * c->batch_size * c->grad_accum;
        float lr = c->lr_scaling ? c->lr : c->lr * (float)g / (float)g0; /* lr scaling sees g itself */
        if (rank0) /* said even under --quiet, as a restart is: the run differs from its flags */
            herd_log(HERD_LOG_WARNING, "elastic: %d replicas instead of %d: per-rank batch %d kept, "
                     "global batch %ld (was %ld), lr %g%s", n, n0, c->batch_size, g, g0, (double)lr,
                     c->lr_scaling ? " (--lr-scaling follows the global batch)" : " (linear rule)");
        c->lr = lr;
        return HERD_OK;
    }
    long micro_unit = c->micro_batches > 1 ? c->micro_batches : 1;
    long per = g0 % n == 0 ? g0 / n : 0; /* samples per replica and step */
    int accum = 0, batch = 0;
    if (per > 0 && per % c->batch_size == 0 && per / c->batch_size <= 4096) {
        batch = c->batch_size;
        accum = (int)(per / c->batch_size);
    }
    for (long a = 1; !accum && per > 0 && a <= 4096 && a <= per; a++)
        if (per % a == 0 && per / a <= c->batch_size && (per / a) % micro_unit == 0) {
            accum = (int)a;
            batch = (int)(per / a);
        }
    if (!accum)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "elastic: the global batch %ld (%d replicas x %d x %d) cannot be kept on %d "
                        "replicas%s; restart with a number of ranks that divides it, or "
                        "--elastic-batch scale", g0, n0, c->batch_size, c->grad_accum, n,
                        per ? " in whole micro-batches" : "");
    if (rank0)
        herd_log(HERD_LOG_WARNING, "elastic: %d replicas instead of %d: global batch %ld kept as %d x "
                 "%d x %d (--batch-size %d --grad-accum %d)", n, n0, g0, n, batch, accum, batch, accum);
    c->batch_size = batch;
    c->grad_accum = accum;
    return HERD_OK;
}

/* Linear scaling rule with gradual warmup (Goyal et al. 2017), after the elastic fit. */
static herd_status resolve_config(run *r, const herd_train_config *cfg)
{
    r->cfg = *cfg;
    if (r->cfg.pipeline_stages < 1) /* a config from before pipelines: zeroed */
        r->cfg.pipeline_stages = 1;
    if (r->cfg.micro_batches < 1)
        r->cfg.micro_batches = 1;
    HERD_TRY(resolve_elastic(r));
    long global_batch = (long)r->cfg.batch_size * r->cfg.grad_accum * replicas(r);
    if (cfg->lr_scaling)
        r->cfg.lr = cfg->lr * (float)global_batch / 256.0f;
    if (cfg->warmup_epochs < 0) /* "auto" */
        r->cfg.warmup_epochs = cfg->lr_scaling ? (cfg->epochs < 5 ? (float)cfg->epochs : 5.0f) : 0.0f;
    return HERD_OK;
}

/* Every field of herd_train_config is either compared below or named here as not
 * needing to be: threads (each rank's own arithmetic; the reduced gradients are the
 * same), checkpoint paths, logdir, histograms, metrics_path and log_every (rank 0
 * writes them alone, no collective) and dist. A new field changes the size: compare
 * it (or add it to the list above), then update the size. */
#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(herd_train_config) == 288,
               "herd_train_config changed: add the new field to check_signature");
#endif

static void sign_config(herd_signature *s, const herd_train_config *c)
{
    herd_signature_add(s, "epochs", "%d", c->epochs);
    herd_signature_add(s, "batch_size", "%d", c->batch_size);
    herd_signature_add(s, "lr", "%.9g", c->lr); /* effective: lr scaling resolved */
    herd_signature_add(s, "optimizer", "%s", c->optimizer == HERD_OPT_SGD ? "sgd" : "adamw");
    herd_signature_add(s, "momentum", "%.9g", c->momentum);
    herd_signature_add(s, "nesterov", "%d", c->nesterov);
    herd_signature_add(s, "weight_decay", "%.9g", c->weight_decay);
    herd_signature_add(s, "decoupled_decay", "%d", c->decoupled_decay);
    herd_signature_add(s, "decay_bn_bias", "%d", c->decay_bn_bias);
    herd_signature_add(s, "adamw_betas_eps", "%.9g,%.9g,%.9g", c->beta1, c->beta2, c->eps);
    herd_signature_add(s, "schedule", "%d", c->schedule);
    char milestones[HERD_MAX_MILESTONES * 12 + 1] = "";
    for (int i = 0; i < c->n_milestones; i++) {
        size_t len = strlen(milestones);
        snprintf(milestones + len, sizeof milestones - len, "%s%d", i ? "," : "", c->milestones[i]);
    }
    herd_signature_add(s, "milestones", "%s", milestones);
    herd_signature_add(s, "gamma", "%.9g", c->gamma);
    herd_signature_add(s, "warmup_epochs", "%.9g", c->warmup_epochs); /* resolved */
    herd_signature_add(s, "augment", "%d", c->augment);
    herd_signature_add(s, "label_smoothing", "%.9g", c->label_smoothing);
    herd_signature_add(s, "seed", "%llu", (unsigned long long)c->seed);
    herd_signature_add(s, "checkpoints", "%d", c->checkpoint_dir != NULL);
    herd_signature_add(s, "resume", "%d", c->resume);
    herd_signature_add(s, "eval_every", "%d", c->eval_every);
    herd_signature_add(s, "max_steps", "%ld", c->max_steps);
    herd_signature_add(s, "lr_scaling", "%d", c->lr_scaling);
    herd_signature_add(s, "sync_bn", "%d", c->sync_bn);
    herd_signature_add(s, "compress", "%s", herd_compress_name(c->compress));
    herd_signature_add(s, "grad_accum", "%d", c->grad_accum);
    herd_signature_add(s, "bucket_mb", "%.17g", c->bucket_mb);
    herd_signature_add(s, "check_replicas", "%d", c->check_replicas);
    if (c->dynamic_loss_scale)
        herd_signature_add(s, "loss_scale", "dynamic %.9g/%d", c->loss_scale_init,
                           c->loss_scale_window);
    else
        herd_signature_add(s, "loss_scale", "none");
    herd_signature_add(s, "clip_grad_norm", "%.9g", (double)c->clip_grad_norm);
    herd_signature_add(s, "on_nonfinite", "%s", c->skip_nonfinite ? "skip" : "stop");
    herd_signature_add(s, "zero", "%d", c->zero_stage);
    herd_signature_add(s, "pipeline", "%d stages, %d micro-batches, %s, split %s",
                       c->pipeline_stages, c->micro_batches,
                       c->pp_schedule == HERD_PP_SCHEDULE_GPIPE ? "gpipe" : "1f1b",
                       c->stage_split ? c->stage_split : "by cost");
    /* The trace's flushes are collective: a rank without it would leave the others waiting. */
    herd_signature_add(s, "timeline", "%d", c->timeline_path != NULL);
    herd_signature_add(s, "checkpoint_every", "%ld steps, %.17g s", c->checkpoint_every_steps,
                       c->checkpoint_every_s);
    herd_signature_add(s, "run_attempt", "%d", c->run_attempt);
    herd_signature_add(s, "elastic", "%s from %d", c->elastic_batch == HERD_ELASTIC_SCALE ? "scale" : "keep",
                       c->elastic_ranks);
}

/* The model, layer by layer, and the data: every rank must build the same graph. */
static void sign_model_and_data(herd_signature *s, const run *r)
{
    const herd_model *m = r->m;
    herd_signature_add(s, "model", "%s", m->name);
    herd_signature_add(s, "device", "%s", m->be->name);
    herd_signature_add(s, "precision", "%s", herd_precision_name(m->precision));
    herd_signature_add(s, "input", "%dx%dx%d, %d classes", m->in_c, m->in_h, m->in_w, m->classes);
    for (int i = 0; i < m->n_layers; i++) {
        const herd_layer_spec *sp = &m->layers[i].spec;
        herd_shape o = m->layers[i].out_shape;
        char name[96], inputs[HERD_MAX_INPUTS * 12 + 1] = "";
        for (int k = 0; k < sp->n_inputs; k++) {
            size_t len = strlen(inputs);
            snprintf(inputs + len, sizeof inputs - len, "%s%d", k ? "," : "", sp->inputs[k]);
        }
        snprintf(name, sizeof name, "layer %d", i);
        herd_signature_add(s, name,
                           "%s %s out=%d kernel=%d stride=%d pad=%d bias=%d dropout=%.9g "
                           "eps=%.9g momentum=%.9g in=[%s] -> %dx%dx%d",
                           sp->type, sp->name, sp->out, sp->kernel, sp->stride, sp->pad, sp->bias,
                           sp->p, sp->eps, sp->momentum, inputs, o.c, o.h, o.w);
    }
    for (int i = 0; i < m->n_views; i++) {
        const herd_tensor_view *v = &m->views[i];
        char name[112];
        snprintf(name, sizeof name, "tensor %d", i);
        herd_signature_add(s, name, "%s [%lld,%lld,%lld,%lld]/%d at %zu%s%s", v->name,
                           (long long)v->shape[0], (long long)v->shape[1], (long long)v->shape[2],
                           (long long)v->shape[3], v->ndim, v->offset,
                           v->is_buffer ? " buffer" : "", v->no_decay ? " no-decay" : "");
    }
    /* After the layers: the first difference named is the layer's, not the total's. */
    herd_signature_add(s, "parameters", "%zu", m->n_param_floats);
    herd_signature_add(s, "buffers", "%zu", m->n_buffer_floats);
    int c, h, w, classes;
    herd_dataset_shape(r->train, &c, &h, &w, &classes);
    herd_signature_add(s, "train_data", "%zu samples %dx%dx%d, %d classes", r->train->n, c, h, w,
                       classes);
    if (r->test) {
        herd_dataset_shape(r->test, &c, &h, &w, &classes);
        herd_signature_add(s, "test_data", "%zu samples %dx%dx%d, %d classes", r->test->n, c, h,
                           w, classes);
    } else {
        herd_signature_add(s, "test_data", "none");
    }
}

static herd_status check_signature(run *r)
{
    herd_signature s = {0};
    herd_signature_add(&s, "herd_version", "%s", HERD_VERSION);
    sign_model_and_data(&s, r);
    sign_config(&s, &r->cfg);
    herd_status st = herd_signature_check(r->comm, &s);
    herd_signature_free(&s);
    return st;
}

/* The data-parallel ranks for the checkpoint's pieces, which travel in host memory:
 * a device communicator's transfers take device memory, the one it wraps host memory. */
static herd_comm *ckpt_comm(const run *r)
{
    return herd_comm_host_side(r->dp);
}

/* Rank 0's model, buffers and optimizer state become everyone's (with pipeline
 * stages: the first replica's stage becomes its group's). */
static herd_status broadcast_state(run *r)
{
    herd_comm *c = r->comm;
    if (c->size == 1)
        return HERD_OK;
    herd_model *m = r->m;
    herd_comm *dp = r->dp;
    if (dp->size > 1) {
        HERD_TRY(herd_comm_broadcast_buffer(dp, m->be, m->params, m->n_param_floats * sizeof(float), 0));
        HERD_TRY(herd_comm_broadcast_buffer(dp, m->be, m->buffers, m->n_buffer_floats * sizeof(float), 0));
        /* ZeRO: each rank's state is its own slice (zero, or scattered at a resume). */
        for (int i = 0; !r->cfg.zero_stage && i < herd_optimizer_state_count(r->opt); i++) {
            size_t n;
            float *buf = herd_optimizer_state(r->opt, i, NULL, &n);
            HERD_TRY(herd_comm_broadcast_buffer(dp, m->be, buf, n * sizeof(float), 0));
        }
    }
    long steps = herd_optimizer_steps(r->opt);
    HERD_TRY(c->ops->broadcast(c, &steps, sizeof steps, 0));
    herd_optimizer_set_steps(r->opt, steps);
    return c->ops->broadcast(c, &r->state, sizeof r->state, 0);
}

/* Rank 0 with pipeline stages: the whole model with parameters and an optimizer for
 * it, to write or read a checkpoint (the caller's model when it holds parameters;
 * otherwise a copy for the moment: rank 0 then holds the whole model briefly). */
static herd_status whole_for_checkpoint(run *r, herd_model **m, herd_optimizer **o)
{
    *m = r->whole;
    *o = NULL;
    if (!r->whole->params) {
        herd_model *w = herd_xcalloc(1, sizeof *w);
        if (!w)
            return HERD_ERR_NOMEM;
        herd_status st = herd_model_build_stage(w, r->whole, 0, r->whole->n_layers, true, false,
                                                r->cfg.seed);
        if (st != HERD_OK) {
            herd_model_free(w);
            return st;
        }
        *m = w;
    }
    herd_status st = herd_optimizer_create(&r->cfg, *m, o);
    if (st != HERD_OK && *m != r->whole) {
        herd_model_free(*m);
        *m = NULL;
    }
    return st;
}

static void release_whole(run *r, herd_model *m, herd_optimizer *o)
{
    herd_optimizer_free(o);
    if (m != r->whole)
        herd_model_free(m);
}

/* Pipeline stages with ZeRO: a checkpoint travels through each stage's first replica,
 * which holds its stage's whole optimizer state for the moment (others: their own).
 * Collective over the job: an allocation that fails stops every rank. */
static herd_status stage_optimizer_whole(run *r, herd_optimizer **out)
{
    *out = r->opt;
    if (!r->cfg.zero_stage)
        return HERD_OK;
    herd_status st = HERD_OK;
    if (r->dp->rank == 0 && (st = herd_optimizer_create(&r->cfg, r->m, out)) != HERD_OK)
        *out = r->opt;
    return herd_agree(r->comm, st, "holding a stage's optimizer state for a checkpoint");
}

static void stage_optimizer_release(run *r, herd_optimizer *o)
{
    if (o != r->opt)
        herd_optimizer_free(o);
}

/* The state this run starts from, in this run's terms (rank 0). */
static herd_status load_resume_state(run *r)
{
    const herd_train_config *c = &r->cfg;
    bool found = false;
    herd_train_state st;
    herd_model *m = r->m;
    herd_optimizer *o = r->opt;
    /* Pipeline stages and ZeRO's slices take their parts of a whole model. */
    bool parts = r->pp || c->zero_stage;
    if (parts) {
        HERD_TRY(whole_for_checkpoint(r, &r->ckpt_whole, &r->ckpt_opt));
        m = r->ckpt_whole;
        o = r->ckpt_opt;
    }
    HERD_TRY(herd_checkpoint_load_latest(c->checkpoint_dir, m, o, &st, &found));
    if (parts && found) /* the parts take their steps from here, then broadcast_state's */
        herd_optimizer_set_steps(r->opt, herd_optimizer_steps(o));
    if (parts && !found) {
        release_whole(r, r->ckpt_whole, r->ckpt_opt);
        r->ckpt_whole = NULL;
        r->ckpt_opt = NULL;
    }
    if (found) {
        HERD_TRY(herd_train_state_continue(&st, &r->state, r->steps_per_epoch, c->checkpoint_dir));
        if (st.epoch >= c->epochs)
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "the checkpoint in '%s' has finished %d epochs and --epochs is %d: nothing "
                            "is left to train; raise --epochs to train on, or start without --resume",
                            c->checkpoint_dir, st.epoch, c->epochs);
        r->state = st;
    }
    /* The metrics file goes back to the checkpoint, so the lines of steps trained
     * again (and a partial epoch's line) are not written twice. */
    return herd_observer_resume(r->obs, r->state.epoch, r->state.global_step);
}

/* Rank 0, the only writer, claims the directory (ckpt_dir.h); a supervised restart
 * waits a while for its predecessor to exit and drop the lock. */
static herd_status claim_checkpoint_dir(run *r)
{
    const herd_train_state *s = &r->state;
    herd_run_identity id = {.model = r->whole->name, .parameters = herd_model_param_count(r->whole),
                            .data = r->train->spec, .train_samples = (long)r->train->n,
                            .seed = r->cfg.seed,
                            .global_batch = (long)s->batch_size * s->grad_accum * s->ranks};
    return herd_ckpt_dir_claim(&r->owner, r->cfg.checkpoint_dir, &id, r->cfg.resume,
                               r->cfg.run_attempt > 1 ? 30.0 : 0.0);
}

/* Rank 0 claims the directory, clears interrupted checkpoint writes and, with --resume,
 * reads the checkpoint and shares it, so ranks need no shared file system; its outcome
 * travels first so that a failure stops every rank, not only rank 0. */
static herd_status prepare_checkpoints(run *r)
{
    long outcome = HERD_OK;
    char msg[1024] = "";
    if (r->comm->rank == 0) {
        int removed = 0;
        herd_status s = claim_checkpoint_dir(r);
        if (s == HERD_OK)
            s = herd_checkpoint_remove_stale(r->cfg.checkpoint_dir, &removed);
        r->res->stale_tmp_removed = removed;
        if (s == HERD_OK && r->cfg.resume)
            s = load_resume_state(r);
        outcome = s;
        if (s != HERD_OK)
            snprintf(msg, sizeof msg, "%s", herd_last_error());
    }
    if (r->comm->size > 1) {
        HERD_TRY(r->comm->ops->broadcast(r->comm, &outcome, sizeof outcome, 0));
        HERD_TRY(r->comm->ops->broadcast(r->comm, msg, sizeof msg, 0));
    }
    if (outcome != HERD_OK)
        return r->comm->rank == 0 ? (herd_status)outcome
                                  : HERD_ERR((herd_status)outcome, "rank 0 could not use the checkpoint "
                                                             "directory: %s", msg);
    if (!r->pp && !r->cfg.zero_stage)
        return HERD_OK;
    /* Rank 0 read the whole model: each stage of the first replica takes its slice
     * (broadcast_state then gives it to the stage's group), or each rank its ZeRO slice
     * of the optimizer state (the parameters are broadcast whole). */
    long loaded = r->ckpt_whole != NULL;
    HERD_TRY(r->comm->ops->broadcast(r->comm, &loaded, sizeof loaded, 0));
    herd_status st = HERD_OK;
    herd_optimizer *stage_opt = r->opt;
    if (loaded && r->pp)
        st = stage_optimizer_whole(r, &stage_opt);
    if (loaded && r->pp && st == HERD_OK)
        st = herd_pipeline_scatter(r->pp, stage_opt, r->ckpt_whole, r->ckpt_opt);
    if (loaded && r->cfg.zero_stage && st == HERD_OK) /* each stage's first replica, or rank 0 */
        st = herd_zero_scatter_state(&r->zero, ckpt_comm(r), r->pp ? stage_opt : r->ckpt_opt, r->opt);
    stage_optimizer_release(r, stage_opt);
    release_whole(r, r->ckpt_whole, r->ckpt_opt);
    r->ckpt_whole = NULL;
    r->ckpt_opt = NULL;
    return st;
}

/* Per-rank running statistics (no --sync-bn) are averaged before they are used, so
 * evaluation and checkpoints see one model; training itself uses batch statistics. */
static herd_status average_buffers(run *r)
{
    herd_comm *c = r->dp;
    if (c->size == 1 || r->cfg.sync_bn || r->m->n_buffer_floats == 0)
        return HERD_OK;
    HERD_TRY(c->ops->allreduce_start(c, r->m->buffers, r->m->n_buffer_floats, 1.0f / (float)c->size,
                                     HERD_WIRE_FP32, "batch-norm statistics"));
    return c->ops->wait_all(c);
}

static herd_status evaluate(run *r, herd_progress *p)
{
    HERD_TRY(herd_step_params_ready(&r->plan));
    herd_eval_result ev;
    double t0 = herd_now();
    if (r->pp)
        /* In micro-batches: the activations a stage holds stay what training sized. */
        HERD_TRY(herd_pipeline_evaluate(r->pp, r->test, r->pp->micro_size, &ev));
    else
        HERD_TRY(herd_eval_dataset(r->m, r->test, r->cfg.batch_size, r->comm, &ev));
    if (r->timeline)
        herd_timeline_add(r->timeline, HERD_TL_EVALUATE, NULL, t0, herd_now());
    p->evaluated = true;
    p->test_loss = r->res->test_loss = ev.loss;
    p->test_acc = r->res->test_acc = ev.acc;
    return HERD_OK;
}

/* The run's counters go into the checkpoint's state and come back from it (a state
 * without them, fresh or older, holds 0: counting starts there, the scale stays). */
static void save_counters(run *r)
{
    r->state.clipped_steps = r->clipped_steps;
    r->state.skipped_steps = r->scaler.skipped;
    r->state.loss_scale = r->cfg.dynamic_loss_scale ? r->scaler.scale : 0.0;
    r->state.loss_scale_clean = r->scaler.clean_steps;
}

static void resume_counters(run *r)
{
    r->clipped_steps = r->state.clipped_steps;
    r->scaler.skipped = r->state.skipped_steps;
    if (r->cfg.dynamic_loss_scale && r->state.loss_scale > 0) {
        r->scaler.scale = (float)r->state.loss_scale;
        r->scaler.clean_steps = (int)r->state.loss_scale_clean;
    }
}

/* Every rank calls it; rank 0 writes. With pipeline stages the first replica's stages
 * send rank 0 their slices, so the file holds the whole model whatever the grid. */
static herd_status save_checkpoint(run *r)
{
    HERD_TRY(herd_step_params_ready(&r->plan));
    double t0 = herd_now();
    herd_status st = HERD_OK;
    bool rank0 = r->comm->rank == 0;
    save_counters(r);
    if (r->cfg.zero_stage && !r->pp) {
        st = herd_zero_save(&r->zero, ckpt_comm(r), r->cfg.checkpoint_dir, r->m, r->opt, &r->state);
    } else if (!r->pp) {
        /* Copied now, written by the writer's thread while training goes on; this
         * returns the previous write's outcome. */
        if (rank0 && !r->writer)
            st = herd_ckpt_writer_create(&r->writer);
        if (rank0 && st == HERD_OK)
            st = herd_ckpt_writer_submit(r->writer, r->cfg.checkpoint_dir, r->m, r->opt, &r->state);
    } else {
        herd_model *w = NULL;
        herd_optimizer *wo = NULL;
        if (rank0)
            st = whole_for_checkpoint(r, &w, &wo);
        st = herd_agree(r->comm, st, "preparing the checkpoint");
        herd_optimizer *stage_opt = r->opt;
        if (st == HERD_OK)
            st = stage_optimizer_whole(r, &stage_opt);
        if (st == HERD_OK && r->cfg.zero_stage)
            st = herd_zero_gather_state(&r->zero, ckpt_comm(r), r->opt, stage_opt);
        if (st == HERD_OK)
            st = herd_pipeline_gather(r->pp, stage_opt, w, wo);
        stage_optimizer_release(r, stage_opt);
        if (st == HERD_OK && rank0) {
            herd_optimizer_set_steps(wo, herd_optimizer_steps(r->opt));
            st = herd_checkpoint_save(r->cfg.checkpoint_dir, w, wo, &r->state, NULL);
        }
        release_whole(r, w, wo);
    }
    HERD_TRY(st);
    r->saved_step = r->state.global_step;
    r->last_ckpt_time = herd_now();
    r->ckpt_due = false;
    /* The writer's event (the copy, when a thread writes); stages only hand their slices over. */
    if (r->timeline && rank0)
        herd_timeline_add(r->timeline, HERD_TL_CHECKPOINT, NULL, t0, r->last_ckpt_time);
    return HERD_OK;
}

/* Rank 0 waits for the background write in progress; every rank learns its outcome. */
static herd_status finish_checkpoint_writes(run *r)
{
    herd_status st = r->writer ? herd_ckpt_writer_wait(r->writer) : HERD_OK;
    return herd_agree(r->comm, st, "writing the last checkpoint in the background");
}

/* Collective: the trace starts; the communicator records its reductions into it. */
static herd_status start_timeline(run *r)
{
    size_t per_step = (size_t)r->cfg.grad_accum * r->cfg.micro_batches *
                      (2 * (size_t)r->m->n_layers + 9) + 4;
    HERD_TRY(herd_timeline_open(r->cfg.timeline_path, r->comm, per_step, &r->timeline));
    r->plan.timeline = r->timeline;
    return HERD_OK;
}

/* Collective: merges the last events and finishes the file. After a failure
 * (completed = false) it only frees the trace. */
static herd_status stop_timeline(run *r, bool completed)
{
    herd_timeline *tl = r->timeline;
    r->plan.timeline = r->timeline = NULL;
    if (!tl)
        return HERD_OK;
    if (!completed) {
        herd_timeline_free(tl);
        return HERD_OK;
    }
    return herd_timeline_close(tl);
}

/* Collective: every rank learns whether any failed (mine, or a failure deferred
 * since the last agreement) and all stop together. */
static herd_status agree(run *r, herd_status mine, const char *what)
{
    if (mine == HERD_OK)
        mine = r->deferred;
    return herd_agree(r->comm, mine, what);
}

/* Tells the stall inspector what this rank is doing, with its position in training. */
static void activity(run *r, const char *what)
{
    char buf[96];
    snprintf(buf, sizeof buf, "epoch %d step %ld: %s", r->state.epoch + 1, r->state.global_step + 1,
             what);
    r->comm->ops->set_activity(r->comm, buf);
}

/* The "diverge" test hook: flips the lowest mantissa bit of the first weight on this
 * rank (through the backend's copies, which are memcpy on the CPU). */
static herd_status flip_weight_bit(run *r)
{
    HERD_TRY(herd_step_params_ready(&r->plan));
    const herd_backend *be = r->m->be;
    uint32_t bits;
    HERD_TRY(be->memcpy_d2h(&bits, r->m->params, sizeof bits));
    bits ^= 1;
    return be->memcpy_h2d(r->m->params, &bits, sizeof bits);
}

/* One optimizer step at schedule position sched_step: K micro-batches from the
 * loader, reduction, update. *has is false when the epoch had no batch left. */
static herd_status train_step(run *r, long sched_step, herd_step_stats *s, bool *has)
{
    const herd_train_config *cfg = &r->cfg;
    float lr = herd_lr_at(cfg, sched_step, r->steps_per_epoch);
    uint64_t seed = herd_mix64(cfg->seed, (uint64_t)r->state.global_step);
    /* Every rank sees the same number of batches per epoch; the epoch's last step may
     * have fewer than K micro-batches left. */
    long left = herd_loader_batches_left(r->loader);
    memset(s, 0, sizeof *s);
    *has = left > 0;
    if (!*has)
        return HERD_OK;
    int per_step = cfg->grad_accum * cfg->micro_batches;
    int n_micro = left < per_step ? (int)left : per_step;
    /* Inside a step the other ranks wait in its reductions: a failure here ends the
     * job through the caller's herd_dist_abort or the stall timeout (herd.h). */
    HERD_TRY(herd_fail_point("step", r->comm->rank));
    if (r->state.global_step == 1 && herd_test_hook("stop", r->comm->rank))
        raise(SIGSTOP); /* the stall tests: a rank that stops between two collectives */
    if (r->timeline)
        herd_timeline_begin_step(r->timeline, r->state.epoch + 1, r->state.global_step + 1);
    double t0 = herd_now();
    for (int micro = 0; micro < n_micro && !r->pp; micro++) {
        herd_batch b;
        activity(r, "waiting for the data loader");
        HERD_TRY(herd_loader_next(r->loader, &b, has));
        if (!*has)
            return HERD_ERR(HERD_ERR_INTERNAL, "the loader ended the epoch %ld batches early",
                            left - micro);
        s->t.data_wait += b.wait_s;
        if (r->timeline) { /* the loader's own measure: the trace agrees with the metrics */
            double t = herd_now();
            herd_timeline_add(r->timeline, HERD_TL_DATA_WAIT, NULL, t - b.wait_s, t);
        }
        activity(r, "forward and backward");
        HERD_TRY(herd_micro_step(r->m, &r->plan, &b, micro, n_micro, cfg->label_smoothing,
                                 herd_mix64(seed, (uint64_t)micro), s));
    }
    if (r->pp)
        HERD_TRY(herd_pipeline_forward_backward(r->pp, &r->plan, r->loader, n_micro,
                                                cfg->label_smoothing, seed, s));
    activity(r, "waiting for gradient reductions");
    r->plan.step = r->state.global_step + 1;
    HERD_TRY(herd_apply_step(r->m, r->opt, &r->plan, lr, s));
    double t1 = herd_now();
    s->t.total = t1 - t0;
    if (r->timeline)
        herd_timeline_add(r->timeline, HERD_TL_STEP, NULL, t0, t1);
    /* Per-rank batch-norm statistics differ by design (only --sync-bn shares them). */
    size_t buffers = cfg->sync_bn ? r->m->n_buffer_floats : 0;
    if (r->state.global_step == 0 && herd_test_hook("diverge", r->comm->rank))
        HERD_TRY(flip_weight_bit(r)); /* the test hook */
    if (cfg->check_replicas) {
        HERD_TRY(herd_fail_point("replicas", r->comm->rank));
        HERD_TRY(herd_check_replicas_on(r->dp, r->m->be, &r->plan.replica_stage, r->m->params,
                                        r->m->n_param_floats, r->m->buffers, buffers,
                                        r->state.global_step + 1));
    }
    return HERD_OK;
}

/* The schedule's position: epochs done plus this epoch's steps on the current grid.
 * global_step counts the steps taken, whose size may have changed at a resume; the
 * schedule follows the data seen instead, so it continues where the samples are. */
static long sched_step(const run *r, int epoch, long step)
{
    return (long)epoch * r->steps_per_epoch + step;
}

/* Starts the reduction of this step's figures (see step_metrics); p is the step's
 * progress so far, epoch_time the epoch's step time. */
static herd_status send_metrics(run *r, const herd_step_stats *s, const herd_progress *p,
                                double epoch_time)
{
    step_metrics *m = &r->metrics;
    /* The vote: a callback's request to stop (one rank's); max_steps needs none, every
     * rank knows it. The agreement: a failure on any rank since the last step (the
     * observer's, injected). */
    /* --checkpoint-every-seconds: rank 0's clock decides for every rank. */
    bool ckpt_time = r->cfg.checkpoint_every_s > 0 && r->comm->rank == 0 &&
                     herd_now() - r->last_ckpt_time >= r->cfg.checkpoint_every_s;
    double stats[8] = {s->loss_sum, (double)s->correct, (double)s->samples, r->stop_requested,
                       0, 0, 0, ckpt_time};
    memcpy(m->stats, stats, sizeof stats);
    m->local = r->deferred != HERD_OK ? r->deferred : herd_fail_point("stats", r->comm->rank);
    herd_agree_pack(m->local, r->comm->rank, m->stats + 4);
    m->p = *p;
    m->t = s->t;
    m->train_time = r->train_time;
    m->epoch_time = epoch_time;
    m->pending = true;
    if (r->comm->size == 1)
        return HERD_OK; /* the sum over one rank is the values */
    return r->comm->ops->allreduce_f64_start(r->comm, m->stats, 8, "metrics");
}

/* Completes the pending step's reduction (already done by the gradient wait that
 * followed it, unless this is a flush) and hands its figures to the epoch's totals,
 * the observer and the callback; *p becomes that step's progress. *want_stop is set
 * when the vote asks every rank to stop, or one process's callback does. */
static herd_status deliver_metrics(run *r, epoch_totals *e, herd_progress *p, bool *want_stop)
{
    step_metrics *m = &r->metrics;
    if (!m->pending)
        return HERD_OK;
    herd_status st = r->comm->ops->wait_all(r->comm);
    m->pending = false;
    HERD_TRY(st);
    HERD_TRY(herd_agree_unpack(m->local, m->stats + 4, "during the step"));
    const double *v = m->stats;
    for (int i = 0; i < 3; i++)
        e->sums[i] += v[i];
    e->run_samples += v[2];
    r->train_samples += v[2];
    r->state.epoch_seen = (long)e->sums[2];
    r->state.epoch_loss_sum = e->sums[0];
    r->state.epoch_correct = e->sums[1];
    *p = m->p;
    p->step_loss = v[0] / v[2];
    p->loss = e->sums[0] / e->sums[2];
    p->acc = e->sums[1] / e->sums[2];
    p->samples_per_s = r->train_samples / m->train_time;
    p->epoch_samples_per_s = m->epoch_time > 0 ? e->run_samples / m->epoch_time : 0;
    herd_obs_step observed = {v[0], v[1], v[2], m->t};
    herd_status obs_st = herd_observer_step(r->obs, p, &observed);
    if (r->deferred == HERD_OK)
        r->deferred = obs_st;
    *want_stop |= v[3] > 0;
    r->ckpt_due |= v[7] > 0;
    if (r->progress && !r->progress(p, r->user)) {
        r->stop_requested = true;
        *want_stop |= r->comm->size == 1; /* alone, nobody needs telling */
    }
    return HERD_OK;
}

/* Runs one epoch from the state's position in it; *stop is set when a callback or
 * max_steps ends training. */
static herd_status run_epoch(run *r, int epoch, double t_start, bool *stop)
{
    const herd_train_config *cfg = &r->cfg;
    long global_batch = (long)cfg->batch_size * cfg->grad_accum * replicas(r);
    HERD_TRY(herd_loader_start_epoch(r->loader, epoch, r->state.epoch_samples));
    herd_progress p = {.epoch = epoch + 1, .epochs = cfg->epochs,
                       .steps_per_epoch = r->steps_per_epoch, .rank = r->comm->rank,
                       .world = r->comm->size};
    herd_phase_times sum = {0};
    epoch_totals totals = {{r->state.epoch_loss_sum, r->state.epoch_correct,
                            (double)r->state.epoch_seen}, 0};
    /* Rounded down, so a resume with another global batch never runs past the epoch. */
    long first_step = r->state.epoch_samples / global_batch;
    long step = first_step;
    bool want_stop = false;
    for (;; step++) {
        herd_step_stats s;
        bool has;
        HERD_TRY(train_step(r, sched_step(r, epoch, step), &s, &has));
        if (!has)
            break;
        herd_phases_add(&sum, &s.t, 1.0);
        r->train_time += s.t.total;
        r->clipped_steps += s.clipped;
        r->res->steps = ++r->state.global_step;
        if (herd_restart_log_step(&r->restarts, r->state.global_step))
            /* Said even under --quiet: something failed, and this is what it cost. */
            herd_log(HERD_LOG_WARNING, "restart %d: resumed at step %ld: %ld step(s) lost, training again "
                     "%.1f s after the last step before the failure (in all: %ld steps, %.1f s)",
                     r->restarts.restarts, r->restarts.resumed_step, r->restarts.last_lost,
                     r->restarts.last_recovery_s, r->restarts.lost_steps, r->restarts.recovery_s);
        /* Histograms show this step's weights and gradients: written now, not when the
         * step's figures arrive. */
        herd_status hist = herd_observer_histograms(r->obs, r->state.global_step);
        if (r->deferred == HERD_OK)
            r->deferred = hist;
        r->state.epoch_samples = herd_loader_position(r->loader);
        herd_progress now = p;
        now.step = step + 1;
        now.loss_scale = cfg->dynamic_loss_scale ? r->scaler.scale : 0.0;
        now.skipped_steps = r->scaler.skipped;
        now.restarts = r->restarts.restarts;
        now.lost_steps = r->restarts.lost_steps;
        now.recovery_s = r->restarts.recovery_s;
        now.global_step = r->state.global_step;
        now.lr = herd_lr_at(cfg, sched_step(r, epoch, step), r->steps_per_epoch);
        memset(&now.phases, 0, sizeof now.phases);
        herd_phases_add(&now.phases, &sum, 1.0 / (double)(step + 1 - first_step));
        now.elapsed_s = herd_now() - t_start;
        long left = (long)(cfg->epochs - epoch - 1) * r->steps_per_epoch + (r->steps_per_epoch - step - 1);
        now.eta_s = (left > 0 ? left : 0) * (r->train_time / (double)(r->state.global_step - r->first_step));
        /* The previous step's figures came with this step's gradients. */
        HERD_TRY(deliver_metrics(r, &totals, &p, &want_stop));
        HERD_TRY(send_metrics(r, &s, &now, sum.total));
        bool at_max = cfg->max_steps > 0 && r->state.global_step >= cfg->max_steps;
        /* Every rank decides alike: the vote arrived everywhere at once. */
        if (r->comm->size == 1 || at_max || want_stop)
            HERD_TRY(deliver_metrics(r, &totals, &p, &want_stop));
        /* Checkpoints inside the epoch (its end and training's end save anyway). Every
         * rank decides alike: the step count, the loader's batches and the votes are
         * the same everywhere. The step's figures are delivered first: the state saved
         * holds the epoch's sums up to it. */
        bool every = cfg->checkpoint_every_steps > 0 &&
                     r->state.global_step % cfg->checkpoint_every_steps == 0;
        if (cfg->checkpoint_dir && (every || r->ckpt_due) && !at_max && !want_stop &&
            herd_loader_batches_left(r->loader) > 0) {
            HERD_TRY(deliver_metrics(r, &totals, &p, &want_stop));
            activity(r, "writing a checkpoint");
            HERD_TRY(agree(r, save_checkpoint(r), "writing a checkpoint"));
        }
        if (want_stop || at_max) {
            *stop = true;
            break;
        }
    }
    /* The epoch's last step, whose vote may still ask to stop. */
    HERD_TRY(deliver_metrics(r, &totals, &p, &want_stop));
    *stop |= want_stop;
    r->res->train_loss = totals.sums[2] > 0 ? totals.sums[0] / totals.sums[2] : 0;
    r->res->train_acc = totals.sums[2] > 0 ? totals.sums[1] / totals.sums[2] : 0;
    herd_phases_add(&r->res->phases, &sum, 1.0);
    bool complete = herd_loader_batches_left(r->loader) == 0;
    if (complete) { /* a stop mid-epoch resumes inside it, at state.epoch_samples */
        r->state.epoch = epoch + 1;
        r->state.epoch_samples = r->state.epoch_seen = 0;
        r->state.epoch_loss_sum = r->state.epoch_correct = 0;
    }
    r->res->epochs_done = epoch + 1;

    p.epoch_end = true;
    bool last = epoch + 1 == cfg->epochs || *stop;
    activity(r, "evaluating");
    HERD_TRY(agree(r, herd_fail_point("epoch_end", r->comm->rank), "at the end of the epoch"));
    HERD_TRY(average_buffers(r));
    if (r->test && (last || (cfg->eval_every > 0 && (epoch + 1) % cfg->eval_every == 0)))
        HERD_TRY(evaluate(r, &p));
    /* The epoch's line before its checkpoint: a kill in between leaves a line that the
     * resume from the previous checkpoint drops, never an epoch without one. */
    herd_status st = herd_observer_epoch(r->obs, &p);
    if (cfg->checkpoint_dir && complete) {
        /* A pipeline's save is collective: rank 0's metrics failure is known first. */
        if (r->pp)
            HERD_TRY(agree(r, st, "writing the metrics"));
        if (st == HERD_OK) {
            activity(r, "writing a checkpoint");
            st = save_checkpoint(r);
        }
    }
    if (st == HERD_OK)
        st = herd_fail_point("checkpoint", r->comm->rank);
    /* Rank 0 wrote alone: every rank learns whether it could before the next collective. */
    HERD_TRY(agree(r, st, "writing the checkpoint or the metrics"));
    if (r->timeline) { /* each epoch, so a long run's trace survives and memory stays bounded */
        activity(r, "merging the timeline");
        HERD_TRY(herd_timeline_flush(r->timeline));
    }
    if (r->progress)
        r->progress(&p, r->user);
    return HERD_OK;
}

/* How --compress puts gradients on the wire (validate has refused other values). */
static herd_wire_type wire_type(herd_compress c)
{
    if (c == HERD_COMPRESS_FP16)
        return HERD_WIRE_FP16;
    return c == HERD_COMPRESS_BF16 ? HERD_WIRE_BF16 : HERD_WIRE_FP32;
}

/* Everything each rank prepares on its own before the first shared state. */
static herd_status setup(run *r)
{
    const herd_train_config *cfg = &r->cfg;
    HERD_TRY(r->m->be->set_threads(cfg->threads));
    /* With pipeline stages every stage of a replica reads the replica's shard in
     * micro-batches: stage 0 the images, the last stage the labels. */
    int micro = cfg->batch_size / cfg->micro_batches, per_step = cfg->grad_accum * cfg->micro_batches;
    herd_loader_config lc = {
        .batch_size = micro, .shuffle = true, .augment = cfg->augment,
        .drop_last = false, .seed = cfg->seed, .prefetch = 4, .workers = 1,
        .shard_rank = r->pp ? r->pp->replica : r->comm->rank, .shard_count = replicas(r),
    };
    HERD_TRY(herd_loader_create(r->train, &lc, &r->loader));
    long batches = herd_loader_batches_per_epoch(r->loader);
    r->steps_per_epoch = (batches + per_step - 1) / per_step;
    /* ZeRO runs two exchanges per bucket, the all-gather after the update: with one
     * bucket both wait in series for the whole model. Buckets of at most a quarter of
     * it let the reduce-scatters overlap backward and the all-gathers the next forward
     * (lenet5 on 2 ranks, medians of 12 interleaved runs: 1.30x plain's step with its
     * one bucket, 1.075x with two; a bucket holds whole tensors, and fc1 is 78%). */
    double bucket_mb = cfg->bucket_mb;
    double quarter_mb = (double)r->m->n_param_floats * sizeof(float) / 4.0 / 1048576.0;
    if (cfg->zero_stage && quarter_mb < bucket_mb)
        bucket_mb = quarter_mb;
    HERD_TRY(herd_step_plan_init(&r->plan, r->m, r->dp, bucket_mb, wire_type(cfg->compress),
                                 cfg->sync_bn));
    if (cfg->zero_stage) { /* the optimizer keeps state for this rank's slice only */
        HERD_TRY(herd_zero_plan(&r->zero, cfg->zero_stage, &r->plan.buckets, r->m->n_param_floats,
                                r->dp->rank, r->dp->size));
        r->plan.zero = &r->zero;
        /* The parameters' all-gather runs on into the next forward unless something
         * reads them right after the step (replica checks, histograms), pipeline stages
         * run their own forward, or one bucket holds everything: the first layer then
         * waits for all of it anyway, and meanwhile the next step's work takes the
         * cores the communication thread needs (lenet5 on 2 ranks of 2 cores: 1.3x
         * the step time, measured; resnet20's 2 buckets: its all-gather hidden). */
        r->plan.overlap_gather = !r->pp && !cfg->check_replicas && cfg->histograms == 0 &&
                                 r->plan.buckets.n > 1;
        HERD_TRY(herd_optimizer_create_part(cfg, r->m, r->zero.lo, r->zero.hi, &r->opt));
    } else {
        HERD_TRY(herd_optimizer_create(cfg, r->m, &r->opt));
    }
    HERD_TRY(herd_observer_open(cfg, r->m, r->comm->rank, &r->obs));
    if (cfg->dynamic_loss_scale) {
        HERD_TRY(herd_loss_scaler_init(&r->scaler, cfg->loss_scale_init, cfg->loss_scale_window));
        r->plan.scaler = &r->scaler;
    }
    r->plan.clip_grad_norm = cfg->clip_grad_norm;
    r->plan.skip_nonfinite = cfg->skip_nonfinite;
    r->plan.skipped = &r->scaler.skipped; /* one count of skipped steps, scaler or not */
    if (r->pp) {
        r->plan.stage_job = r->comm;
        r->plan.stage_replicas = r->pp->replicas;
    }
    /* What this run measures the position in; the checkpoint's, if any, is fitted to it. */
    r->state = (herd_train_state){.seed = cfg->seed, .batch_size = micro,
                                  .ranks = replicas(r), .grad_accum = per_step,
                                  .train_samples = (long)r->train->n};
    return herd_fail_point("setup", r->comm->rank);
}

/* Every rank's peak memory, for the summary (collective). */
static herd_status gather_memory_peaks(run *r)
{
    herd_memory_usage use;
    uint64_t mine = 0;
    if (r->m->be->memory_usage) {
        r->m->be->memory_usage(&use);
        mine = use.peak;
    }
    herd_comm *c = r->comm;
    /* Every rank reaches the allgather: small jobs need no allocation, and in large ones
     * a rank that could not allocate tells the others first. */
    uint64_t small[64], *all = small;
    if (c->size > 64) {
        all = herd_xcalloc((size_t)c->size, sizeof *all);
        herd_status agreed =
            herd_agree(c, all ? HERD_OK : HERD_ERR_NOMEM, "gathering the memory peaks");
        if (agreed != HERD_OK) {
            free(all);
            return agreed;
        }
    }
    herd_status st = c->ops->allgather(c, &mine, all, sizeof mine);
    r->res->memory_peak_bytes = mine;
    for (int i = 0; st == HERD_OK && i < c->size; i++) {
        if (all[i] > r->res->memory_peak_max_bytes)
            r->res->memory_peak_max_bytes = all[i];
        if (i < HERD_RESULT_RANKS)
            r->res->rank_memory_peak_bytes[i] = all[i];
    }
    if (all != small)
        free(all);
    return st;
}

/* The pipeline's arguments against the job and the model. */
static herd_status check_pipeline(const run *r)
{
    const herd_train_config *c = &r->cfg;
    int P = c->pipeline_stages;
    if (P == 1) {
        if (c->micro_batches > 1)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "--micro-batches %d needs --pipeline-stages > 1; "
                            "without stages, use --grad-accum", c->micro_batches);
        /* Silently ignored otherwise: a schedule or split only means something to stages. */
        if (c->stage_split || c->pp_schedule != HERD_PP_SCHEDULE_1F1B)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "--%s needs --pipeline-stages > 1",
                            c->stage_split ? "stage-split" : "pp-schedule");
        if (!r->m->params)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "model '%s' is a plan without parameters; only "
                            "training with pipeline stages builds them", r->m->name);
        return HERD_OK;
    }
    if (P > r->m->n_layers)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "--pipeline-stages %d asks for more stages than model '%s' has layers (%d)",
                        P, r->m->name, r->m->n_layers);
    if (r->comm->size % P != 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "%d ranks do not divide into pipelines of %d stages; start a multiple of %d "
                        "ranks (stages x data-parallel replicas)", r->comm->size, P, P);
    return HERD_OK;
}

int herd_train_min_ranks(int pipeline_stages, int zero_stage)
{
    int stages = pipeline_stages > 1 ? pipeline_stages : 1;
    return zero_stage ? 2 * stages : stages;
}

/* --zero against the job. */
static herd_status check_zero(const run *r)
{
    const herd_train_config *c = &r->cfg;
    if (r->comm->size >= herd_train_min_ranks(c->pipeline_stages, c->zero_stage))
        return HERD_OK;
    if (c->pipeline_stages > 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "--zero %d shards each stage's optimizer state across the stage's "
                        "data-parallel replicas, and %d ranks in %d stages give one; start at least "
                        "%d ranks or drop --zero", c->zero_stage, r->comm->size, c->pipeline_stages,
                        2 * c->pipeline_stages);
    return HERD_ERR(HERD_ERR_INVALID_ARG,
                    "--zero %d shards the optimizer state across data-parallel ranks, and this "
                    "job has one; start several (herd run -np N -- train ...) or drop --zero",
                    c->zero_stage);
}

/* early: herd_train's checks of the arguments, agreed with the other ranks here. */
static herd_status train_run(run *r, const herd_train_config *user_cfg, herd_status early)
{
    herd_status st = resolve_config(r, user_cfg);
    const herd_train_config *cfg = &r->cfg;
    if (early != HERD_OK)
        st = early;
    if (st == HERD_OK)
        st = check_pipeline(r);
    if (st == HERD_OK)
        st = check_zero(r);
    if (st == HERD_OK) /* process-wide on a GPU: ours again */
        st = r->m->be->set_precision(r->m->precision);
    if (st == HERD_OK)
        st = herd_fail_point("signature", r->comm->rank);
    HERD_TRY(herd_agree(r->comm, st, "checking its arguments"));
    HERD_TRY(check_signature(r));
    if (!r->m->be->host_memory && r->comm->size > 1) {
        HERD_TRY(herd_comm_device_create(r->comm, r->m->be, &r->device_comm));
        r->comm = r->device_comm;
    }
    r->dp = r->comm;
    if (cfg->pipeline_stages > 1) { /* collective, its failures agreed inside */
        HERD_TRY(herd_pipeline_create(cfg, r->whole, r->comm, &r->pp));
        r->m = r->pp->m;
        r->dp = r->pp->group;
        if (r->comm->rank == 0)
            herd_log(HERD_LOG_INFO, "pipeline of %d stages (%s, %d micro-batches):\n%s",
                     cfg->pipeline_stages, herd_pp_kind_name(r->pp->kind), cfg->micro_batches,
                     r->pp->partition_text);
    }
    HERD_TRY(agree(r, setup(r), "setting up training"));
    if (cfg->checkpoint_dir) /* every rank joins: rank 0's outcome is broadcast */
        HERD_TRY(prepare_checkpoints(r));
    HERD_TRY(broadcast_state(r));
    resume_counters(r);
    if (cfg->timeline_path)
        HERD_TRY(start_timeline(r));
    r->first_step = r->res->steps = r->state.global_step; /* steps before this run (resume) */
    double t_start = herd_now();
    bool stop = false;
    r->res->training_started = true; /* set-up's failures would repeat at a restart */
    r->last_ckpt_time = t_start;
    st = HERD_OK;
    if (r->comm->rank == 0 && cfg->checkpoint_dir)
        st = herd_restart_log_open(&r->restarts, cfg->checkpoint_dir, cfg->run_attempt, r->state.global_step);
    HERD_TRY(agree(r, st, "opening the progress record for restarts"));
    for (int epoch = r->state.epoch; epoch < cfg->epochs && !stop; epoch++)
        HERD_TRY(run_epoch(r, epoch, t_start, &stop));
    HERD_TRY(herd_step_params_ready(&r->plan)); /* the caller gets whole parameters */
    long steps_run = r->state.global_step - r->first_step;
    r->res->wall_s = herd_now() - t_start;
    r->res->samples_per_s = r->train_time > 0 ? r->train_samples / r->train_time : 0;
    r->res->loss_scale = cfg->dynamic_loss_scale ? r->scaler.scale : 0.0;
    r->res->skipped_steps = r->scaler.skipped;
    r->res->clipped_steps = r->clipped_steps;
    r->res->state_bytes = herd_optimizer_state_bytes(r->opt, r->m);
    /* Held between steps: the reduced slice. A device's gradients stay one whole buffer
     * (backward writes into it; no pages to give back), so there stage 2 holds what 1 does. */
    if (cfg->zero_stage == 2 && r->m->be->host_memory)
        r->res->state_bytes.grads = (uint64_t)(r->zero.hi - r->zero.lo) * sizeof(float);
    if (steps_run > 0) {
        herd_phase_times mean = {0};
        herd_phases_add(&mean, &r->res->phases, 1.0 / (double)steps_run);
        r->res->phases = mean;
    }
    HERD_TRY(agree(r, herd_fail_point("final", r->comm->rank), "at the end of training"));
    HERD_TRY(average_buffers(r));
    bool saved = r->state.epoch_samples == 0 || r->saved_step == r->state.global_step;
    st = HERD_OK;
    if (cfg->checkpoint_dir && steps_run > 0 && !saved)
        st = save_checkpoint(r);
    HERD_TRY(agree(r, st, "writing the last checkpoint"));
    if (cfg->checkpoint_dir)
        HERD_TRY(finish_checkpoint_writes(r));
    r->res->restarts = r->restarts.restarts;
    r->res->lost_steps = r->restarts.lost_steps;
    r->res->recovery_s = r->restarts.recovery_s;
    if (r->pp && r->whole->params) { /* the caller's model on rank 0 gets the trained weights */
        st = herd_pipeline_gather(r->pp, NULL, r->comm->rank == 0 ? r->whole : NULL, NULL);
        HERD_TRY(agree(r, st, "collecting the trained stages"));
    }
    HERD_TRY(gather_memory_peaks(r));
    return stop_timeline(r, true);
}

static herd_status check_shapes(const herd_model *m, herd_dataset *train, herd_dataset *test)
{
    int c, h, w, classes;
    herd_dataset_shape(train, &c, &h, &w, &classes);
    if (c != m->in_c || h != m->in_h || w != m->in_w || classes > m->classes)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "model '%s' expects %dx%dx%d inputs and %d classes, the data has "
                        "%dx%dx%d and %d",
                        m->name, m->in_c, m->in_h, m->in_w, m->classes, c, h, w, classes);
    if (test) {
        int tc, th, tw, tclasses;
        herd_dataset_shape(test, &tc, &th, &tw, &tclasses);
        if (tc != c || th != h || tw != w || tclasses > m->classes)
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "the test data (%dx%dx%d, %d classes) does not fit model '%s' "
                            "(%dx%dx%d, %d classes); its labels must stay below the training "
                            "data's classes",
                            tc, th, tw, tclasses, m->name, m->in_c, m->in_h, m->in_w, m->classes);
    }
    return HERD_OK;
}

herd_status herd_train(herd_model *m, herd_dataset *train, herd_dataset *test,
                       const herd_train_config *cfg, herd_progress_fn progress, void *user,
                       herd_train_result *result)
{
    if (!m || !train || !cfg || !result)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_train needs a model, training data, a config "
                        "and a result");
    /* Every rank reaches the first agreement in train_run, so an argument one rank
     * rejects stops them all. */
    herd_status early = validate(cfg);
    if (early == HERD_OK)
        early = check_shapes(m, train, test);
    memset(result, 0, sizeof *result);
    result->test_loss = result->test_acc = -1;
    run r = {.m = m, .whole = m, .train = train, .test = test, .progress = progress, .user = user,
             .res = result, .comm = cfg->dist, .saved_step = -1, .restarts = {.fd = -1},
             .owner = HERD_CKPT_DIR_INIT};
    herd_comm *own = NULL;
    if (!r.comm) {
        HERD_TRY(herd_comm_local_create(&own));
        r.comm = own;
    }
    herd_status st = train_run(&r, cfg, early);
    /* A failure can leave the last step's metrics in flight: every rank started that
     * reduction, so it completes; its buffer must outlive it. So must the caller's
     * model the parameters' all-gather (ZeRO) writes into. */
    if (r.metrics.pending)
        r.comm->ops->wait_all(r.comm);
    if (r.plan.gather_pending)
        r.plan.comm->ops->wait_all(r.plan.comm);
    herd_status obs_st = herd_observer_close(r.obs); /* flushes the last records */
    if (st == HERD_OK)
        st = obs_st;
    stop_timeline(&r, false); /* after a failure: nothing written, nothing leaked */
    herd_ckpt_writer_free(r.writer); /* a write in progress ends first: it reads m's views */
    herd_restart_log_close(&r.restarts);
    herd_step_plan_free(&r.plan, r.m);
    herd_zero_free(&r.zero);
    herd_optimizer_free(r.opt);
    release_whole(&r, r.ckpt_whole, r.ckpt_opt);
    herd_ckpt_dir_release(&r.owner); /* after the last write */
    herd_pipeline_free(r.pp);
    herd_loader_free(r.loader);
    herd_comm_destroy(r.device_comm);
    herd_comm_destroy(own);
    return st;
}
