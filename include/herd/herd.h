/*
 * herd — data-parallel neural network training in C.
 *
 * The public API. Every object is an opaque handle; every call that can fail
 * returns a herd_status, and herd_last_error() then holds a message that says
 * what went wrong (with the source location) and what to try. The library never
 * prints: its messages go to the log function set with herd_set_log_fn, and the
 * progress callback prints only if the caller's callback does. It never exits the
 * process, with one exception, the abort path: in a job of several ranks, a
 * collective still pending after herd_dist_config.timeout_s (a rank stopped, hung
 * or unreachable) makes the rank that notices log the reason at HERD_LOG_ERROR and
 * end every process of the job with MPI_Abort, exit code 1, because no rank can
 * return from a collective that a peer never joins. herd_dist_abort, called by the
 * caller, ends the job the same way.
 *
 * Typical use:
 *
 *     herd_dataset *train, *test;
 *     herd_dataset_open("fashion-mnist", HERD_SPLIT_TRAIN, &train);
 *     herd_dataset_open("fashion-mnist", HERD_SPLIT_TEST, &test);
 *     herd_model *m;
 *     herd_model_create("lenet5", train, &m);
 *     herd_train_config cfg;
 *     herd_train_config_default(&cfg);
 *     herd_train_result res;
 *     herd_train(m, train, test, &cfg, NULL, NULL, &res);
 */
#ifndef HERD_HERD_H
#define HERD_HERD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/export.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HERD_VERSION "0.1.0"

typedef enum herd_status {
    HERD_OK = 0,
    HERD_ERR_INVALID_ARG,  /* a caller passed a value out of range or inconsistent */
    HERD_ERR_IO,           /* a file could not be opened, read or written */
    HERD_ERR_FORMAT,       /* a file was readable but its contents are wrong */
    HERD_ERR_NOMEM,        /* an allocation failed */
    HERD_ERR_UNSUPPORTED,  /* asked for something this build or backend cannot do */
    HERD_ERR_INTERNAL,     /* a library that herd calls (oneDNN, BLAS, ...) failed */
} herd_status;

/* INFO: what herd decided for the user to see (rank 0's pipeline partition). */
typedef enum herd_log_level { HERD_LOG_INFO = 0, HERD_LOG_WARNING = 1, HERD_LOG_ERROR = 2 } herd_log_level;
/* Receives the library's messages: one line without a trailing newline or a
 * "herd:" prefix, e.g. the stall inspector's "collective #2 (...) pending for 60 s
 * ...". It may be called from herd's communication thread, one call at a time.
 * NULL (the default) drops them, but for HERD_LOG_ERROR: those go to stderr, because
 * the reason the job is being aborted must never be lost. */
typedef void (*herd_log_fn)(herd_log_level level, const char *msg, void *user);
HERD_API void herd_set_log_fn(herd_log_fn fn, void *user);
/* A herd_log_fn that prints each message as herd's command line does, as one write to
 * stderr: "herd: MSG", or "herd: warning: MSG" / "herd: error: MSG". user, when not
 * NULL, points to a bool that drops HERD_LOG_INFO while true (a quiet run). */
HERD_API void herd_log_to_stderr(herd_log_level level, const char *msg, void *user);

/* The message of the last failure on this thread ("" if none). */
HERD_API const char *herd_last_error(void);
/* A short name for a status ("invalid argument", ...). */
HERD_API const char *herd_status_name(herd_status s);
/* One line naming the version and the libraries this build uses. */
HERD_API const char *herd_build_info(void);
/* The instruction set oneDNN dispatches the CPU's kernels to, and what it offers
 * bf16: "AVX2 (bf16: none in oneDNN)", "AVX-512 with VNNI and BF16 (bf16: native)". */
HERD_API const char *herd_cpu_isa(void);

/* ------------------------------------------------------------------ data */

typedef struct herd_dataset herd_dataset;

typedef enum { HERD_SPLIT_TRAIN = 0, HERD_SPLIT_TEST = 1 } herd_split;

/*
 * spec is one of:
 *   "fashion-mnist"                 Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist)
 *   "idx:DIR"                       MNIST-style IDX files in DIR (gzip or raw)
 *   "cifar10:DIR"                   CIFAR-10 binary batches in DIR
 *   "synthetic:C,H,W,CLASSES[,N]"   random images of that shape (N per split, default 10000)
 *   "tokens:FILE[,VOCAB]"           a token stream in llm.c's .bin format (VOCAB default 50257);
 *                                   the test split is FILE's sibling with the last "_train" of
 *                                   its name replaced by "_val" (llm.c's naming)
 * The whole split is read into memory. Token data has no samples until
 * herd_dataset_set_seq_len says how long a sequence is.
 */
HERD_API herd_status herd_dataset_open(const char *spec, herd_split split, herd_dataset **out);
HERD_API void herd_dataset_free(herd_dataset *ds);
HERD_API size_t herd_dataset_size(const herd_dataset *ds);
/* Image shape (channels, height, width) and number of classes. */
HERD_API void herd_dataset_shape(const herd_dataset *ds, int *c, int *h, int *w, int *classes);
/* A data set from memory (Python's herd.Dataset.from_numpy): n images of c x h x w
 * bytes (pixels 0..255, channels first, c of 1 to 3) and their labels in [0, classes),
 * both copied. mean and std (c values each, on [0,1] pixels) normalise the images as
 * the loader feeds them; NULL: computed from these images (give a test set its train
 * set's, from herd_dataset_normalization). Every rank must pass the same data: herd
 * shards each step's global batch itself, and the ranks compare a hash of it. */
HERD_API herd_status herd_dataset_from_memory(const uint8_t *images, const int32_t *labels, size_t n,
                                              int c, int h, int w, int classes, const float *mean,
                                              const float *std, herd_dataset **out);
/* The per-channel mean and std the loader normalises with (channels past the data's: 0, 1). */
HERD_API void herd_dataset_normalization(const herd_dataset *ds, float mean[3], float std[3]);
/* Keep only the first n samples (tests, quick runs). */
HERD_API herd_status herd_dataset_truncate(herd_dataset *ds, size_t n);
/* Token data: sample i is tokens [i*T, i*T+T) as the input (shape 1 x T x 1, ids as
 * floats) and tokens [i*T+1, i*T+T+1) as its T labels, one per position. Sets T (>= 1;
 * undoes a truncation); refused for image data. */
