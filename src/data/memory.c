/* Data sets from the caller's memory (Python's herd.Dataset.from_numpy), and the
 * content hash with which the ranks check they hold the same data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/error.h"
#include "core/hugepages.h"
#include "data/dataset.h"

herd_status herd_dataset_from_memory(const uint8_t *images, const int32_t *labels, size_t n, int c,
                                     int h, int w, int classes, const float *mean, const float *std,
                                     herd_dataset **out)
{
    if (!out)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_dataset_from_memory: out must be set");
    *out = NULL;
    if (!images || !labels || n == 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "a data set needs at least one image and its label");
    /* Normalisation holds 3 channels; the zoo's models take 1 (grey) or 3 (colour). */
    if (c < 1 || c > 3 || h < 1 || w < 1 || (size_t)h * (size_t)w > (1u << 24))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "images must be C x H x W with 1 to 3 channels and "
                        "at most 2^24 pixels, got %d x %d x %d", c, h, w);
    if (classes < 2 || classes > 65536)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "classes must be in 2..65536, got %d", classes);
    for (size_t i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= classes)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "label %zu is %d, outside 0..%d (classes %d)", i,
                            labels[i], classes - 1, classes);
    if ((mean == NULL) != (std == NULL))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "give both mean and std, or neither (then they are "
                        "computed from these images)");
    for (int ch = 0; std && ch < c; ch++)
        if (!(std[ch] > 0) || !(mean[ch] == mean[ch]))
            return HERD_ERR(HERD_ERR_INVALID_ARG, "normalisation of channel %d: std must be > 0 "
                            "and mean a number, got mean %g std %g", ch, (double)mean[ch],
                            (double)std[ch]);
    size_t pixels = n * (size_t)c * (size_t)h * (size_t)w;
    herd_dataset *ds = herd_xcalloc(1, sizeof *ds);
    if (!ds)
        return HERD_ERR_NOMEM;
    ds->images = malloc(pixels);
    herd_huge_advise(ds->images, pixels);
    ds->labels = malloc(n * sizeof *ds->labels);
    if (!ds->images || !ds->labels) {
        herd_dataset_free(ds);
        return HERD_NOMEM(pixels + n * sizeof *labels);
    }
    memcpy(ds->images, images, pixels);
    memcpy(ds->labels, labels, n * sizeof *labels);
    ds->n = n, ds->c = c, ds->h = h, ds->w = w, ds->classes = classes;
    snprintf(ds->spec, sizeof ds->spec, "memory:%zux%dx%dx%d", n, c, h, w);
    if (mean) {
        memcpy(ds->mean, mean, sizeof(float) * (size_t)c);
        memcpy(ds->std, std, sizeof(float) * (size_t)c);
    } else {
        herd_pixel_stats(ds->images, n, c, (size_t)h * (size_t)w, ds->mean, ds->std);
    }
    *out = ds;
    return HERD_OK;
}

void herd_dataset_normalization(const herd_dataset *ds, float mean[3], float std[3])
{
    for (int ch = 0; ch < 3; ch++) {
        mean[ch] = ds && ch < ds->c ? ds->mean[ch] : 0.0f;
        std[ch] = ds && ch < ds->c ? ds->std[ch] : 1.0f;
    }
}

uint64_t herd_dataset_content_hash(const herd_dataset *ds)
{
    if (!ds || !ds->images) /* token streams: gigabytes, read from one file by every rank */
        return 0;
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return 0;
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, ds->images, ds->n * (size_t)ds->c * (size_t)ds->h * (size_t)ds->w);
    XXH3_64bits_update(st, ds->labels, ds->n * sizeof *ds->labels);
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}
