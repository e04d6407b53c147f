/* Several ranks on one GPU: which ranks share one (from every rank's host and GPU
 * identity), the line that names them, and the collective that decides it at start
 * (herd_comm_device_create: NCCL refuses two ranks on one GPU, so such a job reduces
 * through MPI). herd doctor says the same from the ranks per host. */
#ifndef HERD_DIST_GPU_SHARE_H
#define HERD_DIST_GPU_SHARE_H

#include <stdbool.h>
#include <stddef.h>

#include "herd/herd.h"

/* Why a shared GPU changes the reduction, for the lines of herd_gpu_shared's callers. */
#define HERD_GPU_SHARE_WHY "NCCL cannot put two ranks on one GPU"

/* One rank's place: ranks share a GPU when host and id are equal and id is not empty. */
typedef struct herd_gpu_seat {
    char host[64]; /* "" in messages about one host: no "on host" */
    char id[48];   /* the GPU's identity on its host (PCI bus id); "" never shared */
    char name[80]; /* how messages name it: "GPU 0 (00000000:1B:00.0)" */
} herd_gpu_seat;

/* How many GPUs two or more of the n seats share. msg (when not NULL) gets one text
 * naming each such GPU in the order of its lowest rank, "; " between them:
 * "ranks 0,1 on host h share GPU 0 (00000000:1B:00.0)"; `who` says what the ranks
 * are ("ranks", "local ranks"). Long lists are cut with "...". */
int herd_gpu_shared(const herd_gpu_seat *seats, int n, const char *who, char *msg, size_t cap);

struct herd_comm;
struct herd_backend;
/* Collective over c: every rank's host and the identity of the device it computes on
 * (the backend's device_identity; none for a backend without one), gathered. *shared:
 * whether any two ranks of c share a GPU, the same on every rank; line (when not NULL)
 * names them as herd_gpu_shared does. Fails on every rank when one could not read its
 * identity. */
herd_status herd_gpu_share_check(struct herd_comm *c, const struct herd_backend *be,
                                 bool *shared, char *line, size_t cap);
/* Collective over c: how gradients in be's memory are reduced, the same on every rank.
 * *nccl: NCCL (a cuda build with NCCL, several ranks, no two on one GPU); else MPI
 * through host memory. Rank 0 of several logs one line saying which, and why. */
herd_status herd_device_reduction(struct herd_comm *c, const struct herd_backend *be,
                                  bool *nccl);

#endif
