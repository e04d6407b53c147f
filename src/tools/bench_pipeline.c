/* herd bench pipeline: the schedule of src/dist/pp_schedule.c run by synthetic stages
 * of fixed cost over the communicator's point-to-point transfers, as training runs it:
 * receives posted before they are needed, sends completed lazily, transfers moved on
 * while a stage computes. The bubble measured against the ideal (P-1)/(M+P-1). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/error.h"
#include "dist/pp_schedule.h"
#include "tools/bench_internal.h"

enum { TAG_ACT = 21, TAG_GRAD = 22 };

typedef struct pp_bench {
    herd_comm *c;
    const bench_pipeline_config *cfg;
    int stage, stages, n;
    char *act_in, *act_out, *grad_in, *grad_out; /* n x bytes each */
    herd_p2p *recv_act, *send_act, *recv_grad, *send_grad;
    double busy;
} pp_bench;

/* A stage's work: slept (or spun) in slices, moving transfers on between slices as
 * training does between layers. */
static void work(pp_bench *b, double ms)
{
    double t0 = herd_now(), until = t0 + ms * 1e-3;
    for (double now = t0; now < until; now = herd_now()) {
        if (!b->cfg->spin) {
            double left = until - now, slice = left < 5e-4 ? left : 5e-4;
            struct timespec ts = {0, (long)(slice * 1e9)};
            nanosleep(&ts, NULL);
        }
        if (b->c->ops->p2p_progress)
            b->c->ops->p2p_progress(b->c);
    }
    b->busy += herd_now() - t0;
}

static char *slot(char *base, const pp_bench *b, int mb) { return base + (size_t)mb * b->cfg->bytes; }

static herd_status step(pp_bench *b, const herd_pp_action *acts)
{
    herd_comm *c = b->c;
    size_t bytes = b->cfg->bytes;
    bool first = b->stage == 0, last = b->stage == b->stages - 1;
    for (int mb = 0; mb < b->n && !first; mb++)
        HERD_TRY(c->ops->p2p_start(c, &b->recv_act[mb], false, slot(b->act_in, b, mb), bytes,
                                   c->rank - 1, TAG_ACT));
    for (int i = 0; i < 2 * b->n; i++) {
        int mb = acts[i].mb;
        if (acts[i].op == HERD_PP_FWD) {
            HERD_TRY(c->ops->p2p_wait(c, &b->recv_act[mb], "bench pipeline: activations"));
            work(b, b->cfg->stage_ms);
            if (!last) {
                HERD_TRY(c->ops->p2p_start(c, &b->send_act[mb], true, slot(b->act_out, b, mb), bytes,
                                           c->rank + 1, TAG_ACT));
                HERD_TRY(c->ops->p2p_start(c, &b->recv_grad[mb], false, slot(b->grad_in, b, mb),
                                           bytes, c->rank + 1, TAG_GRAD));
            }
        } else {
            HERD_TRY(c->ops->p2p_wait(c, &b->recv_grad[mb], "bench pipeline: gradients"));
            work(b, b->cfg->stage_ms * b->cfg->backward_ratio);
            if (!first)
                HERD_TRY(c->ops->p2p_start(c, &b->send_grad[mb], true, slot(b->grad_out, b, mb),
                                           bytes, c->rank - 1, TAG_GRAD));
        }
    }
    for (int mb = 0; mb < b->n; mb++) {
        HERD_TRY(c->ops->p2p_wait(c, &b->send_act[mb], "bench pipeline: sending activations"));
        HERD_TRY(c->ops->p2p_wait(c, &b->send_grad[mb], "bench pipeline: sending gradients"));
    }
    return HERD_OK;
}

static herd_status check(const herd_comm *c, const bench_pipeline_config *cfg)
{
    if (c->size < 2 || c->size > BENCH_PIPELINE_MAX_STAGES)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bench pipeline runs one stage per rank: start 2..%d "
                        "ranks (herd run -np P), got %d", BENCH_PIPELINE_MAX_STAGES, c->size);
    if (!c->ops->p2p_start)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "the '%s' communicator has no point-to-point transfers",
                        c->ops->name);
    if (cfg->micro_batches < 1 || !(cfg->stage_ms > 0) || !(cfg->backward_ratio > 0) ||
        cfg->steps < 1 || cfg->warmup < 0 || cfg->bytes < 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bench pipeline needs micro-batches >= 1, a positive "
                        "stage time and backward ratio, steps >= 1 and bytes >= 1");
    return HERD_OK;
}

herd_status bench_pipeline(bench_session *s, const bench_pipeline_config *cfg,
                           bench_pipeline_result *out)
{
    herd_comm *c = bench_session_comm(s);
    memset(out, 0, sizeof *out);
    HERD_TRY(check(c, cfg));
    pp_bench b = {.c = c, .cfg = cfg, .stage = c->rank, .stages = c->size, .n = cfg->micro_batches};
    size_t all = (size_t)b.n * cfg->bytes;
    b.act_in = calloc(1, all), b.act_out = calloc(1, all);
    b.grad_in = calloc(1, all), b.grad_out = calloc(1, all);
    b.recv_act = calloc((size_t)b.n, sizeof(herd_p2p)), b.send_act = calloc((size_t)b.n, sizeof(herd_p2p));
    b.recv_grad = calloc((size_t)b.n, sizeof(herd_p2p)), b.send_grad = calloc((size_t)b.n, sizeof(herd_p2p));
    herd_pp_action *acts = calloc(2 * (size_t)b.n, sizeof *acts);
    herd_status st = b.act_in && b.act_out && b.grad_in && b.grad_out && b.recv_act && b.send_act &&
                             b.recv_grad && b.send_grad && acts
                         ? HERD_OK
                         : HERD_NOMEM(4 * all);
    if (st == HERD_OK)
        st = herd_pp_schedule(cfg->schedule, b.stages, b.n, b.stage, acts);
    double step_sum = 0, busy_sum = 0;
    for (int i = 0; st == HERD_OK && i < cfg->warmup + cfg->steps; i++) {
        st = c->ops->barrier(c);
        double t0 = herd_now();
        b.busy = 0;
        if (st == HERD_OK)
            st = step(&b, acts);
        double t = herd_now() - t0;
        if (st == HERD_OK)
            st = herd_comm_max_f64(c, &t); /* the step ends when its slowest stage does */
        if (i >= cfg->warmup) {
            step_sum += t;
            busy_sum += b.busy;
        }
    }
    if (st == HERD_OK) {
        double *busy = calloc((size_t)b.stages, sizeof *busy);
        double mine = busy_sum / cfg->steps;
        st = busy ? c->ops->allgather(c, &mine, busy, sizeof mine) : HERD_ERR_NOMEM;
        out->stages = b.stages;
        out->step_ms = 1e3 * step_sum / cfg->steps;
        double unit = cfg->stage_ms * (1 + cfg->backward_ratio);
        out->ideal_step_ms = (b.n + b.stages - 1) * unit;
        out->ideal_bubble = herd_pp_ideal_bubble(b.stages, b.n);
        for (int r = 0; st == HERD_OK && r < b.stages; r++) {
            out->busy_ms[r] = 1e3 * busy[r];
            out->bubble[r] = 1 - out->busy_ms[r] / out->step_ms;
            out->measured_bubble += out->bubble[r] / b.stages;
        }
        free(busy);
    }
    free(b.act_in), free(b.act_out), free(b.grad_in), free(b.grad_out);
    free(b.recv_act), free(b.send_act), free(b.recv_grad), free(b.send_grad);
    free(acts);
    return st;
}
