/* safetensors reader and writer, and the atomic file write they share with
 * checkpoints. The reader treats the file as untrusted: every length, offset
 * and shape is checked before use, and failures name the file and the problem. */
#include "core/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/error.h"

/* Tensor data are written and read as the host's floats. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors I/O assumes a little-endian host; add byte swapping to port herd");

#define ST_MAX_HEADER (100u << 20) /* the reference implementation's limit */
#define ST_HINT "; the file may be truncated or corrupt: re-save it or use another copy"

/* ------------------------------------------------------------ atomic write */

static herd_status fsync_dir_of(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return HERD_NOMEM(strlen(path) + 1);
    const char *dir = dirname(copy);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    herd_status st = HERD_OK;
    /* Without this the rename itself may not survive a power cut. */
    if (fd < 0 || fsync(fd) != 0)
        st = HERD_ERR(HERD_ERR_IO, "cannot sync directory '%s' after writing '%s': %s", dir, path,
                      strerror(errno));
    if (fd >= 0)
        close(fd);
    free(copy);
    return st;
}

/* Test hook: HERD_TEST_KILL_IN_WRITE=N kills the process (SIGKILL) in the middle of
 * its N-th atomic write, so tests can show that a crash at any point of a checkpoint
 * leaves the previous one in force. Under herd run --max-restarts only the first
 * attempt is killed (HERD_RUN_RESTARTS=0), so the restart can finish. */
static bool test_kill_this_write(void)
{
    static atomic_long writes;
    const char *v = getenv("HERD_TEST_KILL_IN_WRITE"), *restarts = getenv("HERD_RUN_RESTARTS");
    if (restarts && atol(restarts) > 0)
        return false;
    return v && *v && atomic_fetch_add(&writes, 1) + 1 == atol(v);
}

/* One streamed part: asks its source for pieces until len bytes are written. */
static int write_streamed(FILE *f, const herd_file_part *p, XXH3_state_t *hash, herd_status *failed)
{
    size_t written = 0;
    while (written < p->len) {
        const void *piece = NULL;
        size_t bytes = 0;
        herd_status st = p->next(p->user, &piece, &bytes);
        if (st == HERD_OK && (bytes == 0 || bytes > p->len - written || !piece))
            st = HERD_ERR(HERD_ERR_INTERNAL, "a streamed part gave %zu bytes with %zu of %zu "
                          "left", bytes, p->len - written, p->len);
        if (st != HERD_OK) {
            *failed = st;
            return EIO;
        }
        if (fwrite(piece, 1, bytes, f) != bytes)
            return errno ? errno : EIO;
        if (hash)
            XXH3_64bits_update(hash, piece, bytes);
        written += bytes;
    }
    return 0;
}

herd_status herd_write_file_atomic(const char *path, const void *const *parts,
                                   const size_t *lens, size_t n_parts)
{
    if (n_parts > 0 && (!parts || !lens))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "write_file_atomic: parts must not be NULL");
    herd_file_part *p = herd_xcalloc(n_parts ? n_parts : 1, sizeof *p);
    if (!p)
        return HERD_ERR_NOMEM;
    for (size_t i = 0; i < n_parts; i++)
        p[i] = (herd_file_part){.data = parts[i], .len = lens[i]};
    herd_status st = herd_write_file_parts_atomic(path, p, n_parts);
    free(p);
    return st;
}

/* slot: the file offset of HERD_ST_SUM_DIGITS placeholder digits that get the hash of
 * every byte written (placeholder included), once all were written; or -1. */