HERD_API herd_status herd_dataset_set_seq_len(herd_dataset *ds, int seq_len);
/* T for token data (0 until set), 0 for image data; *token_data says which. */
HERD_API int herd_dataset_seq_len(const herd_dataset *ds, bool *token_data);

/* ----------------------------------------------------------------- model */

typedef struct herd_model herd_model;

/*
 * name_or_path is a zoo name ("mlp", "lenet5", "resnet20") or the path of a
 * model file (JSON with comments, see docs/model-files.md). The input shape and
 * the number of classes come from ds.
 */
HERD_API herd_status herd_model_create(const char *name_or_path, const herd_dataset *ds, herd_model **out);
/* Same, with the shape given explicitly instead of from a dataset. */
HERD_API herd_status herd_model_create_shape(const char *name_or_path, int c, int h, int w, int classes,
                                             herd_model **out);
/* herd_model_create on a named device: "cpu" (what herd_model_create uses) or "cuda"
 * (the current GPU, single process, fp32). There is no fallback: "cuda" in a build
 * without CUDA or with no usable GPU fails with HERD_ERR_UNSUPPORTED and says why.
 * "sim" is a simulated device for tests: the CPU's arithmetic behind device memory
 * the host cannot read (a host access faults), with its own memory cap and counts.
 * Parameters live on the device; herd_model_tensor_info's data pointer is then
 * device memory, while save/load and checkpoints copy through the host. */
HERD_API herd_status herd_model_create_device(const char *name_or_path, const herd_dataset *ds,
                                              const char *device, herd_model **out);
/* A model whose layers, shapes and tensor names are set up but that holds no
 * parameters, gradients or buffers: for pipeline training (herd_train_config's
 * pipeline_stages > 1), where each rank builds only its stage, and for describing
 * the model. Everything that needs the values (init, save, load, evaluate, tensor
 * data) refuses it. */
/* Token data for model name_or_path: sets the sequence length to seq_len, or when 0 to
 * the model's context. Image data takes seq_len 0 only (nothing to do). */
HERD_API herd_status herd_dataset_fit_seq_len(herd_dataset *ds, const char *name_or_path,
                                              int seq_len);
HERD_API herd_status herd_model_create_plan(const char *name_or_path, const herd_dataset *ds,
                                            const char *device, herd_model **out);
/* The same plan for a given input shape (as herd_model_create_shape): parameter counts
 * and FLOPs of a model without allocating or initialising its 124M parameters (gpt2). */
HERD_API herd_status herd_model_create_shape_plan(const char *name_or_path, int c, int h, int w,
                                                  int classes, herd_model **out);
HERD_API void herd_model_free(herd_model *m);
/* Re-initialises every parameter from seed (PyTorch's default initialisation) and
 * resets buffers (batch-norm running mean 0, variance 1). Models start seeded with 0. */
HERD_API herd_status herd_model_init_params(herd_model *m, uint64_t seed);

/* Arithmetic of a model's training and evaluation. fp32 everywhere; tf32 (CUDA:
 * cuBLAS and cuDNN may use TF32 tensor cores, inputs rounded to a 10-bit mantissa,
 * fp32 accumulation); bf16 (CPU: convolutions and fully connected layers take bf16
 * inputs and weights, accumulate and write fp32; parameters, gradients, optimizer
 * state, batch norm, softmax and the loss stay fp32; a convolution direction for which
 * oneDNN has only generic bf16 code runs in fp32, faster). bf16 on the CPU needs bf16
 * instructions (herd_cpu_isa) and is refused without them; fp16 compute is refused.
 * Refusals are HERD_ERR_UNSUPPORTED; nothing falls back silently. The setting is
 * process-wide and applied again at the start of herd_train / herd_bench_train, so
 * models of one process take turns. */
typedef enum {
    HERD_PRECISION_FP32 = 0,
    HERD_PRECISION_TF32,
    HERD_PRECISION_BF16,
    HERD_PRECISION_FP16,
} herd_precision;

/* "fp32", "tf32", "bf16", "fp16". */
HERD_API const char *herd_precision_name(herd_precision p);
HERD_API herd_status herd_precision_parse(const char *name, herd_precision *out);
HERD_API herd_status herd_model_set_precision(herd_model *m, herd_precision p);
HERD_API herd_precision herd_model_precision(const herd_model *m);

/* Names the device a model lives on ("cpu", "cuda", "sim"). */
HERD_API const char *herd_model_device(const herd_model *m);
/* The device used when none is named: "cuda" when herd was built with CUDA and a GPU
 * is visible, "cpu" otherwise. Does not initialise the GPU. */
HERD_API const char *herd_default_device(void);
/* Caps the memory herd holds on `device` (0 = no cap): "cpu" counts every block of
 * herd_device_memory_usage; "cuda" what its caching allocator keeps, cached blocks
 * included; "sim" counts like "cpu". Allocations beyond the cap fail with HERD_ERR_NOMEM naming the request,
 * what it is for, what herd holds and the cap. */
HERD_API herd_status herd_device_set_memory_limit(const char *device, uint64_t bytes);

/* What herd's memory on a device is for. */
typedef enum {
    HERD_MEM_PARAMS = 0,   /* parameters and buffers (batch-norm statistics) */
    HERD_MEM_GRADS,        /* parameter gradients */
    HERD_MEM_OPTIMIZER,    /* optimizer state (momentum; Adam's moments) */
    HERD_MEM_ACTIVATIONS,  /* layer outputs and their gradients, micro-batch slots, loss gradient */
    HERD_MEM_WORKSPACE,    /* kernels' plans and scratch, and anything else */
    HERD_MEM_CHECKPOINT,   /* the checkpoint writer's copies, a resume's read buffers (cpu) */
    HERD_MEM_CATEGORIES
} herd_mem_category;

typedef struct herd_memory_usage {
    uint64_t current, peak; /* bytes herd holds on the device now, and at most so far */
    uint64_t limit;         /* the cap (0 = none) */
    uint64_t peak_by_category[HERD_MEM_CATEGORIES]; /* what the peak was made of; sums to peak */
} herd_memory_usage;

