/*
 * A layer is a table of functions plus its spec and state. Layers are written
 * once against the backend table (src/backend/backend.h), so they run on every
 * backend. One file per layer in src/nn/layers/, forward and backward together.
 */
#ifndef HERD_NN_LAYER_H
#define HERD_NN_LAYER_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/trace.h"

typedef struct herd_model herd_model;
typedef struct herd_layer herd_layer;

/* Synchronised batch norm's exchange, so that nn needs no communicator: sum_f64 adds
 * vals[0..n) in place over the `ranks` ranks of a group (train builds one from its
 * communicator). Every rank of the group calls it in the same order. */
typedef struct herd_group_sum {
    herd_status (*sum_f64)(void *group, double *vals, int n);
    void *group;
    int ranks;
} herd_group_sum;

/* Tensor parallelism's group (Megatron-style layers, docs/model-files.md), so that nn
 * needs no communicator: this rank holds part `rank` of `size` of every split layer.
 * sum adds buf[0..n) (backend memory) over the group in place, giving every rank the
 * same bits; allgather concatenates each rank's `bytes` of host memory in rank order.
 * Every rank of the group calls them in the same order. size 0 or 1: no split. */
typedef struct herd_tp_group {
    int rank, size;
    herd_status (*sum)(void *group, float *buf, size_t n);
    herd_status (*allgather)(void *group, const void *mine, void *all, size_t bytes);
    void *group;
} herd_tp_group;

/* How a linear layer splits under tensor parallelism (model files' "parallel"). */
typedef enum herd_tp_split {
    HERD_TP_NONE,   /* the whole layer on every rank */
    HERD_TP_COLUMN, /* output features split: the input whole, the output this rank's part */
    HERD_TP_ROW,    /* input features split: the input a part, the output summed over the group */
} herd_tp_split;

#define HERD_MAX_INPUTS 2

/* What a model file says about one layer (defaults filled by the parser). */
typedef struct herd_layer_spec {
    char type[32];
    char name[64];             /* prefix of its tensors' names: "<name>.weight" */
    int out;                   /* conv2d: out channels; linear: out features */
    int kernel, stride, pad;   /* conv2d, pools; stride defaults to 1 for conv, kernel for pools */
    bool bias;                 /* conv2d, linear (default true) */
    float p;                   /* dropout probability */
    float eps, momentum;       /* batchnorm, layernorm (1e-5, 0.1 as in PyTorch) */
    int vocab, context;        /* embedding: token ids 0..vocab-1, at most context positions */
    int heads;                 /* attention */
    bool per_position;         /* linear: applied to each position of a 1 x T x C input */
    char tie[64];              /* lm_head: the embedding layer whose token table it reads */
    herd_tp_split parallel;    /* linear, under --tensor-parallel */
    /* linear, attention: weights from N(0, init_std^2) and zero biases (GPT-2's scheme);
     * attention's output projection from proj_init_std. 0: PyTorch's default. */
    float init_std, proj_init_std;
    int n_inputs;
    int inputs[HERD_MAX_INPUTS]; /* indices of earlier layers; -1 = the model input */
} herd_layer_spec;

/* --deterministic's linear layers (docs/determinism.md): the backend's exact ops where
 * it has them (backend.h), and with `sums` each slice's weight and bias gradients are
 * added to exact sums straight from the kernel (a whole micro-batch of slices per call)
 * instead of being written (one slice per call). */
typedef struct herd_exact_linear {
    int slice;          /* samples a slice: a call's rows are whole slices of them */
    double *sums;       /* NULL: write gradients; else the sums, at the views' offsets */
    const int *grid;    /* with sums, per view: a value is rounded to integer x 2^grid */
    bool have_grid;     /* false: the step's first pass only measures (max_bits) */
    uint32_t *max_bits; /* with sums, per view: the largest |slice value| as float bits */
    bool fresh;         /* with sums: these calls are the step's first, and start them */
} herd_exact_linear;

/* Everything a forward or backward call needs besides the tensors. */
typedef struct herd_run_ctx {
    const herd_backend *be;
    const herd_tensor_view *views; /* the model's views: layers find their tensors by offset */
    bool training;
    uint64_t seed;   /* per-step seed for dropout masks (derived from run seed and step) */
    /* The same in the backend's memory, read when the ops run (graphs: written before
     * each launch); NULL: seed. */
    const uint64_t *seed_dev;
    float *params;   /* model->params (device memory of be) */
    float *grads;    /* model->grads */
    float *buffers;  /* model->buffers */
    float grad_beta; /* 0: overwrite parameter gradients, 1: accumulate */
    /* Synchronised batch norm: statistics over the batches of all ranks of this
     * group. Zero (or one rank): each process uses its own batch. */
    herd_group_sum bn_group;
    /* Called after each layer's backward, once its parameter gradients are final
     * (gradient buckets start their reductions here). NULL: no hook. */
    herd_status (*after_backward)(void *user, int layer);
    void *hook_user;
    /* Called before each layer's forward (ZeRO waits there for the all-gather of the
     * layer's parameters). NULL: none. */
    herd_status (*before_forward)(void *user, int layer);
    void *before_user;
    /* Called after every layer's forward and backward (pipeline stages move their
     * transfers on: MPI progresses them only inside MPI calls). NULL: none. */
    void (*between_layers)(void *user);
    void *between_user;
    /* --timeline: every layer's forward and backward become events. NULL: off. */
    const herd_trace_sink *trace;
    /* The tensor-parallel group of a split model (the model's), or NULL. */
    const herd_tp_group *tp;
    /* --deterministic's linear layers (above); NULL: the usual GEMMs. */
    herd_exact_linear *exact;
} herd_run_ctx;