static herd_status write_parts_atomic(const char *path, const herd_file_part *parts, size_t n_parts,
                                      long slot)
{
    if (!path || (n_parts > 0 && !parts))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "write_file_atomic: path and parts must not be NULL");
    /* The temporary lives in the destination directory so rename() is atomic. */
    size_t tlen = strlen(path) + 16;
    char *tmp = malloc(tlen);
    if (!tmp)
        return HERD_NOMEM(tlen);
    snprintf(tmp, tlen, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        herd_status st = HERD_ERR(HERD_ERR_IO,
                                  "cannot create a temporary file next to '%s': %s; check that the "
                                  "directory exists and is writable", path, strerror(errno));
        free(tmp);
        return st;
    }
    (void)fchmod(fd, 0644); /* mkstemp's 0600 would make saved weights private */
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        herd_status st = HERD_ERR(HERD_ERR_IO, "cannot open '%s' for writing: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        return st;
    }
    int err = 0;
    herd_status source_failed = HERD_OK;
    XXH3_state_t *hash = slot >= 0 ? XXH3_createState() : NULL;
    if (slot >= 0 && (!hash || XXH3_64bits_reset(hash) != XXH_OK))
        err = ENOMEM;
    errno = 0; /* so a short fwrite without errno reads as EIO, not a stale code */
    bool kill_here = test_kill_this_write();
    for (size_t i = 0; i < n_parts && !err; i++) {
        const herd_file_part *p = &parts[i];
        if (kill_here && i == n_parts / 2) { /* a crash with the file half written */
            if (p->data)
                fwrite(p->data, 1, p->len / 2, f);
            fflush(f);
            raise(SIGKILL);
        }
        if (!p->data && p->len > 0)
            err = write_streamed(f, p, hash, &source_failed);
        else if (p->len > 0 && fwrite(p->data, 1, p->len, f) != p->len)
            err = errno ? errno : EIO;
        else if (hash && p->len > 0)
            XXH3_64bits_update(hash, p->data, p->len);
    }
    if (!err && fflush(f) != 0)
        err = errno;
    if (!err && hash) { /* the data went by once; the digest goes into the header's slot */
        char digits[HERD_ST_SUM_DIGITS + 1];
        snprintf(digits, sizeof digits, "%016llx", (unsigned long long)XXH3_64bits_digest(hash));
        if (pwrite(fileno(f), digits, HERD_ST_SUM_DIGITS, slot) != HERD_ST_SUM_DIGITS)
            err = errno ? errno : EIO;
    }
    XXH3_freeState(hash);
    if (!err && fsync(fileno(f)) != 0)
        err = errno;
    if (fclose(f) != 0 && !err)
        err = errno ? errno : EIO;
    if (!err && rename(tmp, path) != 0)
        err = errno;
    if (err) {
        unlink(tmp);
        free(tmp);
        if (source_failed != HERD_OK)
            return HERD_ERR(source_failed, "cannot write '%s': %s", path, herd_last_error());
        return HERD_ERR(HERD_ERR_IO, "cannot write '%s': %s; check free disk space and permissions", path,
                        strerror(err));
    }
    free(tmp);
    return fsync_dir_of(path);
}

herd_status herd_write_file_parts_atomic(const char *path, const herd_file_part *parts,
                                         size_t n_parts)
{
    return write_parts_atomic(path, parts, n_parts, -1);
}

/* --------------------------------------------------------------- checksum */

#define SUM_PREFIX "\"" HERD_ST_SUM_KEY "\":\""

