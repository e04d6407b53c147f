/* Helpers shared by the subcommands: flag parsing, errors, the summary line. */
#ifndef HERD_CLI_H
#define HERD_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "herd/herd.h"
#include "tools/flags.h" /* herd_parse_long, herd_parse_double, herd_parse_size */

/* Exit codes: 0 ok, 1 runtime failure, 2 usage error. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* getopt_long that takes long options only by their whole names. glibc takes any
 * prefix that picks one option, and a prefix of several that share a return value (all
 * of train's library options do) as the first of them: `--checkpoint-every 60` would
 * train with --checkpoint-every-steps 60 where seconds were meant, and an abbreviation
 * that works today would change meaning when an option is added. A prefix gets "cmd:
 * option '--X' is abbreviated: write --Y" (naming each option it could be) and '?',
 * which the callers treat as any unknown option. longindex may be NULL. */
struct option;
int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts,
               int *longindex);
/* Prints "herd: error: ..." to stderr and returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "herd: error: <what>: <herd_last_error()>" and returns CLI_FAIL. */
int cli_fail(herd_status st, const char *what);
/* Library information lines (HERD_LOG_INFO) are dropped while quiet (--quiet). */
void cli_quiet_info(bool quiet);

/* A message built in pieces and written with one call: stderr is unbuffered, so each
 * fprintf on it is a write of its own, and another rank's output (merged by mpirun)
 * or this process's stdout (2>&1) could land between the pieces of a line. Print the
 * pieces to the stream cli_line_begin returns; cli_line_end writes them to `to` at once
 * (flushing `to` before and after, so that on stdout too the text is one write). */
typedef struct cli_line {
    FILE *to, *buf;
    char *text;
    size_t len;
} cli_line;
FILE *cli_line_begin(cli_line *l, FILE *to);
void cli_line_end(cli_line *l);

/* herd_dataset_open, and for token data the sequence length: seq_len, or when 0 the
 * model's context (herd_model_token_shape). */
herd_status cli_open_data(const char *spec, herd_split split, const char *model, long seq_len,
                          herd_dataset **out);

/* A pipeline schedule's flag (train's and predict's --pp-schedule, bench pipeline's
 * --schedule) through herd_pp_schedule_parse into *out; false after printing "FLAG is
 * 1f1b or gpipe, got 'VALUE'" (exit with CLI_USAGE). */
bool cli_pp_schedule_arg(const char *cmd, const char *flag, const char *value, herd_pp_schedule_kind *out);

/* Device flags shared by train and bench. cli_resolve_device fills in the default
 * device and refuses GPU-only flags elsewhere, and both memory limits at once (-1 =
 * fine, else the exit code);
 * cli_prepare_device binds each rank to its GPU, sets its compute threads (--threads) and
 * applies the memory limit, before any data set or model exists; cli_print_device writes
 * the header line naming the device (how gradients cross ranks is said where it is
 * decided: herd_comm_device_create). */
int cli_resolve_device(const char *cmd, const char **device, uint64_t gpu_memory_limit,
                       uint64_t memory_limit);
herd_status cli_prepare_device(herd_dist *dist, const char *device, int threads,
                               uint64_t gpu_memory_limit);
void cli_print_device(const herd_model *m);

/* The stable last line: key=value pairs, or one JSON object with --json (where a
 * value that is not finite is null: JSON has no NaN). */
typedef struct cli_summary {
    int n;
    const char *keys[32];
    char values[32][64];
    bool quoted[32];
    bool nonfinite[32];
} cli_summary;

void cli_summary_str(cli_summary *s, const char *key, const char *value);
void cli_summary_num(cli_summary *s, const char *key, double value, int decimals);
void cli_summary_print(const cli_summary *s, bool json);

/* Prints a cJSON document (indented) on stdout and frees it. */
struct cJSON;
void cli_print_json(struct cJSON *doc);

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_bench_allreduce(int argc, char **argv);
int cmd_bench_p2p(int argc, char **argv);
int cmd_bench_pipeline(int argc, char **argv);
int cmd_models(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_plot(int argc, char **argv);
int cmd_topo(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_predict(int argc, char **argv);

#endif
