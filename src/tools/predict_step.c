/* The model of one worker's step that herd predict simulates: the step's phases, the
 * backward split over the layers, the gradient buckets herd train would plan, and one
 * pipeline of it. Reads the model through the public API alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tools/tools.h"

void herd_predict_plan_free(herd_predict_plan *p)
{
    free(p->backward_s);
    free(p->bn_channels);
    free(p->layer_names);
    herd_layer_buckets_free(&p->buckets);
    memset(p, 0, sizeof *p);
}

/* The step, its forward and its backward: measured, or given with the backward 2/3 of
 * the step unless said, and forward half of backward (backward costs about twice forward). */
static herd_status step_phases(const herd_predict_opts *o, const herd_bench_result *measured,
                               double *step_s, double *forward_s, double *backward_s)
{
    bool given = o->step_s > 0;
    if (!given && !measured)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd predict needs a given step time or a measured step");
    *step_s = given ? o->step_s : measured->step_s;
    double fraction = o->backward_fraction >= 0 ? o->backward_fraction
                      : given                   ? 2.0 / 3.0
                                                : measured->phases.backward / measured->step_s;
    *backward_s = fraction * *step_s;
    *forward_s = given ? fmin(*backward_s / 2, *step_s - *backward_s) : measured->phases.forward;
    return HERD_OK;
}

herd_status herd_predict_plan_build(const herd_model *m, const herd_predict_opts *o,
                                    const herd_bench_result *measured, herd_predict_plan *p)
{
    memset(p, 0, sizeof *p);
    double step_s = 0, forward_s = 0, backward_s = 0;
    HERD_TRY(step_phases(o, measured, &step_s, &forward_s, &backward_s));
    int n = (int)herd_model_layer_count(m);
    herd_layer_info *info = calloc((size_t)n + 1, sizeof *info);
    p->backward_s = calloc((size_t)n + 1, sizeof *p->backward_s);
    p->bn_channels = calloc((size_t)n + 1, sizeof *p->bn_channels);
    p->layer_names = calloc((size_t)n + 1, sizeof *p->layer_names);
    herd_status st = info && p->backward_s && p->bn_channels && p->layer_names ? HERD_OK
                                                                               : HERD_ERR_NOMEM;
    double total = 0;
    for (int l = 0; st == HERD_OK && l < n; l++) {
        if ((st = herd_model_layer_info(m, (size_t)l, &info[l])) != HERD_OK)
            break;
        snprintf(p->layer_names[l], sizeof p->layer_names[l], "%s", info[l].name);
        total += info[l].backward_flops;
        if (o->sync_bn && strcmp(info[l].type, "batchnorm") == 0)
            p->bn_channels[l] = (int)info[l].param_numel[0];
    }
    for (int l = 0; st == HERD_OK && l < n; l++)
        p->backward_s[l] = backward_s * (total > 0 ? info[l].backward_flops / total : 1.0 / n);
    /* The buckets exactly as herd train plans them (src/train/buckets.c). */
    if (st == HERD_OK)
        st = herd_bucket_plan_layers(info, n, o->bucket_mb, &p->buckets);
    free(info);
    if (st != HERD_OK) {
        herd_predict_plan_free(p);
        return st;
    }
    p->sm = (herd_step_model){.n_layers = n, .backward_s = p->backward_s,
                              .sync_bn_channels = p->bn_channels, .buckets = p->buckets.spans,
                              .n_buckets = p->buckets.n, .wire_bytes_per_float = o->grad_bytes_per_param,
                              .forward_s = forward_s, .other_s = step_s - forward_s - backward_s,
                              .metrics = o->metrics};
    p->grad_bytes = (double)herd_model_param_count(m) * o->grad_bytes_per_param;
    p->step_s = step_s;
    p->backward_total_s = backward_s;
    return HERD_OK;
}

/* A head tied to a token table on an earlier stage: the last stage keeps a copy, and the
 * two exchange the table's gradient after the reduction (train/pipeline_tied.c). */
static herd_status plan_tied(const herd_model *m, const herd_comm_link *link,
                             herd_predict_pipeline_plan *out)
{
    int n = (int)herd_model_layer_count(m), P = out->pm.stages;
    herd_layer_info head, li;
    HERD_TRY(herd_model_layer_info(m, (size_t)n - 1, &head));
    for (int l = 0; head.tie && l < out->bounds[P - 1]; l++) {
        HERD_TRY(herd_model_layer_info(m, (size_t)l, &li));
        if (strcmp(li.name, head.tie) != 0 || li.n_params == 0)
            continue;
        int s = 0;
        while (l >= out->bounds[s + 1])
            s++;
        double bytes = (double)li.param_numel[0] * sizeof(float);
        herd_alpha_beta ab = herd_comm_link_segment(link, bytes, NULL);
        out->pm.tied_stage = s;
        out->pm.tied_s = ab.alpha_s + bytes * ab.beta_s_per_byte;
        return HERD_OK;
    }
    return HERD_OK;
}