/* herd's own memory on `device` in this process: "cpu" counts every block the CPU
 * backend allocates for models, optimizers and kernels (not the data set, the
 * loader's batches, MPI's buffers or oneDNN's internal caches); "sim" every block of
 * its device memory (the CPU plans behind its convolutions count as "cpu"). "cuda" is not
 * counted this way (HERD_ERR_UNSUPPORTED; its caching allocator has its own cap). */
HERD_API herd_status herd_device_memory_usage(const char *device, herd_memory_usage *out);
/* Starts a new peak from what is held now. */
HERD_API herd_status herd_device_memory_reset_peak(const char *device);

HERD_API size_t herd_model_param_count(const herd_model *m);
/* Forward multiply-adds x2 per sample (the usual "FLOPs" of a model card). */
HERD_API double herd_model_flops_per_sample(const herd_model *m);
HERD_API const char *herd_model_name(const herd_model *m);

/* Named tensors: parameters, then buffers such as batch-norm running statistics. */
HERD_API size_t herd_model_tensor_count(const herd_model *m);
/* shape has up to 4 entries; ndim receives how many. */
HERD_API herd_status herd_model_tensor_info(const herd_model *m, size_t i, const char **name, int *ndim,
                                            int64_t shape[4], float **data);

/* Layers in execution order, for tools that model a training step (herd predict). */
#define HERD_LAYER_MAX_PARAMS 4
typedef struct herd_layer_info {
    const char *name, *type;
    double forward_flops;  /* per sample, a multiply-add counts 2 */
    /* Per sample: 2 x forward (the input's gradient and the weights'), 1 x for a layer
     * that reads only the model input (no input gradient). An estimate. */
    double backward_flops;
    int n_params; /* parameter tensors, buffers not counted */
    /* Their elements and offsets in the gradient buffer, in declaration order. */
    size_t param_numel[HERD_LAYER_MAX_PARAMS], param_offset[HERD_LAYER_MAX_PARAMS];
    size_t output_per_sample; /* values of its output per sample */
    /* Of a tensor-parallel part (herd_model_create_part): values per sample the layer
     * sums over its tensor group, forward and backward (0 for a whole model). */
    size_t tp_sum_forward, tp_sum_backward;
    /* lm_head: the name of the embedding layer whose token table it reads; else NULL. */
    const char *tie;
} herd_layer_info;
HERD_API size_t herd_model_layer_count(const herd_model *m);
/* Tensor parallelism (herd_train_config's tensor_parallel): a plan (no parameters) of
 * part `part` of m split `parts` ways, to describe (its layers' FLOPs, parameters and
 * exchanges); an error naming the layer when m does not split so. Free with
 * herd_model_free. */
HERD_API herd_status herd_model_create_part(const herd_model *m, int part, int parts,
                                            herd_model **out);
HERD_API herd_status herd_model_layer_info(const herd_model *m, size_t i, herd_layer_info *out);

/* Pipeline stages (docs/pipeline.md): the split of m's layers into `stages` runs that
 * minimises the slowest stage's summed cost (cost: one value per layer, in any unit;
 * NULL: forward + backward FLOPs), cutting only where one tensor crosses. Stage s
 * holds layers bounds[s] .. bounds[s+1]-1 (bounds has stages + 1 entries). */
HERD_API herd_status herd_model_pipeline_split(const herd_model *m, int stages, const double *cost,
                                               int *bounds);

/* Weights in safetensors format (readable by PyTorch's and numpy's loaders). */
HERD_API herd_status herd_model_save(const herd_model *m, const char *path);
HERD_API herd_status herd_model_load(herd_model *m, const char *path);
/* The weights file of the newest checkpoint in a --checkpoint-dir (the one DIR/latest
 * names: DIR/ckpt-STEP.safetensors) into path (cap bytes), for herd_model_load.
 * HERD_ERR_IO when DIR holds no checkpoint, HERD_ERR_FORMAT when `latest` is damaged. */
HERD_API herd_status herd_checkpoint_latest_weights(const char *dir, char *path, size_t cap);

/* Zoo: names, iterate with i = 0.. until NULL. */
HERD_API const char *herd_zoo_name(size_t i);
HERD_API const char *herd_zoo_description(size_t i);
/* A language model reads token ids: a sequence of at most *context of them per sample
 * (input shape 1 x T x 1, ids as floats) from a vocabulary of *vocab, which is also its
 * classes (a prediction at every position). Both 0 for a model that takes a data set's
 * shape. */
HERD_API herd_status herd_model_token_shape(const char *name_or_path, int *context, int *vocab);

/* ------------------------------------------------------ data parallelism */

/*
 * The group of processes training together. herd_dist_init joins the MPI job when
 * the process was started by mpirun / srun (and herd was built with MPI), and is a
 * group of one otherwise. Pass it in herd_train_config.dist; NULL means one process.
 */
typedef struct herd_comm herd_dist;

typedef struct herd_dist_config {
    double stall_warning_s; /* report ranks that have not joined a collective after this (60) */
    double timeout_s;       /* abort the job after this (300) */
} herd_dist_config;

/* Either time left 0 (or cfg NULL) comes from HERD_STALL_WARNING / HERD_COMM_TIMEOUT in
 * the environment when set (seconds: herd run -x HERD_COMM_TIMEOUT=60 -- python3 ...),
 * else the default. */
HERD_API herd_status herd_dist_init(const herd_dist_config *cfg, herd_dist **out);
HERD_API int herd_dist_rank(const herd_dist *d);
HERD_API int herd_dist_size(const herd_dist *d);
HERD_API int herd_dist_local_rank(const herd_dist *d);
HERD_API const char *herd_dist_backend(const herd_dist *d); /* "local" or "mpi" */
/* Whether this build reduces GPU gradients with NCCL; without it, multi-rank GPU
 * training reduces them with MPI through host memory. */
HERD_API bool herd_have_nccl(void);
/* Before creating models on `device` in a job of several ranks: "cuda" gives each rank
 * the GPU of its local rank (and fails when a host has more ranks than GPUs); "cpu"
 * and groups of one need nothing. */
HERD_API herd_status herd_dist_bind_device(herd_dist *d, const char *device);
/* This process's compute threads on `device` (the CPU's: herd's kernels and oneDNN's), as
 * herd_train and herd_bench_train choose them: threads when above 0, else OMP_NUM_THREADS
 * when set, else the cores this process may run on shared among dist's ranks on its host
 * (dist NULL: one process). Call it before building a model: creating and initialising
 * one runs on these threads, and OpenMP keeps the team it starts for the process's life
 * (without it, --threads 1 ranks started every core's worth of threads first). */
