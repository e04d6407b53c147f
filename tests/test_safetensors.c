/* safetensors files that are well formed JSON but do not describe their data exactly:
 * the tensors must tile the data section, so a shifted header or inserted bytes are
 * refused instead of loading every tensor shifted. (Round trips and basic corruption
 * are in test_checkpoint.c.) Tensors streamed in pieces, as ZeRO's checkpoints write them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "core/error.h"
#include "core/safetensors.h"

/* Writes the 8-byte length `hlen_field`, the header text, then `data_len` zero bytes. */
static char *craft(const char *dir, const char *name, const char *header, uint64_t hlen_field,
                   size_t data_len)
{
    size_t hl = strlen(header);
    unsigned char *b = calloc(1, 8 + hl + data_len);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(hlen_field >> (8 * i));
    memcpy(b + 8, header, hl);
    char *p = tu_write_file(dir, name, b, 8 + hl + data_len);
    free(b);
    return p;
}

/* Expects a format error naming the file and containing `needle`. */
static void expect_refused(const char *path, const char *needle)
{
    herd_st_file *f = (herd_st_file *)1;
    herd_status st = herd_safetensors_read(path, &f);
    if (st != HERD_ERR_FORMAT)
        fail_msg("%s: expected a format error, got %s: %s", path, herd_status_name(st),
                 herd_last_error());
    assert_null(f);
    if (!strstr(herd_last_error(), path) || !strstr(herd_last_error(), needle))
        fail_msg("%s: expected the path and '%s' in: %s", path, needle, herd_last_error());
}

#define TWO_TENSORS(a_begin, a_end, b_begin, b_end)                                             \
    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[" #a_begin "," #a_end "]},"      \
    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[" #b_begin "," #b_end "]}}"

static void test_st_tiling(void **s)
{
    (void)s;
    char *dir = tu_tempdir();
    const char *good = TWO_TENSORS(0, 8, 8, 16);
    char *p = craft(dir, "good.safetensors", good, strlen(good), 16);
    herd_st_file *f = NULL;
    assert_herd_ok(herd_safetensors_read(p, &f));
    herd_st_free(f);
    free(p);

    p = craft(dir, "hole-first.safetensors", TWO_TENSORS(4, 12, 12, 20), strlen(TWO_TENSORS(4, 12, 12, 20)), 20);
    expect_refused(p, "tensor 'a' begins at data byte 4 but the header ends at 0: 4 bytes belong to no tensor");
    free(p);
    p = craft(dir, "hole-middle.safetensors", TWO_TENSORS(0, 8, 12, 20), strlen(TWO_TENSORS(0, 8, 12, 20)), 20);
    expect_refused(p, "tensor 'b' begins at data byte 12 but the tensor before it ends at 8");
    free(p);
    p = craft(dir, "overlap.safetensors", TWO_TENSORS(0, 8, 4, 12), strlen(TWO_TENSORS(0, 8, 4, 12)), 12);
    expect_refused(p, "tensors 'a' [0, 8] and 'b' [4, 12] overlap");
    free(p);
    /* Bytes after the last tensor. */
    p = craft(dir, "inserted.safetensors", good, strlen(good), 17);
    expect_refused(p, "the tensors end at data byte 16 (tensor 'b') but the data section has 17 bytes: "
                      "1 bytes belong to no tensor");
    free(p);
    /* No tensors but data. */
    p = craft(dir, "empty.safetensors", "{}", 2, 4);
    expect_refused(p, "the tensors end at data byte 0 but the data section has 4 bytes");
    free(p);
    /* Empty tensors sit anywhere on the tiling. */
    const char *with_empty = "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                             "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
                             "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    p = craft(dir, "with-empty.safetensors", with_empty, strlen(with_empty), 16);
    assert_herd_ok(herd_safetensors_read(p, &f));
    assert_int_equal(herd_st_count(f), 3);
    herd_st_free(f);
    free(p);
    tu_rmtree(dir);
    free(dir);
}

/* Sets a crafted file's checksum to its bytes' so the checks behind it are reached. */
static void resum(unsigned char *raw, size_t len)
{
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)raw[i] << (8 * i);
    size_t slot;
    assert_int_equal(herd_st_checksum_slot(raw + 8, hlen < len - 8 ? hlen : len - 8, &slot), 0);
    char digits[HERD_ST_SUM_DIGITS + 1];
    snprintf(digits, sizeof digits, "%016llx", (unsigned long long)herd_st_checksum(raw, len, slot + 8));
    memcpy(raw + 8 + slot, digits, HERD_ST_SUM_DIGITS);
}

