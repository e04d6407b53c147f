/* Pipeline parallelism: building a rank's stage, and a step's schedule run over
 * point-to-point transfers (pipeline.h). */
#include "train/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "dist/signature.h"
#include "nn/loss_chunks.h"
#include "nn/partition.h"
#include "nn/recompute.h"
#include "nn/slices.h"
#include "nn/xent_split.h"

/* Activations travel forward with one tag, their gradients back with another; MPI
 * keeps messages of one tag between two ranks in order, and every stage handles
 * micro-batches in increasing order, so each receive meets its own micro-batch. */
enum { TAG_ACT = 11, TAG_GRAD = 12, TAG_EVAL = 13, TAG_WHOLE = 14 };

/* Where layer `first`'s tensors begin in the whole model's flat buffers. */
static void stage_offsets(const herd_model *whole, int first, size_t *param_at, size_t *buffer_at)
{
    *param_at = *buffer_at = 0;
    for (int i = 0; i < first; i++)
        for (int k = 0; k < whole->layers[i].n_tensors; k++) {
            const herd_tensor_view *v = herd_layer_view(&whole->layers[i], whole, k);
            *(v->is_buffer ? buffer_at : param_at) += v->numel;
        }
}

/* n floats from src to dst, both in be's memory (the stage and the whole model share
 * the backend). */
static herd_status copy_floats(const herd_backend *be, const float *src, float *dst, size_t n)
{
    return n ? be->copy(n, src, dst) : HERD_OK;
}
static herd_status alloc_slot(herd_pipeline *pp, herd_model *whole, herd_pp_slot *slot)
{
    slot->m = herd_xcalloc(1, sizeof *slot->m);
    if (!slot->m)
        return HERD_ERR_NOMEM;
    slot->m->tp = pp->tp; /* split as the stage is */
    int s = pp->stage;
    HERD_TRY(herd_model_build_stage(slot->m, whole, pp->bounds[s], pp->bounds[s + 1], false, s > 0, 0));
    if (s == pp->stages - 1) /* --loss-chunk: the model's last layer is this stage's */
        slot->m->loss_chunk = whole->loss_chunk;
    size_t n = (size_t)pp->micro_size;
    const herd_backend *be = pp->m->be;
    herd_mem_category was = herd_mem_category_set(HERD_MEM_ACTIVATIONS);
    slot->input = be->alloc(n * pp->in_per_sample * sizeof(float));
    slot->labels = be->alloc(n * (size_t)pp->m->positions * sizeof(int32_t));
    /* The last stage's loss may write its gradient over the logits (loss_grad); where it
     * may not, its buffer holds a chunk's under --loss-chunk. */
    bool last = s == pp->stages - 1;
    bool over_logits = last && herd_step_loss_in_place(slot->m);
    size_t dy_n = last ? (size_t)herd_model_head_batch(slot->m, pp->micro_size) : n;
    slot->dy = over_logits ? NULL : be->alloc(dy_n * pp->out_per_sample * sizeof(float));
    herd_mem_category_set(was);
    if (!slot->input || !slot->labels || (!slot->dy && !over_logits))
        return HERD_ERR_NOMEM; /* the allocator said why */
    return HERD_OK;
}

/* --recompute: the slots' micro-batches re-run one at a time, so one pool serves them. */
static herd_status share_recompute_pool(herd_pipeline *pp)
{
    herd_model **models = herd_xcalloc((size_t)pp->n_slots, sizeof *models);
    if (!models)
        return HERD_ERR_NOMEM;
    for (int i = 0; i < pp->n_slots; i++)
        models[i] = pp->slots[i].m;
    herd_status st = herd_recompute_share(models, pp->n_slots);
    free(models);
    return st;
}

/* The stage bounds: named, or balanced by per-layer cost measured on rank 0 (timings
 * differ between ranks; every rank must cut alike). */
