#include "train/step.h"

#include "train/graph_step.h"

#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/parse.h"
#include "core/testhook.h"
#include "dist/signature.h"
#include "nn/loss_chunks.h"
#include "nn/xent_split.h"
#include "train/run.h"

herd_status herd_step_plan_init(herd_step_plan *p, herd_model *m, herd_comm *comm,
                                double bucket_mb, herd_wire_type wire, bool sync_bn)
{
    memset(p, 0, sizeof *p);
    p->comm = comm;
    p->wire = wire;
    p->sync_bn = sync_bn;
    herd_phase_clock_init(&p->clock, m->be);
    return herd_buckets_plan(m, bucket_mb, &p->buckets);
}

void herd_step_plan_free(herd_step_plan *p, herd_model *m)
{
    herd_buckets_free(&p->buckets);
    herd_replica_stage_free(&p->replica_stage);
    herd_step_graphs_free(p->graphs, m->be);
    p->graphs = NULL;
    m->be->free(p->dlogits);
    m->be->free(p->x_dev);
    m->be->free(p->labels_dev);
    p->dlogits = NULL;
    p->x_dev = NULL;
    p->labels_dev = NULL;
    p->input_capacity = p->dlogits_capacity = 0;
}

/* The batch as the backend sees it: the loader's host batch for the CPU, otherwise
 * copies in buffers kept for the next batch. */
static herd_status batch_to_backend(herd_model *m, float **x_dev, int32_t **labels_dev,
                                    int *capacity, const herd_batch *b, herd_batch *out)
{
    *out = *b;
    const herd_backend *be = m->be;
    if (be->host_memory)
        return HERD_OK;
    size_t per_sample = (size_t)m->in_c * m->in_h * m->in_w;
    size_t labels = (size_t)b->n * m->positions;
    if (b->n > *capacity) {
        be->free(*x_dev);
        be->free(*labels_dev);
        *x_dev = be->alloc((size_t)b->n * per_sample * sizeof(float));
        *labels_dev = be->alloc(labels * sizeof(int32_t));
        *capacity = *x_dev && *labels_dev ? b->n : 0;
        if (!*capacity)
            return HERD_ERR_NOMEM; /* the allocator said why */
    }
    HERD_TRY(be->memcpy_h2d(*x_dev, b->x, (size_t)b->n * per_sample * sizeof(float)));
    HERD_TRY(be->memcpy_h2d(*labels_dev, b->labels, labels * sizeof(int32_t)));
    out->x = *x_dev;
    out->labels = *labels_dev;
    return HERD_OK;
}

/* The loss's gradient written over the logits, where the backend's softmax_xent may
 * (xent_in_place) and nothing reads them after it: not the last layer's backward (relu
 * reads its output), not a vocabulary split's loss (xent_split.c). A language model's
 * logits are its largest activation (gpt2 at 4 x 1,024 tokens: 0.8 GiB). */
bool herd_step_loss_in_place(const herd_model *m)
{
    const herd_layer *last = &m->layers[m->n_layers - 1];
    bool split = m->tp.size > 1 && m->class_count != m->classes;
    return m->be->xent_in_place && !split && !last->ops->backward_reads_y;
}

static float *dlogits_over_logits(const herd_model *m)
{
    return herd_step_loss_in_place(m) && m->acts ? m->acts[m->n_layers - 1] : NULL;
}

float *herd_step_dlogits(const herd_model *m, const herd_step_plan *p)
{
    float *over = dlogits_over_logits(m);
    return over ? over : p->dlogits;
}

herd_status herd_step_inputs(herd_model *m, herd_step_plan *p, const herd_batch *host,
                             herd_batch *dev)
{
    HERD_TRY(batch_to_backend(m, &p->x_dev, &p->labels_dev, &p->input_capacity, host, dev));
    HERD_TRY(herd_model_reshape(m, dev->n));
    if (dlogits_over_logits(m))
        return HERD_OK;
    /* A chunk's worth when the last layer runs in chunks (--loss-chunk). */
    int rows = herd_model_head_chunk(m);
    if (rows > p->dlogits_capacity) {
        m->be->free(p->dlogits);
        size_t bytes = (size_t)rows * m->positions * m->classes * sizeof(float);
        herd_mem_category was = herd_mem_category_set(HERD_MEM_ACTIVATIONS);
        p->dlogits = m->be->alloc(bytes);
        herd_mem_category_set(was);
        if (!p->dlogits)
            return HERD_ERR_NOMEM; /* the allocator said why */
        p->dlogits_capacity = rows;
    }
    return HERD_OK;
}

