/* TFRecord framing with CRC-32C. No packaged C library for CRC-32C is in Debian's
 * base set the project uses (zlib's crc32 is the other polynomial), and the
 * table-driven form is a few lines. */
#include "obs/tfrecord.h"

#include <pthread.h>
#include <string.h>

/* Reflected Castagnoli polynomial. */
#define CRC32C_POLY 0x82f63b78u

static uint32_t crc_table[256];

static void init_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1u)));
        crc_table[i] = c;
    }
}

uint32_t herd_crc32c(const void *data, size_t len)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_table);
    const uint8_t *p = data;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < len; i++)
        c = crc_table[(c ^ p[i]) & 0xffu] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

uint32_t herd_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void herd_tfrecord_frame(const void *data, size_t len, uint8_t *out)
{
    uint64_t n = len;
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(n >> (8 * i));
    put_le32(out + 8, herd_crc32c_mask(herd_crc32c(out, 8)));
    memcpy(out + 12, data, len);
    put_le32(out + 12 + len, herd_crc32c_mask(herd_crc32c(data, len)));
}
