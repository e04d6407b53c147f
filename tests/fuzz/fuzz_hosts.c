/* herd run's host lists: a byte choosing the parser (0: a hostfile, Open MPI's
 * 'host slots=N' or Hydra's 'host:N'; 1: -H "a:4,b"; 2: the output of a
 * --host-discovery command), then the text. Accepted lists must match an independent
 * reading of the text: the same hosts in the same order, each name non-empty and free
 * of whitespace, control bytes, ',' and ':' (a launcher would split or misread
 * it), slots in 0..2^20 (0: not given, hostfiles only), and for discovery no host
 * twice. */
#include <ctype.h>

#include "fuzz.h"
#include "tools/run_plan.h"

static void check_name(const run_host *h)
{
    size_t n = strlen(h->name);
    FZ_CHECK(n > 0, "an empty host name");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)h->name[i];
        FZ_CHECK(c > 0x20 && c != 0x7f && c != ',' && c != ':', "host '%s': byte 0x%02x at %zu", h->name, c, i);
    }
    FZ_CHECK(h->slots >= 0 && h->slots <= (1 << 20), "host '%s': slots %ld", h->name, h->slots);
}

/* Token k of the text's lines, as the format defines them: the first word of each
 * line (comments cut at '#' for hostfiles), up to ':'. */
typedef struct word { const uint8_t *p; size_t n; } word;

static int first_words(const uint8_t *t, size_t n, bool comments, word *out, int max)
{
    int k = 0;
    for (size_t at = 0; at < n && k < max;) {
        size_t end = at;
        while (end < n && t[end] != '\n')
            end++;
        size_t stop = end;
        if (comments)
            for (size_t i = at; i < end; i++)
                if (t[i] == '#') {
                    stop = i;
                    break;
                }
        size_t b = at;
        while (b < stop && (t[b] == ' ' || t[b] == '\t' || t[b] == '\r'))
            b++;
        size_t e = b;
        while (e < stop && !(t[e] == ' ' || t[e] == '\t' || t[e] == '\r'))
            e++;
        if (e > b) {
            const uint8_t *colon = memchr(t + b, ':', e - b);
            out[k++] = (word){t + b, colon ? (size_t)(colon - (t + b)) : e - b};
        }
        at = end + 1;
    }
    return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 << 16)
        return 0;
    int mode = data[0] % 3;
    const uint8_t *t = data + 1;
    size_t n = size - 1;
    run_hosts h = {0};
    char why[1024] = "";
    bool ok;
    if (mode == 0) {
        char path[512];
        fz_path(path, sizeof path, "hostfile");
        fz_write(path, t, n);
        ok = run_read_hostfile(path, &h, why, sizeof why);
    } else {
        n = strnlen((const char *)t, n); /* a C string: the argument, or the checked output */
        char *s = fz_strndup(t, n);
        ok = mode == 1 ? run_parse_host_list(s, &h, why, sizeof why) : run_parse_discovery(s, "fuzz", &h, why, sizeof why);
        free(s);
    }
    if (ok) {
        FZ_CHECK(h.n > 0 && h.n <= RUN_MAX_HOSTS, "%d hosts", h.n);
        if (mode == 0) /* the others' texts are C strings: an argument, a checked output */
            FZ_CHECK(memchr(t, 0, n) == NULL, "accepted a text holding a NUL byte");
        for (int i = 0; i < h.n; i++) {
            check_name(&h.v[i]);
            if (mode != 0)
                FZ_CHECK(h.v[i].slots >= 1, "host '%s': slots %ld", h.v[i].name, h.v[i].slots);
            if (mode == 2)
                for (int j = 0; j < i; j++)
                    FZ_CHECK(strcmp(h.v[i].name, h.v[j].name) != 0, "host '%s' twice", h.v[i].name);
        }
        if (mode != 1) {
            word *w = calloc((size_t)h.n + 1, sizeof *w);
            int k = first_words(t, n, mode == 0, w, h.n + 1);
            FZ_CHECK(k == h.n, "%d hosts read, %d lines with a host in the text", h.n, k);
            for (int i = 0; i < h.n; i++)
                FZ_CHECK(w[i].n == strlen(h.v[i].name) && memcmp(w[i].p, h.v[i].name, w[i].n) == 0,
                         "host %d is '%s', the text says '%.*s'", i, h.v[i].name, (int)(w[i].n > 80 ? 80 : w[i].n),
                         (const char *)w[i].p);
            free(w);
        }
    } else {
        FZ_CHECK(why[0] != '\0', "refused without a reason");
    }
    run_hosts_free(&h);
    return 0;
}
