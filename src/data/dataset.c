/* herd_dataset_open and friends: picks a reader from the spec and sets normalisation.
 *
 * Normalisation statistics always describe the TRAIN split, so train and test are
 * normalised identically (as in the usual PyTorch recipes):
 *   fashion-mnist  the published constants 0.2860 / 0.3530;
 *   idx:DIR[,CLASSES]  computed from DIR's train images (when opening the test split the train
 *                  images file is read once for this; if it is absent, the test split's own);
 *   cifar10:DIR    the published CIFAR-10 per-channel constants;
 *   synthetic      0.5 / 0.25 (roughly what the generator produces);
 *   tokens:FILE    none: token ids go to the model as they are. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/hugepages.h"
#include "data/dataset.h"

#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
/* IDX files carry no class count: MNIST-style data sets have 10 unless the spec says. */
#define IDX_DEFAULT_CLASSES 10
#define IDX_MAX_CLASSES 256 /* labels are bytes */
#define TOKENS_DEFAULT_VOCAB 50257 /* GPT-2's, which llm.c's files use */
#define TOKENS_MAX_VOCAB 65536     /* tokens are uint16 */

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

/* "PATH" or "PATH,COUNT" into path and *count (def when absent): a last comma followed
 * only by digits gives the count (any other comma belongs to the path's name). */
static herd_status split_count(const char *kind, const char *what, const char *args, int def,
                               int max, const char *format, char *path, size_t len, int *count)
{
    const char *comma = strrchr(args, ',');
    size_t digits = comma ? strspn(comma + 1, "0123456789") : 0;
    if (!comma || digits == 0 || comma[1 + digits] != '\0') {
        snprintf(path, len, "%s", args);
        *count = def;
        return HERD_OK;
    }
    long n = digits > 6 ? (long)max + 1 : strtol(comma + 1, NULL, 10);
    if (n < 2 || n > max || comma == args)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s:%s: the %s after the comma must be in 2..%d "
                        "and follow a %s (format %s)", kind, args, what, max,
                        strcmp(kind, "idx") == 0 ? "directory" : "file", format);
    snprintf(path, len, "%.*s", (int)(comma - args), args);
    *count = (int)n;
    return HERD_OK;
}

static herd_status open_idx_spec(const char *args, herd_split split, herd_dataset *ds)
{
    char dir[sizeof ds->spec];
    int classes = 0;
    HERD_TRY(split_count("idx", "class count", args, IDX_DEFAULT_CLASSES, IDX_MAX_CLASSES,
                         "idx:DIR[,CLASSES]", dir, sizeof dir, &classes));
    return open_idx_dir(dir, split, false, classes, ds);
}

/* The training file, or for the test split its validation sibling as llm.c names them:
 * the last "_train" of the file's name becomes "_val" (tiny_shakespeare_train.bin ->
 * tiny_shakespeare_val.bin, fineweb_train_000001.bin -> fineweb_val_000001.bin). */
static herd_status open_tokens_spec(const char *args, herd_split split, herd_dataset *ds)
{
    char path[sizeof ds->spec], val[sizeof ds->spec + 8];
    int vocab = 0;
    HERD_TRY(split_count("tokens", "vocabulary", args, TOKENS_DEFAULT_VOCAB, TOKENS_MAX_VOCAB,
                         "tokens:FILE[,VOCAB]", path, sizeof path, &vocab));
    if (split == HERD_SPLIT_TRAIN)
        return herd_tokens_load(path, vocab, ds);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *at = NULL;
    for (const char *p = strstr(base, "_train"); p; p = strstr(p + 1, "_train"))
        at = p;
    if (!at)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "tokens:%s: no validation file: name the training "
                        "file NAME_train.bin so that NAME_val.bin beside it is the validation split",
                        path);
    snprintf(val, sizeof val, "%.*s_val%s", (int)(at - path), path, at + 6);
    return herd_tokens_load(val, vocab, ds);
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
    if (strncmp(spec, "tokens:", 7) == 0 && spec[7])
        return open_tokens_spec(spec + 7, split, ds);
    if (strncmp(spec, "synthetic:", 10) == 0) {
        HERD_TRY(herd_synthetic_make(spec + 10, split, ds));
        for (int c = 0; c < 3; c++) {
            ds->mean[c] = 0.5f;
            ds->std[c] = 0.25f;
        }
        return HERD_OK;
    }
    return HERD_ERR(HERD_ERR_INVALID_ARG, "unknown dataset '%s'; use fashion-mnist, idx:DIR[,CLASSES], "
                    "cifar10:DIR, synthetic:C,H,W,CLASSES[,N] or tokens:FILE[,VOCAB]", spec);
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
    if (ds->images_mapped)
        herd_huge_unmap(ds->images, ds->images_mapped);
    else
        free(ds->images);
    free(ds->labels);
    free(ds->tokens);
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
    if (ds->tokens && ds->h == 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: set the sequence length before truncating "
                        "token data (herd_dataset_set_seq_len)", ds->spec);
    /* Asking for more than there is keeps everything, so "--limit" works on any dataset. */
    if (n < ds->n)
        ds->n = n;
    return HERD_OK;
}

herd_status herd_dataset_set_seq_len(herd_dataset *ds, int seq_len)
{
    if (!ds || !ds->tokens)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: a sequence length applies to token data only",
                        ds ? ds->spec : "herd_dataset_set_seq_len");
    /* Each sequence's labels reach one token past it, hence the - 1. */
    if (seq_len < 1 || (size_t)seq_len > ds->n_tokens - 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: sequence length %d must be in 1..%zu (the "
                        "file's %zu tokens less one)", ds->spec, seq_len, ds->n_tokens - 1,
                        ds->n_tokens);
    ds->h = seq_len;
    ds->n = (ds->n_tokens - 1) / (size_t)seq_len;
    return HERD_OK;
}

int herd_dataset_seq_len(const herd_dataset *ds, bool *token_data)
{
    if (token_data)
        *token_data = ds && ds->tokens;
    return ds && ds->tokens ? ds->h : 0;
}
