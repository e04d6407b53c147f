/* Batch norm on 16-bit channels-last activations ([rows][c], rows = n x hw) for
 * cuda_act16.cu's table, with cuda_bn.cu's semantics and per-channel steps: sums in
 * double over a fixed split of the rows, added in order (the same bits on every run),
 * parameters and statistics in fp32, each result rounded once to 16 bits. */
#include "backend/cuda/cuda_half.cuh"

enum { SUM_X, SUM_SQDEV, SUM_BWD };
#define BN_TARGET_BLOCKS 1024

/* Partial sums of 32 channels (blockIdx.y) over every gridDim.x-th group of TILE_ROWS rows;
 * each thread adds its rows in double, the block adds its TILE_ROWS lanes in order.
 * Modes as cuda_bn.cu's k_bn_partial; part holds [2][splits][c]. */
template <class H, int MODE>
__global__ void k_bn16_partial(long long rows, int c, const uint16_t *x, const uint16_t *dy,
                               const double *sum, const float *mean_f, double count, double *part)
{
    __shared__ double sa[TILE_ROWS][TILE], sb[TILE_ROWS][TILE];
    int ch = blockIdx.y * TILE + threadIdx.x, splits = gridDim.x;
    double a = 0.0, b = 0.0;
    if (ch < c) {
        float mean = MODE == SUM_SQDEV ? (float)(sum[ch] / count) : MODE == SUM_BWD ? mean_f[ch] : 0.0f;
        for (long long r = (long long)blockIdx.x * TILE_ROWS + threadIdx.y; r < rows;
             r += (long long)splits * TILE_ROWS) {
            float v = H::load(x[r * c + ch]);
            if (MODE == SUM_X) {
                a += v;
            } else if (MODE == SUM_SQDEV) {
                float d = v - mean;
                a += d * d;
            } else {
                float g = H::load(dy[r * c + ch]);
                a += g;
                b += g * (v - mean);
            }
        }
    }
    sa[threadIdx.y][threadIdx.x] = a;
    sb[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && ch < c) {
        for (int j = 1; j < TILE_ROWS; j++) {
            a += sa[j][threadIdx.x];
            b += sb[j][threadIdx.x];
        }
        part[(size_t)blockIdx.x * c + ch] = a;
        if (MODE == SUM_BWD)
            part[((size_t)splits + blockIdx.x) * c + ch] = b;
    }
}

/* Row splits: about BN_TARGET_BLOCKS blocks over all channel tiles, no more than there
 * are row groups; a function of the shape alone, so the sums' order is fixed. */
static int nhwc_splits(long long rows, int c)
{
    long long tiles = (c + TILE - 1) / TILE, groups = (rows + TILE_ROWS - 1) / TILE_ROWS;
    long long s = (BN_TARGET_BLOCKS + tiles - 1) / tiles;
    s = s < groups ? s : groups;
    return (int)(s < 1 ? 1 : s);
}

typedef struct nhwc_bn {
    long long rows;
    int splits;
    double *part, *tot;
    float *coef;
} nhwc_bn;

static herd_status nhwc_bn_get(int n, int c, int hw, nhwc_bn *b)
{
    b->rows = (long long)n * hw;
    b->splits = nhwc_splits(b->rows, c);
    return herd_cuda_bn_scratch(c, b->splits, &b->part, &b->tot, &b->coef);
}

template <class H, int MODE>
static herd_status nhwc_reduce(const nhwc_bn *b, int c, const uint16_t *x, const uint16_t *dy,
                               const double *sum, const float *mean_f, int64_t count,
                               double *out_a, double *out_b)
{
    dim3 grid(b->splits, (c + TILE - 1) / TILE);
    k_bn16_partial<H, MODE><<<grid, dim3(TILE, TILE_ROWS), 0, stream()>>>(
        b->rows, c, x, dy, sum, mean_f, (double)count, b->part);
    HERD_CUDA_LAUNCHED("k_bn16_partial");
    return herd_cuda_bn_totals(c, b->splits, b->part, out_a, out_b);
}

/* y = x * coef[ch] + coef[c + ch] (apply), or dx from coef[3][c] (bwd). */
enum { PC_APPLY, PC_DX };

