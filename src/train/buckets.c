#include "train/buckets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

herd_status herd_buckets_plan(const herd_model *m, double bucket_mb, herd_buckets *out)
{
    memset(out, 0, sizeof *out);
    herd_layer_info *info = herd_xcalloc((size_t)m->n_layers + 1, sizeof *info);
    herd_layer_buckets plan = {0};
    out->bucket_of_layer = herd_xcalloc((size_t)m->n_layers + 1, sizeof(int));
    out->first_bucket_of_layer = herd_xcalloc((size_t)m->n_layers + 1, sizeof(int));
    herd_status st = info && out->bucket_of_layer && out->first_bucket_of_layer ? HERD_OK
                                                                                  : HERD_ERR_NOMEM;
    for (int l = 0; st == HERD_OK && l < m->n_layers; l++) {
        st = herd_model_layer_info(m, (size_t)l, &info[l]);
        out->bucket_of_layer[l] = out->first_bucket_of_layer[l] = -1;
    }
    /* The same plan as herd predict's (src/tools/predict_step.c). */
    if (st == HERD_OK)
        st = herd_bucket_plan_layers(info, m->n_layers, bucket_mb, &plan);
    if (st == HERD_OK && !(out->b = herd_xcalloc((size_t)plan.n + 1, sizeof *out->b)))
        st = HERD_ERR_NOMEM;
    for (int i = 0; st == HERD_OK && i < plan.n; i++) {
        herd_bucket *b = &out->b[i];
        b->offset = plan.spans[i].offset;
        b->numel = plan.spans[i].numel;
        b->views = plan.spans[i].views;
        snprintf(b->tag, sizeof b->tag, "bucket %d", i);
    }
    if (st == HERD_OK)
        out->n = plan.n;
    /* Walking backward's order, a layer's first bucket is the lowest index it touches. */
    for (int i = plan.n_tensors - 1; st == HERD_OK && i >= 0; i--) {
        int l = plan.tensors[i].layer;
        if (out->first_bucket_of_layer[l] < 0)
            out->first_bucket_of_layer[l] = plan.bucket_of[i];
        out->bucket_of_layer[l] = plan.bucket_of[i];
    }
    free(info);
    herd_layer_buckets_free(&plan);
    if (st != HERD_OK)
        herd_buckets_free(out);
    return st;
}

void herd_buckets_free(herd_buckets *b)
{
    free(b->b);
    free(b->bucket_of_layer);
    free(b->first_bucket_of_layer);
    memset(b, 0, sizeof *b);
}

void herd_buckets_arm(herd_buckets *b, herd_comm *comm, float scale, herd_wire_type wire)
{
    for (int i = 0; i < b->n; i++)
        b->b[i].pending = b->b[i].views;
    b->comm = comm;
    b->scale = scale;
    b->wire = wire;
    b->launched = 0;
}

herd_status herd_buckets_layer_done(herd_buckets *b, const herd_model *m, int layer)
{
    int first = b->first_bucket_of_layer[layer];
    if (first < 0)
        return HERD_OK;
    const herd_layer *l = &m->layers[layer];
    for (int k = 0; k < l->n_tensors; k++) {
        const herd_tensor_view *v = &m->views[l->first_tensor + k];
        if (v->is_buffer)
            continue;
        /* The bucket holding this view: buckets are contiguous, ordered by falling offset. */
        int i = first;
        while (i < b->bucket_of_layer[layer] && v->offset < b->b[i].offset)
            i++;
        b->b[i].pending--;
    }
    /* Launch in bucket order so every rank starts the same reductions in the same order. */
    while (b->launched < b->n && b->b[b->launched].pending == 0) {
        int i = b->launched++;
        herd_bucket *k = &b->b[i];
        if (b->split)
            HERD_TRY(b->comm->ops->reduce_scatter_start(
                b->comm, m->grads + k->offset, b->split + (size_t)i * (size_t)b->ranks, b->scale,
                b->wire, b->release_rest, k->tag));
        else
            HERD_TRY(b->comm->ops->allreduce_start(b->comm, m->grads + k->offset, k->numel,
                                                   b->scale, b->wire, k->tag));
    }
    return HERD_OK;
}
