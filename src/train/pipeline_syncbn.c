/* --deterministic --sync-bn with pipeline stages (docs/determinism.md): batch norm's
 * training statistics are the global batch's, so every slice of the step must reach a
 * batch norm before any slice goes past it. A stage therefore runs the replica's slices
 * of the step together, layer by layer (nn/slices.h), as one process does
 * (exact_syncbn.c): it takes every slice's input, runs its layers, and hands every
 * slice's output on; backward likewise from the last stage. A batch norm's per-slice sums
 * are gathered over the stage's replicas and added in the global batch's order of slices
 * (micro-batch, then replica), the order one process adds them in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/rng.h"
#include "nn/slices.h"
#include "train/pipeline.h"

/* Activations forward, their gradients back: pipeline.c's tags, one message per slice
 * in increasing order, so each receive meets its own slice. */
enum { TAG_ACT = 11, TAG_GRAD = 12 };

typedef struct herd_pp_synced {
    herd_slices slices;
    float *in;       /* every slice's input: stage 0's images, later stages' received activations */
    float *dout;     /* every slice's output gradient: received, or the loss's on the last stage */
    int32_t *labels; /* the last stage's labels */
    size_t in_cap, dout_cap, labels_cap; /* elements */
    const float **x, **dl;
    float **bufs; /* one transfer's buffers, per slice */
    uint64_t *seeds;
    herd_p2p *sends, *recvs;
    int capacity;
    double *all_rows; /* the replicas' batch-norm rows, as gathered */
    size_t all_rows_cap;
    herd_comm *group;
    herd_exact_sum *exact;
    const herd_model *m;
} herd_pp_synced;

void herd_pipeline_synced_free(herd_pipeline *pp)
{
    herd_pp_synced *p = pp->synced;
    if (!p)
        return;
    herd_slices_free(&p->slices);
    pp->m->be->free(p->in);
    pp->m->be->free(p->dout);
    pp->m->be->free(p->labels);
    free(p->x), free(p->dl), free(p->bufs), free(p->seeds), free(p->sends), free(p->recvs);
    free(p->all_rows);
    free(p);
    pp->synced = NULL;
}

static herd_status grow(herd_pipeline *pp, int n)
{
    herd_pp_synced *p = pp->synced;
    if (!p && !(p = pp->synced = herd_xcalloc(1, sizeof *p)))
        return HERD_ERR_NOMEM;
    if (n > p->capacity) {
        free(p->x), free(p->dl), free(p->bufs), free(p->seeds), free(p->sends), free(p->recvs);
        p->capacity = 0;
        p->x = malloc((size_t)n * sizeof *p->x);
        p->dl = malloc((size_t)n * sizeof *p->dl);
        p->bufs = malloc((size_t)n * sizeof *p->bufs);
        p->seeds = malloc((size_t)n * sizeof *p->seeds);
        p->sends = calloc((size_t)n, sizeof *p->sends);
        p->recvs = calloc((size_t)n, sizeof *p->recvs);
        if (!p->x || !p->dl || !p->bufs || !p->seeds || !p->sends || !p->recvs)
            return HERD_NOMEM((size_t)n * sizeof *p->sends);
        p->capacity = n;
    }
    const herd_backend *be = pp->m->be;
    size_t size = (size_t)pp->micro_size;
    herd_mem_category acts = HERD_MEM_ACTIVATIONS;
    HERD_TRY(herd_backend_grow(be, acts, (void **)&p->in, &p->in_cap,
                               (size_t)n * size * pp->in_per_sample, sizeof(float)));
    HERD_TRY(herd_backend_grow(be, acts, (void **)&p->dout, &p->dout_cap,
                               (size_t)n * size * pp->out_per_sample, sizeof(float)));
    return herd_backend_grow(be, acts, (void **)&p->labels, &p->labels_cap, (size_t)n * size,
                             sizeof(int32_t));
}

static herd_status sum_rows(void *user, const double *rows, int width, double *out)
{
    herd_pp_synced *p = user;
    return herd_exact_sum_rows(p->group, rows, p->slices.n, 1, width, &p->all_rows,
                               &p->all_rows_cap, out);
}

