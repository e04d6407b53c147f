/* Batch normalisation over (n, hw) per channel of NCHW tensors, PyTorch semantics
 * (biased variance to normalise, unbiased for the running variance), mirroring
 * cpu_bn.c step for step so both backends agree to rounding: sums accumulate in
 * double, the variance comes from a second pass over deviations, and the fused ops
 * are the split (synchronised BN) ops run back to back.
 *
 * Reductions run in two steps so that a few channels still fill the GPU: a grid of
 * (splits x channels) blocks writes partial sums, then k_bn_total adds each channel's
 * partials in a fixed order (deterministic, no atomics). Per-channel constants
 * (scale and shift, or the dx coefficients) are computed once into scratch, and the
 * elementwise passes read them. */
#include <math.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_kernels.cuh"

#define BN_THREADS 256
#define BN_WARPS (BN_THREADS / 32)
#define BN_PIECE 1024    /* a warp's unit of work: up to this much of one (n, c) row */
#define BN_TARGET_BLOCKS 1024 /* partial-sum blocks to aim for, over all channels */

/* ---- kernels */

/* Partial sums of one channel (blockIdx.y) over units of up to BN_PIECE values of one
 * row; block blockIdx.x of gridDim.x takes every gridDim.x-th group of warps' units.
 * SUM_X: sum of x. SUM_SQDEV: sum of (x - mean)^2, mean = sum[ch] / count.
 * SUM_BWD: sum of dy and of dy * (x - mean), mean = mean_f[ch].
 * part holds [2][splits][c] doubles: split-major, so that k_bn_total's neighbouring
 * threads read neighbouring channels. */
template <int MODE>
__global__ void k_bn_partial(int n, int c, int hw, const float *x, const float *dy,
                             const double *sum, const float *mean_f, double count, double *part)
{
    __shared__ double sa[BN_THREADS], sb[BN_THREADS];
    int ch = blockIdx.y, splits = gridDim.x;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float mean = 0.0f;
    if (MODE == SUM_SQDEV)
        mean = (float)(sum[ch] / count);
    if (MODE == SUM_BWD)
        mean = mean_f[ch];
    int pieces = (hw + BN_PIECE - 1) / BN_PIECE;
    long long units = (long long)n * pieces;
    size_t plane = (size_t)c * hw;
    double a = 0.0, b = 0.0;
    for (long long u = (long long)blockIdx.x * BN_WARPS + warp; u < units;
         u += (long long)splits * BN_WARPS) {
        int s = (int)(u / pieces), piece = (int)(u % pieces);
        size_t base = (size_t)s * plane + (size_t)ch * hw;
        int end = min(hw, (piece + 1) * BN_PIECE);
        for (int i = piece * BN_PIECE + lane; i < end; i += 32) {
            float v = x[base + i];
            if (MODE == SUM_X) {
                a += v;
            } else if (MODE == SUM_SQDEV) {
                float d = v - mean;
                a += d * d;
            } else {
                float g = dy[base + i];
                a += g;
                b += g * (v - mean);
            }
        }
    }
    sa[threadIdx.x] = a;
    sb[threadIdx.x] = b;
    __syncthreads();
    for (int k = BN_THREADS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) {
            sa[threadIdx.x] += sa[threadIdx.x + k];
            sb[threadIdx.x] += sb[threadIdx.x + k];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        part[(size_t)blockIdx.x * c + ch] = sa[0];
        if (MODE == SUM_BWD)
            part[((size_t)splits + blockIdx.x) * c + ch] = sb[0];
    }
}

/* One thread per channel adds its partials in order. */
/* Each channel's partials added in a fixed order: of a block's 32 x 8 threads, x walks
 * neighbouring channels (coalesced reads) and lane y adds splits y, y + 8, ...; then the
 * 8 lanes' sums are added in order. (One thread per channel left most of the device idle:
 * 8 us a call for resnet50's 64-channel layers on an H200.) */