static herd_status comm_sum_f64(void *comm, double *vals, int n)
{
    herd_comm *c = comm;
    return c->ops->allreduce_f64(c, vals, n);
}

herd_group_sum herd_group_of_comm(herd_comm *c)
{
    return (herd_group_sum){.sum_f64 = comm_sum_f64, .group = c, .ranks = c->size};
}

herd_status herd_step_params_ready(herd_step_plan *p)
{
    if (!p->gather_pending)
        return HERD_OK;
    p->gather_pending = false;
    HERD_TRY(herd_phase_mark(&p->clock, HERD_PHASE_FORWARD));
    double t0 = herd_now();
    herd_status st = p->comm->ops->wait_ticket(p->comm, p->zero->gather_ticket[0]);
    p->gather_wait += herd_now() - t0;
    return st != HERD_OK ? st : herd_phase_mark(&p->clock, HERD_PHASE_COMM);
}

/* Before a layer's forward: its parameters' all-gather has completed. Buckets were
 * gathered from the highest index down, so the layer's lowest-index bucket came last. */
static herd_status gather_hook(void *user, int layer)
{
    herd_step_plan *p = user;
    int b = p->buckets.first_bucket_of_layer[layer];
    if (!p->gather_pending || b < 0)
        return HERD_OK;
    HERD_TRY(herd_phase_mark(&p->clock, HERD_PHASE_FORWARD));
    double t0 = herd_now();
    herd_status st = p->comm->ops->wait_ticket(p->comm, p->zero->gather_ticket[b]);
    double t1 = herd_now();
    p->gather_wait += t1 - t0;
    if (p->timeline && t1 - t0 > 1e-6 && !herd_phase_clock_timing(&p->clock))
        herd_timeline_add(p->timeline, HERD_TL_COMM_WAIT, NULL, t0, t1);
    return st != HERD_OK ? st : herd_phase_mark(&p->clock, HERD_PHASE_COMM);
}

static herd_status bucket_hook(void *user, int layer)
{
    herd_step_plan *p = user;
    return herd_buckets_layer_done(&p->buckets, p->buckets.model, layer);
}

void herd_step_arm_reduction(herd_step_plan *p, herd_model *m, int n_micro, herd_run_ctx *ctx)
{
    /* One process without accumulation has nothing to combine. */
    if (p->comm->size == 1 && n_micro == 1)
        return;
    /* One rank on a device without a device communicator (the local one would scale
     * device memory on the host): herd_apply_step takes the mean over the micro-batches
     * on the device instead, the same multiplications as the buckets'. A pipeline
     * stage's one-replica group is a device wrapper and scales on the device itself. */
    if (p->comm->size == 1 && !m->be->host_memory && herd_comm_host_side(p->comm) == p->comm) {
        p->device_scale = 1.0f / (float)n_micro;
        return;
    }
    herd_buckets_arm(&p->buckets, p->comm, 1.0f / (float)(p->comm->size * n_micro), p->wire);
    p->buckets.model = m;
    p->buckets.split = p->zero ? p->zero->counts : NULL;
    p->buckets.ranks = p->comm->size;
    p->buckets.release_rest = p->zero && p->zero->stage == 2;
    ctx->after_backward = bucket_hook;
    ctx->hook_user = p;
}

