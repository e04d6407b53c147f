/* File-system helpers shared by the writers of checkpoints and logs. */
#ifndef HERD_CORE_FS_H
#define HERD_CORE_FS_H

#include "herd/herd.h"

/* mkdir -p. flag names the option the directory came from, for the error message. */
herd_status herd_make_dirs(const char *dir, const char *flag);

#endif
