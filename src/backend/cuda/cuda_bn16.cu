/* Batch norm on 16-bit channels-last activations ([rows][c], rows = n x hw) for
 * cuda_act16.cu's table, with cuda_bn.cu's semantics and per-channel steps: sums in
 * double over a fixed split of the rows, added in order (the same bits on every run),
 * parameters and statistics in fp32, each result rounded once to 16 bits. */
#include "backend/cuda/cuda_half.cuh"

#define BN_TARGET_BLOCKS 1024
#define BN8_TARGET_BLOCKS 512

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

/* The same sums eight channels at a time (c a multiple of 8, 16-byte aligned tensors):
 * one 16-byte load per row and thread, so that enough bytes are in flight to run at the
 * memory's speed (the one-value loads above ran at a third of it on an H200). A block is
 * [rl][tg] threads: x walks the tile's groups of 8 channels, y the rows; each thread adds
 * its rows in order into 8 doubles (16 under SUM_BWD), then thread t of the block adds
 * column t's rl lanes in order. Split blockIdx.x takes every gridDim.x-th group of rl rows. */
template <class H, int MODE>
__global__ void __launch_bounds__(256)
    k_bn16_partial8(long long rows, int c, const uint4 *x, const uint4 *dy, const double *sum,
                    const float *mean_f, double count, double *part)
{
    __shared__ double sa[2048], sb[MODE == SUM_BWD ? 2048 : 1];
    int tg = blockDim.x, rl = blockDim.y, groups = c / 8, splits = gridDim.x;
    int g = blockIdx.y * tg + threadIdx.x, width = tg * 8;
    double a[8] = {0, 0, 0, 0, 0, 0, 0, 0}, b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (g < groups) {
        float mean[8];
        for (int j = 0; j < 8; j++)
            mean[j] = MODE == SUM_SQDEV ? (float)(sum[g * 8 + j] / count)
                      : MODE == SUM_BWD ? mean_f[g * 8 + j]
                                        : 0.0f;
#pragma unroll 2
        for (long long r = (long long)blockIdx.x * rl + threadIdx.y; r < rows;
             r += (long long)splits * rl) {
            pack8 v, d;
            v.u = x[r * groups + g];
            if (MODE == SUM_BWD)
                d.u = dy[r * groups + g];
            for (int j = 0; j < 8; j++) {
                float f = H::load(v.h[j]);
                if (MODE == SUM_X) {
                    a[j] += f;
                } else if (MODE == SUM_SQDEV) {
                    float e = f - mean[j];
                    a[j] += e * e;
                } else {
                    float gr = H::load(d.h[j]);
                    a[j] += gr;
                    b[j] += gr * (f - mean[j]);
                }
            }
        }
    }
    int row = threadIdx.y * width + threadIdx.x * 8;
    for (int j = 0; j < 8; j++) {
        sa[row + j] = a[j];
        if (MODE == SUM_BWD)
            sb[row + j] = b[j];
    }
    __syncthreads();
    int t = threadIdx.y * tg + threadIdx.x, ch = blockIdx.y * width + t;
    if (t >= width || ch >= c)
        return;
    double ta = 0.0, tb = 0.0;
    for (int k = 0; k < rl; k++) {
        ta += sa[k * width + t];
        if (MODE == SUM_BWD)
            tb += sb[k * width + t];
    }
    part[(size_t)blockIdx.x * c + ch] = ta;
    if (MODE == SUM_BWD)
        part[((size_t)splits + blockIdx.x) * c + ch] = tb;
}

/* The vectorised kernels' block: tg groups of 8 channels by rl = 256 / tg rows. */
static dim3 block8(int c)
{
    int groups = c / 8, tg = groups < 32 ? groups : 32;
    return dim3(tg, 256 / tg);
}

/* Row splits: about BN_TARGET_BLOCKS blocks over all channel tiles, no more than there
 * are row groups; a function of the shape alone, so the sums' order is fixed. */
