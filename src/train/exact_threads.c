/* --deterministic on several threads (docs/determinism.md): the step's slices run
 * `threads` at a time, each slice whole on one thread, with the thread's own activations
 * (a model of layers without storage), gradients, batch-norm buffers and loss gradient,
 * reading the model's parameters. Every kernel stays on one thread (each slice's
 * arithmetic is the one-thread run's), and each slice's gradient goes into the exact
 * sums, whose integer additions give the same bits in whatever order the threads finish:
 * the cores are used, and the bytes do not change with --threads. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/rng.h"
#include "nn/xent_split.h"
#include "optim/loss_scale.h"
#include "train/run.h"

typedef struct exact_worker {
    herd_model *slot; /* layers and activations of one slice */
    float *grads, *buffers, *dlogits;
    double forward_s, backward_s;
} exact_worker;

struct herd_exact_threads {
    exact_worker *w;
    int n;
    double *slice_loss, *slice_correct; /* per slice of the pass, added in slice order */
    int slices_cap;
};

/* Whether the step's slices can run on threads: a model on the host's memory, whole on
 * this rank (no stages or tensor parts, whose slices talk to other ranks), batch norm
 * per slice (--sync-bn's slices wait for each other layer by layer). */
static bool threadable(const run *r)
{
    return r->m->be->host_memory && !r->pp && !r->tp && !r->exact.buffers_synced;
}

void herd_run_exact_threads_free(run *r)
{
    herd_exact_threads *t = r->exact_threads;
    if (!t)
        return;
    for (int i = 0; i < t->n; i++) {
        exact_worker *w = &t->w[i];
        herd_model_free(w->slot);
        r->m->be->free(w->grads);
        r->m->be->free(w->buffers);
        r->m->be->free(w->dlogits);
    }
    free(t->w);
    free(t->slice_loss);
    free(t->slice_correct);
    free(t);
    r->exact_threads = NULL;
}

herd_status herd_run_exact_threads_setup(run *r, int threads)
{
    if (threads < 2 || !threadable(r))
        return HERD_OK;
    herd_model *m = r->m;
    int size = herd_slice_size(&r->cfg);
    herd_exact_threads *t = calloc(1, sizeof *t);
    if (!t || !(t->w = calloc((size_t)threads, sizeof *t->w))) {
        free(t);
        return HERD_ERR_NOMEM;
    }
    r->exact_threads = t;
    size_t dlogits = (size_t)size * m->positions * m->classes * sizeof(float);
    while (t->n < threads) {
        exact_worker *w = &t->w[t->n++]; /* counted first: a failure frees what it made */
        if (!(w->slot = herd_xcalloc(1, sizeof *w->slot)))
            return HERD_ERR_NOMEM;
        HERD_TRY(herd_model_build_stage(w->slot, m, 0, m->n_layers, false, false, 0));
        HERD_TRY(herd_model_reshape(w->slot, size));
        herd_mem_category was = herd_mem_category_set(HERD_MEM_GRADS);
        w->grads = m->be->alloc((m->n_param_floats + 1) * sizeof(float));
        herd_mem_category_set(HERD_MEM_ACTIVATIONS);
        w->buffers = m->be->alloc((m->n_buffer_floats + 1) * sizeof(float));
        w->dlogits = m->be->alloc(dlogits);
        herd_mem_category_set(was);
        if (!w->grads || !w->buffers || !w->dlogits)
            return HERD_ERR_NOMEM; /* the allocator said why */
    }
    return HERD_OK;
}

/* Slice k of the pass on worker w: forward, loss, backward from the parameters, then
 * its gradient and the buffers its forward left into the exact sums. */