static herd_status grads_ready(void *user, int slice, int layer, const float *grads)
{
    (void)slice;
    herd_pp_synced *p = user;
    const herd_layer *l = &p->m->layers[layer];
    return herd_exact_sum_add_grad_views(p->exact, p->m, l->first_tensor, l->n_tensors, grads);
}
/* The step's micro-batches (one slice each): stage 0's images and the last stage's
 * labels into backend memory, kept for a redo. */
static herd_status read_batches(herd_pipeline *pp, herd_loader *loader, int n, bool from_kept,
                                herd_step_stats *s)
{
    herd_pp_synced *p = pp->synced;
    const herd_backend *be = pp->m->be;
    size_t size = (size_t)pp->micro_size;
    for (int mb = 0; mb < n; mb++) {
        herd_batch b;
        if (from_kept) {
            b = herd_batch_store_get(&pp->kept, mb);
        } else {
            bool has;
            pp->job->ops->set_activity(pp->job, "waiting for the data loader");
            HERD_TRY(herd_loader_next(loader, &b, &has));
            if (!has)
                return HERD_ERR(HERD_ERR_INTERNAL, "the loader ended the epoch inside a pipeline step");
            s->t.data_wait += b.wait_s;
            HERD_TRY(herd_batch_store_put(&pp->kept, mb, &b));
        }
        if ((size_t)b.n != size) /* setup asked for whole global batches */
            return HERD_ERR(HERD_ERR_INTERNAL, "--deterministic: a micro-batch of %d samples, not %zu",
                            b.n, size);
        if (pp->stage == 0)
            HERD_TRY(herd_backend_upload(be, p->in + mb * size * pp->in_per_sample, b.x,
                                         size * pp->in_per_sample * sizeof(float)));
        if (pp->stage == pp->stages - 1)
            HERD_TRY(herd_backend_upload(be, p->labels + mb * size, b.labels,
                                         size * sizeof(int32_t)));
    }
    return HERD_OK;
}

/* n messages of `bytes` each to or from `peer` (one per slice, in order), then waits for
 * all of them; the wait counts as exposed communication. */
static herd_status exchange(herd_pipeline *pp, herd_p2p *reqs, bool send, float *const *bufs,
                            size_t bytes, int n, int peer, int tag, const char *what,
                            herd_step_stats *s)
{
    herd_comm *job = pp->job;
    for (int i = 0; i < n; i++)
        HERD_TRY(job->ops->p2p_start(job, &reqs[i], send, bufs[i], bytes, peer, tag));
    char desc[160];
    snprintf(desc, sizeof desc, "stage %d: %s of the step's %d slices", pp->stage, what, n);
    job->ops->set_activity(job, desc);
    double t0 = herd_now();
    for (int i = 0; i < n; i++) {
        HERD_TRY(job->ops->p2p_wait(job, &reqs[i], desc));
        if (!send && reqs[i].bytes != bytes)
            return HERD_ERR(HERD_ERR_INTERNAL, "stage %d: %s: slice %d of %zu bytes, expected %zu; "
                            "the stages read different batches", pp->stage, what, i,
                            reqs[i].bytes, bytes);
    }
    s->t.comm_wait += herd_now() - t0;
    return HERD_OK;
}

static herd_status forward(herd_pipeline *pp, herd_step_plan *plan, const herd_run_ctx *ctx,
                           herd_slice_sums *sums, float label_smoothing, herd_step_stats *s)
{
    herd_pp_synced *p = pp->synced;
    herd_slices *sl = &p->slices;
    const herd_backend *be = pp->m->be;
    int n = sl->n, size = pp->micro_size;
    size_t out_floats = (size_t)size * pp->out_per_sample;
    double t0 = herd_now();
    pp->job->ops->set_activity(pp->job, "pipeline forward (every slice together)");
    HERD_TRY(herd_slices_forward(sl, ctx, p->seeds, p->x, sums));
    for (int i = 0; i < n; i++)
        p->dl[i] = p->dout + (size_t)i * out_floats;
    if (pp->stage == pp->stages - 1) {
        for (int i = 0; i < n; i++) {
            double loss = 0;
            long correct = 0;
            HERD_TRY(be->softmax_xent(size, pp->m->classes, herd_slices_logits(sl, i),
                                      p->labels + (size_t)i * size, label_smoothing,
                                      (float *)p->dl[i], &loss, &correct));
            if (plan->scaler)
                HERD_TRY(herd_loss_scaler_scale(plan->scaler, be, (float *)p->dl[i], out_floats));
            s->loss_sum += herd_exact_loss(loss);
            s->correct += correct;
            s->samples += size;
        }
    }
    double t1 = herd_now();
    s->t.forward += t1 - t0;
    if (plan->timeline)
        herd_timeline_add(plan->timeline, HERD_TL_FORWARD, "every slice", t0, t1);
    return HERD_OK;
}

