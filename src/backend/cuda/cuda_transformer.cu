/* The transformer ops of the CUDA backend (backend.h): embeddings, layer norm and GELU;
 * the attention core is cuda_attention.cu. Every sum over rows runs in a fixed order
 * (no atomics on values), so a run repeats its bits; the embeddings' sums add rows in
 * the CPU's order and give its bits, the per-row sums of layer norm add in warp order. */
#include <math.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_kernels.cuh"

#define WARPS_PER_BLOCK 8 /* the per-row kernels: one warp a row */

__device__ static bool is_token(float id, int vocab)
{
    return id >= 0.0f && id < (float)vocab && id == floorf(id);
}

/* ---- embeddings */

/* *bad = the first row whose id is not a token of the vocabulary (stays INT_MAX-ish). */
__global__ void k_embed_check(int rows, int vocab, const float *tokens, int *bad)
{
    GRID_STRIDE(r, (size_t)rows) if (!is_token(tokens[r], vocab)) atomicMin(bad, (int)r);
}

/* As the CPU: y = e + q with absent rows read as 0, so the same bits. */
__global__ void k_embed_fwd(size_t total, int t, int c, int vocab, int first, int count,
                            const float *tokens, const float *wte, const float *wpe, float *y)
{
    GRID_STRIDE(i, total)
    {
        size_t r = i / c;
        int j = (int)(i % c);
        float id = tokens[r];
        int row = is_token(id, vocab) ? (int)id - first : -1;
        float e = row >= 0 && row < count ? wte[(size_t)row * c + j] : 0.0f;
        float q = wpe ? wpe[(size_t)(r % t) * c + j] : 0.0f;
        y[i] = __fadd_rn(e, q);
    }
}

/* dwpe[p][j] = beta dwpe + dy summed over the samples in order (the CPU adds rows in
 * order, and position p's rows come in sample order): one thread per value. */
__global__ void k_embed_bwd_pos(int n, int t, int c, int context, const float *dy, float *dwpe,
                                float beta)
{
    GRID_STRIDE(i, (size_t)context * c)
    {
        int p = (int)(i / c), j = (int)(i % c);
        float v = beta == 0.0f ? 0.0f : __fmul_rn(beta, dwpe[i]);
        if (p < t)
            for (int b = 0; b < n; b++)
                v = __fadd_rn(v, dy[((size_t)b * t + p) * c + j]);
        dwpe[i] = v;
    }
}

__global__ void k_scale(size_t n, float beta, float *x)
{
    GRID_STRIDE(i, n) x[i] = beta == 0.0f ? 0.0f : __fmul_rn(beta, x[i]);
}

/* The rows added at their tokens in row order, the CPU's order, so a token seen twice
 * sums the same way: a thread owns one column of the tokens whose table row falls in its
 * bucket (row % TOKEN_BUCKETS), walks every row and adds those. No two threads touch one
 * value, and a warp's 32 columns of one row are one coalesced access. */
#define TOKEN_BUCKETS 64
__global__ void k_embed_bwd_tok(int rows, int c, int first, int count, const float *tokens,
                                const float *dy, float *dwte)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x, bucket = blockIdx.y;
    if (j >= c)
        return;
    for (int r = 0; r < rows; r++) {
        int row = (int)tokens[r] - first;
        if (row >= 0 && row < count && row % TOKEN_BUCKETS == bucket) {
            float *e = dwte + (size_t)row * c + j;
            *e = __fadd_rn(*e, dy[(size_t)r * c + j]);
        }
    }
}

/* ---- layer norm: one warp per row, sums in double as the CPU's */

