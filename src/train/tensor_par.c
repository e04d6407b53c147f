/* Tensor parallelism's groups, its sums and its checkpoints' whole tensors
 * (tensor_par.h). */
#include "train/tensor_par.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dist/signature.h"
#include "nn/tensor_split.h"
#include "train/host_stage.h"

/* Every part's values side by side by an all-gather, then added in part order on every
 * rank: the group's ranks get the same bits whatever algorithm the engine picks, which
 * keeps the layers' whole tensors (layer norms, biases) identical on every part. For
 * two parts it moves what an allreduce moves. */
static herd_status group_sum(void *user, float *buf, size_t n)
{
    herd_tensor_par *tp = user;
    const herd_backend *be = tp->be;
    if (n > INT_MAX)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "a tensor-parallel sum of %zu values is more than "
                        "one exchange takes (%d)", n, INT_MAX);
    size_t need = n * (size_t)tp->parts;
    if (need > tp->scratch_floats) {
        be->free(tp->scratch);
        tp->scratch_floats = 0;
        if (!(tp->scratch = be->alloc(need * sizeof(float))))
            return HERD_ERR_NOMEM; /* the allocator said why */
        tp->scratch_floats = need;
    }
    float *s = tp->scratch;
    HERD_TRY(be->copy(n, buf, s + (size_t)tp->part * n));
    for (int t = 0; t < tp->parts; t++)
        tp->counts[t] = (int)n;
    herd_comm *g = tp->group;
    HERD_TRY(g->ops->allgather_start(g, s, tp->counts, "tensor-parallel sum"));
    HERD_TRY(g->ops->wait_all(g));
    HERD_TRY(be->add(n, s, s + n, buf));
    for (int t = 2; t < tp->parts; t++)
        HERD_TRY(be->add(n, buf, s + (size_t)t * n, buf));
    return HERD_OK;
}

static herd_status group_allgather(void *user, const void *mine, void *all, size_t bytes)
{
    herd_tensor_par *tp = user;
    herd_comm *g = herd_comm_host_side(tp->group);
    return g->ops->allgather(g, mine, all, bytes);
}

herd_tp_group herd_tensor_par_group(herd_tensor_par *tp)
{
    return (herd_tp_group){.rank = tp->part, .size = tp->parts, .sum = group_sum,
                           .allgather = group_allgather, .group = tp};
}

static herd_status build_part(herd_tensor_par *tp, const herd_train_config *cfg,
                              const herd_model *whole)
{
    herd_model *m = tp->m = herd_xcalloc(1, sizeof *m);
    if (!m)
        return HERD_ERR_NOMEM;
    m->tp = herd_tensor_par_group(tp);
    /* The whole model's layers as one stage, each split as m->tp says. */
    herd_status st = herd_model_build_stage(m, whole, 0, whole->n_layers, true, false, cfg->seed);
    m->loss_chunk = whole->loss_chunk; /* the part's last layer as the whole's */
    if (st == HERD_OK && whole->params) /* the caller's weights (loaded or initialised) */
        st = herd_host_take_part(m, whole, 0, m->n_views);
    return st;
}

herd_status herd_tensor_par_create(const herd_train_config *cfg, herd_model *whole,
                                   herd_comm *job, herd_tensor_par **out)
{
    *out = NULL;
    herd_tensor_par *tp = herd_xcalloc(1, sizeof *tp);
    if (!tp)
        return HERD_ERR_NOMEM;
    tp->be = whole->be;
    tp->parts = cfg->tensor_parallel;
    int stages = cfg->pipeline_stages > 1 ? cfg->pipeline_stages : 1;
    tp->part = job->rank % tp->parts;
    tp->replica = job->rank / (tp->parts * stages);
    tp->replicas = job->size / (tp->parts * stages);
    tp->counts = herd_xcalloc((size_t)tp->parts, sizeof *tp->counts);
    herd_status st = tp->counts ? HERD_OK : HERD_ERR_NOMEM;
    /* The tensor group: one replica's parts (of one stage). */
    int group = job->rank / tp->parts;
    char name[48];
    snprintf(name, sizeof name, "tensor group %d", group);
    if (st == HERD_OK)
        st = job->ops->split(job, group, tp->part, name, &tp->group);
    /* With stages, the pipeline runs over the ranks holding this part (rank = replica x
     * P + stage there) and builds the stage; it reduces over its stage groups. */
    snprintf(name, sizeof name, "%s of part %d", stages > 1 ? "pipelines" : "data group", tp->part);
    if (st == HERD_OK && (stages > 1 || tp->replicas > 1))
        st = job->ops->split(job, tp->part, group, name, &tp->data);
    else if (st == HERD_OK)
        st = herd_comm_device_local_create(whole->be, &tp->data);
    if (st == HERD_OK && stages == 1)
        st = build_part(tp, cfg, whole);
    st = herd_agree(job, st, "building the tensor-parallel parts");
    if (st != HERD_OK) {
        herd_tensor_par_free(tp);
        return st;
    }
    *out = tp;
    return HERD_OK;
}

