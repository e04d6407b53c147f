/* The transformer ops of the CPU backend (backend.h): embeddings, layer norm and GELU
 * (the causal attention core is cpu_attention.c; the projections around them are the
 * layers' GEMMs). Sums over rows run in a fixed order, so any thread count gives the
 * same bits; the sums along a row are vectorised (in double: their order barely shows). */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_fastexp.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

/* Columns per thread's share in the column sums below. */
#define COL_BLOCK 16

herd_status herd_cpu_embedding_fwd(int n, int t, int c, int vocab, int first, int count,
                                   const float *tokens, const float *wte, const float *wpe,
                                   float *y)
{
    HERD_CHECK_ARRAYS("embedding_fwd", (size_t)n * t * c, tokens, wte, y);
    for (int b = 0; b < n; b++)
        for (int p = 0; p < t; p++) {
            float id = tokens[(size_t)b * t + p];
            if (!(id >= 0.0f && id < (float)vocab && id == floorf(id)))
                return HERD_ERR(HERD_ERR_INVALID_ARG,
                                "token %g at sample %d, position %d is not a token id of a "
                                "vocabulary of %d (whole numbers 0..%d)",
                                (double)id, b, p, vocab, vocab - 1);
        }
    HERD_CPU_FOR(herd_cpu_par((size_t)n * t * c), int, r, n * t,
        int row = (int)tokens[r] - first;
        const float *e = row >= 0 && row < count ? wte + (size_t)row * c : NULL;
        const float *q = wpe ? wpe + (size_t)(r % t) * c : NULL;
        float *out = y + (size_t)r * c;
        for (int j = 0; j < c; j++)
            out[j] = (e ? e[j] : 0.0f) + (q ? q[j] : 0.0f);
    );
    return HERD_OK;
}

herd_status herd_cpu_embedding_bwd(int n, int t, int c, int first, int count, int context,
                                   const float *tokens, const float *dy, float *dwte,
                                   float beta_wte, float *dwpe, float beta)
{
    HERD_CHECK_ARRAYS("embedding_bwd", (size_t)n * t * c, tokens, dy, dwte, dwpe);
    /* Every row of dwte is scaled, not only those the tokens hit: beta 0 overwrites the
     * whole gradient. Columns are split over threads and rows added in order, so a
     * token seen twice sums the same way on any thread count. */
#pragma omp parallel for schedule(static)
    for (int j0 = 0; j0 < c; j0 += COL_BLOCK) {
        int j1 = j0 + COL_BLOCK < c ? j0 + COL_BLOCK : c;
        for (int v = 0; v < count; v++)
            for (int j = j0; j < j1; j++)
                dwte[(size_t)v * c + j] =
                    beta_wte == 0.0f ? 0.0f : beta_wte * dwte[(size_t)v * c + j];
        for (int p = 0; p < context; p++)
            for (int j = j0; j < j1; j++)
                dwpe[(size_t)p * c + j] = beta == 0.0f ? 0.0f : beta * dwpe[(size_t)p * c + j];
        for (int r = 0; r < n * t; r++) {
            const float *g = dy + (size_t)r * c;
            int row = (int)tokens[r] - first;
            float *q = dwpe + (size_t)(r % t) * c;
            for (int j = j0; j < j1; j++)
                q[j] += g[j];
            if (row < 0 || row >= count)
                continue;
            float *e = dwte + (size_t)row * c;
            for (int j = j0; j < j1; j++)
                e[j] += g[j];
        }
    }
    return HERD_OK;
}

herd_status herd_cpu_layernorm_fwd(int rows, int c, const float *x, const float *gamma,
                                   const float *bias, float eps, float *y, float *mean,
                                   float *rstd)
{
    HERD_CHECK_ARRAYS("layernorm_fwd", (size_t)rows * c, x, gamma, bias, y, mean, rstd);
    HERD_CPU_FOR(herd_cpu_par((size_t)rows * c), int, r, rows,
        const float *xr = x + (size_t)r * c;
        double s = 0, sq = 0;
        _Pragma("omp simd reduction(+ : s)")
        for (int j = 0; j < c; j++)
            s += xr[j];
        double mu = s / c;
        _Pragma("omp simd reduction(+ : sq)")
        for (int j = 0; j < c; j++)
            sq += (xr[j] - mu) * (xr[j] - mu);
        float rs = (float)(1.0 / sqrt(sq / c + eps));
        float *yr = y + (size_t)r * c;
        _Pragma("omp simd")
        for (int j = 0; j < c; j++)
            yr[j] = ((xr[j] - (float)mu) * rs) * gamma[j] + bias[j];
        mean[r] = (float)mu;
        rstd[r] = rs;
    );
    return HERD_OK;
}

