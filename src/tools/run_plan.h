/*
 * herd run's launcher and supervisor, the "run" module: host lists and hostfiles
 * (run_hosts.c), the launchers' kinds and flags (run_launcher.c), each attempt's
 * command (run_command.c), and --max-restarts' supervisor (run_supervise.c, with its
 * child processes in run_process.c). The CLI (cli/run.c) parses herd run's options
 * into a run_args, prints what this module hands it (run_output) and turns the result
 * into the exit code; messages of the supervisor go through herd's log. Nothing here
 * prints or exits. Internal: not part of the public API.
 */
#ifndef HERD_TOOLS_RUN_PLAN_H
#define HERD_TOOLS_RUN_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "herd/herd.h"

/* Strict numbers, as herd's flags take them: an optional '-' and decimal digits
 * (doubles: also a fraction and an exponent), nothing around them, in [lo, hi]. */
bool run_parse_long(const char *s, long lo, long hi, long *out);
bool run_parse_double(const char *s, double lo, double hi, double *out);

/* ------------------------------------------------------------------- hosts */

typedef struct run_host {
    char *name;
    long slots; /* 0: not given */
} run_host;

/* A list of hosts: from -H, a hostfile or a --host-discovery command. */
typedef struct run_hosts {
    run_host *v;
    int n, cap;
    bool colons; /* a hostfile in Hydra's 'host:N' form */
} run_hosts;

#define RUN_MAX_HOSTS 4096

/* Appends host name (len bytes): HERD_ERR_INVALID_ARG when the list has RUN_MAX_HOSTS
 * already, HERD_ERR_NOMEM. Sets no message: the callers say which list. */
herd_status run_hosts_add(run_hosts *h, const char *name, size_t len, long slots);
void run_hosts_clear(run_hosts *h); /* empties h, keeps its storage */
void run_hosts_free(run_hosts *h);
/* The slots h offers, a host of unknown slots counting as 1. */
long run_hosts_slots(const run_hosts *h);
/* Hosts as "a:4,b:4" (slots: with each known slot count) or "a,b", cut to fit out. */
void run_format_hosts(const run_host *v, int n, bool slots, char *out, size_t cap);
/* "host" or "host:N" (len bytes) -> the name's length and slots (dflt without :N, N in
 * 1..2^20); false when malformed. */
bool run_parse_host_slots(const char *p, size_t len, size_t *name_len, long dflt, long *slots);
/* "a:4,b:4" -> h (-H; "a" alone is 1 slot, as in Open MPI). False with why set when
 * malformed or out of memory. */
bool run_parse_host_list(const char *spec, run_hosts *h, char *why, size_t cap);
/* Reads an Open MPI ('host slots=N') or Hydra ('host:N') hostfile into h (emptied
 * first). False with why set when it cannot be read, a line is bad or it has no host. */
bool run_read_hostfile(const char *path, run_hosts *h, char *why, size_t cap);
/* The first byte of name (len bytes) that no host name may hold (',', a space or a control byte), or NULL. */
const char *run_host_name_bad(const char *name, size_t len);
/* The output of a --host-discovery command CMD (Horovod's format: one host or host:slots
 * a line, blank lines ignored), strictly, into h (emptied first); out is modified. False
 * with why set on a bad line or no host. */
bool run_parse_discovery(char *out, const char *cmd, run_hosts *h, char *why, size_t cap);

#endif
