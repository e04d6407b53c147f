/* The model's loss: softmax cross-entropy over its classes, vocabulary-parallel when a
 * tensor-parallel head gives each rank a part of them (model.h's class_first,
 * class_count). */
#ifndef HERD_NN_XENT_SPLIT_H
#define HERD_NN_XENT_SPLIT_H

#include "nn/model.h"

/* As the backend's softmax_xent over n rows of m's logits (n = samples x positions):
 * the mean loss's gradient into dlogits (NULL: none), the summed loss and the argmax
 * hits. With tensor parallelism every rank of the group calls it with the same labels
 * and gets the same loss and hits; its dlogits are its part's. */
herd_status herd_model_xent(const herd_model *m, int n, const float *logits,
                            const int32_t *labels, float smoothing, float *dlogits,
                            double *loss_sum, long *correct);

#endif