static herd_status plan_stages(herd_pipeline *pp, const herd_train_config *cfg, herd_model *whole)
{
    int P = pp->stages, n = whole->n_layers;
    if (P > n)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "--pipeline-stages %d asks for more stages than model '%s' has layers (%d)",
                        P, whole->name, n);
    double *cost = herd_xcalloc((size_t)n, sizeof *cost);
    if (!cost)
        return HERD_ERR_NOMEM;
    herd_status st = HERD_OK;
    /* Timing a layer allocates it (its parameters and gradients, once, on rank 0): with
     * the cuts named, the FLOPs only describe the stages. Every tensor part's pipeline
     * cuts alike: rank 0 of the whole job measures. */
    herd_comm *world = pp->world;
    if (world->rank == 0)
        st = herd_partition_layer_costs(whole, pp->micro_size, !cfg->stage_split, cost);
    herd_status agreed = herd_agree(world, st, "measuring the layers' cost");
    if (agreed == HERD_OK && world->size > 1)
        agreed = world->ops->broadcast(world, cost, (size_t)n * sizeof *cost, 0);
    if (agreed == HERD_OK)
        agreed = cfg->stage_split ? herd_partition_parse(whole, cfg->stage_split, P, pp->bounds)
                                  : herd_partition_balance(whole, cost, P, pp->bounds);
    if (agreed == HERD_OK) {
        herd_stage_info info[HERD_PP_MAX_STAGES];
        herd_partition_info(whole, cost, pp->bounds, P, info);
        double total = 0;
        for (int s = 0; s < P; s++)
            total += info[s].cost;
        for (int s = 0; s < P; s++)
            pp->partition_cost[s] = total > 0 ? info[s].cost / total : 0;
        herd_partition_describe(whole, cost, pp->bounds, P, pp->micro_size, pp->partition_text,
                                sizeof pp->partition_text);
    }
    free(cost);
    return agreed;
}

static herd_status build_stage(herd_pipeline *pp, const herd_train_config *cfg, herd_model *whole)
{
    int s = pp->stage, first = pp->bounds[s], end = pp->bounds[s + 1];
    pp->m = herd_xcalloc(1, sizeof *pp->m);
    if (!pp->m)
        return HERD_ERR_NOMEM;
    pp->m->tp = pp->tp; /* tensor parallelism inside the stage: its layers split */
    HERD_TRY(herd_model_build_stage(pp->m, whole, first, end, true, s > 0, cfg->seed));
    herd_model *m = pp->m;
    HERD_TRY(herd_pipeline_tied_find(pp, whole));
    if (whole->params && pp->tp.size > 1)
        HERD_TRY(herd_pipeline_take_part(pp, whole));
    else if (whole->params) { /* the caller's weights (loaded or initialised), not the seed's */
        size_t param_at, buffer_at;
        stage_offsets(whole, first, &param_at, &buffer_at);
        HERD_TRY(copy_floats(m->be, whole->params + param_at, m->params,
                             herd_pipeline_whole_share(pp)));
        HERD_TRY(copy_floats(m->be, whole->buffers + buffer_at, m->buffers, m->n_buffer_floats));
    }
    herd_shape in = {1, m->in_c, m->in_h, m->in_w};
    pp->in_per_sample = herd_shape_per_sample(in);
    pp->out_per_sample = herd_shape_per_sample(m->layers[m->n_layers - 1].out_shape);
    /* Stage 0 reads the images, the last stage the labels (one per position of a
     * language model); the others only the count. */
    herd_batch_store_init(&pp->kept, pp->micro_size, s == 0 ? pp->in_per_sample : 0,
                          s == pp->stages - 1 ? (size_t)m->positions : 0);
    pp->n_slots = herd_pp_max_in_flight(pp->kind, pp->stages, pp->micro_batches, s);
    pp->slots = herd_xcalloc((size_t)pp->n_slots, sizeof *pp->slots);
    pp->actions = herd_xcalloc(2 * (size_t)pp->micro_batches, sizeof *pp->actions);
    if (!pp->slots || !pp->actions)
        return HERD_ERR_NOMEM;
    for (int i = 0; i < pp->n_slots; i++)
        HERD_TRY(alloc_slot(pp, whole, &pp->slots[i]));
    return whole->recompute ? share_recompute_pool(pp) : HERD_OK;
}

herd_status herd_pipeline_create(const herd_train_config *cfg, herd_model *whole, herd_comm *job,
                                 herd_pipeline **out)
{
    return herd_pipeline_create_split(cfg, whole, job, job, NULL, out);
}

