/* Dataset readers and the batch loader. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/hugepages.h"
#include "data/dataset.h"

/* ------------------------------------------------------------ fabricated files */

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* An idx3 image file of n images of rows x cols, pixel = (i * 7 + j) & 255. */
static uint8_t *make_idx_images(uint32_t n, uint32_t rows, uint32_t cols, size_t *len)
{
    *len = 16 + (size_t)n * rows * cols;
    uint8_t *b = malloc(*len);
    put_be32(b, 0x803);
    put_be32(b + 4, n);
    put_be32(b + 8, rows);
    put_be32(b + 12, cols);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < (size_t)rows * cols; j++)
            b[16 + i * rows * cols + j] = (uint8_t)((i * 7 + j) & 255);
    return b;
}

static uint8_t *make_idx_labels(uint32_t n, size_t *len)
{
    *len = 8 + n;
    uint8_t *b = malloc(*len);
    put_be32(b, 0x801);
    put_be32(b + 4, n);
    for (uint32_t i = 0; i < n; i++)
        b[8 + i] = (uint8_t)(i % 10);
    return b;
}

static char *write_gz(const char *dir, const char *name, const void *data, size_t len)
{
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(path, "%s/%s", dir, name);
    gzFile g = gzopen(path, "wb");
    assert_non_null(g);
    assert_int_equal(gzwrite(g, data, (unsigned)len), (int)len);
    assert_int_equal(gzclose(g), Z_OK);
    return path;
}

static void write_idx_pair(const char *dir, const char *prefix, uint32_t n, bool gz)
{
    size_t il, ll;
    uint8_t *img = make_idx_images(n, 4, 3, &il), *lab = make_idx_labels(n, &ll);
    char name[128];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte%s", prefix, gz ? ".gz" : "");
    free(gz ? write_gz(dir, name, img, il) : tu_write_file(dir, name, img, il));
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte%s", prefix, gz ? ".gz" : "");
    free(gz ? write_gz(dir, name, lab, ll) : tu_write_file(dir, name, lab, ll));
    free(img);
    free(lab);
}

static void check_idx_dataset(const herd_dataset *ds, size_t n)
{
    int c, h, w, classes;
    herd_dataset_shape(ds, &c, &h, &w, &classes);
    assert_int_equal(herd_dataset_size(ds), n);
    assert_int_equal(c, 1);
    assert_int_equal(h, 4);
    assert_int_equal(w, 3);
    assert_int_equal(classes, 10);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ds->labels[i], (int)(i % 10));
        for (size_t j = 0; j < 12; j++)
            assert_int_equal(ds->images[i * 12 + j], (i * 7 + j) & 255);
    }
}

static void test_idx_raw_and_gzip(void **state)
{
    (void)state;
    for (int gz = 0; gz < 2; gz++) {
        char *dir = tu_tempdir();
        write_idx_pair(dir, "train", 23, gz);
        write_idx_pair(dir, "t10k", 7, gz);
        char spec[256];
        snprintf(spec, sizeof spec, "idx:%s", dir);
        herd_dataset *train, *test;
        assert_herd_ok(herd_dataset_open(spec, HERD_SPLIT_TRAIN, &train));
        assert_herd_ok(herd_dataset_open(spec, HERD_SPLIT_TEST, &test));
        check_idx_dataset(train, 23);
        check_idx_dataset(test, 7);
        assert_string_equal(train->spec, spec);
        /* Both splits normalise with the train split's statistics. */
        float mean, std;
        herd_pixel_stats(train->images, train->n, 1, 12, &mean, &std);
        assert_float_equal(train->mean[0], mean, 1e-6);
        assert_float_equal(test->mean[0], mean, 1e-6);
        assert_float_equal(test->std[0], std, 1e-6);
        assert_true(mean > 0.05f && mean < 0.95f && std > 0.01f);
        herd_dataset_free(train);
        herd_dataset_free(test);
        tu_rmtree(dir);
        free(dir);
    }
}

