/* Max / average pooling through oneDNN (plain NCHW; the max workspace of the last
 * training forward lives in the plan for the backward pass), and global average
 * pooling as plain loops. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_dnnl.h"
#include "backend/cpu/cpu_ops.h"

struct herd_pool_plan {
    herd_pool_desc d;
    dnnl_primitive_desc_t fwd_pd, bwd_pd;
    dnnl_primitive_t fwd, bwd;
    dnnl_memory_t src, dst, diff_src, diff_dst, workspace, scratch_mem;
    void *workspace_buf, *scratch;
    bool have_workspace; /* a training forward ran since the plan was made */
};

void herd_cpu_pool_plan_free(herd_pool_plan *p)
{
    if (!p)
        return;
    dnnl_memory_t mems[] = {p->src, p->dst, p->diff_src, p->diff_dst, p->workspace,
                            p->scratch_mem};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i])
            dnnl_memory_destroy(mems[i]);
    if (p->fwd)
        dnnl_primitive_destroy(p->fwd);
    if (p->bwd)
        dnnl_primitive_destroy(p->bwd);
    if (p->fwd_pd)
        dnnl_primitive_desc_destroy(p->fwd_pd);
    if (p->bwd_pd)
        dnnl_primitive_desc_destroy(p->bwd_pd);
    herd_cpu_free(p->workspace_buf);
    herd_cpu_free(p->scratch);
    free(p);
}

static herd_status build(herd_pool_plan *p)
{
    const herd_pool_desc *d = &p->d;
    dnnl_dims_t src_dims = {d->n, d->c, d->h_in, d->w_in};
    dnnl_dims_t dst_dims = {d->n, d->c, d->h_out, d->w_out};
    dnnl_dims_t strides = {d->stride, d->stride}, kernel = {d->k, d->k};
    dnnl_dims_t pad_l = {d->pad, d->pad};
    dnnl_dims_t pad_r = {(dnnl_dim_t)(d->h_out - 1) * d->stride + d->k - d->h_in - d->pad,
                          (dnnl_dim_t)(d->w_out - 1) * d->stride + d->k - d->w_in - d->pad};
    dnnl_memory_desc_t src_md, dst_md;
    HERD_TRY(herd_dnnl_plain_md(&src_md, 4, src_dims, false));
    HERD_TRY(herd_dnnl_plain_md(&dst_md, 4, dst_dims, false));
    dnnl_alg_kind_t alg = d->is_max ? dnnl_pooling_max : dnnl_pooling_avg_include_padding;
    dnnl_pooling_desc_t pd;
    HERD_DNNL(dnnl_pooling_forward_desc_init(&pd, dnnl_forward_training, alg, &src_md, &dst_md,
                                             strides, kernel, pad_l, pad_r),
              "pooling forward descriptor");
    HERD_TRY(herd_dnnl_create(&pd, NULL, &p->fwd_pd, &p->fwd, "pooling forward"));
    HERD_DNNL(dnnl_pooling_backward_desc_init(&pd, alg, &src_md, &dst_md, strides, kernel, pad_l,
                                              pad_r),
              "pooling backward descriptor");
    HERD_TRY(herd_dnnl_create(&pd, p->fwd_pd, &p->bwd_pd, &p->bwd, "pooling backward"));

    dnnl_engine_t eng;
    dnnl_stream_t stream;
    HERD_TRY(herd_dnnl_get(&eng, &stream));
    HERD_DNNL(dnnl_memory_create(&p->src, &src_md, eng, DNNL_MEMORY_NONE), "pooling src");
    HERD_DNNL(dnnl_memory_create(&p->dst, &dst_md, eng, DNNL_MEMORY_NONE), "pooling dst");
    HERD_DNNL(dnnl_memory_create(&p->diff_src, &src_md, eng, DNNL_MEMORY_NONE), "pooling diff_src");
    HERD_DNNL(dnnl_memory_create(&p->diff_dst, &dst_md, eng, DNNL_MEMORY_NONE), "pooling diff_dst");
    const dnnl_memory_desc_t *ws = dnnl_primitive_desc_query_md(p->fwd_pd, dnnl_query_workspace_md, 0);
    size_t ws_bytes = ws ? dnnl_memory_desc_get_size(ws) : 0;
    if (ws_bytes) {
        p->workspace_buf = herd_cpu_alloc(ws_bytes);
        if (!p->workspace_buf)
            return HERD_ERR_NOMEM; /* the allocator said why */
        HERD_DNNL(dnnl_memory_create(&p->workspace, ws, eng, p->workspace_buf), "pooling workspace");
    }
    const_dnnl_primitive_desc_t pds[2] = {p->fwd_pd, p->bwd_pd};
    return herd_dnnl_scratch_init(pds, 2, &p->scratch, &p->scratch_mem, "pooling scratchpad");
}