static herd_status run_slice(run *r, exact_worker *w, const herd_batch *slice, uint64_t seed, int k)
{
    herd_exact_threads *t = r->exact_threads;
    herd_model *m = r->m;
    memcpy(w->buffers, r->exact.step_buffers, m->n_buffer_floats * sizeof(float));
    herd_run_ctx ctx = herd_model_ctx(m, true, seed);
    ctx.grads = w->grads;
    ctx.buffers = w->buffers;
    ctx.grad_beta = 0.0f;
    ctx.exact = r->plan.exact_linear;
    double t0 = herd_now();
    const float *logits;
    HERD_TRY(herd_model_forward(w->slot, &ctx, slice->x, &logits));
    int rows = slice->n * m->positions;
    double loss = 0;
    long correct = 0;
    HERD_TRY(herd_model_xent(w->slot, rows, logits, slice->labels, r->cfg.label_smoothing, w->dlogits,
                             &loss, &correct));
    if (r->plan.scaler)
        HERD_TRY(herd_loss_scaler_scale(r->plan.scaler, m->be, w->dlogits, (size_t)rows * m->class_count));
    double t1 = herd_now();
    HERD_TRY(herd_model_backward(w->slot, &ctx, slice->x, w->dlogits));
    w->forward_s += t1 - t0;
    w->backward_s += herd_now() - t1;
    /* As herd_micro_step counts a slice: per sample, the mean over its positions. */
    t->slice_loss[k] = herd_exact_loss(loss / m->positions);
    t->slice_correct[k] = (double)correct / m->positions;
    herd_status st;
#pragma omp critical(herd_exact_sums) /* one slice's gradient into the sums at a time */
    st = herd_exact_sum_add_host(&r->exact, m, w->grads, w->buffers);
    return st;
}

herd_status herd_run_exact_threads_pass(run *r, int n_micro, uint64_t seed, bool from_loader,
                                        herd_step_stats *s)
{
    herd_exact_threads *t = r->exact_threads;
    int size = herd_slice_size(&r->cfg), per_micro = r->cfg.batch_size / size;
    int n_slices = herd_run_exact_begin(r, n_micro, false);
    /* The loader and ZeRO's gathers are the main thread's: every micro-batch is read, and
     * every parameter here, before the threads start. */
    for (int j = 0; j < n_micro; j++) {
        herd_batch b;
        HERD_TRY(herd_run_exact_micro_batch(r, j, n_micro, from_loader, s, &b));
    }
    HERD_TRY(herd_step_params_ready(&r->plan));
    if (n_slices > t->slices_cap) {
        free(t->slice_loss);
        free(t->slice_correct);
        t->slice_loss = malloc((size_t)n_slices * sizeof *t->slice_loss);
        t->slice_correct = malloc((size_t)n_slices * sizeof *t->slice_correct);
        t->slices_cap = t->slice_loss && t->slice_correct ? n_slices : 0;
        if (!t->slices_cap)
            return HERD_NOMEM((size_t)n_slices * sizeof *t->slice_loss);
    }
    herd_first_error failed = {0};
    double t0 = herd_now();
    for (int i = 0; i < t->n; i++)
        t->w[i].forward_s = t->w[i].backward_s = 0;
    /* The kernels see one thread (set_threads(1) at setup) inside this region too. */
#pragma omp parallel num_threads(t->n)
    {
        exact_worker *w = &t->w[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 1)
        for (int k = 0; k < n_slices; k++) {
            herd_batch b = herd_batch_store_get(&r->kept, k / per_micro);
            herd_batch slice = herd_run_exact_slice(r, &b, k % per_micro);
            uint64_t place = herd_run_slice_place(r, k / per_micro, k % per_micro);
            herd_first_error_keep(&failed, run_slice(r, w, &slice, herd_mix64(seed, place), k));
        }
    }
    HERD_TRY(herd_first_error_status(&failed));
    /* The loss and accuracy in slice order, as one thread adds them. */
    for (int k = 0; k < n_slices; k++) {
        s->loss_sum += t->slice_loss[k];
        s->correct += t->slice_correct[k];
    }
    s->samples += (long)n_slices * size;
    /* The region's time, split as the threads spent it. */
    double fwd = 0, bwd = 0, wall = herd_now() - t0;
    for (int i = 0; i < t->n; i++)
        fwd += t->w[i].forward_s, bwd += t->w[i].backward_s;
    s->t.forward += fwd + bwd > 0 ? wall * fwd / (fwd + bwd) : 0;
    s->t.backward += fwd + bwd > 0 ? wall * bwd / (fwd + bwd) : 0;
    return HERD_OK;
}
