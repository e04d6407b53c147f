#include "train/step.h"

#include "core/clock.h"
#include "core/error.h"

static herd_status ensure_buffers(herd_model *m, herd_step_buffers *buf, int n)
{
    if (n <= buf->capacity)
        return HERD_OK;
    herd_step_buffers_free(m, buf);
    size_t bytes = (size_t)n * m->classes * sizeof(float);
    buf->dlogits = m->be->alloc(bytes);
    if (!buf->dlogits)
        return HERD_NOMEM(bytes);
    buf->capacity = n;
    return HERD_OK;
}

void herd_step_buffers_free(herd_model *m, herd_step_buffers *buf)
{
    m->be->free(buf->dlogits);
    buf->dlogits = NULL;
    buf->capacity = 0;
}

herd_status herd_train_step(herd_model *m, herd_optimizer *o, herd_step_buffers *buf,
                            const herd_batch *b, float lr, float label_smoothing, uint64_t seed,
                            herd_step_stats *out)
{
    double t0 = herd_now();
    HERD_TRY(ensure_buffers(m, buf, b->n));
    HERD_TRY(herd_model_reshape(m, b->n));
    herd_run_ctx ctx = herd_model_ctx(m, true, seed);
    const float *logits;
    HERD_TRY(herd_model_forward(m, &ctx, b->x, &logits));
    out->loss_sum = 0;
    out->correct = 0;
    out->samples = b->n;
    HERD_TRY(m->be->softmax_xent(b->n, m->classes, logits, b->labels, label_smoothing,
                                 buf->dlogits, &out->loss_sum, &out->correct));
    double t1 = herd_now();
    HERD_TRY(herd_model_backward(m, &ctx, b->x, buf->dlogits));
    double t2 = herd_now();
    HERD_TRY(herd_optimizer_step(o, m, lr));
    double t3 = herd_now();
    out->t.forward = t1 - t0;
    out->t.backward = t2 - t1;
    out->t.optimizer = t3 - t2;
    return HERD_OK;
}

herd_status herd_eval_dataset(herd_model *m, herd_dataset *ds, int batch_size, herd_eval_result *r)
{
    herd_loader_config lc = {
        .batch_size = batch_size, .shuffle = false, .augment = false, .drop_last = false,
        .prefetch = 2, .workers = 1, .shard_rank = 0, .shard_count = 1,
    };
    herd_loader *loader;
    HERD_TRY(herd_loader_create(ds, &lc, &loader));
    herd_status st = herd_loader_start_epoch(loader, 0, 0);
    double loss = 0;
    long correct = 0;
    size_t seen = 0;
    bool has = true;
    while (st == HERD_OK) {
        herd_batch b;
        st = herd_loader_next(loader, &b, &has);
        if (st != HERD_OK || !has)
            break;
        st = herd_model_reshape(m, b.n);
        if (st != HERD_OK)
            break;
        herd_run_ctx ctx = herd_model_ctx(m, false, 0);
        const float *logits;
        st = herd_model_forward(m, &ctx, b.x, &logits);
        double l = 0;
        long c = 0;
        if (st == HERD_OK)
            st = m->be->softmax_xent(b.n, m->classes, logits, b.labels, 0.0f, NULL, &l, &c);
        loss += l;
        correct += c;
        seen += (size_t)b.n;
    }
    herd_loader_free(loader);
    HERD_TRY(st);
    r->samples = seen;
    r->loss = seen ? loss / (double)seen : 0;
    r->acc = seen ? (double)correct / (double)seen : 0;
    return HERD_OK;
}

herd_status herd_evaluate(herd_model *m, herd_dataset *ds, int batch_size, int threads,
                          herd_eval_result *result)
{
    if (!m || !ds || !result || batch_size <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_evaluate needs a model, a dataset, a result "
                        "and a positive batch size");
    HERD_TRY(m->be->set_threads(threads));
    return herd_eval_dataset(m, ds, batch_size, result);
}
