/* 2-D convolution through oneDNN: three primitives per plan (forward, backward data,
 * backward weights) created once and reused every step, with the reorders between
 * the caller's NCHW / OIHW tensors and the layouts the primitives prefer. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_dnnl.h"
#include "backend/cpu/cpu_ops.h"
#include "core/log.h"
#include "core/parse.h"

struct herd_conv_plan {
    herd_conv_desc d;
    int bf16; /* the herd_cpu_bf16_mode the primitives were made for; -1: none made */
    dnnl_primitive_desc_t fwd_pd, bwd_data_pd, bwd_w_pd;
    dnnl_primitive_t fwd, bwd_data, bwd_w;
    /* Forward */
    herd_dnnl_port f_src, f_w, f_dst;
    dnnl_memory_t f_bias;
    /* Backward data */
    herd_dnnl_port d_ddst, d_w, d_dsrc;
    /* Backward weights: results land in dw_acc / db_acc when they must be added (beta 1). */
    herd_dnnl_port w_src, w_ddst, w_dw;
    dnnl_memory_t w_db;
    float *dw_acc, *db_acc;
    /*
     * One reorder serves two primitives where they read the same layout: the forward's
     * copy of x serves the backward-weights of that forward (share_x; w_src unused),
     * and the backward-weights' copy of dy serves the backward-data that follows it
     * (share_dy; d_ddst unused). fwd_x / bwd_dy name the tensor the copy holds, until
     * it is used once; another pointer, or another order of calls, reorders again.
     * These reorders were 2 of the 5 large ones of each convolution's step.
     */
    bool share_x, share_dy;
    const float *fwd_x, *bwd_dy;
    /* One scratchpad, sized for the largest primitive, shared by all three. It and the
     * copies that live during one call only (f_dst, d_ddst, d_dsrc, w_src, w_ddst) are
     * bound to the process's transient arena at each call; f_src and the weights'
     * copies are the plan's own (the forward's copy of x waits for the backward). */
    size_t scratch_bytes;
    dnnl_memory_t scratch_mem;
    bool in_arena;
};

/*
 * The primitives get format_tag_any (oneDNN picks blocked layouts such as nChw16c)
 * and the plan reorders to and from the caller's NCHW/OIHW: on resnet20's convs at
 * batch 128, 1 thread, that took 146 ms per step against 408 ms for plain NCHW
 * primitives (bench/bench_conv.c); the reorders themselves cost ~0.15 ms per
 * 128x16x28x28 tensor. HERD_CONV_LAYOUT=plain forces plain layouts (tests use it
 * to cover both paths; "blocked", the default, takes the layouts oneDNN picks).
 */
static herd_status blocked_layout(bool *out)
{
    static const char *const layouts[] = {"blocked", "plain", NULL};
    int which;
    herd_status st = herd_env_choice("HERD_CONV_LAYOUT", layouts, &which);
    *out = which == 0;
    return st;
}

/* HERD_CONV_ALGO=auto|winograd lets oneDNN choose (or take) Winograd for 3x3
 * convolutions; the default is direct (docs/performance.md has the comparison). */
static herd_status conv_algorithm(dnnl_alg_kind_t *out)
{
    static const char *const names[] = {"direct", "auto", "winograd", NULL};
    static const dnnl_alg_kind_t algs[] = {dnnl_convolution_direct, dnnl_convolution_auto,
                                           dnnl_convolution_winograd};
    int which;
    herd_status st = herd_env_choice("HERD_CONV_ALGO", names, &which);
    *out = algs[which];
    return st;
}

/* Everything but the descriptor, so the plan can be made again for new arithmetic. */
static void release(herd_conv_plan *p)
{
    herd_dnnl_port *ports[] = {&p->f_src, &p->f_w,    &p->f_dst,  &p->d_ddst, &p->d_w,
                               &p->d_dsrc, &p->w_src, &p->w_ddst, &p->w_dw};
    for (size_t i = 0; i < sizeof ports / sizeof ports[0]; i++)
        herd_dnnl_port_free(ports[i]);
    dnnl_memory_t mems[] = {p->f_bias, p->w_db, p->scratch_mem};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i])
            dnnl_memory_destroy(mems[i]);
    dnnl_primitive_t prims[] = {p->fwd, p->bwd_data, p->bwd_w};
    for (size_t i = 0; i < 3; i++)
        if (prims[i])
            dnnl_primitive_destroy(prims[i]);
    dnnl_primitive_desc_t pds[] = {p->fwd_pd, p->bwd_data_pd, p->bwd_w_pd};
    for (size_t i = 0; i < 3; i++)
        if (pds[i])
            dnnl_primitive_desc_destroy(pds[i]);
    herd_cpu_free(p->dw_acc);
    herd_cpu_free(p->db_acc);
    if (p->in_arena)
        herd_dnnl_arena_leave();
    herd_conv_desc d = p->d;
    memset(p, 0, sizeof *p);
    p->d = d;
}

