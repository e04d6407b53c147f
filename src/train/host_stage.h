/* Arrays of a model's backend worked on in host memory: on a host backend the array
 * itself, on a device a host copy that goes back when asked (tensor parts cut and
 * pasted for tensor_par.c and pipeline_parts.c), and a part cut from a whole model. */
#ifndef HERD_TRAIN_HOST_STAGE_H
#define HERD_TRAIN_HOST_STAGE_H

#include <stdbool.h>

#include "backend/backend.h"
#include "nn/model.h"

/* *out = n floats of be's dev readable and writable on the host: dev itself on a host
 * backend, else a zeroed host array holding dev's values when read is set. */
herd_status herd_host_stage(const herd_backend *be, float *dev, size_t n, bool read, float **out);
/* Ends a herd_host_stage: with write (and st HERD_OK) host goes back into dev; a copy is
 * freed. Returns st, or the copy's failure. */
herd_status herd_host_unstage(const herd_backend *be, float *dev, float *host, size_t n, bool write,
                              herd_status st);
/* part's first n tensors (parameters and buffers) cut from whole's tensors [first,
 * first + n) (nn/tensor_split.h), in host memory on a device backend. */
herd_status herd_host_take_part(herd_model *part, const herd_model *whole, int first, int n);

#endif