void herd_tensor_par_free(herd_tensor_par *tp)
{
    if (!tp)
        return;
    tp->be->free(tp->scratch);
    if (!tp->stage_model)
        herd_model_free(tp->m);
    herd_comm_destroy(tp->data);
    herd_comm_destroy(tp->group);
    free(tp->counts);
    free(tp);
}

/* The arrays that travel: the parameters, then each optimizer state (laid out as the
 * parameters). k = 0: parameters. NULL when the optimizer's state is not. */
static float *param_array(herd_model *m, herd_optimizer *o, int k)
{
    if (k == 0)
        return m->params;
    size_t n;
    float *s = herd_optimizer_state(o, k - 1, NULL, &n);
    return n == m->n_param_floats ? s : NULL;
}

static int arrays_of(herd_optimizer *o) { return 1 + (o ? herd_optimizer_state_count(o) : 0); }

/* Root of the first replica's group: each part's array k (mine, host memory) into the
 * whole's (be's memory). */
static herd_status gather_on_root(herd_tensor_par *tp, herd_model **plans, const float *mine,
                                  float *whole_arr, const herd_model *whole_plan)
{
    herd_comm *g = herd_comm_host_side(tp->group);
    size_t *bytes_of = herd_xcalloc((size_t)tp->parts, sizeof *bytes_of), total = 0;
    if (!bytes_of)
        return HERD_ERR_NOMEM;
    for (int t = 0; t < tp->parts; t++)
        total += bytes_of[t] = plans[t]->n_param_floats * sizeof(float);
    float *all = herd_xcalloc(1, total ? total : 1), *whole_host = NULL;
    herd_status st = all ? g->ops->gather(g, mine, bytes_of[0], all, bytes_of, 0) : HERD_ERR_NOMEM;
    if (st == HERD_OK)
        st = herd_host_stage(tp->be, whole_arr, whole_plan->n_param_floats, false, &whole_host);
    const float *at = all;
    for (int t = 0; st == HERD_OK && t < tp->parts; t++) {
        for (int i = 0; i < plans[t]->n_views; i++) {
            const herd_tensor_view *v = &plans[t]->views[i];
            if (!v->is_buffer)
                herd_split_copy(v, whole_host + whole_plan->views[i].offset,
                                (float *)at + v->offset, false);
        }
        at += plans[t]->n_param_floats;
    }
    if (whole_host)
        st = herd_host_unstage(tp->be, whole_arr, whole_host, whole_plan->n_param_floats, true, st);
    free(all);
    free(bytes_of);
    return st;
}

