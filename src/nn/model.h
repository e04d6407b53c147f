/* The model graph: layers in topological order, all parameters in one
 * contiguous buffer, all gradients in another, named views per tensor. */
#ifndef HERD_NN_MODEL_H
#define HERD_NN_MODEL_H

#include "nn/layer.h"

struct herd_model {
    char name[64];
    const herd_backend *be;
    herd_precision precision; /* applied to be at the start of training and benchmarks */
    int in_c, in_h, in_w, classes;
    /* Predictions per sample, set up from the last layer: 1 for a classifier (it gives
     * `classes` values); T for a language model, whose last layer gives 1 x T x classes
     * (a prediction at each position: the loss is over n x T rows of `classes`). */
    int positions;
    /* The classes the last layer gives on this rank: [class_first, class_first +
     * class_count), all of them unless a tensor-parallel head splits the vocabulary. */
    int class_first, class_count;

    herd_layer *layers;
    int n_layers;

    herd_tensor_view *views;
    int n_views, cap_views;
    size_t n_param_floats;  /* params and grads have this many floats */
    size_t n_buffer_floats; /* batch-norm running statistics etc. */
    float *params, *grads, *buffers;

    /* Per-batch activations: acts[i] is layer i's output, dacts[i] its gradient (NULL
     * for the last layer, whose gradient comes from the loss). Gradients live only
     * from their last consumer's backward to their own, so they share the buffers
     * grad_slots[0..n_grad_slots) where those spans do not overlap. */
    int batch;
    /* Activations between layers that take them are bf16 (herd_bf16_act_ops): chosen
     * at reshape from the backend's arithmetic (a change of it reshapes). Each layer's
     * in_format / out_format says which of its tensors are. */
    bool bf16_acts;
    bool fp32_acts_only; /* HERD_BF16_ACTIVATIONS=fp32 at setup: bf16 runs keep fp32 ones */
    float **acts, **dacts;
    float **grad_slots;
    int n_grad_slots;
    float *scratch;       /* for gradients of outputs that feed several layers */
    size_t scratch_floats;
    int *consumers;       /* how many layers read layer i's output */
    int input_consumers;  /* how many layers read the model input */
    int *grad_written;    /* backward: consumers that have already written layer i's gradient */
    int input_written;    /* backward: consumers that have already written the input's */
    /* backward: whether layer i's output gradient is read, because the layer has
     * parameters or an input whose gradient is (the model input's when input_grad): the
     * others (a flatten of the input, say) get none, and their readers no input
     * gradient to compute (PyTorch's requires_grad). */
    bool *needs_grad;
    float *input_dev;     /* copy of the input batch in backend memory (NULL for CPU) */
    /* Activation recomputation (nn/recompute.h; herd_model_set_recompute): the outputs
     * inside runs of layers between cuts share one pool, re-run in backward. rc: where
     * this batch's activations and stashes live (set by reshape, either way). */
    bool recompute;
    /* --loss-chunk (nn/loss_chunks.h): the last layer's batch at most this many samples,
     * the rest of the batch in later chunks (0: the whole batch). */
    int loss_chunk;
    struct herd_recompute *rc;
    struct herd_recompute_pool *shared_pool; /* NULL: rc's pool is the model's own */

    /* A pipeline stage is a model of its own over layers first..end-1 of the whole:
     * its input is layer first-1's output, and its layers keep their names and
     * initialise from their index in the whole model. */
    int layer_offset;     /* the whole model's index of layers[0] (0 for a whole model) */
    bool open_output;     /* the last layer feeds the next stage: its output need not be the classes */
    /* Backward also produces the gradient of the input (for the stage before):
     * dinput (batch x in_c x in_h x in_w), allocated by reshape. */
    bool input_grad;
    float *dinput;

    /* Tensor parallelism: set before planning, the layers set up this rank's part (its
     * views say which part of which whole tensor, nn/tensor_split.h). The group's
     * functions are filled in by the trainer before the first forward. */
    herd_tp_group tp;
};

/* Declares a tensor of the layer being set up; returns its view index. */
int herd_model_add_tensor(herd_model *m, herd_layer *l, const char *suffix, int ndim,
                          const int64_t *shape, int is_buffer, int no_decay);

/* Sets up the layers of parsed specs (shapes, tensor views and offsets) without
 * allocating parameters, gradients or buffers (they stay NULL): enough to plan
 * pipeline stages and to describe the model. */
herd_status herd_model_plan(herd_model *m, const herd_layer_spec *specs, int n_specs);
/* Builds a model from parsed layer specs (after setup, params allocated and initialised). */
herd_status herd_model_build(herd_model *m, const herd_layer_spec *specs, int n_specs,
                             uint64_t init_seed);

