/* --deterministic steps (docs/determinism.md): each slice of the global batch (a fixed
 * number of samples, --slice-size) computes its gradient alone and adds it to exact
 * sums; the sums over the ranks do not depend on the order, so neither do the weights on
 * the number of ranks, the --grad-accum split or the --batch-size that make up the
 * global batch. */
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "train/run.h"

/* Whether micro-batches run whole (the exact sums taken by the linear layers' kernels):
 * a model on the host of linear layers and of layers whose every value is its row's
 * alone, with nothing the slices share but the parameters (no batch norm, no
 * compression, no stages or tensor parts). Every op then gives a row the same bits
 * whatever rows it comes with, at any thread count. */
static bool runs_whole(const run *r)
{
    const herd_model *m = r->m;
    if (!r->plan.exact_linear || !m->be->host_memory || r->pp || r->tp ||
        r->exact.buffers_synced || r->exact.round16 != HERD_EXACT_ROUND_NONE ||
        m->n_buffer_floats > 0)
        return false;
    static const char *const row_wise[] = {"linear", "relu", "gelu", "flatten"};
    for (int i = 0; i < m->n_layers; i++) {
        const herd_layer *l = &m->layers[i];
        bool ok = false;
        for (size_t k = 0; k < sizeof row_wise / sizeof row_wise[0]; k++)
            ok = ok || strcmp(l->ops->type, row_wise[k]) == 0;
        if (!ok || l->spec.per_position) /* per position: oneDNN's GEMMs (linear.c) */
            return false;
    }
    return true;
}

/* Threads: a whole micro-batch's kernels on them (runs_whole), or whole slices at once
 * where the model allows (exact_threads.c), as many as --threads would give the kernels,
 * every kernel itself on one. */
static herd_status threads_setup(run *r)
{
    int threads;
    HERD_TRY(herd_process_rank_threads(r->cfg.threads, r->comm->local_size, &threads));
    if (r->exact_whole) {
        HERD_TRY(r->m->be->set_threads(threads)); /* the ops' bits do not follow the count */
        if (r->comm->rank == 0)
            herd_log(HERD_LOG_INFO, "--deterministic: micro-batches run whole, the linear "
                     "layers adding each slice's gradient to the exact sums (%d thread%s)",
                     threads, threads == 1 ? "" : "s");
        return HERD_OK;
    }
    bool whole_on_host = r->m->be->host_memory && !r->pp && !r->tp;
    if (r->exact.buffers_synced)
        r->synced_threads = whole_on_host ? threads : 1;
    else
        HERD_TRY(herd_run_exact_threads_setup(r, threads));
    if (r->comm->rank != 0 || threads < 2)
        return HERD_OK;
    if (r->exact_threads || r->synced_threads > 1)
        herd_log(HERD_LOG_INFO, "--deterministic: %d threads each run whole slices%s, every kernel on "
                 "one thread (the same bytes at any --threads)", threads,
                 r->synced_threads > 1 ? " (layer by layer: --sync-bn)" : "");
    else
        herd_log(HERD_LOG_INFO, "--deterministic: one compute thread per rank (--threads %d not used: "
                 "%s run their slices one after another)", threads,
                 r->pp ? "pipeline stages" : r->tp ? "tensor parts" : "models on a device");
    return HERD_OK;
}