herd_status herd_micro_step(herd_model *m, herd_step_plan *p, const herd_batch *host, int micro,
                            int n_micro, float label_smoothing, uint64_t seed, herd_step_stats *s)
{
    if (p->graphs)
        return herd_graph_micro_step(m, p, host, micro, n_micro, label_smoothing, seed, s);
    HERD_TRY(herd_phase_mark(&p->clock, micro == 0 ? HERD_PHASE_START : HERD_PHASE_GAP));
    double t0 = herd_now();
    herd_batch dev;
    HERD_TRY(herd_step_inputs(m, p, host, &dev));
    const herd_batch *b = &dev;
    /* A language model predicts at every position: a row of the loss per token. */
    const int rows = b->n * m->positions;
    herd_run_ctx ctx = herd_model_ctx(m, true, seed);
    ctx.grad_beta = micro > 0 && !p->exact ? 1.0f : 0.0f; /* exact: each slice alone */
    ctx.exact = p->exact_linear;
    ctx.trace = herd_timeline_sink(p->timeline);
    if (p->sync_bn && p->comm->size > 1)
        ctx.bn_group = herd_group_of_comm(p->comm);
    if (p->gather_pending) { /* the last update's parameters arrive layer by layer */
        ctx.before_forward = gather_hook;
        ctx.before_user = p;
    }
    p->gather_wait = 0;
    if (herd_model_head_chunked(m))
        return herd_chunked_micro_step(m, p, &ctx, b, micro, n_micro, label_smoothing, s, t0);
    const float *logits;
    HERD_TRY(herd_model_forward(m, &ctx, b->x, &logits));
    HERD_TRY(herd_step_params_ready(p)); /* buckets of layers without parameters */
    float *dlogits = herd_step_dlogits(m, p);
    HERD_TRY(herd_step_loss(m, p, logits, b->labels, rows, label_smoothing, 1.0f, dlogits, s));
    s->samples += b->n;
    double t1;
    HERD_TRY(herd_step_forward_done(p, s, &t1));
    if (micro == n_micro - 1 && !p->exact)
        herd_step_arm_reduction(p, m, n_micro, &ctx);
    HERD_TRY(herd_model_backward(m, &ctx, b->x, dlogits));
    if (p->exact && !herd_step_whole_passes(p)) /* whole: the linear layers added their slices */
        HERD_TRY(herd_exact_sum_add(p->exact, m));
    return herd_step_backward_done(p, s, t0, t1);
}

bool herd_step_whole_passes(const herd_step_plan *p)
{
    return p->exact_linear && p->exact_linear->sums;
}

herd_status herd_step_forward_done(herd_step_plan *p, herd_step_stats *s, double *t1)
{
    *t1 = herd_now();
    HERD_TRY(herd_phase_mark(&p->clock, HERD_PHASE_FORWARD));
    s->t.comm_wait += p->gather_wait;
    s->t.forward -= p->gather_wait;
    return HERD_OK;
}

herd_status herd_step_loss(herd_model *m, herd_step_plan *p, const float *logits,
                           const int32_t *labels, int rows, float label_smoothing, float share,
                           float *dlogits, herd_step_stats *s)
{
    /* --deterministic: each slice's loss on its grid, so the total has no order either
     * (a call is one slice, or a whole run's several: herd_exact_linear's sums). */
    int loss_rows = herd_step_whole_passes(p) ? p->exact_linear->slice * m->positions : rows;
    for (int r0 = 0; r0 < rows; r0 += loss_rows) {
        double loss_sum = 0;
        long correct = 0;
        size_t at = (size_t)r0 * m->class_count;
        HERD_TRY(herd_model_xent(m, loss_rows, logits + at, labels + r0, label_smoothing,
                                 dlogits + at, &loss_sum, &correct));
        /* Per sample: the mean over its positions. */
        double per_sample = loss_sum / m->positions;
        s->loss_sum += p->exact ? herd_exact_loss(per_sample) : per_sample;
        s->correct += (double)correct / m->positions;
    }
    size_t n = (size_t)rows * m->class_count;
    if (share == 1.0f)
        return p->scaler ? herd_loss_scaler_scale(p->scaler, m->be, dlogits, n) : HERD_OK;
    /* A chunk's loss gradient is its mean's over its own rows: times its share, and the
     * loss scale in the same pass. */
    float factor = share * (p->scaler ? p->scaler->scale : 1.0f);
    return m->be->grad_unscale_check(n, dlogits, factor, NULL);
}

herd_status herd_step_backward_done(herd_step_plan *p, herd_step_stats *s, double t0, double t1)
{
    double t2 = herd_now();
    HERD_TRY(herd_phase_mark(&p->clock, HERD_PHASE_BACKWARD));
    s->t.forward += t1 - t0;
    s->t.backward += t2 - t1;
    if (p->timeline && !herd_phase_clock_timing(&p->clock)) {
        herd_timeline_add(p->timeline, HERD_TL_FORWARD, NULL, t0, t1);
        herd_timeline_add(p->timeline, HERD_TL_BACKWARD, NULL, t1, t2);
    }
    return HERD_OK;
}

/* The sum over one replica's stages: every replica holds the same stage gradients
 * after their reduction, so the job's sum counts each stage_replicas times. */
