/* The training loop: epochs of shuffled batches, LR schedule, evaluation,
 * checkpoints and resume, progress reports. */
#include <math.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "train/checkpoint.h"
#include "train/step.h"

typedef struct run {
    herd_model *m;
    herd_dataset *train, *test;
    const herd_train_config *cfg;
    herd_progress_fn progress;
    void *user;
    herd_loader *loader;
    herd_optimizer *opt;
    herd_step_buffers buf;
    herd_train_state state;
    herd_train_result *res;
    double train_time; /* seconds spent in training steps (excludes evaluation) */
    long train_samples;
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
    if (c->warmup_epochs < 0 || c->warmup_epochs > c->epochs)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "warmup epochs must be in [0, epochs], got %g",
                        c->warmup_epochs);
    if (c->resume && !c->checkpoint_dir)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "--resume needs --checkpoint-dir");
    if (c->n_milestones < 0 || c->n_milestones > HERD_MAX_MILESTONES)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "at most %d milestones", HERD_MAX_MILESTONES);
    return HERD_OK;
}

static herd_status evaluate(run *r, herd_progress *p)
{
    herd_eval_result ev;
    HERD_TRY(herd_eval_dataset(r->m, r->test, r->cfg->batch_size, &ev));
    p->evaluated = true;
    p->test_loss = ev.loss;
    p->test_acc = ev.acc;
    r->res->test_loss = ev.loss;
    r->res->test_acc = ev.acc;
    return HERD_OK;
}

static void add_phases(herd_phase_times *sum, const herd_phase_times *t)
{
    sum->data_wait += t->data_wait;
    sum->forward += t->forward;
    sum->backward += t->backward;
    sum->optimizer += t->optimizer;
    sum->total += t->total;
}

static void scale_phases(herd_phase_times *t, double k)
{
    t->data_wait *= k;
    t->forward *= k;
    t->backward *= k;
    t->optimizer *= k;
    t->total *= k;
}

/* Runs one epoch; *stop is set when the callback or max_steps ends training. */
static herd_status run_epoch(run *r, int epoch, long first_batch, double t_start, bool *stop)
{
    const herd_train_config *cfg = r->cfg;
    long per_epoch = herd_loader_batches_per_epoch(r->loader);
    HERD_TRY(herd_loader_start_epoch(r->loader, epoch, first_batch));
    herd_progress p = {.epoch = epoch + 1, .epochs = cfg->epochs, .steps_per_epoch = per_epoch};
    herd_phase_times sum = {0};
    double loss_sum = 0;
    long correct = 0, samples = 0;
    long step = first_batch;
    for (;; step++) {
        herd_batch b;
        bool has;
        HERD_TRY(herd_loader_next(r->loader, &b, &has));
        if (!has)
            break;
        double t0 = herd_now();
        float lr = herd_lr_at(cfg, r->state.global_step, per_epoch);
        herd_step_stats s;
        HERD_TRY(herd_train_step(r->m, r->opt, &r->buf, &b, lr, cfg->label_smoothing,
                                 herd_mix64(cfg->seed, (uint64_t)r->state.global_step), &s));
        if (!isfinite(s.loss_sum))
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "the loss became %g at epoch %d step %ld; lower --lr or add "
                            "--warmup-epochs",
                            s.loss_sum, epoch + 1, step + 1);
        s.t.data_wait = b.wait_s;
        s.t.total = herd_now() - t0 + b.wait_s;
        add_phases(&sum, &s.t);
        r->train_time += s.t.total;
        r->train_samples += s.samples;
        r->state.global_step++;
        loss_sum += s.loss_sum;
        correct += s.correct;
        samples += s.samples;

        p.step = step + 1;
        p.step_loss = s.loss_sum / s.samples;
        p.global_step = r->state.global_step;
        p.loss = loss_sum / (double)samples;
        p.acc = (double)correct / (double)samples;
        p.lr = lr;
        p.samples_per_s = r->train_samples / r->train_time;
        p.elapsed_s = herd_now() - t_start;
        long left = (long)(cfg->epochs - epoch - 1) * per_epoch + (per_epoch - step - 1);
        p.eta_s = left * (r->train_time / (double)(r->state.global_step - r->res->steps));
        p.phases = sum;
        scale_phases(&p.phases, 1.0 / (double)(step + 1 - first_batch));
        if (r->progress && !r->progress(&p, r->user))
            *stop = true;
        if (cfg->max_steps > 0 && r->state.global_step >= cfg->max_steps)
            *stop = true;
        if (*stop) {
            step++;
            break;
        }
    }
    r->res->train_loss = samples ? loss_sum / (double)samples : 0;
    r->res->train_acc = samples ? (double)correct / (double)samples : 0;
    add_phases(&r->res->phases, &sum);
    bool complete = step >= per_epoch;
    if (complete)
        r->state.epoch = epoch + 1; /* a stop mid-epoch resumes inside it (see resume) */
    r->res->epochs_done = epoch + 1;

    p.epoch_end = true;
    bool last = epoch + 1 == cfg->epochs || *stop;
    if (r->test && (last || (cfg->eval_every > 0 && (epoch + 1) % cfg->eval_every == 0)))
        HERD_TRY(evaluate(r, &p));
    if (cfg->checkpoint_dir && complete)
        HERD_TRY(herd_checkpoint_save(cfg->checkpoint_dir, r->m, r->opt, &r->state));
    if (r->progress && !r->progress(&p, r->user))
        *stop = true;
    return HERD_OK;
}