herd_status herd_run_exact_setup(run *r)
{
    const herd_train_config *cfg = &r->cfg;
    if (!cfg->deterministic)
        return HERD_OK;
    const herd_backend *be = r->m->be;
    const char *why = be->nondeterminism ? be->nondeterminism() : NULL;
    if (why)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "--deterministic on --device %s: %s; unset it "
                        "(docs/determinism.md)", be->name, why);
    /* The epoch's last step must hold whole micro-batches on every rank alike, or its
     * slices would depend on the number of ranks. */
    long global = (long)cfg->batch_size * cfg->grad_accum * herd_run_replicas(r);
    if ((long)r->train->n % global != 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "--deterministic needs whole global batches: %zu "
                        "training samples are not a multiple of the global batch %ld; use "
                        "--train-samples %ld", r->train->n, global,
                        (long)r->train->n / global * global);
    HERD_TRY(herd_exact_sum_init(&r->exact, r->m, r->dp->size));
    if (r->tp) /* the parts agree on one grid per tensor, the whole tensor's */
        HERD_TRY(herd_exact_sum_set_tensor_group(&r->exact, r->m, r->tp->group));
    herd_batch_store_init(&r->kept, cfg->batch_size, (size_t)r->m->in_c * r->m->in_h * r->m->in_w,
                          (size_t)r->m->positions); /* a language model: a label per position */
    if (cfg->compress != HERD_COMPRESS_NONE) {
        r->exact.round16 = cfg->compress == HERD_COMPRESS_FP16 ? HERD_EXACT_ROUND_FP16
                                                               : HERD_EXACT_ROUND_BF16;
        if (r->comm->rank == 0)
            herd_log(HERD_LOG_INFO, "--deterministic --compress %s: each slice's gradient is "
                     "rounded to %s, the same values at any number of ranks; the exact sums "
                     "still travel as doubles, so the wire carries no fewer bytes",
                     herd_compress_name(cfg->compress), herd_compress_name(cfg->compress));
    }
    /* Batch norm: with --sync-bn the global batch's statistics (exact_syncbn.c); else
     * each slice is its own batch (ghost batch norm) and the running statistics are the
     * exact mean over the step's slices (exact_sum.h). */
    r->exact.buffers_synced = herd_run_synced_bn(r);
    if (r->exact.buffers_synced && r->comm->rank == 0)
        herd_log(HERD_LOG_INFO, "--deterministic --sync-bn: batch norm normalises over the "
                 "global batch; each rank holds its whole part of the step's activations at "
                 "once (--grad-accum saves no memory)%s",
                 r->pp ? ", and the pipeline's stages take turns (every slice passes a batch "
                         "norm before any goes on)" : "");
    else if (r->m->n_buffer_floats > 0 && r->comm->rank == 0)
        herd_log(HERD_LOG_INFO, "--deterministic: batch norm normalises over each slice of %d "
                 "samples (--slice-size), and its running statistics take the mean over the "
                 "step's slices", herd_slice_size(cfg));
    r->plan.exact = &r->exact;
    /* Linear layers in the exact ops' fixed order wherever the backend has them (fp32:
     * bf16's GEMMs are their own), in every kind of pass, so that all give one slice the
     * same bits. */
    if (r->m->precision == HERD_PRECISION_FP32 && r->m->be->exact_linear_wgrad) {
        r->exact_linear.slice = herd_slice_size(cfg);
        r->plan.exact_linear = &r->exact_linear;
    }
    if (runs_whole(r)) {
        if (!(r->exact_max_bits = calloc((size_t)r->m->n_views, sizeof *r->exact_max_bits)))
            return HERD_ERR_NOMEM;
        r->exact_whole = true;
    }
    return threads_setup(r);
}

void herd_run_exact_free(run *r)
{
    herd_run_exact_threads_free(r);
    herd_run_synced_free(r);
    herd_exact_sum_free(&r->exact);
    herd_batch_store_free(&r->kept);
    free(r->exact_max_bits);
    r->exact_max_bits = NULL;
}

static size_t sample_floats(const run *r) { return (size_t)r->m->in_c * r->m->in_h * r->m->in_w; }
/* Labels per sample: one per position of a language model. */
static size_t sample_labels(const run *r) { return (size_t)r->m->positions; }

uint64_t herd_run_slice_place(const run *r, int j, int i)
{
    uint64_t per_micro = (uint64_t)(r->cfg.batch_size / herd_slice_size(&r->cfg));
    return ((uint64_t)j * (uint64_t)r->dp->size + (uint64_t)r->dp->rank) * per_micro + (uint64_t)i;
}