static herd_status sum_per_replica(void *plan, double *vals, int n)
{
    herd_step_plan *p = plan;
    HERD_TRY(p->stage_job->ops->allreduce_f64(p->stage_job, vals, n));
    for (int i = 0; i < n; i++)
        vals[i] /= p->stage_replicas;
    return HERD_OK;
}

/* Inf or NaN in the reduced gradients, without a loss scaler (every rank of the job
 * comes here alike, having the same sum of squares): with skip_nonfinite the step is
 * skipped; otherwise the error names the step and "loss" when a rank's loss was not
 * finite, else the first parameter whose gradient is not. That is agreed with one
 * allreduce (this path only) over the ranks that compare the same model: the
 * data-parallel ones (ZeRO's slices), a pipeline stage naming its own parameters. */
static herd_status nonfinite(herd_step_plan *p, herd_model *m, size_t first, size_t count,
                             herd_step_stats *s)
{
    if (p->skip_nonfinite) {
        s->skipped = true;
        if (p->skipped)
            (*p->skipped)++;
        if (!isfinite(s->loss_sum)) /* the epoch's mean loss stays finite, and checkpointable */
            s->loss_sum = 0;
        return HERD_OK;
    }
    int view = -1;
    herd_status st = herd_first_nonfinite_grad(m, first, count, &view);
    /* [0]: ranks whose loss was not finite; [1 + v]: ranks finding view v first. */
    size_t n = 1 + (size_t)m->n_views;
    double small[64], *votes = n <= 64 ? small : calloc(n, sizeof *votes);
    if (!votes)
        return HERD_NOMEM(n * sizeof *votes);
    memset(votes, 0, n * sizeof *votes);
    votes[0] = !isfinite(s->loss_sum);
    if (view >= 0)
        votes[1 + view] = 1;
    herd_comm *c = p->comm; /* the same model's views on every rank of it */
    herd_status red = c->size > 1 ? c->ops->allreduce_f64(c, votes, (int)n) : HERD_OK;
    int named = -1;
    for (int v = 0; v < m->n_views && named < 0; v++)
        if (votes[1 + v] > 0)
            named = v;
    bool loss = votes[0] > 0;
    if (votes != small)
        free(votes);
    HERD_TRY(st);
    HERD_TRY(red);
    char what[160];
    if (loss)
        snprintf(what, sizeof what, "the loss is not finite");
    else if (named >= 0)
        snprintf(what, sizeof what, "the gradient of '%s' holds inf or NaN", m->views[named].name);
    else
        snprintf(what, sizeof what, "the gradients of another pipeline stage hold inf or NaN");
    return HERD_ERR(HERD_ERR_INVALID_ARG, "training diverged at step %ld: %s; %s", p->step, what,
                    p->diverged_advice ? p->diverged_advice
                                       : "nothing of this step was applied or saved (the last "
                                         "checkpoint holds the last good state). Lower --lr, add "
                                         "--clip-grad-norm or a warmup, or use --on-nonfinite "
                                         "skip (or --loss-scale dynamic) to skip such steps");
}

/* The gradients this rank checks, clips and updates: its ZeRO slice, or all. */
static void update_part(const herd_step_plan *p, const herd_model *m, size_t *first, size_t *count)
{
    *first = p->zero ? p->zero->lo : 0;
    *count = p->zero ? p->zero->hi - p->zero->lo : m->n_param_floats;
}