static herd_status resume(run *r)
{
    bool found = false;
    herd_train_state st;
    HERD_TRY(herd_checkpoint_load_latest(r->cfg->checkpoint_dir, r->m, r->opt, &st, &found));
    if (!found)
        return HERD_OK; /* nothing saved yet: a fresh start, as torchrun's elastic restart */
    if (st.seed != r->cfg->seed || st.batch_size != r->cfg->batch_size)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "the checkpoint in '%s' was trained with seed %llu and batch size %d, "
                        "not %llu and %d; resume with the same flags",
                        r->cfg->checkpoint_dir, (unsigned long long)st.seed, st.batch_size,
                        (unsigned long long)r->cfg->seed, r->cfg->batch_size);
    r->state = st;
    return HERD_OK;
}

static herd_status train_run(run *r)
{
    const herd_train_config *cfg = r->cfg;
    HERD_TRY(r->m->be->set_threads(cfg->threads));
    herd_loader_config lc = {
        .batch_size = cfg->batch_size, .shuffle = true, .augment = cfg->augment,
        .drop_last = false, .seed = cfg->seed, .prefetch = 4, .workers = 1,
        .shard_rank = 0, .shard_count = 1,
    };
    HERD_TRY(herd_loader_create(r->train, &lc, &r->loader));
    HERD_TRY(herd_optimizer_create(cfg, r->m, &r->opt));
    r->state = (herd_train_state){.seed = cfg->seed, .batch_size = cfg->batch_size};
    if (cfg->resume)
        HERD_TRY(resume(r));
    r->res->steps = r->state.global_step; /* steps before this run (resume) */
    double t_start = herd_now();
    bool stop = false;
    /* Batches per epoch are fixed by dataset and batch size, so the position inside
     * an interrupted epoch follows from the step count. */
    long per_epoch = herd_loader_batches_per_epoch(r->loader);
    long first_batch = r->state.global_step - (long)r->state.epoch * per_epoch;
    if (first_batch < 0 || first_batch >= per_epoch)
        first_batch = 0;
    for (int epoch = r->state.epoch; epoch < cfg->epochs && !stop; epoch++, first_batch = 0)
        HERD_TRY(run_epoch(r, epoch, first_batch, t_start, &stop));
    long steps_run = r->state.global_step - r->res->steps;
    r->res->steps = r->state.global_step;
    r->res->wall_s = herd_now() - t_start;
    r->res->samples_per_s = r->train_time > 0 ? r->train_samples / r->train_time : 0;
    if (steps_run > 0)
        scale_phases(&r->res->phases, 1.0 / (double)steps_run);
    bool saved_at_epoch_end = r->state.global_step == (long)r->state.epoch * per_epoch;
    if (cfg->checkpoint_dir && steps_run > 0 && !saved_at_epoch_end)
        HERD_TRY(herd_checkpoint_save(cfg->checkpoint_dir, r->m, r->opt, &r->state));
    return HERD_OK;
}

herd_status herd_train(herd_model *m, herd_dataset *train, herd_dataset *test,
                       const herd_train_config *cfg, herd_progress_fn progress, void *user,
                       herd_train_result *result)
{
    if (!m || !train || !cfg || !result)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_train needs a model, training data, a config "
                        "and a result");
    HERD_TRY(validate(cfg));
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
    memset(result, 0, sizeof *result);
    result->test_loss = result->test_acc = -1;
    run r = {.m = m, .train = train, .test = test, .cfg = cfg, .progress = progress,
             .user = user, .res = result};
    herd_status st = train_run(&r);
    herd_step_buffers_free(m, &r.buf);
    herd_optimizer_free(r.opt);
    herd_loader_free(r.loader);
    return st;
}
