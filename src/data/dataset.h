/* Datasets live in memory as uint8 images (N x C x H x W) and int32 labels;
 * the loader turns them into normalised float batches in background threads. */
#ifndef HERD_DATA_DATASET_H
#define HERD_DATA_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/herd.h"

struct herd_dataset {
    char spec[512];
    int c, h, w, classes;
    size_t n;
    uint8_t *images;  /* n * c * h * w */
    size_t images_mapped; /* its bytes when herd_huge_map gave it (freed by herd_huge_unmap), else 0 */
    int32_t *labels;  /* n */
    float mean[3], std[3]; /* per-channel normalisation applied by the loader (on [0,1] pixels) */
    /* Token data instead of images (then images and labels are NULL): n sequences of
     * h tokens (h: the sequence length, 0 until set), labels taken from the stream. */
    uint16_t *tokens;
    size_t n_tokens;
};

/* XXH3 of the images and labels of the first n samples (0 for token data, whose files
 * run to gigabytes): the rank signature compares it, so ranks handed different arrays
 * are named instead of training on a mixture. */
uint64_t herd_dataset_content_hash(const herd_dataset *ds);

/* Format readers (src/data/idx.c, cifar10.c, synthetic.c). Errors name the file and the problem.
 * Every label must lie in [0, classes), the data set's declared class count. */
herd_status herd_idx_load(const char *images_path, const char *labels_path, int classes,
                          herd_dataset *ds);
herd_status herd_cifar10_load(const char *dir, herd_split split, herd_dataset *ds);
herd_status herd_tokens_load(const char *path, int vocab, herd_dataset *ds);
herd_status herd_synthetic_make(const char *args, herd_split split, herd_dataset *ds);
/* Per-channel mean/std on [0,1] pixels of an idx3 images file (normalising a test split
 * with its train split's statistics). */
herd_status herd_idx_pixel_stats(const char *images_path, float *mean, float *std);
/* Per-channel mean/std on [0,1] pixels of n images of c channels of hw pixels each. */
void herd_pixel_stats(const uint8_t *images, size_t n, int c, size_t hw, float *mean, float *std);

/* Batches in training order. */
typedef struct herd_loader herd_loader;

typedef struct herd_loader_config {
    int batch_size;
    bool shuffle;      /* one permutation per epoch from (seed, epoch) */
    bool augment;      /* random crop with 4 pixels of padding, horizontal flip */
    bool drop_last;    /* drop a final partial batch (otherwise it is shorter) */
    uint64_t seed;
    int prefetch;      /* batches prepared ahead (>= 1) */
    int workers;       /* background threads (>= 1) */
    int shard_rank, shard_count; /* this worker's disjoint slice of every epoch's order; every
                                    shard gets the same number and sizes of batches (see loader.c) */
} herd_loader_config;

typedef struct herd_batch {
    const float *x;         /* n x c x h x w, normalised */
    const int32_t *labels;  /* n; token data: n x T, one per position */
    int n;
    double wait_s;          /* time the caller blocked waiting for this batch */
} herd_batch;

herd_status herd_loader_create(const herd_dataset *ds, const herd_loader_config *cfg,
                               herd_loader **out);
/* Starts an epoch (0-based) at position first_sample (0..n) of its permutation: a
 * resume, whatever shard count or batch consumed the samples before; background
 * threads begin work. */
herd_status herd_loader_start_epoch(herd_loader *l, int epoch, long first_sample);
/* Batches of a whole epoch (from position 0), for this shard. */
long herd_loader_batches_per_epoch(const herd_loader *l);
/* Batches of the current epoch not yet received. */
long herd_loader_batches_left(const herd_loader *l);
/* Permutation positions consumed by the batches received so far in this epoch, over
 * all shards (n once the epoch is done; a wrapped last batch counts up to n). */
long herd_loader_position(const herd_loader *l);
/* Next batch of the epoch; *has is false after the last one. The batch stays valid
 * until the next call to any loader function on l. */
herd_status herd_loader_next(herd_loader *l, herd_batch *b, bool *has);
void herd_loader_free(herd_loader *l);

#endif
