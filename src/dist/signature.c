#include "dist/signature.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"

static bool reserve(herd_signature *s, size_t more)
{
    if (s->len + more <= s->cap)
        return true;
    size_t cap = s->cap ? s->cap : 1024;
    while (cap < s->len + more)
        cap *= 2;
    char *t = realloc(s->text, cap);
    if (!t)
        return false;
    s->text = t;
    s->cap = cap;
    return true;
}

void herd_signature_add(herd_signature *s, const char *name, const char *fmt, ...)
{
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int vlen = vsnprintf(NULL, 0, fmt, ap);
    size_t nlen = strlen(name);
    if (vlen < 0 || !reserve(s, nlen + 1 + (size_t)vlen + 1)) {
        s->oom = true;
    } else {
        memcpy(s->text + s->len, name, nlen + 1);
        s->len += nlen + 1;
        vsnprintf(s->text + s->len, (size_t)vlen + 1, fmt, again);
        s->len += (size_t)vlen + 1;
        s->n++;
    }
    va_end(again);
    va_end(ap);
}

void herd_signature_free(herd_signature *s)
{
    free(s->text);
    memset(s, 0, sizeof *s);
}

typedef struct sig_header {
    uint64_t digest;
    uint64_t len;
    int64_t ok; /* 0: this rank could not build its signature */
} sig_header;

/* What one rank found different from rank 0, fixed size for the allgather. */
typedef struct sig_report {
    int64_t differs; /* 1: in field name; -1: could not compare (out of memory) */
    char name[64];
    char ref[200], mine[200]; /* rank 0's value and this rank's, cut with "..." */
} sig_report;

#define SIG_CHUNK 8192

static uint64_t digest(const char *p, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
    for (size_t i = 0; i < n; i++)
        h = herd_mix64(h, (uint64_t)(unsigned char)p[i]);
    return h;
}

static void clip(char *out, size_t cap, const char *v)
{
    if (strlen(v) < cap)
        snprintf(out, cap, "%s", v);
    else
        snprintf(out, cap, "%.*s...", (int)(cap - 4), v);
}

/* The first field where mine differs from ref (both "name\0value\0" lists). */
static void compare(const char *ref, size_t ref_len, const char *mine, size_t mine_len,
                    sig_report *out)
{
    memset(out, 0, sizeof *out);
    size_t i = 0, j = 0;
    while (i < ref_len || j < mine_len) {
        const char *rn = i < ref_len ? ref + i : NULL, *mn = j < mine_len ? mine + j : NULL;
        const char *rv = rn ? rn + strlen(rn) + 1 : NULL, *mv = mn ? mn + strlen(mn) + 1 : NULL;
        if (!rn || !mn || strcmp(rn, mn) || strcmp(rv, mv)) {
            out->differs = 1;
            clip(out->name, sizeof out->name, rn ? rn : mn);
            if (rn && mn && strcmp(rn, mn)) { /* not the same list of fields */
                snprintf(out->ref, sizeof out->ref, "(field %s)", rn);
                snprintf(out->mine, sizeof out->mine, "(field %s)", mn);
            } else {
                clip(out->ref, sizeof out->ref, rv ? rv : "(no such field)");
                clip(out->mine, sizeof out->mine, mv ? mv : "(no such field)");
            }
            return;
        }
        i = (size_t)(rv + strlen(rv) + 1 - ref);
        j = (size_t)(mv + strlen(mv) + 1 - mine);
    }
}

