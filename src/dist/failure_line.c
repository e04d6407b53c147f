/* The failure lines herd run's supervisor reads: each writer beside its parser. */
#include "dist/failure_line.h"
#include "herd/herd.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAILED "herd-run: failed "
#define LATE "ranks not yet arrived: "
#define UNREACHABLE "ranks unreachable: "

void herd_failure_line_format(char *out, size_t cap, long rank, const char *host, long step, bool setup,
                              const char *message)
{
    snprintf(out, cap, FAILED "rank=%ld host=%s step=%ld phase=%s: %s", rank, host, step,
             setup ? "setup" : "training", message);
}

void herd_dist_report_failure(const herd_dist *d, long step, bool training_started, const char *message)
{
    if (!getenv("HERD_RUN_SUPERVISED"))
        return;
    char host[HERD_FAILURE_HOST_LEN] = "?", line[2048];
    gethostname(host, sizeof host - 1);
    host[strcspn(host, " \t")] = '\0'; /* the line's host holds no blank */
    herd_failure_line_format(line, sizeof line, herd_dist_rank(d), host, step, !training_started,
                             message ? message : herd_last_error());
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
}

/* key then a decimal number (no sign) at p: the number, and p past it; NULL if not. */
static const char *number(const char *p, const char *key, long *v)
{
    size_t k = strlen(key);
    if (strncmp(p, key, k) != 0 || !isdigit((unsigned char)p[k]))
        return NULL;
    char *end;
    errno = 0;
    *v = strtol(p + k, &end, 10);
    return errno ? NULL : end;
}

/* A host name at p, ending at the first byte of stop (or the string's end): copied to
 * host, and p past it; NULL when empty or too long. */
static const char *host_name(const char *p, const char *stop, char host[HERD_FAILURE_HOST_LEN])
{
    size_t n = strcspn(p, stop);
    if (n == 0 || n >= HERD_FAILURE_HOST_LEN)
        return NULL;
    memcpy(host, p, n);
    host[n] = '\0';
    return p + n;
}

bool herd_failure_line_parse(const char *line, herd_failure_line *f)
{
    const char *p = strstr(line, FAILED);
    if (!p)
        return false;
    p += strlen(FAILED);
    if (!(p = number(p, "rank=", &f->rank)) || strncmp(p, " host=", 6) != 0 ||
        !(p = host_name(p + 6, " ", f->host)) || *p != ' ' || !(p = number(p + 1, "step=", &f->step)))
        return false;
    if (strncmp(p, " phase=setup:", 13) == 0) {
        f->setup = true;
        p += 13;
    } else if (strncmp(p, " phase=training:", 16) == 0) {
        f->setup = false;
        p += 16;
    } else {
        return false;
    }
    f->message = p + strspn(p, " ");
    return true;
}

void herd_stall_item(char *out, size_t cap, int rank, const char *host, const char *why)
{
    snprintf(out, cap, "%d on %s (%s)", rank, host, why);
}

void herd_stall_lists(char *out, size_t cap, const char *late, const char *silent)
{
    if (!late[0] && !silent[0])
        snprintf(out, cap, LATE "none known (statuses may lag by a second)");
    else if (!silent[0])
        snprintf(out, cap, LATE "%s", late);
    else if (!late[0])
        snprintf(out, cap, UNREACHABLE "%s", silent);
    else
        snprintf(out, cap, LATE "%s; " UNREACHABLE "%s", late, silent);
}

void herd_stall_timeout_format(char *out, size_t cap, uint64_t seq, const char *desc, double timeout_s,
                               const char *lists, const char *note)
{
    snprintf(out, cap, "collective #%llu (%s) did not complete within %.0f s " HERD_STALL_TIMEOUT
             "; %s; ending the job%s", (unsigned long long)seq, desc, timeout_s, lists, note);
}

bool herd_stall_line_parse(const char *line, herd_stall_failure *f)
{
    static const char *const lists[] = {UNREACHABLE, LATE};
    if (!strstr(line, HERD_STALL_TIMEOUT))
        return false;
    for (size_t k = 0; k < sizeof lists / sizeof lists[0]; k++) {
        const char *p = strstr(line, lists[k]);
        if (p && (p = number(p + strlen(lists[k]), "", &f->rank)) && strncmp(p, " on ", 4) == 0 &&
            host_name(p + 4, " ;(", f->host)) {
            f->unreachable = k == 0;
            return true;
        }
    }
    return false;
}