__global__ void k_bn_total(int c, int splits, const double *part, double *out_a, double *out_b)
{
    __shared__ double sa[8][32], sb[8][32];
    int ch = blockIdx.x * 32 + threadIdx.x;
    double a = 0.0, b = 0.0;
    if (ch < c)
        for (int j = threadIdx.y; j < splits; j += 8) {
            a += part[(size_t)j * c + ch];
            if (out_b)
                b += part[((size_t)splits + j) * c + ch];
        }
    sa[threadIdx.y][threadIdx.x] = a;
    sb[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y != 0 || ch >= c)
        return;
    for (int j = 1; j < 8; j++) {
        a += sa[j][threadIdx.x];
        b += sb[j][threadIdx.x];
    }
    out_a[ch] = a;
    if (out_b)
        out_b[ch] = b;
}

static herd_status bn_total(int c, int splits, const double *part, double *out_a, double *out_b)
{
    k_bn_total<<<(c + 31) / 32, dim3(32, 8), 0, herd_cuda_ctx_get()->stream>>>(c, splits, part,
                                                                               out_a, out_b);
    HERD_CUDA_LAUNCHED("k_bn_total");
    return HERD_OK;
}

/* Statistics of one channel from its sums (cpu_bn.c ch_apply): saves mean and inverse
 * std, updates the running statistics, and leaves scale and shift in coef[2][c]. */
__global__ void k_bn_params(int c, const double *sum, const double *sq, double count,
                            const float *gamma, const float *beta, float *save_mean,
                            float *save_invstd, float *running_mean, float *running_var,
                            float momentum, float eps, float *coef)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    float mean = (float)(sum[ch] / count);
    double var = sq[ch] / count;
    float invstd = (float)(1.0 / sqrt(var + (double)eps));
    float scale = gamma[ch] * invstd;
    coef[ch] = scale;
    coef[c + ch] = beta[ch] - mean * scale;
    save_mean[ch] = mean;
    save_invstd[ch] = invstd;
    double unbiased = sq[ch] / (count - 1.0);
    running_mean[ch] = (1.0f - momentum) * running_mean[ch] + momentum * mean;
    running_var[ch] = (1.0f - momentum) * running_var[ch] + momentum * (float)unbiased;
}

/* Backward per channel (cpu_bn.c ch_param_grads / ch_dx): parameter gradients when
 * dgamma is given, and dx's coefficients k, mean(dy), proj into coef[3][c] when coef is. */
__global__ void k_bn_bwd_params(int c, const double *sdy, const double *sdyxc, double count,
                                const float *gamma, const float *save_invstd, float *dgamma,
                                float *dbeta, float beta, float *coef)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    float invstd = save_invstd[ch];
    if (dgamma) {
        float dg = (float)(sdyxc[ch] * invstd), db = (float)sdy[ch];
        dgamma[ch] = beta == 0.0f ? dg : dgamma[ch] + dg;
        dbeta[ch] = beta == 0.0f ? db : dbeta[ch] + db;
    }
    if (coef) {
        coef[ch] = gamma[ch] * invstd;
        coef[c + ch] = (float)(sdy[ch] / count);
        coef[2 * c + ch] = (float)(sdyxc[ch] / count) * invstd * invstd;
    }
}

/* Channel of flat index i; 32-bit division when the tensor allows (much cheaper). */
template <typename I> __device__ static int chan(I i, int hw, int c)
{
    return (int)(i / (I)hw % (I)c);
}

template <typename I>
__global__ void k_bn_apply(I total, int c, int hw, const float *x, const float *coef, float *y)
{
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        int ch = chan(i, hw, c);
        y[i] = x[i] * coef[ch] + coef[c + ch];
    }
}

template <typename I>
__global__ void k_bn_dx(I total, int c, int hw, const float *x, const float *dy,
                        const float *save_mean, const float *coef, float *dx)
{
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        int ch = chan(i, hw, c);
        dx[i] = coef[ch] * (dy[i] - coef[c + ch] - (x[i] - save_mean[ch]) * coef[2 * c + ch]);
    }
}

__global__ void k_bn_infer(size_t total, int c, int hw, const float *x, const float *gamma,
                           const float *beta, float *y, const float *running_mean,
                           const float *running_var, float eps)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int ch = (int)(i / hw % c);
        float scale = gamma[ch] / sqrtf(running_var[ch] + eps);
        float shift = beta[ch] - running_mean[ch] * scale;
        y[i] = x[i] * scale + shift;
    }
}

/* ---- launch helpers */

