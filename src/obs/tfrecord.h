/* TFRecord framing, the container of TensorBoard event files: each record is
 *   uint64 length (little endian), uint32 masked CRC-32C of those 8 bytes,
 *   length bytes of data, uint32 masked CRC-32C of the data. */
#ifndef HERD_OBS_TFRECORD_H
#define HERD_OBS_TFRECORD_H

#include <stddef.h>
#include <stdint.h>

#define HERD_TFRECORD_OVERHEAD 16 /* header (8 + 4) and footer (4) bytes */

/* CRC-32C (Castagnoli polynomial), as TensorFlow computes it. */
uint32_t herd_crc32c(const void *data, size_t len);
/* TensorFlow's masking, so CRCs of data that contains CRCs stay useful. */
uint32_t herd_crc32c_mask(uint32_t crc);

/* Frames len bytes of data into out, which holds len + HERD_TFRECORD_OVERHEAD bytes. */
void herd_tfrecord_frame(const void *data, size_t len, uint8_t *out);

#endif
