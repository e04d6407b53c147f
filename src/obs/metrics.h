/* The figures herd logs per interval and per epoch, and the JSON-lines metrics file. */
#ifndef HERD_OBS_METRICS_H
#define HERD_OBS_METRICS_H

#include <stdbool.h>

#include "herd/herd.h"

/* One logging point, the same figures for --metrics and --logdir: means over the
 * steps since the previous point ("step") or over the epoch's steps ("epoch"). */
typedef struct herd_obs_figures {
    bool epoch_end; /* "kind": "epoch", else "step" */
    int epoch;      /* 1-based */
    long step;      /* global step */
    double time_s;  /* since training started */
    double train_loss, train_acc; /* per sample, all ranks */
    double lr;                    /* of the latest step */
    double samples_per_s;         /* all ranks, training steps only (no evaluation) */
    double step_ms, data_wait_ms, forward_ms, backward_ms, comm_wait_ms, optimizer_ms; /* rank 0 */
    bool evaluated; /* epoch_end only: test_loss and test_acc hold */
    double test_loss, test_acc;
    double loss_scale; /* mixed precision's dynamic loss scale; 0 when not used (left out) */
    int restarts;      /* supervised restarts so far; with lost_steps and recovery_s left out when 0 */
    long lost_steps;
    double recovery_s;
} herd_obs_figures;

typedef struct herd_metrics_file herd_metrics_file;

/* append: keep the lines of an earlier run (a resumed one continues its curves). */
herd_status herd_metrics_open(const char *path, bool append, herd_metrics_file **out);
/* Appends one JSON object as a line, flushed so that readers see whole lines. */
herd_status herd_metrics_write(herd_metrics_file *m, const herd_obs_figures *f);
/* A resumed run's file goes back to its checkpoint: the lines of steps after
 * global_step, and of epochs after epochs_done (a partial epoch's), are dropped, so
 * steps trained again and the resumed epoch are written once. */
herd_status herd_metrics_rewind(herd_metrics_file *m, int epochs_done, long global_step);
herd_status herd_metrics_close(herd_metrics_file *m);

#endif
