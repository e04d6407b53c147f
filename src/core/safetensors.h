/* safetensors: 8-byte little-endian header length, a JSON header naming each
 * tensor's dtype, shape and byte range, then the raw little-endian data. */
#ifndef HERD_CORE_SAFETENSORS_H
#define HERD_CORE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "herd/herd.h"

/* A source of a part's bytes written as they arrive (slices held by other ranks):
 * each call gives the next piece (its own memory, valid until the next call). */
typedef herd_status (*herd_part_source)(void *user, const void **piece, size_t *bytes);

typedef struct herd_st_entry {
    const char *name;
    int ndim;
    int64_t shape[4];
    const float *data; /* F32; or NULL and the bytes come from next(user) */
    herd_part_source next;
    void *user;
} herd_st_entry;

/* Writes atomically: a temporary file in the same directory, fsync, rename.
 * meta is n_meta key/value pairs (keys[i], values[i]) stored in __metadata__, with
 * HERD_ST_SUM_KEY added: the file's checksum, computed while the data stream by and
 * written into its fixed-width slot in the header before the rename. */
herd_status herd_safetensors_write(const char *path, const herd_st_entry *entries, size_t n,
                                   const char *const *keys, const char *const *values,
                                   size_t n_meta);

/* The checksum: XXH3-64 of every byte of the file (header and data) with the 16
 * lowercase hex digits of its own value read as '0's, stored as those digits. */
#define HERD_ST_SUM_KEY "herd_xxh3"
#define HERD_ST_SUM_DIGITS 16
/* Where the digits sit in a header's JSON (header: the len bytes after the length
 * field; *slot counts from there): 0, or -1 when the header holds no checksum. */
int herd_st_checksum_slot(const unsigned char *header, size_t len, size_t *slot);
/* The checksum of a whole file whose digits sit at file offset slot. */
uint64_t herd_st_checksum(const unsigned char *file, size_t len, size_t slot);

typedef struct herd_st_file herd_st_file;

/* Reads and validates the whole file (its checksum when it has one, header JSON,
 * offsets inside the data, sizes matching shapes). Only F32 tensors are accepted. */
herd_status herd_safetensors_read(const char *path, herd_st_file **out);
/* The tensor's data, or NULL if absent. */
const float *herd_st_find(const herd_st_file *f, const char *name, int *ndim, int64_t shape[4]);
size_t herd_st_count(const herd_st_file *f);
const char *herd_st_name(const herd_st_file *f, size_t i);
const char *herd_st_meta(const herd_st_file *f, const char *key); /* NULL if absent */
void herd_st_free(herd_st_file *f);

/* Atomic write helper shared with other writers: writes `len` bytes of buf. */
herd_status herd_write_file_atomic(const char *path, const void *const *parts,
                                   const size_t *lens, size_t n_parts);
/* The same with parts that may be streamed: data, or (data NULL) pieces from next
 * until len bytes came. A source's failure leaves no file and is returned. */
typedef struct herd_file_part {
    const void *data;
    size_t len;
    herd_part_source next;
    void *user;
} herd_file_part;
herd_status herd_write_file_parts_atomic(const char *path, const herd_file_part *parts,
                                         size_t n_parts);

#endif
