/* IDX (MNIST) images + labels, raw or gzip: input = CLASSES byte, images file,
 * FZ_SEP, labels file. Accepted: n > 0 images of 1 x h x w, every label in
 * 0..classes-1, a raw file exactly header + data, pixels and labels the file's bytes;
 * the pixel statistics of an accepted images file are in [0, 1]. */
#include <math.h>

#include "data/dataset.h"
#include "fuzz.h"

static uint32_t be32(const uint8_t *b) { return (uint32_t)b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3]; }
static int gz(const uint8_t *p, size_t n) { return n >= 2 && p[0] == 0x1f && p[1] == 0x8b; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int classes = 1 + data[0] % 64;
    const uint8_t *part[2];
    size_t len[2];
    if (fz_split(data + 1, size - 1, part, len, 2) != 2)
        return 0;
    char ipath[512], lpath[512];
    fz_path(ipath, sizeof ipath, "images-idx3-ubyte");
    fz_path(lpath, sizeof lpath, "labels-idx1-ubyte");
    fz_write(ipath, part[0], len[0]);
    fz_write(lpath, part[1], len[1]);
    herd_dataset ds = {0};
    if (herd_idx_load(ipath, lpath, classes, &ds) != HERD_OK)
        return 0;
    FZ_CHECK(ds.n > 0 && ds.c == 1 && ds.h > 0 && ds.w > 0, "n %zu c %d h %d w %d", ds.n, ds.c, ds.h, ds.w);
    FZ_CHECK(ds.classes == classes, "classes %d, declared %d", ds.classes, classes);
    size_t px = ds.n * (size_t)ds.h * (size_t)ds.w;
    for (size_t i = 0; i < ds.n; i++)
        FZ_CHECK(ds.labels[i] >= 0 && ds.labels[i] < classes, "label %d at %zu", ds.labels[i], i);
    if (!gz(part[0], len[0])) {
        FZ_CHECK(len[0] == 16 + px, "raw images file of %zu bytes for %zu pixels", len[0], px);
        FZ_CHECK(be32(part[0] + 4) == ds.n && be32(part[0] + 8) == (uint32_t)ds.h &&
                 be32(part[0] + 12) == (uint32_t)ds.w, "dimensions differ from the header");
        FZ_CHECK(memcmp(ds.images, part[0] + 16, px) == 0, "pixels differ from the file");
    }
    if (!gz(part[1], len[1])) {
        FZ_CHECK(len[1] == 8 + ds.n, "raw labels file of %zu bytes for %zu labels", len[1], ds.n);
        for (size_t i = 0; i < ds.n; i++)
            FZ_CHECK(ds.labels[i] == part[1][8 + i], "label %zu differs from the file", i);
    }
    float mean[3] = {-1, -1, -1}, std[3] = {-1, -1, -1};
    FZ_CHECK(herd_idx_pixel_stats(ipath, mean, std) == HERD_OK, "stats of an accepted file fail: %s",
             herd_last_error());
    FZ_CHECK(mean[0] >= 0 && mean[0] <= 1 && std[0] >= 0 && std[0] <= 1 && isfinite(std[0]),
             "mean %g std %g", mean[0], std[0]);
    free(ds.images);
    free(ds.labels);
    return 0;
}