herd_status herd_apply_step(herd_model *m, herd_optimizer *o, herd_step_plan *p, float lr,
                            herd_step_stats *s)
{
    double t0 = herd_now();
    HERD_TRY(p->comm->ops->wait_all(p->comm));
    if (p->tied)
        HERD_TRY(herd_tied_sum_run(p->tied, m->be, m->grads));
    double t1 = herd_now();
    HERD_TRY(herd_phase_mark(&p->clock, HERD_PHASE_COMM));
    size_t first, count;
    update_part(p, m, &first, &count);
    if (p->device_scale != 0.0f) {
        float scale = p->device_scale;
        p->device_scale = 0.0f;
        HERD_TRY(m->be->grad_unscale_check(m->n_param_floats, m->grads, scale, NULL));
    }
    /* What the update depends on is agreed over the ranks that hold parts of the
     * gradients: pipeline stages, or ZeRO's slices. Otherwise every rank holds the same
     * reduced gradients and decides alike without another collective. --deterministic's
     * exact sums leave the whole mean gradient on every rank, ZeRO or not: the checks
     * and the clipping norm read all of it there, the same bits at any number of ranks
     * (a sum over ZeRO's slices would follow their boundaries), and the optimizer
     * updates the rank's slice. */
    herd_comm *agree = p->exact ? NULL : p->stage_job ? p->stage_job : p->zero ? p->comm : NULL;
    size_t norm_first = p->exact ? 0 : first, norm_count = p->exact ? m->n_param_floats : count;
    /* With pipeline stages or tensor parts each holds its part even so: the loss scaler's
     * verdict is the job's, taken over each rank's whole part. */
    herd_comm *scaler_agree = p->tensor_job ? p->tensor_job : p->exact ? p->stage_job : agree;
    if (p->scaler && !scaler_agree)
        HERD_TRY(herd_loss_scaler_unscale(p->scaler, m->be, m->grads, m->n_param_floats,
                                          &s->skipped));
    if (p->scaler && scaler_agree) {
        bool overflow = false;
        HERD_TRY(m->be->grad_unscale_check(norm_count, m->grads + norm_first,
                                           1.0f / p->scaler->scale, &overflow));
        /* the tests: this rank alone (of the job, with stages or tensor parts) finds inf in
         * its part, once */
        int who = p->tensor_job ? p->tensor_job->rank
                  : p->stage_job ? p->stage_job->rank : p->comm->rank;
        if (p->scaler->skipped == 0 && herd_test_hook("overflow", who))
            overflow = true;
        double any = overflow;
        HERD_TRY(scaler_agree->ops->allreduce_f64(scaler_agree, &any, 1));
        s->skipped = any > 0;
        HERD_TRY(herd_loss_scaler_update(p->scaler, s->skipped));
    }
    /* Clipping's sum of squares is also the check for inf/NaN that no loss scaler made
     * (one read of the gradients; with clipping, none more): a non-finite value makes
     * the sum non-finite, and the sum is the same on every rank that holds a part. */
    if (!s->skipped && (p->clip_grad_norm > 0.0f || !p->scaler)) {
        /* ZeRO's slices are disjoint: their squares add up over the ranks that hold
         * them (with stages, the job: each stage's slices once). Pipeline stages without
         * ZeRO hold whole stages, each counted once per replica. */
        herd_group_sum over_slices = herd_group_of_comm(agree ? agree : p->comm);
        herd_group_sum per_replica = {.sum_f64 = sum_per_replica, .group = p, .ranks = 0};
        const herd_group_sum *group = p->zero      ? &over_slices
                                      : p->stage_job ? &per_replica
                                                     : NULL;
        double sq;
        /* A tied token table counts once, on the embedding's stage: the last stage's
         * copy ends its parameters and is left out. */
        size_t sq_count = norm_count;
        if (p->tied && p->tied->copy_at)
            sq_count = norm_first >= p->tied->copy_at ? 0
                       : norm_first + norm_count > p->tied->copy_at ? p->tied->copy_at - norm_first
                                                                   : norm_count;
        /* --deterministic: per tensor in the whole model's order, the same bits on a stage
         * (one replica of each writes its part) as in one process. */
        if (p->exact)
            HERD_TRY(herd_exact_sum_squares(m, p->first_view, p->whole_views, p->tensor_group,
                                            p->stage_job, p->comm->rank == 0 || !p->stage_job,
                                            &sq));
        else if (p->tensor_job)
            HERD_TRY(herd_grad_sum_squares_split(m, norm_first, sq_count, group, &p->tensor_sum,
                                                 &sq));
        else
            HERD_TRY(herd_grad_sum_squares_part(m, norm_first, sq_count, group, &sq));
        if (!isfinite(sq) && !p->scaler)
            HERD_TRY(nonfinite(p, m, norm_first, norm_count, s));
        else if (p->clip_grad_norm > 0.0f && !isfinite(sq))
            HERD_TRY(herd_clip_grad_norm_part(m, first, count, p->clip_grad_norm, NULL, NULL, NULL));
        else if (p->clip_grad_norm > 0.0f)
            HERD_TRY(herd_clip_grad_to(m, first, count, p->clip_grad_norm, sqrt(sq), &s->clipped));
    }
    if (!s->skipped)
        HERD_TRY(herd_optimizer_step(o, m, lr));
    double t2 = herd_now();
    HERD_TRY(herd_phase_mark(&p->clock, HERD_PHASE_OPTIMIZER));
    /* Every rank reaches the all-gather, skipped step or not: the parameters stay as
     * they were everywhere then, and the collectives stay matched. */
    if (p->zero) {
        HERD_TRY(herd_zero_gather_params(p->zero, &p->buckets, m, p->comm));
        if (p->overlap_gather)
            p->gather_pending = true;
        else
            HERD_TRY(p->comm->ops->wait_all(p->comm));
    }
    double t3 = herd_now();
    if (p->zero)
        HERD_TRY(herd_phase_mark(&p->clock, HERD_PHASE_COMM));
    s->t.comm_wait += (t1 - t0) + (t3 - t2);
    s->t.optimizer += t2 - t1;
    if (p->timeline && !herd_phase_clock_timing(&p->clock)) {
        herd_timeline_add(p->timeline, HERD_TL_COMM_WAIT, NULL, t0, t1);
        herd_timeline_add(p->timeline, HERD_TL_OPTIMIZER, NULL, t1, t2);
        if (p->zero)
            herd_timeline_add(p->timeline, HERD_TL_COMM_WAIT, NULL, t2, t3);
    }
    /* The device's phases replace the host's: one wait, for the step's last work. */
    return herd_phase_clock_finish(&p->clock, &s->t, p->timeline);
}

