/* --deterministic --sync-bn (docs/determinism.md): batch norm's training statistics are
 * the global batch's, with the same bits at any number of ranks. A rank's slices of the
 * step run together, layer by layer (nn/slices.h); at each batch norm every slice's
 * per-channel sums are gathered from every rank and added in the global batch's order
 * of slices, which no partition changes. Each slice's parameter gradients go into the
 * exact sums as soon as its backward of a layer wrote them, as the slice-at-a-time pass
 * adds a whole slice's (exact_step.c). */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "nn/slices.h"
#include "train/run.h"

struct herd_synced_pass {
    herd_slices slices;
    double *all_rows; /* every rank's rows, as gathered */
    size_t all_rows_capacity;
    float *dlogits; /* per slice: size x positions x classes (backend memory) */
    size_t dlogits_floats;
    /* A device backend's copies of the step's inputs and labels (NULL on the CPU). */
    float *x_dev;
    int32_t *labels_dev;
    size_t x_dev_floats, labels_dev_count;
    /* per slice of this rank's step */
    const float **x;
    const int32_t **labels;
    const float **dl;
    uint64_t *seeds;
    int capacity;
    int per_micro; /* slices per micro-batch */
    herd_comm *comm;
    herd_exact_sum *exact;
    const herd_model *m;
    float **thread_grads; /* with threads: each thread's gradients (slices.threads) */
    int n_thread_grads;
};

bool herd_run_synced_bn(const run *r)
{
    if (!r->cfg.deterministic || !r->cfg.sync_bn)
        return false;
    if (r->pp) /* every stage alike, batch norm in it or not */
        return r->pp->synced_bn;
    for (int l = 0; l < r->m->n_layers; l++)
        if (herd_layer_is_batchnorm(&r->m->layers[l]))
            return true;
    return false;
}

void herd_run_synced_free(run *r)
{
    herd_synced_pass *p = r->synced;
    if (!p)
        return;
    herd_slices_free(&p->slices);
    free(p->all_rows);
    r->m->be->free(p->dlogits);
    r->m->be->free(p->x_dev);
    r->m->be->free(p->labels_dev);
    free(p->x);
    free(p->labels);
    free(p->dl);
    free(p->seeds);
    for (int t = 0; t < p->n_thread_grads; t++)
        r->m->be->free(p->thread_grads[t]);
    free(p->thread_grads);
    free(p);
    r->synced = NULL;
}

/* Gradients for each of r->synced_threads threads, made once. */
static herd_status thread_grads(run *r, herd_synced_pass *p)
{
    int n = r->synced_threads;
    if (p->n_thread_grads == n)
        return HERD_OK;
    if (!p->thread_grads && !(p->thread_grads = calloc((size_t)n, sizeof *p->thread_grads)))
        return HERD_NOMEM((size_t)n * sizeof *p->thread_grads);
    herd_mem_category was = herd_mem_category_set(HERD_MEM_GRADS);
    for (; p->n_thread_grads < n; p->n_thread_grads++)
        if (!(p->thread_grads[p->n_thread_grads] = r->m->be->alloc((r->m->n_param_floats + 1) * sizeof(float))))
            break;
    herd_mem_category_set(was);
    return p->n_thread_grads == n ? HERD_OK : HERD_ERR_NOMEM; /* the allocator said why */
}

static herd_status sum_rows(void *user, const double *rows, int width, double *out)
{
    herd_synced_pass *p = user;
    return herd_exact_sum_rows(p->comm, rows, p->slices.n, p->per_micro, width, &p->all_rows,
                               &p->all_rows_capacity, out);
}

static herd_status grads_ready(void *user, int slice, int layer, const float *grads)
{
    (void)slice;
    herd_synced_pass *p = user;
    const herd_layer *l = &p->m->layers[layer];
    return herd_exact_sum_add_grad_views(p->exact, p->m, l->first_tensor, l->n_tensors, grads);
}

static herd_status grow(run *r, int n, size_t dlogits_floats)
{
    herd_synced_pass *p = r->synced;
    if (!p && !(p = r->synced = calloc(1, sizeof *p)))
        return HERD_NOMEM(sizeof *p);
    if (n > p->capacity) {
        free(p->x), free(p->labels), free(p->dl), free(p->seeds);
        p->capacity = 0;
        p->x = malloc((size_t)n * sizeof *p->x);
        p->labels = malloc((size_t)n * sizeof *p->labels);
        p->dl = malloc((size_t)n * sizeof *p->dl);
        p->seeds = malloc((size_t)n * sizeof *p->seeds);
        if (!p->x || !p->labels || !p->dl || !p->seeds)
            return HERD_NOMEM((size_t)n * sizeof *p->seeds);
        p->capacity = n;
    }
    return herd_backend_grow(r->m->be, HERD_MEM_ACTIVATIONS, (void **)&p->dlogits,
                             &p->dlogits_floats, dlogits_floats, sizeof(float));
}

/* The loss of each slice (its sum on the exact grid, as the slice-at-a-time pass adds
 * it) and its gradient, scaled for dynamic loss scaling. */