herd_status herd_cpu_pool_plan(const herd_pool_desc *d, herd_pool_plan **plan)
{
    herd_pool_desc fin;
    HERD_TRY(herd_check_pool_plan(d, plan, &fin));
    herd_pool_plan *p = calloc(1, sizeof *p);
    if (!p)
        return HERD_NOMEM(sizeof *p);
    p->d = fin;
    herd_status st = build(p);
    if (st != HERD_OK) {
        herd_cpu_pool_plan_free(p);
        return st;
    }
    *plan = p;
    return HERD_OK;
}

herd_status herd_cpu_pool_fwd(herd_pool_plan *p, const float *x, float *y, bool training)
{
    HERD_TRY(herd_check_pool_fwd(p, x, y));
    HERD_DNNL(dnnl_memory_set_data_handle(p->src, (void *)x), "pooling src");
    HERD_DNNL(dnnl_memory_set_data_handle(p->dst, y), "pooling dst");
    /* One training primitive serves both modes; an evaluation pass overwrites the
     * workspace, so backward is refused until the next training forward. */
    dnnl_exec_arg_t args[4] = {herd_dnnl_arg(DNNL_ARG_SRC, p->src),
                               herd_dnnl_arg(DNNL_ARG_DST, p->dst)};
    int n = 2;
    if (p->workspace)
        args[n++] = herd_dnnl_arg(DNNL_ARG_WORKSPACE, p->workspace);
    if (p->scratch_mem)
        args[n++] = herd_dnnl_arg(DNNL_ARG_SCRATCHPAD, p->scratch_mem);
    HERD_TRY(herd_dnnl_exec(p->fwd, n, args, "pooling forward"));
    p->have_workspace = training;
    return HERD_OK;
}

herd_status herd_cpu_pool_bwd(herd_pool_plan *p, const float *dy, float *dx)
{
    HERD_TRY(herd_check_pool_bwd(p, dy, dx, p && p->have_workspace));
    HERD_DNNL(dnnl_memory_set_data_handle(p->diff_dst, (void *)dy), "pooling diff_dst");
    HERD_DNNL(dnnl_memory_set_data_handle(p->diff_src, dx), "pooling diff_src");
    dnnl_exec_arg_t args[4] = {herd_dnnl_arg(DNNL_ARG_DIFF_DST, p->diff_dst),
                               herd_dnnl_arg(DNNL_ARG_DIFF_SRC, p->diff_src)};
    int n = 2;
    if (p->workspace)
        args[n++] = herd_dnnl_arg(DNNL_ARG_WORKSPACE, p->workspace);
    if (p->scratch_mem)
        args[n++] = herd_dnnl_arg(DNNL_ARG_SCRATCHPAD, p->scratch_mem);
    return herd_dnnl_exec(p->bwd, n, args, "pooling backward");
}

herd_status herd_cpu_global_avgpool_fwd(int n, int c, int hw, const float *x, float *y)
{
    HERD_TRY(herd_check_global_avgpool("global_avgpool_fwd", n, c, hw, x, y));
    size_t rows = (size_t)n * c;
    float inv = 1.0f / (float)hw;
#pragma omp parallel for schedule(static) if (rows * hw >= HERD_CPU_PAR_MIN)
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * hw;
        double s = 0.0; /* see row_sum in cpu_bn.c */
#pragma omp simd reduction(+ : s)
        for (int i = 0; i < hw; i++)
            s += xr[i];
        y[r] = s * inv;
    }
    return HERD_OK;
}

herd_status herd_cpu_global_avgpool_bwd(int n, int c, int hw, const float *dy, float *dx)
{
    HERD_TRY(herd_check_global_avgpool("global_avgpool_bwd", n, c, hw, dy, dx));
    size_t rows = (size_t)n * c;
    float inv = 1.0f / (float)hw;
#pragma omp parallel for schedule(static) if (rows * hw >= HERD_CPU_PAR_MIN)
    for (size_t r = 0; r < rows; r++) {
        float g = dy[r] * inv;
        float *dxr = dx + r * hw;
        for (int i = 0; i < hw; i++)
            dxr[i] = g;
    }
    return HERD_OK;
}