herd_status herd_pipeline_create_split(const herd_train_config *cfg, herd_model *whole,
                                       herd_comm *world, herd_comm *job, const herd_tp_group *tp,
                                       herd_pipeline **out)
{
    *out = NULL;
    herd_pipeline *pp = herd_xcalloc(1, sizeof *pp);
    if (!pp)
        return HERD_ERR_NOMEM;
    pp->world = world;
    pp->job = job;
    if (tp)
        pp->tp = *tp;
    pp->stages = cfg->pipeline_stages;
    pp->stage = job->rank % pp->stages;
    pp->replica = job->rank / pp->stages;
    pp->replicas = job->size / pp->stages;
    pp->micro_batches = cfg->micro_batches;
    pp->kind = cfg->pp_schedule;
    pp->micro_size = cfg->batch_size / cfg->micro_batches;
    for (int l = 0; l < whole->n_layers && cfg->deterministic && cfg->sync_bn; l++)
        pp->synced_bn = pp->synced_bn || herd_layer_is_batchnorm(&whole->layers[l]);
    herd_status st = plan_stages(pp, cfg, whole);
    if (st == HERD_OK) {
        /* A stage group of one reduces nothing, but accumulates through the same code
         * (on a device, scaling the device's gradients). */
        char name[32];
        snprintf(name, sizeof name, "stage group %d", pp->stage);
        st = pp->replicas > 1 ? job->ops->split(job, pp->stage, pp->replica, name, &pp->group)
                              : herd_comm_device_local_create(whole->be, &pp->group);
    }
    if (st == HERD_OK)
        st = build_stage(pp, cfg, whole);
    if (st == HERD_OK && cfg->deterministic)
        st = herd_pipeline_tied_slices_setup(pp, whole);
    st = herd_agree(world, st, "building the pipeline stages");
    /* The last stage's copy of a tied token table starts from the table's values. */
    if (st == HERD_OK)
        st = herd_agree(world, herd_pipeline_tied_copy(pp, NULL, false),
                        "copying the tied token table");
    if (st != HERD_OK) {
        herd_pipeline_free(pp);
        return st;
    }
    *out = pp;
    return HERD_OK;
}

void herd_pipeline_free(herd_pipeline *pp)
{
    if (!pp)
        return;
    for (int i = 0; pp->slots && i < pp->n_slots; i++) {
        herd_pp_slot *sl = &pp->slots[i];
        herd_model_free(sl->m);
        pp->m->be->free(sl->input);
        pp->m->be->free(sl->labels);
        pp->m->be->free(sl->dy);
        pp->m->be->free(sl->tied_grad);
    }
    free(pp->slots);
    free(pp->actions);
    herd_pipeline_synced_free(pp);
    herd_batch_store_free(&pp->kept);
    herd_tied_sum_free(&pp->tied_sum, pp->m ? pp->m->be : NULL);
    herd_model_free(pp->m);
    herd_comm_destroy(pp->group);
    free(pp);
}

/* ------------------------------------------------------------------- a step */

typedef struct step_run {
    herd_pipeline *pp;
    herd_step_plan *plan;
    herd_loader *loader;
    int n_total, done; /* micro-batches in the step, before this round */
    int bwd_done;      /* backward passes so far in the step */
    /* --loss-chunk on the last stage: the last layer's backward passes so far in the step
     * (they run in the forward), and the reduction's hook, armed in the forward of the
     * step's last micro-batch, for its backward. */
    int head_done;
    herd_status (*after_backward)(void *user, int layer);
    void *hook_user;
    bool from_kept;    /* --deterministic's redo: the step's micro-batches again */
    float label_smoothing;
    uint64_t seed;
    herd_step_stats *s;
} step_run;

/* Waits for a transfer, timing it as exposed communication (with pipelines that
 * includes waiting for the neighbour: the bubble). */
static herd_status wait_p2p(step_run *r, herd_p2p *req, const char *what, int mb)
{
    if (!req->active)
        return HERD_OK;
    herd_pipeline *pp = r->pp;
    char desc[160];
    snprintf(desc, sizeof desc, "stage %d: %s of micro-batch %d", pp->stage, what, mb);
    pp->job->ops->set_activity(pp->job, desc);
    double t0 = herd_now();
    herd_status st = pp->job->ops->p2p_wait(pp->job, req, desc);
    double t1 = herd_now();
    r->s->t.comm_wait += t1 - t0;
    if (r->plan->timeline) { /* every transfer, however short its wait */
        char label[48];
        snprintf(label, sizeof label, "%s mb %d", what, mb);
        herd_timeline_add(r->plan->timeline, HERD_TL_COMM_WAIT, label, t0, t1);
    }
    return st;
}

