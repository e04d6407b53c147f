/* MNIST-style IDX files (idx3 ubyte images, idx1 ubyte labels), raw or gzip. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "core/error.h"
#include "core/hugepages.h"
#include "data/dataset.h"

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
/* Caps that turn a corrupt header into a clear error instead of a giant allocation. */
#define IDX_MAX_SIDE 4096u
#define IDX_MAX_COUNT 0x7fffffffu /* the loader's permutations are uint32 */
#define IDX_MAX_BYTES ((size_t)8 << 30)

/* A raw or gzip IDX file. gzip is inflated here rather than through gzread, which skips
 * whatever follows the last gzip member without a word. */
typedef struct idx_file {
    const char *path;
    FILE *f;
    bool compressed;
    bool z_live;     /* inflateInit2 succeeded: inflateEnd is due */
    bool z_ended;    /* the last gzip member ended; any input left over is trailing data */
    z_stream z;
    unsigned char *in; /* compressed input buffer */
    size_t consumed;   /* uncompressed bytes read so far, for the truncation message */
} idx_file;

#define IDX_IN_BUF (1u << 17)

static herd_status idx_open(idx_file *f, const char *path)
{
    memset(f, 0, sizeof *f);
    f->path = path;
    f->f = fopen(path, "rb");
    if (!f->f)
        return HERD_ERR(HERD_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    int b0 = getc(f->f), b1 = getc(f->f);
    f->compressed = b0 == 0x1f && b1 == 0x8b;
    rewind(f->f);
    if (!f->compressed)
        return HERD_OK;
    f->in = malloc(IDX_IN_BUF);
    f->z_live = f->in && inflateInit2(&f->z, 16 + MAX_WBITS) == Z_OK; /* 16: gzip wrapper only */
    return f->z_live ? HERD_OK : HERD_NOMEM(IDX_IN_BUF);
}

static void idx_close(idx_file *f)
{
    if (f->z_live)
        inflateEnd(&f->z);
    if (f->f)
        fclose(f->f);
    free(f->in);
    memset(f, 0, sizeof *f);
}

/* Tops the compressed input up to at least `want` bytes when fewer are left (the rest
 * moves to the buffer's start); *more is false only at the end of the file. */
static herd_status idx_fill(idx_file *f, size_t want, bool *more)
{
    if (f->z.avail_in < want) {
        size_t kept = f->z.avail_in;
        if (kept)
            memmove(f->in, f->z.next_in, kept);
        size_t n = fread(f->in + kept, 1, IDX_IN_BUF - kept, f->f);
        if (n == 0 && ferror(f->f))
            return HERD_ERR(HERD_ERR_IO, "%s: read failed: %s", f->path, strerror(errno));
        f->z.next_in = f->in;
        f->z.avail_in = (uInt)(kept + n);
    }
    *more = f->z.avail_in > 0;
    return HERD_OK;
}

/* Inflates up to len bytes into p; *got is less than len only at the end of the data. */
static herd_status idx_inflate(idx_file *f, unsigned char *p, size_t len, size_t *got)
{
    f->z.next_out = p;
    f->z.avail_out = (uInt)len;
    while (f->z.avail_out > 0 && !f->z_ended) {
        bool more = false;
        HERD_TRY(idx_fill(f, 1, &more));
        if (!more)
            break; /* the stream stopped before its end: truncated */
        int r = inflate(&f->z, Z_NO_FLUSH);
        if (r == Z_STREAM_END) {
            /* gzip allows several members back to back; anything else is trailing data.
             * Two bytes for the magic, even when the member ended one byte before the
             * buffer's end. */
            HERD_TRY(idx_fill(f, 2, &more));
            if (more && f->z.avail_in >= 2 && f->z.next_in[0] == 0x1f && f->z.next_in[1] == 0x8b)
                inflateReset(&f->z);
            else
                f->z_ended = true;
        } else if (r != Z_OK && r != Z_BUF_ERROR) {
            return HERD_ERR(HERD_ERR_FORMAT, "%s: unreadable gzip data (zlib: %s); re-download it",
                            f->path, f->z.msg ? f->z.msg : zError(r));
        }
    }
    *got = len - f->z.avail_out;
    return HERD_OK;
}

/* Reads exactly len bytes; `expected_total` is the file's full expected size for the message. */
static herd_status idx_read(idx_file *f, void *buf, size_t len, size_t expected_total)
{
    unsigned char *p = buf;
    size_t done = 0, got = 1;
    while (done < len && got > 0) {
        size_t chunk = len - done < (1u << 30) ? len - done : (1u << 30); /* zlib counts in uInt */
        if (f->compressed) {
            HERD_TRY(idx_inflate(f, p + done, chunk, &got));
        } else {
            got = fread(p + done, 1, chunk, f->f);
            if (got < chunk && ferror(f->f))
                return HERD_ERR(HERD_ERR_IO, "%s: read failed: %s", f->path, strerror(errno));
        }
        done += got;
        f->consumed += got;
    }
    if (done < len)
        return HERD_ERR(HERD_ERR_FORMAT,
                        "%s: truncated file: expected %zu bytes%s, got %zu; re-download it",
                        f->path, expected_total, f->compressed ? " (uncompressed)" : "",
                        f->consumed);
    return HERD_OK;
}

/* Reads exactly len bytes into a new buffer (*out). The buffer grows as the data arrives
 * (from 16 MiB, doubling), so a header declaring gigabytes in a file that holds a few
 * bytes (a gzip stream says its size only at the end) fails as truncated without
 * allocating what it declares. */
#define IDX_GROW_FROM ((size_t)16 << 20)
static herd_status idx_read_new(idx_file *f, size_t len, size_t expected_total, uint8_t **out)
{
    size_t cap = len < IDX_GROW_FROM ? len : IDX_GROW_FROM, done = 0;
    uint8_t *buf = malloc(cap ? cap : 1);
    if (!buf)
        return HERD_NOMEM(cap);
    /* Huge pages only for the block that will not grow: advising one that realloc then
     * grows splits its mapping, and glibc copies it instead of moving it (mremap fails). */
    if (cap == len)
        herd_huge_advise(buf, cap);
    for (;;) {
        herd_status st = idx_read(f, buf + done, cap - done, expected_total);
        if (st != HERD_OK) {
            free(buf);
            return st;
        }
        done = cap;
        if (cap == len)
            break;
        size_t next = cap < len / 2 ? 2 * cap : len;
        uint8_t *grown = realloc(buf, next);
        if (!grown) {
            free(buf);
            return HERD_NOMEM(next);
        }
        buf = grown;
        if (next == len)
            herd_huge_advise(buf, next);
        cap = next;
    }
    *out = buf;
    return HERD_OK;
}

/* After the data its header declares, the file must end: extra bytes mean the header or
 * the file is wrong, and guessing which would load wrong samples. */
static herd_status idx_expect_end(idx_file *f)
{
    unsigned char extra[4096];
    size_t n = 0, more = 0;
    if (!f->compressed) {
        while ((n = fread(extra, 1, sizeof extra, f->f)) > 0)
            more += n;
        if (more)
            return HERD_ERR(HERD_ERR_FORMAT, "%s: %zu bytes follow the %zu its header declares; the "
                            "header's counts or the file are wrong: re-download it",
                            f->path, more, f->consumed);
        return HERD_OK;
    }
    do {
        HERD_TRY(idx_inflate(f, extra, sizeof extra, &n));
        more += n;
    } while (n == sizeof extra);
    if (more)
        return HERD_ERR(HERD_ERR_FORMAT, "%s: %zu uncompressed bytes follow the %zu its header "
                        "declares; the header's counts or the file are wrong: re-download it",
                        f->path, more, f->consumed);
    if (!f->z_ended)
        return HERD_ERR(HERD_ERR_FORMAT, "%s: the gzip stream is cut off after its data (no gzip "
                        "trailer); re-download it", f->path);
    size_t trailing = f->z.avail_in;
    while ((n = fread(extra, 1, sizeof extra, f->f)) > 0)
        trailing += n;
    if (trailing)
        return HERD_ERR(HERD_ERR_FORMAT, "%s: %zu bytes of trailing data follow the gzip stream "
                        "(at byte %ld of the file); re-download it", f->path, trailing,
                        ftell(f->f) - (long)trailing);
    return HERD_OK;
}

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

/* Reads an IDX header: magic then `ndims` big-endian sizes. */
static herd_status idx_header(idx_file *f, uint32_t want_magic, int ndims, uint32_t *dims,
                              const char *what)
{
    unsigned char b[16];
    size_t hdr = 4u * (size_t)(1 + ndims);
    HERD_TRY(idx_read(f, b, hdr, hdr));
    uint32_t magic = be32(b);
    if (magic != want_magic)
        return HERD_ERR(HERD_ERR_FORMAT,
                        "%s: wrong magic number 0x%08x, expected 0x%08x (an IDX %s file)", f->path,
                        magic, want_magic, what);
    for (int i = 0; i < ndims; i++)
        dims[i] = be32(b + 4 * (i + 1));
    return HERD_OK;
}

/* Loads all images of an idx3 file into *pixels (n x rows x cols). */
static herd_status idx_read_images(const char *path, size_t *n, int *rows, int *cols,
                                   uint8_t **pixels)
{
    idx_file f;
    uint32_t d[3] = {0, 0, 0};
    herd_status st = idx_open(&f, path);
    if (st == HERD_OK)
        st = idx_header(&f, IDX_MAGIC_IMAGES, 3, d, "images");
    if (st != HERD_OK)
        goto done;
    if (d[0] == 0 || d[0] > IDX_MAX_COUNT || d[1] == 0 || d[1] > IDX_MAX_SIDE || d[2] == 0 ||
        d[2] > IDX_MAX_SIDE || (size_t)d[0] * d[1] * d[2] > IDX_MAX_BYTES) {
        st = HERD_ERR(HERD_ERR_FORMAT, "%s: implausible image count or size %u x %u x %u", path,
                      d[0], d[1], d[2]);
        goto done;
    }
    size_t bytes = (size_t)d[0] * d[1] * d[2];
    /* A raw file's size is known up front: fail before allocating for a bad header. */
    struct stat sb;
    if (!f.compressed && stat(path, &sb) == 0 && (size_t)sb.st_size < 16 + bytes) {
        st = HERD_ERR(HERD_ERR_FORMAT, "%s: truncated file: expected %zu bytes, got %zu; re-download it",
                      path, 16 + bytes, (size_t)sb.st_size);
        goto done;
    }
    uint8_t *buf = NULL;
    st = idx_read_new(&f, bytes, 16 + bytes, &buf);
    if (st != HERD_OK)
        goto done;
    st = idx_expect_end(&f);
    if (st != HERD_OK) {
        free(buf);
        goto done;
    }
    *n = d[0];
    *rows = (int)d[1];
    *cols = (int)d[2];
    *pixels = buf;
done:
    idx_close(&f);
    return st;
}

static herd_status idx_read_labels(const char *path, size_t *n, uint8_t **labels)
{
    idx_file f;
    uint32_t count = 0;
    herd_status st = idx_open(&f, path);
    if (st == HERD_OK)
        st = idx_header(&f, IDX_MAGIC_LABELS, 1, &count, "labels");
    if (st != HERD_OK)
        goto done;
    if (count == 0 || count > IDX_MAX_COUNT) {
        st = HERD_ERR(HERD_ERR_FORMAT, "%s: implausible label count %u", path, count);
        goto done;
    }
    uint8_t *buf = NULL;
    st = idx_read_new(&f, count, 8 + (size_t)count, &buf);
    if (st != HERD_OK)
        goto done;
    st = idx_expect_end(&f);
    if (st != HERD_OK) {
        free(buf);
        goto done;
    }
    *n = count;
    *labels = buf;
done:
    idx_close(&f);
    return st;
}

herd_status herd_idx_load(const char *images_path, const char *labels_path, int classes,
                          herd_dataset *ds)
{
    size_t n_img = 0, n_lab = 0;
    int rows = 0, cols = 0;
    uint8_t *pixels = NULL, *raw_labels = NULL;
    HERD_TRY(idx_read_images(images_path, &n_img, &rows, &cols, &pixels));
    herd_status st = idx_read_labels(labels_path, &n_lab, &raw_labels);
    if (st != HERD_OK) {
        free(pixels);
        return st;
    }
    if (n_img != n_lab) {
        free(pixels);
        free(raw_labels);
        return HERD_ERR(HERD_ERR_FORMAT, "%s has %zu images but %s has %zu labels; the files do not belong together",
                        images_path, n_img, labels_path, n_lab);
    }
    int32_t *labels = herd_xcalloc(n_lab, sizeof *labels);
    if (!labels) {
        free(pixels);
        free(raw_labels);
        return HERD_ERR_NOMEM;
    }
    /* The class count is declared, not inferred: a stray label must not grow the model. */
    for (size_t i = 0; i < n_lab; i++) {
        if (raw_labels[i] >= classes) {
            herd_status bad = HERD_ERR(HERD_ERR_FORMAT,
                                       "%s: sample %zu has label %d, outside 0..%d for %d classes; "
                                       "fix the file, or declare the class count with "
                                       "idx:DIR,CLASSES", labels_path, i, raw_labels[i],
                                       classes - 1, classes);
            free(pixels);
            free(raw_labels);
            free(labels);
            return bad;
        }
        labels[i] = raw_labels[i];
    }
    free(raw_labels);
    ds->n = n_img;
    ds->c = 1;
    ds->h = rows;
    ds->w = cols;
    ds->classes = classes;
    ds->images = pixels;
    ds->labels = labels;
    return HERD_OK;
}

herd_status herd_idx_pixel_stats(const char *images_path, float *mean, float *std)
{
    size_t n = 0;
    int rows = 0, cols = 0;
    uint8_t *pixels = NULL;
    HERD_TRY(idx_read_images(images_path, &n, &rows, &cols, &pixels));
    herd_pixel_stats(pixels, n, 1, (size_t)rows * cols, mean, std);
    free(pixels);
    return HERD_OK;
}
