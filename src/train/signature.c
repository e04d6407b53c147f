/* The rank signature: what every rank must hold alike (the effective configuration,
 * the model layer by layer, the data), compared across the ranks before the first
 * collective of training, so a difference is named instead of hanging or diverging. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dist/signature.h"
#include "train/run.h"

/* Every field of herd_train_config is either compared below or named here as not
 * needing to be: threads (each rank's own arithmetic; the reduced gradients are the
 * same), checkpoint paths, keep_checkpoints, logdir, histograms, metrics_path and
 * log_every (rank 0 writes them alone, no collective) and dist. A new field changes the
 * size: compare it (or add it to the list above), then update the size. */
#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(herd_train_config) == 312,
               "herd_train_config changed: add the new field to check_signature");
#endif

static void sign_config(herd_signature *s, const herd_train_config *c)
{
    herd_signature_add(s, "epochs", "%d", c->epochs);
    herd_signature_add(s, "batch_size", "%d", c->batch_size);
    herd_signature_add(s, "lr", "%.9g", c->lr); /* effective: lr scaling resolved */
    herd_signature_add(s, "optimizer", "%s", c->optimizer == HERD_OPT_SGD ? "sgd" : "adamw");
    herd_signature_add(s, "momentum", "%.9g", c->momentum);
    herd_signature_add(s, "nesterov", "%d", c->nesterov);
    herd_signature_add(s, "weight_decay", "%.9g", c->weight_decay);
    herd_signature_add(s, "decoupled_decay", "%d", c->decoupled_decay);
    herd_signature_add(s, "decay_bn_bias", "%d", c->decay_bn_bias);
    herd_signature_add(s, "adamw_betas_eps", "%.9g,%.9g,%.9g", c->beta1, c->beta2, c->eps);
    herd_signature_add(s, "schedule", "%d", c->schedule);
    char milestones[HERD_MAX_MILESTONES * 12 + 1] = "";
    for (int i = 0; i < c->n_milestones; i++) {
        size_t len = strlen(milestones);
        snprintf(milestones + len, sizeof milestones - len, "%s%d", i ? "," : "", c->milestones[i]);
    }
    herd_signature_add(s, "milestones", "%s", milestones);
    herd_signature_add(s, "gamma", "%.9g", c->gamma);
    herd_signature_add(s, "warmup_epochs", "%.9g", c->warmup_epochs); /* resolved */
    herd_signature_add(s, "augment", "%d", c->augment);
    herd_signature_add(s, "label_smoothing", "%.9g", c->label_smoothing);
    herd_signature_add(s, "seed", "%llu", (unsigned long long)c->seed);
    herd_signature_add(s, "checkpoints", "%d", c->checkpoint_dir != NULL);
    herd_signature_add(s, "resume", "%d", c->resume);
    herd_signature_add(s, "eval_every", "%d", c->eval_every);
    herd_signature_add(s, "max_steps", "%ld", c->max_steps);
    herd_signature_add(s, "lr_scaling", "%d", c->lr_scaling);
    herd_signature_add(s, "sync_bn", "%d", c->sync_bn);
    herd_signature_add(s, "compress", "%s", herd_compress_name(c->compress));
    herd_signature_add(s, "grad_accum", "%d", c->grad_accum);
    herd_signature_add(s, "bucket_mb", "%.17g", c->bucket_mb);
    herd_signature_add(s, "check_replicas", "%d", c->check_replicas);
    herd_signature_add(s, "recompute", "%d", c->recompute); /* tensor parallelism's collectives */
    herd_signature_add(s, "loss_chunk", "%d", c->loss_chunk); /* and the split loss's, per chunk */
    herd_signature_add(s, "deterministic", "%d", c->deterministic);
    herd_signature_add(s, "slice_size", "%d", c->slice_size);
    if (c->dynamic_loss_scale)
        herd_signature_add(s, "loss_scale", "dynamic %.9g/%d", c->loss_scale_init,
                           c->loss_scale_window);
    else
        herd_signature_add(s, "loss_scale", "none");
    herd_signature_add(s, "clip_grad_norm", "%.9g", (double)c->clip_grad_norm);
    herd_signature_add(s, "on_nonfinite", "%s", c->skip_nonfinite ? "skip" : "stop");
    herd_signature_add(s, "zero", "%d", c->zero_stage);
    herd_signature_add(s, "pipeline", "%d stages, %d micro-batches, %s, split %s",
                       c->pipeline_stages, c->micro_batches,
                       herd_pp_schedule_name(c->pp_schedule),
                       c->stage_split ? c->stage_split : "by cost");
    herd_signature_add(s, "tensor_parallel", "%d", c->tensor_parallel);
    /* The trace's flushes are collective: a rank without it would leave the others waiting. */
    herd_signature_add(s, "timeline", "%d", c->timeline_path != NULL);
    herd_signature_add(s, "checkpoint_every", "%ld steps, %.17g s", c->checkpoint_every_steps,
                       c->checkpoint_every_s);
    herd_signature_add(s, "run_attempt", "%d", c->run_attempt);
    herd_signature_add(s, "elastic", "%s from %d", c->elastic_batch == HERD_ELASTIC_SCALE ? "scale" : "keep",
                       c->elastic_ranks);
}