/* One gzip member of data, stored (level 0) so its size follows the input's. */
static size_t gz_member(const uint8_t *data, size_t len, uint8_t *out, size_t cap)
{
    z_stream z = {0};
    assert_int_equal(deflateInit2(&z, 0, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)len;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    size_t n = cap - z.avail_out;
    deflateEnd(&z);
    return n;
}

/* Two gzip members whose boundary falls one byte before the end of the reader's
 * 128 KiB input buffer: the second member's magic straddles two reads. */
static void test_idx_gzip_member_at_buffer_edge(void **state)
{
    (void)state;
    size_t il, ll;
    uint8_t *img = make_idx_images(12000, 4, 3, &il), *lab = make_idx_labels(12000, &ll);
    size_t cap = il + 4096, target = (1u << 17) - 1, split = target - 40, first = 0;
    uint8_t *gz = malloc(cap);
    for (int tries = 0; tries < 50 && first != target; tries++) {
        first = gz_member(img, split, gz, cap);
        split = (size_t)((long)split + (long)target - (long)first);
    }
    assert_int_equal(first, target);
    size_t second = gz_member(img + split, il - split, gz + first, cap - first);
    char *dir = tu_tempdir();
    char *img_path = tu_write_file(dir, "images.gz", gz, first + second);
    char *lab_path = tu_write_file(dir, "labels", lab, ll);
    herd_dataset ds = {0};
    assert_herd_ok(herd_idx_load(img_path, lab_path, 10, &ds));
    assert_int_equal(ds.n, 12000);
    assert_memory_equal(ds.images, img + 16, il - 16);
    free(ds.images);
    free(ds.labels);
    tu_rmtree(dir);
    free(dir), free(img_path), free(lab_path), free(gz), free(img), free(lab);
}

static void test_idx_errors(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    herd_dataset ds;
    size_t il, ll;
    uint8_t *img = make_idx_images(10, 4, 3, &il), *lab = make_idx_labels(10, &ll);
    char *good_img = tu_write_file(dir, "good-images", img, il);
    char *good_lab = tu_write_file(dir, "good-labels", lab, ll);

    memset(&ds, 0, sizeof ds);
    tu_expect_error(herd_idx_load("/nonexistent/imgs", good_lab, 10, &ds), HERD_ERR_IO,
                 "/nonexistent/imgs", "cannot open");

    /* Labels magic in an images file. */
    char *wrong = tu_write_file(dir, "wrong-magic", lab, ll);
    tu_expect_error(herd_idx_load(wrong, good_lab, 10, &ds), HERD_ERR_FORMAT, "wrong-magic", "magic");
    tu_expect_error(herd_idx_load(good_img, good_img, 10, &ds), HERD_ERR_FORMAT, "good-images",
                 "0x00000801");

    char *cut = tu_write_file(dir, "cut-images", img, il - 5);
    tu_expect_error(herd_idx_load(cut, good_lab, 10, &ds), HERD_ERR_FORMAT, "cut-images", "truncated");
    char msg[128];
    snprintf(msg, sizeof msg, "expected %zu bytes, got %zu", il, il - 5);
    assert_non_null(strstr(herd_last_error(), msg));

    char *cut_lab = tu_write_file(dir, "cut-labels", lab, ll - 1);
    tu_expect_error(herd_idx_load(good_img, cut_lab, 10, &ds), HERD_ERR_FORMAT, "cut-labels", "truncated");
    char *header_only = tu_write_file(dir, "tiny", img, 6);
    tu_expect_error(herd_idx_load(header_only, good_lab, 10, &ds), HERD_ERR_FORMAT, "tiny", "truncated");

    /* A gzip stream cut in the middle. */
    char *gz = write_gz(dir, "full.gz", img, il);
    FILE *f = fopen(gz, "rb");
    uint8_t buf[4096];
    size_t gl = fread(buf, 1, sizeof buf, f);
    fclose(f);
    char *gz_cut = tu_write_file(dir, "cut.gz", buf, gl / 2);
    tu_expect_error(herd_idx_load(gz_cut, good_lab, 10, &ds), HERD_ERR_FORMAT, "cut.gz", "truncated");

    /* Valid gzip header, corrupt deflate data. */
    memset(buf + 10, 0xff, gl > 30 ? 20 : gl - 10);
    char *gz_bad = tu_write_file(dir, "bad.gz", buf, gl);
    tu_expect_error(herd_idx_load(gz_bad, good_lab, 10, &ds), HERD_ERR_FORMAT, "bad.gz", "gzip");

    size_t ll2;
    uint8_t *lab9 = make_idx_labels(9, &ll2);
    char *short_lab = tu_write_file(dir, "nine-labels", lab9, ll2);
    tu_expect_error(herd_idx_load(good_img, short_lab, 10, &ds), HERD_ERR_FORMAT, "nine-labels", "10 images");

    /* An absurd header must not allocate terabytes. */
    put_be32(img + 4, 0x7fffffff);
    put_be32(img + 8, 4000);
    char *huge = tu_write_file(dir, "huge", img, il);
    tu_expect_error(herd_idx_load(huge, good_lab, 10, &ds), HERD_ERR_FORMAT, "huge", "implausible");

    char spec[256];
    snprintf(spec, sizeof spec, "idx:%s", dir);
    herd_dataset *out = (herd_dataset *)1;
    tu_expect_error(herd_dataset_open(spec, HERD_SPLIT_TRAIN, &out), HERD_ERR_IO,
                 "train-images-idx3-ubyte", dir);
    assert_null(out);
    tu_expect_error(herd_dataset_open("nope", HERD_SPLIT_TRAIN, &out), HERD_ERR_INVALID_ARG, "nope",
                 NULL);

    char *paths[] = {good_img, good_lab, wrong, cut, cut_lab, header_only, gz, gz_cut, gz_bad,
                     short_lab, huge};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++)
        free(paths[i]);
    free(img);
    free(lab);
    free(lab9);
    tu_rmtree(dir);
    free(dir);
}

