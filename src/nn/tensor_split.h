/* Tensor parallelism's offset arithmetic: which part of a whole tensor a rank holds,
 * and copies between the two. A split layer declares its tensors with
 * herd_model_add_split_tensor; initialisation, checkpoints and the caller's model work
 * on whole tensors and move parts with herd_split_copy. */
#ifndef HERD_NN_TENSOR_SPLIT_H
#define HERD_NN_TENSOR_SPLIT_H

#include <stdbool.h>
#include <stdint.h>

#include "nn/model.h"

/* Part `part` of `parts` of a length len: [*first, *first + *count), the parts as even
 * as can be (the first len % parts one longer). */
void herd_split_range(int64_t len, int part, int parts, int64_t *first, int64_t *count);

/* Declares a tensor of layer l whose whole shape is `whole` (ndim 1 or 2), cut along
 * dimension dim (0 or 1; along 0 in `groups` equal blocks cut alike) into m->tp.size
 * parts, of which this rank holds part m->tp.rank. Without tensor parallelism: the
 * whole tensor. Returns the view index (herd_model_add_tensor). */
int herd_model_add_split_tensor(herd_model *m, herd_layer *l, const char *suffix, int ndim,
                                const int64_t *whole, int dim, int groups, int no_decay);

/* Host memory: to_part copies v's part out of the whole tensor into part; otherwise
 * part goes to its place in whole. A view that is not split copies all of it. */
void herd_split_copy(const herd_tensor_view *v, float *whole, float *part, bool to_part);

/* The rows [*first, *first + *count) of the whole tensor that view v holds along its
 * split dimension (a view that is not split: all of them, along dimension 0). */
void herd_split_view_range(const herd_tensor_view *v, int64_t *first, int64_t *count);

/* Whether layer i's output is one tensor part's under --tensor-parallel: a column-parallel
 * linear's, and an element-wise layer's (relu, gelu, dropout) after one, up to the
 * row-parallel linear that sums it. From the layers' specs alone (m->layers[0..i]), so
 * the same for any T (and without it: a pipeline stage never begins after such a layer,
 * nn/partition.h). */
bool herd_split_output(const herd_model *m, int i);
/* Layer i (its spec and those before it set; -1 the model's input, whole) against that
 * rule when the model is split: a part read by anything but an element-wise layer or a
 * row-parallel linear, a row-parallel linear reading a whole tensor, or a model ending on
 * a part (unless its end is open: a pipeline stage's), is an error naming the layers. */
herd_status herd_split_check(const herd_model *m, int i);

/* Plans (no storage) part `part` of a model split `parts` ways from the whole model's
 * layer specs: its views tell where its parameters sit in the whole (checkpoints). */
herd_status herd_model_plan_part(const herd_model *whole, int part, int parts, herd_model **out);

#endif
