/* TensorBoard event files: scalars and histograms, one file per run. */
#ifndef HERD_OBS_TENSORBOARD_H
#define HERD_OBS_TENSORBOARD_H

#include <stddef.h>

#include "herd/herd.h"

typedef struct herd_tb_writer herd_tb_writer;

typedef struct herd_tb_scalar {
    const char *tag; /* "train/loss": TensorBoard groups by the part before the slash */
    double value;
} herd_tb_scalar;

/* Creates logdir (and its parents) and LOGDIR/events.out.tfevents.<unix time>.<host>
 * (".N" appended if that exists), starting with the file_version record. */
herd_status herd_tb_writer_open(const char *logdir, herd_tb_writer **out);
const char *herd_tb_writer_path(const herd_tb_writer *w);

/* One event with n scalars at this step. */
herd_status herd_tb_write_scalars(herd_tb_writer *w, long step, const herd_tb_scalar *s, size_t n);
/* A histogram of n values (non-finite values are left out of it). */
herd_status herd_tb_write_histogram(herd_tb_writer *w, long step, const char *tag, const float *x,
                                    size_t n);

/* Records are kept in memory and written whole, in one write call, every few
 * seconds and on flush, so the file never ends inside a record unless the process
 * dies during that write. */
herd_status herd_tb_flush(herd_tb_writer *w);
/* Flushes and frees (NULL is fine); returns the flush's status. */
herd_status herd_tb_writer_close(herd_tb_writer *w);

#endif