/* Splits per channel: enough blocks overall, no more than there are warp units. */
static int bn_splits(int n, int c, int hw)
{
    long long units = (long long)n * ((hw + BN_PIECE - 1) / BN_PIECE);
    long long by_units = (units + BN_WARPS - 1) / BN_WARPS;
    long long s = (BN_TARGET_BLOCKS + c - 1) / c;
    s = s < by_units ? s : by_units;
    return (int)(s < 1 ? 1 : s);
}

typedef struct bn_scratch {
    int splits;
    double *part, *tot; /* [2][splits][c], [2][c] */
    float *coef;        /* [3][c] */
} bn_scratch;

static herd_status bn_scratch_get(int n, int c, int hw, bn_scratch *sc)
{
    sc->splits = bn_splits(n, c, hw);
    size_t part = 2 * (size_t)c * sc->splits, tot = 2 * (size_t)c;
    void *p;
    HERD_TRY(herd_cuda_scratch(HERD_CUDA_SCRATCH_BN,
                               (part + tot) * sizeof(double) + 3 * (size_t)c * sizeof(float), &p));
    sc->part = (double *)p;
    sc->tot = sc->part + part;
    sc->coef = (float *)(sc->tot + tot);
    return HERD_OK;
}

/* Per-channel reduction of MODE into out_a (and out_b for SUM_BWD). */
template <int MODE>
static herd_status bn_reduce(int n, int c, int hw, const bn_scratch *sc, const float *x,
                             const float *dy, const double *sum, const float *mean_f,
                             int64_t count, double *out_a, double *out_b)
{
    k_bn_partial<MODE><<<dim3(sc->splits, c), BN_THREADS, 0, stream()>>>(
        n, c, hw, x, dy, sum, mean_f, (double)count, sc->part);
    HERD_CUDA_LAUNCHED("k_bn_partial");
    return bn_total(c, sc->splits, sc->part, out_a, out_b);
}

static herd_status bn_apply(int n, int c, int hw, const float *x, const float *coef, float *y)
{
    size_t total = (size_t)n * c * hw;
    if (total <= 0xffffffffu)
        k_bn_apply<unsigned><<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, stream()>>>(
            (unsigned)total, c, hw, x, coef, y);
    else
        k_bn_apply<size_t><<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, stream()>>>(
            total, c, hw, x, coef, y);
    HERD_CUDA_LAUNCHED("k_bn_apply");
    return HERD_OK;
}

static herd_status bn_dx(int n, int c, int hw, const float *x, const float *dy,
                         const float *save_mean, const float *coef, float *dx)
{
    size_t total = (size_t)n * c * hw;
    if (total <= 0xffffffffu)
        k_bn_dx<unsigned><<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, stream()>>>(
            (unsigned)total, c, hw, x, dy, save_mean, coef, dx);
    else
        k_bn_dx<size_t><<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, stream()>>>(
            total, c, hw, x, dy, save_mean, coef, dx);
    HERD_CUDA_LAUNCHED("k_bn_dx");
    return HERD_OK;
}

#define PER_CHANNEL(c) ((c) + 127) / 128, 128, 0, stream()

/* ---- launchers */

/* After the shared checks (backend.c): what this backend adds. */
static herd_status check_grid(const char *op, int c)
{
    if (c > 65535) /* channels are the reduction grid's y dimension */
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "%s: %d channels; the CUDA backend supports up to "
                        "65535", op, c);
    return HERD_OK;
}

extern "C" herd_status herd_cuda_bn_fwd_train(int n, int c, int hw, const float *x,
                                              const float *gamma, const float *beta, float *y,
                                              float *save_mean, float *save_invstd,
                                              float *running_mean, float *running_var,
                                              float momentum, float eps)
{
    HERD_TRY(herd_check_bn_fwd_train(n, c, hw, x, gamma, beta, y, save_mean, save_invstd,
                                     running_mean, running_var));
    HERD_TRY(check_grid("bn_fwd_train", c));
    int64_t count = (int64_t)n * hw;
    bn_scratch sc;
    HERD_TRY(bn_scratch_get(n, c, hw, &sc));
    double *sum = sc.tot, *sq = sc.tot + c;
    HERD_TRY(bn_reduce<SUM_X>(n, c, hw, &sc, x, NULL, NULL, NULL, count, sum, NULL));
    HERD_TRY(bn_reduce<SUM_SQDEV>(n, c, hw, &sc, x, NULL, sum, NULL, count, sq, NULL));
    k_bn_params<<<PER_CHANNEL(c)>>>(c, sum, sq, (double)count, gamma, beta, save_mean,
                                    save_invstd, running_mean, running_var, momentum, eps,
                                    sc.coef);
    HERD_CUDA_LAUNCHED("k_bn_params");
    return bn_apply(n, c, hw, x, sc.coef, y);
}

