/* Synthetic datasets: "C,H,W,CLASSES[,N]". Each class has a fixed random prototype image and
 * every sample is its class prototype averaged with per-sample noise, so a model can learn
 * it (useful for tests and benchmarks) while the data stay reproducible without any files. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/hugepages.h"
#include "core/rng.h"
#include "data/dataset.h"

#define SYNTH_DEFAULT_N 10000
#define SYNTH_SEED 0x5eed5eedULL
#define SYNTH_MAX_BYTES ((size_t)4 << 30)

#define SYNTH_USAGE "(format C,H,W,CLASSES[,N], e.g. synthetic:3,32,32,10)"

herd_status herd_synthetic_make(const char *args, herd_split split, herd_dataset *ds)
{
    static const char *names[5] = {"C (channels)", "H (height)", "W (width)", "CLASSES", "N"};
    static const long lo[5] = {1, 1, 1, 2, 1};
    static const long hi[5] = {3, 1024, 1024, 1000, 10000000};
    long v[5] = {0, 0, 0, 0, SYNTH_DEFAULT_N};
    int fields = 0;
    const char *p = args;
    for (;;) {
        /* Digits only: rejects signs, spaces, hex and empty fields that strtol would accept. */
        size_t len = strspn(p, "0123456789");
        if (fields == 5 || len == 0 || len > 9 || (p[len] != ',' && p[len] != '\0'))
            return HERD_ERR(HERD_ERR_INVALID_ARG, "synthetic:%s: expected 4 or 5 positive "
                            "decimal numbers " SYNTH_USAGE, args);
        long x = strtol(p, NULL, 10);
        if (x < lo[fields] || x > hi[fields])
            return HERD_ERR(HERD_ERR_INVALID_ARG, "synthetic:%s: %s is %ld, must be in %ld..%ld",
                            args, names[fields], x, lo[fields], hi[fields]);
        v[fields++] = x;
        if (p[len] == '\0')
            break;
        p += len + 1;
    }
    if (fields < 4)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "synthetic:%s: expected 4 or 5 numbers " SYNTH_USAGE,
                        args);
    size_t per_sample = (size_t)v[0] * v[1] * v[2], n = (size_t)v[4];
    if (per_sample * n > SYNTH_MAX_BYTES)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "synthetic:%s: %zu bytes of images is too large "
                        "(limit %zu); use a smaller N or image", args, per_sample * n,
                        SYNTH_MAX_BYTES);
    /* Written whole right away: on whole huge pages from 1 MiB (a 2,400-image set took 460
     * page faults; every rank of every run on synthetic data makes it). Allocated last, so
     * that a failure leaves nothing of it to give back. */
    size_t bytes = per_sample * n, mapped = herd_huge_whole(bytes);
    int32_t *labels = herd_xcalloc(n, sizeof *labels);
    uint8_t *protos = malloc(per_sample * (size_t)v[3]);
    uint8_t *images = !labels || !protos ? NULL : mapped ? herd_huge_map(mapped) : malloc(bytes);
    if (!images) {
        free(labels);
        free(protos);
        return HERD_NOMEM(bytes);
    }
    herd_rng r;
    /* Prototypes are shared by both splits; samples come from a per-split stream. */
    herd_rng_seed(&r, SYNTH_SEED, 0, 0);
    for (size_t i = 0; i < per_sample * (size_t)v[3]; i++)
        protos[i] = (uint8_t)(herd_rng_next(&r) >> 56);
    herd_rng_seed(&r, SYNTH_SEED, 1 + (uint64_t)split, 0);
    for (size_t i = 0; i < n; i++) {
        labels[i] = (int32_t)herd_rng_below(&r, (uint32_t)v[3]);
        const uint8_t *proto = protos + (size_t)labels[i] * per_sample;
        uint8_t *img = images + i * per_sample;
        /* A copy whose address never leaves this loop stays in registers: r's does
         * (herd_rng_below), and every byte stored through img might alias it, so drawing
         * from r itself reloaded and stored the state at every pixel, in every rank of
         * every run on synthetic data. The same numbers either way. */
        herd_rng pixel = r;
        for (size_t j = 0; j < per_sample; j++)
            img[j] = (uint8_t)(((unsigned)proto[j] + (unsigned)(herd_rng_next(&pixel) >> 56) + 1) / 2);
        r = pixel;
    }
    free(protos);
    ds->n = n;
    ds->c = (int)v[0];
    ds->h = (int)v[1];
    ds->w = (int)v[2];
    ds->classes = (int)v[3];
    ds->images = images;
    ds->images_mapped = mapped;
    ds->labels = labels;
    return HERD_OK;
}
