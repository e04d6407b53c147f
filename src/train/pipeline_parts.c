/* Tensor parts inside pipeline stages: a stage part's values from the whole model, and
 * the whole model's tensors gathered from (or handed to) the first replica's stage parts
 * on world rank 0 (pipeline.h). Each array travels flat, as the part holds it, and rank
 * 0 cuts or pastes every tensor (nn/tensor_split.h) in host memory; on a device backend
 * the arrays cross to the host for it and the transfers run from device buffers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dist/signature.h"
#include "nn/tensor_split.h"
#include "train/host_stage.h"
#include "train/pipeline.h"

enum { TAG_PARTS = 18 }; /* pipeline.c's are 11..14, pipeline_tied.c's 15..17 */

/* The whole model's tensors of stage s: the views [first, first + n) (the last stage's
 * copy of a tied table, beyond them, is not the whole model's). */
static void stage_views(const herd_pipeline *pp, const herd_model *whole, int s, int *first, int *n)
{
    *first = herd_pipeline_stage_first_view(pp, whole, s);
    *n = (s + 1 < pp->stages ? herd_pipeline_stage_first_view(pp, whole, s + 1) : whole->n_views) -
         *first;
}

/* A part's array of parameters (buffers) and the whole's: each tensor one way. */
static void copy_views(const herd_model *part, const herd_model *whole, int first, int n,
                       bool buffers, float *whole_arr, float *part_arr, bool to_part)
{
    for (int j = 0; j < n; j++) {
        const herd_tensor_view *v = &part->views[j];
        if (v->is_buffer == buffers)
            herd_split_copy(v, whole_arr + whole->views[first + j].offset, part_arr + v->offset,
                            to_part);
    }
}

herd_status herd_pipeline_take_part(herd_pipeline *pp, const herd_model *whole)
{
    int first, n;
    stage_views(pp, whole, pp->stage, &first, &n);
    return herd_host_take_part(pp->m, whole, first, n);
}

/* Array k of a model: 0 its parameters, 1 its buffers, then each optimizer state (NULL
 * when not laid out as the parameters); *numel its length. */
static float *array_of(herd_model *m, herd_optimizer *o, int k, size_t *numel)
{
    if (k <= 1) {
        *numel = k == 0 ? m->n_param_floats : m->n_buffer_floats;
        return k == 0 ? m->params : m->buffers;
    }
    float *s = herd_optimizer_state(o, k - 2, NULL, numel);
    return *numel == m->n_param_floats ? s : NULL;
}

/* Rank 0: the plans of every stage part (its own is its stage), and a host buffer for
 * the largest array (*most_out floats). */
static herd_status plan_parts(herd_pipeline *pp, herd_model *whole, herd_model **plans,
                              float **buf, size_t *most_out)
{
    int T = pp->tp.size;
    size_t most = 1;
    for (int s = 0; s < pp->stages; s++)
        for (int t = 0; t < T; t++) {
            herd_model *p = s == 0 && t == 0 ? pp->m : herd_xcalloc(1, sizeof *p);
            if (!p)
                return HERD_ERR_NOMEM;
            plans[s * T + t] = p;
            if (p == pp->m)
                continue;
            p->tp = (herd_tp_group){.rank = t, .size = T};
            int first = pp->bounds[s], end = pp->bounds[s + 1];
            HERD_TRY(herd_model_build_stage(p, whole, first, end, false, s > 0, 0));
            most = p->n_param_floats > most ? p->n_param_floats : most;
            most = p->n_buffer_floats > most ? p->n_buffer_floats : most;
        }
    *most_out = most;
    *buf = herd_xcalloc(most, sizeof **buf);
    return *buf ? HERD_OK : HERD_ERR_NOMEM;
}

/* Rank 0's side: array k of every stage part to or from the whole, cut and pasted in
 * host memory (whole_h, mine_h); the other parts travel through buf, which dev_buf
 * stands in for on the wire when the backend's memory is a device's. */
