/* herd run's hosts (tools/run_plan.h): -H's lists, Open MPI's and Hydra's hostfiles,
 * and what a --host-discovery command prints, each read strictly. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/run_plan.h"

/* The length of the number at s in the grammar of herd's flags (0: none). */
static size_t number_len(const char *s, bool fraction)
{
    size_t i = s[0] == '-', digits = strspn(s + i, "0123456789");
    i += digits;
    if (fraction && s[i] == '.') {
        size_t more = strspn(s + i + 1, "0123456789");
        i += 1 + more;
        digits += more;
    }
    if (!digits)
        return 0;
    if (fraction && (s[i] == 'e' || s[i] == 'E')) {
        size_t sign = s[i + 1] == '-' || s[i + 1] == '+', exp = strspn(s + i + 1 + sign, "0123456789");
        if (!exp)
            return 0;
        i += 1 + sign + exp;
    }
    return i;
}

bool run_parse_long(const char *s, long lo, long hi, long *out)
{
    size_t n = number_len(s, false);
    errno = 0;
    long v = n && !s[n] ? strtol(s, NULL, 10) : 0;
    if (!n || s[n] || errno || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

bool run_parse_double(const char *s, double lo, double hi, double *out)
{
    size_t n = number_len(s, true);
    errno = 0;
    double v = n && !s[n] ? strtod(s, NULL) : 0;
    if (!n || s[n] || errno || !isfinite(v) || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

herd_status run_hosts_add(run_hosts *h, const char *name, size_t len, long slots)
{
    if (h->n >= RUN_MAX_HOSTS)
        return HERD_ERR_INVALID_ARG;
    if (h->n == h->cap) {
        run_host *v = realloc(h->v, (size_t)(h->cap ? 2 * h->cap : 16) * sizeof *v);
        if (!v)
            return HERD_ERR_NOMEM;
        h->v = v;
        h->cap = h->cap ? 2 * h->cap : 16;
    }
    if (!(h->v[h->n].name = strndup(name, len)))
        return HERD_ERR_NOMEM;
    h->v[h->n++].slots = slots;
    return HERD_OK;
}

void run_hosts_clear(run_hosts *h)
{
    for (int i = 0; i < h->n; i++)
        free(h->v[i].name);
    h->n = 0;
    h->colons = false;
}

void run_hosts_free(run_hosts *h)
{
    run_hosts_clear(h);
    free(h->v);
    *h = (run_hosts){0};
}

long run_hosts_slots(const run_hosts *h)
{
    long total = 0;
    for (int i = 0; i < h->n; i++)
        total += h->v[i].slots > 0 ? h->v[i].slots : 1;
    return total;
}

bool run_parse_host_slots(const char *p, size_t len, size_t *name_len, long dflt, long *slots)
{
    const char *colon = memchr(p, ':', len);
    *name_len = colon ? (size_t)(colon - p) : len;
    *slots = dflt;
    if (*name_len == 0)
        return false;
    if (!colon)
        return true;
    char num[32];
    size_t nl = len - *name_len - 1;
    if (nl == 0 || nl >= sizeof num)
        return false;
    memcpy(num, colon + 1, nl);
    num[nl] = '\0';
    return run_parse_long(num, 1, 1 << 20, slots);
}

bool run_parse_host_list(const char *spec, run_hosts *h, char *why, size_t cap)
{
    herd_status st = HERD_OK;
    for (const char *p = spec; *p && st == HERD_OK;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p), name_len;
        long slots;
        if (!run_parse_host_slots(p, len, &name_len, 1, &slots) || run_host_name_bad(p, name_len))
            st = HERD_ERR_INVALID_ARG;
        else
            st = run_hosts_add(h, p, name_len, slots);
        p = end ? end + 1 : p + len;
    }
    if (st == HERD_ERR_NOMEM)
        snprintf(why, cap, "out of memory reading the host list '%.200s'", spec);
    else if (st != HERD_OK || h->n == 0)
        snprintf(why, cap, "bad host list '%s'; expected host[:slots],... such as a:4,b:4", spec);
    return st == HERD_OK && h->n > 0;
}

/* The first byte of a host name a launcher would split or misread (',' separates hosts
 * in the lists herd passes on; spaces and control bytes are no part of a name), or NULL. */
const char *run_host_name_bad(const char *name, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (name[i] == ',' || (unsigned char)name[i] <= 0x20 || name[i] == 0x7f)
            return name + i;
    return NULL;
}

/* Slots 0 when a line does not give them (the launcher then counts the host's cores,
 * which we cannot see from here). */
bool run_read_hostfile(const char *path, run_hosts *h, char *why, size_t cap)
{
    run_hosts_clear(h);
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, cap, "cannot read hosts from '%s': %s", path, strerror(errno));
        return false;
    }
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t got;
    int lineno = 0;
    bool slots_form = false;
    while ((got = getline(&line, &line_cap, f)) >= 0) {
        lineno++;
        /* A NUL byte would end the line early and hide the rest of it. */
        const char *nul = memchr(line, '\0', (size_t)got);
        if (nul) {
            snprintf(why, cap, "%s:%d: a NUL byte at column %d: not a text file", path, lineno,
                     (int)(nul - line) + 1);
            free(line);
            fclose(f);
            return false;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *tok = strtok(line, " \t\r\n");
        if (!tok)
            continue;
        size_t name_len;
        long slots;
        bool ok = run_parse_host_slots(tok, strlen(tok), &name_len, 0, &slots);
        const char *bad = ok ? run_host_name_bad(tok, name_len) : NULL;
        if (bad) {
            snprintf(why, cap, "%s:%d: host name '%.*s' holds byte 0x%02x at column %d (a ',' or a "
                               "control byte)", path, lineno, (int)name_len, tok, (unsigned char)*bad,
                     (int)(bad - line) + 1);
            free(line);
            fclose(f);
            return false;
        }
        h->colons |= name_len < strlen(tok);
        const char *unknown = NULL;
        long cap_slots;
        for (char *opt; ok && (opt = strtok(NULL, " \t\r\n"));)
            if (strncmp(opt, "slots=", 6) == 0) {
                ok = run_parse_long(opt + 6, 1, 1 << 20, &slots);
                slots_form = true;
            } else if (strncmp(opt, "max_slots=", 10) == 0 || strncmp(opt, "max-slots=", 10) == 0) {
                ok = run_parse_long(opt + 10, 1, 1 << 20, &cap_slots); /* Open MPI's cap: checked, kept by it */
            } else {
                unknown = opt; /* a typo, or text that a hostfile would silently lose */
                ok = false;
            }
        if (unknown) {
            snprintf(why, cap, "%s:%d: '%s' after host '%.*s' is not slots=N or max_slots=N", path,
                     lineno, unknown, (int)name_len, tok);
            free(line);
            fclose(f);
            return false;
        }
        herd_status st = ok && !(h->colons && slots_form) ? run_hosts_add(h, tok, name_len, slots) : HERD_OK;
        if (!ok || (h->colons && slots_form) || st != HERD_OK) {
            if (st == HERD_ERR_NOMEM)
                snprintf(why, cap, "%s:%d: out of memory", path, lineno);
            else
                snprintf(why, cap, "%s:%d: expected 'host', 'host slots=N' or 'host:N' (one form per "
                                   "file)", path, lineno);
            free(line);
            fclose(f);
            return false;
        }
    }
    free(line);
    fclose(f);
    if (h->n == 0)
        snprintf(why, cap, "cannot read hosts from '%s': no host lines", path);
    return h->n > 0;
}

/* Open MPI's -H and Hydra's -hosts take "a:4,b:4", srun's -w "a,b". */
void run_format_hosts(const run_host *v, int n, bool slots, char *out, size_t cap)
{
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t len = strlen(out);
        if (len + 1 >= cap)
            break;
        if (slots && v[i].slots > 0)
            snprintf(out + len, cap - len, "%s%s:%ld", i ? "," : "", v[i].name, v[i].slots);
        else
            snprintf(out + len, cap - len, "%s%s", i ? "," : "", v[i].name);
    }
}

/* One line of discovery output, trimmed: "host" or "host:slots" into h. */
static bool discovery_line(char *line, run_hosts *h, const char **what)
{
    size_t len = strlen(line), name_len;
    long slots;
    *what = "a space inside";
    if (strpbrk(line, " \t\r\v\f"))
        return false;
    *what = "expected host or host:slots, slots an integer from 1 to 1048576";
    if (!run_parse_host_slots(line, len, &name_len, 1, &slots))
        return false;
    *what = "a ',' or a control byte in the host name";
    if (run_host_name_bad(line, name_len))
        return false;
    *what = "a host already listed";
    for (int i = 0; i < h->n; i++)
        if (strlen(h->v[i].name) == name_len && strncmp(h->v[i].name, line, name_len) == 0)
            return false;
    herd_status st = run_hosts_add(h, line, name_len, slots);
    *what = st == HERD_ERR_NOMEM ? "out of memory" : "more hosts than herd run takes (4096)";
    return st == HERD_OK;
}

bool run_parse_discovery(char *out, const char *cmd, run_hosts *h, char *why, size_t cap)
{
    run_hosts_clear(h);
    int lineno = 0;
    bool ok = true;
    for (char *line = out, *next; ok && line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        lineno++;
        while (*line == ' ' || *line == '\t')
            line++;
        size_t len = strlen(line);
        while (len > 0 && strchr(" \t\r", line[len - 1]))
            line[--len] = '\0';
        const char *what;
        if (len > 0 && !discovery_line(line, h, &what)) {
            snprintf(why, cap, "--host-discovery '%s': line %d '%.200s': %s", cmd, lineno, line, what);
            ok = false;
        }
    }
    if (ok && h->n == 0)
        snprintf(why, cap, "--host-discovery '%s' printed no host", cmd);
    return ok && h->n > 0;
}

