/* Start-up agreement: every rank must train the same model the same way. Each
 * rank describes its configuration as named fields; all ranks exchange them and
 * any difference stops every rank with an error naming the rank and the field. */
#ifndef HERD_DIST_SIGNATURE_H
#define HERD_DIST_SIGNATURE_H

#include "dist/comm.h"

#define HERD_SIG_MAX_FIELDS 24

typedef struct herd_signature {
    int n;
    char names[HERD_SIG_MAX_FIELDS][24];
    char values[HERD_SIG_MAX_FIELDS][40]; /* printable; long strings are hashed */
} herd_signature;

void herd_signature_add(herd_signature *s, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Exchanges signatures; HERD_ERR_INVALID_ARG on every rank if any rank differs from rank 0. */
herd_status herd_signature_check(herd_comm *c, const herd_signature *s);

#endif