void herd_cpu_conv2d_plan_free(herd_conv_plan *p)
{
    if (!p)
        return;
    release(p);
    free(p);
}

static const dnnl_memory_desc_t *query(const_dnnl_primitive_desc_t pd, dnnl_query_t what)
{
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

/* An input port: in bf16 emulation its copy is rounded to bf16 (native bf16 primitives
 * convert in the reorder; fp32 ones take the caller's values). */
static herd_status input_port(const herd_conv_plan *p, herd_dnnl_port *port,
                              const dnnl_memory_desc_t *user_md, const dnnl_memory_desc_t *prim_md,
                              bool transient, const char *what)
{
    bool round = p->bf16 == (int)HERD_CPU_BF16_EMULATED;
    if (transient)
        return herd_dnnl_port_init_transient(port, user_md, prim_md, true, round, what);
    if (round)
        return herd_dnnl_port_init_bf16_rounded(port, user_md, prim_md, what);
    return herd_dnnl_port_init(port, user_md, prim_md, true, what);
}

/* The ports that live in the arena, in the order of their places there. */
static int transient_ports(herd_conv_plan *p, herd_dnnl_port **out)
{
    herd_dnnl_port *all[] = {&p->f_dst, &p->d_ddst, &p->d_dsrc, &p->w_src, &p->w_ddst};
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->transient)
            out[n++] = all[i];
    return n;
}

/* Points the scratchpad and the transient copies at their places in the arena. */
static herd_status bind_arena(herd_conv_plan *p, char *base)
{
    size_t at = 0;
    if (p->scratch_mem) {
        HERD_DNNL(dnnl_memory_set_data_handle(p->scratch_mem, base), "conv scratchpad");
        at = p->scratch_bytes;
    }
    herd_dnnl_port *ports[5];
    int n = transient_ports(p, ports);
    for (int i = 0; i < n; i++) {
        HERD_TRY(herd_dnnl_port_bind(ports[i], base + at, "conv arena"));
        at += herd_dnnl_port_transient_bytes(ports[i]);
    }
    return HERD_OK;
}

/* True when oneDNN's pick is its generic code (GEMM-based or reference) rather than a
 * kernel for the layout: in bf16 that is the only choice for some shapes, e.g. the
 * backward-weights of a 1-channel input (lenet5's first layer: 3.5 ms against 0.4 ms
 * for fp32's kernel at batch 128). */
static bool generic_impl(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
        return false;
    return strstr(impl, "gemm") || strstr(impl, "ref");
}

/* One direction's primitive from its bf16 descriptor, or from its fp32 one (f32_desc,
 * NULL when not in native bf16) where bf16 would run on generic code only. */
static herd_status create_direction(const void *desc, const void *f32_desc,
                                    const_dnnl_primitive_desc_t hint, dnnl_primitive_desc_t *pd,
                                    dnnl_primitive_t *prim, const char *what)
{
    HERD_TRY(herd_dnnl_create_pd(desc, hint, pd, what));
    if (f32_desc && generic_impl(*pd)) {
        dnnl_primitive_desc_destroy(*pd);
        *pd = NULL;
        HERD_TRY(herd_dnnl_create_pd(f32_desc, hint, pd, what));
        static atomic_flag said = ATOMIC_FLAG_INIT; /* once per process, not per plan */
        if (!atomic_flag_test_and_set(&said))
            herd_log(HERD_LOG_INFO, "bf16: %s runs in fp32 for some layers (oneDNN has only "
                     "generic bf16 code for their shapes, slower than its fp32 kernel)", what);
    }
    return herd_dnnl_create_prim(pd, prim, what);
}

/* The caller's activation tensor: fp32 NCHW, or bf16 nChw16c (herd_bf16_act_ops). */
static herd_status activation_md(dnnl_memory_desc_t *md, const dnnl_dim_t *dims, bool bf16)
{
    if (!bf16)
        return herd_dnnl_plain_md(md, 4, dims, false);
    HERD_DNNL(dnnl_memory_desc_init_by_tag(md, 4, dims, dnnl_bf16, dnnl_aBcd16b),
              "bf16 activation descriptor");
    return HERD_OK;
}

