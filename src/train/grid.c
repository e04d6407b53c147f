/* The process grid of a run: pipeline stages, tensor parts inside each stage, and the
 * data-parallel replicas of both (rank = (replica x P + stage) x T + part). */
#include "core/log.h"
#include "train/run.h"

herd_status herd_run_build_grid(run *r)
{
    const herd_train_config *cfg = &r->cfg;
    r->dp = r->comm;
    /* Collective, its failures agreed inside; with stages only the groups. */
    if (cfg->tensor_parallel > 1)
        HERD_TRY(herd_tensor_par_create(cfg, r->whole, r->comm, &r->tp));
    if (cfg->pipeline_stages > 1) { /* collective, its failures agreed inside */
        herd_tp_group parts = r->tp ? herd_tensor_par_group(r->tp) : (herd_tp_group){0};
        HERD_TRY(herd_pipeline_create_split(cfg, r->whole, r->comm, r->tp ? r->tp->data : r->comm,
                                            r->tp ? &parts : NULL, &r->pp));
        r->m = r->pp->m;
        r->dp = r->pp->group;
        if (r->tp) { /* the stage's layers are split: the tensor group's sums use the stage */
            r->tp->m = r->m;
            r->tp->stage_model = true;
        }
        if (r->comm->rank == 0)
            herd_log(HERD_LOG_INFO, "pipeline of %d stages (%s, %d micro-batches):\n%s",
                     cfg->pipeline_stages, herd_pp_schedule_name(r->pp->kind), cfg->micro_batches,
                     r->pp->partition_text);
    } else if (r->tp) {
        r->m = r->tp->m;
        r->dp = r->tp->data;
    }
    if (r->tp && r->comm->rank == 0)
        herd_log(HERD_LOG_INFO, "tensor parallelism: %d parts x %d replicas%s (%zu of %zu "
                 "parameters on rank 0)", r->tp->parts, r->tp->replicas,
                 r->pp ? " in every stage" : "", r->m->n_param_floats,
                 herd_model_param_count(r->whole));
    return HERD_OK;
}