/* Writes a file of the parts given, one after another. */
static char *write_parts(const char *dir, const char *name, const void *a, size_t al, const void *b,
                         size_t bl)
{
    uint8_t *buf = malloc(al + bl + 1);
    memcpy(buf, a, al);
    memcpy(buf + al, b, bl);
    char *p = tu_write_file(dir, name, buf, al + bl);
    free(buf);
    return p;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    return (uint8_t *)tu_read_file(path, len);
}

/* Labels outside the declared class count, and bytes after the declared data. */
static void test_idx_strict(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char spec[512], msg[512];
    herd_dataset *out = (herd_dataset *)1;
    write_idx_pair(dir, "train", 12, false);
    write_idx_pair(dir, "t10k", 5, false);
    size_t ll;
    uint8_t *lab = make_idx_labels(12, &ll);

    /* A training label of 200 used to build a 201-class model. */
    lab[8 + 3] = 200;
    free(tu_write_file(dir, "train-labels-idx1-ubyte", lab, ll));
    snprintf(spec, sizeof spec, "idx:%s", dir);
    snprintf(msg, sizeof msg, "%s/train-labels-idx1-ubyte: sample 3 has label 200, outside 0..9 "
             "for 10 classes", dir);
    tu_expect_error(herd_dataset_open(spec, HERD_SPLIT_TRAIN, &out), HERD_ERR_FORMAT, msg, NULL);
    assert_null(out);
    /* Declaring 201 classes accepts it. */
    snprintf(spec, sizeof spec, "idx:%s,201", dir);
    assert_herd_ok(herd_dataset_open(spec, HERD_SPLIT_TRAIN, &out));
    int classes;
    herd_dataset_shape(out, NULL, NULL, NULL, &classes);
    assert_int_equal(classes, 201);
    assert_int_equal(out->labels[3], 200);
    herd_dataset_free(out);
    /* The test split is checked at load time too, not blamed on the weights later. */
    lab[8 + 3] = 3;
    size_t tl;
    uint8_t *tlab = make_idx_labels(5, &tl);
    tlab[8 + 4] = 10;
    free(tu_write_file(dir, "train-labels-idx1-ubyte", lab, ll));
    free(tu_write_file(dir, "t10k-labels-idx1-ubyte", tlab, tl));
    snprintf(spec, sizeof spec, "idx:%s", dir);
    assert_herd_ok(herd_dataset_open(spec, HERD_SPLIT_TRAIN, &out));
    herd_dataset_free(out);
    tu_expect_error(herd_dataset_open(spec, HERD_SPLIT_TEST, &out), HERD_ERR_FORMAT,
                 "t10k-labels-idx1-ubyte: sample 4 has label 10, outside 0..9", NULL);
    tlab[8 + 4] = 4;
    free(tu_write_file(dir, "t10k-labels-idx1-ubyte", tlab, tl));
    /* Bad class counts. */
    const char *bad_counts[] = {",1", ",257", ",0", ",99999"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(spec, sizeof spec, "idx:%s%s", dir, bad_counts[i]);
        tu_expect_error(herd_dataset_open(spec, HERD_SPLIT_TRAIN, &out), HERD_ERR_INVALID_ARG,
                     "the class count after the comma must be in 2..256", NULL);
    }
    tu_expect_error(herd_dataset_open("idx:,10", HERD_SPLIT_TRAIN, &out), HERD_ERR_INVALID_ARG,
                 "follow a directory", NULL);
    snprintf(spec, sizeof spec, "idx:%s", dir);

    /* Bytes after the data the header declares: raw images, raw labels. */
    size_t il;
    uint8_t *img = make_idx_images(12, 4, 3, &il);
    char *p = write_parts(dir, "train-images-idx3-ubyte", img, il, "junk!", 5);
    snprintf(msg, sizeof msg, "%s: 5 bytes follow the %zu its header declares", p, il);
    tu_expect_error(herd_dataset_open(spec, HERD_SPLIT_TRAIN, &out), HERD_ERR_FORMAT, msg, NULL);
    free(p);
    free(tu_write_file(dir, "train-images-idx3-ubyte", img, il));
    p = write_parts(dir, "train-labels-idx1-ubyte", lab, ll, "\0", 1);
    snprintf(msg, sizeof msg, "%s: 1 bytes follow the %zu its header declares", p, ll);
    tu_expect_error(herd_dataset_open(spec, HERD_SPLIT_TRAIN, &out), HERD_ERR_FORMAT, msg, NULL);
    free(p);
    free(tu_write_file(dir, "train-labels-idx1-ubyte", lab, ll));

    /* gzip: trailing garbage after the stream, and more data inside it than declared. */
    char *gz = write_gz(dir, "whole.gz", img, il);
    size_t gl;
    uint8_t *gzb = slurp(gz, &gl);
    p = write_parts(dir, "trailing.gz", gzb, gl, "garbage", 7);
    herd_dataset ds;
    memset(&ds, 0, sizeof ds);
    snprintf(msg, sizeof msg, "%s: 7 bytes of trailing data follow the gzip stream (at byte %zu", p, gl);
    tu_expect_error(herd_idx_load(p, "unread", 10, &ds), HERD_ERR_FORMAT, msg, NULL);
    free(p);
    uint8_t *longer = malloc(il + 3);
    memcpy(longer, img, il);
    memset(longer + il, 7, 3);
    p = write_gz(dir, "longer.gz", longer, il + 3);
    snprintf(msg, sizeof msg, "%s: 3 uncompressed bytes follow the %zu its header declares", p, il);
    tu_expect_error(herd_idx_load(p, "unread", 10, &ds), HERD_ERR_FORMAT, msg, NULL);
    free(p);
    /* The gzip trailer (CRC and size) cut off after all the data. */
    p = tu_write_file(dir, "no-trailer.gz", gzb, gl - 8);
    tu_expect_error(herd_idx_load(p, "unread", 10, &ds), HERD_ERR_FORMAT, "no gzip trailer", NULL);
    free(p);
    /* Two gzip members back to back are one valid file. */
    char *first = write_gz(dir, "first.gz", img, 20), *second = write_gz(dir, "second.gz", img + 20, il - 20);
    size_t l1, l2;
    uint8_t *b1 = slurp(first, &l1), *b2 = slurp(second, &l2);
    p = write_parts(dir, "train-images-idx3-ubyte.gz", b1, l1, b2, l2);
    char *raw = malloc(strlen(dir) + 64);
    sprintf(raw, "%s/train-images-idx3-ubyte", dir);
    unlink(raw);
    assert_herd_ok(herd_dataset_open(spec, HERD_SPLIT_TRAIN, &out));
    assert_int_equal(out->images[11 * 12 + 5], (11 * 7 + 5) & 255);
    herd_dataset_free(out);
    free(raw);
    free(p);
    free(first);
    free(second);
    free(b1);
    free(b2);
    free(longer);
    free(gzb);
    free(gz);
    free(img);
    free(lab);
    free(tlab);
    tu_rmtree(dir);
    free(dir);
}