static bool is_lower_hex(unsigned char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

int herd_st_checksum_slot(const unsigned char *header, size_t len, size_t *slot)
{
    /* Inside a JSON string every quote is escaped, so the unescaped key-quote-colon-quote
     * sequence is the key itself: the first one is the only candidate. */
    const size_t plen = strlen(SUM_PREFIX), need = plen + HERD_ST_SUM_DIGITS + 1;
    for (size_t i = 0; len >= need && i <= len - need; i++) {
        if (header[i] != '"' || memcmp(header + i, SUM_PREFIX, plen) != 0)
            continue;
        const unsigned char *d = header + i + plen;
        for (int k = 0; k < HERD_ST_SUM_DIGITS; k++)
            if (!is_lower_hex(d[k]))
                return -1;
        if (d[HERD_ST_SUM_DIGITS] != '"')
            return -1;
        *slot = i + plen;
        return 0;
    }
    return -1;
}

uint64_t herd_st_checksum(const unsigned char *file, size_t len, size_t slot)
{
    static const char zeros[HERD_ST_SUM_DIGITS + 1] = "0000000000000000";
    XXH3_state_t *h = XXH3_createState();
    if (!h || XXH3_64bits_reset(h) != XXH_OK) {
        XXH3_freeState(h);
        return 0; /* no digest is 0 in practice; a mismatch is then reported, never a pass */
    }
    XXH3_64bits_update(h, file, slot);
    XXH3_64bits_update(h, zeros, HERD_ST_SUM_DIGITS);
    XXH3_64bits_update(h, file + slot + HERD_ST_SUM_DIGITS, len - slot - HERD_ST_SUM_DIGITS);
    uint64_t sum = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return sum;
}

/* ----------------------------------------------------------------- writer */

static int shape_numel(int ndim, const int64_t *shape, size_t *numel)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return -1;
        size_t d = (size_t)shape[i];
        if (d != 0 && n > SIZE_MAX / sizeof(float) / d)
            return -1;
        n *= d;
    }
    *numel = n;
    return 0;
}

herd_status herd_safetensors_write(const char *path, const herd_st_entry *entries, size_t n,
                                   const char *const *keys, const char *const *values,
                                   size_t n_meta)
{
    if (!path || (n > 0 && !entries) || (n_meta > 0 && (!keys || !values)))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "safetensors_write: path, entries and metadata must not be NULL");
    herd_status st = HERD_OK;
    cJSON *root = cJSON_CreateObject();
    char *json = NULL;
    herd_file_part *parts = NULL;
    if (!root)
        return HERD_NOMEM(0);

    parts = calloc(n + 2, sizeof *parts);
    if (!parts) {
        st = HERD_NOMEM((n + 2) * sizeof *parts);
        goto out;
    }
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const herd_st_entry *e = &entries[i];
        size_t numel;
        if (!e->name || !*e->name || strcmp(e->name, "__metadata__") == 0 ||
            cJSON_GetObjectItemCaseSensitive(root, e->name)) {
            st = HERD_ERR(HERD_ERR_INVALID_ARG,
                          "cannot write '%s': tensor %zu has an empty, reserved or duplicate name '%s'",
                          path, i, e->name ? e->name : "(null)");
            goto out;
        }
        if (e->ndim < 0 || e->ndim > 4 || shape_numel(e->ndim, e->shape, &numel) != 0 ||
            (numel > 0 && !e->data && !e->next)) {
            st = HERD_ERR(HERD_ERR_INVALID_ARG, "cannot write '%s': tensor '%s' has an invalid shape or no data",
                          path, e->name);
            goto out;
        }
        cJSON *t = cJSON_AddObjectToObject(root, e->name);
        cJSON *shape = NULL, *offs = NULL;
        if (t && cJSON_AddStringToObject(t, "dtype", "F32") &&
            (shape = cJSON_AddArrayToObject(t, "shape")) != NULL)
            offs = cJSON_AddArrayToObject(t, "data_offsets");
        if (!offs) {
            st = HERD_NOMEM(0);
            goto out;
        }
        for (int d = 0; d < e->ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)e->shape[d]));
        size_t bytes = numel * sizeof(float);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + bytes)));
        parts[i + 2] = (herd_file_part){.data = e->data, .len = bytes, .next = e->next,
                                        .user = e->user};
        off += bytes;
    }
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    if (!meta) {
        st = HERD_NOMEM(0);
        goto out;
    }
    for (size_t i = 0; i < n_meta; i++) {
        if (!keys[i] || !values[i] || strcmp(keys[i], HERD_ST_SUM_KEY) == 0) {
            st = HERD_ERR(HERD_ERR_INVALID_ARG, "cannot write '%s': metadata entry %zu is NULL or "
                          "the reserved '" HERD_ST_SUM_KEY "'", path, i);
            goto out;
        }
        cJSON_AddStringToObject(meta, keys[i], values[i]);
    }
    /* Zeros now; the digest of the whole file (these zeros included) replaces them. */
    cJSON_AddStringToObject(meta, HERD_ST_SUM_KEY, "0000000000000000");
    json = cJSON_PrintUnformatted(root);
    if (!json) {
        st = HERD_NOMEM(0);
        goto out;
    }
    size_t slot;
    if (herd_st_checksum_slot((const unsigned char *)json, strlen(json), &slot) != 0) {
        st = HERD_ERR(HERD_ERR_INTERNAL, "cannot write '%s': its header lacks the checksum's slot", path);
        goto out;
    }
    /* Pad with spaces so the data start 8-byte aligned (readers may mmap it). */
    size_t jlen = strlen(json), hlen = (jlen + 7) / 8 * 8;
    char *padded = realloc(json, hlen + 1);
    if (!padded) {
        st = HERD_NOMEM(hlen);
        goto out;
    }
    json = padded;
    memset(json + jlen, ' ', hlen - jlen);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    parts[0] = (herd_file_part){.data = len8, .len = 8};
    parts[1] = (herd_file_part){.data = json, .len = hlen};
    st = write_parts_atomic(path, parts, n + 2, (long)(8 + slot));
