/* Checkpoints written while training goes on: the parameters, buffers and optimizer
 * state are copied into host memory (a memcpy of the flat buffers, or from a device
 * through its copies), and a thread of its own writes, fsyncs and publishes them with
 * herd_checkpoint_save, atomically as ever. A kill during the write leaves `latest`
 * naming the previous complete checkpoint. One write at a time: the next copy waits
 * for the previous write. */
#ifndef HERD_TRAIN_CKPT_WRITER_H
#define HERD_TRAIN_CKPT_WRITER_H

#include "train/checkpoint.h"

typedef struct herd_ckpt_writer herd_ckpt_writer;

herd_status herd_ckpt_writer_create(herd_ckpt_writer **out);
/* Waits for the previous write, then copies m's parameters and buffers, o's state and
 * st, and hands them to the thread. A failed previous write is returned (its message
 * set again here) and nothing new is written; otherwise a failure to copy. The new
 * write's outcome is the next call's, or herd_ckpt_writer_wait's. m's views and o must
 * outlive the write. keep: as herd_checkpoint_save's. */
herd_status herd_ckpt_writer_submit(herd_ckpt_writer *w, const char *dir, int keep,
                                    const herd_model *m, herd_optimizer *o,
                                    const herd_train_state *st);
/* Waits for the write in progress; its status. */
herd_status herd_ckpt_writer_wait(herd_ckpt_writer *w);
/* Waits, then frees (NULL is fine). */
void herd_ckpt_writer_free(herd_ckpt_writer *w);

#endif
