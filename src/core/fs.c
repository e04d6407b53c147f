/* File-system helpers shared by the writers of checkpoints and logs. */
#include "core/fs.h"

#include <errno.h>
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
