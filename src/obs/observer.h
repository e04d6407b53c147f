/* What the training loop reports beyond the progress callback: TensorBoard event
 * files (--logdir, --histograms) and the metrics file (--metrics). Rank 0 only. */
#ifndef HERD_OBS_OBSERVER_H
#define HERD_OBS_OBSERVER_H

#include "herd/herd.h"

typedef struct herd_observer herd_observer;

/* *out stays NULL (and every call below does nothing) when cfg asks for none of
 * these or rank is not 0. */
herd_status herd_observer_open(const herd_train_config *cfg, const herd_model *m, int rank,
                               herd_observer **out);
/* sum += k * t, phase by phase (sums over steps, and means with k = 1 / steps). */
void herd_phases_add(herd_phase_times *sum, const herd_phase_times *t, double k);

/* One step as the loop measured it. */
typedef struct herd_obs_step {
    double loss_sum, correct, samples; /* over all ranks */
    herd_phase_times t;                /* this rank's phases */
} herd_obs_step;

/* After every step, once its figures are reduced (maybe a step late): logs at each
 * log interval (means over the interval's steps). */
herd_status herd_observer_step(herd_observer *o, const herd_progress *p, const herd_obs_step *s);
/* At the end of step global_step, while the model holds its weights and gradients:
 * histograms every cfg->histograms steps. */
herd_status herd_observer_histograms(herd_observer *o, long global_step);
/* At each epoch end, after evaluation: the epoch's figures as p has them (means
 * over the epoch); flushes the event file. */
herd_status herd_observer_epoch(herd_observer *o, const herd_progress *p);
/* A resumed run starts at its checkpoint: the metrics file drops what came after it
 * (see herd_metrics_rewind). Event files keep every record: TensorBoard itself
 * drops the orphaned steps when a restarted run's steps go back. */
herd_status herd_observer_resume(herd_observer *o, int epochs_done, long global_step);
/* Flushes and frees (NULL is fine). */
herd_status herd_observer_close(herd_observer *o);

#endif