out:
    free(json);
    free(parts);
    cJSON_Delete(root);
    return st;
}

/* ----------------------------------------------------------------- reader */

typedef struct st_tensor {
    char *name;
    int ndim;
    int64_t shape[4];
    size_t begin, end; /* byte offsets within the data section */
    float *data;
} st_tensor;

struct herd_st_file {
    st_tensor *t;
    size_t n;
    char **meta_keys, **meta_values;
    size_t n_meta;
};

void herd_st_free(herd_st_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++) {
        free(f->t[i].name);
        free(f->t[i].data);
    }
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->t);
    free(f->meta_keys);
    free(f->meta_values);
    free(f);
}

/* A JSON number that is an exact non-negative integer below 2^53. */
static int json_uint(const cJSON *j, uint64_t *out)
{
    if (!cJSON_IsNumber(j))
        return -1;
    double d = j->valuedouble;
    if (!(d >= 0 && d < 9007199254740992.0) || floor(d) != d)
        return -1;
    *out = (uint64_t)d;
    return 0;
}

static herd_status read_all(const char *path, unsigned char **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return HERD_ERR(HERD_ERR_IO, "cannot open '%s': %s; check the path", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return HERD_ERR(HERD_ERR_IO, "'%s' is not a regular file; give the path of a .safetensors file", path);
    }
    size_t size = (size_t)sb.st_size;
    unsigned char *b = malloc(size ? size : 1);
    if (!b) {
        fclose(f);
        return HERD_NOMEM(size);
    }
    size_t got = fread(b, 1, size, f);
    int err = ferror(f);
    fclose(f);
    if (err || got != size) {
        free(b);
        return HERD_ERR(HERD_ERR_IO, "cannot read '%s' (%zu of %zu bytes read); is it being written?", path,
                        got, size);
    }
    *buf = b;
    *len = size;
    return HERD_OK;
}

/* By begin, then end, so an empty tensor sorts before a non-empty one at the same offset. */
static int cmp_begin(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    if (x->begin != y->begin)
        return (x->begin > y->begin) - (x->begin < y->begin);
    return (x->end > y->end) - (x->end < y->end);
}

#define BAD(...) do { st = HERD_ERR(HERD_ERR_FORMAT, __VA_ARGS__); goto out; } while (0)

