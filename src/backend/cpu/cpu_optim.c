/* Fused optimizer kernels: one pass over weights, gradients and state, so each
 * float is read and written once per step (the update is memory bound). */
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

herd_status herd_cpu_sgd_update(size_t n, float *w, const float *g, float *momentum_buf,
                                const herd_sgd_args *a)
{
    HERD_TRY(herd_check_sgd_update(n, w, g, momentum_buf, a));
    if (n == 0)
        return HERD_OK;

    const float lr = a->lr, mom = a->momentum;
    /* Coupled decay folds wd*w into the gradient (torch.optim.SGD); decoupled
     * decay shrinks the weight first and leaves the gradient alone. */
    const float wd_coupled = a->decoupled ? 0.0f : a->weight_decay;
    const float shrink = a->decoupled ? 1.0f - lr * a->weight_decay : 1.0f;
    const ptrdiff_t len = (ptrdiff_t)n;
    float *restrict W = w;
    const float *restrict G = g;

    if (mom == 0.0f) {
        HERD_CPU_FOR_SIMD(herd_cpu_par(n), ptrdiff_t, i, len,
            float wi = W[i] * shrink;
            float gi = G[i] + wd_coupled * wi;
            W[i] = wi - lr * gi;
        );
        return HERD_OK;
    }

    /* PyTorch sets buf = g on the first step; the buffer starts at zero here, and
     * mom*0 + g == g, so the first step needs no special case. */
    float *restrict B = momentum_buf;
    if (a->nesterov) {
        HERD_CPU_FOR_SIMD(herd_cpu_par(n), ptrdiff_t, i, len,
            float wi = W[i] * shrink;
            float gi = G[i] + wd_coupled * wi;
            float bi = mom * B[i] + gi;
            B[i] = bi;
            W[i] = wi - lr * (gi + mom * bi);
        );
    } else {
        HERD_CPU_FOR_SIMD(herd_cpu_par(n), ptrdiff_t, i, len,
            float wi = W[i] * shrink;
            float gi = G[i] + wd_coupled * wi;
            float bi = mom * B[i] + gi;
            B[i] = bi;
            W[i] = wi - lr * bi;
        );
    }
    return HERD_OK;
}

herd_status herd_cpu_adamw_update(size_t n, float *w, const float *g, float *m, float *v,
                                  const herd_adamw_args *a)
{
    HERD_TRY(herd_check_adamw_update(n, w, g, m, v, a));
    if (n == 0)
        return HERD_OK;

    /* Bias corrections in double: beta^step underflows gracefully and the
     * per-step constants cost nothing next to the loop. */
    const double bc1 = 1.0 - pow((double)a->beta1, (double)a->step);
    const double bc2 = 1.0 - pow((double)a->beta2, (double)a->step);
    const float step_size = (float)((double)a->lr / bc1);
    const float inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    const float b1 = a->beta1, b2 = a->beta2, eps = a->eps;
    const float shrink = 1.0f - a->lr * a->weight_decay;
    const ptrdiff_t len = (ptrdiff_t)n;
    float *restrict W = w, *restrict M = m, *restrict V = v;
    const float *restrict G = g;

    HERD_CPU_FOR_SIMD(herd_cpu_par(n), ptrdiff_t, i, len,
        float gi = G[i];
        float mi = b1 * M[i] + (1.0f - b1) * gi;
        float vi = b2 * V[i] + (1.0f - b2) * gi * gi;
        M[i] = mi;
        V[i] = vi;
        /* sqrtf vectorises only with -fno-math-errno (set for this file in CMakeLists.txt);
         * vi >= 0, so errno would never be set anyway.
         * torch.optim.AdamW: decay first, then w -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps). */
        W[i] = W[i] * shrink - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    );
    return HERD_OK;
}

herd_status herd_cpu_grad_unscale_check(size_t n, float *x, float factor, bool *found_inf)
{
    HERD_TRY(herd_check_grad_unscale(n, x));
    const ptrdiff_t len = (ptrdiff_t)n;
    int bad = 0;
    /* inf * factor stays inf and NaN stays NaN, so checking the results is checking
     * the inputs too; x - x is 0 exactly for finite x and NaN otherwise, which keeps
     * the loop a vectorisable reduction. */
#pragma omp parallel for reduction(| : bad) if (n >= HERD_CPU_PAR_MIN)
    for (ptrdiff_t i = 0; i < len; i++) {
        float v = x[i] * factor;
        x[i] = v;
        bad |= (v - v) != 0.0f;
    }
    if (found_inf)
        *found_inf = bad != 0;
    return HERD_OK;
}

/* Blocks of a fixed size summed in double, then the blocks in order: the result does not
 * depend on how the blocks were shared among threads. */
#define SUM_SQUARES_BLOCK 8192

herd_status herd_cpu_sum_squares(size_t n, const float *x, double *out)
{
    HERD_TRY(herd_check_sum_squares(n, x, out));
    size_t blocks = (n + SUM_SQUARES_BLOCK - 1) / SUM_SQUARES_BLOCK;
    double stack[64], *part = blocks <= 64 ? stack : malloc(blocks * sizeof(double));
    if (!part)
        return HERD_NOMEM(blocks * sizeof(double));
    const ptrdiff_t nb = (ptrdiff_t)blocks;
#pragma omp parallel for schedule(static) if (n >= HERD_CPU_PAR_MIN)
    for (ptrdiff_t b = 0; b < nb; b++) {
        size_t lo = (size_t)b * SUM_SQUARES_BLOCK, hi = lo + SUM_SQUARES_BLOCK < n ? lo + SUM_SQUARES_BLOCK : n;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = lo; i < hi; i++)
            s += (double)x[i] * x[i];
        part[b] = s;
    }
    double total = 0.0;
    for (size_t b = 0; b < blocks; b++)
        total += part[b];
    if (part != stack)
        free(part);
    *out = total;
    return HERD_OK;
}
