#include "train/buckets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

herd_status herd_buckets_plan(const herd_model *m, double bucket_mb, double first_mb,
                              herd_buckets *out)
{
    memset(out, 0, sizeof *out);
    herd_param_ref *refs = herd_xcalloc((size_t)m->n_views + 1, sizeof *refs);
    herd_bucket_span *spans = herd_xcalloc((size_t)m->n_views + 1, sizeof *spans);
    int *bucket_of = herd_xcalloc((size_t)m->n_views + 1, sizeof(int));
    out->b = herd_xcalloc((size_t)m->n_views + 1, sizeof *out->b);
    out->bucket_of_layer = herd_xcalloc((size_t)m->n_layers, sizeof(int));
    out->first_bucket_of_layer = herd_xcalloc((size_t)m->n_layers, sizeof(int));
    herd_status st = HERD_OK;
    if (!refs || !spans || !bucket_of || !out->b || !out->bucket_of_layer ||
        !out->first_bucket_of_layer)
        st = HERD_ERR_NOMEM;
    /* Parameters in declaration order: offsets grow with it, so each bucket is contiguous. */
    int n = 0;
    for (int l = 0; st == HERD_OK && l < m->n_layers; l++) {
        const herd_layer *layer = &m->layers[l];
        out->bucket_of_layer[l] = out->first_bucket_of_layer[l] = -1;
        for (int k = 0; k < layer->n_tensors; k++) {
            const herd_tensor_view *v = &m->views[layer->first_tensor + k];
            if (!v->is_buffer)
                refs[n++] = (herd_param_ref){.offset = v->offset, .numel = v->numel, .layer = l};
        }
    }
    if (st == HERD_OK)
        st = herd_bucket_plan(refs, n, bucket_mb, first_mb, spans, &out->n, bucket_of);
    for (int i = 0; st == HERD_OK && i < out->n; i++) {
        herd_bucket *b = &out->b[i];
        b->offset = spans[i].offset;
        b->numel = spans[i].numel;
        b->views = spans[i].views;
        snprintf(b->tag, sizeof b->tag, "bucket %d", i);
    }
    /* Walking backward's order, a layer's first bucket is the lowest index it touches. */
    for (int i = n - 1; st == HERD_OK && i >= 0; i--) {
        int l = refs[i].layer;
        if (out->first_bucket_of_layer[l] < 0)
            out->first_bucket_of_layer[l] = bucket_of[i];
        out->bucket_of_layer[l] = bucket_of[i];
    }
    free(refs);
    free(spans);
    free(bucket_of);
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
