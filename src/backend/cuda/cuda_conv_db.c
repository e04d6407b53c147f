/* The file of measured convolution algorithms (a find-db, as MIOpen keeps one): a shape
 * measured once on a GPU model with a cuDNN version is read back by every later run, so
 * two runs of the same job, and a run resumed from a checkpoint, run the same algorithms
 * and end on the same bytes. Timing alone would not promise that: two algorithms within
 * noise of each other swap places between runs, and their sums round differently.
 *
 * The file: $HERD_CUDNN_CACHE, else $XDG_CACHE_HOME/herd/cudnn-algos.tsv, else
 * ~/.cache/herd/cudnn-algos.tsv; HERD_CUDNN_CACHE="" keeps choices in the process only.
 * One line per choice, "KEY<TAB>fwd bwd_data bwd_filter fwd_math bwd_data_math
 * bwd_filter_math workspace", appended with one write each so that ranks sharing the file
 * interleave whole lines. The first line for a key wins. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/cuda/cuda_conv_algo.h"
#include "core/log.h"

#define LINE_MAX_BYTES 512

/* The file's path; "" when choices are not kept. */
static const char *db_path(char *buf, size_t size)
{
    const char *env = getenv("HERD_CUDNN_CACHE");
    if (env)
        return env;
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(buf, size, "%s/herd/cudnn-algos.tsv", xdg);
    else if (home && *home)
        snprintf(buf, size, "%s/.cache/herd/cudnn-algos.tsv", home);
    else
        return "";
    return buf;
}

/* Parses the choice part of a line; false if it is not 7 numbers. */
static bool parse_choice(const char *s, herd_cuda_conv_algos *a)
{
    int f, d, w, fm, dm, wm;
    unsigned long long ws;
    char end;
    if (sscanf(s, "%d %d %d %d %d %d %llu%c", &f, &d, &w, &fm, &dm, &wm, &ws, &end) != 8 ||
        end != '\n' || f < 0 || d < 0 || w < 0 || fm < 0 || dm < 0 || wm < 0)
        return false;
    *a = (herd_cuda_conv_algos){.fwd = f, .bwd_data = d, .bwd_filter = w, .fwd_math = fm,
                                .bwd_data_math = dm, .bwd_filter_math = wm,
                                .workspace = (size_t)ws};
    return true;
}

herd_status herd_cuda_conv_db_lookup(const char *key, herd_cuda_conv_algos *out, bool *found)
{
    char buf[1024];
    const char *path = db_path(buf, sizeof buf);
    *found = false;
    if (!*path)
        return HERD_OK;
    FILE *f = fopen(path, "r");
    if (!f)
        return HERD_OK; /* nothing measured yet (or unreadable: measuring again is right) */
    char line[LINE_MAX_BYTES];
    size_t key_len = strlen(key);
    for (int no = 1; fgets(line, sizeof line, f); no++) {
        if (strncmp(line, key, key_len) != 0 || line[key_len] != '\t')
            continue;
        if (!parse_choice(line + key_len + 1, out)) {
            fclose(f);
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "%s:%d: a damaged line for '%s' in herd's file of measured cuDNN "
                            "algorithms; delete the file (herd measures again) or set "
                            "HERD_CUDNN_CACHE to another path", path, no, key);
        }
        *found = true;
        break;
    }
    fclose(f);
    return HERD_OK;
}

/* mkdir -p of the file's folder (two levels at most below an existing one). */
static void make_parent(const char *path)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return;
    *slash = '\0';
    if (mkdir(dir, 0755) == 0 || errno == EEXIST)
        return;
    char *up = strrchr(dir, '/');
    if (up && up != dir) {
        *up = '\0';
        mkdir(dir, 0755);
        *up = '/';
        mkdir(dir, 0755);
    }
}

herd_status herd_cuda_conv_db_store(const char *key, const herd_cuda_conv_algos *a)
{
    char buf[1024];
    const char *path = db_path(buf, sizeof buf);
    if (!*path)
        return HERD_OK;
    char line[LINE_MAX_BYTES];
    int n = snprintf(line, sizeof line, "%s\t%d %d %d %d %d %d %" PRIu64 "\n", key, (int)a->fwd,
                     (int)a->bwd_data, (int)a->bwd_filter, (int)a->fwd_math,
                     (int)a->bwd_data_math, (int)a->bwd_filter_math, (uint64_t)a->workspace);
    if (n < 0 || (size_t)n >= sizeof line)
        return HERD_ERR(HERD_ERR_INTERNAL, "cuDNN algorithm file: key '%s' is too long", key);
    make_parent(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    /* A file that cannot be written costs later runs a measurement and their run-to-run
     * sameness, not correctness: say so once per process, then go on. */
    static bool warned;
    if (fd < 0 || write(fd, line, (size_t)n) != n) {
        if (!warned)
            herd_log(HERD_LOG_WARNING, "cannot keep measured cuDNN algorithms in %s (%s): each run "
                     "measures again, and two runs may choose differently and differ in the "
                     "last bits; set HERD_CUDNN_CACHE to a writable file", path, strerror(errno));
        warned = true;
    }
    if (fd >= 0)
        close(fd);
    return HERD_OK;
}
