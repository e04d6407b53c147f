#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[1024];

herd_status herd_set_error(herd_status status, const char *file, int line, const char *fmt, ...)
{
    char msg[896];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!file) { /* a user's input refused: herd's source line would say nothing to them */
        snprintf(last_error, sizeof last_error, "%s", msg);
        return status;
    }
    const char *base = strrchr(file, '/');
    snprintf(last_error, sizeof last_error, "%s (%s:%d)", msg, base ? base + 1 : file, line);
    return status;
}

const char *herd_last_error(void) { return last_error; }

void herd_first_error_keep(herd_first_error *f, herd_status st)
{
    if (st == HERD_OK)
        return;
#pragma omp critical(herd_first_error)
    if (f->st == HERD_OK) {
        f->st = st;
        snprintf(f->why, sizeof f->why, "%s", last_error);
    }
}

herd_status herd_first_error_status(const herd_first_error *f)
{
    if (f->st != HERD_OK)
        snprintf(last_error, sizeof last_error, "%s", f->why);
    return f->st;
}

const char *herd_status_name(herd_status s)
{
    switch (s) {
    case HERD_OK: return "ok";
    case HERD_ERR_INVALID_ARG: return "invalid argument";
    case HERD_ERR_IO: return "I/O error";
    case HERD_ERR_FORMAT: return "bad file format";
    case HERD_ERR_NOMEM: return "out of memory";
    case HERD_ERR_UNSUPPORTED: return "unsupported";
    case HERD_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

void *herd_xcalloc(size_t count, size_t size)
{
    if (count == 0 || size == 0)
        count = size = 1;
    void *p = calloc(count, size);
    if (!p)
        HERD_NOMEM(count * size);
    return p;
}

void *herd_aligned_alloc(size_t bytes)
{
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0)
        rounded = 64;
    void *p = aligned_alloc(64, rounded);
    if (!p) {
        HERD_NOMEM(bytes);
        return NULL;
    }
    memset(p, 0, rounded);
    return p;
}

void herd_aligned_free(void *p) { free(p); }