HERD_API herd_status herd_device_set_threads(const char *device, int threads, const herd_dist *dist);
/* Ends every process of the job with exit code `code` (use after a fatal error on one
 * rank); msg goes to the log function at HERD_LOG_ERROR first. Does not return. */
HERD_API void herd_dist_abort(herd_dist *d, int code, const char *msg);
HERD_API void herd_dist_free(herd_dist *d);

/* Gradients on the wire (--compress): as they are, or cast to a 16-bit type for the
 * allreduce and back. */
typedef enum {
    HERD_COMPRESS_NONE = 0, /* fp32 */
    HERD_COMPRESS_FP16,     /* IEEE half */
    HERD_COMPRESS_BF16,     /* bfloat16 */
} herd_compress;

/* "none", "fp16", "bf16". */
HERD_API const char *herd_compress_name(herd_compress c);
HERD_API herd_status herd_compress_parse(const char *name, herd_compress *out);

/* Collectives on the caller's host memory (herd.torch: Horovod's allreduce, broadcast,
 * allgather and DistributedOptimizer). They run in the order started, on herd's
 * communication thread, under the stall inspector and the timeout of herd_dist_config,
 * as training's reductions do: every rank must start the same collectives in the same
 * order with the same sizes. d NULL: a group of one. */
typedef enum {
    HERD_DTYPE_F32 = 0, HERD_DTYPE_F64, HERD_DTYPE_F16, HERD_DTYPE_BF16,
    HERD_DTYPE_I8, HERD_DTYPE_U8, HERD_DTYPE_I16, HERD_DTYPE_I32, HERD_DTYPE_I64 /* min, max, product */
} herd_dtype;
/* Starts an in-place sum of buf[0..n) of `type` over the ranks; *ticket names it for
 * herd_dist_wait. buf must stay untouched until then. f32: the sum is multiplied by
 * scale (1/size: the mean) and travels as `wire` (HERD_COMPRESS_FP16/BF16: each rank's
 * scaled values cast to 16 bits, Horovod's compression). The other types are summed in
 * their own type, scale 1 and no compression (refused otherwise). */
HERD_API herd_status herd_dist_allreduce_start(herd_dist *d, void *buf, size_t n, herd_dtype type,
                                               float scale, herd_compress wire, const char *name,
                                               uint64_t *ticket);
/* Horovod's Min, Max and Product: starts an in-place reduction of buf[0..n) of `type`
 * (float32, float64 or an integer type: float16 and bfloat16 convert to float32 first,
 * exactly for min and max) over the ranks, element by element, waited for as the sums are
 * (herd_dist_wait). Every rank gets the same result. Min and max of floats order NaN
 * first: a NaN on any rank is the result there (MPI's own MPI_MIN would keep or drop it
 * by position), and -0 < +0. Integer products wrap modulo 2^bits, as MPI's MPI_PROD
 * computes them: a caller that cannot rule that out checks (herd.torch multiplies the
 * values as float64 beside them and refuses a product that does not fit). */
typedef enum { HERD_REDUCE_MIN = 0, HERD_REDUCE_MAX, HERD_REDUCE_PRODUCT } herd_reduce_op;
HERD_API herd_status herd_dist_allreduce_op_start(herd_dist *d, void *buf, size_t n, herd_dtype type,
                                                  herd_reduce_op op, const char *name,
                                                  uint64_t *ticket);
/* Horovod's Adasum: starts an in-place combination of buf[0..n) of `type` (float32,
 * float64, float16 or bfloat16) over the ranks, waited for as the sums are. buf holds
 * n_tensors tensors back to back, counts[t] values each (counts NULL: one tensor of n);
 * per tensor, two ranks' vectors a and b become (1 - a.b/(2|a|^2)) a + (1 - a.b/(2|b|^2)) b
 * (a sum where they are orthogonal, their mean where they are parallel; a zero vector
 * leaves the other as it is), in a binary tree over the ranks: ranks 2i and 2i+1 first,
 * then pairs of pairs. Any number of ranks: beyond the largest power of two P, rank P+i
 * is combined into rank i first. The arithmetic is in double, the values kept in their
 * type between the tree's levels; every rank gets the same bits. counts stay untouched
 * until herd_dist_wait, as buf does, and are the same on every rank. */
HERD_API herd_status herd_dist_allreduce_adasum_start(herd_dist *d, void *buf, size_t n, herd_dtype type,
                                                      const int64_t *counts, size_t n_tensors,
                                                      const char *name, uint64_t *ticket);
/* The same sum of float32 values in the memory of `device` ("cuda"; "sim", the simulated
 * device, for tests): buf is a device pointer of this process's GPU (the current CUDA
 * device when the first such call builds herd's backend), summed through the
 * communicator herd's GPU training uses (NCCL; MPI through host memory where ranks share
 * a GPU or herd has no NCCL), which the first call makes, collectively, over d. The
 * caller's writes to buf must be complete (a CUDA caller synchronises its stream first),
 * and buf stays untouched until herd_dist_wait on the ticket returns, which is when the
 * sum has reached buf. scale as in herd_dist_allreduce_start; no compression. */
HERD_API herd_status herd_dist_allreduce_device_start(herd_dist *d, const char *device, void *buf,
                                                      size_t n, float scale, const char *name,
                                                      uint64_t *ticket);
/* Blocks until the collective of ticket, and every one started before it on the same
 * memory (host, or a device), completed. */
HERD_API herd_status herd_dist_wait(herd_dist *d, uint64_t ticket);
/* Blocking: root's bytes into every rank's buf. */
HERD_API herd_status herd_dist_broadcast(herd_dist *d, void *buf, size_t bytes, int root);
/* Blocking: rank r's bytes_of[r] bytes (mine) land in every rank's all, in rank order;
 * bytes_of is the same on every rank. */
HERD_API herd_status herd_dist_allgather(herd_dist *d, const void *mine, void *all,
                                         const size_t *bytes_of);
