/* One training step (forward, loss, backward, update) and evaluation, shared by
 * herd_train, herd_bench_train and herd_evaluate. */
#ifndef HERD_TRAIN_STEP_H
#define HERD_TRAIN_STEP_H

#include "data/dataset.h"
#include "nn/model.h"
#include "optim/optim.h"

typedef struct herd_step_stats {
    double loss_sum; /* summed per-sample loss */
    long correct;
    int samples;
    herd_phase_times t; /* data_wait is filled by the caller */
} herd_step_stats;

typedef struct herd_step_buffers {
    float *dlogits;
    int capacity;
} herd_step_buffers;

herd_status herd_train_step(herd_model *m, herd_optimizer *o, herd_step_buffers *buf,
                            const herd_batch *b, float lr, float label_smoothing, uint64_t seed,
                            herd_step_stats *out);
void herd_step_buffers_free(herd_model *m, herd_step_buffers *buf);

/* Mean loss and accuracy over a whole dataset in evaluation mode. */
herd_status herd_eval_dataset(herd_model *m, herd_dataset *ds, int batch_size,
                              herd_eval_result *r);

#endif
