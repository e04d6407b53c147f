/* Error reporting: every failure carries a status, file:line and a hint. */
#ifndef HERD_CORE_ERROR_H
#define HERD_CORE_ERROR_H

#include "herd/herd.h"

/* Records the message for herd_last_error() and returns status; the message ends with
 * " (file.c:line)" unless file is NULL (an option's value refused: the user's input). */
herd_status herd_set_error(herd_status status, const char *file, int line,
                           const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define HERD_ERR(status, ...) herd_set_error((status), __FILE__, __LINE__, __VA_ARGS__)
/* The user's input refused (an option, a combination of options): herd's source line
 * would tell them nothing. */
#define HERD_INPUT_ERR(status, ...) herd_set_error((status), NULL, 0, __VA_ARGS__)
/* The usual case: an option's value, or a combination of options, refused. */
#define HERD_OPTION_ERR(...) HERD_INPUT_ERR(HERD_ERR_INVALID_ARG, __VA_ARGS__)

/* Propagate a failing status unchanged (the callee already set the message). */
#define HERD_TRY(expr)                     \
    do {                                   \
        herd_status herd_try_st_ = (expr); \
        if (herd_try_st_ != HERD_OK)       \
            return herd_try_st_;           \
    } while (0)

/* The first failure among threads working at once (an OpenMP parallel region), whose
 * messages are each thread's own: a thread that fails hands its status to
 * herd_first_error_keep; after the region herd_first_error_status returns the first one
 * with its message as herd_last_error() of the calling thread. */
typedef struct herd_first_error {
    herd_status st;
    char why[1024];
} herd_first_error;
void herd_first_error_keep(herd_first_error *f, herd_status st);
herd_status herd_first_error_status(const herd_first_error *f);

/* Allocation helpers that set an out-of-memory error naming the size. */
void *herd_xcalloc(size_t count, size_t size);
void *herd_aligned_alloc(size_t bytes); /* 64-byte aligned, zeroed; free with herd_aligned_free */
void herd_aligned_free(void *p);

#define HERD_NOMEM(bytes) HERD_ERR(HERD_ERR_NOMEM, "out of memory allocating %zu bytes; try a smaller batch size", (size_t)(bytes))

#endif
