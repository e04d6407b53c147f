/*
 * Pipeline partitioning: which contiguous runs of layers form the stages.
 *
 * Stages are described by bounds[0..stages]: stage s holds layers
 * bounds[s] .. bounds[s+1]-1, bounds[0] = 0 and bounds[stages] = n_layers. A stage may
 * begin at layer b > 0 only where one tensor crosses the cut: every layer from b on
 * reads only layers b-1 and later, never the model input. So a residual block (its
 * shortcut reads the block's input) stays whole, and stage s+1's input is exactly
 * layer b-1's output. That output must be whole under --tensor-parallel too: no stage
 * begins between a column-parallel linear and the row-parallel one that sums its parts
 * (nn/tensor_split.h), with or without it, so the stages do not depend on T.
 *
 * All functions work on a planned model (herd_model_plan: layers set up, no storage
 * needed) and are the same on every rank given the same costs.
 */
#ifndef HERD_NN_PARTITION_H
#define HERD_NN_PARTITION_H

#include <stdbool.h>
#include <stddef.h>

#include "nn/model.h"

/* True when a stage may begin at layer b (0 < b < n_layers). */
bool herd_partition_can_cut(const herd_model *m, int b);

/* Per-layer cost of forward + backward, seconds per sample (measure: each layer
 * timed alone, built on its own with random weights, so no more than one layer is
 * ever allocated) or FLOPs (measure false: forward + backward FLOPs, a relative
 * figure). cost has n_layers entries. `batch`: samples per timing run. */
herd_status herd_partition_layer_costs(const herd_model *m, int batch, bool measure, double *cost);

/* The split minimising the slowest stage's summed cost, over the valid cuts (ties:
 * the earliest). Errors name the model, the stage count and how many stages its
 * valid cuts allow. */
herd_status herd_partition_balance(const herd_model *m, const double *cost, int stages,
                                   int *bounds);

/* --stage-split "a,b,...": the names of the layers where stages 1.. begin (stages-1
 * names, in order). Errors name the value and say what is wrong: an unknown layer
 * (with the nearest names), a layer where one tensor does not cross (which layer
 * reads across the cut, e.g. a residual block's shortcut), names out of order, or the
 * wrong number of names for `stages`. */
herd_status herd_partition_parse(const herd_model *m, const char *split, int stages, int *bounds);

/* Per stage: layers, parameters, parameter bytes, estimated cost share and
 * activation bytes per sample (outputs held for backward). */
typedef struct herd_stage_info {
    int first, end;          /* layers first..end-1 */
    size_t params;           /* floats */
    double cost;             /* summed layer cost (units of the cost array) */
    size_t activation_bytes; /* per sample: every layer's output in the stage (fp32) */
    size_t boundary_bytes;   /* per sample: the output sent to the next stage (0 for the last) */
} herd_stage_info;
void herd_partition_info(const herd_model *m, const double *cost, const int *bounds, int stages,
                         herd_stage_info *out);

/* A table of the stages for the start of a run (rank 0 prints it), e.g.
 *   stage 0: layers conv1..layer1.2 (12), 75,136 parameters, cost 48.1%, 2.4 MiB activations at batch 32
 * at most cap bytes, NUL-terminated. */
void herd_partition_describe(const herd_model *m, const double *cost, const int *bounds, int stages,
                             int batch, char *out, size_t cap);

#endif
