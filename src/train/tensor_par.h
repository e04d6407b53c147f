/*
 * Tensor parallelism (Megatron-LM's intra-layer split, docs/model-files.md): the job's
 * ranks form a grid of T parts x D replicas (rank = replica x T + part, so a layer's
 * parts are neighbours and share a host when the launcher fills hosts in order). Each
 * rank holds part `part` of every split layer (nn/tensor_split.h); the parts of one
 * replica form the tensor group, whose sums run inside forward and backward, and the
 * ranks holding the same part form the data group, which reduces gradients as in data
 * parallelism. Checkpoints and the caller's model hold whole tensors: rank 0 collects
 * the first replica's parts, and a resume hands them out again, at any T.
 */
#ifndef HERD_TRAIN_TENSOR_PAR_H
#define HERD_TRAIN_TENSOR_PAR_H

#include "dist/comm.h"
#include "nn/model.h"
#include "optim/optim.h"

typedef struct herd_tensor_par {
    int parts, part, replicas, replica;
    const herd_backend *be;
    herd_comm *group; /* the tensor group: this replica's parts (of its stage) (owned) */
    /* The data group: this part in every replica (owned). With pipeline stages, this
     * part's pipelines: every stage of every replica, over which the pipeline runs. */
    herd_comm *data;
    herd_model *m;    /* this rank's part (owned), or with stages the stage's (not owned) */
    bool stage_model;
    float *scratch;   /* the group's sums: every part's values side by side */
    size_t scratch_floats;
    int *counts;      /* per part, for the all-gather */
} herd_tensor_par;

/* Collective over job: the groups and this rank's part of `whole` (its parameters when
 * it holds them, else initialised from seed as the whole model would be). With
 * cfg->pipeline_stages > 1 the groups only (rank = (replica x P + stage) x T + part):
 * the pipeline builds the stage's part (herd_pipeline_create_split over data, with
 * herd_tensor_par_group's functions) and the caller sets m and stage_model. */
herd_status herd_tensor_par_create(const herd_train_config *cfg, herd_model *whole,
                                   herd_comm *job, herd_tensor_par **out);
/* The tensor group's sums for a model's layers (herd_model.tp). */
herd_tp_group herd_tensor_par_group(herd_tensor_par *tp);
void herd_tensor_par_free(herd_tensor_par *tp);

/* Collective over job: the first replica's parts (parameters, buffers and, with opt on
 * every rank, the optimizer state) go to job rank 0's whole model and whole_opt (NULL
 * elsewhere; opt NULL on every rank: parameters and buffers only). */
herd_status herd_tensor_par_gather(herd_tensor_par *tp, herd_comm *job, herd_optimizer *opt,
                                   herd_model *whole, herd_optimizer *whole_opt);
/* The reverse: rank 0's whole model and optimizer state to the first replica's parts
 * (broadcast_state then gives them to the data groups). */
herd_status herd_tensor_par_scatter(herd_tensor_par *tp, herd_comm *job, herd_optimizer *opt,
                                    herd_model *whole, herd_optimizer *whole_opt);

#endif
