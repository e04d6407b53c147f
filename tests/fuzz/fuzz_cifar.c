/* CIFAR-10 binary batch (test_batch.bin): accepted means a whole number of 3073-byte
 * records, each label 0..9, 3 x 32 x 32 images holding the file's bytes. */
#include "data/dataset.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fz_path(path, sizeof path, "test_batch.bin");
    fz_write(path, data, size);
    herd_dataset ds = {0};
    if (herd_cifar10_load(fz_dir(), HERD_SPLIT_TEST, &ds) != HERD_OK)
        return 0;
    FZ_CHECK(ds.c == 3 && ds.h == 32 && ds.w == 32 && ds.classes == 10, "shape %dx%dx%d, %d classes",
             ds.c, ds.h, ds.w, ds.classes);
    FZ_CHECK(ds.n > 0 && ds.n * 3073 == size, "%zu records from %zu bytes", ds.n, size);
    for (size_t i = 0; i < ds.n; i++) {
        FZ_CHECK(ds.labels[i] >= 0 && ds.labels[i] < 10, "label %d at %zu", ds.labels[i], i);
        FZ_CHECK(ds.labels[i] == data[i * 3073], "label %zu differs from the file", i);
        FZ_CHECK(memcmp(ds.images + i * 3072, data + i * 3073 + 1, 3072) == 0, "image %zu differs", i);
    }
    free(ds.images);
    free(ds.labels);
    return 0;
}
