/* --cuda-graphs: a training micro-step's forward (with the loss) and backward each
 * captured once per shape into a backend graph and replayed by one launch, so a step of
 * many small kernels costs the host two launches (docs/gpu.md, "CUDA graphs"). */
#ifndef HERD_TRAIN_GRAPH_STEP_H
#define HERD_TRAIN_GRAPH_STEP_H

#include "train/step.h"

/* The plan's graphs (p->graphs) for m, made before the first step; refused (saying so)
 * where m's backend has no graphs. */
herd_status herd_step_graphs_create(herd_step_plan *p, const herd_model *m);
void herd_step_graphs_free(struct herd_step_graphs *gs, const herd_backend *be);

/* What the graphs did: captures, launches, and regions run as they are called (each
 * shape's first, and after memory was freed under a graph). */
typedef struct herd_graph_counts {
    long captures, launches, eager;
} herd_graph_counts;
herd_graph_counts herd_step_graph_counts(const herd_step_plan *p);

/* herd_micro_step with --cuda-graphs: the same arithmetic in the same order; the
 * gradient buckets start their reductions after the backward's graph instead of
 * during it. */
herd_status herd_graph_micro_step(herd_model *m, herd_step_plan *p, const herd_batch *host,
                                  int micro, int n_micro, float label_smoothing, uint64_t seed,
                                  herd_step_stats *s);

#endif
