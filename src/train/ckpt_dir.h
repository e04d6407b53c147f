/* A checkpoint directory's owner and run: rank 0 claims it at set-up, before any
 * training. The claim creates it, test-writes it, locks DIR/.lock (flock: the kernel
 * drops the lock when the process dies, so a killed job leaves none behind) and checks
 * DIR/run.json, the identity of the run whose checkpoints it holds (docs/reliability.md,
 * "Checkpoint directories"). */
#ifndef HERD_TRAIN_CKPT_DIR_H
#define HERD_TRAIN_CKPT_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/herd.h"

/* What makes two runs one: model, data and seed must match for a resume; the global
 * batch may change (herd_train_state_continue fits the position to it). */
typedef struct herd_run_identity {
    const char *model;
    size_t parameters;
    const char *data;   /* the data set's spec (--data) */
    long train_samples; /* recorded, not compared: it may change at an epoch end */
    uint64_t seed;
    long global_batch;
} herd_run_identity;

typedef struct herd_ckpt_dir {
    int lock_fd; /* -1: not held */
} herd_ckpt_dir;

#define HERD_CKPT_DIR_INIT {.lock_fd = -1}

/* Claims dir for this process: created, test-written (a file written, fsynced,
 * removed), locked, and its run.json checked against id (resume: this run continues
 * the recorded one; else a directory holding another run's checkpoints is refused)
 * and written for a new run. A lock held by another process is waited for up to
 * wait_s seconds (a supervised restart whose predecessor is still exiting), then
 * refused naming its host and pid. Errors name the path. */
herd_status herd_ckpt_dir_claim(herd_ckpt_dir *d, const char *dir, const herd_run_identity *id,
                                bool resume, double wait_s);
/* Drops the lock (the file stays: removing it would race with a new owner). */
void herd_ckpt_dir_release(herd_ckpt_dir *d);

#endif