static herd_status post_recv_act(herd_pipeline *pp, herd_pp_slot *sl)
{
    if (pp->stage == 0)
        return HERD_OK;
    return pp->job->ops->p2p_start(pp->job, &sl->recv_act, false, sl->input,
                                   (size_t)pp->micro_size * pp->in_per_sample * sizeof(float),
                                   pp->job->rank - 1, TAG_ACT);
}

static void progress_transfers(void *job)
{
    herd_comm *c = job;
    c->ops->p2p_progress(c);
}

static herd_run_ctx stage_ctx(step_run *r, int mb)
{
    herd_pipeline *pp = r->pp;
    /* --deterministic: a micro-batch is one slice, its dropout stream that of its place
     * in the global batch (exact_step.c), whatever the grid. */
    uint64_t place = (uint64_t)(r->done + mb);
    if (r->plan->exact)
        place = place * (uint64_t)pp->replicas + (uint64_t)pp->replica;
    herd_run_ctx ctx = herd_model_ctx(pp->m, true, herd_mix64(r->seed, place));
    ctx.exact = r->plan->exact_linear;
    ctx.between_layers = progress_transfers;
    ctx.between_user = pp->job;
    ctx.trace = herd_timeline_sink(r->plan->timeline);
    if (r->plan->sync_bn && pp->group->size > 1)
        ctx.bn_group = herd_group_of_comm(pp->group);
    return ctx;
}

/* A micro-batch's forward or backward since t0 on the timeline; returns its seconds. */
static double record(step_run *r, herd_tl_kind kind, int mb, double t0)
{
    double t1 = herd_now();
    if (r->plan->timeline) {
        char label[24];
        snprintf(label, sizeof label, "mb %d", r->done + mb);
        herd_timeline_add(r->plan->timeline, kind, label, t0, t1);
    }
    return t1 - t0;
}

/* The gradient of the slot's output: received, or on the last stage the loss's (written
 * over the logits where herd_step_loss_in_place). */
static float *loss_grad(const herd_pp_slot *sl)
{
    return sl->dy ? sl->dy : sl->m->acts[sl->m->n_layers - 1];
}

/* The last stage under --loss-chunk: its layers but the last over the micro-batch, then
 * per chunk the last layer, the loss and the last layer's backward (train/chunk_step.c's
 * order); the step's reduction is armed before the last micro-batch's chunks, whose last
 * layer's gradient is final first. */
static herd_status forward_in_chunks(step_run *r, int mb, herd_pp_slot *sl, herd_run_ctx *ctx,
                                     const herd_batch *b)
{
    herd_pipeline *pp = r->pp;
    herd_model *m = sl->m;
    bool exact = r->plan->exact != NULL;
    HERD_TRY(herd_model_forward_body(m, ctx, sl->input));
    if (r->done + mb == r->n_total - 1 && !exact) {
        herd_step_arm_reduction(r->plan, pp->m, r->n_total, ctx);
        r->after_backward = ctx->after_backward;
        r->hook_user = ctx->hook_user;
    }
    ctx->grad_beta = r->head_done > 0 && !exact ? 1.0f : 0.0f;
    HERD_TRY(herd_step_head_chunks(m, r->plan, ctx, sl->input, sl->labels, b->n,
                                   r->label_smoothing, loss_grad(sl), r->s));
    r->head_done++;
    r->s->samples += b->n;
    ctx->after_backward = NULL; /* the forward's context goes no further */
    return HERD_OK;
}

