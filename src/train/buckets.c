#include "train/buckets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

herd_status herd_buckets_plan(const herd_model *m, double bucket_mb, double first_mb,
                              herd_buckets *out)
{
    memset(out, 0, sizeof *out);
    if (!(bucket_mb > 0) || !(first_mb > 0))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bucket sizes must be positive (got %g and %g MiB)",
                        bucket_mb, first_mb);
    out->b = herd_xcalloc((size_t)m->n_views + 1, sizeof *out->b);
    out->bucket_of_layer = herd_xcalloc((size_t)m->n_layers, sizeof(int));
    out->first_bucket_of_layer = herd_xcalloc((size_t)m->n_layers, sizeof(int));
    if (!out->b || !out->bucket_of_layer || !out->first_bucket_of_layer) {
        herd_buckets_free(out);
        return HERD_ERR_NOMEM;
    }
    for (int l = 0; l < m->n_layers; l++)
        out->bucket_of_layer[l] = out->first_bucket_of_layer[l] = -1;
    /* Walk parameters from the last layer back: that is the order backward produces
     * them, and since offsets grow with declaration order each bucket is contiguous. */
    double cap = first_mb * 1048576.0 / sizeof(float);
    herd_bucket *cur = NULL;
    for (int l = m->n_layers - 1; l >= 0; l--) {
        const herd_layer *layer = &m->layers[l];
        for (int k = layer->n_tensors - 1; k >= 0; k--) {
            const herd_tensor_view *v = &m->views[layer->first_tensor + k];
            if (v->is_buffer)
                continue;
            if (!cur || (double)cur->numel >= cap) {
                if (cur)
                    cap = bucket_mb * 1048576.0 / sizeof(float);
                cur = &out->b[out->n];
                snprintf(cur->tag, sizeof cur->tag, "bucket %d", out->n);
                cur->offset = v->offset + v->numel;
                out->n++;
            }
            cur->offset = v->offset; /* grows downwards */
            cur->numel += v->numel;
            cur->views++;
            int idx = (int)(cur - out->b);
            if (out->first_bucket_of_layer[l] < 0)
                out->first_bucket_of_layer[l] = idx;
            out->bucket_of_layer[l] = idx;
        }
    }
    return HERD_OK;
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
        herd_bucket *k = &b->b[b->launched++];
        HERD_TRY(b->comm->ops->allreduce_start(b->comm, m->grads + k->offset, k->numel, b->scale,
                                               b->wire, k->tag));
    }
    return HERD_OK;
}
