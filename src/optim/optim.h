/* Optimizers over the model's flat parameter and gradient buffers, and LR schedules. */
#ifndef HERD_OPTIM_OPTIM_H
#define HERD_OPTIM_OPTIM_H

#include "herd/herd.h"
#include "nn/model.h"

typedef struct herd_optimizer herd_optimizer;

herd_status herd_optimizer_create(const herd_train_config *cfg, herd_model *m,
                                  herd_optimizer **out);
/* ZeRO: an optimizer that updates only parameters [lo, hi) of the flat buffer and keeps
 * state for them alone (hi - lo floats per state tensor). */
herd_status herd_optimizer_create_part(const herd_train_config *cfg, herd_model *m, size_t lo,
                                       size_t hi, herd_optimizer **out);
/* The part of the flat buffer o updates: [0, n_param_floats) unless made with _part. */
void herd_optimizer_part(const herd_optimizer *o, size_t *lo, size_t *hi);
/* One update of all parameters from m->grads with learning rate lr. */
herd_status herd_optimizer_step(herd_optimizer *o, herd_model *m, float lr);
void herd_optimizer_free(herd_optimizer *o);

/* Optimizer state as named flat tensors (as long as the optimizer's part of the
 * parameters), for checkpoints: "momentum" for SGD, "exp_avg" and "exp_avg_sq" for AdamW. */
int herd_optimizer_state_count(const herd_optimizer *o);
/* The state lives in the backend's memory: a device pointer on a device backend, for
 * kernels and device communicators only; the host reads and writes it through
 * herd_optimizer_state_download/_upload. */
float *herd_optimizer_state(herd_optimizer *o, int i, const char **name, size_t *numel);
/* Floats [first, first + n) of state tensor i to or from host memory: a memcpy on a
 * host-memory backend, the backend's copies on a device. Checkpoints stage the state
 * through these, a piece at a time or whole. */
herd_status herd_optimizer_state_download(const herd_optimizer *o, int i, size_t first, size_t n,
                                          float *host);
herd_status herd_optimizer_state_upload(herd_optimizer *o, int i, size_t first, size_t n,
                                        const float *host);
long herd_optimizer_steps(const herd_optimizer *o);
herd_optimizer_kind herd_optimizer_get_kind(const herd_optimizer *o);
void herd_optimizer_set_steps(herd_optimizer *o, long steps);

/* Gradient clipping by global norm (torch.nn.utils.clip_grad_norm_): the L2 norm of
 * m->grads, summed over `group` when each rank holds a part of the model (pipeline
 * stages; NULL when every rank holds all of it). Above max_norm the gradients are
 * scaled by max_norm / (norm + 1e-6) and *clipped is set. A non-finite norm is an
 * error (the update would write inf or NaN into the weights); every rank of the group
 * sees the same norm, so all stop alike. */
herd_status herd_clip_grad_norm(herd_model *m, float max_norm, const herd_group_sum *group,
                                double *norm, bool *clipped);
/* The same over m->grads[first .. first+count) (ZeRO: each rank its slice, with group
 * summing over the ranks); only that part is scaled. */
herd_status herd_clip_grad_norm_part(herd_model *m, size_t first, size_t count, float max_norm,
                                     const herd_group_sum *group, double *norm, bool *clipped);
/* Its two halves, for a caller that checks the norm itself: the sum of squares of the
 * part (summed over group; non-finite when any value is), and the scaling to max_norm
 * of a part whose global norm is `norm` (finite). */
herd_status herd_grad_sum_squares_part(const herd_model *m, size_t first, size_t count,
                                       const herd_group_sum *group, double *sq);
/* The same for a tensor-parallel part (model.h's tp): whole tensors counted on part 0
 * only, so that adding over the tensor group (`tensor`, after `group`) gives the whole
 * model's sum of squares on every rank. */
herd_status herd_grad_sum_squares_split(const herd_model *m, size_t first, size_t count,
                                        const herd_group_sum *group,
                                        const herd_group_sum *tensor, double *sq);
herd_status herd_clip_grad_to(herd_model *m, size_t first, size_t count, float max_norm,
                              double norm, bool *clipped);
/* The first parameter view whose gradient in [first, first+count) holds inf or NaN (its
 * index in m->views, or -1), read through the backend's copies: for error messages. */
herd_status herd_first_nonfinite_grad(const herd_model *m, size_t first, size_t count, int *view);

/* What this rank holds of parameters, gradients and optimizer state, in bytes. */
herd_state_bytes herd_optimizer_state_bytes(herd_optimizer *o, const herd_model *m);

/* Learning rate at a global step (0-based) with linear warmup then the schedule. */
float herd_lr_at(const herd_train_config *cfg, long global_step, long steps_per_epoch);

#endif
