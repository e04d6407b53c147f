/* Replica checks (--check-replicas): data-parallel ranks must hold bit-identical
 * parameters after every step; a divergence (a non-deterministic reduction, an
 * update applied on one rank only, memory corruption) otherwise goes unnoticed and
 * silently turns into K different models. */
#ifndef HERD_DIST_REPLICA_H
#define HERD_DIST_REPLICA_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "dist/comm.h"

/* A 64-bit hash of the raw bits of p[0..n): deterministic across runs, machines
 * and thread counts; any single flipped bit changes it (by construction, not by
 * chance); several GB/s on one core. Not cryptographic. p may be NULL when n is 0. */
uint64_t herd_hash_floats(const float *p, size_t n);

/* Hashes params[0..n) and buffers[0..nb) (batch-norm running statistics), gathers
 * every rank's hashes and returns HERD_ERR_INTERNAL naming the ranks whose
 * parameters or buffers differ from rank 0's at this step. Collective: every rank
 * calls it at the same step. HERD_OK at once with a single rank. */
herd_status herd_check_replicas(herd_comm *c, const float *params, size_t n,
                                const float *buffers, size_t nb, long step);

/* A host copy of a device model's parameters and buffers for the checks, kept from
 * one check to the next (zero-initialised; herd_replica_stage_free after the last). */
typedef struct herd_replica_stage {
    float *host;
    size_t floats;
} herd_replica_stage;
void herd_replica_stage_free(herd_replica_stage *s);

/* herd_check_replicas for arrays in be's memory: a device's are copied into s first
 * (one copy per array and check; a failed copy on any rank fails the check on every
 * rank). The CPU's are hashed where they are. */
herd_status herd_check_replicas_on(herd_comm *c, const herd_backend *be, herd_replica_stage *s,
                                   const float *params, size_t n, const float *buffers,
                                   size_t nb, long step);

#endif
