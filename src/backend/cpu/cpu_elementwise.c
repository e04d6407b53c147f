/* Elementwise ops: plain loops that gcc vectorises at -O3; large arrays are split
 * over the OpenMP threads chosen by set_threads. */
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "core/rng.h"

/* NaN passes, as in PyTorch: a NaN weight must show in the loss, not become a dead unit
 * whose NaN stays in the weights (and in their checkpoints) unnoticed. */
herd_status herd_cpu_relu_fwd(size_t n, const float *x, float *y)
{
    HERD_CHECK_ARRAYS("relu_fwd", n, x, y);
    HERD_CPU_FOR_SIMD(herd_cpu_par(n), size_t, i, n,
        y[i] = x[i] > 0.0f || x[i] != x[i] ? x[i] : 0.0f;
    );
    return HERD_OK;
}

herd_status herd_cpu_relu_bwd(size_t n, const float *y, const float *dy, float *dx)
{
    HERD_CHECK_ARRAYS("relu_bwd", n, y, dy, dx);
    HERD_CPU_FOR_SIMD(herd_cpu_par(n), size_t, i, n,
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    );
    return HERD_OK;
}

/* Element i keeps with draw i of a counter-based stream of the seed, so the mask depends
 * only on the seed, never on the number of threads, and the GPU draws the same. */
herd_status herd_cpu_dropout_fwd(size_t n, const float *x, float *y, float *mask, float p,
                                 uint64_t seed)
{
    HERD_TRY(herd_check_dropout_fwd(n, x, y, mask, p));
    /* p = 1 drops everything (PyTorch returns zeros) instead of scaling by infinity. */
    float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    uint64_t key = herd_dropout_key(seed);
    HERD_CPU_FOR_SIMD(herd_cpu_par(n), size_t, i, n,
        mask[i] = herd_rng_uniform_at(key, i) >= p ? keep_scale : 0.0f;
        y[i] = x[i] * mask[i];
    );
    return HERD_OK;
}

herd_status herd_cpu_mul(size_t n, const float *a, const float *b, float *y)
{
    HERD_CHECK_ARRAYS("mul", n, a, b, y);
    HERD_CPU_FOR_SIMD(herd_cpu_par(n), size_t, i, n,
        y[i] = a[i] * b[i];
    );
    return HERD_OK;
}

herd_status herd_cpu_add(size_t n, const float *a, const float *b, float *y)
{
    HERD_CHECK_ARRAYS("add", n, a, b, y);
    HERD_CPU_FOR_SIMD(herd_cpu_par(n), size_t, i, n,
        y[i] = a[i] + b[i];
    );
    return HERD_OK;
}

herd_status herd_cpu_axpy(size_t n, float alpha, const float *x, float *y)
{
    HERD_CHECK_ARRAYS("axpy", n, x, y);
    HERD_CPU_FOR_SIMD(herd_cpu_par(n), size_t, i, n,
        y[i] += alpha * x[i];
    );
    return HERD_OK;
}

herd_status herd_cpu_copy(size_t n, const float *x, float *y)
{
    HERD_CHECK_ARRAYS("copy", n, x, y);
    if (x == y)
        return HERD_OK;
    HERD_CPU_FOR_SIMD(herd_cpu_par(n), size_t, i, n,
        y[i] = x[i];
    );
    return HERD_OK;
}

herd_status herd_cpu_fill(size_t n, float value, float *y)
{
    HERD_CHECK_ARRAYS("fill", n, y);
    HERD_CPU_FOR_SIMD(herd_cpu_par(n), size_t, i, n,
        y[i] = value;
    );
    return HERD_OK;
}