__global__ void k_ln_fwd(int rows, int c, const float *x, const float *gamma, const float *bias,
                         float eps, float *y, float *mean, float *rstd)
{
    int lane = threadIdx.x & 31, r = blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    if (r >= rows)
        return;
    const float *xr = x + (size_t)r * c;
    double s = 0.0, sq = 0.0;
    for (int j = lane; j < c; j += 32)
        s += xr[j];
    double mu = warp_sum(s) / c;
    for (int j = lane; j < c; j += 32)
        sq += (xr[j] - mu) * (xr[j] - mu);
    float rs = (float)(1.0 / sqrt(warp_sum(sq) / c + eps)), muf = (float)mu;
    float *yr = y + (size_t)r * c;
    for (int j = lane; j < c; j += 32)
        yr[j] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(xr[j], muf), rs), gamma[j]), bias[j]);
    if (lane == 0) {
        mean[r] = muf;
        rstd[r] = rs;
    }
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma. */
__global__ void k_ln_bwd_dx(int rows, int c, const float *x, const float *dy, const float *gamma,
                            const float *mean, const float *rstd, float *dx)
{
    int lane = threadIdx.x & 31, r = blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    if (r >= rows)
        return;
    const float *xr = x + (size_t)r * c, *dr = dy + (size_t)r * c;
    float mu = mean[r], rs = rstd[r];
    double sg = 0.0, sgx = 0.0;
    for (int j = lane; j < c; j += 32) {
        double g = (double)dr[j] * gamma[j];
        float xh = __fmul_rn(__fsub_rn(xr[j], mu), rs);
        sg += g;
        sgx += g * xh;
    }
    float mg = (float)(warp_sum(sg) / c), mgx = (float)(warp_sum(sgx) / c);
    float *o = dx + (size_t)r * c;
    for (int j = lane; j < c; j += 32) {
        float xh = __fmul_rn(__fsub_rn(xr[j], mu), rs);
        o[j] = __fmul_rn(rs, __fsub_rn(__fsub_rn(__fmul_rn(dr[j], gamma[j]), mg), __fmul_rn(xh, mgx)));
    }
}

/* dgamma, dbias: column sums over the rows in double; a block of 32 x 8 threads per 32
 * columns and slice of rows (cuda.h's herd_cuda_colsum_slices), each of the 8 taking
 * every 8th row, then the 8 added in order into part [2][slice][c]. */
__global__ void k_ln_bwd_params(int rows, int c, int per_slice, const float *x, const float *dy,
                                const float *mean, const float *rstd, double *part)
{
    __shared__ double part_g[8][33], part_b[8][33];
    int j = blockIdx.x * 32 + threadIdx.x, lo = blockIdx.y * per_slice;
    int hi = lo + per_slice < rows ? lo + per_slice : rows;
    double sg = 0.0, sb = 0.0;
    if (j < c)
        for (int r = lo + threadIdx.y; r < hi; r += 8) {
            float d = dy[(size_t)r * c + j];
            sg += (double)d * __fmul_rn(__fsub_rn(x[(size_t)r * c + j], mean[r]), rstd[r]);
            sb += d;
        }
    part_g[threadIdx.y][threadIdx.x] = sg;
    part_b[threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y != 0 || j >= c)
        return;
    for (int k = 1; k < 8; k++) {
        sg += part_g[k][threadIdx.x];
        sb += part_b[k][threadIdx.x];
    }
    size_t slices = gridDim.y;
    part[(size_t)blockIdx.y * c + j] = sg;
    part[(slices + blockIdx.y) * c + j] = sb;
}

/* The slices' sums added in slice order; dgamma = that + beta dgamma, as the CPU. */
__global__ void k_ln_bwd_total(int c, int slices, const double *part, float *dgamma,
                               float *dbias, float beta)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= c)
        return;
    double sg = 0.0, sb = 0.0;
    for (int k = 0; k < slices; k++) {
        sg += part[(size_t)k * c + j];
        sb += part[(size_t)(slices + k) * c + j];
    }
    dgamma[j] = __fadd_rn((float)sg, beta == 0.0f ? 0.0f : __fmul_rn(beta, dgamma[j]));
    dbias[j] = __fadd_rn((float)sb, beta == 0.0f ? 0.0f : __fmul_rn(beta, dbias[j]));
}

/* ---- GELU (tanh form): 0.5 (1 + tanh u) as the sigmoid of 2u, as the CPU computes it */

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_A 0.044715f

/* e^-2u with the argument clamped as the CPU's exp clamps it: far left of 0 e^-2u would
 * be inf, and the backward's e s = inf x 0 a NaN. */
__device__ static float gelu_exp(float u) { return expf(fminf(fmaxf(-2.0f * u, -87.0f), 88.0f)); }

