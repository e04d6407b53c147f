#include "dist/signature.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"

void herd_signature_add(herd_signature *s, const char *name, const char *fmt, ...)
{
    if (s->n >= HERD_SIG_MAX_FIELDS)
        return;
    char value[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof value, fmt, ap);
    va_end(ap);
    snprintf(s->names[s->n], sizeof s->names[0], "%s", name);
    size_t len = strlen(value);
    if (len < sizeof s->values[0]) {
        memcpy(s->values[s->n], value, len + 1);
    } else { /* too long to show: compare a hash of it */
        uint64_t h = 0x9e3779b97f4a7c15ULL;
        for (const char *p = value; *p; p++)
            h = herd_mix64(h, (uint64_t)(unsigned char)*p);
        snprintf(s->values[s->n], sizeof s->values[0], "hash %016llx", (unsigned long long)h);
    }
    s->n++;
}

herd_status herd_signature_check(herd_comm *c, const herd_signature *s)
{
    if (c->size == 1)
        return HERD_OK;
    herd_signature *all = malloc(sizeof *all * (size_t)c->size);
    if (!all)
        return HERD_NOMEM(sizeof *all * (size_t)c->size);
    herd_status st = c->ops->allgather(c, s, all, sizeof *s);
    if (st != HERD_OK) {
        free(all);
        return st;
    }
    const herd_signature *ref = &all[0];
    for (int r = 1; r < c->size && st == HERD_OK; r++) {
        const herd_signature *o = &all[r];
        if (o->n != ref->n) {
            st = HERD_ERR(HERD_ERR_INVALID_ARG,
                          "rank %d runs a different herd (%d configuration fields, rank 0 has %d); "
                          "install the same version on every host",
                          r, o->n, ref->n);
            break;
        }
        for (int i = 0; i < ref->n; i++)
            if (strcmp(o->names[i], ref->names[i]) || strcmp(o->values[i], ref->values[i])) {
                st = HERD_ERR(HERD_ERR_INVALID_ARG,
                              "ranks disagree on the configuration: rank %d has %s=%s but rank 0 "
                              "has %s=%s; start every rank with the same flags and data",
                              r, o->names[i], o->values[i], ref->names[i], ref->values[i]);
                break;
            }
    }
    free(all);
    return st;
}
