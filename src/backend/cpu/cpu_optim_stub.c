/* TEMPORARY: lets the backend branch link before cpu_optim.c (written on another
 * branch) is merged. Delete this file at merge. */
#include "backend/cpu/cpu.h"
#include "core/error.h"

herd_status herd_cpu_sgd_update(size_t n, float *w, const float *g, float *momentum_buf,
                                const herd_sgd_args *a)
{
    (void)n, (void)w, (void)g, (void)momentum_buf, (void)a;
    return HERD_ERR(HERD_ERR_UNSUPPORTED, "sgd_update: not merged yet");
}

herd_status herd_cpu_adamw_update(size_t n, float *w, const float *g, float *m, float *v,
                                  const herd_adamw_args *a)
{
    (void)n, (void)w, (void)g, (void)m, (void)v, (void)a;
    return HERD_ERR(HERD_ERR_UNSUPPORTED, "adamw_update: not merged yet");
}
