/* File-system helpers shared by the writers of checkpoints and logs. */
#include "core/fs.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
    bool failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        return HERD_ERR(HERD_ERR_IO, "error reading %s '%s'", what, path);
    }
    buf[len] = '\0';
    *out = buf;
    return HERD_OK;
}
