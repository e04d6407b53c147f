#include "train/graph_step.h"

#include <stdlib.h>

#include "core/clock.h"
#include "core/error.h"

enum { PART_FORWARD, PART_BACKWARD };
#define CACHED 8 /* shapes a run meets: its batch, an epoch's last, accumulation, a scale */

/* One region's graph for one key: the batch, and for the backward whether gradients
 * accumulate and the loss scale (both fixed in the captured ops). */
typedef struct cached_graph {
    bool used, warmed; /* warmed: the region ran as called once since memory last moved */
    int part, n;
    float grad_beta, loss_scale;
    herd_graph *g;
    long last_use;
} cached_graph;

/* What the regions read: filled before every launch, at one address (the simulated
 * device's replay runs the regions again and checks they call the same ops). */
typedef struct region_args {
    herd_model *m;
    herd_run_ctx ctx;
    const herd_batch *b;
    float *dlogits;
    herd_xent_totals *totals;
    const herd_loss_scaler *scaler;
    float smoothing;
} region_args;

typedef struct herd_step_graphs {
    cached_graph cache[CACHED];
    long uses;
    herd_xent_totals *totals; /* the backend's memory */
    uint64_t *seed;           /* the micro-batch's dropout seed, in the backend's memory */
    herd_batch batch;
    region_args args;
    herd_graph_counts counts;
} herd_step_graphs;

herd_status herd_step_graphs_create(herd_step_plan *p, const herd_model *m)
{
    const herd_backend *be = m->be;
    if (!be->graph_capture || !be->softmax_xent_queued || !be->dropout_fwd_seeded)
        return HERD_INPUT_ERR(HERD_ERR_UNSUPPORTED, "--cuda-graphs needs a GPU (--device cuda): "
                              "the %s backend runs each op as it is called and has no graphs",
                              be->name);
    p->graphs = calloc(1, sizeof *p->graphs);
    return p->graphs ? HERD_OK : HERD_NOMEM(sizeof *p->graphs);
}

void herd_step_graphs_free(herd_step_graphs *gs, const herd_backend *be)
{
    if (!gs)
        return;
    for (int i = 0; i < CACHED; i++)
        if (gs->cache[i].g)
            be->graph_free(gs->cache[i].g);
    be->free(gs->totals);
    be->free(gs->seed);
    free(gs);
}

herd_graph_counts herd_step_graph_counts(const herd_step_plan *p)
{
    return p->graphs ? p->graphs->counts : (herd_graph_counts){0};
}

/* The forward and the loss: the totals stay in the backend's memory. */
static herd_status forward_region(void *user)
{
    region_args *a = user;
    herd_model *m = a->m;
    const float *logits;
    HERD_TRY(herd_model_forward(m, &a->ctx, a->b->x, &logits));
    return m->be->softmax_xent_queued(a->b->n * m->positions, m->classes, logits, a->b->labels,
                                      a->smoothing, a->dlogits, a->totals);
}

static herd_status backward_region(void *user)
{
    region_args *a = user;
    herd_model *m = a->m;
    if (a->scaler)
        HERD_TRY(herd_loss_scaler_scale(a->scaler, m->be, a->dlogits,
                                        (size_t)a->b->n * m->positions * m->class_count));
    return herd_model_backward(m, &a->ctx, a->b->x, a->dlogits);
}

static cached_graph *find(herd_step_graphs *gs, const herd_backend *be, int part, int n,
                          float grad_beta, float loss_scale)
{
    cached_graph *oldest = &gs->cache[0];
    for (int i = 0; i < CACHED; i++) {
        cached_graph *c = &gs->cache[i];
        if (c->used && c->part == part && c->n == n && c->grad_beta == grad_beta &&
            c->loss_scale == loss_scale)
            return c;
        if (!c->used || (oldest->used && c->last_use < oldest->last_use))
            oldest = c;
    }
    if (oldest->g)
        be->graph_free(oldest->g);
    *oldest = (cached_graph){.used = true, .part = part, .n = n, .grad_beta = grad_beta,
                             .loss_scale = loss_scale};
    return oldest;
}

/* A key's first run is the region as called: plans, algorithm searches and workspaces
 * are made then, none inside a capture. The next captures it; later ones launch. Memory
 * freed since a capture (a new batch size, an evaluation) makes the graph stale: the
 * region runs as called again, and the next run captures anew. */