/* The checksum: written by the writer, any changed byte (data or header) refused,
 * a file without one (another writer's) read. */
static void test_st_checksum(void **s)
{
    (void)s;
    char *dir = tu_tempdir();
    float a[4] = {1, 2, 3, 4};
    herd_st_entry e[] = {{.name = "w", .ndim = 1, .shape = {4}, .data = a}};
    const char *k[] = {"step"}, *v[] = {"10"};
    char *path = tu_write_file(dir, "w.safetensors", "", 0);
    assert_herd_ok(herd_safetensors_write(path, e, 1, k, v, 1));
    size_t len;
    unsigned char *raw = (unsigned char *)tu_read_file(path, &len);
    herd_st_file *f = NULL;
    assert_herd_ok(herd_safetensors_read(path, &f));
    assert_non_null(herd_st_meta(f, HERD_ST_SUM_KEY));
    herd_st_free(f);
    raw[len - 1] ^= 0x01; /* a data bit */
    char *p = tu_write_file(dir, "data.safetensors", raw, len);
    expect_refused(p, "checksum mismatch: the header records herd_xxh3");
    free(p);
    raw[len - 1] ^= 0x01;
    char *ten = strstr((char *)raw + 8, "\"10\"");
    ten[1] = '2'; /* a metadata field: covered too */
    p = tu_write_file(dir, "meta.safetensors", raw, len);
    expect_refused(p, "checksum mismatch");
    free(p);
    resum(raw, len); /* the same change with a checksum made for it: read */
    p = tu_write_file(dir, "resummed.safetensors", raw, len);
    assert_herd_ok(herd_safetensors_read(p, &f));
    assert_string_equal(herd_st_meta(f, "step"), "20");
    herd_st_free(f);
    free(p);
    const char *other = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    p = craft(dir, "other.safetensors", other, strlen(other), 4);
    assert_herd_ok(herd_safetensors_read(p, &f));
    herd_st_free(f);
    free(p);
    free(raw);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

/* The reported bug: a header length one short (or one long) of what the writer wrote. */
static void test_st_shifted_header(void **s)
{
    (void)s;
    char *dir = tu_tempdir();
    float a[4] = {1, 2, 3, 4};
    herd_st_entry e[] = {{.name = "w", .ndim = 1, .shape = {4}, .data = a}};
    char *path = tu_write_file(dir, "w.safetensors", "", 0);
    assert_herd_ok(herd_safetensors_write(path, e, 1, NULL, NULL, 0));
    size_t len;
    unsigned char *raw = (unsigned char *)tu_read_file(path, &len);
    uint64_t hlen = raw[0] | (uint64_t)raw[1] << 8;
    /* The writer pads the JSON with spaces, so one byte less still parses. */
    assert_int_equal(raw[8 + hlen - 1], ' ');
    raw[0] = (unsigned char)(hlen - 1);
    resum(raw, len);
    char *p = tu_write_file(dir, "short.safetensors", raw, len);
    expect_refused(p, "the tensors end at data byte 16 (tensor 'w') but the data section has 17 bytes");
    free(p);
    /* One byte inserted after the header. */
    unsigned char *ins = malloc(len + 1);
    raw[0] = (unsigned char)hlen;
    memcpy(ins, raw, 8 + hlen);
    ins[8 + hlen] = 0x42;
    memcpy(ins + 9 + hlen, raw + 8 + hlen, len - 8 - hlen);
    resum(ins, len + 1);
    p = tu_write_file(dir, "inserted.safetensors", ins, len + 1);
    expect_refused(p, "but the data section has 17 bytes");
    free(p);
    free(ins);
    free(raw);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

static void test_st_header_text(void **s)
{
    (void)s;
    char *dir = tu_tempdir();
    const char *junk = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x";
    char *p = craft(dir, "junk.safetensors", junk, strlen(junk), 4);
    expect_refused(p, "file byte 63 (0x78) follows the header's JSON object");
    free(p);
    const char *nul = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}\0";
    p = craft(dir, "nul.safetensors", nul, strlen(nul) + 1, 5); /* a zero byte ends the header */
    expect_refused(p, "(0x00) follows the header's JSON object");
    free(p);
    const char *ws = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} \n ";
    p = craft(dir, "ws.safetensors", ws, strlen(ws), 4);
    herd_st_file *f = NULL;
    assert_herd_ok(herd_safetensors_read(p, &f));
    herd_st_free(f);
    free(p);
    const char *unnamed = "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    p = craft(dir, "unnamed.safetensors", unnamed, strlen(unnamed), 4);
    expect_refused(p, "a tensor in the header has an empty name");
    free(p);
    const char *meta = "{\"__metadata__\":{\"step\":\"10\",\"step\":\"20\"}}";
    p = craft(dir, "meta.safetensors", meta, strlen(meta), 0);
    expect_refused(p, "__metadata__ key 'step' appears twice (values '10' and '20')");
    free(p);
    /* Sizes: the shape's bytes, with the offsets named. */
    const char *size = "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}";
    p = craft(dir, "size.safetensors", size, strlen(size), 16);
    expect_refused(p, "tensor 'w' has data_offsets [0, 16] spanning 16 bytes but its F32 shape needs 12");
    free(p);
    tu_rmtree(dir);
    free(dir);
}