static herd_status losses(run *r, int n, int size, herd_step_stats *s)
{
    herd_synced_pass *p = r->synced;
    const herd_model *m = r->m;
    int rows = size * m->positions;
    for (int i = 0; i < n; i++) {
        float *dl = p->dlogits + (size_t)i * rows * m->classes;
        double loss = 0;
        long correct = 0;
        HERD_TRY(m->be->softmax_xent(rows, m->classes, herd_slices_logits(&p->slices, i),
                                     p->labels[i], r->cfg.label_smoothing, dl, &loss, &correct));
        if (r->plan.scaler)
            HERD_TRY(herd_loss_scaler_scale(r->plan.scaler, m->be, dl, (size_t)rows * m->classes));
        s->loss_sum += herd_exact_loss(loss / m->positions);
        s->correct += (double)correct / m->positions;
        s->samples += size;
        p->dl[i] = dl;
    }
    return HERD_OK;
}

herd_status herd_run_synced_pass(run *r, int n_micro, uint64_t seed, bool from_loader,
                                 herd_step_stats *s)
{
    herd_model *m = r->m;
    herd_step_plan *plan = &r->plan;
    int ranks = r->dp->size, size = herd_slice_size(&r->cfg);
    int per_micro = r->cfg.batch_size / size, n = n_micro * per_micro;
    size_t x_floats = (size_t)m->in_c * m->in_h * m->in_w, labels = (size_t)m->positions;
    HERD_TRY(grow(r, n, (size_t)n * size * m->positions * m->classes));
    herd_synced_pass *p = r->synced;
    p->per_micro = per_micro, p->comm = r->dp, p->exact = &r->exact, p->m = m;
    herd_exact_sum_begin(&r->exact, m, (long)n * ranks, false);
    HERD_TRY(herd_exact_sum_restore_buffers(&r->exact, m)); /* a redo starts where the step did */
    HERD_TRY(herd_phase_mark(&plan->clock, HERD_PHASE_START));
    for (int j = 0; j < n_micro; j++) {
        herd_batch b;
        HERD_TRY(herd_run_exact_micro_batch(r, j, n_micro, from_loader, s, &b));
    }
    /* All kept first: the store grows as it keeps them, and the loader reuses its slots.
     * A device gets them all in its own memory. */
    const herd_backend *be = m->be;
    size_t micro_x = (size_t)r->cfg.batch_size * x_floats, micro_labels = (size_t)r->cfg.batch_size * labels;
    if (!be->host_memory) {
        HERD_TRY(herd_backend_grow(be, HERD_MEM_ACTIVATIONS, (void **)&p->x_dev, &p->x_dev_floats,
                                   micro_x * n_micro, sizeof(float)));
        HERD_TRY(herd_backend_grow(be, HERD_MEM_ACTIVATIONS, (void **)&p->labels_dev,
                                   &p->labels_dev_count, micro_labels * n_micro, sizeof(int32_t)));
    }
    for (int j = 0; j < n_micro; j++) {
        herd_batch b = herd_batch_store_get(&r->kept, j);
        if (!be->host_memory) {
            HERD_TRY(be->memcpy_h2d(p->x_dev + j * micro_x, b.x, micro_x * sizeof(float)));
            HERD_TRY(be->memcpy_h2d(p->labels_dev + j * micro_labels, b.labels,
                                    micro_labels * sizeof(int32_t)));
            b.x = p->x_dev + j * micro_x;
            b.labels = p->labels_dev + j * micro_labels;
        }
        for (int i = 0; i < per_micro; i++) {
            int at = j * per_micro + i;
            p->x[at] = b.x + (size_t)i * size * x_floats;
            p->labels[at] = b.labels + (size_t)i * size * labels;
            p->seeds[at] = herd_mix64(seed, herd_run_slice_place(r, j, i));
        }
    }
    HERD_TRY(herd_slices_reshape(&p->slices, m, n, size));
    if (r->synced_threads > 1) { /* each thread's slices write their own gradients */
        HERD_TRY(thread_grads(r, p));
        p->slices.threads = r->synced_threads;
        p->slices.thread_grads = p->thread_grads;
    }
    HERD_TRY(herd_step_params_ready(plan)); /* ZeRO: the last update's parameters */
    herd_run_ctx ctx = herd_model_ctx(m, true, seed);
    ctx.trace = herd_timeline_sink(plan->timeline);
    ctx.exact = plan->exact_linear;
    herd_slice_sums sums = {.sum_rows = sum_rows, .grads_ready = grads_ready, .user = p};
    double t0 = herd_now();
    HERD_TRY(herd_slices_forward(&p->slices, &ctx, p->seeds, p->x, &sums));
    HERD_TRY(losses(r, n, size, s));
    double t1 = herd_now();
    HERD_TRY(herd_phase_mark(&plan->clock, HERD_PHASE_FORWARD));
    HERD_TRY(herd_slices_backward(&p->slices, &ctx, p->seeds, p->x, p->dl, &sums));
    double t2 = herd_now();
    HERD_TRY(herd_phase_mark(&plan->clock, HERD_PHASE_BACKWARD));
    s->t.forward += t1 - t0;
    s->t.backward += t2 - t1;
    if (plan->timeline && !herd_phase_clock_timing(&plan->clock)) {
        herd_timeline_add(plan->timeline, HERD_TL_FORWARD, NULL, t0, t1);
        herd_timeline_add(plan->timeline, HERD_TL_BACKWARD, NULL, t1, t2);
    }
    return HERD_OK;
}
