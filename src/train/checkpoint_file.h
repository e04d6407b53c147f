/* What writing checkpoints (checkpoint.c) and reading them (checkpoint_load.c) share:
 * the files' names and the state's checks. Only those two files and the directory's
 * claim (ckpt_dir.c, which looks for checkpoint files) include it. */
#ifndef HERD_TRAIN_CHECKPOINT_FILE_H
#define HERD_TRAIN_CHECKPOINT_FILE_H

#include "train/checkpoint.h"

#define CORRUPT_HINT "the checkpoint is corrupt: delete it or point DIR/latest at an older one"

/* The optimizer as the state file names it. */
const char *herd_ckpt_kind_name(herd_optimizer_kind k);
/* "dir/<base><suffix>", malloc'ed; NULL (the error set) when memory is short. */
char *herd_ckpt_path(const char *dir, const char *base, const char *suffix);
/* Parses "ckpt-<digits>" (+ optional suffix that must match exactly): 0, or -1. */
int herd_ckpt_parse_name(const char *name, const char *suffix, long *step);
/* qsort's comparison of longs, the highest first. */
int herd_ckpt_cmp_desc(const void *a, const void *b);
/* Relations between the state's fields (each already in its own range); an error
 * names path and the field. */
herd_status herd_ckpt_check_state(const herd_train_state *st, const char *path);

#endif