static herd_status parse_tensor(const char *path, const cJSON *item, size_t data_len, st_tensor *t)
{
    herd_status st = HERD_OK;
    const char *name = item->string;
    if (!*name)
        BAD("'%s': a tensor in the header has an empty name" ST_HINT, path);
    if (!cJSON_IsObject(item))
        BAD("'%s': tensor '%s' in the header is not a JSON object" ST_HINT, path, name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dtype) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs))
        BAD("'%s': tensor '%s' lacks a string 'dtype', an array 'shape' or an array 'data_offsets'" ST_HINT,
            path, name);
    if (strcmp(dtype->valuestring, "F32") != 0)
        BAD("'%s': tensor '%s' has dtype %s but herd reads only F32; convert the tensors to float32",
            path, name, dtype->valuestring);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > 4)
        BAD("'%s': tensor '%s' has %d dimensions; herd handles at most 4", path, name, ndim);
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        uint64_t v;
        if (json_uint(cJSON_GetArrayItem(shape, d), &v) != 0)
            BAD("'%s': tensor '%s' has a shape entry that is not a non-negative integer" ST_HINT, path, name);
        t->shape[d] = (int64_t)v;
    }
    size_t numel;
    if (shape_numel(ndim, t->shape, &numel) != 0)
        BAD("'%s': tensor '%s' has a shape too large to address" ST_HINT, path, name);
    uint64_t b, e;
    if (cJSON_GetArraySize(offs) != 2 || json_uint(cJSON_GetArrayItem(offs, 0), &b) != 0 ||
        json_uint(cJSON_GetArrayItem(offs, 1), &e) != 0)
        BAD("'%s': tensor '%s' needs data_offsets [begin, end] of non-negative integers" ST_HINT, path, name);
    if (b > e || e > data_len)
        BAD("'%s': tensor '%s' has data_offsets [%llu, %llu] outside the %zu bytes of data" ST_HINT, path,
            name, (unsigned long long)b, (unsigned long long)e, data_len);
    if (e - b != numel * sizeof(float))
        BAD("'%s': tensor '%s' has data_offsets [%llu, %llu] spanning %llu bytes but its F32 shape "
            "needs %zu" ST_HINT, path, name, (unsigned long long)b, (unsigned long long)e,
            (unsigned long long)(e - b), numel * sizeof(float));
    t->begin = (size_t)b;
    t->end = (size_t)e;
    t->name = strdup(name);
    if (!t->name)
        st = HERD_NOMEM(strlen(name) + 1);
out:
    return st;
}

