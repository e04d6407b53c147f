/* Training throughput: the real training step on real (or synthetic) batches from
 * the real loader, timed after warm-up steps. Under MPI, rank 0 first runs alone
 * for the single-rank baseline, then all ranks train together (weak scaling). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "nn/loss_chunks.h"
#include "obs/observer.h"
#include "train/graph_step.h"
#include "train/step.h"
#include "train/tensor_par.h"

typedef struct bench_phase {
    double elapsed;
    herd_phase_times sum;
    herd_state_bytes state_bytes;
} bench_phase;

/* warmup + steps training steps on comm's ranks; times the last `steps`. With a
 * timeline, every step (warm-up included) is traced. */
static herd_status run_steps(herd_model *m, herd_dataset *ds, const herd_bench_config *bc,
                             herd_comm *comm, herd_timeline *tl, bench_phase *out)
{
    int batch_size = bc->batch_size, steps = bc->steps, warmup = bc->warmup;
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    cfg.batch_size = batch_size;
    if (bc->lr > 0)
        cfg.lr = bc->lr;
    herd_loader_config lc = {
        .batch_size = batch_size, .shuffle = true, .drop_last = true, .seed = cfg.seed,
        .prefetch = 4, .workers = 1, .shard_rank = comm->rank, .shard_count = comm->size,
    };
    herd_loader *loader = NULL;
    herd_optimizer *opt = NULL;
    herd_step_plan plan;
    memset(out, 0, sizeof *out);
    HERD_TRY(herd_loader_create(ds, &lc, &loader));
    herd_status st = herd_optimizer_create(&cfg, m, &opt);
    if (st == HERD_OK)
        out->state_bytes = herd_optimizer_state_bytes(opt, m);
    if (st == HERD_OK)
        st = herd_step_plan_init(&plan, m, comm, cfg.bucket_mb, HERD_WIRE_FP32, false);
    plan.timeline = tl;
    if (st == HERD_OK && bc->cuda_graphs)
        st = herd_step_graphs_create(&plan, m);
    char advice[96];
    snprintf(advice, sizeof advice, "the benchmark trains with SGD at --lr %g: lower it",
             (double)cfg.lr);
    plan.diverged_advice = advice;
    int epoch = 0, done = 0;
    if (st == HERD_OK)
        st = herd_loader_start_epoch(loader, epoch, 0);
    double t_begin = herd_now();
    while (st == HERD_OK && done < warmup + steps) {
        herd_batch b;
        bool has;
        if (done == warmup)
            t_begin = herd_now();
        double t0 = herd_now();
        st = herd_loader_next(loader, &b, &has);
        if (st != HERD_OK)
            break;
        if (!has) { /* a bench longer than an epoch wraps around */
            st = herd_loader_start_epoch(loader, ++epoch, 0);
            continue;
        }
        if (tl) { /* the loader's own measure of the wait, as in the phases below */
            double t = herd_now();
            herd_timeline_begin_step(tl, epoch + 1, done + 1);
            herd_timeline_add(tl, HERD_TL_DATA_WAIT, NULL, t - b.wait_s, t);
        }
        herd_step_stats s = {0};
        plan.step = done + 1; /* warm-up steps count, as in the timeline */
        st = herd_micro_step(m, &plan, &b, 0, 1, 0.0f, (uint64_t)done, &s);
        if (st == HERD_OK)
            st = herd_apply_step(m, opt, &plan, cfg.lr, &s);
        if (tl)
            herd_timeline_add(tl, HERD_TL_STEP, NULL, t0, herd_now());
        if (done >= warmup) {
            s.t.data_wait = b.wait_s;
            herd_phases_add(&out->sum, &s.t, 1.0); /* sum.total unused: the step time is elapsed */
        }
        done++;
    }
    out->elapsed = herd_now() - t_begin;
    if (opt)
        herd_step_plan_free(&plan, m);
    herd_optimizer_free(opt);
    herd_loader_free(loader);
    return st;
}

/* The run of all ranks (job), traced when asked: the communicators record their
 * collectives while the timeline is open. comm: the ranks that reduce gradients (the
 * job, or with tensor parallelism a part's data group); tensor: the tensor group, or NULL. */