static void write_cifar(const char *dir, const char *name, int records, int bad_label_at,
                        size_t cut)
{
    size_t len = (size_t)records * 3073;
    uint8_t *b = malloc(len);
    for (int r = 0; r < records; r++) {
        b[(size_t)r * 3073] = (uint8_t)(r == bad_label_at ? 10 : (r * 3) % 10);
        for (int j = 0; j < 3072; j++)
            b[(size_t)r * 3073 + 1 + j] = (uint8_t)(r + j);
    }
    free(tu_write_file(dir, name, b, len - cut));
    free(b);
}

static void test_cifar10(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char name[64], spec[256];
    snprintf(spec, sizeof spec, "cifar10:%s", dir);
    herd_dataset *ds = NULL;
    tu_expect_error(herd_dataset_open(spec, HERD_SPLIT_TRAIN, &ds), HERD_ERR_IO, "data_batch_1.bin",
                 "cannot open");
    for (int i = 1; i <= 5; i++) {
        snprintf(name, sizeof name, "data_batch_%d.bin", i);
        write_cifar(dir, name, 3, -1, 0);
    }
    write_cifar(dir, "test_batch.bin", 2, -1, 0);
    assert_herd_ok(herd_dataset_open(spec, HERD_SPLIT_TRAIN, &ds));
    int c, h, w, classes;
    herd_dataset_shape(ds, &c, &h, &w, &classes);
    assert_int_equal(herd_dataset_size(ds), 15);
    assert_int_equal(c, 3);
    assert_int_equal(h, 32);
    assert_int_equal(w, 32);
    assert_int_equal(classes, 10);
    assert_int_equal(ds->labels[4], 3); /* file 2, record 1 */
    assert_int_equal(ds->images[4 * 3072 + 1025], (1 + 1025) & 255);
    assert_float_equal(ds->mean[2], 0.4465f, 1e-6);
    herd_dataset_free(ds);
    assert_herd_ok(herd_dataset_open(spec, HERD_SPLIT_TEST, &ds));
    assert_int_equal(herd_dataset_size(ds), 2);
    herd_dataset_free(ds);

    write_cifar(dir, "data_batch_3.bin", 3, -1, 100);
    tu_expect_error(herd_dataset_open(spec, HERD_SPLIT_TRAIN, &ds), HERD_ERR_FORMAT,
                 "data_batch_3.bin", "multiple");
    write_cifar(dir, "data_batch_3.bin", 3, 2, 0);
    tu_expect_error(herd_dataset_open(spec, HERD_SPLIT_TRAIN, &ds), HERD_ERR_FORMAT,
                 "data_batch_3.bin", "label 10");
    tu_rmtree(dir);
    free(dir);
}