herd_status herd_safetensors_read(const char *path, herd_st_file **out)
{
    if (!path || !out)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "safetensors_read: path and out must not be NULL");
    *out = NULL;
    unsigned char *buf = NULL;
    size_t len = 0;
    HERD_TRY(read_all(path, &buf, &len));

    herd_status st = HERD_OK;
    cJSON *root = NULL;
    st_tensor **order = NULL;
    herd_st_file *f = calloc(1, sizeof *f);
    if (!f) {
        st = HERD_NOMEM(sizeof *f);
        goto out;
    }
    if (len < 8)
        BAD("'%s' is %zu bytes, shorter than the 8-byte safetensors header length" ST_HINT, path, len);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)buf[i] << (8 * i);
    if (hlen > len - 8)
        BAD("'%s': the header claims %llu bytes but only %zu follow" ST_HINT, path,
            (unsigned long long)hlen, len - 8);
    if (hlen > ST_MAX_HEADER)
        BAD("'%s': the header is %llu bytes, over the %u-byte limit" ST_HINT, path,
            (unsigned long long)hlen, ST_MAX_HEADER);
    /* The checksum first: a changed byte anywhere is reported as such, not as whatever
     * the parser would make of it. Files without one (other writers, older herd)
     * are read as before; the checkpoint loader says so. */
    size_t slot = 0;
    bool summed = herd_st_checksum_slot(buf + 8, (size_t)hlen, &slot) == 0;
    if (summed) {
        slot += 8;
        char got[HERD_ST_SUM_DIGITS + 1];
        snprintf(got, sizeof got, "%016llx", (unsigned long long)herd_st_checksum(buf, len, slot));
        if (memcmp(got, buf + slot, HERD_ST_SUM_DIGITS) != 0)
            BAD("'%s': checksum mismatch: the header records " HERD_ST_SUM_KEY " %.16s but the file's "
                "%zu bytes hash to %s: the file was changed or damaged after it was written" ST_HINT,
                path, (const char *)buf + slot, len, got);
    }
    const char *header = (const char *)buf + 8, *json_end = NULL;
    root = cJSON_ParseWithLengthOpts(header, (size_t)hlen, &json_end, 0);
    if (!cJSON_IsObject(root))
        BAD("'%s': the header (bytes 8..%llu) is not a valid JSON object" ST_HINT, path,
            (unsigned long long)hlen + 8);
    /* Only padding (writers use spaces; JSON whitespace is as harmless) may follow the JSON. */
    for (const char *p = json_end; p < header + hlen; p++)
        if (!strchr(" \t\r\n", *p) || !*p)
            BAD("'%s': file byte %zu (0x%02x) follows the header's JSON object; only whitespace may"
                ST_HINT, path, (size_t)(p - (const char *)buf), (unsigned char)*p);
    size_t data_len = len - 8 - (size_t)hlen;
    const unsigned char *data = buf + 8 + hlen;

    size_t count = (size_t)cJSON_GetArraySize(root);
    f->t = calloc(count ? count : 1, sizeof *f->t);
    f->meta_keys = calloc(1, sizeof *f->meta_keys);
    f->meta_values = calloc(1, sizeof *f->meta_values);
    if (!f->t || !f->meta_keys || !f->meta_values) {
        st = HERD_NOMEM(count * sizeof *f->t);
        goto out;
    }
    const cJSON *item;
    cJSON_ArrayForEach(item, root)
    {
        if (!item->string)
            BAD("'%s': a header entry has no name" ST_HINT, path);
        if (strcmp(item->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(item) || f->n_meta > 0)
                BAD("'%s': __metadata__ must appear once and be an object of strings" ST_HINT, path);
            size_t nm = (size_t)cJSON_GetArraySize(item);
            free(f->meta_keys);
            free(f->meta_values);
            f->meta_keys = calloc(nm ? nm : 1, sizeof *f->meta_keys);
            f->meta_values = calloc(nm ? nm : 1, sizeof *f->meta_values);
            if (!f->meta_keys || !f->meta_values) {
                st = HERD_NOMEM(nm * sizeof(char *));
                goto out;
            }
            const cJSON *kv;
            cJSON_ArrayForEach(kv, item)
            {
                if (!cJSON_IsString(kv) || !kv->string)
                    BAD("'%s': __metadata__ value '%s' is not a string" ST_HINT, path,
                        kv->string ? kv->string : "?");
                for (size_t k = 0; k < f->n_meta; k++)
                    if (strcmp(f->meta_keys[k], kv->string) == 0)
                        BAD("'%s': __metadata__ key '%s' appears twice (values '%s' and '%s')"
                            ST_HINT, path, kv->string, f->meta_values[k], kv->valuestring);
                f->meta_keys[f->n_meta] = strdup(kv->string);
                f->meta_values[f->n_meta] = strdup(kv->valuestring);
                f->n_meta++;
                if (!f->meta_keys[f->n_meta - 1] || !f->meta_values[f->n_meta - 1]) {
                    st = HERD_NOMEM(strlen(kv->valuestring));
                    goto out;
                }
            }
            continue;
        }
        for (size_t i = 0; i < f->n; i++)
            if (strcmp(f->t[i].name, item->string) == 0)
                BAD("'%s': tensor '%s' appears twice in the header" ST_HINT, path, item->string);
        st = parse_tensor(path, item, data_len, &f->t[f->n]);
        if (f->t[f->n].name)
            f->n++; /* counted once its name is owned, so herd_st_free releases it */
        if (st != HERD_OK)
            goto out;
    }

    const char *recorded = herd_st_meta(f, HERD_ST_SUM_KEY);
    if (recorded && (!summed || strlen(recorded) != HERD_ST_SUM_DIGITS ||
                     memcmp(recorded, buf + slot, HERD_ST_SUM_DIGITS) != 0))
        BAD("'%s': __metadata__ '" HERD_ST_SUM_KEY "' is '%.40s', not the 16 lowercase hex digits "
            "herd writes" ST_HINT, path, recorded);

    /* The format requires the byte ranges to tile the data section exactly (no holes, no
     * overlaps): a header length that is off, or inserted bytes, would otherwise load every
     * tensor shifted. Sort by start and walk the ranges end to end. */
    order = calloc(f->n ? f->n : 1, sizeof *order);
    if (!order) {
        st = HERD_NOMEM(f->n * sizeof *order);
        goto out;
    }
    for (size_t i = 0; i < f->n; i++)
        order[i] = &f->t[i];
    qsort(order, f->n, sizeof *order, cmp_begin);
    size_t covered = 0;
    for (size_t i = 0; i < f->n; i++) {
        const st_tensor *t = order[i];
        if (t->begin < covered)
            BAD("'%s': tensors '%s' [%zu, %zu] and '%s' [%zu, %zu] overlap in the data section" ST_HINT,
                path, order[i - 1]->name, order[i - 1]->begin, order[i - 1]->end, t->name, t->begin,
                t->end);
        if (t->begin > covered)
            BAD("'%s': tensor '%s' begins at data byte %zu but %s ends at %zu: %zu bytes belong to no "
                "tensor" ST_HINT, path, t->name, t->begin,
                i ? "the tensor before it" : "the header", covered, t->begin - covered);
        covered = t->end;
    }
    if (covered != data_len)
        BAD("'%s': the tensors end at data byte %zu%s%s%s but the data section has %zu bytes: %zu "
            "bytes belong to no tensor" ST_HINT, path, covered, f->n ? " (tensor '" : "",
            f->n ? order[f->n - 1]->name : "", f->n ? "')" : "", data_len, data_len - covered);

    /* Copies give each tensor aligned float storage whatever the header length. */
    for (size_t i = 0; i < f->n; i++) {
        st_tensor *t = &f->t[i];
        size_t bytes = t->end - t->begin;
        t->data = malloc(bytes ? bytes : 1);
        if (!t->data) {
            st = HERD_NOMEM(bytes);
            goto out;
        }
        memcpy(t->data, data + t->begin, bytes);
    }
out:
    free(order);
    cJSON_Delete(root);
    free(buf);
    if (st != HERD_OK) {
        herd_st_free(f);
        return st;
    }
    *out = f;
    return HERD_OK;
}

const float *herd_st_find(const herd_st_file *f, const char *name, int *ndim, int64_t shape[4])
{
    if (!f || !name)
        return NULL;
    for (size_t i = 0; i < f->n; i++) {
        if (strcmp(f->t[i].name, name) != 0)
            continue;
        if (ndim)
            *ndim = f->t[i].ndim;
        if (shape)
            for (int d = 0; d < 4; d++)
                shape[d] = d < f->t[i].ndim ? f->t[i].shape[d] : 0;
        return f->t[i].data;
    }
    return NULL;
}

size_t herd_st_count(const herd_st_file *f) { return f ? f->n : 0; }

const char *herd_st_name(const herd_st_file *f, size_t i)
{
    return (f && i < f->n) ? f->t[i].name : NULL;
}

const char *herd_st_meta(const herd_st_file *f, const char *key)
{
    if (!f || !key)
        return NULL;
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0)
            return f->meta_values[i];
    return NULL;
}