static herd_status move_on_rank0(herd_pipeline *pp, herd_model **plans, float *buf, float *dev_buf,
                                 int k, herd_optimizer *opt, herd_model *whole,
                                 herd_optimizer *whole_opt, bool to_rank0)
{
    const herd_backend *be = pp->m->be;
    int T = pp->tp.size;
    size_t all;
    float *whole_arr = array_of(whole, whole_opt, k, &all), *whole_h = NULL;
    herd_status st = whole_arr ? herd_host_stage(be, whole_arr, all, true, &whole_h) : HERD_OK;
    for (int s = 0; st == HERD_OK && s < pp->stages; s++)
        for (int t = 0; st == HERD_OK && t < T; t++) {
            herd_model *p = plans[s * T + t];
            size_t numel, own_n = 0;
            float *own = p == pp->m ? array_of(pp->m, opt, k, &own_n) : NULL;
            if ((p == pp->m && !own) || !whole_arr) {
                st = HERD_ERR(HERD_ERR_UNSUPPORTED, "optimizer state %d is not laid out as "
                              "the parameters: stages of tensor parts cannot move it", k - 2);
                break;
            }
            float *mine_h = buf;
            if (own)
                st = herd_host_stage(be, own, own_n, true, &mine_h);
            int first, n;
            stage_views(pp, whole, s, &first, &n);
            numel = k == 1 ? p->n_buffer_floats : p->n_param_floats;
            if (k != 1 && p->n_views > n) /* the last stage's copy of a tied table ends it */
                numel -= p->views[p->n_views - 1].numel;
            char what[96];
            snprintf(what, sizeof what, "%s stage %d part %d's tensors (array %d)",
                     to_rank0 ? "gathering" : "sending", s, t, k);
            size_t bytes = numel * sizeof(float);
            if (st == HERD_OK && !to_rank0)
                copy_views(p, whole, first, n, k == 1, whole_h, mine_h, true);
            if (st == HERD_OK && !own && numel > 0) {
                if (!to_rank0 && dev_buf != buf)
                    st = be->memcpy_h2d(dev_buf, buf, bytes);
                herd_p2p req;
                if (st == HERD_OK)
                    st = pp->world->ops->p2p_start(pp->world, &req, !to_rank0, dev_buf, bytes,
                                                   s * T + t, TAG_PARTS);
                if (st == HERD_OK)
                    st = pp->world->ops->p2p_wait(pp->world, &req, what);
                if (st == HERD_OK && to_rank0 && dev_buf != buf)
                    st = be->memcpy_d2h(buf, dev_buf, bytes);
            }
            if (st == HERD_OK && to_rank0)
                copy_views(p, whole, first, n, k == 1, whole_h, mine_h, false);
            if (own)
                st = herd_host_unstage(be, own, mine_h, own_n, !to_rank0, st);
        }
    if (whole_h)
        st = herd_host_unstage(be, whole_arr, whole_h, all, to_rank0, st);
    return st;
}

herd_status herd_pipeline_move_parts(herd_pipeline *pp, herd_optimizer *opt, herd_model *whole,
                                     herd_optimizer *whole_opt, bool to_rank0)
{
    herd_comm *w = pp->world;
    int T = pp->tp.size, arrays = 2 + (opt ? herd_optimizer_state_count(opt) : 0);
    herd_model **plans = NULL;
    float *buf = NULL, *dev_buf = NULL;
    size_t most = 0;
    herd_status st = HERD_OK;
    if (w->rank == 0) {
        plans = herd_xcalloc((size_t)pp->stages * (size_t)T, sizeof *plans);
        st = plans ? plan_parts(pp, whole, plans, &buf, &most) : HERD_ERR_NOMEM;
        const herd_backend *be = pp->m->be;
        dev_buf = buf;
        if (st == HERD_OK && !be->host_memory && !(dev_buf = be->alloc(most * sizeof(float))))
            st = HERD_ERR_NOMEM;
    }
    st = herd_agree(w, st, "planning the stages' tensor parts");
    for (int k = 0; st == HERD_OK && k < arrays; k++) {
        if (w->rank == 0) {
            st = move_on_rank0(pp, plans, buf, dev_buf, k, opt, whole, whole_opt, to_rank0);
            continue;
        }
        if (pp->replica != 0)
            continue;
        size_t numel;
        float *mine = array_of(pp->m, opt, k, &numel);
        if (k != 1) /* the whole model's floats: not the last stage's copy of a tied table */
            numel = herd_pipeline_whole_share(pp);
        char what[96];
        snprintf(what, sizeof what, "stage %d part %d: %s its tensors (array %d)", pp->stage,
                 pp->tp.rank, to_rank0 ? "sending rank 0" : "receiving from rank 0", k);
        if (!mine)
            st = HERD_ERR(HERD_ERR_UNSUPPORTED, "optimizer state %d is not laid out as the "
                          "parameters: stages of tensor parts cannot move it", k - 2);
        herd_p2p req;
        if (st == HERD_OK && numel > 0)
            st = w->ops->p2p_start(w, &req, to_rank0, mine, numel * sizeof(float), 0, TAG_PARTS);
        if (st == HERD_OK && numel > 0)
            st = w->ops->p2p_wait(w, &req, what);
    }
    for (int i = 0; plans && i < pp->stages * T; i++)
        if (plans[i] != pp->m)
            herd_model_free(plans[i]);
    free(plans);
    if (dev_buf != buf)
        pp->m->be->free(dev_buf);
    free(buf);
    return st;
}