/* I: the index type, 32-bit where the tensor allows (its division is much cheaper). */
template <class H, int MODE, typename I>
__global__ void k_bn16_perchannel(I total, int c, bool vec, const uint16_t *x, const uint16_t *dy,
                                  const float *mean, const float *coef, uint16_t *y)
{
    I tid = blockIdx.x * (I)blockDim.x + threadIdx.x, step = (I)gridDim.x * blockDim.x;
    I per = vec ? 8 : 1, units = vec ? total / 8 : total;
    for (I u = tid; u < units; u += step) {
        pack8 vx, vd, vy;
        if (vec) {
            vx.u = ((const uint4 *)x)[u];
            if (MODE == PC_DX)
                vd.u = ((const uint4 *)dy)[u];
        } else {
            vx.h[0] = x[u];
            if (MODE == PC_DX)
                vd.h[0] = dy[u];
        }
        int ch0 = (int)(u * per % (I)c);
        for (int j = 0; j < (int)per; j++) {
            int ch = ch0 + j; /* c is a multiple of 8 when vec: no wrap inside a pack */
            float v = H::load(vx.h[j]), r;
            if (MODE == PC_APPLY)
                r = v * coef[ch] + coef[c + ch];
            else
                r = coef[ch] * (H::load(vd.h[j]) - coef[c + ch] - (v - mean[ch]) * coef[2 * c + ch]);
            vy.h[j] = H::store(r);
        }
        if (vec)
            ((uint4 *)y)[u] = vy.u;
        else
            y[u] = vy.h[0];
    }
}

template <class H, int MODE>
static herd_status perchannel(int n, int c, int hw, const uint16_t *x, const uint16_t *dy,
                              const float *mean, const float *coef, uint16_t *y)
{
    size_t total = (size_t)n * c * hw;
    bool vec = c % 8 == 0 && aligned16(x) && aligned16(y) && (!dy || aligned16(dy));
    unsigned blocks = herd_cuda_blocks(vec ? total / 8 : total);
    if (total <= 0xffffffffu)
        k_bn16_perchannel<H, MODE, unsigned><<<blocks, HERD_CUDA_THREADS, 0, stream()>>>(
            (unsigned)total, c, vec, x, dy, mean, coef, y);
    else
        k_bn16_perchannel<H, MODE, size_t><<<blocks, HERD_CUDA_THREADS, 0, stream()>>>(
            total, c, vec, x, dy, mean, coef, y);
    HERD_CUDA_LAUNCHED("k_bn16_perchannel");
    return HERD_OK;
}

__global__ void k_bn16_infer_coef(int c, const float *gamma, const float *beta, const float *rmean,
                             const float *rvar, float eps, float *coef)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    float scale = gamma[ch] / sqrtf(rvar[ch] + eps);
    coef[ch] = scale;
    coef[c + ch] = beta[ch] - rmean[ch] * scale;
}

template <class H>
static herd_status bn_stats_t(int n, int c, int hw, const uint16_t *x, const double *sum,
                              int64_t count, double *out)
{
    nhwc_bn b;
    HERD_TRY(nhwc_bn_get(n, c, hw, &b));
    if (sum)
        return nhwc_reduce<H, SUM_SQDEV>(&b, c, x, NULL, sum, NULL, count, out, NULL);
    return nhwc_reduce<H, SUM_X>(&b, c, x, NULL, NULL, NULL, count, out, NULL);
}

herd_status herd_cuda_bn16_stats(int n, int c, int hw, const uint16_t *x, const double *sum,
                                int64_t count, double *out)
{
    HERD_TRY(herd_check_bn_stats(n, c, hw, (const float *)x, sum, count, out));
    return BY_FORMAT(bn_stats_t, n, c, hw, x, sum, count, out);
}