__global__ void k_gelu_fwd(size_t n, const float *x, float *y)
{
    GRID_STRIDE(i, n)
    {
        float v = x[i], u = GELU_K * (v + GELU_A * v * v * v);
        y[i] = v / (1.0f + gelu_exp(u));
    }
}

__global__ void k_gelu_bwd(size_t n, const float *x, const float *dy, float *dx)
{
    GRID_STRIDE(i, n)
    {
        float v = x[i], u = GELU_K * (v + GELU_A * v * v * v);
        float e = gelu_exp(u), s = 1.0f / (1.0f + e);
        float dinner = GELU_K * (1.0f + 3.0f * GELU_A * v * v);
        dx[i] = dy[i] * (s + 2.0f * v * s * (e * s) * dinner);
    }
}

/* ---- launchers */

/* The first bad token's row, or -1: one 4-byte copy back, waited for (the forward's
 * first kernel, so little is queued before it). In a graph's capture the verdict stays
 * in a device word the graph's launch reads (cuda_graph.c). */
static herd_status first_bad_token(int rows, int t, int vocab, const float *tokens, int *bad_row)
{
    *bad_row = -1;
    int *flag;
    bool capturing = herd_cuda_capturing();
    if (capturing)
        HERD_TRY(herd_cuda_graph_defer_check(tokens, rows, t, vocab, &flag));
    else {
        void *p;
        HERD_TRY(herd_cuda_scratch(HERD_CUDA_SCRATCH_FLAG, sizeof(int), &p));
        flag = (int *)p;
    }
    cudaStream_t st = stream();
    HERD_CUDA(cudaMemsetAsync(flag, 0x7f, sizeof(int), st), "clearing the token check");
    k_embed_check<<<herd_cuda_blocks((size_t)rows), HERD_CUDA_THREADS, 0, st>>>(rows, vocab,
                                                                               tokens, flag);
    HERD_CUDA_LAUNCHED("k_embed_check");
    if (capturing)
        return HERD_OK;
    void *host;
    HERD_TRY(herd_cuda_host_scratch(sizeof(int), &host));
    HERD_CUDA(cudaMemcpyAsync(host, flag, sizeof(int), cudaMemcpyDeviceToHost, st),
              "token check copy");
    HERD_CUDA(cudaStreamSynchronize(st), "embedding_fwd's token check");
    int r = *(const int *)host;
    *bad_row = r < rows ? r : -1;
    return HERD_OK;
}

extern "C" herd_status herd_cuda_token_error(const float *tokens, int bad, int t, int vocab)
{
    float id;
    HERD_CUDA(cudaMemcpy(&id, tokens + bad, sizeof id, cudaMemcpyDeviceToHost),
              "reading the bad token");
    return HERD_ERR(HERD_ERR_INVALID_ARG,
                    "token %g at sample %d, position %d is not a token id of a vocabulary "
                    "of %d (whole numbers 0..%d)",
                    (double)id, bad / t, bad % t, vocab, vocab - 1);
}

