/* The transformer ops of the CPU backend (backend.h): embeddings, layer norm, GELU and
 * the causal attention core. The projections around them are the layers' GEMMs
 * (oneDNN). Sums over rows run in a fixed order, so any thread count gives the same
 * bits. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

/* Columns per thread's share in the column sums below. */
#define COL_BLOCK 16

herd_status herd_cpu_embedding_fwd(int n, int t, int c, int vocab, const float *tokens,
                                   const float *wte, const float *wpe, float *y)
{
    HERD_CHECK_ARRAYS("embedding_fwd", (size_t)n * t * c, tokens, wte, wpe, y);
    for (int b = 0; b < n; b++)
        for (int p = 0; p < t; p++) {
            float id = tokens[(size_t)b * t + p];
            if (!(id >= 0.0f && id < (float)vocab && id == floorf(id)))
                return HERD_ERR(HERD_ERR_INVALID_ARG,
                                "token %g at sample %d, position %d is not a token id of a "
                                "vocabulary of %d (whole numbers 0..%d)",
                                (double)id, b, p, vocab, vocab - 1);
        }
#pragma omp parallel for schedule(static) if ((size_t)n * t * c >= HERD_CPU_PAR_MIN)
    for (int r = 0; r < n * t; r++) {
        const float *e = wte + (size_t)tokens[r] * c, *q = wpe + (size_t)(r % t) * c;
        float *out = y + (size_t)r * c;
        for (int j = 0; j < c; j++)
            out[j] = e[j] + q[j];
    }
    return HERD_OK;
}

herd_status herd_cpu_embedding_bwd(int n, int t, int c, int vocab, int context,
                                   const float *tokens,
                                   const float *dy, float *dwte, float beta_wte, float *dwpe,
                                   float beta)
{
    HERD_CHECK_ARRAYS("embedding_bwd", (size_t)n * t * c, tokens, dy, dwte, dwpe);
    /* Every row of dwte is scaled, not only those the tokens hit: beta 0 overwrites the
     * whole gradient. Columns are split over threads and rows added in order, so a
     * token seen twice sums the same way on any thread count. */
#pragma omp parallel for schedule(static)
    for (int j0 = 0; j0 < c; j0 += COL_BLOCK) {
        int j1 = j0 + COL_BLOCK < c ? j0 + COL_BLOCK : c;
        for (int v = 0; v < vocab; v++)
            for (int j = j0; j < j1; j++)
                dwte[(size_t)v * c + j] =
                    beta_wte == 0.0f ? 0.0f : beta_wte * dwte[(size_t)v * c + j];
        for (int p = 0; p < context; p++)
            for (int j = j0; j < j1; j++)
                dwpe[(size_t)p * c + j] = beta == 0.0f ? 0.0f : beta * dwpe[(size_t)p * c + j];
        for (int r = 0; r < n * t; r++) {
            const float *g = dy + (size_t)r * c;
            float *e = dwte + (size_t)tokens[r] * c, *q = dwpe + (size_t)(r % t) * c;
            for (int j = j0; j < j1; j++) {
                e[j] += g[j];
                q[j] += g[j];
            }
        }
    }
    return HERD_OK;
}

herd_status herd_cpu_layernorm_fwd(int rows, int c, const float *x, const float *gamma,
                                   const float *bias, float eps, float *y, float *mean,
                                   float *rstd)
{
    HERD_CHECK_ARRAYS("layernorm_fwd", (size_t)rows * c, x, gamma, bias, y, mean, rstd);
#pragma omp parallel for schedule(static) if ((size_t)rows * c >= HERD_CPU_PAR_MIN)
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * c;
        double s = 0, sq = 0;
        for (int j = 0; j < c; j++)
            s += xr[j];
        double mu = s / c;
        for (int j = 0; j < c; j++)
            sq += (xr[j] - mu) * (xr[j] - mu);
        float rs = (float)(1.0 / sqrt(sq / c + eps));
        float *yr = y + (size_t)r * c;
        for (int j = 0; j < c; j++)
            yr[j] = ((xr[j] - (float)mu) * rs) * gamma[j] + bias[j];
        mean[r] = (float)mu;
        rstd[r] = rs;
    }
    return HERD_OK;
}

