/* CIFAR-10 binary batches: records of 1 label byte + 3072 pixel bytes (R, G, B planes of 32x32). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/hugepages.h"
#include "data/dataset.h"

#define CIFAR_SIDE 32
#define CIFAR_PIXELS (3 * CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_CLASSES 10
#define CIFAR_TRAIN_FILES 5

static void cifar_path(char *buf, size_t len, const char *dir, herd_split split, int i)
{
    if (split == HERD_SPLIT_TEST)
        snprintf(buf, len, "%s/test_batch.bin", dir);
    else
        snprintf(buf, len, "%s/data_batch_%d.bin", dir, i + 1);
}

/* Size in records of one batch file, validated before anything is allocated. */
static herd_status cifar_records(const char *path, size_t *records)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return HERD_ERR(HERD_ERR_IO, "%s: cannot open: %s (a CIFAR-10 binary dataset needs "
                        "data_batch_1..5.bin and test_batch.bin)", path, strerror(errno));
    size_t size = (size_t)sb.st_size;
    if (size == 0 || size % CIFAR_RECORD != 0)
        return HERD_ERR(HERD_ERR_FORMAT, "%s: size %zu bytes is not a positive multiple of the "
                        "%d-byte CIFAR-10 record; truncated or not the binary version", path, size,
                        CIFAR_RECORD);
    *records = size / CIFAR_RECORD;
    return HERD_OK;
}

static herd_status cifar_read(const char *path, size_t records, uint8_t *images, int32_t *labels)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return HERD_ERR(HERD_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    uint8_t rec[CIFAR_RECORD];
    herd_status st = HERD_OK;
    for (size_t i = 0; i < records; i++) {
        if (fread(rec, 1, CIFAR_RECORD, f) != CIFAR_RECORD) {
            st = HERD_ERR(HERD_ERR_IO, "%s: read failed at record %zu (file changed while reading?)",
                          path, i);
            break;
        }
        if (rec[0] >= CIFAR_CLASSES) {
            st = HERD_ERR(HERD_ERR_FORMAT, "%s: record %zu has label %d, expected 0..9 "
                          "(CIFAR-100 files are not supported)", path, i, rec[0]);
            break;
        }
        labels[i] = rec[0];
        memcpy(images + i * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS);
    }
    fclose(f);
    return st;
}

herd_status herd_cifar10_load(const char *dir, herd_split split, herd_dataset *ds)
{
    int files = split == HERD_SPLIT_TEST ? 1 : CIFAR_TRAIN_FILES;
    char path[4096];
    size_t records[CIFAR_TRAIN_FILES], total = 0;
    for (int i = 0; i < files; i++) {
        cifar_path(path, sizeof path, dir, split, i);
        HERD_TRY(cifar_records(path, &records[i]));
        total += records[i];
    }
    uint8_t *images = malloc(total * CIFAR_PIXELS);
    herd_huge_advise(images, total * CIFAR_PIXELS);
    int32_t *labels = herd_xcalloc(total, sizeof *labels);
    if (!images || !labels) {
        free(images);
        free(labels);
        return images ? HERD_ERR_NOMEM : HERD_NOMEM(total * CIFAR_PIXELS);
    }
    size_t at = 0;
    for (int i = 0; i < files; i++) {
        cifar_path(path, sizeof path, dir, split, i);
        herd_status st = cifar_read(path, records[i], images + at * CIFAR_PIXELS, labels + at);
        if (st != HERD_OK) {
            free(images);
            free(labels);
            return st;
        }
        at += records[i];
    }
    ds->n = total;
    ds->c = 3;
    ds->h = ds->w = CIFAR_SIDE;
    ds->classes = CIFAR_CLASSES;
    ds->images = images;
    ds->labels = labels;
    return HERD_OK;
}