static herd_status run_traced(herd_model *m, herd_dataset *ds, const herd_bench_config *cfg,
                              herd_comm *comm, herd_comm *job, herd_comm *tensor,
                              bench_phase *out)
{
    if (!cfg->timeline_path)
        return run_steps(m, ds, cfg, comm, NULL, out);
    herd_timeline *tl;
    size_t per_step = 2 * (size_t)m->n_layers + 8;
    HERD_TRY(herd_timeline_open(cfg->timeline_path, job, per_step, &tl));
    herd_status st = HERD_OK; /* groups of one rank run no collective */
    if (tensor && tensor->size > 1)
        st = herd_timeline_add_group(tl, tensor, "tensor group");
    if (st == HERD_OK && comm != job && comm->size > 1)
        st = herd_timeline_add_group(tl, comm, "data group");
    if (st == HERD_OK)
        st = run_steps(m, ds, cfg, comm, tl, out);
    if (st != HERD_OK) {
        herd_timeline_free(tl);
        return st;
    }
    return herd_timeline_close(tl);
}

void herd_bench_config_default(herd_bench_config *cfg)
{
    if (cfg)
        *cfg = (herd_bench_config){.batch_size = 128, .steps = 50, .warmup = 5, .threads = 1};
}

herd_status herd_bench_train(herd_model *m, herd_dataset *ds, int batch_size, int steps,
                             int warmup, int threads, herd_dist *dist, herd_bench_result *res)
{
    herd_bench_config cfg = {.batch_size = batch_size, .steps = steps, .warmup = warmup,
                             .threads = threads, .dist = dist};
    return herd_bench_run(m, ds, &cfg, res);
}

static herd_status bench_run(herd_model *m, herd_dataset *ds, const herd_bench_config *cfg,
                             herd_bench_result *res);

herd_status herd_bench_run(herd_model *m, herd_dataset *ds, const herd_bench_config *cfg,
                           herd_bench_result *res)
{
    if (!m || !ds || !cfg || !res || cfg->batch_size <= 0 || cfg->steps <= 0 || cfg->warmup < 0 ||
        !(cfg->lr >= 0))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bench needs a model, data, batch size > 0, "
                        "steps > 0, warmup >= 0 and a learning rate >= 0 (0: the default)");
    herd_train_config as_trained; /* the combinations training refuses, refused alike */
    herd_train_config_default(&as_trained);
    as_trained.recompute = cfg->recompute;
    as_trained.cuda_graphs = cfg->cuda_graphs;
    as_trained.loss_chunk = cfg->loss_chunk;
    HERD_TRY(herd_train_config_check(&as_trained));
    bool recompute = m->recompute;
    int loss_chunk = m->loss_chunk;
    HERD_TRY(herd_model_set_loss_chunk(m, cfg->loss_chunk)); /* tensor parts take both over */
    herd_model_set_recompute(m, cfg->recompute);
    herd_status st = bench_run(m, ds, cfg, res);
    herd_model_set_recompute(m, recompute);
    m->loss_chunk = loss_chunk;
    return st;
}