herd_status herd_eval_sliced(herd_dataset *ds, int batch_size, int slice_index, int slices,
                             herd_comm *comm, herd_eval_batch_fn fn, void *user, herd_eval_result *r)
{
    /* Each slice is contiguous: a view into the dataset, no copy, and no sample
     * counted twice however the sizes divide. */
    herd_dataset slice = *ds;
    size_t per_sample = (size_t)ds->c * ds->h * ds->w;
    size_t begin = ds->n * (size_t)slice_index / (size_t)slices;
    size_t end = ds->n * (size_t)(slice_index + 1) / (size_t)slices;
    if (ds->tokens) /* sequences are per_sample tokens apart */
        slice.tokens = ds->tokens + begin * per_sample;
    else {
        slice.images = ds->images + begin * per_sample;
        slice.labels = ds->labels + begin;
    }
    slice.n = end - begin;
    double sums[6] = {0, 0, 0}; /* loss, correct, samples; then the agreement */
    herd_status st = HERD_OK;
    herd_loader *loader = NULL;
    if (slice.n > 0) {
        herd_loader_config lc = {
            .batch_size = batch_size, .prefetch = 2, .workers = 1, .shard_count = 1,
        };
        st = herd_loader_create(&slice, &lc, &loader);
    }
    if (loader) {
        st = herd_loader_start_epoch(loader, 0, 0);
        bool has = true;
        while (st == HERD_OK) {
            herd_batch hb;
            st = herd_loader_next(loader, &hb, &has);
            if (st != HERD_OK || !has)
                break;
            double l = 0, c = 0, n = 0;
            st = fn(user, &hb, &l, &c, &n);
            sums[0] += l;
            sums[1] += c;
            sums[2] += n;
        }
        herd_loader_free(loader);
    }
    if (st == HERD_OK)
        st = herd_fail_point("evaluate", comm->rank);
    /* Every rank joins the reduction, even after a local failure, so none hangs, and
     * every rank learns of any failure from it. */
    herd_agree_pack(st, comm->rank, sums + 3);
    herd_status red = comm->ops->allreduce_f64(comm, sums, 6);
    HERD_TRY(herd_agree_unpack(st, sums + 3, "evaluating"));
    HERD_TRY(red);
    r->samples = (size_t)sums[2];
    r->loss = sums[2] > 0 ? sums[0] / sums[2] : 0;
    r->acc = sums[2] > 0 ? sums[1] / sums[2] : 0;
    return HERD_OK;
}

typedef struct model_eval {
    herd_model *m;
    float *x_dev;
    int32_t *labels_dev;
    int capacity;
} model_eval;

static herd_status eval_batch(void *user, const herd_batch *hb, double *loss, double *correct,
                              double *samples)
{
    model_eval *e = user;
    herd_model *m = e->m;
    herd_batch b;
    HERD_TRY(batch_to_backend(m, &e->x_dev, &e->labels_dev, &e->capacity, hb, &b));
    HERD_TRY(herd_model_reshape(m, b.n));
    herd_run_ctx ctx = herd_model_ctx(m, false, 0);
    long c = 0;
    HERD_TRY(herd_eval_loss(m, &ctx, b.x, b.labels, b.n, loss, &c));
    *loss /= m->positions; /* per sample, as in training */
    *correct = (double)c / m->positions;
    *samples = b.n;
    return HERD_OK;
}