/*
 * bf16: the primitives read bf16 activations, weights and output gradients (converted
 * by the input reorders) and write fp32 weight and bias gradients. Outputs and input
 * gradients are fp32 too, unless the caller keeps bf16 activations (d->bf16_in,
 * bf16_out): then the primitives read and write the caller's tensors directly, as
 * they are already in the layout and type they prefer.
 */
static herd_status build(herd_conv_plan *p)
{
    const herd_conv_desc *d = &p->d;
    p->bf16 = (int)herd_cpu_bf16();
    dnnl_data_type_t in_type = p->bf16 == (int)HERD_CPU_BF16_NATIVE ? dnnl_bf16 : dnnl_f32;
    if ((d->bf16_in || d->bf16_out) && in_type != dnnl_bf16)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "conv2d: bf16 activations need native bf16 arithmetic, and the "
                        "backend's precision is now %s; reshape the model after changing it",
                        p->bf16 == (int)HERD_CPU_BF16_OFF ? "fp32" : "emulated bf16");
    bool any;
    dnnl_alg_kind_t alg;
    HERD_TRY(blocked_layout(&any));
    HERD_TRY(conv_algorithm(&alg));
    dnnl_dims_t src_dims = {d->n, d->c_in, d->h_in, d->w_in};
    dnnl_dims_t w_dims = {d->c_out, d->c_in, d->kh, d->kw};
    dnnl_dims_t dst_dims = {d->n, d->c_out, d->h_out, d->w_out};
    dnnl_dims_t bias_dims = {d->c_out};
    dnnl_dims_t strides = {d->stride, d->stride};
    dnnl_dims_t pad_l = {d->pad, d->pad};
    /* Right padding that makes oneDNN's output size equal PyTorch's floor rule. */
    dnnl_dims_t pad_r = {(dnnl_dim_t)(d->h_out - 1) * d->stride + d->kh - d->h_in - d->pad,
                          (dnnl_dim_t)(d->w_out - 1) * d->stride + d->kw - d->w_in - d->pad};
    /* _u: the caller's tensors; _in: what the primitives read; _out: what they write
     * (_32: the same in fp32, for the fp32 fallback). */
    dnnl_memory_desc_t src_u, w_u, dst_u, bias_u, src_in, w_in, dst_in, src_out, w_out, dst_out,
        src_32, dst_32, none;
    memset(&none, 0, sizeof none);
    HERD_TRY(activation_md(&src_u, src_dims, d->bf16_in));
    HERD_TRY(herd_dnnl_plain_md(&w_u, 4, w_dims, false));
    HERD_TRY(activation_md(&dst_u, dst_dims, d->bf16_out));
    HERD_TRY(herd_dnnl_plain_md(&bias_u, 1, bias_dims, false));
    HERD_TRY(herd_dnnl_typed_md(&src_in, 4, src_dims, in_type, any));
    HERD_TRY(herd_dnnl_typed_md(&w_in, 4, w_dims, in_type, any));
    HERD_TRY(herd_dnnl_typed_md(&dst_in, 4, dst_dims, in_type, any));
    HERD_TRY(herd_dnnl_typed_md(&src_out, 4, src_dims, d->bf16_in ? dnnl_bf16 : dnnl_f32, any));
    HERD_TRY(herd_dnnl_plain_md(&w_out, 4, w_dims, any));
    HERD_TRY(herd_dnnl_typed_md(&dst_out, 4, dst_dims, d->bf16_out ? dnnl_bf16 : dnnl_f32, any));
    HERD_TRY(herd_dnnl_plain_md(&src_32, 4, src_dims, any));
    HERD_TRY(herd_dnnl_plain_md(&dst_32, 4, dst_dims, any));
    const dnnl_memory_desc_t *bias_md = d->bias ? &bias_u : &none;

    /* cd: as the arithmetic asks; cd32: the same in fp32, for directions that bf16
     * would run on generic code (native bf16 only). */
    dnnl_convolution_desc_t cd, cd32;
    const void *f32 = in_type == dnnl_bf16 ? &cd32 : NULL;
    HERD_DNNL(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, alg, &src_in, &w_in,
                                                 bias_md, &dst_out, strides, pad_l, pad_r),
              "convolution forward descriptor");
    HERD_DNNL(dnnl_convolution_forward_desc_init(&cd32, dnnl_forward_training, alg, &src_32,
                                                 &w_out, bias_md, &dst_32, strides, pad_l, pad_r),
              "convolution forward descriptor");
    HERD_TRY(create_direction(&cd, f32, NULL, &p->fwd_pd, &p->fwd, "convolution forward"));
    HERD_DNNL(dnnl_convolution_backward_data_desc_init(&cd, alg, &src_out, &w_in, &dst_in,
                                                       strides, pad_l, pad_r),
              "convolution backward data descriptor");
    HERD_DNNL(dnnl_convolution_backward_data_desc_init(&cd32, alg, &src_32, &w_out, &dst_32,
                                                       strides, pad_l, pad_r),
              "convolution backward data descriptor");
    HERD_TRY(create_direction(&cd, f32, p->fwd_pd, &p->bwd_data_pd, &p->bwd_data,
                              "convolution backward data"));
    HERD_DNNL(dnnl_convolution_backward_weights_desc_init(&cd, alg, &src_in, &w_out, bias_md,
                                                          &dst_in, strides, pad_l, pad_r),
              "convolution backward weights descriptor");
    HERD_DNNL(dnnl_convolution_backward_weights_desc_init(&cd32, alg, &src_32, &w_out, bias_md,
                                                          &dst_32, strides, pad_l, pad_r),
              "convolution backward weights descriptor");
    HERD_TRY(create_direction(&cd, f32, p->fwd_pd, &p->bwd_w_pd, &p->bwd_w,
                              "convolution backward weights"));

    HERD_TRY(input_port(p, &p->f_src, &src_u, query(p->fwd_pd, dnnl_query_src_md), false,
                        "conv fwd src reorder"));
    HERD_TRY(input_port(p, &p->f_w, &w_u, query(p->fwd_pd, dnnl_query_weights_md), false,
                        "conv fwd weights reorder"));
    HERD_TRY(herd_dnnl_port_init_transient(&p->f_dst, &dst_u, query(p->fwd_pd, dnnl_query_dst_md),
                                           false, false, "conv fwd dst reorder"));
    p->share_x = dnnl_memory_desc_equal(query(p->fwd_pd, dnnl_query_src_md),
                                        query(p->bwd_w_pd, dnnl_query_src_md));
    p->share_dy = dnnl_memory_desc_equal(query(p->bwd_data_pd, dnnl_query_diff_dst_md),
                                         query(p->bwd_w_pd, dnnl_query_diff_dst_md));
    if (!p->share_dy)
        HERD_TRY(input_port(p, &p->d_ddst, &dst_u,
                            query(p->bwd_data_pd, dnnl_query_diff_dst_md), true,
                            "conv bwd data diff_dst reorder"));
    HERD_TRY(input_port(p, &p->d_w, &w_u, query(p->bwd_data_pd, dnnl_query_weights_md), false,
                        "conv bwd data weights reorder"));
    HERD_TRY(herd_dnnl_port_init_transient(&p->d_dsrc, &src_u,
                                           query(p->bwd_data_pd, dnnl_query_diff_src_md), false,
                                           false, "conv bwd data diff_src reorder"));
    if (!p->share_x)
        HERD_TRY(input_port(p, &p->w_src, &src_u, query(p->bwd_w_pd, dnnl_query_src_md), true,
                            "conv bwd weights src reorder"));
    HERD_TRY(input_port(p, &p->w_ddst, &dst_u, query(p->bwd_w_pd, dnnl_query_diff_dst_md), true,
                        "conv bwd weights diff_dst reorder"));
    HERD_TRY(herd_dnnl_port_init(&p->w_dw, &w_u, query(p->bwd_w_pd, dnnl_query_diff_weights_md),
                                 false, "conv bwd weights diff_weights reorder"));

    dnnl_engine_t eng;
    dnnl_stream_t stream;
    HERD_TRY(herd_dnnl_get(&eng, &stream));
    size_t w_bytes = (size_t)d->c_out * d->c_in * d->kh * d->kw * sizeof(float);
    p->dw_acc = herd_cpu_alloc(w_bytes);
    if (!p->dw_acc)
        return HERD_ERR_NOMEM; /* the allocator said why */
    if (d->bias) {
        HERD_DNNL(dnnl_memory_create(&p->f_bias, &bias_u, eng, DNNL_MEMORY_NONE), "conv bias");
        HERD_DNNL(dnnl_memory_create(&p->w_db, &bias_u, eng, DNNL_MEMORY_NONE), "conv bias grad");
        p->db_acc = herd_cpu_alloc((size_t)d->c_out * sizeof(float));
        if (!p->db_acc)
            return HERD_ERR_NOMEM; /* the allocator said why */
    }
    const_dnnl_primitive_desc_t pds[3] = {p->fwd_pd, p->bwd_data_pd, p->bwd_w_pd};
    HERD_TRY(herd_dnnl_scratch_init_transient(pds, 3, &p->scratch_bytes, &p->scratch_mem,
                                              "conv scratchpad"));
    size_t need = p->scratch_bytes;
    herd_dnnl_port *ports[5];
    int n = transient_ports(p, ports);
    for (int i = 0; i < n; i++)
        need += herd_dnnl_port_transient_bytes(ports[i]);
    HERD_TRY(herd_dnnl_arena_join(need));
    p->in_arena = true;
    return HERD_OK;
}

