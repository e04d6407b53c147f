/* MNIST-style IDX files (idx3 ubyte images, idx1 ubyte labels), raw or gzip. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "core/error.h"
#include "data/dataset.h"

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
/* Caps that turn a corrupt header into a clear error instead of a giant allocation. */
#define IDX_MAX_SIDE 4096u
#define IDX_MAX_COUNT 0x7fffffffu /* the loader's permutations are uint32 */
#define IDX_MAX_BYTES ((size_t)8 << 30)

typedef struct idx_file {
    const char *path;
    gzFile gz;
    bool compressed;
    size_t consumed; /* uncompressed bytes read so far, for the truncation message */
} idx_file;

static herd_status idx_open(idx_file *f, const char *path)
{
    memset(f, 0, sizeof *f);
    f->path = path;
    FILE *probe = fopen(path, "rb");
    if (!probe)
        return HERD_ERR(HERD_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char magic[2] = {0, 0};
    size_t got = fread(magic, 1, 2, probe);
    fclose(probe);
    f->compressed = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    /* zlib reads raw files transparently, so one code path serves both. */
    f->gz = gzopen(path, "rb");
    if (!f->gz)
        return HERD_ERR(HERD_ERR_IO, "%s: cannot open: %s", path, strerror(errno ? errno : ENOMEM));
    gzbuffer(f->gz, 1u << 17);
    return HERD_OK;
}

static void idx_close(idx_file *f)
{
    if (f->gz)
        gzclose_r(f->gz);
    f->gz = NULL;
}

/* Reads exactly len bytes; `expected_total` is the file's full expected size for the message. */
static herd_status idx_read(idx_file *f, void *buf, size_t len, size_t expected_total)
{
    unsigned char *p = buf;
    size_t done = 0;
    while (done < len) {
        size_t chunk = len - done;
        if (chunk > (1u << 30))
            chunk = 1u << 30;
        int r = gzread(f->gz, p + done, (unsigned)chunk);
        if (r > 0) {
            done += (size_t)r;
            continue;
        }
        int zerr = Z_OK;
        const char *zmsg = gzerror(f->gz, &zerr);
        f->consumed += done;
        /* Z_BUF_ERROR is zlib's "unexpected end of file": a cut-off gzip stream. */
        if (r == 0 || zerr == Z_BUF_ERROR)
            return HERD_ERR(HERD_ERR_FORMAT,
                            "%s: truncated file: expected %zu bytes%s, got %zu; re-download it",
                            f->path, expected_total, f->compressed ? " (uncompressed)" : "",
                            f->consumed);
        if (zerr == Z_ERRNO)
            return HERD_ERR(HERD_ERR_IO, "%s: read failed: %s", f->path, strerror(errno));
        return HERD_ERR(HERD_ERR_FORMAT, "%s: unreadable gzip data (zlib: %s); re-download it",
                        f->path, zmsg ? zmsg : "unknown error");
    }
    f->consumed += done;
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
    HERD_TRY(idx_open(&f, path));
    uint32_t d[3] = {0, 0, 0};
    herd_status st = idx_header(&f, IDX_MAGIC_IMAGES, 3, d, "images");
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
    uint8_t *buf = malloc(bytes);
    if (!buf) {
        st = HERD_NOMEM(bytes);
        goto done;
    }
    st = idx_read(&f, buf, bytes, 16 + bytes);
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
    HERD_TRY(idx_open(&f, path));
    uint32_t count = 0;
    herd_status st = idx_header(&f, IDX_MAGIC_LABELS, 1, &count, "labels");
    if (st != HERD_OK)
        goto done;
    if (count == 0 || count > IDX_MAX_COUNT) {
        st = HERD_ERR(HERD_ERR_FORMAT, "%s: implausible label count %u", path, count);
        goto done;
    }
    uint8_t *buf = malloc(count);
    if (!buf) {
        st = HERD_NOMEM(count);
        goto done;
    }
    st = idx_read(&f, buf, count, 8 + (size_t)count);
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

herd_status herd_idx_load(const char *images_path, const char *labels_path, herd_dataset *ds)
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
    /* Labels are bytes, so they cannot exceed 255; classes is the largest seen plus one,
     * at least 10 so a small test split still matches its 10-class train split. */
    int max_label = 0;
    for (size_t i = 0; i < n_lab; i++) {
        labels[i] = raw_labels[i];
        if (labels[i] > max_label)
            max_label = labels[i];
    }
    free(raw_labels);
    ds->n = n_img;
    ds->c = 1;
    ds->h = rows;
    ds->w = cols;
    ds->classes = max_label + 1 > 10 ? max_label + 1 : 10;
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