extern "C" herd_status herd_cuda_bn_fwd_infer(int n, int c, int hw, const float *x,
                                              const float *gamma, const float *beta, float *y,
                                              const float *running_mean,
                                              const float *running_var, float eps)
{
    HERD_TRY(herd_check_bn_fwd_infer(n, c, hw, x, gamma, beta, y, running_mean, running_var));
    HERD_TRY(check_grid("bn_fwd_infer", c));
    size_t total = (size_t)n * c * hw;
    k_bn_infer<<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, stream()>>>(
        total, c, hw, x, gamma, beta, y, running_mean, running_var, eps);
    HERD_CUDA_LAUNCHED("k_bn_infer");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_bn_bwd(int n, int c, int hw, const float *x, const float *dy,
                                        const float *gamma, const float *save_mean,
                                        const float *save_invstd, float *dx, float *dgamma,
                                        float *dbeta, float beta)
{
    HERD_TRY(herd_check_bn_bwd(n, c, hw, x, dy, gamma, save_mean, save_invstd, dgamma, dbeta,
                               beta));
    HERD_TRY(check_grid("bn_bwd", c));
    int64_t count = (int64_t)n * hw;
    bn_scratch sc;
    HERD_TRY(bn_scratch_get(n, c, hw, &sc));
    double *sdy = sc.tot, *sdyxc = sc.tot + c;
    HERD_TRY(bn_reduce<SUM_BWD>(n, c, hw, &sc, x, dy, NULL, save_mean, count, sdy, sdyxc));
    k_bn_bwd_params<<<PER_CHANNEL(c)>>>(c, sdy, sdyxc, (double)count, gamma, save_invstd, dgamma,
                                        dbeta, beta, dx ? sc.coef : NULL);
    HERD_CUDA_LAUNCHED("k_bn_bwd_params");
    return dx ? bn_dx(n, c, hw, x, dy, save_mean, sc.coef, dx) : HERD_OK;
}

extern "C" herd_status herd_cuda_bn_stats(int n, int c, int hw, const float *x, const double *sum,
                                          int64_t count, double *out)
{
    HERD_TRY(herd_check_bn_stats(n, c, hw, x, sum, count, out));
    HERD_TRY(check_grid("bn_stats", c));
    bn_scratch sc;
    HERD_TRY(bn_scratch_get(n, c, hw, &sc));
    if (sum)
        return bn_reduce<SUM_SQDEV>(n, c, hw, &sc, x, NULL, sum, NULL, count, out, NULL);
    return bn_reduce<SUM_X>(n, c, hw, &sc, x, NULL, NULL, NULL, count, out, NULL);
}

extern "C" herd_status herd_cuda_bn_apply_train(int n, int c, int hw, const float *x,
                                                const float *gamma, const float *beta,
                                                const double *sum, const double *sqdev,
                                                int64_t count, float *y, float *save_mean,
                                                float *save_invstd, float *running_mean,
                                                float *running_var, float momentum, float eps)
{
    HERD_TRY(herd_check_bn_apply_train(n, c, hw, x, gamma, beta, sum, sqdev, count, y, save_mean,
                                       save_invstd, running_mean, running_var));
    HERD_TRY(check_grid("bn_apply_train", c));
    bn_scratch sc;
    HERD_TRY(bn_scratch_get(n, c, hw, &sc));
    k_bn_params<<<PER_CHANNEL(c)>>>(c, sum, sqdev, (double)count, gamma, beta, save_mean,
                                    save_invstd, running_mean, running_var, momentum, eps,
                                    sc.coef);
    HERD_CUDA_LAUNCHED("k_bn_params");
    return bn_apply(n, c, hw, x, sc.coef, y);
}

extern "C" herd_status herd_cuda_bn_bwd_reduce(int n, int c, int hw, const float *x,
                                               const float *dy, const float *save_mean,
                                               const float *save_invstd, double *sum_dy,
                                               double *sum_dy_xc, float *dgamma, float *dbeta,
                                               float beta)
{
    HERD_TRY(herd_check_bn_bwd_reduce(n, c, hw, x, dy, save_mean, save_invstd, sum_dy, sum_dy_xc,
                                      dgamma, dbeta, beta));
    HERD_TRY(check_grid("bn_bwd_reduce", c));
    int64_t count = (int64_t)n * hw;
    bn_scratch sc;
    HERD_TRY(bn_scratch_get(n, c, hw, &sc));
    HERD_TRY(bn_reduce<SUM_BWD>(n, c, hw, &sc, x, dy, NULL, save_mean, count, sum_dy,
                                sum_dy_xc));
    k_bn_bwd_params<<<PER_CHANNEL(c)>>>(c, sum_dy, sum_dy_xc, (double)count, NULL, save_invstd,
                                        dgamma, dbeta, beta, NULL);
    HERD_CUDA_LAUNCHED("k_bn_bwd_params");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_bn_bwd_apply(int n, int c, int hw, const float *x,
                                              const float *dy, const float *gamma,
                                              const float *save_mean, const float *save_invstd,
                                              const double *sum_dy, const double *sum_dy_xc,
                                              int64_t count, float *dx)
{
    HERD_TRY(herd_check_bn_bwd_apply(n, c, hw, x, dy, gamma, save_mean, save_invstd, sum_dy,
                                     sum_dy_xc, count, dx));
    HERD_TRY(check_grid("bn_bwd_apply", c));
    bn_scratch sc;
    HERD_TRY(bn_scratch_get(n, c, hw, &sc));
    k_bn_bwd_params<<<PER_CHANNEL(c)>>>(c, sum_dy, sum_dy_xc, (double)count, gamma, save_invstd,
                                        NULL, NULL, 0.0f, sc.coef);
    HERD_CUDA_LAUNCHED("k_bn_bwd_params");
    return bn_dx(n, c, hw, x, dy, save_mean, sc.coef, dx);
}

/* ---- the per-channel steps, for the 16-bit activations' batch norm (cuda_act16.cu) */

extern "C" herd_status herd_cuda_bn_scratch(int c, int splits, double **part, double **tot,
                                            float **coef)
{
    HERD_TRY(check_grid("batch norm", c));
    size_t np = 2 * (size_t)c * splits, nt = 2 * (size_t)c;
    void *p;
    HERD_TRY(herd_cuda_scratch(HERD_CUDA_SCRATCH_BN,
                               (np + nt) * sizeof(double) + 3 * (size_t)c * sizeof(float), &p));
    *part = (double *)p;
    *tot = *part + np;
    *coef = (float *)(*tot + nt);
    return HERD_OK;
}

extern "C" herd_status herd_cuda_bn_totals(int c, int splits, const double *part, double *a,
                                           double *b)
{
    return bn_total(c, splits, part, a, b);
}

extern "C" herd_status herd_cuda_bn_params(int c, const double *sum, const double *sq,
                                           int64_t count, const float *gamma, const float *beta,
                                           float *save_mean, float *save_invstd,
                                           float *running_mean, float *running_var,
                                           float momentum, float eps, float *coef)
{
    k_bn_params<<<PER_CHANNEL(c)>>>(c, sum, sq, (double)count, gamma, beta, save_mean,
                                    save_invstd, running_mean, running_var, momentum, eps, coef);
    HERD_CUDA_LAUNCHED("k_bn_params");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_bn_bwd_params(int c, const double *sdy, const double *sdyxc,
                                               int64_t count, const float *gamma,
                                               const float *save_invstd, float *dgamma,
                                               float *dbeta, float beta, float *coef)
{
    k_bn_bwd_params<<<PER_CHANNEL(c)>>>(c, sdy, sdyxc, (double)count, gamma, save_invstd, dgamma,
                                        dbeta, beta, coef);
    HERD_CUDA_LAUNCHED("k_bn_bwd_params");
    return HERD_OK;
}
