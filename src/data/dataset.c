/* herd_dataset_open and friends: picks a reader from the spec and sets normalisation.
 *
 * Normalisation statistics always describe the TRAIN split, so train and test are
 * normalised identically (as in the usual PyTorch recipes):
 *   fashion-mnist  the published constants 0.2860 / 0.3530;
 *   idx:DIR[,CLASSES]  computed from DIR's train images (when opening the test split the train
 *                  images file is read once for this; if it is absent, the test split's own);
 *   cifar10:DIR    the published CIFAR-10 per-channel constants;
 *   synthetic      0.5 / 0.25 (roughly what the generator produces). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "data/dataset.h"

#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
/* IDX files carry no class count: MNIST-style data sets have 10 unless the spec says. */
#define IDX_DEFAULT_CLASSES 10
#define IDX_MAX_CLASSES 256 /* labels are bytes */

void herd_pixel_stats(const uint8_t *images, size_t n, int c, size_t hw, float *mean, float *std)
{
    /* A histogram keeps the sums exact however many pixels there are. */
    for (int ch = 0; ch < c; ch++) {
        uint64_t hist[256] = {0};
        for (size_t i = 0; i < n; i++) {
            const uint8_t *p = images + (i * (size_t)c + (size_t)ch) * hw;
            for (size_t j = 0; j < hw; j++)
                hist[p[j]]++;
        }
        double count = 0, sum = 0, sum_sq = 0;
        for (int v = 0; v < 256; v++) {
            double x = v / 255.0;
            count += (double)hist[v];
            sum += (double)hist[v] * x;
            sum_sq += (double)hist[v] * x * x;
        }
        double m = count > 0 ? sum / count : 0.0;
        double var = count > 0 ? sum_sq / count - m * m : 0.0;
        double s = var > 0 ? sqrt(var) : 0.0;
        mean[ch] = (float)m;
        std[ch] = s > 1e-6 ? (float)s : 1.0f; /* a constant channel must not divide by zero */
    }
}

/* Finds DIR/base or DIR/base.gz; out receives the path. */
static herd_status find_idx_file(const char *dir, const char *base, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", dir, base);
    if (access(out, F_OK) == 0)
        return HERD_OK;
    snprintf(out, len, "%s/%s.gz", dir, base);
    if (access(out, F_OK) == 0)
        return HERD_OK;
    return HERD_ERR(HERD_ERR_IO, "%s: neither %s nor %s.gz found there (an idx:DIR dataset needs "
                    "MNIST-style files such as train-images-idx3-ubyte.gz)", dir, base, base);
}

static herd_status open_idx_dir(const char *dir, herd_split split, bool known_fashion,
                                int classes, herd_dataset *ds)
{
    const char *prefix = split == HERD_SPLIT_TEST ? "t10k" : "train";
    char base[64], images[4096], labels[4096];
    snprintf(base, sizeof base, "%s-images-idx3-ubyte", prefix);
    HERD_TRY(find_idx_file(dir, base, images, sizeof images));
    snprintf(base, sizeof base, "%s-labels-idx1-ubyte", prefix);
    HERD_TRY(find_idx_file(dir, base, labels, sizeof labels));
    HERD_TRY(herd_idx_load(images, labels, classes, ds));
    if (known_fashion) {
        ds->mean[0] = 0.2860f;
        ds->std[0] = 0.3530f;
        return HERD_OK;
    }
    char train_images[4096];
    if (split == HERD_SPLIT_TEST &&
        find_idx_file(dir, "train-images-idx3-ubyte", train_images, sizeof train_images) == HERD_OK)
        return herd_idx_pixel_stats(train_images, ds->mean, ds->std);
    herd_pixel_stats(ds->images, ds->n, 1, (size_t)ds->h * ds->w, ds->mean, ds->std);
    return HERD_OK;
}

/* "DIR" or "DIR,CLASSES": a last comma followed only by digits gives the class count
 * (any other comma belongs to the directory's name). */
