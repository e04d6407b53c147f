/* CPU backend internals shared between its files. */
#ifndef HERD_BACKEND_CPU_H
#define HERD_BACKEND_CPU_H

#include "backend/backend.h"

/* Fused optimizer kernels (cpu_optim.c). */
herd_status herd_cpu_sgd_update(size_t n, float *w, const float *g, float *momentum_buf,
                                const herd_sgd_args *a);
herd_status herd_cpu_adamw_update(size_t n, float *w, const float *g, float *m, float *v,
                                  const herd_adamw_args *a);
herd_status herd_cpu_grad_unscale_check(size_t n, float *x, float factor, bool *found_inf);

#endif