static int nhwc_splits(long long rows, int c, bool vec)
{
    long long tiles, groups, target;
    if (vec) { /* fewer, fuller blocks: each thread moves 16 bytes a row */
        dim3 blk = block8(c);
        tiles = (c / 8 + blk.x - 1) / blk.x, groups = (rows + blk.y - 1) / blk.y;
        target = BN8_TARGET_BLOCKS;
    } else {
        tiles = (c + TILE - 1) / TILE, groups = (rows + TILE_ROWS - 1) / TILE_ROWS;
        target = BN_TARGET_BLOCKS;
    }
    long long s = (target + tiles - 1) / tiles;
    s = s < groups ? s : groups;
    return (int)(s < 1 ? 1 : s);
}

typedef struct nhwc_bn {
    long long rows;
    int splits;
    bool vec; /* eight channels a load (k_bn16_partial8) */
    double *part, *tot;
    float *coef;
} nhwc_bn;

static herd_status nhwc_bn_get(int n, int c, int hw, const void *x, const void *dy, nhwc_bn *b)
{
    b->rows = (long long)n * hw;
    b->vec = c % 8 == 0 && aligned16(x) && (!dy || aligned16(dy));
    b->splits = nhwc_splits(b->rows, c, b->vec);
    return herd_cuda_bn_scratch(c, b->splits, &b->part, &b->tot, &b->coef);
}

template <class H, int MODE>
static herd_status nhwc_reduce(const nhwc_bn *b, int c, const uint16_t *x, const uint16_t *dy,
                               const double *sum, const float *mean_f, int64_t count,
                               double *out_a, double *out_b)
{
    if (b->vec) {
        dim3 blk = block8(c);
        dim3 grid(b->splits, (c / 8 + blk.x - 1) / blk.x);
        k_bn16_partial8<H, MODE><<<grid, blk, 0, stream()>>>(
            b->rows, c, (const uint4 *)x, (const uint4 *)dy, sum, mean_f, (double)count, b->part);
        HERD_CUDA_LAUNCHED("k_bn16_partial8");
    } else {
        dim3 grid(b->splits, (c + TILE - 1) / TILE);
        k_bn16_partial<H, MODE><<<grid, dim3(TILE, TILE_ROWS), 0, stream()>>>(
            b->rows, c, x, dy, sum, mean_f, (double)count, b->part);
        HERD_CUDA_LAUNCHED("k_bn16_partial");
    }
    return herd_cuda_bn_totals(c, b->splits, b->part, out_a, out_b);
}

/* y = x * coef[ch] + coef[c + ch] (apply), or dx from coef[3][c] (bwd). */
enum { PC_APPLY, PC_DX };

template <int MODE> struct pc_coef {
    float k0, k1, k2, mean;
};

template <int MODE>
__device__ static pc_coef<MODE> load_coef(int c, int ch, const float *mean, const float *coef)
{
    pc_coef<MODE> k;
    k.k0 = coef[ch], k.k1 = coef[c + ch];
    k.k2 = MODE == PC_DX ? coef[2 * c + ch] : 0.0f;
    k.mean = MODE == PC_DX ? mean[ch] : 0.0f;
    return k;
}

template <class H, int MODE>
__device__ static uint16_t pc_one(const pc_coef<MODE> &k, uint16_t x, uint16_t dy)
{
    float v = H::load(x);
    float r = MODE == PC_APPLY ? v * k.k0 + k.k1
                               : k.k0 * (H::load(dy) - k.k1 - (v - k.mean) * k.k2);
    return H::store(r);
}

/* One value a thread and step: any c, any alignment. I: the index type, 32-bit where the
 * tensor allows (its division is much cheaper). */
template <class H, int MODE, typename I>
__global__ void k_bn16_perchannel(I total, int c, const uint16_t *x, const uint16_t *dy,
                                  const float *mean, const float *coef, uint16_t *y)
{
    I tid = blockIdx.x * (I)blockDim.x + threadIdx.x, step = (I)gridDim.x * blockDim.x;
    for (I u = tid; u < total; u += step) {
        pc_coef<MODE> k = load_coef<MODE>(c, (int)(u % (I)c), mean, coef);
        y[u] = pc_one<H, MODE>(k, x[u], MODE == PC_DX ? dy[u] : 0);
    }
}

