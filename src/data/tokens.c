/* Token streams in llm.c's .bin format: a header of 256 little-endian int32 (magic
 * 20240520, version 1, token count, the rest zero), then the tokens as uint16.
 * Strict: whatever does not match is an error naming the file, the byte offset and
 * the value, so a foreign or damaged file never trains. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/dataset.h"

#define TOKENS_MAGIC 20240520
#define TOKENS_VERSION 1 /* llm.c's version 2 holds uint32 tokens (LLaMA 3), not read here */
#define TOKENS_HEADER_INTS 256
#define TOKENS_HEADER_BYTES (TOKENS_HEADER_INTS * 4)

static int32_t le32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

static herd_status check_header(const char *path, const unsigned char *h, long size)
{
    int32_t magic = le32(h), version = le32(h + 4), count = le32(h + 8);
    if (magic != TOKENS_MAGIC)
        return HERD_ERR(HERD_ERR_FORMAT, "%s: byte 0: magic %d, not %d: not a token file in "
                        "llm.c's .bin format", path, (int)magic, TOKENS_MAGIC);
    if (version != TOKENS_VERSION)
        return HERD_ERR(HERD_ERR_FORMAT, "%s: byte 4: version %d, not %d (uint16 tokens; "
                        "version 2 files hold uint32 tokens, which herd does not read)", path,
                        (int)version, TOKENS_VERSION);
    for (int i = 3; i < TOKENS_HEADER_INTS; i++)
        if (le32(h + 4 * i) != 0)
            return HERD_ERR(HERD_ERR_FORMAT, "%s: byte %d: header field %d is %d; the header's "
                            "fields after the token count must be 0", path, 4 * i, i,
                            (int)le32(h + 4 * i));
    long body = size - TOKENS_HEADER_BYTES;
    if (count < 0 || (long)count * 2 != body)
        return HERD_ERR(HERD_ERR_FORMAT, "%s: byte 8: the header counts %d tokens (%lld bytes) "
                        "but %ld bytes follow the header: the file is truncated or not this format",
                        path, (int)count, 2 * (long long)count, body);
    if (count < 2)
        return HERD_ERR(HERD_ERR_FORMAT, "%s: %d token%s: a sequence needs at least 2 (an input "
                        "and its next token)", path, (int)count, count == 1 ? "" : "s");
    return HERD_OK;
}

herd_status herd_tokens_load(const char *path, int vocab, herd_dataset *ds)
{
    if (vocab < 2 || vocab > 65536)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: vocabulary %d must be in 2..65536 (uint16 "
                        "tokens)", path, vocab);
    FILE *f = fopen(path, "rb");
    if (!f)
        return HERD_ERR(HERD_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    herd_status st = HERD_OK;
    unsigned char header[TOKENS_HEADER_BYTES];
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    rewind(f);
    if (size < 0)
        st = HERD_ERR(HERD_ERR_IO, "%s: cannot find the file's size: %s", path, strerror(errno));
    else if (size < TOKENS_HEADER_BYTES)
        st = HERD_ERR(HERD_ERR_FORMAT, "%s: byte %ld: the file ends inside the header (%d bytes: "
                      "256 int32)", path, size, TOKENS_HEADER_BYTES);
    else if (fread(header, 1, sizeof header, f) != sizeof header)
        st = HERD_ERR(HERD_ERR_IO, "%s: cannot read the header", path);
    else
        st = check_header(path, header, size);
    size_t count = st == HERD_OK ? (size_t)(size - TOKENS_HEADER_BYTES) / 2 : 0;
    unsigned char *raw = st == HERD_OK ? malloc(count * 2) : NULL;
    if (st == HERD_OK && !raw)
        st = HERD_NOMEM(count * 2);
    if (st == HERD_OK && fread(raw, 2, count, f) != count)
        st = HERD_ERR(HERD_ERR_IO, "%s: read failed after the header", path);
    fclose(f);
    uint16_t *tokens = st == HERD_OK ? malloc(count * sizeof *tokens) : NULL;
    if (st == HERD_OK && !tokens)
        st = HERD_NOMEM(count * sizeof *tokens);
    for (size_t i = 0; st == HERD_OK && i < count; i++) {
        tokens[i] = (uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8);
        if (tokens[i] >= vocab)
            st = HERD_ERR(HERD_ERR_FORMAT, "%s: token %zu (byte %zu) is %u, not below the "
                          "vocabulary %d (set it with tokens:FILE,VOCAB)", path, i,
                          (size_t)TOKENS_HEADER_BYTES + 2 * i, tokens[i], vocab);
    }
    free(raw);
    if (st != HERD_OK) {
        free(tokens);
        return st;
    }
    ds->tokens = tokens;
    ds->n_tokens = count;
    ds->classes = vocab;
    ds->c = ds->w = 1;
    ds->h = 0; /* no sequence length yet: herd_dataset_set_seq_len */
    ds->n = 0;
    ds->mean[0] = 0.0f;
    ds->std[0] = 1.0f;
    return HERD_OK;
}