herd_status herd_cpu_conv2d_plan(const herd_conv_desc *d, herd_conv_plan **plan)
{
    herd_conv_desc fin;
    HERD_TRY(herd_check_conv2d_plan(d, plan, &fin));
    herd_conv_plan *p = calloc(1, sizeof *p);
    if (!p)
        return HERD_NOMEM(sizeof *p);
    p->d = fin;
    herd_status st = build(p);
    if (st != HERD_OK) {
        herd_cpu_conv2d_plan_free(p);
        return st;
    }
    *plan = p;
    return HERD_OK;
}

/* After set_precision changed the arithmetic, the primitives are made again for it. */
static herd_status current(herd_conv_plan *p)
{
    if (p->bf16 == (int)herd_cpu_bf16())
        return HERD_OK;
    release(p);
    herd_status st = build(p);
    if (st != HERD_OK) { /* half made: the next call tries again */
        release(p);
        p->bf16 = -1;
    }
    return st;
}

/* Execution arguments shared by all three primitives: the scratchpad. */
static int add_scratch(const herd_conv_plan *p, dnnl_exec_arg_t *args, int n)
{
    if (p->scratch_mem)
        args[n++] = herd_dnnl_arg(DNNL_ARG_SCRATCHPAD, p->scratch_mem);
    return n;
}

