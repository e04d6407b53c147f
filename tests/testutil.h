/* Shared helpers for the cmocka tests. */
#ifndef HERD_TESTUTIL_H
#define HERD_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "herd/herd.h"

/* Fails the test with herd_last_error() when st is not HERD_OK. */
#define assert_herd_ok(expr)                                                                  \
    do {                                                                                      \
        herd_status st_ = (expr);                                                             \
        if (st_ != HERD_OK)                                                                   \
            fail_msg("%s -> %s: %s", #expr, herd_status_name(st_), herd_last_error());        \
    } while (0)

/* A fresh temporary directory (removed by tu_rmtree). */
char *tu_tempdir(void);
void tu_rmtree(const char *dir);
/* Writes bytes to dir/name; returns the malloc'd path. */
char *tu_write_file(const char *dir, const char *name, const void *data, size_t len);
/* The whole file, malloc'd and NUL-terminated; its length in *len unless len is NULL. */
char *tu_read_file(const char *path, size_t *len);
/* Largest |a-b| / max(1, |b|) over n elements. */
double tu_max_rel_err(const float *a, const float *b, size_t n);
/* Fills with uniform values in [lo, hi) from a fixed seed. */
void tu_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed);
/* n uniform values in [-1, 1) from seed, malloc'd (n = 0 gives a valid pointer). */
float *tu_randv(size_t n, uint64_t seed);
/* True when the tests run under the sanitizer build (HERD_SANITIZED=1): long tests shrink. */
int tu_sanitized(void);

#endif
