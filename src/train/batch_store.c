#include "train/batch_store.h"

#include <stdlib.h>
#include <string.h>

void herd_batch_store_init(herd_batch_store *s, int max_n, size_t x_per_sample,
                           size_t labels_per_sample)
{
    *s = (herd_batch_store){.max_n = max_n, .x_per_sample = x_per_sample,
                            .labels_per_sample = labels_per_sample};
}

void herd_batch_store_free(herd_batch_store *s)
{
    free(s->x);
    free(s->labels);
    free(s->n);
    herd_batch_store_init(s, s->max_n, s->x_per_sample, s->labels_per_sample);
}

static size_t x_stride(const herd_batch_store *s) { return (size_t)s->max_n * s->x_per_sample; }
static size_t labels_stride(const herd_batch_store *s)
{
    return (size_t)s->max_n * s->labels_per_sample;
}

herd_status herd_batch_store_put(herd_batch_store *s, int j, const herd_batch *b)
{
    if (b->n > s->max_n)
        return HERD_ERR(HERD_ERR_INTERNAL, "a micro-batch of %d samples, more than the %d kept",
                        b->n, s->max_n);
    if (j >= s->capacity) {
        size_t cap = (size_t)j + 1;
        /* malloc(0) may return NULL: one element at least. */
        float *x = realloc(s->x, (cap * x_stride(s) + 1) * sizeof *x);
        if (x)
            s->x = x;
        int32_t *l = realloc(s->labels, (cap * labels_stride(s) + 1) * sizeof *l);
        if (l)
            s->labels = l;
        int *n = realloc(s->n, cap * sizeof *n);
        if (n)
            s->n = n;
        if (!x || !l || !n)
            return HERD_NOMEM(cap * x_stride(s) * sizeof *x);
        s->capacity = (int)cap;
    }
    if (s->x_per_sample)
        memcpy(s->x + (size_t)j * x_stride(s), b->x, (size_t)b->n * s->x_per_sample * sizeof *b->x);
    if (s->labels_per_sample)
        memcpy(s->labels + (size_t)j * labels_stride(s), b->labels,
               (size_t)b->n * s->labels_per_sample * sizeof *b->labels);
    s->n[j] = b->n;
    return HERD_OK;
}

herd_batch herd_batch_store_get(const herd_batch_store *s, int j)
{
    return (herd_batch){.x = s->x_per_sample ? s->x + (size_t)j * x_stride(s) : NULL,
                        .labels = s->labels_per_sample ? s->labels + (size_t)j * labels_stride(s) : NULL,
                        .n = s->n[j]};
}
