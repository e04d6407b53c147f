/* The project's own TensorBoard event file reader: TFRecord framing checked record
 * by record, Events decoded with protobuf-c. */
#include "tb_reader.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "obs/tfrecord.h"

struct herd_tb_reader {
    FILE *f;
    char *path;
    uint64_t size, offset; /* the file's size when last looked at; the next record's start */
};

herd_status herd_tb_reader_open(const char *path, herd_tb_reader **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return HERD_ERR(HERD_ERR_IO, "cannot open the event file '%s': %s", path, strerror(errno));
    struct stat sb;
    herd_tb_reader *r = calloc(1, sizeof *r);
    char *copy = strdup(path);
    if (!r || !copy || fstat(fileno(f), &sb) != 0) {
        fclose(f);
        free(r);
        free(copy);
        return HERD_ERR(HERD_ERR_IO, "cannot read the event file '%s'", path);
    }
    r->f = f;
    r->path = copy;
    r->size = (uint64_t)sb.st_size;
    *out = r;
    return HERD_OK;
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

herd_status herd_tb_reader_next(herd_tb_reader *r, Tensorboard__Event **ev, bool *truncated)
{
    *ev = NULL;
    *truncated = false;
    uint8_t head[12];
    size_t got = fread(head, 1, sizeof head, r->f);
    if (got == 0 && feof(r->f))
        return HERD_OK;
    if (got < sizeof head) {
        *truncated = true;
        return HERD_OK;
    }
    uint64_t len = 0;
    for (int i = 0; i < 8; i++)
        len |= (uint64_t)head[i] << (8 * i);
    if (get_le32(head + 8) != herd_crc32c_mask(herd_crc32c(head, 8)))
        return HERD_ERR(HERD_ERR_FORMAT, "'%s': the length of the record at byte %llu fails its "
                        "CRC; the file is corrupt", r->path, (unsigned long long)r->offset);
    /* The header is intact, so a record longer than the rest of the file was cut short
     * (the size is taken again: a live writer may have added records since). */
    struct stat sb;
    if (fstat(fileno(r->f), &sb) == 0)
        r->size = (uint64_t)sb.st_size;
    uint64_t rest = r->size > r->offset + sizeof head ? r->size - r->offset - sizeof head : 0;
    if (len > rest || len + 4 > rest) {
        *truncated = true;
        return HERD_OK;
    }
    uint8_t *data = malloc(len + 4);
    if (!data)
        return HERD_NOMEM(len + 4);
    if (fread(data, 1, len + 4, r->f) < len + 4) {
        free(data);
        *truncated = true; /* the file shrank while being read */
        return HERD_OK;
    }
    herd_status st = HERD_OK;
    if (get_le32(data + len) != herd_crc32c_mask(herd_crc32c(data, len)))
        st = HERD_ERR(HERD_ERR_FORMAT, "'%s': the data of the record at byte %llu fails its CRC; "
                      "the file is corrupt", r->path, (unsigned long long)r->offset);
    else if (!(*ev = tensorboard__event__unpack(NULL, len, data)))
        st = HERD_ERR(HERD_ERR_FORMAT, "'%s': the record at byte %llu is not a TensorBoard Event",
                      r->path, (unsigned long long)r->offset);
    free(data);
    r->offset += sizeof head + len + 4;
    return st;
}

void herd_tb_event_free(Tensorboard__Event *ev)
{
    if (ev)
        tensorboard__event__free_unpacked(ev, NULL);
}

void herd_tb_reader_close(herd_tb_reader *r)
{
    if (!r)
        return;
    fclose(r->f);
    free(r->path);
    free(r);
}
