/* herd run's CLI pieces: supervision (run_supervise.c), on the library's run module
 * (tools/run_plan.h). */
#ifndef HERD_CLI_RUN_H
#define HERD_CLI_RUN_H

#include <stdbool.h>

#include "tools/run_plan.h"

/* run_supervise.c: herd run --max-restarts. run_check_supervised refuses what cannot
 * be supervised before anything starts (static: the hosts -H or the hostfile offer,
 * NULL for this machine); -1 when fine, else the exit code. run_supervise launches,
 * watches and relaunches the job (fixed: -H's hosts), and returns herd run's exit code. */
/* run_parse_supervise_flag parses argv[*i] when it is one of supervision's flags
 * (leaving *i on its last word): -2 when it is not one, -1 when parsed, else the exit
 * code. */
int run_parse_supervise_flag(int argc, char **argv, int *i, run_args *r);
int run_check_supervised(run_args *r, const run_hosts *fixed);
int run_supervise(const run_args *r, const run_hosts *fixed);

#endif