/* The model, layer by layer, and the data: every rank must build the same graph. */
static void sign_model_and_data(herd_signature *s, const run *r)
{
    const herd_model *m = r->m;
    herd_signature_add(s, "model", "%s", m->name);
    herd_signature_add(s, "device", "%s", m->be->name);
    herd_signature_add(s, "precision", "%s", herd_precision_name(m->precision));
    herd_signature_add(s, "input", "%dx%dx%d, %d classes", m->in_c, m->in_h, m->in_w, m->classes);
    for (int i = 0; i < m->n_layers; i++) {
        const herd_layer_spec *sp = &m->layers[i].spec;
        herd_shape o = m->layers[i].out_shape;
        char name[96], inputs[HERD_MAX_INPUTS * 12 + 1] = "";
        for (int k = 0; k < sp->n_inputs; k++) {
            size_t len = strlen(inputs);
            snprintf(inputs + len, sizeof inputs - len, "%s%d", k ? "," : "", sp->inputs[k]);
        }
        snprintf(name, sizeof name, "layer %d", i);
        herd_signature_add(s, name,
                           "%s %s out=%d kernel=%d stride=%d pad=%d bias=%d dropout=%.9g "
                           "eps=%.9g momentum=%.9g in=[%s] -> %dx%dx%d",
                           sp->type, sp->name, sp->out, sp->kernel, sp->stride, sp->pad, sp->bias,
                           sp->p, sp->eps, sp->momentum, inputs, o.c, o.h, o.w);
    }
    for (int i = 0; i < m->n_views; i++) {
        const herd_tensor_view *v = &m->views[i];
        char name[112];
        snprintf(name, sizeof name, "tensor %d", i);
        herd_signature_add(s, name, "%s [%lld,%lld,%lld,%lld]/%d at %zu%s%s", v->name,
                           (long long)v->shape[0], (long long)v->shape[1], (long long)v->shape[2],
                           (long long)v->shape[3], v->ndim, v->offset,
                           v->is_buffer ? " buffer" : "", v->no_decay ? " no-decay" : "");
    }
    /* After the layers: the first difference named is the layer's, not the total's. */
    herd_signature_add(s, "parameters", "%zu", m->n_param_floats);
    herd_signature_add(s, "buffers", "%zu", m->n_buffer_floats);
    int c, h, w, classes;
    herd_dataset_shape(r->train, &c, &h, &w, &classes);
    herd_signature_add(s, "train_data", "%zu samples %dx%dx%d, %d classes", r->train->n, c, h, w,
                       classes);
    float mean[3], std[3];
    herd_dataset_normalization(r->train, mean, std);
    herd_signature_add(s, "train_data_content", "xxh3 %016llx, mean %.9g,%.9g,%.9g std %.9g,%.9g,%.9g",
                       (unsigned long long)herd_dataset_content_hash(r->train), mean[0], mean[1],
                       mean[2], std[0], std[1], std[2]);
    if (r->test) {
        herd_dataset_shape(r->test, &c, &h, &w, &classes);
        herd_signature_add(s, "test_data", "%zu samples %dx%dx%d, %d classes, xxh3 %016llx",
                           r->test->n, c, h, w, classes,
                           (unsigned long long)herd_dataset_content_hash(r->test));
    } else {
        herd_signature_add(s, "test_data", "none");
    }
}

herd_status herd_run_check_signature(run *r)
{
    herd_signature s = {0};
    herd_signature_add(&s, "herd_version", "%s", HERD_VERSION);
    sign_model_and_data(&s, r);
    sign_config(&s, &r->cfg);
    herd_status st = herd_signature_check(r->comm, &s);
    herd_signature_free(&s);
    return st;
}