static herd_status run_forward(step_run *r, int mb)
{
    herd_pipeline *pp = r->pp;
    herd_pp_slot *sl = &pp->slots[mb % pp->n_slots];
    bool last = pp->stage == pp->stages - 1;
    herd_exact_sum *exact = r->plan->exact;
    herd_batch b;
    if (r->from_kept) {
        b = herd_batch_store_get(&pp->kept, r->done + mb);
    } else {
        bool has;
        pp->job->ops->set_activity(pp->job, "waiting for the data loader");
        HERD_TRY(herd_loader_next(r->loader, &b, &has));
        if (!has)
            return HERD_ERR(HERD_ERR_INTERNAL, "the loader ended the epoch inside a pipeline step");
        r->s->t.data_wait += b.wait_s;
        if (exact)
            HERD_TRY(herd_batch_store_put(&pp->kept, r->done + mb, &b));
    }
    /* The slot's previous micro-batch may still be sending its input gradient. */
    HERD_TRY(wait_p2p(r, &sl->send_grad, "sending the input gradient", sl->mb));
    sl->n = b.n;
    sl->mb = r->done + mb;
    const herd_backend *be = pp->m->be;
    if (pp->stage == 0)
        HERD_TRY(herd_backend_upload(be, sl->input, b.x,
                                     (size_t)b.n * pp->in_per_sample * sizeof(float)));
    if (last)
        HERD_TRY(herd_backend_upload(be, sl->labels, b.labels,
                                     (size_t)b.n * pp->m->positions * sizeof(int32_t)));
    HERD_TRY(wait_p2p(r, &sl->recv_act, "receiving the activations", r->done + mb));
    if (pp->stage > 0 && sl->recv_act.bytes != (size_t)b.n * pp->in_per_sample * sizeof(float))
        return HERD_ERR(HERD_ERR_INTERNAL,
                        "stage %d: micro-batch %d of %d samples, but stage %d sent %zu bytes of "
                        "activations; the stages read different batches",
                        pp->stage, mb, b.n, pp->stage - 1, sl->recv_act.bytes);
    if (++pp->in_flight > pp->max_in_flight_seen)
        pp->max_in_flight_seen = pp->in_flight;
    if (pp->in_flight > pp->n_slots)
        return HERD_ERR(HERD_ERR_INTERNAL, "stage %d holds %d micro-batches, more than its %d slots",
                        pp->stage, pp->in_flight, pp->n_slots);
    pp->job->ops->set_activity(pp->job, "pipeline forward");
    double t0 = herd_now();
    HERD_TRY(herd_model_reshape(sl->m, b.n));
    herd_run_ctx ctx = stage_ctx(r, mb);
    const float *out = NULL;
    /* --deterministic: every slice's forward starts from the running statistics the step
     * found, and what it leaves goes into the exact sums (exact_sum.h). */
    if (exact)
        HERD_TRY(herd_exact_sum_restore_buffers(exact, pp->m));
    bool chunked = last && herd_model_head_chunked(sl->m);
    if (chunked)
        HERD_TRY(forward_in_chunks(r, mb, sl, &ctx, &b));
    else
        HERD_TRY(herd_model_forward(sl->m, &ctx, sl->input, &out));
    if (exact)
        HERD_TRY(herd_exact_sum_add_buffers(exact, pp->m));
    if (last && !chunked) { /* a language model: a row of the loss per position, a sample's mean */
        double loss = 0;
        long correct = 0;
        int rows = b.n * pp->m->positions;
        HERD_TRY(herd_model_xent(pp->m, rows, out, sl->labels, r->label_smoothing, loss_grad(sl), &loss,
                                 &correct));
        if (r->plan->scaler)
            HERD_TRY(herd_loss_scaler_scale(r->plan->scaler, pp->m->be, loss_grad(sl),
                                            (size_t)rows * pp->m->class_count));
        loss /= pp->m->positions;
        r->s->loss_sum += exact ? herd_exact_loss(loss) : loss;
        r->s->correct += (double)correct / pp->m->positions;
        r->s->samples += b.n;
    }
    r->s->t.forward += record(r, HERD_TL_FORWARD, mb, t0);
    if (last)
        return HERD_OK;
    size_t out_bytes = (size_t)b.n * pp->out_per_sample * sizeof(float);
    HERD_TRY(pp->job->ops->p2p_start(pp->job, &sl->send_act, true, (void *)out, out_bytes,
                                     pp->job->rank + 1, TAG_ACT));
    return pp->job->ops->p2p_start(pp->job, &sl->recv_grad, false, sl->dy, out_bytes,
                                   pp->job->rank + 1, TAG_GRAD);
}

