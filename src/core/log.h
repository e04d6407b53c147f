/* Library messages (stall warnings, the reason for an abort) go to the log function
 * the caller set with herd_set_log_fn; the library itself prints only an
 * error when no log function is set. */
#ifndef HERD_CORE_LOG_H
#define HERD_CORE_LOG_H

#include "herd/herd.h"

/* Formats the message and hands it to the caller's log function (when none is set: errors to stderr, the rest dropped). */
void herd_log(herd_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