static void test_synthetic(void **state)
{
    (void)state;
    herd_dataset *a, *b, *t;
    assert_herd_ok(herd_dataset_open("synthetic:3,8,6,5,50", HERD_SPLIT_TRAIN, &a));
    assert_herd_ok(herd_dataset_open("synthetic:3,8,6,5,50", HERD_SPLIT_TRAIN, &b));
    assert_herd_ok(herd_dataset_open("synthetic:3,8,6,5,50", HERD_SPLIT_TEST, &t));
    int c, h, w, classes;
    herd_dataset_shape(a, &c, &h, &w, &classes);
    assert_int_equal(c * 100 + h * 10 + w, 386);
    assert_int_equal(classes, 5);
    assert_int_equal(herd_dataset_size(a), 50);
    assert_memory_equal(a->images, b->images, 50 * 144);
    assert_memory_equal(a->labels, b->labels, 50 * sizeof(int32_t));
    assert_memory_not_equal(a->images, t->images, 50 * 144);
    for (int i = 0; i < 50; i++)
        assert_true(a->labels[i] >= 0 && a->labels[i] < 5);
    assert_int_equal(a->images_mapped, 0); /* 7 KB: malloc's */
    herd_dataset_free(a);
    herd_dataset_free(b);
    herd_dataset_free(t);
    assert_herd_ok(herd_dataset_open("synthetic:1,28,28,10", HERD_SPLIT_TEST, &a));
    assert_int_equal(herd_dataset_size(a), 10000);
    /* 7.8 MB written at once: whole huge pages (not under ASan, whose redzones need malloc). */
    const size_t huge = (size_t)2 << 20;
    assert_int_equal(a->images_mapped % huge, 0);
    if (herd_huge_worth(huge))
        assert_true(a->images_mapped >= 10000 * 784 && (uintptr_t)a->images % huge == 0);
    else
        assert_int_equal(a->images_mapped, 0);
    assert_herd_ok(herd_dataset_truncate(a, 100));
    assert_int_equal(herd_dataset_size(a), 100);
    herd_dataset_free(a);

    const char *bad[] = {"synthetic:", "synthetic:1,2,3", "synthetic:0,8,8,10", "synthetic:1,8,8,1",
                         "synthetic:1,-8,8,10", "synthetic:1,8,8,10,", "synthetic:1,8,8,10,0",
                         "synthetic:1,8,8,10,5,6", "synthetic:1, 8,8,10", "synthetic:4,8,8,10",
                         "synthetic:1,8,8x,10", "synthetic:3,1024,1024,10,10000000",
                         "synthetic:1,99999999999,8,10"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        herd_dataset *ds = (herd_dataset *)1;
        herd_status st = herd_dataset_open(bad[i], HERD_SPLIT_TRAIN, &ds);
        if (st != HERD_ERR_INVALID_ARG)
            fail_msg("'%s' gave %s", bad[i], herd_status_name(st));
        assert_null(ds);
        assert_non_null(strstr(herd_last_error(), "synthetic:"));
    }
}

/* ------------------------------------------------------------------- loader */

/* n samples of c x h x w; label i identifies sample i; pixel values vary with i and position. */
static herd_dataset *make_ds(size_t n, int c, int h, int w)
{
    herd_dataset *ds = calloc(1, sizeof *ds);
    ds->n = n;
    ds->c = c;
    ds->h = h;
    ds->w = w;
    ds->classes = (int)n;
    size_t per = (size_t)c * h * w;
    ds->images = malloc(n * per);
    ds->labels = malloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) {
        ds->labels[i] = (int32_t)i;
        for (size_t j = 0; j < per; j++)
            ds->images[i * per + j] = (uint8_t)(1 + (i * 31 + j * 17) % 255);
    }
    for (int ch = 0; ch < 3; ch++) {
        ds->mean[ch] = 0.25f + 0.1f * ch;
        ds->std[ch] = 0.5f - 0.1f * ch;
    }
    return ds;
}

static herd_loader_config base_cfg(int batch)
{
    herd_loader_config cfg = {.batch_size = batch, .shuffle = true, .augment = false,
                              .drop_last = false, .seed = 42, .prefetch = 2, .workers = 2,
                              .shard_rank = 0, .shard_count = 1};
    return cfg;
}

typedef struct epoch_record {
    int32_t *labels; /* in order received */
    float *x;
    int *sizes;
    long batches;
    size_t samples;
} epoch_record;

