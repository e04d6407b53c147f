/* Shapes and the model's named tensor views. Activations are NCHW float32;
 * a vector of F features per sample is N x F x 1 x 1. */
#ifndef HERD_CORE_TENSOR_H
#define HERD_CORE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

typedef struct herd_shape {
    int n, c, h, w;
} herd_shape;

static inline size_t herd_shape_per_sample(herd_shape s) { return (size_t)s.c * s.h * s.w; }
static inline size_t herd_shape_numel(herd_shape s) { return (size_t)s.n * s.c * s.h * s.w; }

/* A named view into one of the model's contiguous buffers (parameters,
 * gradients, or non-trained buffers like batch-norm running statistics). */
typedef struct herd_tensor_view {
    char name[96];      /* "conv1.weight", PyTorch state_dict style */
    int ndim;
    int64_t shape[4];
    size_t offset;      /* in floats, within its buffer */
    size_t numel;
    int is_buffer;      /* 1: lives in model->buffers (not trained), 0: a parameter */
    int no_decay;       /* bias or batch-norm parameter: excluded from weight decay by default */
    /* Tensor parallelism (nn/tensor_split.h): with split_parts > 1 this view is part
     * split_part of the whole tensor whole_shape, cut along dimension split_dim (0 or 1);
     * along dimension 0 the whole is split_groups equal blocks (attention's q, k, v), each
     * cut alike. split_parts 0: the whole tensor (on every rank of a tensor group). */
    int split_dim, split_groups, split_part, split_parts;
    int64_t whole_shape[4];
} herd_tensor_view;

#endif
