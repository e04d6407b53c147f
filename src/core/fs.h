/* File-system helpers shared by the writers of checkpoints and logs. */
#ifndef HERD_CORE_FS_H
#define HERD_CORE_FS_H

#include "herd/herd.h"

/* mkdir -p. flag names the option the directory came from, for the error message. */
herd_status herd_make_dirs(const char *dir, const char *flag);

/* Reads a whole file into a NUL-terminated malloc'd string. what names the file in
 * errors ("model file") and hint says what to try when it cannot be opened. */
herd_status herd_read_text(const char *path, const char *what, const char *hint, char **out);

#endif