static herd_status run_backward(step_run *r, int mb, int round_n)
{
    herd_pipeline *pp = r->pp;
    herd_pp_slot *sl = &pp->slots[mb % pp->n_slots];
    HERD_TRY(wait_p2p(r, &sl->recv_grad, "receiving the output gradient", r->done + mb));
    HERD_TRY(wait_p2p(r, &sl->send_act, "sending the activations", r->done + mb));
    pp->job->ops->set_activity(pp->job, "pipeline backward");
    double t0 = herd_now();
    herd_run_ctx ctx = stage_ctx(r, mb);
    herd_exact_sum *exact = r->plan->exact; /* each slice's gradient alone, into the sums */
    ctx.grad_beta = r->bwd_done > 0 && !exact ? 1.0f : 0.0f;
    bool chunked = pp->stage == pp->stages - 1 && herd_model_head_chunked(sl->m);
    if (r->done + mb == r->n_total - 1 && !exact) {
        if (chunked) { /* armed in its forward */
            ctx.after_backward = r->after_backward;
            ctx.hook_user = r->hook_user;
        } else {
            herd_step_arm_reduction(r->plan, pp->m, r->n_total, &ctx);
        }
    }
    herd_p2p tied = {0}; /* a tied table's gradient from the head, where one process has it */
    HERD_TRY(herd_pipeline_tied_slice_in(pp, &tied));
    HERD_TRY(wait_p2p(r, &tied, "receiving the token table's gradient", r->done + mb));
    if (chunked) /* the last layer's backward ran in the forward */
        HERD_TRY(herd_model_backward_body(sl->m, &ctx, sl->input));
    else
        HERD_TRY(herd_model_backward(sl->m, &ctx, sl->input, loss_grad(sl)));
    HERD_TRY(herd_pipeline_tied_slice_out(pp, sl));
    if (exact)
        HERD_TRY(herd_exact_sum_add_grads(exact, pp->m));
    r->bwd_done++;
    pp->in_flight--;
    r->s->t.backward += record(r, HERD_TL_BACKWARD, mb, t0);
    if (pp->stage > 0)
        HERD_TRY(pp->job->ops->p2p_start(pp->job, &sl->send_grad, true, sl->m->dinput,
                                         (size_t)sl->n * pp->in_per_sample * sizeof(float),
                                         pp->job->rank - 1, TAG_GRAD));
    /* The slot is free: the micro-batch that reuses it may arrive now. */
    if (mb + pp->n_slots < round_n)
        HERD_TRY(post_recv_act(pp, sl));
    return HERD_OK;
}

static herd_status run_round(step_run *r, int n)
{
    herd_pipeline *pp = r->pp;
    HERD_TRY(herd_pp_schedule(pp->kind, pp->stages, n, pp->stage, pp->actions));
    int posted = n < pp->n_slots ? n : pp->n_slots;
    for (int mb = 0; mb < posted; mb++)
        HERD_TRY(post_recv_act(pp, &pp->slots[mb]));
    for (int i = 0; i < 2 * n; i++) {
        herd_pp_action a = pp->actions[i];
        HERD_TRY(a.op == HERD_PP_FWD ? run_forward(r, a.mb) : run_backward(r, a.mb, n));
    }
    for (int i = 0; i < pp->n_slots; i++) {
        HERD_TRY(wait_p2p(r, &pp->slots[i].send_grad, "sending the input gradient", pp->slots[i].mb));
        HERD_TRY(herd_pipeline_tied_slice_done(pp, &pp->slots[i]));
    }
    return HERD_OK;
}

herd_status herd_pipeline_forward_backward(herd_pipeline *pp, herd_step_plan *plan,
                                           herd_loader *loader, int n, float label_smoothing,
                                           uint64_t seed, herd_step_stats *s)
{
    step_run r = {.pp = pp, .plan = plan, .loader = loader, .n_total = n,
                  .label_smoothing = label_smoothing, .seed = seed, .s = s};
    herd_exact_sum *exact = plan->exact;
    if (exact)
        HERD_TRY(herd_exact_sum_keep_buffers(exact, pp->m));
    for (int pass = 0;; pass++) {
        if (exact) /* every micro-batch is one slice, on each replica */
            herd_exact_sum_begin(exact, pp->m, (long)n * pp->replicas, false);
        pp->in_flight = 0;
        r.done = r.bwd_done = r.head_done = 0;
        if (pp->synced_bn)
            HERD_TRY(herd_pipeline_synced_pass(pp, plan, loader, n, label_smoothing, seed,
                                               r.from_kept, s));
        while (r.done < n && !pp->synced_bn) {
            int round_n = n - r.done < pp->micro_batches ? n - r.done : pp->micro_batches;
            HERD_TRY(run_round(&r, round_n));
            r.done += round_n;
        }
        if (!exact)
            return HERD_OK;
        /* The stages decide a redo together, as one process holding every stage would. */
        bool redo;
        HERD_TRY(herd_exact_sum_finish_agreed(exact, pp->m, pp->group, pp->job, &redo));
        if (!redo)
            return HERD_OK;
        if (pass > 0)
            return HERD_ERR(HERD_ERR_INTERNAL, "--deterministic: the exact sums overflowed on a "
                            "grid made from the step's own values");
        /* The grid came from this pass's values: the step is counted once. */
        s->loss_sum = 0, s->correct = 0, s->samples = 0;
        r.from_kept = true;
    }
}

