/* Token data (tokens:FILE[,VOCAB]): llm.c's .bin reader, its strictness, the
 * validation sibling, and the loader's sequences with a label per position. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset.h"

#define HEADER_BYTES 1024

static void put_le32(uint8_t *p, int32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)((uint32_t)v >> (8 * i));
}

/* A .bin of n tokens, token i = (i * 7) % vocab_mod; header as llm.c writes it. */
static uint8_t *make_bin(int32_t n, int vocab_mod, size_t *len)
{
    *len = HEADER_BYTES + 2 * (size_t)n;
    uint8_t *b = calloc(1, *len);
    put_le32(b, 20240520);
    put_le32(b + 4, 1);
    put_le32(b + 8, n);
    for (int32_t i = 0; i < n; i++) {
        int t = (i * 7) % vocab_mod;
        b[HEADER_BYTES + 2 * i] = (uint8_t)t;
        b[HEADER_BYTES + 2 * i + 1] = (uint8_t)(t >> 8);
    }
    return b;
}

static void test_good_file_and_sequences(void **state)
{
    (void)state;
    char *dir = tu_tempdir(), spec[4096];
    size_t len;
    uint8_t *b = make_bin(101, 300, &len);
    free(tu_write_file(dir, "d_train.bin", b, len));
    free(b);
    b = make_bin(21, 300, &len);
    free(tu_write_file(dir, "d_val.bin", b, len));
    free(b);
    snprintf(spec, sizeof spec, "tokens:%s/d_train.bin,300", dir);
    herd_dataset *train, *val;
    assert_herd_ok(herd_dataset_open(spec, HERD_SPLIT_TRAIN, &train));
    assert_herd_ok(herd_dataset_open(spec, HERD_SPLIT_TEST, &val));
    bool tokens;
    assert_int_equal(herd_dataset_seq_len(train, &tokens), 0);
    assert_true(tokens);
    assert_int_equal(train->n_tokens, 101);
    assert_int_equal(val->n_tokens, 21); /* d_val.bin, the sibling */
    assert_int_equal(train->classes, 300);
    /* 100 tokens have a next token: 10 sequences of 10, 6 of 16. */
    assert_herd_ok(herd_dataset_set_seq_len(train, 10));
    assert_int_equal(herd_dataset_size(train), 10);
    assert_herd_ok(herd_dataset_set_seq_len(train, 16));
    assert_int_equal(herd_dataset_size(train), 6);
    int c, h, w, classes;
    herd_dataset_shape(train, &c, &h, &w, &classes);
    assert_true(c == 1 && h == 16 && w == 1 && classes == 300);
    tu_expect_error(herd_dataset_set_seq_len(train, 101), HERD_ERR_INVALID_ARG,
                 "sequence length 101 must be in 1..100", NULL);

    /* Two shards of batch 2, in order: rank 1's first batch is sequences 2 and 3. */
    herd_loader_config lc = {.batch_size = 2, .prefetch = 1, .workers = 2, .shard_rank = 1,
                             .shard_count = 2, .drop_last = true};
    herd_loader *l;
    assert_herd_ok(herd_loader_create(train, &lc, &l));
    assert_herd_ok(herd_loader_start_epoch(l, 0, 0));
    herd_batch hb;
    bool has;
    assert_herd_ok(herd_loader_next(l, &hb, &has));
    assert_true(has);
    assert_int_equal(hb.n, 2);
    for (int s = 0; s < 2; s++)
        for (int t = 0; t < 16; t++) {
            int pos = (2 + s) * 16 + t;
            assert_float_equal(hb.x[s * 16 + t], (float)((pos * 7) % 300), 0);
            assert_int_equal(hb.labels[s * 16 + t], ((pos + 1) * 7) % 300);
        }
    herd_loader_free(l);
    herd_dataset_free(train);
    herd_dataset_free(val);
    tu_rmtree(dir);
    free(dir);
}

/* Rewrites dir/name as b with the int32 at byte `at` set to v (at < 0: unchanged). */
static char *write_with(const char *dir, const char *name, uint8_t *b, size_t len, int at, int32_t v)
{
    uint8_t keep[4];
    if (at >= 0) {
        memcpy(keep, b + at, 4);
        put_le32(b + at, v);
    }
    char *p = tu_write_file(dir, name, b, len);
    if (at >= 0)
        memcpy(b + at, keep, 4);
    return p;
}

