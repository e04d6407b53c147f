/*
 * Where a model's activations live, and activation recomputation (--recompute).
 *
 * The layers split into runs at the cuts where one tensor crosses (herd_partition_can_cut:
 * a residual block, or a transformer block's attention half and its MLP half, is one
 * run). With recomputation, a run of two or more layers keeps only its last layer's
 * output; the outputs of the others (its inside) and every inside layer's stash share
 * one pool with every other run's inside. The backward re-runs a run's inside forward
 * when it reaches the run's last layer, from the run's input (the previous run's kept
 * output), with the same step's context: the same arithmetic on the same values, so the
 * same bits as holding them (dropout's masks come from the step's seed; running
 * statistics the re-run would move again are put back). The run that ends with the
 * model's output is never re-run (a language model's head is its largest GEMM), nor is
 * the run whose inside the forward left in the pool. Without recomputation every output
 * and stash has its own allocation. A chain of single layers (mlp) has nothing inside a
 * run: nothing is re-run.
 */
#ifndef HERD_NN_RECOMPUTE_H
#define HERD_NN_RECOMPUTE_H

#include "nn/model.h"

/* The pool of the runs' insides, a model's own or shared by several (a pipeline stage's
 * in-flight slots: one micro-batch's backward re-runs at a time, so one pool serves them
 * all). holder and run say whose values it holds. */
typedef struct herd_recompute_pool {
    void *mem;
    size_t bytes;
    long generation;          /* bumped when mem moves: the models pointing into it reshape */
    const herd_model *holder; /* NULL: nobody's */
    int run;
    int users;                /* models sharing it (0: a model's own) */
} herd_recompute_pool;

typedef struct herd_recompute {
    bool recompute; /* the model's flag this storage was planned with */
    int n_layers;
    /* Per layer: the pooled run it is inside of, or -1; the pooled run it is the kept
     * last layer of, or -1. */
    int *inside_of, *last_of;
    int *run_first, *run_last; /* per pooled run: its inside, layers run_first..run_last */
    int n_runs;
    herd_recompute_pool *pool; /* every pooled run's inside, one at a time (m->shared_pool, or own) */
    size_t pool_bytes;         /* what this model needs of it */
    long pool_generation;      /* the shared pool's when the outputs were placed in it */
    void *scratch;             /* the layers' shared scratch (layer.h's scratch_bytes) */
    float *saved;              /* buffers (running statistics) of a run's inside while it re-runs */
    size_t saved_floats;
    bool *own_act, *own_stash; /* per layer: acts[i] / stash its own allocation */
} herd_recompute;

/* Bytes of layer l's output (and of its gradient) at its batch: bf16 activations take half. */
size_t herd_act_bytes(const herd_layer *l);

/* Allocates m->acts[i], every layer's stash and the layers' shared scratch for their
 * batch (shapes and formats set), pooling insides when m->recompute; m->rc describes it.
 * On failure what was allocated stays in m->rc for herd_recompute_free. */
herd_status herd_recompute_alloc(herd_model *m);
void herd_recompute_free(herd_model *m);
/* How many runs of m's layers recomputation would re-run (a planned model will do). */
int herd_recompute_runs(const herd_model *m);

/* After layer i's forward: the pool now holds its run's values. */
static inline void herd_recompute_forward_done(herd_model *m, int i)
{
    if (m->rc && m->rc->inside_of[i] >= 0) {
        m->rc->pool->holder = m;
        m->rc->pool->run = m->rc->inside_of[i];
    }
}

/* One pool for these models' runs (each a slot of the same pipeline stage, re-run one at a
 * time), from their next reshape; freed with the last of them (herd_model_free). */
herd_status herd_recompute_share(herd_model *const *models, int n);
/* Whether m's outputs point into a shared pool that has since moved (reshape again). */
static inline bool herd_recompute_stale(const herd_model *m)
{
    return m->rc && m->shared_pool && m->rc->pool_generation != m->shared_pool->generation;
}
/* m lets go of its shared pool (herd_model_free). */
void herd_recompute_unshare(herd_model *m);

/* Copies the buffers (running statistics) of layers first..last, at ctx->buffers, into
 * m's keeping (save) or back from it: a re-run moves them once more than a step does. */
herd_status herd_recompute_move_buffers(herd_model *m, const herd_run_ctx *ctx, int first,
                                        int last, bool save);

/* Before layer i's backward: re-runs the inside of the run i ends, when the pool does
 * not hold it. x is the model input of this forward. */
herd_status herd_recompute_before_backward(herd_model *m, const herd_run_ctx *ctx, const float *x,
                                           int i);

#endif