/* ------------------------------------------------------------- evaluation */

typedef struct pp_eval {
    herd_pipeline *pp;
    float *in;        /* stage 0: the batch; later stages: the received activations */
    int32_t *labels;  /* the last stage's labels */
    size_t in_cap, labels_cap; /* elements */
} pp_eval;

static herd_status transfer(herd_comm *c, bool send, void *buf, size_t bytes, int peer, int tag,
                            const char *what)
{
    herd_p2p req;
    HERD_TRY(c->ops->p2p_start(c, &req, send, buf, bytes, peer, tag));
    return c->ops->p2p_wait(c, &req, what);
}
static herd_status eval_batch(void *user, const herd_batch *b, double *loss, double *correct,
                              double *samples)
{
    pp_eval *e = user;
    herd_pipeline *pp = e->pp;
    herd_comm *job = pp->job;
    herd_model *sm = pp->slots[0].m;
    const herd_backend *be = pp->m->be;
    bool last = pp->stage == pp->stages - 1;
    char what[96];
    size_t need = (size_t)b->n * pp->in_per_sample;
    const float *x = b->x;
    const int32_t *labels = b->labels;
    if (pp->stage > 0 || !be->host_memory) /* the CPU reads the loader's batch directly */
        HERD_TRY(herd_backend_grow(be, HERD_MEM_ACTIVATIONS, (void **)&e->in, &e->in_cap, need,
                                   sizeof(float)));
    if (pp->stage > 0) {
        snprintf(what, sizeof what, "stage %d: receiving activations to evaluate", pp->stage);
        HERD_TRY(transfer(job, false, e->in, need * sizeof(float), job->rank - 1, TAG_EVAL, what));
        x = e->in;
    } else if (!be->host_memory) {
        HERD_TRY(be->memcpy_h2d(e->in, b->x, need * sizeof(float)));
        x = e->in;
    }
    size_t n_labels = (size_t)b->n * pp->m->positions;
    if (last && !be->host_memory) {
        HERD_TRY(herd_backend_grow(be, HERD_MEM_ACTIVATIONS, (void **)&e->labels, &e->labels_cap,
                                   n_labels, sizeof(int32_t)));
        HERD_TRY(be->memcpy_h2d(e->labels, b->labels, n_labels * sizeof(int32_t)));
        labels = e->labels;
    }
    HERD_TRY(herd_model_reshape(sm, b->n));
    herd_run_ctx ctx = herd_model_ctx(pp->m, false, 0);
    const float *out = NULL;
    long c = 0;
    if (last) /* the last layer in chunks where it runs so (--loss-chunk) */
        HERD_TRY(herd_eval_loss(sm, &ctx, x, labels, b->n, loss, &c));
    else
        HERD_TRY(herd_model_forward(sm, &ctx, x, &out));
    if (!last) {
        snprintf(what, sizeof what, "stage %d: sending activations to evaluate", pp->stage);
        return transfer(job, true, (void *)out, (size_t)b->n * pp->out_per_sample * sizeof(float),
                        job->rank + 1, TAG_EVAL, what);
    }
    *loss /= pp->m->positions; /* per sample, as in training */
    *correct = (double)c / pp->m->positions;
    *samples = b->n;
    return HERD_OK;
}