static herd_status bench_run(herd_model *m, herd_dataset *ds, const herd_bench_config *cfg,
                             herd_bench_result *res)
{
    int batch_size = cfg->batch_size, steps = cfg->steps;
    int threads = cfg->threads;
    herd_dist *dist = cfg->dist;
    herd_comm *local = NULL, *device_comm = NULL;
    HERD_TRY(herd_comm_local_create(&local));
    herd_comm *comm = dist ? dist : local;
    herd_status st = m->be->set_precision(m->precision); /* process-wide on a GPU */
    /* Gradients in GPU memory cross ranks through NCCL or host-staged MPI. */
    if (st == HERD_OK && !m->be->host_memory && comm->size > 1)
        st = herd_comm_device_create(comm, m->be, &device_comm);
    if (device_comm)
        comm = device_comm;
    int parts = cfg->tensor_parallel > 1 ? cfg->tensor_parallel : 1;
    if (st == HERD_OK && parts > 1 && cfg->cuda_graphs)
        st = HERD_INPUT_ERR(HERD_ERR_UNSUPPORTED, "--cuda-graphs does not work with "
                            "--tensor-parallel: its layers exchange with the tensor group "
                            "mid-step; drop one of them");
    if (st == HERD_OK && comm->size % parts != 0)
        st = HERD_ERR(HERD_ERR_INVALID_ARG, "%d ranks do not divide into groups of "
                      "--tensor-parallel %d", comm->size, parts);
    int replicas = comm->size / parts;
    if (st == HERD_OK && herd_dataset_size(ds) < (size_t)batch_size * (size_t)replicas)
        st = HERD_ERR(HERD_ERR_INVALID_ARG, "the data has %zu samples, fewer than one batch of %d "
                      "per replica", herd_dataset_size(ds), batch_size);
    if (st == HERD_OK)
        st = herd_set_rank_threads(m->be, threads, (dist ? dist : local)->local_size, &threads);
    memset(res, 0, sizeof *res);
    bench_phase alone = {0}, all = {0};
    herd_tensor_par *tp = NULL;
    herd_model *bm = m;        /* what this rank trains: m, or its tensor part */
    herd_comm *grads = comm;   /* the ranks that reduce its gradients */
    if (st == HERD_OK && parts > 1) {
        herd_train_config tcfg;
        herd_train_config_default(&tcfg);
        tcfg.tensor_parallel = parts;
        st = herd_tensor_par_create(&tcfg, m, comm, &tp);
        if (st == HERD_OK)
            bm = tp->m, grads = tp->data;
    }
    if (st == HERD_OK && comm->size > 1 && !tp) {
        /* Baseline on the same machine in the same run: rank 0 alone, the rest idle. */
        if (comm->rank == 0)
            st = run_steps(m, ds, cfg, local, NULL, &alone);
        herd_status b = comm->ops->broadcast(comm, &alone, sizeof alone, 0);
        st = st != HERD_OK ? st : b;
        if (st == HERD_OK) /* replicas start equal: rank 0 trained alone */
            st = herd_comm_broadcast_buffer(comm, m->be, m->params,
                                            m->n_param_floats * sizeof(float), 0);
        if (st == HERD_OK)
            st = herd_comm_broadcast_buffer(comm, m->be, m->buffers,
                                            m->n_buffer_floats * sizeof(float), 0);
    }
    if (st == HERD_OK)
        st = run_traced(bm, ds, cfg, grads, comm, tp ? tp->group : NULL, &all);
    /* The job is as fast as its slowest rank. */
    double slowest = all.elapsed;
    if (st == HERD_OK && comm->size > 1) {
        st = herd_comm_max_f64(comm, &slowest);
        if (st == HERD_OK) /* report rank 0's phases everywhere */
            st = comm->ops->broadcast(comm, &all, sizeof all, 0);
    }
    if (st == HERD_OK && m->be->device_info) {
        herd_device_info info;
        st = m->be->device_info(&info);
        if (st == HERD_OK) {
            snprintf(res->device_name, sizeof res->device_name, "%s", info.name);
            res->peak_tflops = info.sms * info.clock_ghz * 1e9 *
                               herd_peak_flops_per_clock_sm(info.cc_major, info.cc_minor,
                                                            m->precision) / 1e12;
        }
    }
    int ranks = comm->size; /* comm may be local or the device communicator, freed here */
    herd_tensor_par_free(tp);
    herd_comm_destroy(device_comm);
    herd_comm_destroy(local);
    HERD_TRY(st);
    res->steps = steps;
    res->batch_size = batch_size;
    res->threads = threads;
    res->ranks = ranks;
    res->step_s = slowest / steps;
    res->samples_per_s = (double)steps * batch_size * replicas / slowest;
    res->phases = all.sum;
    res->phases.data_wait /= steps;
    res->phases.forward /= steps;
    res->phases.backward /= steps;
    res->phases.comm_wait /= steps;
    res->phases.optimizer /= steps;
    res->phases.total = res->step_s;
    res->state_bytes = all.state_bytes;
    if (ranks > 1 && parts > 1) {
        res->single_rank_samples_per_s = 0; /* no baseline: a part cannot train alone */
        res->scaling_efficiency = 0;
    } else if (ranks > 1) {
        res->single_rank_samples_per_s = (double)steps * batch_size / alone.elapsed;
        res->scaling_efficiency = res->samples_per_s / (ranks * res->single_rank_samples_per_s);
    } else {
        res->single_rank_samples_per_s = res->samples_per_s;
        res->scaling_efficiency = 1.0;
    }
    return HERD_OK;
}