herd_status herd_run_exact_micro_batch(run *r, int j, int n_micro, bool from_loader,
                                       herd_step_stats *s, herd_batch *b)
{
    if (from_loader) {
        bool has;
        HERD_TRY(herd_loader_next(r->loader, b, &has));
        if (!has)
            return HERD_ERR(HERD_ERR_INTERNAL, "the loader ended the epoch %d batches early",
                            n_micro - j);
        s->t.data_wait += b->wait_s;
        if (r->timeline) { /* the loader's own measure, as plain steps record it */
            double t = herd_now();
            herd_timeline_add(r->timeline, HERD_TL_DATA_WAIT, NULL, t - b->wait_s, t);
        }
        HERD_TRY(herd_batch_store_put(&r->kept, j, b));
    } else {
        *b = herd_batch_store_get(&r->kept, j);
    }
    if (b->n != r->cfg.batch_size) /* setup asked for whole global batches */
        return HERD_ERR(HERD_ERR_INTERNAL, "--deterministic: a micro-batch of %d samples, not %d",
                        b->n, r->cfg.batch_size);
    return HERD_OK;
}

/* One pass over the step's micro-batches into the exact sums, slice by slice: the
 * model runs on each slice alone (batch-major inputs: a slice is an offset and a count),
 * so its gradient depends on its samples and the weights only, not on the --batch-size
 * or the ranks that hold it. A slice's dropout stream follows its place in the global
 * batch: the loader gives rank k of N micro-batch j as the global batch's
 * (j * N + k)-th piece of B samples, so its slice i is slice (j * N + k) * B / s + i.
 * Every slice starts from the batch-norm running statistics the step found, so what
 * its forward leaves in them depends on the slice alone too. */
int herd_run_exact_begin(run *r, int n_micro, bool written_first)
{
    int n_slices = n_micro * (r->cfg.batch_size / herd_slice_size(&r->cfg));
    herd_exact_sum_begin(&r->exact, r->m, (long)n_slices * r->dp->size, written_first);
    return n_slices;
}

herd_batch herd_run_exact_slice(const run *r, const herd_batch *b, int i)
{
    size_t size = (size_t)herd_slice_size(&r->cfg);
    return (herd_batch){.x = b->x + (size_t)i * size * sample_floats(r),
                        .labels = b->labels + (size_t)i * size * sample_labels(r), .n = (int)size};
}

static herd_status pass(run *r, int n_micro, uint64_t seed, bool from_loader, herd_step_stats *s)
{
    int per_micro = r->cfg.batch_size / herd_slice_size(&r->cfg);
    int n_slices = herd_run_exact_begin(r, n_micro, false);
    for (int j = 0; j < n_micro; j++) {
        herd_batch b;
        HERD_TRY(herd_run_exact_micro_batch(r, j, n_micro, from_loader, s, &b));
        for (int i = 0; i < per_micro; i++) {
            herd_batch slice = herd_run_exact_slice(r, &b, i);
            uint64_t place = herd_run_slice_place(r, j, i);
            HERD_TRY(herd_exact_sum_restore_buffers(&r->exact, r->m));
            HERD_TRY(herd_micro_step(r->m, &r->plan, &slice, j * per_micro + i, n_slices,
                                     r->cfg.label_smoothing, herd_mix64(seed, place), s));
        }
    }
    return HERD_OK;
}

/* Samples a whole pass runs at once: micro-batches smaller than this go together (the
 * kept store holds them one after another), so that the weight gradient kernel adds
 * several slices per pass over the sums. */
enum { WHOLE_SAMPLES = 256 };

/* A pass of whole micro-batches (runs_whole): the linear layers add each slice's
 * gradients to the sums, the loss is taken slice by slice (herd_micro_step). Rows do not
 * see each other, so running several micro-batches as one changes no bit. */
