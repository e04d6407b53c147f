/* Turns the training loop's progress into logged figures for the metrics file and
 * TensorBoard, and the model's tensors into histograms. */
#include "obs/observer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "nn/model.h"
#include "obs/metrics.h"
#include "obs/tensorboard.h"

/* Sums over the steps of a log interval. */
typedef struct step_sums {
    double loss_sum, correct, samples;
    herd_phase_times t;
    long steps;
} step_sums;

struct herd_observer {
    const herd_model *m;
    step_sums interval;
    herd_tb_writer *tb;
    herd_metrics_file *metrics;
    int log_every, histograms;
    bool grad_histograms; /* false under ZeRO: rank 0 holds only its slice of them */
    float *staging; /* host copy of one tensor when the model lives on a device */
};

herd_status herd_observer_open(const herd_train_config *cfg, const herd_model *m, int rank,
                               herd_observer **out)
{
    *out = NULL;
    if (cfg->histograms > 0 && !cfg->logdir)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "--histograms writes into TensorBoard files: it "
                        "needs --logdir");
    if (cfg->histograms < 0 || cfg->log_every < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "histogram (%d) and log (%d) intervals must be >= 0",
                        cfg->histograms, cfg->log_every);
    if (rank != 0 || (!cfg->logdir && !cfg->metrics_path))
        return HERD_OK;
    herd_observer *o = calloc(1, sizeof *o);
    if (!o)
        return HERD_NOMEM(sizeof *o);
    o->m = m;
    o->log_every = cfg->log_every > 0 ? cfg->log_every : 50;
    o->histograms = cfg->histograms;
    o->grad_histograms = cfg->zero_stage == 0;
    if (cfg->histograms > 0 && cfg->zero_stage)
        herd_log(HERD_LOG_INFO, "--histograms with --zero %d: weights only; each rank holds only "
                 "its slice of the reduced gradients", cfg->zero_stage);
    herd_status st = HERD_OK;
    if (cfg->logdir)
        st = herd_tb_writer_open(cfg->logdir, &o->tb);
    if (st == HERD_OK && cfg->metrics_path)
        st = herd_metrics_open(cfg->metrics_path, cfg->resume, &o->metrics);
    if (st == HERD_OK && o->histograms > 0 && !m->be->host_memory) {
        size_t largest = 0;
        for (int i = 0; i < m->n_views; i++)
            largest = m->views[i].numel > largest ? m->views[i].numel : largest;
        if (!(o->staging = malloc(largest * sizeof(float) + 1)))
            st = HERD_NOMEM(largest * sizeof(float));
    }
    if (st != HERD_OK) {
        herd_observer_close(o);
        return st;
    }
    *out = o;
    return HERD_OK;
}

void herd_phases_add(herd_phase_times *sum, const herd_phase_times *t, double k)
{
    sum->data_wait += k * t->data_wait;
    sum->forward += k * t->forward;
    sum->backward += k * t->backward;
    sum->comm_wait += k * t->comm_wait;
    sum->optimizer += k * t->optimizer;
    sum->total += k * t->total;
}

static void add_step(step_sums *sum, const herd_obs_step *s)
{
    sum->loss_sum += s->loss_sum;
    sum->correct += s->correct;
    sum->samples += s->samples;
    herd_phases_add(&sum->t, &s->t, 1.0);
    sum->steps++;
}

/* lr, position and evaluation from the latest progress; the rest measured over the
 * interval or epoch (phases: means per step). */
static herd_obs_figures figures(const herd_progress *p, double loss, double acc,
                                double samples_per_s, const herd_phase_times *mean)
{
    return (herd_obs_figures){
        .epoch_end = p->epoch_end, .epoch = p->epoch, .step = p->global_step,
        .time_s = p->elapsed_s, .train_loss = loss, .train_acc = acc, .lr = p->lr,
        .samples_per_s = samples_per_s, .step_ms = 1e3 * mean->total,
        .data_wait_ms = 1e3 * mean->data_wait, .forward_ms = 1e3 * mean->forward,
        .backward_ms = 1e3 * mean->backward, .comm_wait_ms = 1e3 * mean->comm_wait,
        .optimizer_ms = 1e3 * mean->optimizer,
        .evaluated = p->epoch_end && p->evaluated, .test_loss = p->test_loss,
        .test_acc = p->test_acc,
        .loss_scale = p->loss_scale, /* 0 when not scaling: left out of both files */
        .restarts = p->restarts, .lost_steps = p->lost_steps, .recovery_s = p->recovery_s,
    };
}

/* Means over the interval's steps. */
static herd_obs_figures interval_figures(const herd_progress *p, const step_sums *sum)
{
    herd_phase_times mean = {0};
    herd_phases_add(&mean, &sum->t, sum->steps ? 1.0 / (double)sum->steps : 0);
    double samples = sum->samples > 0 ? sum->samples : 1;
    return figures(p, sum->loss_sum / samples, sum->correct / samples,
                   sum->t.total > 0 ? sum->samples / sum->t.total : 0, &mean);
}