/* herd_dist_allgather started, not waited for (Horovod's allgather_async): rank r's
 * bytes_of[r] bytes land in every rank's all, in rank order, by herd_dist_wait on *ticket;
 * mine, all and bytes_of (ints: at most INT_MAX bytes in all, the same on every rank)
 * stay untouched until then. */
HERD_API herd_status herd_dist_allgather_start(herd_dist *d, const void *mine, void *all,
                                               const int *bytes_of, const char *name,
                                               uint64_t *ticket);
/* Blocking (Horovod's reducescatter): float32 buf[0..n) summed over the ranks, of which
 * rank r keeps counts[r] values, in rank order (the same counts on every rank, summing to
 * n). On return this rank's part of buf holds that part's sum, multiplied by scale and
 * sent as `wire` as in herd_dist_allreduce_start; the rest of buf is undefined. Each
 * rank sends and receives about n values where an allreduce moves 2n. */
HERD_API herd_status herd_dist_reduce_scatter(herd_dist *d, float *buf, size_t n, const int *counts,
                                              float scale, herd_compress wire, const char *name);
/* herd_dist_reduce_scatter started, not waited for (Horovod's reducescatter_async): done by
 * herd_dist_wait on *ticket; buf and counts stay untouched until then. */
HERD_API herd_status herd_dist_reduce_scatter_start(herd_dist *d, float *buf, size_t n,
                                                    const int *counts, float scale,
                                                    herd_compress wire, const char *name,
                                                    uint64_t *ticket);
/* Blocking (Horovod's alltoall): this rank sends send_bytes[r] bytes to every rank r,
 * the parts laid out in send in rank order, and receives recv_bytes[r] bytes from every
 * rank r into recv, in rank order; what a rank sends to another is what that one
 * expects from it. In size - 1 rounds of pairwise exchange (round k: to rank + k, from
 * rank - k), queued like every collective on the communication thread. */
HERD_API herd_status herd_dist_alltoall(herd_dist *d, const void *send, const size_t *send_bytes,
                                        void *recv, const size_t *recv_bytes);
/* herd_dist_alltoall started, not waited for (Horovod's alltoall_async): done by
 * herd_dist_wait on *ticket; send and recv stay untouched until then (the counts may go). */
HERD_API herd_status herd_dist_alltoall_start(herd_dist *d, const void *send,
                                              const size_t *send_bytes, void *recv,
                                              const size_t *recv_bytes, uint64_t *ticket);
HERD_API herd_status herd_dist_barrier(herd_dist *d);
/* Collective over d (Horovod's process sets): the ranks of d listed in `ranks` (n of
 * them, distinct, in increasing order, the same list on every rank of d) form a new group,
 * their order d's; *out is it on those ranks (NULL where the group is this rank alone: a
 * group of one) and NULL on the others. The group has its own queue and communication
 * thread, under d's stall inspector and timeout, its reports prefixed with `name`; free it
 * with herd_dist_free before d, with nothing of it pending. A list that differs between
 * ranks is refused on every rank, naming the first that differs. */
HERD_API herd_status herd_dist_split(herd_dist *d, const int *ranks, int n, const char *name,
                                     herd_dist **out);
/* What this rank is doing, for the stall inspector's report ("step 40: backward"). */
HERD_API void herd_dist_set_activity(herd_dist *d, const char *what);

/* A timeline of a program's own training (herd.torch's start_timeline): the trace herd
 * train's --timeline writes (docs/observability.md), with every float32 reduction d
 * runs as "allreduce <name>" on the communication track, and the spans the caller
 * records on the compute track. */
typedef struct herd_timeline herd_timeline;
typedef enum herd_timeline_span {
    HERD_SPAN_STEP = 0,  /* one optimizer step */
    HERD_SPAN_FORWARD,   /* phases inside it */
    HERD_SPAN_BACKWARD,
    HERD_SPAN_COMM_WAIT, /* waiting for reductions after backward */
    HERD_SPAN_OPTIMIZER,
} herd_timeline_span;
/* Collective: rank 0 creates path; every rank measures its clock against rank 0's. */
HERD_API herd_status herd_timeline_start(herd_dist *d, const char *path, herd_timeline **out);
/* The clock spans are given in (seconds). */
HERD_API double herd_timeline_now(void);
/* The caller's training thread: a span from t0 to t1 of optimizer step `step` (1-based);
 * a step's own span last (reductions recorded after it count as the next step's). */
HERD_API void herd_timeline_record(herd_timeline *tl, herd_timeline_span what, long step, double t0,
                                   double t1);
/* Collective, with no reduction pending: every rank's events so far into the file
 * (a long run calls it now and then, so that buffers stay small). */
HERD_API herd_status herd_timeline_write(herd_timeline *tl);
/* Collective: writes, finishes the file and frees tl (also after a failure). */
HERD_API herd_status herd_timeline_stop(herd_timeline *tl);
/* Under herd run --max-restarts (HERD_RUN_SUPERVISED in the environment): writes to
 * stderr the line its supervisor reads, naming this rank and host, the step reached and
 * whether training had begun (a failure in set-up would repeat: not restarted), with
 * message (herd_last_error() when NULL); nothing otherwise. herd train and Python's
 * herd.train call it when training fails. */
HERD_API void herd_dist_report_failure(const herd_dist *d, long step, bool training_started,
                                       const char *message);

/* -------------------------------------------------------------- training */

typedef enum { HERD_OPT_SGD = 0, HERD_OPT_ADAMW = 1 } herd_optimizer_kind;
typedef enum { HERD_SCHED_CONSTANT = 0, HERD_SCHED_STEP = 1, HERD_SCHED_COSINE = 2 } herd_schedule_kind;


#define HERD_MAX_MILESTONES 8

/* What an elastic run keeps when its number of replicas changes (herd_train_config). */
typedef enum { HERD_ELASTIC_KEEP = 0, HERD_ELASTIC_SCALE = 1 } herd_elastic_batch;

/* Pipeline schedules (--pp-schedule): PipeDream-Flush's one forward, one backward
 * (activations of at most P - s micro-batches held on stage s), or GPipe's all
 * forwards, then all backwards (all M held). */
typedef enum { HERD_PP_SCHEDULE_1F1B = 0, HERD_PP_SCHEDULE_GPIPE = 1 } herd_pp_schedule_kind;