/* A streamed tensor: 10 floats in pieces of 3 (the last of 1), or a failure at the
 * piece fail_at. */
typedef struct pieces {
    float data[10];
    size_t given;
    int calls, fail_at;
} pieces;

static herd_status next_piece(void *user, const void **piece, size_t *bytes)
{
    pieces *p = user;
    if (++p->calls == p->fail_at)
        return HERD_ERR(HERD_ERR_IO, "rank 1 went away");
    size_t n = 10 - p->given < 3 ? 10 - p->given : 3;
    *piece = p->data + p->given;
    *bytes = n * sizeof(float);
    p->given += n;
    return HERD_OK;
}

/* ZeRO's checkpoints: a tensor streamed in pieces writes the bytes a whole one does; a
 * source that fails leaves no file (the old one stays) and its error is returned. */
static void test_st_streamed(void **s)
{
    (void)s;
    char *dir = tu_tempdir();
    pieces src = {.fail_at = 0};
    for (int i = 0; i < 10; i++)
        src.data[i] = (float)i * 0.5f - 1.0f;
    const char *keys[] = {"k"}, *values[] = {"v"};
    herd_st_entry whole = {.name = "m", .ndim = 1, .shape = {10}, .data = src.data};
    herd_st_entry streamed = {.name = "m", .ndim = 1, .shape = {10}, .next = next_piece,
                              .user = &src};
    char whole_path[512], stream_path[512];
    snprintf(whole_path, sizeof whole_path, "%s/whole.safetensors", dir);
    snprintf(stream_path, sizeof stream_path, "%s/streamed.safetensors", dir);
    assert_herd_ok(herd_safetensors_write(whole_path, &whole, 1, keys, values, 1));
    assert_herd_ok(herd_safetensors_write(stream_path, &streamed, 1, keys, values, 1));
    assert_int_equal(src.calls, 4);
    size_t a_len, b_len;
    char *a = tu_read_file(whole_path, &a_len), *b = tu_read_file(stream_path, &b_len);
    assert_int_equal(a_len, b_len);
    assert_memory_equal(a, b, a_len);
    free(b);

    src = (pieces){.fail_at = 2};
    memcpy(src.data, (float *)(void *)(a + a_len - 10 * sizeof(float)), 10 * sizeof(float));
    assert_int_equal(herd_safetensors_write(stream_path, &streamed, 1, keys, values, 1),
                     HERD_ERR_IO);
    assert_non_null(strstr(herd_last_error(), "rank 1 went away"));
    assert_non_null(strstr(herd_last_error(), stream_path));
    b = tu_read_file(stream_path, &b_len); /* the earlier file, whole */
    assert_int_equal(a_len, b_len);
    assert_memory_equal(a, b, a_len);
    free(a);
    free(b);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_st_tiling),
        cmocka_unit_test(test_st_checksum),
        cmocka_unit_test(test_st_shifted_header),
        cmocka_unit_test(test_st_header_text),
        cmocka_unit_test(test_st_streamed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