/* How a layer's activations are stored (the model picks, herd_model_reshape). */
typedef enum herd_act_format {
    HERD_ACT_F32,  /* fp32 NCHW */
    HERD_ACT_BF16, /* bf16 in the blocked layout of the backend's herd_bf16_act_ops */
} herd_act_format;

/* What a layer type does with bf16 activations. */
typedef enum herd_bf16_role {
    HERD_BF16_NONE,     /* reads and writes fp32 only */
    HERD_BF16_PRODUCES, /* reads either, writes bf16 where its readers take it (conv2d) */
    HERD_BF16_KEEPS,    /* writes the format its inputs have (batchnorm, relu, add) */
    HERD_BF16_CONSUMES, /* reads either, writes fp32 (global_avgpool) */
} herd_bf16_role;

typedef struct herd_layer_ops {
    const char *type;
    int n_inputs; /* 1, or 2 for add */
    /* Model-file keys it takes besides type, name, input and inputs; NULL-terminated.
     * The parser refuses any other key, so a mistyped type cannot silently drop settings. */
    const char *const *keys;
    /* Checks the spec against the input shape(s) l->in_shape, sets l->out_shape
     * (per sample: n is ignored) and declares parameters with herd_model_add_tensor. */
    herd_status (*setup)(herd_layer *l, herd_model *m);
    /* Fills freshly allocated parameters (PyTorch's default initialisation). NULL: none. */
    void (*init_params)(herd_layer *l, herd_model *m, herd_rng *rng);
    /* The batch size changed: (re)build plans and per-batch state. NULL: nothing to do. */
    herd_status (*reshape)(herd_layer *l, const herd_backend *be, int batch);
    herd_status (*forward)(herd_layer *l, const herd_run_ctx *ctx, const float *const *x, float *y);
    /* dx[i] is NULL when input i needs no gradient (the model input). Overwrites dx,
     * writes parameter gradients with ctx->grad_beta. */
    herd_status (*backward)(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                            const float *y, const float *dy, float *const *dx);
    void (*destroy)(herd_layer *l, const herd_backend *be); /* NULL: nothing to free */
    /* Bytes its forward saves for its backward besides its output (attention's scores),
     * for `batch` samples: the model allocates them as activations and sets l->stash
     * before reshape (nn/recompute.h: those of the layers inside re-run runs share one
     * pool). NULL: none. */
    size_t (*stash_bytes)(const herd_layer *l, int batch);
    /* Bytes of scratch its forward or backward uses only while it runs, for `batch`
     * samples: one block the model's layers share (layers run one at a time), set as
     * l->scratch before reshape. NULL: none. */
    size_t (*scratch_bytes)(const herd_layer *l, int batch);
    double (*flops)(const herd_layer *l); /* forward FLOPs per sample (2 per multiply-add) */
    herd_bf16_role bf16;
    bool backward_reads_y; /* its backward reads its own output (relu): y must survive to it */
} herd_layer_ops;

struct herd_layer {
    const herd_layer_ops *ops;
    herd_layer_spec spec;
    herd_shape in_shape[HERD_MAX_INPUTS]; /* per sample (n = current batch after reshape) */
    herd_shape out_shape;
    int batch;
    /* Set by the model before reshape; forward and backward get tensors (x, dx; y, dy)
     * in these formats. */
    herd_act_format in_format[HERD_MAX_INPUTS], out_format;
    int first_tensor; /* index of its first tensor view in the model */
    int n_tensors;
    /* Weight tying (lm_head): the view it shares with an earlier layer, which owns it.
     * That layer's backward runs last, so it adds to the gradient the head wrote. */
    int shared_view;    /* lm_head: the model's view index of the table it reads */
    bool grad_shared;   /* embedding: a later layer writes its token table's gradient first */
    /* Tensor parallelism: values per sample this layer sums over its tensor group in
     * forward and in backward (set by setup; herd predict models the exchanges). */
    size_t tp_sum_forward, tp_sum_backward;
    void *state;      /* layer-private: plans, saved statistics, masks */
    void *stash;      /* stash_bytes of backend memory the model holds for it (ops above) */
    void *scratch;    /* scratch_bytes of backend memory shared with the model's other layers */
};

/* Parameter / buffer k of the layer, in the order setup declared them. */
float *herd_layer_param(const herd_layer *l, const herd_run_ctx *ctx, int k);
float *herd_layer_grad(const herd_layer *l, const herd_run_ctx *ctx, int k);
const herd_tensor_view *herd_layer_view(const herd_layer *l, const herd_model *m, int k);

/* The most elements a per-sample activation or a parameter tensor may have (2^30, 4 GiB of
 * floats): larger sizes are mistakes, and every smaller one fits the backends' int counts. */
#define HERD_LAYER_MAX_ELEMS ((int64_t)1 << 30)
/* The product of ndim sizes into *out (if not NULL); an error naming the layer and `what`
 * ("output", "weight") when a size is not positive or the product passes the limit. */
herd_status herd_layer_checked_size(const herd_layer *l, const char *what, int ndim,
                                    const int64_t *dims, int64_t *out);

/* The registry of layer types. */
const herd_layer_ops *herd_layer_ops_find(const char *type);
/* Names of all layer types, NULL-terminated, for error messages and docs. */
const char *const *herd_layer_type_names(void);

#endif
