/* Start-up agreement: every rank must train the same model the same way. Each
 * rank describes its configuration as named fields, as many and as long as it
 * needs; ranks compare a digest of them, and on a difference every rank learns
 * which rank differs in which field, with both values, and stops with that error. */
#ifndef HERD_DIST_SIGNATURE_H
#define HERD_DIST_SIGNATURE_H

#include "dist/comm.h"

typedef struct herd_signature {
    char *text; /* "name\0value\0" pairs, grown as needed */
    size_t len, cap;
    int n;
    bool oom; /* an add failed: the check reports it instead of comparing less */
} herd_signature;

void herd_signature_add(herd_signature *s, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Collective. HERD_ERR_INVALID_ARG on every rank if any rank differs from rank 0. */
herd_status herd_signature_check(herd_comm *c, const herd_signature *s);
void herd_signature_free(herd_signature *s);

/* Collective: each rank says whether its local work since the last collective
 * failed (mine), and every rank learns the outcome together. Returns mine on a
 * failed rank, an error naming the failed rank and `what` on the others, else HERD_OK. */
herd_status herd_agree(herd_comm *c, herd_status mine, const char *what);
/* Folds one rank's status into values a sum reduction already carries: three doubles. */
void herd_agree_pack(herd_status mine, int rank, double out[3]);
/* After the reduction of what herd_agree_pack wrote: herd_agree's result. */
herd_status herd_agree_unpack(herd_status mine, const double reduced[3], const char *what);

#endif