herd_status herd_cpu_layernorm_bwd(int rows, int c, const float *x, const float *dy,
                                   const float *gamma, const float *mean, const float *rstd,
                                   float *dx, float *dgamma, float *dbias, float beta)
{
    HERD_CHECK_ARRAYS("layernorm_bwd", (size_t)rows * c, x, dy, gamma, mean, rstd, dgamma, dbias);
    /* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma, per row. */
    if (dx) {
        HERD_CPU_FOR(herd_cpu_par((size_t)rows * c), int, r, rows,
            const float *xr = x + (size_t)r * c, *dr = dy + (size_t)r * c;
            double sg = 0, sgx = 0;
            _Pragma("omp simd reduction(+ : sg, sgx)")
            for (int j = 0; j < c; j++) {
                double g = (double)dr[j] * gamma[j], xh = (xr[j] - mean[r]) * rstd[r];
                sg += g;
                sgx += g * xh;
            }
            float mg = (float)(sg / c), mgx = (float)(sgx / c);
            float *o = dx + (size_t)r * c;
            _Pragma("omp simd")
            for (int j = 0; j < c; j++) {
                float xh = (xr[j] - mean[r]) * rstd[r];
                o[j] = rstd[r] * (dr[j] * gamma[j] - mg - xh * mgx);
            }
        );
    }
#pragma omp parallel for schedule(static)
    for (int j0 = 0; j0 < c; j0 += COL_BLOCK) {
        int j1 = j0 + COL_BLOCK < c ? j0 + COL_BLOCK : c;
        double sg[COL_BLOCK] = {0}, sb[COL_BLOCK] = {0};
        for (int r = 0; r < rows; r++) {
            const float *xr = x + (size_t)r * c, *dr = dy + (size_t)r * c;
            for (int j = j0; j < j1; j++) {
                sg[j - j0] += (double)dr[j] * ((xr[j] - mean[r]) * rstd[r]);
                sb[j - j0] += dr[j];
            }
        }
        for (int j = j0; j < j1; j++) {
            dgamma[j] = (float)sg[j - j0] + (beta == 0.0f ? 0.0f : beta * dgamma[j]);
            dbias[j] = (float)sb[j - j0] + (beta == 0.0f ? 0.0f : beta * dbias[j]);
        }
    }
    return HERD_OK;
}

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_A 0.044715f

/* 0.5 (1 + tanh(u)) is the sigmoid of 2u: computed as 1 / (1 + e^-2u), with no
 * cancellation where tanh(u) is near -1 (GELU of negative inputs), and 1 - tanh^2 is
 * 4 s (1 - s) with 1 - s = s e^-2u. e^x in plain arithmetic, so the loops vectorise. */
herd_status herd_cpu_gelu_fwd(size_t n, const float *x, float *y)
{
    HERD_CHECK_ARRAYS("gelu_fwd", n, x, y);
    HERD_CPU_FOR_SIMD(herd_cpu_par(n), size_t, i, n,
        float v = x[i], u = GELU_K * (v + GELU_A * v * v * v);
        y[i] = v / (1.0f + herd_fast_expf(-2.0f * u));
    );
    return HERD_OK;
}

herd_status herd_cpu_gelu_bwd(size_t n, const float *x, const float *dy, float *dx)
{
    HERD_CHECK_ARRAYS("gelu_bwd", n, x, dy, dx);
    HERD_CPU_FOR_SIMD(herd_cpu_par(n), size_t, i, n,
        float v = x[i], u = GELU_K * (v + GELU_A * v * v * v);
        float e = herd_fast_expf(-2.0f * u), s = 1.0f / (1.0f + e);
        float dinner = GELU_K * (1.0f + 3.0f * GELU_A * v * v);
        dx[i] = dy[i] * (s + 2.0f * v * s * (e * s) * dinner);
    );
    return HERD_OK;
}