static herd_status run_part(herd_step_graphs *gs, const herd_backend *be, int part,
                            herd_graph_region region, float grad_beta, float loss_scale)
{
    cached_graph *c = find(gs, be, part, gs->batch.n, grad_beta, loss_scale);
    c->last_use = ++gs->uses;
    bool stale = false;
    if (c->g) {
        HERD_TRY(be->graph_launch(c->g, &stale));
        if (!stale) {
            gs->counts.launches++;
            return HERD_OK;
        }
        be->graph_free(c->g);
        c->g = NULL;
        c->warmed = false;
    }
    if (!c->warmed) {
        c->warmed = true;
        gs->counts.eager++;
        return region(&gs->args);
    }
    HERD_TRY(be->graph_capture(region, &gs->args, &c->g));
    gs->counts.captures++;
    HERD_TRY(be->graph_launch(c->g, &stale));
    if (stale)
        return HERD_ERR(HERD_ERR_INTERNAL, "cuda graphs: memory was freed while the %s was "
                        "captured", part == PART_FORWARD ? "forward" : "backward");
    gs->counts.launches++;
    return HERD_OK;
}

herd_status herd_graph_micro_step(herd_model *m, herd_step_plan *p, const herd_batch *host,
                                  int micro, int n_micro, float label_smoothing, uint64_t seed,
                                  herd_step_stats *s)
{
    herd_step_graphs *gs = p->graphs;
    const herd_backend *be = m->be;
    HERD_TRY(herd_phase_mark(&p->clock, micro == 0 ? HERD_PHASE_START : HERD_PHASE_GAP));
    double t0 = herd_now();
    HERD_TRY(herd_step_inputs(m, p, host, &gs->batch));
    /* ZeRO: the last update's all-gather whole, before the forward that reads it (the
     * per-layer waits are host code a replay would not run). */
    p->gather_wait = 0;
    HERD_TRY(herd_step_params_ready(p));
    if (!gs->totals) {
        herd_mem_category was = herd_mem_category_set(HERD_MEM_ACTIVATIONS);
        gs->totals = be->alloc(sizeof *gs->totals);
        gs->seed = be->alloc(sizeof *gs->seed);
        herd_mem_category_set(was);
        if (!gs->totals || !gs->seed)
            return HERD_ERR_NOMEM; /* the allocator said why */
    }
    /* Dropout reads the micro-batch's seed from the backend's memory when it runs; no
     * hooks: a replay runs no host code. */
    HERD_TRY(herd_backend_upload(be, gs->seed, &seed, sizeof seed));
    region_args *a = &gs->args;
    *a = (region_args){.m = m, .ctx = herd_model_ctx(m, true, seed), .b = &gs->batch,
                       .dlogits = p->dlogits, .totals = gs->totals, .scaler = p->scaler,
                       .smoothing = label_smoothing};
    a->ctx.seed_dev = gs->seed;
    a->ctx.grad_beta = micro > 0 ? 1.0f : 0.0f;
    HERD_TRY(run_part(gs, be, PART_FORWARD, forward_region, 0.0f, 0.0f));
    double t1;
    HERD_TRY(herd_step_forward_done(p, s, &t1));
    HERD_TRY(run_part(gs, be, PART_BACKWARD, backward_region, a->ctx.grad_beta,
                      p->scaler ? p->scaler->scale : 0.0f));
    /* The buckets' reductions in the order backward would have started them. */
    herd_run_ctx hooks = {0};
    if (micro == n_micro - 1)
        herd_step_arm_reduction(p, m, n_micro, &hooks);
    for (int l = m->n_layers - 1; l >= 0 && hooks.after_backward; l--)
        HERD_TRY(hooks.after_backward(hooks.hook_user, l));
    herd_xent_totals t;
    HERD_TRY(be->memcpy_d2h(&t, gs->totals, sizeof t));
    HERD_TRY(herd_xent_totals_check(&t, m->classes));
    /* Per sample: the mean over its positions, as herd_micro_step. */
    s->loss_sum += t.loss_sum / m->positions;
    s->correct += (double)t.correct / m->positions;
    s->samples += gs->batch.n;
    return herd_step_backward_done(p, s, t0, t1);
}
