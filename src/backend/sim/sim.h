/* The simulated device's internals shared between its files. */
#ifndef HERD_BACKEND_SIM_H
#define HERD_BACKEND_SIM_H

#include "backend/backend.h"

/* sim_mem.c: device memory. Two address ranges of the same size are reserved: the
 * device range, which stays PROT_NONE for good (a host access to a device pointer
 * faults), and its shadow, where each live block's pages are readable and writable.
 * A device pointer p is stored at p + (shadow - device). */
herd_status herd_sim_mem_init(void);
void *herd_sim_alloc(size_t bytes);
void herd_sim_free(void *p);
herd_status herd_sim_set_memory_limit(uint64_t bytes);
void herd_sim_memory_usage(herd_memory_usage *out);
void herd_sim_memory_reset_peak(void);

/* The shadow address of [p, p + bytes), which must lie in one live block: NULL stays
 * NULL (the shared argument checks refuse it where it matters); a host pointer, a
 * freed block or a range past a block's end is an error naming op and arg. */
herd_status herd_sim_dev(const char *op, const char *arg, const void *p, size_t bytes,
                         void **shadow);
/* Refuses a device pointer where the op takes a host value. */
herd_status herd_sim_host(const char *op, const char *arg, const void *p);
bool herd_sim_is_device(const void *p);

/* sim_transformer.c: backend.h's transformer ops and the vocabulary-parallel loss's. */
herd_status herd_sim_embedding_fwd(int n, int t, int c, int vocab, int first, int count,
                                   const float *tokens, const float *wte, const float *wpe,
                                   float *y);
herd_status herd_sim_embedding_bwd(int n, int t, int c, int first, int count, int context,
                                   const float *tokens, const float *dy, float *dwte,
                                   float beta_wte, float *dwpe, float beta);
herd_status herd_sim_layernorm_fwd(int rows, int c, const float *x, const float *gamma,
                                   const float *bias, float eps, float *y, float *mean,
                                   float *rstd);
herd_status herd_sim_layernorm_bwd(int rows, int c, const float *x, const float *dy,
                                   const float *gamma, const float *mean, const float *rstd,
                                   float *dx, float *dgamma, float *dbias, float beta);
herd_status herd_sim_gelu_fwd(size_t n, const float *x, float *y);
herd_status herd_sim_gelu_bwd(size_t n, const float *x, const float *dy, float *dx);
herd_status herd_sim_attention_fwd(int n, int t, int c, int heads, const float *qkv, float *att,
                                   float *y);
herd_status herd_sim_attention_bwd(int n, int t, int c, int heads, const float *qkv,
                                   const float *att, const float *dy, float *dqkv);
herd_status herd_sim_xent_part_stats(int n, int count, int first, const float *logits,
                                     const int32_t *labels, double *stats);
herd_status herd_sim_xent_part_grad(int n, int count, int first, int classes, const float *logits,
                                    const int32_t *labels, const double *lse, float smoothing,
                                    float *dlogits);

/* sim_timer.c: backend.h's timer_mark / timer_elapsed / timer_host_time on host clocks. */
herd_status herd_sim_timer_mark(int slot);
herd_status herd_sim_timer_elapsed(int from, int to, double *seconds);
herd_status herd_sim_timer_host_time(int slot, double *host_seconds);

#endif