/* "1f1b", "gpipe": the names --pp-schedule takes and messages print. */
HERD_API const char *herd_pp_schedule_name(herd_pp_schedule_kind k);
HERD_API herd_status herd_pp_schedule_parse(const char *name, herd_pp_schedule_kind *out);

typedef struct herd_train_config {
    int epochs;
    int batch_size;
    float lr;
    herd_optimizer_kind optimizer;
    float momentum;        /* SGD */
    bool nesterov;         /* SGD */
    float weight_decay;
    bool decoupled_decay;  /* SGD: decay applied to weights directly instead of added to gradients (AdamW always decouples) */
    bool decay_bn_bias;    /* also decay batch-norm and bias parameters */
    float beta1, beta2, eps; /* AdamW */
    herd_schedule_kind schedule;
    int milestones[HERD_MAX_MILESTONES]; /* epochs; step schedule multiplies lr by gamma at each */
    int n_milestones;
    float gamma;
    float warmup_epochs;   /* linear warmup from lr/warmup_steps to lr; < 0: auto (0, or 5 with lr_scaling) */
    bool augment;          /* random crop (pad 4) and horizontal flip */
    float label_smoothing;
    int threads;           /* 0: OMP_NUM_THREADS when set, else this process's cores shared
                            * among the ranks of its host */
    uint64_t seed;
    const char *checkpoint_dir; /* NULL = no checkpoints */
    bool resume;
    int eval_every;        /* evaluate every N epochs (0 = only at the end) */
    long max_steps;        /* stop after this many steps in total (0 = no limit) */

    /* Data parallelism (ignored for a group of one). batch_size is per rank. */
    herd_dist *dist;       /* NULL = this process alone */
    bool lr_scaling;       /* lr = lr * global batch / 256 (Goyal et al.); warmup defaults to 5 epochs */
    bool sync_bn;          /* batch-norm statistics over the global batch */
    herd_compress compress; /* gradients on the wire (HERD_COMPRESS_NONE) */
    int grad_accum;        /* micro-batches per step; communicate on the last (1) */
    double bucket_mb;      /* gradient bucket size in MiB (25; the first bucket is 1) */
    bool check_replicas;   /* hash parameters after every step and abort if replicas differ */
    /* Each micro-batch's forward (with the loss) and backward captured once per shape as
     * CUDA graphs and replayed (docs/gpu.md): the same arithmetic, two launches a step
     * instead of one per kernel. GPU only; not with --deterministic, --sync-bn, pipeline
     * stages or tensor parallelism (refused at start, naming them). */
    bool cuda_graphs;
    /* Activation recomputation (docs/memory.md): inside each run of layers between the
     * points where one tensor crosses (a residual block; a transformer block's attention
     * and MLP halves), only the run's output is held from forward to backward; the rest
     * is computed again in backward from it, the same bits. Less memory for about one
     * more forward a step. Not with --cuda-graphs yet (refused). */
    bool recompute;
    /* The last layer (linear or lm_head) and the loss over this many samples at a time,
     * the last layer's backward right after each chunk's loss (docs/memory.md): a
     * language model holds a chunk's logits instead of the micro-batch's. 0 = off. The
     * weight gradient adds the chunks (rounding may differ; under --deterministic, a
     * multiple of --slice-size, the same bits). Not with --cuda-graphs yet (refused). */
    int loss_chunk;
    /* The same saved weights whatever the number of ranks, the --grad-accum split and the
     * per-rank batch size that make up the global batch, and the thread count
     * (docs/determinism.md): each slice's gradient is computed alone on one thread and
     * summed exactly; checkpoints keep what a resume needs to continue alike. CPU only,
     * without batch norm, ZeRO, pipeline stages or compression for now (refused at start,
     * naming the option). */
    bool deterministic;
    /* With deterministic: samples per slice, which batch_size must be a multiple of
     * (0: 8). Runs compared byte for byte must use the same slice size. */
    int slice_size;

    /* Pipeline parallelism (docs/pipeline.md): the model's layers split into
     * pipeline_stages stages on consecutive ranks (ranks = stages x replicas), each
     * replica's batch_size split into micro_batches micro-batches (batch_size must
     * divide); a step is grad_accum rounds of micro_batches. Each rank holds only its
     * stage: the model passed to herd_train may be a plan (herd_model_create_plan),
     * its stages then initialised from seed as herd_model_init_params would; when it
     * holds parameters, they are the start, and rank 0's copy receives the trained
     * weights at the end. 1 = no pipeline. */
    int pipeline_stages;
    int micro_batches;
    /* Tensor parallelism (docs/model-files.md): split layers ("parallel" linear layers,
     * attention heads, the vocabulary of an embedding and its tied head) cut into
     * tensor_parallel parts on consecutive ranks (ranks = parts x replicas). Like
     * pipeline stages, the model passed may be a plan; rank 0's copy of one with
     * parameters receives the trained weights. CPU only, and not yet with pipeline
     * stages, --deterministic or --sync-bn. 1 = none. */
    int tensor_parallel;
    herd_pp_schedule_kind pp_schedule;
    const char *stage_split; /* "a,b": the layers where stages 1.. begin; NULL = balanced
                              * by each layer's measured cost */

    /* Observability, written by rank 0 (docs/observability.md). */
    const char *logdir;       /* TensorBoard event files in this directory (NULL = none) */
    int histograms;           /* weight and gradient histograms every N steps into logdir (0 = none) */
    const char *metrics_path; /* one JSON object per line per log interval and epoch (NULL = none) */
    int log_every;            /* steps between logged points (0 = 50) */
    /* Dynamic loss scaling (for fp16; works at any precision): the loss is multiplied
     * by the scale before backward, gradients are unscaled and checked for inf/NaN;
     * a step with any is skipped and the scale halved, and it doubles after
     * loss_scale_window clean steps. */
    bool dynamic_loss_scale;
    float loss_scale_init;  /* 65536 */
    int loss_scale_window;  /* 2000 */
    /* Gradient clipping by global L2 norm before each update, after the reduction and
     * the loss scaler (torch.nn.utils.clip_grad_norm_: scaled by max / (norm + 1e-6)
     * when above max); 0 = off. */
    float clip_grad_norm;
    /* A non-finite loss or gradient that no loss scaler handles: false (the default)
     * stops training with an error naming the step and the tensor, before the update,
     * so no NaN reaches the weights or a checkpoint; true skips the step's update and
     * counts it in skipped_steps, as the dynamic loss scaler does. */
    bool skip_nonfinite;
    /* ZeRO (sharded data parallelism) over the data-parallel ranks: 0 = off; 1 = each
     * rank keeps the optimizer state of its 1/N slice of the parameters; 2 = and only
     * that slice of the reduced gradients. Gradients are reduce-scattered and the
     * updated parameters all-gathered: the traffic of one allreduce. CPU, >= 2 ranks. */
    int zero_stage;
    /* Chrome trace-event JSON of every rank's steps, phases, layers and reductions,
     * merged and written by rank 0 (docs/observability.md). NULL = off. */
    const char *timeline_path;
    /* Under herd run --max-restarts: 1 + the restarts so far (0 = not supervised). Rank 0
     * then records its last step in checkpoint_dir/progress, from which a restart counts
     * the steps lost and the time from the last step before the failure to the first
     * after it (herd_train_result). */
    int run_attempt;
    /* Checkpoints inside epochs as well (with checkpoint_dir): after every N optimizer
     * steps, and after the step during which S seconds of training passed since the last
     * one (rank 0's clock decides for every rank). 0 = off. Without ZeRO or pipeline
     * stages the parameters and optimizer state are copied and a thread writes them while
     * training goes on. */
    long checkpoint_every_steps;
    double checkpoint_every_s;
    /* How many of the newest checkpoints checkpoint_dir keeps: once a new one is
     * published, rank 0 deletes the older ones beyond that count. 0 = every one (for
     * evaluating each later). Default 2: the newest, and the one --resume names when
     * the newest is refused. */
    int keep_checkpoints;
    /* Elastic runs (herd run --max-restarts): the replicas batch_size, grad_accum and lr
     * were chosen for (0 = this run's). When this run has another number, KEEP keeps
     * the global batch (grad_accum changed, else batch_size) and SCALE keeps the per-rank
     * batch and scales lr by the global batch's change (linear rule). */
    herd_elastic_batch elastic_batch;
    int elastic_ranks;
} herd_train_config;

