/* Training throughput: the real training step on real (or synthetic) batches from
 * the real loader, timed after warm-up steps. */
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "train/step.h"

herd_status herd_bench_train(herd_model *m, herd_dataset *ds, int batch_size, int steps,
                             int warmup, int threads, herd_bench_result *res)
{
    if (!m || !ds || !res || batch_size <= 0 || steps <= 0 || warmup < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "bench needs a model, data, batch size > 0, "
                        "steps > 0 and warmup >= 0");
    if (herd_dataset_size(ds) < (size_t)batch_size)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "the data has %zu samples, fewer than one batch of %d",
                        herd_dataset_size(ds), batch_size);
    HERD_TRY(m->be->set_threads(threads));
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    cfg.batch_size = batch_size;
    herd_loader_config lc = {
        .batch_size = batch_size, .shuffle = true, .drop_last = true, .seed = cfg.seed,
        .prefetch = 4, .workers = 1, .shard_rank = 0, .shard_count = 1,
    };
    herd_loader *loader = NULL;
    herd_optimizer *opt = NULL;
    herd_step_buffers buf = {0};
    herd_phase_times sum = {0};
    HERD_TRY(herd_loader_create(ds, &lc, &loader));
    herd_status st = herd_optimizer_create(&cfg, m, &opt);
    int epoch = 0, done = 0;
    if (st == HERD_OK)
        st = herd_loader_start_epoch(loader, epoch, 0);
    double t_begin = 0;
    while (st == HERD_OK && done < warmup + steps) {
        herd_batch b;
        bool has;
        if (done == warmup)
            t_begin = herd_now();
        st = herd_loader_next(loader, &b, &has);
        if (st != HERD_OK)
            break;
        if (!has) { /* a bench longer than an epoch wraps around */
            st = herd_loader_start_epoch(loader, ++epoch, 0);
            continue;
        }
        herd_step_stats s;
        st = herd_train_step(m, opt, &buf, &b, cfg.lr, 0.0f, (uint64_t)done, &s);
        if (done >= warmup) {
            sum.data_wait += b.wait_s;
            sum.forward += s.t.forward;
            sum.backward += s.t.backward;
            sum.optimizer += s.t.optimizer;
        }
        done++;
    }
    double elapsed = herd_now() - t_begin;
    herd_step_buffers_free(m, &buf);
    herd_optimizer_free(opt);
    herd_loader_free(loader);
    HERD_TRY(st);
    memset(res, 0, sizeof *res);
    res->steps = steps;
    res->batch_size = batch_size;
    res->threads = threads;
    res->step_s = elapsed / steps;
    res->samples_per_s = (double)steps * batch_size / elapsed;
    res->phases = sum;
    res->phases.data_wait /= steps;
    res->phases.forward /= steps;
    res->phases.backward /= steps;
    res->phases.optimizer /= steps;
    res->phases.total = res->step_s;
    return HERD_OK;
}
