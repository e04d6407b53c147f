/* What supervised restarts (herd run --max-restarts) cost, counted by rank 0 from
 * checkpoint_dir/progress: each attempt records its last step there (a fixed-size
 * record rewritten in place after every step), and a restarted attempt compares it
 * with the checkpoint it resumed from (steps lost) and with the time of its own first
 * step (time from the last step before the failure to training again). */
#ifndef HERD_TRAIN_RESTARTS_H
#define HERD_TRAIN_RESTARTS_H

#include <stdbool.h>

#include "herd/herd.h"

typedef struct herd_restart_log {
    int fd;            /* DIR/progress, open on rank 0 of a supervised run; else -1 */
    int restarts;      /* totals, this attempt's restart included once measured */
    long lost_steps;
    double recovery_s;
    double failed_at;  /* wall-clock time of the last step before the failure (0: none) */
    long resumed_step; /* where this attempt began */
    long last_lost;    /* this restart's share of the totals */
    double last_recovery_s;
    bool measuring;    /* a restarted attempt's first step is still to come */
} herd_restart_log;

/* Rank 0, after a resume put training at resumed_step. attempt: 1 + restarts so far
 * (herd_train_config.run_attempt). A missing or unreadable record counts nothing. */
herd_status herd_restart_log_open(herd_restart_log *l, const char *dir, int attempt, long resumed_step);
/* After each step. Returns true on a restarted attempt's first step (the totals are
 * then final for it). */
bool herd_restart_log_step(herd_restart_log *l, long step);
void herd_restart_log_close(herd_restart_log *l);

#endif