HERD_API void herd_train_config_default(herd_train_config *cfg);

/* Sets one option by the name herd train's flag gives it ("lr", "batch-size"; a leading
 * "--", and '_' for '-' as in Python's batch_size, are accepted) from its text, checked
 * as strictly as the command line checks it: the same ranges and choices, and an error
 * (HERD_ERR_INVALID_ARG) naming the option as given and the value. Switches
 * ("nesterov", "sync-bn", ...) take NULL or "true"/"1" to set, "false"/"0" to clear.
 * Text values (paths, "stage-split") are kept as pointers: they must outlive cfg. The
 * flags that choose data, model, device and precision are not training options. */
HERD_API herd_status herd_train_config_set(herd_train_config *cfg, const char *name, const char *value);
/* The names herd_train_config_set takes, i = 0.. until NULL; *takes_value is false for
 * switches. */
HERD_API const char *herd_train_option_name(size_t i, bool *takes_value);
/* The checks herd_train makes of cfg alone (ranges, and options that need others such as
 * --resume without --checkpoint-dir), for a caller that refuses bad input before any rank
 * starts; herd_train makes them again, whoever calls it. */
HERD_API herd_status herd_train_config_check(const herd_train_config *cfg);

/* Timing of one step's phases, seconds. */
typedef struct herd_phase_times {
    double data_wait, forward, backward, optimizer, total;
    double comm_wait; /* exposed communication: waiting for gradient reductions after backward */
} herd_phase_times;

typedef struct herd_progress {
    int epoch, epochs;            /* 1-based epoch */
    long step, steps_per_epoch;   /* step within the epoch, 1-based */
    long global_step;
    double loss, acc;             /* running averages over this epoch */
    double step_loss;             /* mean loss of the last step's batch */
    double lr;
    double samples_per_s;         /* over the run's training steps so far */
    double epoch_samples_per_s;   /* over this epoch's steps so far */
    double elapsed_s, eta_s;
    herd_phase_times phases;      /* running average per step */
    int rank, world;              /* this process and the group size (callbacks run on every rank) */
    bool epoch_end;               /* true once per epoch, after evaluation */
    double test_loss, test_acc;   /* valid when epoch_end and evaluated */
    bool evaluated;
    double loss_scale;            /* dynamic loss scale after this step (0 = not scaling) */
    long skipped_steps;           /* steps skipped for inf/NaN gradients so far (loss
                                   * scaler or skip_nonfinite) */
    int restarts;                 /* supervised restarts so far (herd_train_result has the why) */
    long lost_steps;
    double recovery_s;
} herd_progress;

/* Called after every step and at each epoch end, on every rank. With several ranks a
 * step's figures (summed over the ranks) travel during the next step, so the callback
 * for step k runs at the end of step k+1; an epoch's last step, a stop and the end of
 * training deliver theirs at once. Return false to stop training: at once for one
 * process; with several ranks the request travels with the next step's metrics and
 * every rank stops after the step they arrive with: the step after the call (the
 * second step of the next epoch for a call at an epoch's end). */
typedef bool (*herd_progress_fn)(const herd_progress *p, void *user);

/* A ready-made progress callback: a redrawn progress bar on a terminal, otherwise
 * one plain line every log_every steps; a summary line per epoch either way. */
typedef struct herd_console_progress {
    void *stream;     /* FILE*, e.g. stderr */
    int log_every;    /* steps between plain lines (0 = 50) */
    bool force_plain; /* plain lines even on a terminal */
    double last_draw; /* internal */
} herd_console_progress;

HERD_API bool herd_console_progress_fn(const herd_progress *p, void *user);

/* Bytes of parameters (buffers such as batch-norm statistics not counted), gradients
 * and optimizer state that one rank holds: the summaries' param_bytes, grad_bytes and
 * optimizer_state_bytes (rank 0's; with pipeline stages, stage 0's). */
typedef struct herd_state_bytes {
    uint64_t params, grads, optimizer_state;
} herd_state_bytes;

