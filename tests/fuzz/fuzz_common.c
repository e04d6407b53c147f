/* See fuzz.h. */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>

static char dir[256];

static void cleanup(void)
{
    if (!dir[0])
        return;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

const char *fz_dir(void)
{
    if (!dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/herd-fuzz-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(dir)) {
            fprintf(stderr, "fuzz: cannot create a scratch directory %s: %s\n", dir, strerror(errno));
            abort();
        }
        atexit(cleanup);
    }
    return dir;
}

void fz_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", fz_dir(), name);
}

void fz_write(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
        fprintf(stderr, "fuzz: cannot write %s: %s\n", path, strerror(errno));
        abort();
    }
}

char *fz_strndup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

int fz_split(const uint8_t *data, size_t size, const uint8_t **ptr, size_t *len, int max)
{
    const size_t sl = strlen(FZ_SEP);
    int n = 0;
    const uint8_t *p = data, *end = data + size;
    while (n < max - 1) {
        const uint8_t *hit = NULL;
        for (const uint8_t *q = p; q + sl <= end; q++)
            if (*q == FZ_SEP[0] && memcmp(q, FZ_SEP, sl) == 0) {
                hit = q;
                break;
            }
        if (!hit)
            break;
        ptr[n] = p;
        len[n++] = (size_t)(hit - p);
        p = hit + sl;
    }
    ptr[n] = p;
    len[n++] = (size_t)(end - p);
    return n;
}
