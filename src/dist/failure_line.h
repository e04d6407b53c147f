/*
 * The lines a failing job writes for herd run's supervisor, which reads the launcher's
 * stderr to learn which rank failed, where and how. Each line's writer and parser sit
 * side by side here (and are tested together in tests/test_failure_line.c), so the two
 * cannot drift apart:
 * - herd train under supervision, once, as it fails:
 *     herd-run: failed rank=R host=H step=N phase=setup|training: MESSAGE
 * - the stall inspector ending the job (comm_mpi_stall.c), inside its error message:
 *     collective #S (DESC) did not complete within T s (stall timeout); ranks not yet
 *     arrived: R on H (...), ...; ranks unreachable: R on H (...); ending the job...
 * Both are found anywhere in a line (the launcher and the log prefix theirs).
 */
#ifndef HERD_DIST_FAILURE_LINE_H
#define HERD_DIST_FAILURE_LINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Host names as a failure line carries them (gethostname's at most 255 bytes). */
#define HERD_FAILURE_HOST_LEN 256

/* A "herd-run: failed" line, parsed. */
typedef struct herd_failure_line {
    long rank;
    char host[HERD_FAILURE_HOST_LEN];
    long step;
    bool setup;          /* phase=setup: failed before training began (it would again) */
    const char *message; /* into the line parsed: what failed, leading blanks skipped */
} herd_failure_line;

/* Writes the line (without its '\n') into out, cut to cap. setup: training had not
 * begun. host must hold no blank. */
void herd_failure_line_format(char *out, size_t cap, long rank, const char *host, long step, bool setup,
                              const char *message);
/* Finds a failure line in line and parses it into f; false when line holds none, or one
 * with a field missing or malformed (the phase neither setup nor training). */
bool herd_failure_line_parse(const char *line, herd_failure_line *f);

/* The stall timeout's mark, and its lists of the ranks it names. */
#define HERD_STALL_TIMEOUT "(stall timeout)"

/* One rank of a list: "R on H (WHY)". */
void herd_stall_item(char *out, size_t cap, int rank, const char *host, const char *why);
/* The lists of late ranks (not yet arrived) and silent ones (unreachable), each items
 * joined by ", " and either empty: "ranks not yet arrived: L; ranks unreachable: S". */
void herd_stall_lists(char *out, size_t cap, const char *late, const char *silent);
/* The whole message of the timeout: collective seq (desc) pending past timeout_s, the
 * lists, and a note (may be "") on when the job ends. */
void herd_stall_timeout_format(char *out, size_t cap, uint64_t seq, const char *desc, double timeout_s,
                               const char *lists, const char *note);

/* A stall timeout, parsed: the first rank it names, unreachable ones first (a rank
 * that cannot be reached explains the ranks that wait for it). */
typedef struct herd_stall_failure {
    long rank;
    char host[HERD_FAILURE_HOST_LEN];
    bool unreachable; /* else: not yet arrived */
} herd_stall_failure;

/* False when line holds no stall timeout, or one naming no rank. */
bool herd_stall_line_parse(const char *line, herd_stall_failure *f);

#endif