static herd_status log_scalars(herd_observer *o, const herd_obs_figures *f);

static herd_status write_figures(herd_observer *o, const herd_obs_figures *f)
{
    if (o->metrics)
        HERD_TRY(herd_metrics_write(o->metrics, f));
    if (o->tb)
        HERD_TRY(log_scalars(o, f));
    return HERD_OK;
}

static herd_status log_scalars(herd_observer *o, const herd_obs_figures *f)
{
    herd_tb_scalar s[16];
    size_t n = 0;
    if (f->epoch_end) {
        s[n++] = (herd_tb_scalar){"epoch/train_loss", f->train_loss};
        s[n++] = (herd_tb_scalar){"epoch/train_acc", f->train_acc};
        if (f->evaluated) {
            s[n++] = (herd_tb_scalar){"test/loss", f->test_loss};
            s[n++] = (herd_tb_scalar){"test/acc", f->test_acc};
        }
    } else {
        s[n++] = (herd_tb_scalar){"train/loss", f->train_loss};
        s[n++] = (herd_tb_scalar){"train/acc", f->train_acc};
        s[n++] = (herd_tb_scalar){"lr", f->lr};
        s[n++] = (herd_tb_scalar){"throughput/samples_per_s", f->samples_per_s};
        s[n++] = (herd_tb_scalar){"step_time/total_ms", f->step_ms};
        s[n++] = (herd_tb_scalar){"step_time/data_wait_ms", f->data_wait_ms};
        s[n++] = (herd_tb_scalar){"step_time/forward_ms", f->forward_ms};
        s[n++] = (herd_tb_scalar){"step_time/backward_ms", f->backward_ms};
        s[n++] = (herd_tb_scalar){"step_time/comm_wait_ms", f->comm_wait_ms};
        s[n++] = (herd_tb_scalar){"step_time/optimizer_ms", f->optimizer_ms};
        if (f->loss_scale > 0)
            s[n++] = (herd_tb_scalar){"loss_scale", f->loss_scale};
    }
    return herd_tb_write_scalars(o->tb, f->step, s, n);
}

/* "weights/<name>" and "grads/<name>" for every trained tensor (not the buffers). */
static herd_status log_histograms(herd_observer *o, long step)
{
    const herd_model *m = o->m;
    for (int i = 0; i < m->n_views; i++) {
        const herd_tensor_view *v = &m->views[i];
        if (v->is_buffer)
            continue;
        const float *sources[2] = {m->params + v->offset, m->grads + v->offset};
        const char *kinds[2] = {"weights", "grads"};
        for (int k = 0; k < (o->grad_histograms ? 2 : 1); k++) {
            const float *x = sources[k];
            if (o->staging) {
                HERD_TRY(m->be->memcpy_d2h(o->staging, x, v->numel * sizeof(float)));
                x = o->staging;
            }
            char tag[128];
            snprintf(tag, sizeof tag, "%s/%s", kinds[k], v->name);
            HERD_TRY(herd_tb_write_histogram(o->tb, step, tag, x, v->numel));
        }
    }
    return HERD_OK;
}

herd_status herd_observer_step(herd_observer *o, const herd_progress *p, const herd_obs_step *s)
{
    if (!o)
        return HERD_OK;
    add_step(&o->interval, s);
    if (p->global_step % o->log_every == 0) {
        herd_obs_figures f = interval_figures(p, &o->interval);
        o->interval = (step_sums){0};
        HERD_TRY(write_figures(o, &f));
    }
    return HERD_OK;
}

herd_status herd_observer_histograms(herd_observer *o, long global_step)
{
    if (!o || o->histograms <= 0 || global_step % o->histograms != 0)
        return HERD_OK;
    return log_histograms(o, global_step);
}

herd_status herd_observer_epoch(herd_observer *o, const herd_progress *p)
{
    if (!o)
        return HERD_OK;
    herd_obs_figures f = figures(p, p->loss, p->acc, p->epoch_samples_per_s, &p->phases);
    HERD_TRY(write_figures(o, &f));
    return o->tb ? herd_tb_flush(o->tb) : HERD_OK;
}

herd_status herd_observer_resume(herd_observer *o, int epochs_done, long global_step)
{
    return o ? herd_metrics_rewind(o->metrics, epochs_done, global_step) : HERD_OK;
}

herd_status herd_observer_close(herd_observer *o)
{
    if (!o)
        return HERD_OK;
    herd_status st = herd_tb_writer_close(o->tb);
    herd_status st2 = herd_metrics_close(o->metrics);
    free(o->staging);
    free(o);
    return st != HERD_OK ? st : st2;
}