static void test_strict(void **state)
{
    (void)state;
    char *dir = tu_tempdir(), msg[4200];
    herd_dataset ds;
    size_t len;
    uint8_t *b = make_bin(50, 256, &len);
    char *p;

    memset(&ds, 0, sizeof ds);
    p = write_with(dir, "magic.bin", b, len, 0, 20240521);
    snprintf(msg, sizeof msg, "%s: byte 0: magic 20240521, not 20240520", p);
    tu_expect_error(herd_tokens_load(p, 256, &ds), HERD_ERR_FORMAT, msg, NULL);
    free(p);

    p = write_with(dir, "version.bin", b, len, 4, 2);
    snprintf(msg, sizeof msg, "%s: byte 4: version 2, not 1", p);
    tu_expect_error(herd_tokens_load(p, 256, &ds), HERD_ERR_FORMAT, msg, NULL);
    free(p);

    p = write_with(dir, "reserved.bin", b, len, 4 * 200, 7);
    snprintf(msg, sizeof msg, "%s: byte 800: header field 200 is 7", p);
    tu_expect_error(herd_tokens_load(p, 256, &ds), HERD_ERR_FORMAT, msg, NULL);
    free(p);

    p = write_with(dir, "count.bin", b, len, 8, 51);
    snprintf(msg, sizeof msg, "%s: byte 8: the header counts 51 tokens (102 bytes) but 100 bytes "
             "follow", p);
    tu_expect_error(herd_tokens_load(p, 256, &ds), HERD_ERR_FORMAT, msg, NULL);
    free(p);

    p = write_with(dir, "cut.bin", b, len - 1, -1, 0); /* half a token missing */
    snprintf(msg, sizeof msg, "%s: byte 8: the header counts 50 tokens (100 bytes) but 99 bytes", p);
    tu_expect_error(herd_tokens_load(p, 256, &ds), HERD_ERR_FORMAT, msg, NULL);
    free(p);

    p = write_with(dir, "header.bin", b, 1000, -1, 0);
    snprintf(msg, sizeof msg, "%s: byte 1000: the file ends inside the header", p);
    tu_expect_error(herd_tokens_load(p, 256, &ds), HERD_ERR_FORMAT, msg, NULL);
    free(p);

    /* Token 37 (byte 1024 + 74) is 300 in a vocabulary of 256; the message names it. */
    b[HEADER_BYTES + 74] = 300 & 255;
    b[HEADER_BYTES + 75] = 300 >> 8;
    p = write_with(dir, "vocab.bin", b, len, -1, 0);
    snprintf(msg, sizeof msg, "%s: token 37 (byte 1098) is 300, not below the vocabulary 256", p);
    tu_expect_error(herd_tokens_load(p, 256, &ds), HERD_ERR_FORMAT, msg, NULL);
    assert_herd_ok(herd_tokens_load(p, 301, &ds)); /* fits a vocabulary of 301 */
    free(ds.tokens);
    free(p);

    uint8_t *one = make_bin(1, 256, &len);
    p = tu_write_file(dir, "one.bin", one, len);
    tu_expect_error(herd_tokens_load(p, 256, &ds), HERD_ERR_FORMAT, "1 token: a sequence needs at "
                 "least 2", NULL);
    free(p);
    free(one);
    free(b);
    tu_expect_error(herd_tokens_load("/nonexistent/x.bin", 256, &ds), HERD_ERR_IO,
                 "/nonexistent/x.bin: cannot open", NULL);
    tu_rmtree(dir);
    free(dir);
}

static void test_spec(void **state)
{
    (void)state;
    char *dir = tu_tempdir(), spec[4200];
    size_t len;
    uint8_t *b = make_bin(20, 256, &len);
    char *p = tu_write_file(dir, "plain.bin", b, len);
    free(b);
    herd_dataset *ds;
    /* No _train in the name: no validation file to find. */
    snprintf(spec, sizeof spec, "tokens:%s,256", p);
    assert_herd_ok(herd_dataset_open(spec, HERD_SPLIT_TRAIN, &ds));
    herd_dataset_free(ds);
    tu_expect_error(herd_dataset_open(spec, HERD_SPLIT_TEST, &ds), HERD_ERR_INVALID_ARG,
                 "no validation file", "NAME_val.bin");
    /* The default vocabulary is GPT-2's; a bad one is refused naming the format. */
    snprintf(spec, sizeof spec, "tokens:%s", p);
    assert_herd_ok(herd_dataset_open(spec, HERD_SPLIT_TRAIN, &ds));
    assert_int_equal(ds->classes, 50257);
    tu_expect_error(herd_dataset_truncate(ds, 3), HERD_ERR_INVALID_ARG,
                 "set the sequence length before truncating", NULL);
    herd_dataset_free(ds);
    snprintf(spec, sizeof spec, "tokens:%s,65537", p);
    tu_expect_error(herd_dataset_open(spec, HERD_SPLIT_TRAIN, &ds), HERD_ERR_INVALID_ARG,
                 "the vocabulary after the comma must be in 2..65536", "tokens:FILE[,VOCAB]");
    /* Image data takes no sequence length. */
    assert_herd_ok(herd_dataset_open("synthetic:1,4,4,3,8", HERD_SPLIT_TRAIN, &ds));
    tu_expect_error(herd_dataset_set_seq_len(ds, 4), HERD_ERR_INVALID_ARG,
                 "a sequence length applies to token data only", NULL);
    herd_dataset_free(ds);
    free(p);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_file_and_sequences),
        cmocka_unit_test(test_strict),
        cmocka_unit_test(test_spec),
    };
    return tu_run(tests, NULL, NULL);
}