herd_status herd_predict_plan_pipeline(const herd_model *m, const herd_comm_link *link,
                                       const herd_predict_plan *p, int stages, int micro_batches,
                                       int batch, herd_pp_schedule_kind schedule,
                                       herd_predict_pipeline_plan *out)
{
    memset(out, 0, sizeof *out);
    if (stages < 1 || stages > HERD_PREDICT_MAX_STAGES || micro_batches < 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "a pipeline of %d stages (1..%d) and %d micro-batches",
                        stages, HERD_PREDICT_MAX_STAGES, micro_batches);
    int n = p->sm.n_layers, P = stages, M = micro_batches;
    double *cost = calloc((size_t)n + 1, sizeof *cost), *fwd = calloc((size_t)n + 1, sizeof *fwd);
    herd_status st = cost && fwd ? HERD_OK : HERD_ERR_NOMEM;
    double total = 0;
    for (int l = 0; st == HERD_OK && l < n; l++) {
        herd_layer_info li;
        st = herd_model_layer_info(m, (size_t)l, &li);
        fwd[l] = li.forward_flops;
        total += li.forward_flops;
    }
    for (int l = 0; st == HERD_OK && l < n; l++) {
        fwd[l] = p->sm.forward_s * (total > 0 ? fwd[l] / total : 1.0 / n);
        cost[l] = fwd[l] + p->backward_s[l];
    }
    if (st == HERD_OK)
        st = herd_model_pipeline_split(m, P, cost, out->bounds);
    herd_pipeline_model *pm = &out->pm;
    *pm = (herd_pipeline_model){.stages = P, .micro_batches = M, .schedule = schedule,
                                .other_s = p->sm.other_s};
    out->micro_batch = (double)batch / M;
    for (int s = 0; st == HERD_OK && s < P; s++) {
        for (int l = out->bounds[s]; l < out->bounds[s + 1]; l++) {
            pm->forward_s[s] += fwd[l] / M;
            pm->backward_s[s] += p->backward_s[l] / M;
        }
        herd_layer_info li;
        if (s + 1 < P && (st = herd_model_layer_info(m, (size_t)out->bounds[s + 1] - 1, &li)) == HERD_OK) {
            double bytes = (double)li.output_per_sample * sizeof(float) * out->micro_batch;
            herd_alpha_beta ab = herd_comm_link_segment(link, bytes, NULL);
            pm->transfer_s[s] = ab.alpha_s + bytes * ab.beta_s_per_byte;
        }
    }
    if (st == HERD_OK)
        st = plan_tied(m, link, out);
    if (st == HERD_OK)
        st = herd_predict_pipeline(pm, &out->pr);
    free(cost);
    free(fwd);
    return st;
}

herd_status herd_predict_plan_tensor(const herd_model *m, const herd_comm_link *link,
                                     const herd_predict_plan *p, int parts, int batch,
                                     herd_predict_tensor_plan *out)
{
    memset(out, 0, sizeof *out);
    herd_model *part = NULL;
    HERD_TRY(herd_model_create_part(m, 0, parts, &part));
    int n = p->sm.n_layers;
    double total = 0;
    herd_status st = HERD_OK;
    for (int l = 0; st == HERD_OK && l < n; l++) {
        herd_layer_info li;
        st = herd_model_layer_info(m, (size_t)l, &li);
        total += li.forward_flops;
    }
    out->parts = parts;
    for (int l = 0; st == HERD_OK && l < n; l++) {
        herd_layer_info whole, mine;
        if ((st = herd_model_layer_info(m, (size_t)l, &whole)) != HERD_OK ||
            (st = herd_model_layer_info(part, (size_t)l, &mine)) != HERD_OK)
            break;
        double fwd = p->sm.forward_s * (total > 0 ? whole.forward_flops / total : 1.0 / n);
        double share = whole.forward_flops > 0 ? mine.forward_flops / whole.forward_flops : 1.0;
        out->compute_s += share * (fwd + p->backward_s[l]);
        size_t sums[2] = {mine.tp_sum_forward, mine.tp_sum_backward};
        for (int k = 0; k < 2; k++) {
            if (!sums[k])
                continue;
            double bytes = (double)sums[k] * sizeof(float) * batch;
            herd_alpha_beta ab = herd_comm_link_segment(link, bytes, NULL);
            out->exchange_s += (parts - 1) * (ab.alpha_s + bytes * ab.beta_s_per_byte);
            out->sums++;
            out->sum_bytes += bytes;
        }
    }
    out->part_params = (double)herd_model_param_count(part);
    out->step_s = out->compute_s + out->exchange_s + p->sm.other_s;
    herd_model_free(part);
    return st;
}
