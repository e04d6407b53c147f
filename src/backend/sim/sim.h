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

/* sim_graph.c: backend.h's graph ops (the rules of a CUDA graph, checked). Every op
 * reports its device arrays (herd_sim_dev does) and the scalars that may change from
 * step to step; while a graph records, ops are checked and recorded but not computed
 * (herd_sim_recording); refuse fails a call CUDA refuses while capturing (host values,
 * copies, allocations, timer marks), note_free a free inside a region. The memory
 * counts its frees: a graph holding a freed pointer is stale. */
herd_status herd_sim_graph_capture(herd_graph_region region, void *user, herd_graph **out);
herd_status herd_sim_graph_launch(herd_graph *g, bool *stale);
void herd_sim_graph_free(herd_graph *g);
bool herd_sim_recording(void);
herd_status herd_sim_graph_array(const char *op, const char *arg, const void *p, size_t bytes);
herd_status herd_sim_graph_real(const char *op, const char *arg, double v);
herd_status herd_sim_graph_integer(const char *op, const char *arg, uint64_t v);
herd_status herd_sim_graph_refuse(const char *op, const char *why);
void herd_sim_graph_note_free(void);
uint64_t herd_sim_frees(void);

/* An op's result: computed, except while a graph records (ops are then only checked). */
#define HERD_SIM_RUN(call) (herd_sim_recording() ? HERD_OK : (call))
/* A scalar argument a graph must see unchanged: a float, or an integer (or flag). */
#define HERD_SIM_SCALAR(op, x) HERD_TRY(herd_sim_graph_real(op, #x, (double)(x)))
#define HERD_SIM_BITS(op, x) HERD_TRY(herd_sim_graph_integer(op, #x, (uint64_t)(x)))

/* sim_timer.c: backend.h's timer_mark / timer_elapsed / timer_host_time on host clocks. */
herd_status herd_sim_timer_mark(int slot);
herd_status herd_sim_timer_elapsed(int from, int to, double *seconds);
herd_status herd_sim_timer_host_time(int slot, double *host_seconds);

#endif