typedef struct herd_train_result {
    int epochs_done;
    long steps;
    double train_loss, train_acc;  /* last epoch */
    double test_loss, test_acc;    /* final evaluation (-1 if no test set) */
    double samples_per_s;          /* training throughput, excluding evaluation */
    double wall_s;
    herd_phase_times phases;       /* mean per step */
    double loss_scale;             /* final dynamic loss scale (0 = not scaling) */
    long skipped_steps;            /* steps skipped for inf/NaN gradients */
    long clipped_steps;            /* steps whose gradients --clip-grad-norm scaled down */
    herd_state_bytes state_bytes;  /* this rank's */
    int stale_tmp_removed;         /* temporaries of interrupted checkpoint writes deleted at start */
    bool training_started;         /* set, and steps kept current, once the first step begins */
    /* Supervised restarts (herd run --max-restarts) up to this run, read from the
     * checkpoint directory: failures, optimizer steps lost (trained after the checkpoint
     * a restart resumed from), and seconds from the last step before each failure to the
     * first step after it. */
    int restarts;
    long lost_steps;
    double recovery_s;
    /* herd's memory on the model's device at most, since the process started or the
     * last herd_device_memory_reset_peak (0 where not counted, e.g. on GPUs): this
     * rank's, the largest of any rank's, and each of the first HERD_RESULT_RANKS
     * ranks' (the same on every rank). */
    uint64_t memory_peak_bytes, memory_peak_max_bytes;
#define HERD_RESULT_RANKS 64
    uint64_t rank_memory_peak_bytes[HERD_RESULT_RANKS];
} herd_train_result;

/* The fewest ranks herd_train runs with these pipeline stages (1 = none) and ZeRO stage
 * (0 = off): the stages, twice them with ZeRO (two replicas to shard over); a job must
 * also be a multiple of the stages. herd run --min-np checks against it. */
HERD_API int herd_train_min_ranks(int pipeline_stages, int zero_stage);
/* Whether herd_train, started on `ranks` ranks for a batch given for `ranks0`
 * (--elastic-ranks) with --elastic-batch keep, keeps cfg's global batch: whole replicas
 * (pipeline stages x tensor parts) that split it into whole micro-batches (of
 * --micro-batches, or of --deterministic's slices). herd run picks a restart's ranks
 * with it. */
HERD_API bool herd_train_elastic_keeps(const herd_train_config *cfg, int ranks0, int ranks);

HERD_API herd_status herd_train(herd_model *m, herd_dataset *train, herd_dataset *test,
                                const herd_train_config *cfg, herd_progress_fn progress, void *user,
                                herd_train_result *result);

typedef struct herd_eval_result {
    double loss, acc;
    size_t samples;
} herd_eval_result;

HERD_API herd_status herd_evaluate(herd_model *m, herd_dataset *ds, int batch_size, int threads,
                                   herd_eval_result *result);
/* Collective over dist's ranks (NULL: this process alone, as herd_evaluate): each rank
 * evaluates its part of ds (the same model on every rank) and every rank gets the
 * whole set's result. threads 0: the cores shared among the ranks of this host. */
HERD_API herd_status herd_evaluate_dist(herd_model *m, herd_dataset *ds, int batch_size,
                                        int threads, herd_dist *dist, herd_eval_result *result);

/* Throughput benchmark: `steps` training steps after `warmup` untimed ones. */
typedef struct herd_bench_result {
    double samples_per_s;    /* the whole job: all ranks */
    double step_s;
    herd_phase_times phases; /* mean per step (rank 0) */
    long steps;
    int batch_size, threads; /* per rank */
    int ranks;
    /* With several ranks: rank 0 first trains alone (the others wait idle), in the same
     * run, giving the single-rank figure that weak scaling is measured against. */
    double single_rank_samples_per_s;
    double scaling_efficiency; /* samples_per_s / (ranks x single_rank_samples_per_s) */
    /* GPU models: the device and its peak FLOP/s at the model's precision (SMs x clock
     * x FLOPs per clock per SM, docs/performance.md); 0 = unknown or not a GPU. */
    char device_name[64];
    double peak_tflops;
    herd_state_bytes state_bytes; /* this rank's */
} herd_bench_result;

typedef struct herd_bench_config {
    int batch_size;            /* per rank (128) */
    int steps;                 /* timed steps (50) */
    int warmup;                /* untimed steps first (5) */
    int threads;               /* compute threads (1; 0 = as herd_train_config's) */
    herd_dist *dist;           /* NULL = one process */
    const char *timeline_path; /* trace of the steps all ranks run together (NULL = off) */
    /* Tensor parallelism (herd_train_config's): the ranks form groups of this many parts;
     * there is no one-rank baseline then (a part cannot train alone). 0 or 1: none. */
    int tensor_parallel;
    /* SGD's learning rate (with herd_train_config's momentum and weight decay); 0: its
     * default, 0.05. Small batches on it can diverge, which ends the benchmark. */
    float lr;
    bool cuda_graphs; /* herd_train_config's: forward and backward replayed from graphs */
    bool recompute;   /* herd_train_config's: activations inside runs of layers re-computed */
    int loss_chunk;   /* herd_train_config's: the last layer and the loss in chunks of samples */
} herd_bench_config;

HERD_API void herd_bench_config_default(herd_bench_config *cfg);
/* Every rank gets the same result. */
HERD_API herd_status herd_bench_run(herd_model *m, herd_dataset *ds, const herd_bench_config *cfg,
                                    herd_bench_result *result);
/* herd_bench_run with those fields and no timeline. dist: NULL for one process. */
HERD_API herd_status herd_bench_train(herd_model *m, herd_dataset *ds, int batch_size, int steps,
                                      int warmup, int threads, herd_dist *dist, herd_bench_result *result);

/* ------------------------------------------------------------------ plots */

/* PNG plots drawn with PLplot (docs/observability.md). width and height in pixels;
 * 0 picks a size that fits the content (1000 wide, 300 high per panel or 240 + 45 per rank). */

/* Curves from a herd train --metrics file: one panel per entry of the comma-separated
 * list `metrics` ("loss", "acc", "throughput"; NULL = all three) against the step. */
HERD_API herd_status herd_plot_metrics(const char *metrics_path, const char *png_path, const char *metrics,
                                       int width, int height);
/* Per rank, the mean time per step in each phase (data wait, forward, backward,
 * exposed communication, optimizer) as stacked horizontal bars, from a --timeline trace. */
HERD_API herd_status herd_plot_timeline(const char *trace_path, const char *png_path, int width, int height);

#ifdef __cplusplus
}
#endif
#endif