static epoch_record run_epoch(const herd_dataset *ds, const herd_loader_config *cfg, int epoch,
                              long first_sample)
{
    herd_loader *l;
    assert_herd_ok(herd_loader_create(ds, cfg, &l));
    assert_herd_ok(herd_loader_start_epoch(l, epoch, first_sample));
    size_t per = (size_t)ds->c * ds->h * ds->w;
    long nb = herd_loader_batches_per_epoch(l), left = herd_loader_batches_left(l);
    long global = (long)cfg->batch_size * cfg->shard_count, rest = (long)ds->n - first_sample;
    assert_int_equal(left, cfg->drop_last ? rest / global : (rest + global - 1) / global);
    epoch_record r = {0};
    r.labels = malloc((size_t)nb * cfg->batch_size * sizeof(int32_t));
    r.x = malloc((size_t)nb * cfg->batch_size * per * sizeof(float));
    r.sizes = calloc((size_t)nb, sizeof(int));
    herd_batch b;
    bool has;
    for (;;) {
        assert_herd_ok(herd_loader_next(l, &b, &has));
        if (!has)
            break;
        assert_true(b.wait_s >= 0);
        assert_true(b.n >= 1 && b.n <= cfg->batch_size);
        memcpy(r.labels + r.samples, b.labels, (size_t)b.n * sizeof(int32_t));
        memcpy(r.x + r.samples * per, b.x, (size_t)b.n * per * sizeof(float));
        r.sizes[r.batches++] = b.n;
        r.samples += (size_t)b.n;
    }
    assert_int_equal(r.batches, left);
    assert_int_equal(herd_loader_batches_left(l), 0);
    if (!cfg->drop_last)
        assert_int_equal(herd_loader_position(l), (long)ds->n);
    assert_herd_ok(herd_loader_next(l, &b, &has)); /* stays finished */
    assert_false(has);
    herd_loader_free(l);
    return r;
}

static void free_record(epoch_record *r)
{
    free(r->labels);
    free(r->x);
    free(r->sizes);
}

