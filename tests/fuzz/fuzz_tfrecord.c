/* TensorBoard event files (TFRecord framing + Event protobuf) through herd's reader.
 * Input: a flag byte, then the file. With flag bit 0 set, the CRCs of every record
 * that fits are recomputed first, so mutations reach the protobuf decoding behind
 * them. Accepted records must account for the file exactly: the reader ends cleanly
 * only at the file's last byte, and "truncated" only when a whole record no longer
 * fits; each record consumed is 12 + len + 4 bytes and its CRCs are right. */
#include <stdbool.h>

#include "fuzz.h"
#include "obs/tfrecord.h"
#include "tb_reader.h"

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool fix = data[0] & 1;
    size_t n = size - 1;
    uint8_t *b = malloc(n ? n : 1);
    memcpy(b, data + 1, n);
    if (fix)
        for (size_t at = 0; at + 12 <= n;) {
            uint64_t len = le64(b + at);
            put_le32(b + at + 8, herd_crc32c_mask(herd_crc32c(b + at, 8)));
            if (len > n - at - 12 || len + 4 > n - at - 12)
                break;
            put_le32(b + at + 12 + len, herd_crc32c_mask(herd_crc32c(b + at + 12, len)));
            at += 12 + len + 4;
        }
    char path[512];
    fz_path(path, sizeof path, "events.out.tfevents");
    fz_write(path, b, n);
    herd_tb_reader *r = NULL;
    if (herd_tb_reader_open(path, &r) != HERD_OK) {
        free(b);
        return 0;
    }
    size_t at = 0;
    for (int k = 0; k < 100000; k++) {
        Tensorboard__Event *ev = NULL;
        bool truncated = false;
        if (herd_tb_reader_next(r, &ev, &truncated) != HERD_OK)
            break;
        if (!ev) {
            if (!truncated)
                FZ_CHECK(at == n, "clean end after %zu of %zu bytes", at, n);
            else
                FZ_CHECK(at < n && (n - at < 16 || le64(b + at) > n - at - 16),
                         "'truncated' at %zu of %zu bytes with a whole record there", at, n);
            break;
        }
        FZ_CHECK(n - at >= 16, "an event from %zu bytes", n - at);
        uint64_t len = le64(b + at);
        FZ_CHECK(len <= n - at - 16, "an event of %llu bytes at %zu of %zu", (unsigned long long)len, at, n);
        FZ_CHECK(le32(b + at + 8) == herd_crc32c_mask(herd_crc32c(b + at, 8)), "length CRC at %zu", at);
        FZ_CHECK(le32(b + at + 12 + len) == herd_crc32c_mask(herd_crc32c(b + at + 12, len)), "data CRC at %zu",
                 at);
        if (ev->what_case == TENSORBOARD__EVENT__WHAT_SUMMARY && ev->summary)
            for (size_t i = 0; i < ev->summary->n_value; i++)
                FZ_CHECK(ev->summary->value[i] && ev->summary->value[i]->tag, "summary value %zu", i);
        at += 12 + len + 4;
        herd_tb_event_free(ev);
    }
    herd_tb_reader_close(r);
    free(b);
    return 0;
}