static herd_status backward(herd_pipeline *pp, herd_step_plan *plan, const herd_run_ctx *ctx,
                            herd_slice_sums *sums, herd_step_stats *s)
{
    herd_pp_synced *p = pp->synced;
    double t0 = herd_now();
    pp->job->ops->set_activity(pp->job, "pipeline backward (every slice together)");
    HERD_TRY(herd_slices_backward(&p->slices, ctx, p->seeds, p->x, p->dl, sums));
    double t1 = herd_now();
    s->t.backward += t1 - t0;
    if (plan->timeline)
        herd_timeline_add(plan->timeline, HERD_TL_BACKWARD, "every slice", t0, t1);
    return HERD_OK;
}

static void progress_transfers(void *job)
{
    herd_comm *c = job;
    c->ops->p2p_progress(c);
}

herd_status herd_pipeline_synced_pass(herd_pipeline *pp, herd_step_plan *plan, herd_loader *loader,
                                      int n, float label_smoothing, uint64_t seed, bool from_kept,
                                      herd_step_stats *s)
{
    HERD_TRY(grow(pp, n));
    herd_pp_synced *p = pp->synced;
    p->group = pp->group, p->exact = plan->exact, p->m = pp->m;
    bool first = pp->stage == 0, last = pp->stage == pp->stages - 1;
    HERD_TRY(herd_exact_sum_restore_buffers(plan->exact, pp->m)); /* a redo starts where the step did */
    HERD_TRY(read_batches(pp, loader, n, from_kept, s));
    size_t size = (size_t)pp->micro_size, in_floats = size * pp->in_per_sample;
    for (int mb = 0; mb < n; mb++) {
        p->x[mb] = p->bufs[mb] = p->in + mb * in_floats;
        /* The slice's dropout stream: its place in the global batch, as one process's. */
        p->seeds[mb] = herd_mix64(seed, (uint64_t)mb * (uint64_t)pp->replicas + (uint64_t)pp->replica);
    }
    if (!first)
        HERD_TRY(exchange(pp, p->recvs, false, p->bufs, in_floats * sizeof(float), n, pp->job->rank - 1,
                          TAG_ACT, "receiving the activations", s));
    HERD_TRY(herd_slices_reshape(&p->slices, pp->m, n, pp->micro_size));
    if (n > pp->max_in_flight_seen)
        pp->max_in_flight_seen = n;
    herd_run_ctx ctx = herd_model_ctx(pp->m, true, seed);
    ctx.exact = plan->exact_linear;
    ctx.between_layers = progress_transfers;
    ctx.between_user = pp->job;
    ctx.trace = herd_timeline_sink(plan->timeline);
    herd_slice_sums sums = {.sum_rows = sum_rows, .grads_ready = grads_ready, .user = p};
    HERD_TRY(forward(pp, plan, &ctx, &sums, label_smoothing, s));
    size_t out_bytes = size * pp->out_per_sample * sizeof(float);
    if (!last) {
        for (int i = 0; i < n; i++)
            p->bufs[i] = (float *)herd_slices_logits(&p->slices, i);
        HERD_TRY(exchange(pp, p->sends, true, p->bufs, out_bytes, n, pp->job->rank + 1, TAG_ACT,
                          "sending the activations", s));
        for (int i = 0; i < n; i++)
            p->bufs[i] = p->dout + (size_t)i * size * pp->out_per_sample;
        HERD_TRY(exchange(pp, p->recvs, false, p->bufs, out_bytes, n, pp->job->rank + 1,
                          TAG_GRAD, "receiving the output gradients", s));
    }
    HERD_TRY(backward(pp, plan, &ctx, &sums, s));
    if (first)
        return HERD_OK;
    for (int i = 0; i < n; i++)
        p->bufs[i] = p->slices.slice[i]->dinput;
    return exchange(pp, p->sends, true, p->bufs, in_floats * sizeof(float), n, pp->job->rank - 1,
                    TAG_GRAD, "sending the input gradients", s);
}
