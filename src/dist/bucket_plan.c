#include "dist/bucket_plan.h"

#include <stdlib.h>
#include <string.h>

double herd_bucket_first_mb(double bucket_mb) { return bucket_mb < 1.0 ? bucket_mb : 1.0; }

herd_status herd_bucket_plan(const herd_param_ref *tensors, int n, double bucket_mb,
                             double first_mb, herd_bucket_span *out, int *n_out, int *bucket_of)
{
    *n_out = 0;
    if (!(bucket_mb > 0) || !(first_mb > 0))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bucket sizes must be positive (got %g and %g MiB)",
                        bucket_mb, first_mb);
    /* A bucket closes once it holds its size: the tensor that crosses it stays in. */
    double cap = first_mb * 1048576.0 / sizeof(float);
    herd_bucket_span *cur = NULL;
    for (int i = n - 1; i >= 0; i--) {
        const herd_param_ref *t = &tensors[i];
        if (!cur || (double)cur->numel >= cap) {
            if (cur)
                cap = bucket_mb * 1048576.0 / sizeof(float);
            cur = &out[(*n_out)++];
            *cur = (herd_bucket_span){.offset = t->offset + t->numel, .ready_layer = t->layer};
        }
        cur->offset = t->offset; /* grows downwards */
        cur->numel += t->numel;
        cur->views++;
        if (t->layer < cur->ready_layer)
            cur->ready_layer = t->layer;
        if (bucket_of)
            bucket_of[i] = (int)(cur - out);
    }
    return HERD_OK;
}

herd_status herd_bucket_plan_layers(const herd_layer_info *layers, int n_layers, double bucket_mb,
                                    herd_layer_buckets *out)
{
    memset(out, 0, sizeof *out);
    size_t cap = (size_t)n_layers * HERD_LAYER_MAX_PARAMS + 1;
    out->spans = calloc(cap, sizeof *out->spans);
    out->tensors = calloc(cap, sizeof *out->tensors);
    out->bucket_of = calloc(cap, sizeof *out->bucket_of);
    if (!out->spans || !out->tensors || !out->bucket_of) {
        herd_layer_buckets_free(out);
        return HERD_ERR(HERD_ERR_NOMEM, "out of memory planning the buckets of %d layers", n_layers);
    }
    /* Parameters in declaration order: offsets grow with it, so each bucket is contiguous. */
    for (int l = 0; l < n_layers; l++)
        for (int k = 0; k < layers[l].n_params; k++)
            out->tensors[out->n_tensors++] = (herd_param_ref){
                .offset = layers[l].param_offset[k], .numel = layers[l].param_numel[k], .layer = l};
    herd_status st = herd_bucket_plan(out->tensors, out->n_tensors, bucket_mb,
                                      herd_bucket_first_mb(bucket_mb), out->spans, &out->n,
                                      out->bucket_of);
    if (st != HERD_OK)
        herd_layer_buckets_free(out);
    return st;
}

void herd_layer_buckets_free(herd_layer_buckets *b)
{
    free(b->spans);
    free(b->tensors);
    free(b->bucket_of);
    memset(b, 0, sizeof *b);
}
