/* File-system helpers shared by the writers of checkpoints and logs. */
#include "core/fs.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

/* Each missing component in turn, so nested new directories work. */
herd_status herd_make_dirs(const char *dir, const char *flag)
{
    char *p = strdup(dir);
    if (!p)
        return HERD_NOMEM(strlen(dir) + 1);
    herd_status st = HERD_OK;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            st = HERD_ERR(HERD_ERR_IO, "cannot create directory '%s' (%s): %s; check the path and permissions",
                          p, flag, strerror(errno));
            break;
        }
        *s = c;
        if (c == '\0')
            break;
    }
    struct stat sb;
    if (st == HERD_OK && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        st = HERD_ERR(HERD_ERR_IO, "'%s' exists but is not a directory; choose another %s", dir, flag);
    free(p);
    return st;
}

herd_status herd_read_text(const char *path, const char *what, const char *hint, char **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return HERD_ERR(HERD_ERR_IO, "cannot open %s '%s': %s; %s", what, path, strerror(errno), hint);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return HERD_NOMEM(cap);
            }
            buf = b;
        }
        size_t got = fread(buf + len, 1, 4096, f);
        len += got;
        if (got < 4096)
            break;
    }
    int err = errno; /* fread's reason (EISDIR for a directory) */
    bool failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        return HERD_ERR(HERD_ERR_IO, "cannot read %s '%s': %s; %s", what, path,
                        strerror(err ? err : EIO), hint);
    }
    /* A NUL byte would end the text early: what follows it would go unread, unchecked. */
    const char *nul = memchr(buf, '\0', len);
    if (nul) {
        size_t at = (size_t)(nul - buf);
        free(buf);
        return HERD_ERR(HERD_ERR_FORMAT, "%s '%s' holds a NUL byte at offset %zu: it is not a "
                        "text file, or it was damaged; %s", what, path, at, hint);
    }
    buf[len] = '\0';
    *out = buf;
    return HERD_OK;
}

/* stat of the directory a path's file lies in, and where its base name starts. */
static bool stat_dir_of(const char *path, struct stat *sb, const char **base)
{
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    if (!slash)
        return stat(".", sb) == 0;
    size_t len = slash == path ? 1 : (size_t)(slash - path);
    char *dir = strndup(path, len);
    bool ok = dir && stat(dir, sb) == 0;
    free(dir);
    return ok;
}

bool herd_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    bool ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea || eb)
        return ea && eb && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    const char *ba, *bb;
    return stat_dir_of(a, &sa, &ba) && stat_dir_of(b, &sb, &bb) && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino && strcmp(ba, bb) == 0;
}

herd_status herd_check_output_file(const char *path, const char *flag)
{
    struct stat sb;
    if (!*path)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s is empty: name a file", flag);
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return HERD_ERR(HERD_ERR_IO, "%s '%s' is a directory: name a file (in it, for example "
                        "'%s/weights.safetensors')", flag, path, path);
    size_t len = strlen(path) + 16;
    char *probe = malloc(len);
    if (!probe)
        return HERD_NOMEM(len);
    snprintf(probe, len, "%s.tmp.XXXXXX", path); /* the writer's own temporary name */
    int fd = mkstemp(probe);
    herd_status st = HERD_OK;
    if (fd < 0)
        st = HERD_ERR(HERD_ERR_IO, "%s '%s': cannot create a file next to it: %s; check that the "
                      "directory exists and is writable", flag, path, strerror(errno));
    else {
        close(fd);
        unlink(probe);
    }
    free(probe);
    return st;
}
