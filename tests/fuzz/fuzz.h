/* Shared helpers of the libFuzzer targets (tests/fuzz/fuzz_*.c): each target feeds one
 * input to one of herd's parsers and, when the parser accepts it, checks the parser's
 * own invariants, abort()ing when one does not hold (a wrongly accepted input is a
 * finding, as a crash is). */
#ifndef HERD_FUZZ_H
#define HERD_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* An invariant of an accepted input: abort with where and what when it fails. */
#define FZ_CHECK(cond, ...)                                                              \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "fuzz invariant broken at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
            abort();                                                                     \
        }                                                                                \
    } while (0)

/* The process's own scratch directory (created once, removed at exit). */
const char *fz_dir(void);
/* fz_dir()/name, in a static buffer of the caller's choosing. */
void fz_path(char *out, size_t cap, const char *name);
/* Writes len bytes of data to path (made by fz_path), or aborts. */
void fz_write(const char *path, const void *data, size_t len);
/* A NUL-terminated copy of data (the caller frees it). */
char *fz_strndup(const uint8_t *data, size_t size);

/* Splits data at each FZ_SEP into at most max parts: part i is (*ptr[i], len[i]).
 * Returns how many parts there are (1 + separators, at most max; the last part keeps
 * any further separators). */
#define FZ_SEP "<<herd-part>>"
int fz_split(const uint8_t *data, size_t size, const uint8_t **ptr, size_t *len, int max);

#endif