herd_status herd_signature_check(herd_comm *c, const herd_signature *s)
{
    if (c->size == 1)
        return s->oom ? HERD_NOMEM(s->cap * 2) : HERD_OK;
    sig_header mine = {digest(s->text, s->len), s->len, !s->oom};
    sig_header *heads = calloc((size_t)c->size, sizeof *heads);
    sig_report *reports = calloc((size_t)c->size, sizeof *reports);
    char *ref = NULL;
    /* A rank short of memory tells the others rather than skipping the gather. */
    herd_status st = herd_agree(c, heads && reports ? HERD_OK : HERD_ERR_NOMEM,
                                "allocating the configuration check");
    /* Every rank reaches every collective below, whatever it finds: the decisions
     * depend only on what all ranks received. */
    if (st == HERD_OK)
        st = c->ops->allgather(c, &mine, heads, sizeof mine);
    bool all_ok = st == HERD_OK, same = st == HERD_OK;
    for (int r = 0; st == HERD_OK && r < c->size; r++) {
        all_ok &= heads[r].ok != 0;
        same &= heads[r].digest == heads[0].digest && heads[r].len == heads[0].len;
    }
    if (st == HERD_OK && !all_ok) {
        int r = 0;
        while (heads[r].ok)
            r++;
        st = HERD_ERR(HERD_ERR_NOMEM, "rank %d ran out of memory describing its configuration", r);
    } else if (st == HERD_OK && !same) {
        /* Rank 0's fields go to everyone; each rank finds its first difference. */
        size_t len = heads[0].len;
        ref = c->rank == 0 ? NULL : malloc(len + 1);
        herd_status bst = HERD_OK;
        for (size_t off = 0; off < len && bst == HERD_OK; off += SIG_CHUNK) {
            char scratch[SIG_CHUNK]; /* without memory, still join every broadcast */
            size_t n = len - off < SIG_CHUNK ? len - off : SIG_CHUNK;
            char *buf = c->rank == 0 ? s->text + off : ref ? ref + off : scratch;
            bst = c->ops->broadcast(c, buf, n, 0);
        }
        sig_report local = {0};
        if (bst == HERD_OK && c->rank != 0 && ref)
            compare(ref, len, s->text, s->len, &local);
        else if (c->rank != 0 && !ref)
            local.differs = -1;
        st = bst != HERD_OK ? bst : c->ops->allgather(c, &local, reports, sizeof local);
        for (int r = 1; st == HERD_OK && r < c->size; r++)
            if (reports[r].differs < 0) {
                st = HERD_ERR(HERD_ERR_NOMEM, "rank %d ran out of memory comparing its "
                              "configuration with rank 0's", r);
                break;
            } else if (reports[r].differs) {
                sig_report *d = &reports[r];
                d->name[sizeof d->name - 1] = d->ref[sizeof d->ref - 1] = '\0';
                d->mine[sizeof d->mine - 1] = '\0';
                st = HERD_ERR(HERD_ERR_INVALID_ARG,
                              "ranks disagree on the configuration: rank %d has %s=%s but rank 0 "
                              "has %s=%s; start every rank with the same flags, data and herd "
                              "version",
                              r, d->name, d->mine, d->name, d->ref);
                break;
            }
        if (st == HERD_OK) /* digests differ, fields do not: cannot happen, but say so */
            st = HERD_ERR(HERD_ERR_INTERNAL, "configuration digests differ but no field does");
    }
    free(ref);
    free(heads);
    free(reports);
    return st;
}

void herd_agree_pack(herd_status mine, int rank, double out[3])
{
    out[0] = mine != HERD_OK;
    out[1] = mine != HERD_OK ? rank : 0;
    out[2] = mine;
}

herd_status herd_agree_unpack(herd_status mine, const double reduced[3], const char *what)
{
    if (mine != HERD_OK || reduced[0] < 0.5)
        return mine;
    int failed = (int)(reduced[0] + 0.5);
    if (failed == 1)
        return HERD_ERR((herd_status)(int)(reduced[2] + 0.5),
                        "rank %d failed %s; every rank stops (rank %d's own error says why)",
                        (int)(reduced[1] + 0.5), what, (int)(reduced[1] + 0.5));
    return HERD_ERR(HERD_ERR_INTERNAL, "%d ranks failed %s; every rank stops (their own errors "
                    "say why)", failed, what);
}

herd_status herd_agree(herd_comm *c, herd_status mine, const char *what)
{
    if (c->size == 1)
        return mine;
    double v[3];
    herd_agree_pack(mine, c->rank, v);
    herd_status red = c->ops->allreduce_f64(c, v, 3);
    if (mine != HERD_OK)
        return mine;
    return red != HERD_OK ? red : herd_agree_unpack(mine, v, what);
}