extern "C" herd_status herd_cuda_embedding_fwd(int n, int t, int c, int vocab, int first,
                                               int count, const float *tokens, const float *wte,
                                               const float *wpe, float *y)
{
    size_t total = (size_t)n * t * c;
    HERD_CHECK_ARRAYS("embedding_fwd", total, tokens, wte, y);
    if (total == 0)
        return HERD_OK;
    int bad = -1;
    HERD_TRY(first_bad_token(n * t, t, vocab, tokens, &bad));
    if (bad >= 0)
        return herd_cuda_token_error(tokens, bad, t, vocab);
    k_embed_fwd<<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, stream()>>>(
        total, t, c, vocab, first, count, tokens, wte, wpe, y);
    HERD_CUDA_LAUNCHED("k_embed_fwd");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_embedding_bwd(int n, int t, int c, int first, int count,
                                               int context, const float *tokens, const float *dy,
                                               float *dwte, float beta_wte, float *dwpe,
                                               float beta)
{
    HERD_CHECK_ARRAYS("embedding_bwd", (size_t)n * t * c, tokens, dy, dwte, dwpe);
    cudaStream_t st = stream();
    size_t table = (size_t)count * c, pos = (size_t)context * c;
    if (table) {
        k_scale<<<herd_cuda_blocks(table), HERD_CUDA_THREADS, 0, st>>>(table, beta_wte, dwte);
        HERD_CUDA_LAUNCHED("k_scale");
    }
    if (pos) {
        k_embed_bwd_pos<<<herd_cuda_blocks(pos), HERD_CUDA_THREADS, 0, st>>>(n, t, c, context, dy,
                                                                             dwpe, beta);
        HERD_CUDA_LAUNCHED("k_embed_bwd_pos");
    }
    if (table && n * t > 0) {
        dim3 grid((unsigned)(c + 127) / 128, TOKEN_BUCKETS);
        k_embed_bwd_tok<<<grid, 128, 0, st>>>(n * t, c, first, count, tokens, dy, dwte);
        HERD_CUDA_LAUNCHED("k_embed_bwd_tok");
    }
    return HERD_OK;
}

extern "C" herd_status herd_cuda_layernorm_fwd(int rows, int c, const float *x,
                                               const float *gamma, const float *bias, float eps,
                                               float *y, float *mean, float *rstd)
{
    HERD_CHECK_ARRAYS("layernorm_fwd", (size_t)rows * c, x, gamma, bias, y, mean, rstd);
    if ((size_t)rows * c == 0)
        return HERD_OK;
    unsigned blocks = (unsigned)((rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
    k_ln_fwd<<<blocks, 32 * WARPS_PER_BLOCK, 0, stream()>>>(rows, c, x, gamma, bias, eps, y, mean,
                                                           rstd);
    HERD_CUDA_LAUNCHED("k_ln_fwd");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_layernorm_bwd(int rows, int c, const float *x, const float *dy,
                                               const float *gamma, const float *mean,
                                               const float *rstd, float *dx, float *dgamma,
                                               float *dbias, float beta)
{
    HERD_CHECK_ARRAYS("layernorm_bwd", (size_t)rows * c, x, dy, gamma, mean, rstd, dgamma, dbias);
    if (c <= 0)
        return HERD_OK;
    cudaStream_t st = stream();
    if (dx && rows > 0) {
        unsigned blocks = (unsigned)((rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
        k_ln_bwd_dx<<<blocks, 32 * WARPS_PER_BLOCK, 0, st>>>(rows, c, x, dy, gamma, mean, rstd, dx);
        HERD_CUDA_LAUNCHED("k_ln_bwd_dx");
    }
    int slices = herd_cuda_colsum_slices(rows), per = (rows + slices - 1) / slices;
    void *p;
    HERD_TRY(herd_cuda_scratch(HERD_CUDA_SCRATCH_COLSUM, 2 * (size_t)slices * c * sizeof(double), &p));
    dim3 grid((unsigned)(c + 31) / 32, (unsigned)slices);
    k_ln_bwd_params<<<grid, dim3(32, 8), 0, st>>>(rows, c, per, x, dy, mean, rstd, (double *)p);
    HERD_CUDA_LAUNCHED("k_ln_bwd_params");
    k_ln_bwd_total<<<(c + 255) / 256, 256, 0, st>>>(c, slices, (const double *)p, dgamma, dbias,
                                                    beta);
    HERD_CUDA_LAUNCHED("k_ln_bwd_total");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_gelu_fwd(size_t n, const float *x, float *y)
{
    HERD_CHECK_ARRAYS("gelu_fwd", n, x, y);
    if (n == 0)
        return HERD_OK;
    k_gelu_fwd<<<herd_cuda_blocks(n), HERD_CUDA_THREADS, 0, stream()>>>(n, x, y);
    HERD_CUDA_LAUNCHED("k_gelu_fwd");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_gelu_bwd(size_t n, const float *x, const float *dy, float *dx)
{
    HERD_CHECK_ARRAYS("gelu_bwd", n, x, dy, dx);
    if (n == 0)
        return HERD_OK;
    k_gelu_bwd<<<herd_cuda_blocks(n), HERD_CUDA_THREADS, 0, stream()>>>(n, x, dy, dx);
    HERD_CUDA_LAUNCHED("k_gelu_bwd");
    return HERD_OK;
}