static herd_status whole_pass(run *r, int n_micro, uint64_t seed, bool from_loader,
                              herd_step_stats *s)
{
    /* Only linear layers hold parameters here, and the first group's weight gradients
     * write every sum (fresh), so the sums need no zeroing: a pass over all of them less. */
    herd_run_exact_begin(r, n_micro, true);
    herd_exact_linear *x = &r->exact_linear;
    x->sums = r->exact.acc;
    x->grid = r->exact.grid;
    x->have_grid = r->exact.have_grid;
    x->max_bits = r->exact_max_bits;
    memset(r->exact_max_bits, 0, (size_t)r->m->n_views * sizeof *r->exact_max_bits);
    herd_status st = HERD_OK;
    for (int j = 0; j < n_micro && st == HERD_OK; j++) { /* all of them kept, in order */
        herd_batch b;
        st = herd_run_exact_micro_batch(r, j, n_micro, from_loader, s, &b);
    }
    /* Groups of one size (the model's activations are made again for another batch), the
     * most micro-batches within WHOLE_SAMPLES that divide the step's. */
    int per = r->cfg.batch_size, group = 1;
    for (int g = 2; g <= n_micro && g * per <= WHOLE_SAMPLES; g++)
        group = n_micro % g == 0 ? g : group;
    int groups = n_micro / group;
    for (int g = 0; g < groups && st == HERD_OK; g++) {
        herd_batch b = herd_batch_store_get(&r->kept, g * group);
        b.n = group * per;
        /* nothing draws random numbers: the seed is only passed on */
        x->fresh = g == 0;
        st = herd_micro_step(r->m, &r->plan, &b, g, groups, r->cfg.label_smoothing,
                             herd_mix64(seed, (uint64_t)g), s);
    }
    x->sums = NULL; /* the other kinds of pass write gradients */
    x->fresh = false;
    if (st == HERD_OK)
        herd_exact_sum_take_max(&r->exact, r->m, r->exact_max_bits);
    return st;
}

static herd_status any_pass(run *r, int n_micro, uint64_t seed, bool from_loader,
                            herd_step_stats *s)
{
    if (r->exact_whole)
        return whole_pass(r, n_micro, seed, from_loader, s);
    if (r->exact.buffers_synced)
        return herd_run_synced_pass(r, n_micro, seed, from_loader, s);
    if (r->exact_threads)
        return herd_run_exact_threads_pass(r, n_micro, seed, from_loader, s);
    return pass(r, n_micro, seed, from_loader, s);
}

/* The exact sums' finish, the step's exposed communication (their reduction over the
 * ranks, and the means): counted and traced as plain steps' wait for their reductions
 * is. A device's phase clock puts it there by itself (herd_apply_step's mark). */
static herd_status finish(run *r, herd_step_stats *s, bool *redo)
{
    double t0 = herd_now();
    HERD_TRY(herd_exact_sum_finish(&r->exact, r->m, r->dp, redo));
    double t1 = herd_now();
    s->t.comm_wait += t1 - t0;
    if (r->timeline && !herd_phase_clock_timing(&r->plan.clock))
        herd_timeline_add(r->timeline, HERD_TL_COMM_WAIT, NULL, t0, t1);
    return HERD_OK;
}

herd_status herd_run_exact_micro_steps(run *r, int n_micro, uint64_t seed, herd_step_stats *s)
{
    bool redo;
    HERD_TRY(herd_exact_sum_keep_buffers(&r->exact, r->m));
    HERD_TRY(any_pass(r, n_micro, seed, true, s));
    HERD_TRY(finish(r, s, &redo));
    if (!redo)
        return HERD_OK;
    /* The grid came from this step's own values now: the pass is counted once. */
    s->loss_sum = 0, s->correct = 0, s->samples = 0;
    HERD_TRY(any_pass(r, n_micro, seed, false, s));
    HERD_TRY(finish(r, s, &redo));
    if (redo)
        return HERD_ERR(HERD_ERR_INTERNAL, "--deterministic: the exact sums overflowed on a grid "
                        "made from the step's own values");
    return HERD_OK;
}