static void test_loader_covers_and_shuffles(void **state)
{
    (void)state;
    herd_dataset *ds = make_ds(103, 1, 4, 4);
    herd_loader_config cfg = base_cfg(10);
    epoch_record e0 = run_epoch(ds, &cfg, 0, 0), e0b = run_epoch(ds, &cfg, 0, 0),
                 e1 = run_epoch(ds, &cfg, 1, 0);
    assert_int_equal(e0.batches, 11);
    assert_int_equal(e0.sizes[10], 3);
    assert_int_equal(e0.samples, 103);
    int seen[103] = {0};
    for (size_t i = 0; i < 103; i++)
        seen[e0.labels[i]]++;
    for (int i = 0; i < 103; i++)
        assert_int_equal(seen[i], 1);
    assert_memory_equal(e0.labels, e0b.labels, 103 * sizeof(int32_t));
    assert_memory_not_equal(e0.labels, e1.labels, 103 * sizeof(int32_t));
    herd_loader_config other_seed = cfg;
    other_seed.seed = 43;
    epoch_record s = run_epoch(ds, &other_seed, 0, 0);
    assert_memory_not_equal(e0.labels, s.labels, 103 * sizeof(int32_t));

    cfg.drop_last = true;
    epoch_record d = run_epoch(ds, &cfg, 0, 0);
    assert_int_equal(d.batches, 10);
    assert_int_equal(d.samples, 100);
    assert_memory_equal(d.labels, e0.labels, 100 * sizeof(int32_t)); /* same permutation */

    cfg.shuffle = false;
    epoch_record o = run_epoch(ds, &cfg, 3, 0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(o.labels[i], i);

    epoch_record *all[] = {&e0, &e0b, &e1, &s, &d, &o};
    for (size_t i = 0; i < 6; i++)
        free_record(all[i]);
    herd_dataset_free(ds);
}

static void test_loader_shards(void **state)
{
    (void)state;
    herd_dataset *ds = make_ds(100, 1, 2, 2);
    for (int drop = 0; drop < 2; drop++) {
        herd_loader_config cfg = base_cfg(8);
        cfg.drop_last = drop;
        cfg.shard_count = 3;
        epoch_record r[3];
        int seen[100] = {0};
        for (int k = 0; k < 3; k++) {
            cfg.shard_rank = k;
            r[k] = run_epoch(ds, &cfg, 5, 0);
            for (size_t i = 0; i < r[k].samples; i++)
                seen[r[k].labels[i]]++;
        }
        for (int k = 1; k < 3; k++) { /* same steps and step sizes on every rank */
            assert_int_equal(r[k].batches, r[0].batches);
            assert_memory_equal(r[k].sizes, r[0].sizes, (size_t)r[0].batches * sizeof(int));
        }
        if (drop) {
            /* 4 steps of 3 x 8 = 96 distinct samples, 4 dropped. */
            assert_int_equal(r[0].batches, 4);
            int once = 0;
            for (int i = 0; i < 100; i++) {
                assert_true(seen[i] <= 1);
                once += seen[i];
            }
            assert_int_equal(once, 96);
        } else {
            /* 5 steps; the last 4 samples split 2 per rank, so 2 positions wrap around. */
            assert_int_equal(r[0].batches, 5);
            assert_int_equal(r[0].sizes[4], 2);
            int dup = 0;
            for (int i = 0; i < 100; i++) {
                assert_true(seen[i] >= 1 && seen[i] <= 2);
                dup += seen[i] - 1;
            }
            assert_int_equal(dup, 2);
        }
        /* K ranks of batch B see what one process of batch K*B sees. */
        herd_loader_config one = base_cfg(24);
        one.drop_last = drop;
        epoch_record big = run_epoch(ds, &one, 5, 0);
        for (int k = 0; k < 3; k++)
            assert_memory_equal(r[k].labels, big.labels + 8 * k, 8 * sizeof(int32_t));
        free_record(&big);
        for (int k = 0; k < 3; k++)
            free_record(&r[k]);
    }
    herd_dataset_free(ds);
}

static void test_loader_resume_and_restart(void **state)
{
    (void)state;
    herd_dataset *ds = make_ds(57, 3, 6, 5);
    herd_loader_config cfg = base_cfg(4);
    cfg.augment = true;
    size_t per = 90;
    epoch_record full = run_epoch(ds, &cfg, 2, 0);
    epoch_record tail = run_epoch(ds, &cfg, 2, 24);
    assert_int_equal(full.batches, 15);
    assert_int_equal(tail.batches, 9);
    assert_memory_equal(tail.labels, full.labels + 24, tail.samples * sizeof(int32_t));
    assert_memory_equal(tail.x, full.x + 24 * per, tail.samples * per * sizeof(float));

    /* Restarting while workers are mid-epoch cancels cleanly and reproduces the epoch. */
    herd_loader *l;
    cfg.prefetch = 4;
    assert_herd_ok(herd_loader_create(ds, &cfg, &l));
    herd_batch b;
    bool has;
    for (int round = 0; round < 20; round++) {
        assert_herd_ok(herd_loader_start_epoch(l, round % 3, 0));
        for (int i = 0; i < round % 4; i++)
            assert_herd_ok(herd_loader_next(l, &b, &has));
    }
    assert_herd_ok(herd_loader_start_epoch(l, 2, 0));
    size_t at = 0;
    for (;;) {
        assert_herd_ok(herd_loader_next(l, &b, &has));
        if (!has)
            break;
        assert_memory_equal(b.labels, full.labels + at, (size_t)b.n * sizeof(int32_t));
        assert_memory_equal(b.x, full.x + at * per, (size_t)b.n * per * sizeof(float));
        at += (size_t)b.n;
    }
    assert_int_equal(at, 57);
    assert_herd_ok(herd_loader_start_epoch(l, 2, 57)); /* resuming at the end: nothing left */
    assert_herd_ok(herd_loader_next(l, &b, &has));
    assert_false(has);
    assert_int_equal(herd_loader_start_epoch(l, 2, 58), HERD_ERR_INVALID_ARG);
    herd_loader_free(l);

    /* Freeing a loader with work in flight, and one never started. */
    assert_herd_ok(herd_loader_create(ds, &cfg, &l));
    assert_herd_ok(herd_loader_start_epoch(l, 0, 0));
    herd_loader_free(l);
    assert_herd_ok(herd_loader_create(ds, &cfg, &l));
    assert_int_equal(herd_loader_next(l, &b, &has), HERD_ERR_INVALID_ARG);
    herd_loader_free(l);
    /* Resumed at a position one shard reached (20 samples) with 3 shards of 4: the
     * permutation's next samples, 12 per step, rank k the k-th 4; the last step's one
     * sample left is rank 0's, ranks 1 and 2 wrap to the epoch's first samples. */
    for (int k = 0; k < 3; k++) {
        herd_loader_config three = cfg;
        three.shard_count = 3;
        three.shard_rank = k;
        epoch_record part = run_epoch(ds, &three, 2, 20);
        assert_int_equal(part.batches, 4);
        for (int j = 0; j < 3; j++)
            assert_memory_equal(part.x + (size_t)j * 4 * per, full.x + (size_t)(20 + 12 * j + 4 * k) * per,
                                4 * per * sizeof(float));
        assert_int_equal(part.sizes[3], 1);
        size_t last = k == 0 ? 56 : (size_t)k - 1;
        assert_memory_equal(part.x + 12 * per, full.x + last * per, per * sizeof(float));
        free_record(&part);
    }
    free_record(&full);
    free_record(&tail);
    herd_dataset_free(ds);
}

static float norm(const herd_dataset *ds, int ch, int v)
{
    return ((float)v / 255.0f - ds->mean[ch]) / ds->std[ch];
}

/* True when out is sample img cropped by (dy, dx) from its 4-padded copy, maybe flipped. */
static bool is_augmented_copy(const herd_dataset *ds, size_t index, const float *out)
{
    const int c = ds->c, h = ds->h, w = ds->w;
    const uint8_t *img = ds->images + index * (size_t)c * h * w;
    for (int flip = 0; flip < 2; flip++)
        for (int dy = -4; dy <= 4; dy++)
            for (int dx = -4; dx <= 4; dx++) {
                bool match = true;
                for (int ch = 0; ch < c && match; ch++)
                    for (int y = 0; y < h && match; y++)
                        for (int x = 0; x < w && match; x++) {
                            int sy = y + dy, sx = (flip ? w - 1 - x : x) + dx;
                            int v = sy >= 0 && sy < h && sx >= 0 && sx < w
                                        ? img[(ch * h + sy) * w + sx] : 0;
                            match = fabsf(out[(ch * h + y) * w + x] - norm(ds, ch, v)) < 1e-5f;
                        }
                if (match)
                    return true;
            }
    return false;
}

static void test_loader_augment_and_normalise(void **state)
{
    (void)state;
    herd_dataset *ds = make_ds(40, 3, 7, 9);
    size_t per = 3 * 7 * 9;
    herd_loader_config cfg = base_cfg(6);
    epoch_record plain = run_epoch(ds, &cfg, 0, 0);
    for (size_t i = 0; i < plain.samples; i++) {
        const uint8_t *img = ds->images + (size_t)plain.labels[i] * per;
        for (size_t j = 0; j < per; j++)
            assert_float_equal(plain.x[i * per + j], norm(ds, (int)(j / 63), img[j]), 1e-6);
    }
    cfg.augment = true;
    cfg.workers = 1;
    cfg.prefetch = 1;
    epoch_record a1 = run_epoch(ds, &cfg, 0, 0);
    cfg.workers = 4;
    cfg.prefetch = 3;
    epoch_record a4 = run_epoch(ds, &cfg, 0, 0);
    assert_memory_equal(a1.labels, plain.labels, 40 * sizeof(int32_t));
    assert_memory_equal(a1.x, a4.x, 40 * per * sizeof(float));
    assert_memory_not_equal(a1.x, plain.x, 40 * per * sizeof(float));
    int changed = 0;
    for (size_t i = 0; i < 40; i++) {
        assert_true(is_augmented_copy(ds, (size_t)a1.labels[i], a1.x + i * per));
        changed += memcmp(a1.x + i * per, plain.x + i * per, per * sizeof(float)) != 0;
    }
    assert_true(changed > 30); /* 1/162 chance per sample of the identity */
    epoch_record next = run_epoch(ds, &cfg, 1, 0);
    assert_memory_not_equal(next.x, a1.x, 40 * per * sizeof(float));
    free_record(&plain);
    free_record(&a1);
    free_record(&a4);
    free_record(&next);

    herd_loader *l = (herd_loader *)1;
    cfg.batch_size = 0;
    assert_int_equal(herd_loader_create(ds, &cfg, &l), HERD_ERR_INVALID_ARG);
    assert_null(l);
    cfg = base_cfg(50);
    cfg.drop_last = true;
    assert_int_equal(herd_loader_create(ds, &cfg, &l), HERD_ERR_INVALID_ARG);
    cfg = base_cfg(5);
    cfg.shard_rank = 2;
    cfg.shard_count = 2;
    assert_int_equal(herd_loader_create(ds, &cfg, &l), HERD_ERR_INVALID_ARG);
    herd_dataset_free(ds);
}

static void test_fashion_mnist(void **state)
{
    (void)state;
    if (access("/usr/share/datasets/fashion-mnist", F_OK) != 0)
        tu_skip("needs Fashion-MNIST (/usr/share/datasets/fashion-mnist): apt-get install "
                "dataset-fashion-mnist");
    herd_dataset *train, *test;
    assert_herd_ok(herd_dataset_open("fashion-mnist", HERD_SPLIT_TRAIN, &train));
    assert_herd_ok(herd_dataset_open("fashion-mnist", HERD_SPLIT_TEST, &test));
    int c, h, w, classes;
    herd_dataset_shape(train, &c, &h, &w, &classes);
    assert_int_equal(herd_dataset_size(train), 60000);
    assert_int_equal(herd_dataset_size(test), 10000);
    assert_int_equal(c, 1);
    assert_int_equal(h, 28);
    assert_int_equal(w, 28);
    assert_int_equal(classes, 10);
    float mean, std;
    herd_pixel_stats(train->images, train->n, 1, 784, &mean, &std);
    assert_float_equal(mean, train->mean[0], 1e-3);
    assert_float_equal(std, train->std[0], 1e-3);
    int counts[10] = {0};
    for (size_t i = 0; i < test->n; i++)
        counts[test->labels[i]]++;
    for (int i = 0; i < 10; i++)
        assert_int_equal(counts[i], 1000);
    herd_dataset_free(train);
    herd_dataset_free(test);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_raw_and_gzip),
        cmocka_unit_test(test_idx_gzip_member_at_buffer_edge),
        cmocka_unit_test(test_idx_errors),
        cmocka_unit_test(test_idx_strict),
        cmocka_unit_test(test_cifar10),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_loader_covers_and_shuffles),
        cmocka_unit_test(test_loader_shards),
        cmocka_unit_test(test_loader_resume_and_restart),
        cmocka_unit_test(test_loader_augment_and_normalise),
        cmocka_unit_test(test_fashion_mnist),
    };
    return tu_run(tests, NULL, NULL);
}
