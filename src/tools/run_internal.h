/* What the supervisor's files share (src/tools/run_supervise.c, run_process.c): the
 * child processes it starts and the signals it passes on. Private to src/tools. */
#ifndef HERD_TOOLS_RUN_INTERNAL_H
#define HERD_TOOLS_RUN_INTERNAL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "tools/run_plan.h"
#include "tools/run_tools.h"

/* SIGINT and SIGTERM while the supervisor runs: passed on to the launcher's process
 * group, and herd run then never restarts. run_signals_catch installs the handlers
 * (not over an inherited SIG_IGN) and SIGCHLD's default; run_signals_restore puts
 * back what was there. */
typedef struct run_signals {
    struct sigaction old_int, old_term, old_chld;
} run_signals;
void run_signals_catch(run_signals *saved);
void run_signals_restore(const run_signals *saved);
/* The signal that asked herd run to stop, 0 for none. */
int run_stop_signal(void);

double run_now(void);           /* monotonic seconds */
void run_sleep(double seconds); /* cut short by a stop signal */
/* "exited with status N" or "was killed by SIGX" for a wait status, into out. */
void run_status_text(int status, char *out, size_t cap);
/* A wait status as an exit code: 128 + N for signal N. */
int run_exit_code(int status);

/* Runs the --host-discovery command cmd and reads its hosts into h (emptied first).
 * False with why set when it cannot run, fails, overruns its time (30 s, or
 * HERD_RUN_DISCOVERY_TIMEOUT) or prints something bad. */
bool run_discover(const char *cmd, run_hosts *h, char *why, size_t cap);

/* Starts argv in its own process group, its stderr into *err. The pid, or -1 with why set. */
pid_t run_launch(char **argv, int *err, char *why, size_t cap);
/* Passes the launcher's stderr (fd) on to out->relay, line by line, reading each line
 * into w (timed from t0), until the launcher exits; its wait status. */
int run_watch_launcher(pid_t pid, int fd, herd_run_watch *w, double t0, const run_output *out);

#endif
