/* Checkpoints: weights (safetensors) plus training state (optimizer buffers and
 * counters, safetensors with metadata), published by atomically rewriting
 * DIR/latest, so a crash mid-save leaves the previous checkpoint in force. */
#ifndef HERD_TRAIN_CHECKPOINT_H
#define HERD_TRAIN_CHECKPOINT_H

#include <stdbool.h>

#include "herd/herd.h"
#include "nn/model.h"
#include "optim/optim.h"

typedef struct herd_train_state {
    int epoch;          /* epochs completed */
    long global_step;   /* steps completed */
    uint64_t seed;
    int batch_size;
} herd_train_state;

herd_status herd_checkpoint_save(const char *dir, const herd_model *m, herd_optimizer *o,
                                 const herd_train_state *st);
/* Loads DIR/latest's checkpoint; *found is false (and HERD_OK) when DIR has none. */
herd_status herd_checkpoint_load_latest(const char *dir, herd_model *m, herd_optimizer *o,
                                        herd_train_state *st, bool *found);

#endif