herd_status herd_tensor_par_gather(herd_tensor_par *tp, herd_comm *job, herd_optimizer *opt,
                                   herd_model *whole, herd_optimizer *whole_opt)
{
    herd_status st = HERD_OK;
    bool root = job->rank == 0;
    herd_model **plans = NULL;
    if (tp->replica == 0 && root) {
        plans = herd_xcalloc((size_t)tp->parts, sizeof *plans);
        st = plans ? HERD_OK : HERD_ERR_NOMEM;
        for (int t = 0; st == HERD_OK && t < tp->parts; t++)
            st = herd_model_plan_part(whole, t, tp->parts, &plans[t]);
    }
    /* The group learns of a failure on its root before anything travels. */
    if (tp->replica == 0)
        st = herd_agree(herd_comm_host_side(tp->group), st, "planning the checkpoint's parts");
    herd_model *m = tp->m;
    int arrays = arrays_of(opt);
    for (int k = 0; tp->replica == 0 && st == HERD_OK && k < arrays; k++) {
        float *mine = param_array(m, opt, k), *host = NULL;
        if (!mine)
            st = HERD_ERR(HERD_ERR_UNSUPPORTED, "optimizer state %d is not laid out as the "
                          "parameters: tensor parallelism cannot checkpoint it", k - 1);
        else
            st = herd_host_stage(tp->be, mine, m->n_param_floats, true, &host);
        if (st == HERD_OK && root)
            st = gather_on_root(tp, plans, host, param_array(whole, whole_opt, k), whole);
        else if (st == HERD_OK) {
            herd_comm *g = herd_comm_host_side(tp->group);
            st = g->ops->gather(g, host, m->n_param_floats * sizeof(float), NULL, NULL, 0);
        }
        if (host)
            st = herd_host_unstage(tp->be, mine, host, 0, false, st);
    }
    /* Buffers are whole on every part (no split layer has any). */
    if (st == HERD_OK && root && m->n_buffer_floats)
        st = tp->be->copy(m->n_buffer_floats, m->buffers, whole->buffers);
    for (int t = 0; plans && t < tp->parts; t++)
        herd_model_free(plans[t]);
    free(plans);
    return herd_agree(job, st, "collecting the tensor-parallel parts");
}

herd_status herd_tensor_par_scatter(herd_tensor_par *tp, herd_comm *job, herd_optimizer *opt,
                                    herd_model *whole, herd_optimizer *whole_opt)
{
    herd_status st = HERD_OK;
    herd_model *m = tp->m, *plan = NULL;
    float *tmp = NULL;
    if (tp->replica == 0) {
        st = herd_model_plan_part(m, 0, 1, &plan);
        size_t bytes = plan ? (plan->n_param_floats + plan->n_buffer_floats) * sizeof(float) : 0;
        if (st == HERD_OK && !(tmp = herd_xcalloc(1, bytes ? bytes : 1)))
            st = HERD_NOMEM(bytes);
        st = herd_agree(herd_comm_host_side(tp->group), st, "receiving the checkpoint's parts");
    }
    bool root = job->rank == 0;
    herd_comm *g = herd_comm_host_side(tp->group);
    int arrays = arrays_of(opt);
    const herd_backend *be = tp->be;
    for (int k = 0; tp->replica == 0 && st == HERD_OK && k < arrays; k++) {
        float *mine = param_array(m, opt, k), *part = NULL;
        /* Every rank reaches the broadcast; a failed copy on the root shows after it. */
        herd_status copied = root ? be->memcpy_d2h(tmp, param_array(whole, whole_opt, k),
                                                   plan->n_param_floats * sizeof(float))
                                  : HERD_OK;
        st = g->ops->broadcast(g, tmp, plan->n_param_floats * sizeof(float), 0);
        st = st != HERD_OK ? st : copied;
        if (st == HERD_OK && mine)
            st = herd_host_stage(be, mine, m->n_param_floats, false, &part);
        for (int i = 0; st == HERD_OK && mine && i < m->n_views; i++) {
            const herd_tensor_view *v = &m->views[i];
            if (!v->is_buffer)
                herd_split_copy(v, tmp + plan->views[i].offset, part + v->offset, true);
        }
        if (part)
            st = herd_host_unstage(be, mine, part, m->n_param_floats, true, st);
        if (st == HERD_OK && !mine)
            st = HERD_ERR(HERD_ERR_UNSUPPORTED, "optimizer state %d is not laid out as the "
                          "parameters: tensor parallelism cannot resume it", k - 1);
    }
    if (tp->replica == 0 && st == HERD_OK && m->n_buffer_floats) {
        size_t bytes = m->n_buffer_floats * sizeof(float);
        herd_status copied = root ? be->memcpy_d2h(tmp, whole->buffers, bytes) : HERD_OK;
        st = g->ops->broadcast(g, tmp, bytes, 0);
        st = st != HERD_OK ? st : copied;
        if (st == HERD_OK)
            st = be->memcpy_h2d(m->buffers, tmp, bytes);
    }
    free(tmp);
    herd_model_free(plan);
    return herd_agree(job, st, "handing out the checkpoint's parts");
}
