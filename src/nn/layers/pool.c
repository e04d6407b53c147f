/* Max and average pooling (stride defaults to the kernel size, as in PyTorch). */
#include <stdlib.h>
#include <string.h>

#include "nn/layers/common.h"

typedef struct pool_state {
    herd_pool_desc desc;
    herd_pool_plan *plan;
} pool_state;

static herd_status pool_setup(herd_layer *l, herd_model *m)
{
    (void)m;
    herd_shape in = l->in_shape[0];
    const herd_layer_spec *s = &l->spec;
    if (s->kernel <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s layer '%s' needs \"kernel\"", s->type, s->name);
    pool_state *st = herd_xcalloc(1, sizeof *st);
    if (!st)
        return HERD_ERR_NOMEM;
    l->state = st;
    st->desc = (herd_pool_desc){
        .n = 1, .c = in.c, .h_in = in.h, .w_in = in.w, .k = s->kernel, .stride = s->stride,
        .pad = s->pad, .is_max = strcmp(s->type, "maxpool") == 0,
    };
    herd_status rc = herd_pool_desc_finish(&st->desc);
    if (rc != HERD_OK)
        return HERD_ERR(rc, "%s layer '%s': %s", s->type, s->name, herd_last_error());
    l->out_shape = (herd_shape){1, in.c, st->desc.h_out, st->desc.w_out};
    return HERD_OK;
}

static herd_status pool_reshape(herd_layer *l, const herd_backend *be, int batch)
{
    pool_state *st = l->state;
    if (st->plan)
        be->pool_plan_free(st->plan);
    st->plan = NULL;
    st->desc.n = batch;
    return be->pool_plan(&st->desc, &st->plan);
}

static herd_status pool_forward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                float *y)
{
    pool_state *st = l->state;
    return ctx->be->pool_fwd(st->plan, x[0], y, ctx->training);
}

static herd_status pool_backward(herd_layer *l, const herd_run_ctx *ctx, const float *const *x,
                                 const float *y, const float *dy, float *const *dx)
{
    (void)x, (void)y;
    pool_state *st = l->state;
    return dx[0] ? ctx->be->pool_bwd(st->plan, dy, dx[0]) : HERD_OK;
}

static void pool_destroy(herd_layer *l, const herd_backend *be)
{
    pool_state *st = l->state;
    if (st && st->plan)
        be->pool_plan_free(st->plan);
    free(st);
    l->state = NULL;
}

static double pool_flops(const herd_layer *l)
{
    return (double)herd_shape_per_sample(l->out_shape) * l->spec.kernel * l->spec.kernel;
}

static const char *const pool_keys[] = {"kernel", "stride", "pad", NULL};

const herd_layer_ops herd_layer_maxpool = {
    .type = "maxpool", .n_inputs = 1, .setup = pool_setup, .reshape = pool_reshape,
    .forward = pool_forward, .backward = pool_backward, .destroy = pool_destroy,
    .flops = pool_flops,
    .keys = pool_keys,
};

const herd_layer_ops herd_layer_avgpool = {
    .type = "avgpool", .n_inputs = 1, .setup = pool_setup, .reshape = pool_reshape,
    .forward = pool_forward, .backward = pool_backward, .destroy = pool_destroy,
    .flops = pool_flops,
    .keys = pool_keys,
};
