/* Checkpoints: weights (safetensors) plus training state (optimizer buffers and
 * counters, safetensors with metadata), published by atomically rewriting
 * DIR/latest, so a crash mid-save leaves the previous checkpoint in force. */
#ifndef HERD_TRAIN_CHECKPOINT_H
#define HERD_TRAIN_CHECKPOINT_H

#include <stdbool.h>

#include "herd/herd.h"
#include "nn/model.h"
#include "core/safetensors.h"
#include "optim/optim.h"

/* Where training stands. The position inside an epoch is counted in samples of the
 * epoch's permutation, so a run with other ranks, batch or --grad-accum continues
 * with the next samples of the same permutation. */
/* Room for the exact sums' grid in the state: 1600-odd views of "-150,". */
#define HERD_EXACT_GRID_TEXT 8192

typedef struct herd_train_state {
    int epoch;          /* epochs completed */
    long global_step;   /* optimizer steps taken, whatever their size */
    uint64_t seed;
    /* What the run that saved it measured the position in (batch_size is per rank). */
    int batch_size, ranks, grad_accum;
    long train_samples; /* the data set's size: the length of every epoch's permutation */
    /* Inside epoch `epoch` (all 0 at an epoch boundary): permutation positions
     * consumed, and the epoch's sums so far over all ranks. */
    long epoch_samples;
    long epoch_seen; /* samples the sums cover: epoch_samples, or fewer after an older checkpoint */
    double epoch_loss_sum, epoch_correct;
    bool legacy; /* loaded from a checkpoint without epoch_samples (herd 0.x): position unknown */
    /* Counters over the whole run, so a resumed run reports what an uninterrupted one
     * would: steps --clip-grad-norm scaled down, steps the loss scaler skipped, and the
     * dynamic loss scale with its clean steps in a row (loss_scale 0: none recorded,
     * the run's --loss-scale-init holds; older checkpoints have all 0). */
    long clipped_steps, skipped_steps;
    double loss_scale;
    long loss_scale_clean;
    /* --deterministic: the grid of the next step's exact sums, one exponent per view,
     * comma-separated ("" when none), so a resumed run sums as the uninterrupted one. */
    char exact_grid[HERD_EXACT_GRID_TEXT];
} herd_train_state;

/* The highest step a checkpoint may hold: steps are logged as doubles and counted on. */
#define HERD_CKPT_MAX_STEP (1L << 53)

/* Optimizer state the ranks hold in slices (ZeRO): each whole tensor's floats and,
 * per state tensor of o, a source of its bytes in order, called while the file is
 * written; o's own state is then not read. */
#define HERD_CKPT_MAX_STATE 2
typedef struct herd_state_slices {
    size_t numel;
    long optimizer_steps; /* the steps of the optimizer the slices are from */
    herd_part_source next[HERD_CKPT_MAX_STATE];
    void *user[HERD_CKPT_MAX_STATE];
} herd_state_slices;

/* slices: NULL when o holds its state whole. Once `latest` names the new checkpoint,
 * older ones beyond the newest keep (the new one counted) are deleted; keep 0 keeps
 * every one (herd_train_config's keep_checkpoints). */
herd_status herd_checkpoint_save(const char *dir, const herd_model *m, herd_optimizer *o,
                                 const herd_train_state *st, const herd_state_slices *slices,
                                 int keep);
/* Loads DIR/latest's checkpoint; *found is false (and HERD_OK) when DIR has none.
 * Without latest, the newest checkpoint file that passes every check is loaded (a
 * warning says so); checkpoint files of which none passes are refused, not pruned.
 * Every field is validated; an error names the file, the field and the value. Both
 * files' checksums are verified (a file without one, from an older herd, is loaded
 * with a warning), every tensor must hold finite values, and the weights' step must
 * be the state's. When the checkpoint is refused, the error says which earlier
 * checkpoint in DIR (an older step) passes all of this and how to resume from it. */
herd_status herd_checkpoint_load_latest(const char *dir, herd_model *m, herd_optimizer *o,
                                        herd_train_state *st, bool *found);
/* Fits a loaded state to this run. now holds the run's seed, batch_size, ranks,
 * grad_accum and train_samples; steps_per_epoch is the run's. Mid-epoch, only the
 * epoch's permutation must be the same (seed and data size); batch, ranks and
 * --grad-accum may change. On success st is measured in the run's terms. */
herd_status herd_train_state_continue(herd_train_state *st, const herd_train_state *now,
                                      long steps_per_epoch, const char *dir);
/* Deletes the temporary files of interrupted checkpoint writes in dir (a missing dir
 * has none); *removed counts them. */
herd_status herd_checkpoint_remove_stale(const char *dir, int *removed);

#endif