static herd_status conv_fwd(herd_conv_plan *p, const float *x, const float *w, const float *b,
                           float *y)
{
    p->fwd_x = p->bwd_dy = NULL;
    HERD_TRY(herd_dnnl_port_in(&p->f_src, x, "conv fwd src"));
    p->fwd_x = x;
    HERD_TRY(herd_dnnl_port_in_weights(&p->f_w, w, "conv fwd weights"));
    HERD_TRY(herd_dnnl_port_out(&p->f_dst, y, "conv fwd dst"));
    dnnl_exec_arg_t args[5] = {herd_dnnl_arg(DNNL_ARG_SRC, p->f_src.inner),
                               herd_dnnl_arg(DNNL_ARG_WEIGHTS, p->f_w.inner),
                               herd_dnnl_arg(DNNL_ARG_DST, p->f_dst.inner)};
    int n = 3;
    if (p->d.bias) {
        HERD_DNNL(dnnl_memory_set_data_handle(p->f_bias, (void *)b), "conv fwd bias");
        args[n++] = herd_dnnl_arg(DNNL_ARG_BIAS, p->f_bias);
    }
    n = add_scratch(p, args, n);
    HERD_TRY(herd_dnnl_exec(p->fwd, n, args, "convolution forward"));
    return herd_dnnl_port_out_finish(&p->f_dst, "conv fwd dst");
}

/* kept: the arena still holds this plan's copy of the output gradient. */
static herd_status conv_bwd_data(herd_conv_plan *p, const float *dy, const float *w, float *dx,
                                 bool kept)
{
    herd_dnnl_port *ddst = p->share_dy ? &p->w_ddst : &p->d_ddst;
    bool have_dy = p->share_dy && dy == p->bwd_dy && kept;
    p->bwd_dy = NULL;
    if (!have_dy)
        HERD_TRY(herd_dnnl_port_in(ddst, dy, "conv bwd data diff_dst"));
    HERD_TRY(herd_dnnl_port_in_weights(&p->d_w, w, "conv bwd data weights"));
    HERD_TRY(herd_dnnl_port_out(&p->d_dsrc, dx, "conv bwd data diff_src"));
    dnnl_exec_arg_t args[4] = {herd_dnnl_arg(DNNL_ARG_DIFF_DST, ddst->inner),
                               herd_dnnl_arg(DNNL_ARG_WEIGHTS, p->d_w.inner),
                               herd_dnnl_arg(DNNL_ARG_DIFF_SRC, p->d_dsrc.inner)};
    int n = add_scratch(p, args, 3);
    HERD_TRY(herd_dnnl_exec(p->bwd_data, n, args, "convolution backward data"));
    return herd_dnnl_port_out_finish(&p->d_dsrc, "conv bwd data diff_src");
}