static herd_status open_idx_spec(const char *args, herd_split split, herd_dataset *ds)
{
    const char *comma = strrchr(args, ',');
    size_t digits = comma ? strspn(comma + 1, "0123456789") : 0;
    if (!comma || digits == 0 || comma[1 + digits] != '\0')
        return open_idx_dir(args, split, false, IDX_DEFAULT_CLASSES, ds);
    long classes = digits > 3 ? IDX_MAX_CLASSES + 1 : strtol(comma + 1, NULL, 10);
    if (classes < 2 || classes > IDX_MAX_CLASSES || comma == args)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "idx:%s: the class count after the comma must be "
                        "in 2..%d and follow a directory (format idx:DIR[,CLASSES])", args,
                        IDX_MAX_CLASSES);
    char dir[sizeof ds->spec];
    snprintf(dir, sizeof dir, "%.*s", (int)(comma - args), args);
    return open_idx_dir(dir, split, false, (int)classes, ds);
}

static herd_status open_spec(const char *spec, herd_split split, herd_dataset *ds)
{
    if (strcmp(spec, "fashion-mnist") == 0) {
        if (access(FASHION_MNIST_DIR, F_OK) != 0)
            return HERD_ERR(HERD_ERR_IO, "fashion-mnist: %s not found; install the Debian package "
                            "dataset-fashion-mnist (scripts/install-deps.sh)", FASHION_MNIST_DIR);
        return open_idx_dir(FASHION_MNIST_DIR, split, true, IDX_DEFAULT_CLASSES, ds);
    }
    if (strncmp(spec, "idx:", 4) == 0 && spec[4])
        return open_idx_spec(spec + 4, split, ds);
    if (strncmp(spec, "cifar10:", 8) == 0 && spec[8]) {
        static const float mean[3] = {0.4914f, 0.4822f, 0.4465f};
        static const float std[3] = {0.2470f, 0.2435f, 0.2616f};
        HERD_TRY(herd_cifar10_load(spec + 8, split, ds));
        memcpy(ds->mean, mean, sizeof mean);
        memcpy(ds->std, std, sizeof std);
        return HERD_OK;
    }
    if (strncmp(spec, "synthetic:", 10) == 0) {
        HERD_TRY(herd_synthetic_make(spec + 10, split, ds));
        for (int c = 0; c < 3; c++) {
            ds->mean[c] = 0.5f;
            ds->std[c] = 0.25f;
        }
        return HERD_OK;
    }
    return HERD_ERR(HERD_ERR_INVALID_ARG, "unknown dataset '%s'; use fashion-mnist, idx:DIR[,CLASSES], "
                    "cifar10:DIR or synthetic:C,H,W,CLASSES[,N]", spec);
}

herd_status herd_dataset_open(const char *spec, herd_split split, herd_dataset **out)
{
    if (!spec || !out || (split != HERD_SPLIT_TRAIN && split != HERD_SPLIT_TEST))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_dataset_open: spec and out must be set and "
                        "split must be train or test");
    *out = NULL;
    if (strlen(spec) >= sizeof((herd_dataset *)0)->spec)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "dataset spec is too long (%zu characters)",
                        strlen(spec));
    herd_dataset *ds = herd_xcalloc(1, sizeof *ds);
    if (!ds)
        return HERD_ERR_NOMEM;
    snprintf(ds->spec, sizeof ds->spec, "%s", spec);
    herd_status st = open_spec(spec, split, ds);
    if (st != HERD_OK) {
        herd_dataset_free(ds);
        return st;
    }
    *out = ds;
    return HERD_OK;
}

void herd_dataset_free(herd_dataset *ds)
{
    if (!ds)
        return;
    free(ds->images);
    free(ds->labels);
    free(ds);
}

size_t herd_dataset_size(const herd_dataset *ds) { return ds ? ds->n : 0; }

void herd_dataset_shape(const herd_dataset *ds, int *c, int *h, int *w, int *classes)
{
    if (c)
        *c = ds->c;
    if (h)
        *h = ds->h;
    if (w)
        *w = ds->w;
    if (classes)
        *classes = ds->classes;
}

herd_status herd_dataset_truncate(herd_dataset *ds, size_t n)
{
    if (!ds || n == 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_dataset_truncate: need a dataset and n >= 1");
    /* Asking for more than there is keeps everything, so "--limit" works on any dataset. */
    if (n < ds->n)
        ds->n = n;
    return HERD_OK;
}
