/* The training loop: epochs of shuffled batches (each rank its own shard), LR
 * schedule, gradient reduction, evaluation, checkpoints and resume, progress. Its
 * configuration is train_config.c's, the ranks' agreement signature.c's and the
 * checkpoint steps ckpt_steps.c's; the state they share is run.h. */
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
#include "nn/loss_chunks.h"
#include "nn/recompute.h"
#include "train/graph_step.h"
#include "train/run.h"

/* An epoch's figures over all ranks; a resumed epoch's start with the checkpoint's. */
typedef struct epoch_totals {
    double sums[3];     /* loss, correct, samples */
    double run_samples; /* this run's share of them: the throughput's */
} epoch_totals;

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

/* Per-rank running statistics (no --sync-bn) are averaged before they are used, so
 * evaluation and checkpoints see one model; training itself uses batch statistics.
 * --deterministic's are the same bytes on every rank already, which an fp32 average
 * would not keep. */
static herd_status average_buffers(run *r)
{
    herd_comm *c = r->dp;
    if (c->size == 1 || r->cfg.sync_bn || r->cfg.deterministic || r->m->n_buffer_floats == 0)
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
        /* Tensor parts of a replica read the same samples: the data group slices them. */
        HERD_TRY(herd_eval_dataset(r->m, r->test, r->cfg.batch_size, r->tp ? r->tp->data : r->comm,
                                   &ev));
    if (r->timeline)
        herd_timeline_add(r->timeline, HERD_TL_EVALUATE, NULL, t0, herd_now());
    p->evaluated = true;
    p->test_loss = r->res->test_loss = ev.loss;
    p->test_acc = r->res->test_acc = ev.acc;
    return HERD_OK;
}

