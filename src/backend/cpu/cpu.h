/* CPU backend internals shared between its files. */
#ifndef HERD_BACKEND_CPU_H
#define HERD_BACKEND_CPU_H

#include "backend/backend.h"

/* cpu_memory.c: counted, zeroed, 64-byte aligned blocks (the backend's alloc/free),
 * the --memory-limit cap and the peak by category. */
void *herd_cpu_alloc(size_t bytes);
void herd_cpu_free(void *p);
herd_status herd_cpu_set_memory_limit(uint64_t bytes);
void herd_cpu_memory_usage(herd_memory_usage *out);
void herd_cpu_memory_reset_peak(void);
/* A block of at least `bytes` that belongs to the calling thread, kept from one call to
 * the next and freed when the thread ends (threads run kernels at once: --deterministic's
 * slices). Its contents do not survive growth. NULL when the allocator refused (it said
 * why). */
typedef enum herd_cpu_thread_buffer_kind {
    HERD_CPU_MATMUL_SCRATCH, /* a matmul primitive's scratchpad */
    HERD_CPU_BF16_COPIES,    /* the bf16 GEMM's operand copies */
    HERD_CPU_THREAD_BUFFERS
} herd_cpu_thread_buffer_kind;
void *herd_cpu_thread_buffer(herd_cpu_thread_buffer_kind kind, size_t bytes);

/* --deterministic's linear layer (cpu_exact_linear.c; backend.h's exact_linear_*).
 * force_generic: the portable loops instead of the AVX-512 kernels (tests compare them). */
herd_status herd_cpu_exact_linear_fwd(int rows, int in, int out, const float *x, const float *w,
                                      const float *b, float *y);
herd_status herd_cpu_exact_linear_bwd_data(int rows, int in, int out, const float *dy,
                                           const float *w, float *dx);
herd_status herd_cpu_exact_linear_wgrad(herd_exact_wgrad *j);
void herd_cpu_exact_force_generic(bool on);

/* Fused optimizer kernels (cpu_optim.c). */
herd_status herd_cpu_sgd_update(size_t n, float *w, const float *g, float *momentum_buf,
                                const herd_sgd_args *a);
herd_status herd_cpu_adamw_update(size_t n, float *w, const float *g, float *m, float *v,
                                  const herd_adamw_args *a);
herd_status herd_cpu_grad_unscale_check(size_t n, float *x, float factor, bool *found_inf);
herd_status herd_cpu_sum_squares(size_t n, const float *x, double *out);

#endif