herd_status herd_cuda_bn16_apply_train(int n, int c, int hw, const uint16_t *x, const float *gamma,
                                      const float *beta, const double *sum, const double *sqdev,
                                      int64_t count, uint16_t *y, float *save_mean,
                                      float *save_invstd, float *running_mean, float *running_var,
                                      float momentum, float eps)
{
    HERD_TRY(herd_check_bn_apply_train(n, c, hw, (const float *)x, gamma, beta, sum, sqdev, count,
                                       (const float *)y, save_mean, save_invstd, running_mean,
                                       running_var));
    nhwc_bn b;
    HERD_TRY(nhwc_bn_get(n, c, hw, &b));
    HERD_TRY(herd_cuda_bn_params(c, sum, sqdev, count, gamma, beta, save_mean, save_invstd,
                                 running_mean, running_var, momentum, eps, b.coef));
    return fp16() ? perchannel<as_fp16, PC_APPLY>(n, c, hw, x, NULL, NULL, b.coef, y)
                  : perchannel<as_bf16, PC_APPLY>(n, c, hw, x, NULL, NULL, b.coef, y);
}

herd_status herd_cuda_bn16_fwd_infer(int n, int c, int hw, const uint16_t *x, const float *gamma,
                                    const float *beta, uint16_t *y, const float *running_mean,
                                    const float *running_var, float eps)
{
    HERD_TRY(herd_check_bn_fwd_infer(n, c, hw, (const float *)x, gamma, beta, (const float *)y,
                                     running_mean, running_var));
    nhwc_bn b;
    HERD_TRY(nhwc_bn_get(n, c, hw, &b));
    k_bn16_infer_coef<<<(c + 127) / 128, 128, 0, stream()>>>(c, gamma, beta, running_mean, running_var,
                                                        eps, b.coef);
    HERD_CUDA_LAUNCHED("k_bn16_infer_coef");
    return fp16() ? perchannel<as_fp16, PC_APPLY>(n, c, hw, x, NULL, NULL, b.coef, y)
                  : perchannel<as_bf16, PC_APPLY>(n, c, hw, x, NULL, NULL, b.coef, y);
}

template <class H>
static herd_status bwd_reduce_t(const nhwc_bn *b, int c, const uint16_t *x, const uint16_t *dy,
                                const float *save_mean, int64_t count, double *sdy, double *sdyxc)
{
    return nhwc_reduce<H, SUM_BWD>(b, c, x, dy, NULL, save_mean, count, sdy, sdyxc);
}

herd_status herd_cuda_bn16_bwd_reduce(int n, int c, int hw, const uint16_t *x, const uint16_t *dy,
                                     const float *save_mean, const float *save_invstd,
                                     double *sum_dy, double *sum_dy_xc, float *dgamma,
                                     float *dbeta, float beta)
{
    HERD_TRY(herd_check_bn_bwd_reduce(n, c, hw, (const float *)x, (const float *)dy, save_mean,
                                      save_invstd, sum_dy, sum_dy_xc, dgamma, dbeta, beta));
    nhwc_bn b;
    HERD_TRY(nhwc_bn_get(n, c, hw, &b));
    int64_t count = (int64_t)n * hw;
    HERD_TRY(BY_FORMAT(bwd_reduce_t, &b, c, x, dy, save_mean, count, sum_dy, sum_dy_xc));
    return herd_cuda_bn_bwd_params(c, sum_dy, sum_dy_xc, count, NULL, save_invstd, dgamma, dbeta,
                                   beta, NULL);
}

herd_status herd_cuda_bn16_bwd_apply(int n, int c, int hw, const uint16_t *x, const uint16_t *dy,
                                    const float *gamma, const float *save_mean,
                                    const float *save_invstd, const double *sum_dy,
                                    const double *sum_dy_xc, int64_t count, uint16_t *dx)
{
    HERD_TRY(herd_check_bn_bwd_apply(n, c, hw, (const float *)x, (const float *)dy, gamma,
                                     save_mean, save_invstd, sum_dy, sum_dy_xc, count,
                                     (const float *)dx));
    nhwc_bn b;
    HERD_TRY(nhwc_bn_get(n, c, hw, &b));
    HERD_TRY(herd_cuda_bn_bwd_params(c, sum_dy, sum_dy_xc, count, gamma, save_invstd, NULL, NULL,
                                     0.0f, b.coef));
    return fp16() ? perchannel<as_fp16, PC_DX>(n, c, hw, x, dy, save_mean, b.coef, dx)
                  : perchannel<as_bf16, PC_DX>(n, c, hw, x, dy, save_mean, b.coef, dx);
}