/* Eight channels a thread and step (c a multiple of 8, 16-byte aligned tensors). When the
 * grid's stride is a multiple of the c / 8 groups (fixed), a thread meets the same group
 * at every step and keeps its coefficients in registers: the loop is a load, 8 FMAs and
 * a store (reading them each time made the old loop 3x slower than memory on an H200). */
template <class H, int MODE, typename I>
__global__ void k_bn16_perchannel8(I units, int c, bool fixed, const uint4 *x, const uint4 *dy,
                                   const float *mean, const float *coef, uint4 *y)
{
    I tid = blockIdx.x * (I)blockDim.x + threadIdx.x, step = (I)gridDim.x * blockDim.x;
    I groups = (I)(c / 8);
    int g = (int)(tid % groups);
    pc_coef<MODE> k[8];
    for (int j = 0; j < 8; j++)
        k[j] = load_coef<MODE>(c, g * 8 + j, mean, coef);
    for (I u = tid; u < units; u += step) {
        int gu = fixed ? g : (int)(u % groups);
        if (gu != g) {
            g = gu;
            for (int j = 0; j < 8; j++)
                k[j] = load_coef<MODE>(c, g * 8 + j, mean, coef);
        }
        pack8 vx, vd, vy;
        vx.u = x[u];
        if (MODE == PC_DX)
            vd.u = dy[u];
        for (int j = 0; j < 8; j++)
            vy.h[j] = pc_one<H, MODE>(k[j], vx.h[j], MODE == PC_DX ? vd.h[j] : 0);
        y[u] = vy.u;
    }
}

template <class H, int MODE, typename I>
static herd_status launch_perchannel(size_t total, int c, const uint16_t *x, const uint16_t *dy,
                              const float *mean, const float *coef, uint16_t *y)
{
    bool vec = c % 8 == 0 && aligned16(x) && aligned16(y) && (!dy || aligned16(dy));
    if (!vec) {
        k_bn16_perchannel<H, MODE, I><<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, stream()>>>(
            (I)total, c, x, dy, mean, coef, y);
        HERD_CUDA_LAUNCHED("k_bn16_perchannel");
        return HERD_OK;
    }
    size_t units = total / 8;
    bool fixed = HERD_CUDA_THREADS % (c / 8) == 0; /* then any grid's stride is a multiple */
    k_bn16_perchannel8<H, MODE, I><<<herd_cuda_blocks(units), HERD_CUDA_THREADS, 0, stream()>>>(
        (I)units, c, fixed, (const uint4 *)x, (const uint4 *)dy, mean, coef, (uint4 *)y);
    HERD_CUDA_LAUNCHED("k_bn16_perchannel8");
    return HERD_OK;
}

template <class H, int MODE>
static herd_status perchannel(int n, int c, int hw, const uint16_t *x, const uint16_t *dy,
                              const float *mean, const float *coef, uint16_t *y)
{
    size_t total = (size_t)n * c * hw;
    return total <= 0xffffffffu
               ? launch_perchannel<H, MODE, unsigned>(total, c, x, dy, mean, coef, y)
               : launch_perchannel<H, MODE, size_t>(total, c, x, dy, mean, coef, y);
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
    HERD_TRY(nhwc_bn_get(n, c, hw, x, NULL, &b));
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
    HERD_TRY(nhwc_bn_get(n, c, hw, x, NULL, &b));
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
    HERD_TRY(nhwc_bn_get(n, c, hw, x, NULL, &b));
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
    HERD_TRY(nhwc_bn_get(n, c, hw, x, dy, &b));
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
    HERD_TRY(nhwc_bn_get(n, c, hw, x, dy, &b));
    HERD_TRY(herd_cuda_bn_bwd_params(c, sum_dy, sum_dy_xc, count, gamma, save_invstd, NULL, NULL,
                                     0.0f, b.coef));
    return fp16() ? perchannel<as_fp16, PC_DX>(n, c, hw, x, dy, save_mean, b.coef, dx)
                  : perchannel<as_bf16, PC_DX>(n, c, hw, x, dy, save_mean, b.coef, dx);
}