herd_status herd_cpu_layernorm_bwd(int rows, int c, const float *x, const float *dy,
                                   const float *gamma, const float *mean, const float *rstd,
                                   float *dx, float *dgamma, float *dbias, float beta)
{
    HERD_CHECK_ARRAYS("layernorm_bwd", (size_t)rows * c, x, dy, gamma, mean, rstd, dgamma, dbias);
    /* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma, per row. */
    if (dx) {
#pragma omp parallel for schedule(static) if ((size_t)rows * c >= HERD_CPU_PAR_MIN)
        for (int r = 0; r < rows; r++) {
            const float *xr = x + (size_t)r * c, *dr = dy + (size_t)r * c;
            double sg = 0, sgx = 0;
            for (int j = 0; j < c; j++) {
                double g = (double)dr[j] * gamma[j], xh = (xr[j] - mean[r]) * rstd[r];
                sg += g;
                sgx += g * xh;
            }
            float mg = (float)(sg / c), mgx = (float)(sgx / c);
            float *o = dx + (size_t)r * c;
            for (int j = 0; j < c; j++) {
                float xh = (xr[j] - mean[r]) * rstd[r];
                o[j] = rstd[r] * (dr[j] * gamma[j] - mg - xh * mgx);
            }
        }
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

herd_status herd_cpu_gelu_fwd(size_t n, const float *x, float *y)
{
    HERD_CHECK_ARRAYS("gelu_fwd", n, x, y);
#pragma omp parallel for schedule(static) if (n >= HERD_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(GELU_K * (v + GELU_A * v * v * v)));
    }
    return HERD_OK;
}

herd_status herd_cpu_gelu_bwd(size_t n, const float *x, const float *dy, float *dx)
{
    HERD_CHECK_ARRAYS("gelu_bwd", n, x, dy, dx);
#pragma omp parallel for schedule(static) if (n >= HERD_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float v = x[i], th = tanhf(GELU_K * (v + GELU_A * v * v * v));
        float dinner = GELU_K * (1.0f + 3.0f * GELU_A * v * v);
        dx[i] = dy[i] * (0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * dinner);
    }
    return HERD_OK;
}

static float dot(const float *a, const float *b, int d)
{
    float s = 0;
    for (int k = 0; k < d; k++)
        s += a[k] * b[k];
    return s;
}

herd_status herd_cpu_attention_fwd(int n, int t, int c, int heads, const float *qkv, float *att,
                                   float *y)
{
    HERD_CHECK_ARRAYS("attention_fwd", (size_t)n * t * c, qkv, att, y);
    int d = c / heads;
    float scale = 1.0f / sqrtf((float)d);
    size_t ld = 3 * (size_t)c;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (int h = 0; h < heads; h++) {
            const float *base = qkv + (size_t)b * t * ld + (size_t)h * d;
            float *a = att + ((size_t)b * heads + h) * t * t;
            for (int i = 0; i < t; i++) {
                const float *q = base + i * ld;
                float *ar = a + (size_t)i * t, mx = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    ar[j] = dot(q, base + j * ld + c, d) * scale;
                    mx = ar[j] > mx ? ar[j] : mx;
                }
                float sum = 0;
                for (int j = 0; j <= i; j++)
                    sum += (ar[j] = expf(ar[j] - mx));
                for (int j = 0; j <= i; j++)
                    ar[j] /= sum;
                for (int j = i + 1; j < t; j++)
                    ar[j] = 0.0f;
                float *out = y + ((size_t)b * t + i) * c + (size_t)h * d;
                memset(out, 0, (size_t)d * sizeof *out);
                for (int j = 0; j <= i; j++) {
                    const float *v = base + j * ld + 2 * (size_t)c;
                    for (int k = 0; k < d; k++)
                        out[k] += ar[j] * v[k];
                }
            }
        }
    return HERD_OK;
}

herd_status herd_cpu_attention_bwd(int n, int t, int c, int heads, const float *qkv,
                                   const float *att, const float *dy, float *dqkv)
{
    HERD_CHECK_ARRAYS("attention_bwd", (size_t)n * t * c, qkv, att, dy, dqkv);
    int d = c / heads;
    float scale = 1.0f / sqrtf((float)d);
    size_t ld = 3 * (size_t)c;
    /* Each (sample, head) owns its slices of dqkv: no two threads write one value. */
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (int h = 0; h < heads; h++) {
            const float *base = qkv + (size_t)b * t * ld + (size_t)h * d;
            float *dbase = dqkv + (size_t)b * t * ld + (size_t)h * d;
            const float *a = att + ((size_t)b * heads + h) * t * t;
            for (int i = 0; i < t; i++)
                for (int s = 0; s < 3; s++)
                    memset(dbase + i * ld + (size_t)s * c, 0, (size_t)d * sizeof(float));
            for (int i = 0; i < t; i++) {
                const float *g = dy + ((size_t)b * t + i) * c + (size_t)h * d;
                const float *ar = a + (size_t)i * t;
                /* datt_j = g . v_j; the softmax's backward needs sum_j att_j datt_j first. */
                float s = 0;
                for (int j = 0; j <= i; j++)
                    s += ar[j] * dot(g, base + j * ld + 2 * (size_t)c, d);
                float *dq = dbase + i * ld;
                const float *q = base + i * ld;
                for (int j = 0; j <= i; j++) {
                    const float *k = base + j * ld + c, *v = base + j * ld + 2 * (size_t)c;
                    float *dk = dbase + j * ld + c, *dv = dbase + j * ld + 2 * (size_t)c;
                    float dpre = ar[j] * (dot(g, v, d) - s) * scale;
                    for (int e = 0; e < d; e++) {
                        dv[e] += ar[j] * g[e];
                        dq[e] += dpre * k[e];
                        dk[e] += dpre * q[e];
                    }
                }
            }
        }
    return HERD_OK;
}