static void accumulate(float *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

static herd_status conv_bwd_weights(herd_conv_plan *p, const float *x, const float *dy,
                                    float *dw, float *db, float beta)
{
    bool acc = beta != 0.0f;
    herd_dnnl_port *src = p->share_x ? &p->f_src : &p->w_src;
    bool have_x = p->share_x && x == p->fwd_x;
    p->fwd_x = p->bwd_dy = NULL;
    if (!have_x)
        HERD_TRY(herd_dnnl_port_in(src, x, "conv bwd weights src"));
    HERD_TRY(herd_dnnl_port_in(&p->w_ddst, dy, "conv bwd weights diff_dst"));
    p->bwd_dy = dy;
    /* Accumulating: the primitive writes a scratch gradient that is added afterwards. */
    HERD_TRY(herd_dnnl_port_out(&p->w_dw, acc ? p->dw_acc : dw, "conv bwd weights diff_weights"));
    dnnl_exec_arg_t args[5] = {herd_dnnl_arg(DNNL_ARG_SRC, src->inner),
                               herd_dnnl_arg(DNNL_ARG_DIFF_DST, p->w_ddst.inner),
                               herd_dnnl_arg(DNNL_ARG_DIFF_WEIGHTS, p->w_dw.inner)};
    int n = 3;
    if (p->d.bias) {
        HERD_DNNL(dnnl_memory_set_data_handle(p->w_db, acc ? p->db_acc : db),
                  "conv bwd weights diff_bias");
        args[n++] = herd_dnnl_arg(DNNL_ARG_DIFF_BIAS, p->w_db);
    }
    n = add_scratch(p, args, n);
    HERD_TRY(herd_dnnl_exec(p->bwd_w, n, args, "convolution backward weights"));
    HERD_TRY(herd_dnnl_port_out_finish(&p->w_dw, "conv bwd weights diff_weights"));
    if (acc) {
        accumulate(dw, p->dw_acc, (size_t)p->d.c_out * p->d.c_in * p->d.kh * p->d.kw);
        if (p->d.bias)
            accumulate(db, p->db_acc, (size_t)p->d.c_out);
    }
    return HERD_OK;
}

/* The public calls: checked, made current, then run holding the arena. */
herd_status herd_cpu_conv2d_fwd(herd_conv_plan *p, const float *x, const float *w,
                                const float *b, float *y)
{
    HERD_TRY(herd_check_conv2d_fwd(p, x, w, b, y));
    HERD_TRY(current(p));
    herd_dnnl_arena_hold hold;
    HERD_TRY(herd_dnnl_arena_lock(p, &hold));
    herd_status st = bind_arena(p, hold.base);
    if (st == HERD_OK)
        st = conv_fwd(p, x, w, b, y);
    herd_dnnl_arena_unlock(&hold);
    return st;
}

herd_status herd_cpu_conv2d_bwd_data(herd_conv_plan *p, const float *dy, const float *w,
                                     float *dx)
{
    HERD_TRY(herd_check_conv2d_bwd_data(p, dy, w, dx));
    HERD_TRY(current(p));
    herd_dnnl_arena_hold hold;
    HERD_TRY(herd_dnnl_arena_lock(p, &hold));
    herd_status st = bind_arena(p, hold.base);
    if (st == HERD_OK)
        st = conv_bwd_data(p, dy, w, dx, hold.kept);
    herd_dnnl_arena_unlock(&hold);
    return st;
}

herd_status herd_cpu_conv2d_bwd_weights(herd_conv_plan *p, const float *x, const float *dy,
                                        float *dw, float *db, float beta)
{
    HERD_TRY(herd_check_conv2d_bwd_weights(p, x, dy, dw, db, beta));
    HERD_TRY(current(p));
    herd_dnnl_arena_hold hold;
    HERD_TRY(herd_dnnl_arena_lock(p, &hold));
    herd_status st = bind_arena(p, hold.base);
    if (st == HERD_OK)
        st = conv_bwd_weights(p, x, dy, dw, db, beta);
    herd_dnnl_arena_unlock(&hold);
    return st;
}
