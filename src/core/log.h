/* Library messages (stall warnings, the reason for an abort) go to the log function
 * the caller set with herd_set_log_fn; the library itself never prints. */
#ifndef HERD_CORE_LOG_H
#define HERD_CORE_LOG_H

#include "herd/herd.h"

/* Formats the message and hands it to the caller's log function (dropped when none is set). */
void herd_log(herd_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
