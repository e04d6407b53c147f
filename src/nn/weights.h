/* Model weights <-> safetensors, shared by herd_model_save/load and checkpoints. */
#ifndef HERD_NN_WEIGHTS_H
#define HERD_NN_WEIGHTS_H

#include "core/safetensors.h"
#include "nn/model.h"

/* Writes every view (parameters and buffers) by name, plus extra metadata. */
herd_status herd_weights_write(const herd_model *m, const char *path, const char *const *keys,
                               const char *const *values, size_t n_meta);
/* Checks that f holds exactly the model's tensors with the same shapes; changes nothing. */
herd_status herd_weights_check(const herd_model *m, const herd_st_file *f, const char *path);
/* Copies f's tensors into the model (after herd_weights_check succeeded). */
herd_status herd_weights_apply(herd_model *m, const herd_st_file *f);

#endif
