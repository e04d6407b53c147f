/* Shared helpers for the cmocka tests. */
#ifndef HERD_TESTUTIL_H
#define HERD_TESTUTIL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "herd/herd.h"
#include "backend/backend.h"

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
/* Fails the test unless got is st and herd_last_error() holds needle1 (and needle2,
 * when not NULL). */
void tu_expect_error(herd_status got, herd_status st, const char *needle1, const char *needle2);
/* True when the tests run under the sanitizer build (HERD_SANITIZED=1): long tests shrink. */
int tu_sanitized(void);

/* PyTorch fixtures (tests/make_fixtures.py): the tensor called name, failing the test
 * when it is missing or does not hold numel values; and a model's parameters and
 * buffers set from the fixture's init.<view> tensors. */
struct herd_st_file;
struct herd_model;
const float *tu_fixture_tensor(const struct herd_st_file *f, const char *name, size_t numel);
void tu_fixture_load_init(struct herd_model *m, const struct herd_st_file *f);
/* A malloc'd host copy of a model's parameters (buffers: its buffers instead), wherever
 * they live: downloaded from a device backend (cuda, sim), copied on the CPU. */
float *tu_model_host_copy(const struct herd_model *m, bool buffers);

/* ctest's SKIP_RETURN_CODE (tests/CMakeLists.txt): the test could not run here. */
#define TU_SKIP_CODE 77

/* Skips the running cmocka test, printing "skipped: <test>: <why>" and remembering it for
 * tu_run. A skip marked essential is the point of the program: tu_run then exits 77
 * even when the other tests ran. */
void tu_note_skip(const char *test, bool essential, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define tu_skip(...)                                                                          \
    do {                                                                                      \
        tu_note_skip(__func__, false, __VA_ARGS__);                                           \
        skip();                                                                               \
    } while (0)
#define tu_skip_essential(...)                                                                \
    do {                                                                                      \
        tu_note_skip(__func__, true, __VA_ARGS__);                                            \
        skip();                                                                               \
    } while (0)

/* Runs a cmocka group and gives main's exit status: 1 when a test failed, 77 when every
 * test (or an essential part) was skipped, else 0, after naming what was skipped. */
#define tu_run(tests, setup, teardown)                                                        \
    tu_exit_status(cmocka_run_group_tests(tests, setup, teardown),                            \
                   sizeof(tests) / sizeof((tests)[0]))
int tu_exit_status(int failed, size_t n_tests);

/* The CUDA backend for a GPU test, or the end of the program: exit 77 when there is no
 * GPU to test on (herd built without CUDA, or neither the CUDA runtime nor the NVIDIA
 * driver sees a GPU); exit 1 when a GPU is there but the backend fails to initialise,
 * which is a failure, not a skip. */
const herd_backend *tu_cuda_or_exit(void);

#endif
