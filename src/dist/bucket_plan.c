#include "dist/bucket_plan.h"

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
