/* Max / average pooling and global average pooling as own kernels.
 *
 * Not cuDNN: cudnnPoolingBackward needs the forward's input and output, but the
 * table's pool_bwd gets only dy. Max pooling keeps the argmax of the last training
 * forward in the plan instead (as the CPU backend keeps oneDNN's workspace), and both
 * backward passes gather per input pixel, so they need no atomics and are
 * deterministic. */
#include <float.h>
#include <stdlib.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_kernels.cuh"

struct herd_pool_plan {
    herd_pool_desc d;
    int *argmax;         /* per output element: input offset within its (n, c) plane */
    bool have_workspace; /* a training forward ran since the plan was made */
};

/* ---- kernels */

__global__ void k_pool_fwd(herd_pool_desc d, const float *x, float *y, int *argmax)
{
    size_t total = (size_t)d.n * d.c * d.h_out * d.w_out;
    GRID_STRIDE(i, total)
    {
        int ow = (int)(i % d.w_out), oh = (int)(i / d.w_out % d.h_out);
        size_t nc = i / ((size_t)d.w_out * d.h_out);
        const float *xp = x + nc * d.h_in * d.w_in;
        int h0 = oh * d.stride - d.pad, w0 = ow * d.stride - d.pad;
        float best = -FLT_MAX, sum = 0.0f;
        int arg = -1;
        for (int kh = 0; kh < d.k; kh++) {
            int h = h0 + kh;
            if (h < 0 || h >= d.h_in)
                continue;
            for (int kw = 0; kw < d.k; kw++) {
                int w = w0 + kw;
                if (w < 0 || w >= d.w_in)
                    continue;
                float v = xp[h * d.w_in + w];
                sum += v;
                if (arg < 0 || v > best) { /* first maximum wins, as on the CPU */
                    best = v;
                    arg = h * d.w_in + w;
                }
            }
        }
        if (d.is_max) {
            y[i] = best;
            if (argmax)
                argmax[i] = arg;
        } else {
            y[i] = sum / (float)(d.k * d.k); /* padding counts as zero */
        }
    }
}

/* dx at one input pixel: the sum over the output windows that cover it. */
__global__ void k_pool_bwd(herd_pool_desc d, const float *dy, float *dx, const int *argmax)
{
    size_t total = (size_t)d.n * d.c * d.h_in * d.w_in;
    GRID_STRIDE(i, total)
    {
        int w = (int)(i % d.w_in), h = (int)(i / d.w_in % d.h_in);
        size_t nc = i / ((size_t)d.w_in * d.h_in);
        size_t obase = nc * d.h_out * d.w_out;
        int self = h * d.w_in + w;
        /* Outputs oh with oh*stride - pad <= h < oh*stride - pad + k. */
        int hp = h + d.pad, wp = w + d.pad;
        int oh_lo = hp >= d.k ? (hp - d.k) / d.stride + 1 : 0;
        int oh_hi = min(hp / d.stride, d.h_out - 1);
        int ow_lo = wp >= d.k ? (wp - d.k) / d.stride + 1 : 0;
        int ow_hi = min(wp / d.stride, d.w_out - 1);
        float g = 0.0f;
        for (int oh = oh_lo; oh <= oh_hi; oh++)
            for (int ow = ow_lo; ow <= ow_hi; ow++) {
                size_t o = obase + (size_t)oh * d.w_out + ow;
                if (!d.is_max)
                    g += dy[o];
                else if (argmax[o] == self)
                    g += dy[o];
            }
        dx[i] = d.is_max ? g : g / (float)(d.k * d.k);
    }
}

/* One warp per (n, c) row; warps stride over the rows. */
__global__ void k_gap_fwd(size_t rows, int hw, const float *x, float *y)
{
    int lane = threadIdx.x & 31;
    size_t warps = (size_t)gridDim.x * blockDim.x / 32;
    for (size_t row = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32; row < rows;
         row += warps) {
        const float *xr = x + row * hw;
        double s = 0.0;
        for (int i = lane; i < hw; i += 32)
            s += xr[i];
        s = warp_sum(s);
        if (lane == 0)
            y[row] = (float)(s * (1.0f / (float)hw));
    }
}

__global__ void k_gap_bwd(size_t total, int hw, const float *dy, float *dx)
{
    float inv = 1.0f / (float)hw;
    GRID_STRIDE(i, total) dx[i] = dy[i / hw] * inv;
}

/* ---- launchers */

extern "C" void herd_cuda_pool_plan_free(herd_pool_plan *p)
{
    if (!p)
        return;
    herd_cuda_free(p->argmax);
    free(p);
}

extern "C" herd_status herd_cuda_pool_plan(const herd_pool_desc *d, herd_pool_plan **plan)
{
    herd_pool_desc fin;
    HERD_TRY(herd_check_pool_plan(d, plan, &fin));
    herd_pool_plan *p = (herd_pool_plan *)calloc(1, sizeof *p);
    if (!p)
        return HERD_NOMEM(sizeof *p);
    p->d = fin;
    if (fin.is_max) {
        size_t bytes = (size_t)fin.n * fin.c * fin.h_out * fin.w_out * sizeof(int);
        if (!(p->argmax = (int *)herd_cuda_alloc(bytes))) {
            free(p);
            return HERD_ERR_NOMEM;
        }
    }
    *plan = p;
    return HERD_OK;
}

extern "C" herd_status herd_cuda_pool_fwd(herd_pool_plan *p, const float *x, float *y,
                                          bool training)
{
    HERD_TRY(herd_check_pool_fwd(p, x, y));
    const herd_pool_desc *d = &p->d;
    size_t total = (size_t)d->n * d->c * d->h_out * d->w_out;
    /* Evaluation does not touch the argmax, but backward still wants a fresh one. */
    k_pool_fwd<<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, herd_cuda_ctx_get()->stream>>>(
        *d, x, y, training ? p->argmax : NULL);
    HERD_CUDA_LAUNCHED("k_pool_fwd");
    p->have_workspace = training;
    return HERD_OK;
}

extern "C" herd_status herd_cuda_pool_bwd(herd_pool_plan *p, const float *dy, float *dx)
{
    HERD_TRY(herd_check_pool_bwd(p, dy, dx, p && p->have_workspace));
    const herd_pool_desc *d = &p->d;
    size_t total = (size_t)d->n * d->c * d->h_in * d->w_in;
    k_pool_bwd<<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, herd_cuda_ctx_get()->stream>>>(
        *d, dy, dx, p->argmax);
    HERD_CUDA_LAUNCHED("k_pool_bwd");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_global_avgpool_fwd(int n, int c, int hw, const float *x,
                                                    float *y)
{
    HERD_TRY(herd_check_global_avgpool("global_avgpool_fwd", n, c, hw, x, y));
    size_t rows = (size_t)n * c;
    k_gap_fwd<<<herd_cuda_blocks(rows * 32), HERD_CUDA_THREADS, 0, herd_cuda_ctx_get()->stream>>>(
        rows, hw, x, y);
    HERD_CUDA_LAUNCHED("k_gap_fwd");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_global_avgpool_bwd(int n, int c, int hw, const float *dy,
                                                    float *dx)
{
    HERD_TRY(herd_check_global_avgpool("global_avgpool_bwd", n, c, hw, dy, dx));
    size_t total = (size_t)n * c * hw;
    k_gap_bwd<<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, herd_cuda_ctx_get()->stream>>>(
        total, hw, dy, dx);
    HERD_CUDA_LAUNCHED("k_gap_bwd");
    return HERD_OK;
}