herd_status herd_pipeline_evaluate(herd_pipeline *pp, herd_dataset *ds, int batch_size,
                                   herd_eval_result *r)
{
    pp_eval e = {.pp = pp};
    herd_status st = herd_eval_sliced(ds, batch_size, pp->replica, pp->replicas, pp->job,
                                      eval_batch, &e, r);
    pp->m->be->free(e.in);
    pp->m->be->free(e.labels);
    return st;
}

/* ----------------------------------------------- the whole model on rank 0 */

/* What a stage contributes, in order: parameters, buffers, and with an optimizer
 * each of its states. */
static int piece_count(herd_optimizer *o) { return 2 + (o ? herd_optimizer_state_count(o) : 0); }

static float *stage_piece(herd_model *m, herd_optimizer *o, int i, size_t *numel)
{
    if (i == 0) {
        *numel = m->n_param_floats;
        return m->params;
    }
    if (i == 1) {
        *numel = m->n_buffer_floats;
        return m->buffers;
    }
    return herd_optimizer_state(o, i - 2, NULL, numel);
}

/* The same piece of stage s inside the whole model (rank 0). */
static float *whole_piece(herd_pipeline *pp, herd_model *whole, herd_optimizer *whole_opt, int s,
                          int i, size_t *numel)
{
    size_t p0, b0, p1, b1, all;
    stage_offsets(whole, pp->bounds[s], &p0, &b0);
    stage_offsets(whole, pp->bounds[s + 1], &p1, &b1);
    float *base = stage_piece(whole, whole_opt, i, &all);
    bool buffers = i == 1;
    *numel = buffers ? b1 - b0 : p1 - p0;
    return base + (buffers ? b0 : p0);
}

static herd_status move_pieces(herd_pipeline *pp, herd_optimizer *opt, herd_model *whole,
                               herd_optimizer *whole_opt, bool to_rank0)
{
    herd_comm *job = pp->job;
    herd_status st = HERD_OK;
    char what[96];
    if (job->rank == 0) {
        for (int s = 0; s < pp->stages && st == HERD_OK; s++)
            for (int i = 0; i < piece_count(opt) && st == HERD_OK; i++) {
                size_t n, mine;
                float *dst = whole_piece(pp, whole, whole_opt, s, i, &n);
                if (s == 0) {
                    float *src = stage_piece(pp->m, opt, i, &mine);
                    st = to_rank0 ? copy_floats(pp->m->be, src, dst, n)
                                  : copy_floats(pp->m->be, dst, src, n);
                    continue;
                }
                snprintf(what, sizeof what, "%s stage %d's tensors (part %d)",
                         to_rank0 ? "gathering" : "sending", s, i);
                if (n > 0)
                    st = transfer(job, !to_rank0, dst, n * sizeof(float), s, TAG_WHOLE, what);
            }
    } else if (pp->replica == 0) {
        for (int i = 0; i < piece_count(opt) && st == HERD_OK; i++) {
            size_t n;
            float *src = stage_piece(pp->m, opt, i, &n);
            if (i != 1) /* the whole model's floats: not the last stage's copy of a tied table */
                n = herd_pipeline_whole_share(pp);
            snprintf(what, sizeof what, "stage %d: %s its tensors (part %d)", pp->stage,
                     to_rank0 ? "sending rank 0" : "receiving from rank 0", i);
            if (n > 0)
                st = transfer(job, to_rank0, src, n * sizeof(float), 0, TAG_WHOLE, what);
        }
    }
    return st;
}

herd_status herd_pipeline_gather(herd_pipeline *pp, herd_optimizer *opt, herd_model *whole,
                                 herd_optimizer *whole_opt)
{
    herd_status st = pp->tp.size > 1 ? herd_pipeline_move_parts(pp, opt, whole, whole_opt, true)
                                     : move_pieces(pp, opt, whole, whole_opt, true);
    HERD_TRY(herd_agree(pp->world, st, "gathering the stages"));
    return herd_pipeline_tied_check(pp);
}

herd_status herd_pipeline_scatter(herd_pipeline *pp, herd_optimizer *opt, herd_model *whole,
                                  herd_optimizer *whole_opt)
{
    HERD_TRY(pp->tp.size > 1 ? herd_pipeline_move_parts(pp, opt, whole, whole_opt, false)
                             : move_pieces(pp, opt, whole, whole_opt, false));
    /* The file holds the table once: the first replica's last stage takes its copy. */
    return herd_pipeline_tied_copy(pp, opt, true);
}