herd_status herd_eval_dataset(herd_model *m, herd_dataset *ds, int batch_size, herd_comm *comm,
                              herd_eval_result *r)
{
    model_eval e = {.m = m};
    herd_status st = herd_eval_sliced(ds, batch_size, comm->rank, comm->size, comm, eval_batch, &e, r);
    m->be->free(e.x_dev);
    m->be->free(e.labels_dev);
    return st;
}

/* --threads 0: OMP_NUM_THREADS when the user set it, as OpenMP programs honour it;
 * otherwise the cores this process may run on, shared among the ranks of its host. Every
 * rank taking every core oversubscribes them: mpirun -np 2 on 2 cores ran 4 threads whose
 * spin-waits took the cores from each other (60 steps of lenet5 took 3.5 times as long on 2
 * ranks, 8 times on 4). */
herd_status herd_rank_threads(int requested, const char *omp_num_threads, int cores, int local_ranks,
                              int *out)
{
    if (requested > 0) {
        *out = requested;
        return HERD_OK;
    }
    if (omp_num_threads && *omp_num_threads) { /* empty: unset, as OpenMP reads it */
        /* OpenMP's list form ("8,2") gives the outer level first: that is ours. */
        char first[32];
        size_t n = strcspn(omp_num_threads, ",");
        long t = 0;
        bool ok = n < sizeof first;
        if (ok) {
            memcpy(first, omp_num_threads, n);
            first[n] = '\0';
            ok = herd_parse_long(first, 1, 4096, &t);
        }
        if (!ok)
            return HERD_INPUT_ERR(HERD_ERR_INVALID_ARG,
                                  "OMP_NUM_THREADS='%s' is not a thread count from 1 to 4096: set "
                                  "it to one, unset it, or pass --threads N", omp_num_threads);
        *out = (int)t;
        return HERD_OK;
    }
    *out = cores / (local_ranks > 0 ? local_ranks : 1);
    if (*out < 1)
        *out = 1;
    return HERD_OK;
}

herd_status herd_process_rank_threads(int requested, int local_ranks, int *used)
{
    cpu_set_t mine;
    int cores = sched_getaffinity(0, sizeof mine, &mine) == 0 ? CPU_COUNT(&mine) : 1;
    return herd_rank_threads(requested, getenv("OMP_NUM_THREADS"), cores, local_ranks, used);
}

herd_status herd_set_rank_threads(const herd_backend *be, int requested, int local_ranks, int *used)
{
    HERD_TRY(herd_process_rank_threads(requested, local_ranks, used));
    return be->set_threads(*used);
}

herd_status herd_device_set_threads(const char *device, int threads, const herd_dist *dist)
{
    if (threads < 0)
        return HERD_INPUT_ERR(HERD_ERR_INVALID_ARG, "threads is 0 (as herd_train chooses) or a "
                              "count, got %d", threads);
    const herd_backend *be;
    HERD_TRY(herd_backend_for(device, &be));
    return herd_set_rank_threads(be, threads, dist ? dist->local_size : 1, &threads);
}

herd_status herd_evaluate(herd_model *m, herd_dataset *ds, int batch_size, int threads,
                          herd_eval_result *result)
{
    return herd_evaluate_dist(m, ds, batch_size, threads, NULL, result);
}

herd_status herd_evaluate_dist(herd_model *m, herd_dataset *ds, int batch_size, int threads,
                               herd_dist *dist, herd_eval_result *result)
{
    if (!m || !ds || !result || batch_size <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_evaluate needs a model, a dataset, a result "
                        "and a positive batch size");
    /* A sample of another size would be read past its end, silently. */
    HERD_TRY(herd_train_check_shapes(m, ds, NULL));
    HERD_TRY(herd_set_rank_threads(m->be, threads, dist ? dist->local_size : 1, &threads));
    herd_comm *local = NULL;
    if (!dist)
        HERD_TRY(herd_comm_local_create(&local));
    herd_status st = herd_eval_dataset(m, ds, batch_size, dist ? dist : local, result);
    herd_comm_destroy(local);
    return st;
}
