/* Reads TensorBoard event files back, for the tests (test_tensorboard, the tfrecord
 * fuzz target), not part of the library: every record's two CRCs are checked and its
 * Event decoded by protobuf-c. */
#ifndef HERD_TESTS_TB_READER_H
#define HERD_TESTS_TB_READER_H

#include <stdbool.h>

#include "herd/herd.h"
#include "obs/tensorboard.pb-c.h"

typedef struct herd_tb_reader herd_tb_reader;

herd_status herd_tb_reader_open(const char *path, herd_tb_reader **out);
/* The next event (free it with herd_tb_event_free), or *ev = NULL at the end of the
 * records: the end of the file, or a last record cut short (a writer still
 * writing, or one that died mid-write), which sets *truncated. A record whose CRC
 * does not match or that does not decode is HERD_ERR_FORMAT, naming its offset. */
herd_status herd_tb_reader_next(herd_tb_reader *r, Tensorboard__Event **ev, bool *truncated);
void herd_tb_event_free(Tensorboard__Event *ev);
void herd_tb_reader_close(herd_tb_reader *r);

#endif