/* Collective: the trace starts; the communicators record their collectives into it. */
static herd_status start_timeline(run *r)
{
    size_t per_step = (size_t)r->cfg.grad_accum * r->cfg.micro_batches *
                      (2 * (size_t)r->m->n_layers + 9) + 4;
    HERD_TRY(herd_timeline_open(r->cfg.timeline_path, r->comm, per_step, &r->timeline));
    r->plan.timeline = r->timeline;
    /* Groups of one rank run no collective; every rank has the same grid. */
    if (r->tp && r->tp->group->size > 1)
        HERD_TRY(herd_timeline_add_group(r->timeline, r->tp->group, "tensor group"));
    if (r->dp != r->comm && r->dp->size > 1)
        HERD_TRY(herd_timeline_add_group(r->timeline, r->dp, r->pp ? "stage replicas" : "data group"));
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
    herd_test_step_delay();
    if (r->state.global_step == 1 && herd_test_hook("stop", r->comm->rank))
        raise(SIGSTOP); /* the stall tests: a rank that stops between two collectives */
    if (r->timeline)
        herd_timeline_begin_step(r->timeline, r->state.epoch + 1, r->state.global_step + 1);
    double t0 = herd_now();
    if (r->plan.exact && !r->pp) { /* a pipeline runs its slices through its stages */
        activity(r, "forward and backward (exact sums)");
        HERD_TRY(herd_run_exact_micro_steps(r, n_micro, seed, s));
    }
    for (int micro = 0; micro < n_micro && !r->pp && !r->plan.exact; micro++) {
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
    /* Per-rank batch-norm statistics differ by design (--sync-bn and --deterministic
     * share them). */
    size_t buffers = cfg->sync_bn || cfg->deterministic ? r->m->n_buffer_floats : 0;
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
    /* A replica's tensor parts all computed its loss: its first part counts it. */
    double once = r->tp && r->tp->part != 0 ? 0.0 : 1.0;
    double stats[8] = {once * s->loss_sum, once * (double)s->correct, once * (double)s->samples,
                       r->stop_requested, 0, 0, 0, ckpt_time};
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
    long global_batch = (long)cfg->batch_size * cfg->grad_accum * herd_run_replicas(r);
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
            HERD_TRY(agree(r, herd_run_save_checkpoint(r), "writing a checkpoint"));
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
            st = herd_run_save_checkpoint(r);
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

/* How --compress puts gradients on the wire (herd_train_config_check has refused other values). */
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
    /* --deterministic: oneDNN splits a slice's reductions (weight gradients) over threads
     * in an order that follows their number, so every kernel runs on one thread; the
     * threads run whole slices at once instead (exact_threads.c, docs/determinism.md). */
    if (cfg->deterministic) {
        HERD_TRY(r->m->be->set_threads(1));
    } else {
        int local = r->comm->local_size, threads;
        HERD_TRY(herd_set_rank_threads(r->m->be, cfg->threads, local, &threads));
        const char *omp = getenv("OMP_NUM_THREADS");
        if (cfg->threads == 0 && (!omp || !*omp) && local > 1 && r->comm->rank == 0)
            herd_log(HERD_LOG_INFO, "%d ranks on this host share its cores: %d compute thread%s "
                     "per rank (--threads N or OMP_NUM_THREADS to choose)", local, threads,
                     threads == 1 ? "" : "s");
    }
    /* With pipeline stages every stage of a replica reads the replica's shard in
     * micro-batches: stage 0 the images, the last stage the labels. */
    int micro = cfg->batch_size / cfg->micro_batches, per_step = cfg->grad_accum * cfg->micro_batches;
    herd_loader_config lc = {
        .batch_size = micro, .shuffle = true, .augment = cfg->augment,
        .drop_last = false, .seed = cfg->seed, .prefetch = 4, .workers = 1,
        .shard_rank = r->pp ? r->pp->replica : r->tp ? r->tp->replica : r->comm->rank,
        .shard_count = herd_run_replicas(r),
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
    HERD_TRY(herd_run_exact_setup(r));
    if (cfg->cuda_graphs)
        HERD_TRY(herd_step_graphs_create(&r->plan, r->m));
    r->plan.clip_grad_norm = cfg->clip_grad_norm;
    r->plan.skip_nonfinite = cfg->skip_nonfinite;
    r->plan.skipped = &r->scaler.skipped; /* one count of skipped steps, scaler or not */
    if (r->tp) {
        r->plan.tensor_job = r->comm;
        r->plan.tensor_sum = herd_group_of_comm(r->tp->group);
        r->plan.tensor_group = r->tp->group;
    }
    if (r->pp) {
        r->plan.stage_job = r->pp->job; /* with tensor parts: this part's stages */
        r->plan.stage_replicas = r->pp->replicas;
        r->plan.first_view = herd_pipeline_first_view(r->pp, r->whole);
        r->plan.whole_views = r->whole->n_views;
    }
    /* What this run measures the position in; the checkpoint's, if any, is fitted to it. */
    r->state = (herd_train_state){.seed = cfg->seed, .batch_size = micro,
                                  .ranks = herd_run_replicas(r), .grad_accum = per_step,
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

/* What --recompute will re-run, said at start (rank 0's part of the model). */
static void log_recompute(const run *r)
{
    int runs = herd_recompute_runs(r->m);
    if (runs > 0)
        herd_log(HERD_LOG_INFO, "--recompute: %d runs of layers of '%s' hold only their outputs "
                 "from forward to backward; the layers inside them run again in backward, each "
                 "run just before its backward (the peak memory's activations show the saving)",
                 runs, r->m->name);
    else
        herd_log(HERD_LOG_INFO, "--recompute: nothing to re-run in '%s': no run of two or more "
                 "layers ends before its last layer (every output is the one tensor crossing to "
                 "the next layer), so every activation is held as without it", r->m->name);
}

/* early: herd_train's checks of the arguments, agreed with the other ranks here. */
static herd_status train_run(run *r, const herd_train_config *user_cfg, herd_status early)
{
    herd_status st = herd_run_resolve_config(r, user_cfg);
    const herd_train_config *cfg = &r->cfg;
    if (early != HERD_OK)
        st = early;
    if (st == HERD_OK)
        st = herd_run_check_pipeline(r);
    if (st == HERD_OK)
        st = herd_run_check_zero(r);
    if (st == HERD_OK) /* process-wide on a GPU: ours again */
        st = r->m->be->set_precision(r->m->precision);
    /* fp16's 5 exponent bits lose small gradients to zero unless the loss is scaled up
     * first: refused rather than trained silently worse (bf16 keeps fp32's range). */
    if (st == HERD_OK && r->m->precision == HERD_PRECISION_FP16 && !cfg->dynamic_loss_scale)
        st = HERD_ERR(HERD_ERR_INVALID_ARG, "--precision fp16 needs loss scaling: small "
                      "gradients underflow to zero in fp16; add --loss-scale dynamic (or use "
                      "--precision bf16)");
    if (st == HERD_OK)
        st = herd_fail_point("signature", r->comm->rank);
    HERD_TRY(herd_agree(r->comm, st, "checking its arguments"));
    HERD_TRY(herd_run_check_signature(r));
    if (!r->m->be->host_memory && r->comm->size > 1) {
        HERD_TRY(herd_comm_device_create(r->comm, r->m->be, &r->device_comm));
        r->comm = r->device_comm;
    }
    herd_model_set_recompute(r->whole, cfg->recompute); /* stages and parts take it over */
    HERD_TRY(herd_model_set_loss_chunk(r->whole, cfg->loss_chunk)); /* the same on every rank */
    HERD_TRY(herd_run_build_grid(r));
    HERD_TRY(agree(r, setup(r), "setting up training"));
    if (cfg->recompute && r->comm->rank == 0)
        log_recompute(r);
    if (r->pp) /* collective, agreed inside: the sums of a tied token table's copies */
        HERD_TRY(herd_pipeline_tied_plan(r->pp, &r->plan));
    if (cfg->checkpoint_dir) /* every rank joins: rank 0's outcome is broadcast */
        HERD_TRY(herd_run_prepare_checkpoints(r));
    HERD_TRY(broadcast_state(r));
    HERD_TRY(herd_run_resume_counters(r));
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
    /* A restart of a job that had reached --max-steps trains no step (ckpt_steps.c). */
    stop = cfg->max_steps > 0 && r->state.global_step >= cfg->max_steps;
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
        st = herd_run_save_checkpoint(r);
    HERD_TRY(agree(r, st, "writing the last checkpoint"));
    if (cfg->checkpoint_dir)
        HERD_TRY(herd_run_finish_checkpoint_writes(r));
    r->res->restarts = r->restarts.restarts;
    r->res->lost_steps = r->restarts.lost_steps;
    r->res->recovery_s = r->restarts.recovery_s;
    if (r->pp && r->whole->params) { /* the caller's model on rank 0 gets the trained weights */
        st = herd_pipeline_gather(r->pp, NULL, r->comm->rank == 0 ? r->whole : NULL, NULL);
        HERD_TRY(agree(r, st, "collecting the trained stages"));
    }
    if (r->tp && !r->pp && r->whole->params) { /* likewise, the parts to whole tensors */
        st = herd_tensor_par_gather(r->tp, r->comm, NULL, r->comm->rank == 0 ? r->whole : NULL,
                                    NULL);
        HERD_TRY(agree(r, st, "collecting the trained parts"));
    }
    HERD_TRY(gather_memory_peaks(r));
    return stop_timeline(r, true);
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
    herd_status early = herd_train_config_check(cfg);
    if (early == HERD_OK)
        early = herd_train_check_shapes(m, train, test);
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
    bool recompute = m->recompute;
    int loss_chunk = m->loss_chunk;
    herd_status st = train_run(&r, cfg, early);
    herd_model_set_recompute(m, recompute); /* the caller's model as it came */
    m->loss_chunk = loss_chunk;
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
    if (st == HERD_OK && r.plan.graphs && r.comm->rank == 0) {
        herd_graph_counts n = herd_step_graph_counts(&r.plan);
        herd_log(HERD_LOG_INFO, "cuda graphs: %ld captures, %ld launches; %ld forwards or "
                 "backwards ran as called (each shape's first, and after memory moved)",
                 n.captures, n.launches, n.eager);
    }
    herd_step_plan_free(&r.plan, r.m);
    herd_run_exact_free(&r);
    herd_zero_free(&r.zero);
    herd_optimizer_free(r.opt);
    herd_run_release_whole(&r, r.ckpt_whole, r.ckpt_opt);
    herd_ckpt_dir_release(&r.owner); /* after the last write */
    herd_pipeline_free(r.pp);
    herd_tensor_par_free(r.tp);
    herd_loader_free(r.loader);
    herd_comm_destroy(r.device_comm);
    herd_comm_destroy(own);
    return st;
}