/* A stage of `whole`: layers first..end-1 (a valid cut: partition.h), input shape
 * and tensor names taken from whole. With storage, parameters, gradients and
 * buffers are allocated and initialised from seed exactly as those layers of the
 * whole model are (herd_model_init_params); without, the stage holds only its layers
 * and activations (a slot for one micro-batch in flight, run with the storage of
 * another stage model through herd_run_ctx). input_grad: see the field. */
herd_status herd_model_build_stage(herd_model *stage, const herd_model *whole, int first, int end,
                                   bool storage, bool input_grad, uint64_t seed);

/* A model of name_or_path (a zoo name or a model file) for c x h x w inputs and
 * `classes` classes on backend be (model_api.c): with storage, built and initialised
 * from seed 0 (herd_model_build); without, a plan (herd_model_plan). Checks the shape. */
herd_status herd_model_create_on(const char *name_or_path, int c, int h, int w, int classes,
                                 const herd_backend *be, bool storage, herd_model **out);

/* Ensures activations for this batch size exist. */
herd_status herd_model_reshape(herd_model *m, int batch);
/* The last layer's batch at a batch of `batch`: a chunk of it under --loss-chunk
 * (nn/loss_chunks.h). */
int herd_model_head_batch(const herd_model *m, int batch);
/* Activation recomputation on or off from the next reshape (pipeline stages and other
 * models built from m take it over). */
void herd_model_set_recompute(herd_model *m, bool on);
/* x: batch x in_c x in_h x in_w; returns the logits (batch x classes) in *logits. A
 * model whose last layer runs in chunks (nn/loss_chunks.h) is refused. */
herd_status herd_model_forward(herd_model *m, const herd_run_ctx *ctx, const float *x,
                               const float **logits);
/* Layers 0..end-1's forward. */
herd_status herd_model_forward_layers(herd_model *m, const herd_run_ctx *ctx, const float *x,
                                      int end);
/* dlogits: gradient of the loss w.r.t. the logits; fills m->grads. Refused in chunks,
 * as the forward. */
herd_status herd_model_backward(herd_model *m, const herd_run_ctx *ctx, const float *x,
                                const float *dlogits);
/* Layers from..0's backward, after herd_model_backward_begin (and whatever ran the
 * layers above from). */
herd_status herd_model_backward_layers(herd_model *m, const herd_run_ctx *ctx, const float *x,
                                       const float *dlogits, int from);
/* Backward one layer at a time, for a driver that runs several models' layers in step
 * (nn/slices.c): begin, then for i from the last layer down: io (the tensors layer i's
 * backward takes), the layer's backward, done (sums the gradients of outputs read by
 * several layers). herd_model_backward is exactly this. */
typedef struct herd_layer_io {
    const float *in[HERD_MAX_INPUTS];
    float *din[HERD_MAX_INPUTS];
    bool via_scratch[HERD_MAX_INPUTS];
    const float *y, *dy;
} herd_layer_io;
void herd_model_backward_begin(herd_model *m);
void herd_model_backward_io(const herd_model *m, int i, const float *x, const float *dlogits,
                            herd_layer_io *io);
herd_status herd_model_backward_done(herd_model *m, int i, const herd_layer_io *io);
/* Input k of layer i for the model input x (forward one layer at a time). */
const float *herd_model_layer_input(const herd_model *m, const float *x, int i, int k);
/* Host copies of a device model's parameters and buffers, for code that works on
 * host pointers (layer initialisation, weight files): zeroed, or holding the model's
 * values when download. The caller frees both, also after an error. */
herd_status herd_model_stage(const herd_model *m, bool download, float **params,
                             float **buffers);
/* The same into host memory the caller holds (n_param_floats and n_buffer_floats
 * floats): a copy kept from one use to the next (the checkpoint writer's). */
herd_status herd_model_download(const herd_model *m, float *params, float *buffers);
/* Uploads staged copies into the model's parameters and buffers. */
herd_status herd_model_unstage(const herd_model *m, const float *params, const float *buffers);

/* A run context bound to the model's buffers. */
herd_run_ctx herd_model_ctx(const herd_model *m, bool training, uint64_t seed);

/* Parses a model file (JSON with comments) or a zoo name into specs. */
herd_status herd_model_parse(const char *name_or_path, int classes, herd_layer_spec **specs,
                             int *n_specs, char *model_name, size_t name_len);
herd_status herd_model_parse_text(const char *text, const char *origin, int classes,
                                  herd_layer_spec **specs, int *n_specs);

/* A top-level string field of a model file's text ("name", "description") into out,
 * or fallback when it has none or does not parse. */
void herd_model_text_field(const char *text, const char *key, const char *fallback, char *out,
                           size_t len);

/* Zoo: the model file text for a name, or NULL. */
const char *herd_zoo_text(const char *name);

#endif
