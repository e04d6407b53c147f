/* File-system helpers shared by the writers of checkpoints and logs. */
#ifndef HERD_CORE_FS_H
#define HERD_CORE_FS_H

#include <stdbool.h>

#include "herd/herd.h"

/* mkdir -p. flag names the option the directory came from, for the error message. */
herd_status herd_make_dirs(const char *dir, const char *flag);

/* Reads a whole file into a NUL-terminated malloc'd string. what names the file in
 * errors ("model file") and hint says what to try when it cannot be opened. */
herd_status herd_read_text(const char *path, const char *what, const char *hint, char **out);

/* Whether two paths name one file, existing or not (by device and inode; for files not
 * yet written, by their directories' and their base names), so that two outputs of one
 * run cannot silently overwrite each other. */
bool herd_same_file(const char *a, const char *b);

/* For a file written at the end of a long run (saved weights): refused now, naming
 * flag, when it is a directory or no file can be created next to it (a test file is
 * created there and removed), rather than after the run. */
herd_status herd_check_output_file(const char *path, const char *flag);

#endif
