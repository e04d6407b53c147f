/* The run's checkpoint steps: rank 0 claims the directory and reads the checkpoint to
 * resume from, which every rank then takes its part of; the loop saves one (whole, by
 * ZeRO slices or through the pipeline stages); the run's counters travel in it. */
#include <stdio.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/signature.h"
#include "train/checkpoint.h"
#include "train/run.h"

/* The data-parallel ranks for the checkpoint's pieces, which travel in host memory:
 * a device communicator's transfers take device memory, the one it wraps host memory. */
static herd_comm *ckpt_comm(const run *r)
{
    return herd_comm_host_side(r->dp);
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

void herd_run_release_whole(run *r, herd_model *m, herd_optimizer *o)
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

/* A checkpoint of a run that had ended (`ended` says how; `flag` is what would train
 * on). A restart by herd run after a rank failed once training had ended (in the final
 * save, or on the way out): the job is done, the checkpoint's weights are the result
 * (the epoch loop runs no step, and --save writes them). A resume by hand is refused: a
 * step more would change the result of a run that had ended. */
static herd_status resume_ended(const run *r, const char *ended, const char *flag)
{
    const herd_train_config *c = &r->cfg;
    if (c->run_attempt <= 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "the checkpoint in '%s' %s: nothing is left to "
                        "train; raise %s to train on, or start without --resume",
                        c->checkpoint_dir, ended, flag);
    if (r->comm->rank == 0)
        herd_log(HERD_LOG_WARNING, "restart %d: the checkpoint in '%s' %s (a rank failed after "
                 "training ended): nothing is left to train, its weights are the result",
                 c->run_attempt - 1, c->checkpoint_dir, ended);
    return HERD_OK;
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
    bool parts = r->pp || r->tp || c->zero_stage;
    if (parts) {
        HERD_TRY(whole_for_checkpoint(r, &r->ckpt_whole, &r->ckpt_opt));
        m = r->ckpt_whole;
        o = r->ckpt_opt;
    }
    HERD_TRY(herd_checkpoint_load_latest(c->checkpoint_dir, m, o, &st, &found));
    if (parts && found) /* the parts take their steps from here, then broadcast_state's */
        herd_optimizer_set_steps(r->opt, herd_optimizer_steps(o));
    if (parts && !found) {
        herd_run_release_whole(r, r->ckpt_whole, r->ckpt_opt);
        r->ckpt_whole = NULL;
        r->ckpt_opt = NULL;
    }
    if (found) {
        HERD_TRY(herd_train_state_continue(&st, &r->state, r->steps_per_epoch, c->checkpoint_dir));
        char ended[160] = ""; /* how the checkpoint's run had ended, if it had */
        if (st.epoch >= c->epochs)
            snprintf(ended, sizeof ended, "has finished all %d epoch%s (--epochs %d)", st.epoch,
                     st.epoch == 1 ? "" : "s", c->epochs);
        else if (c->max_steps > 0 && st.global_step >= c->max_steps)
            snprintf(ended, sizeof ended, "is at step %ld and --max-steps is %ld", st.global_step,
                     c->max_steps);
        if (ended[0])
            HERD_TRY(resume_ended(r, ended, st.epoch >= c->epochs ? "--epochs" : "--max-steps"));
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
herd_status herd_run_prepare_checkpoints(run *r)
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
    bool split = r->pp || r->tp; /* each rank holds a part of every replica's model */
    if (!split && !r->cfg.zero_stage)
        return HERD_OK;
    /* Rank 0 read the whole model: each stage of the first replica takes its slice
     * (broadcast_state then gives it to the stage's group), or each rank its ZeRO slice
     * of the optimizer state (the parameters are broadcast whole). */
    long loaded = r->ckpt_whole != NULL;
    HERD_TRY(r->comm->ops->broadcast(r->comm, &loaded, sizeof loaded, 0));
    herd_status st = HERD_OK;
    herd_optimizer *stage_opt = r->opt;
    if (loaded && split)
        st = stage_optimizer_whole(r, &stage_opt);
    if (loaded && r->pp && st == HERD_OK)
        st = herd_pipeline_scatter(r->pp, stage_opt, r->ckpt_whole, r->ckpt_opt);
    if (loaded && r->tp && !r->pp && st == HERD_OK) /* stages hand out their parts themselves */
        st = herd_tensor_par_scatter(r->tp, r->comm, stage_opt, r->ckpt_whole, r->ckpt_opt);
    if (loaded && r->cfg.zero_stage && st == HERD_OK) /* each part's first replica, or rank 0 */
        st = herd_zero_scatter_state(&r->zero, ckpt_comm(r), split ? stage_opt : r->ckpt_opt, r->opt);
    stage_optimizer_release(r, stage_opt);
    herd_run_release_whole(r, r->ckpt_whole, r->ckpt_opt);
    r->ckpt_whole = NULL;
    r->ckpt_opt = NULL;
    return st;
}

/* The run's counters go into the checkpoint's state and come back from it (a state
 * without them, fresh or older, holds 0: counting starts there, the scale stays). */
static herd_status save_counters(run *r)
{
    r->state.clipped_steps = r->clipped_steps;
    r->state.skipped_steps = r->scaler.skipped;
    r->state.loss_scale = r->cfg.dynamic_loss_scale ? r->scaler.scale : 0.0;
    r->state.loss_scale_clean = r->scaler.clean_steps;
    r->state.exact_grid[0] = '\0';
    /* The whole model's grid: with pipeline stages each stage holds its part. */
    if (r->plan.exact && r->pp)
        return herd_pipeline_exact_grid_text(r->pp, r->whole, &r->exact, r->state.exact_grid,
                                             sizeof r->state.exact_grid);
    if (r->plan.exact)
        herd_exact_sum_grid_text(&r->exact, r->m, r->state.exact_grid, sizeof r->state.exact_grid);
    return HERD_OK;
}

herd_status herd_run_resume_counters(run *r)
{
    r->clipped_steps = r->state.clipped_steps;
    r->scaler.skipped = r->state.skipped_steps;
    if (r->cfg.dynamic_loss_scale && r->state.loss_scale > 0) {
        r->scaler.scale = (float)r->state.loss_scale;
        r->scaler.clean_steps = (int)r->state.loss_scale_clean;
    }
    /* The same on every rank (the state was broadcast): so is an error. */
    if (r->plan.exact && r->state.exact_grid[0] && r->pp)
        return herd_pipeline_set_exact_grid_text(r->pp, r->whole, &r->exact, r->state.exact_grid);
    if (r->plan.exact && r->state.exact_grid[0])
        return herd_exact_sum_set_grid_text(&r->exact, r->m, r->state.exact_grid);
    return HERD_OK;
}

/* Every rank calls it; rank 0 writes. With pipeline stages (tensor parts) the first
 * replica's stages (parts) send rank 0 their slices, so the file holds the whole model
 * whatever the grid. */
herd_status herd_run_save_checkpoint(run *r)
{
    HERD_TRY(herd_step_params_ready(&r->plan));
    double t0 = herd_now();
    herd_status st = HERD_OK;
    bool rank0 = r->comm->rank == 0;
    HERD_TRY(save_counters(r)); /* collective with pipeline stages: every rank is here */
    if (r->cfg.zero_stage && !r->pp && !r->tp) {
        st = herd_zero_save(&r->zero, ckpt_comm(r), r->cfg.checkpoint_dir,
                            r->cfg.keep_checkpoints, r->m, r->opt, &r->state);
    } else if (!r->pp && !r->tp) {
        /* Copied now, written by the writer's thread while training goes on; this
         * returns the previous write's outcome. */
        if (rank0 && !r->writer)
            st = herd_ckpt_writer_create(&r->writer);
        if (rank0 && st == HERD_OK)
            st = herd_ckpt_writer_submit(r->writer, r->cfg.checkpoint_dir, r->cfg.keep_checkpoints,
                                         r->m, r->opt, &r->state);
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
        if (st == HERD_OK && r->pp)
            st = herd_pipeline_gather(r->pp, stage_opt, w, wo);
        else if (st == HERD_OK)
            st = herd_tensor_par_gather(r->tp, r->comm, stage_opt, w, wo);
        stage_optimizer_release(r, stage_opt);
        if (st == HERD_OK && rank0) {
            herd_optimizer_set_steps(wo, herd_optimizer_steps(r->opt));
            st = herd_checkpoint_save(r->cfg.checkpoint_dir, w, wo, &r->state, NULL,
                                      r->cfg.keep_checkpoints);
        }
        herd_run_release_whole(r, w, wo);
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
herd_status herd_run_finish_checkpoint_writes(run *r)
{
    herd_status st = r->writer ? herd_ckpt_writer_wait(r->writer) : HERD_OK;
    return herd_agree(r->comm, st, "writing the last checkpoint in the background");
}
