/* Optimizers over the flat parameter buffer: the parameter views are grouped
 * into contiguous runs that share a weight decay, and each run is one fused
 * backend kernel call, so a step is a handful of calls whatever the model. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "optim/optim.h"

typedef struct optim_run {
    size_t offset, numel;
    float weight_decay;
} optim_run;

#define HERD_OPTIM_MAX_STATE 2

struct herd_optimizer {
    herd_optimizer_kind kind;
    const herd_backend *be;
    size_t n; /* floats in the parameter buffer */
    size_t lo, hi; /* the part this optimizer updates and keeps state for (ZeRO: a slice) */
    float momentum, beta1, beta2, eps;
    bool nesterov, decoupled;
    optim_run *runs;
    int n_runs;
    int n_state;
    float *state[HERD_OPTIM_MAX_STATE];
    const char *state_name[HERD_OPTIM_MAX_STATE];
    long steps;
};

/* Groups consecutive parameter views with the same decay whose data are adjacent in
 * the buffer, cut to the optimizer's part. Buffer views live elsewhere, so they are
 * skipped. */
static herd_status build_runs(herd_optimizer *o, const herd_train_config *cfg,
                              const herd_model *m)
{
    o->runs = herd_xcalloc((size_t)(m->n_views > 0 ? m->n_views : 1), sizeof *o->runs);
    if (!o->runs)
        return HERD_ERR_NOMEM;
    for (int i = 0; i < m->n_views; i++) {
        const herd_tensor_view *v = &m->views[i];
        if (v->is_buffer || v->numel == 0)
            continue;
        if (v->offset > m->n_param_floats || v->numel > m->n_param_floats - v->offset)
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "optimizer: parameter '%s' (offset %zu, %zu floats) lies outside the "
                            "model's %zu parameter floats; the model was built inconsistently",
                            v->name, v->offset, v->numel, m->n_param_floats);
        size_t begin = v->offset > o->lo ? v->offset : o->lo;
        size_t end = v->offset + v->numel < o->hi ? v->offset + v->numel : o->hi;
        if (begin >= end)
            continue;
        float wd = (v->no_decay && !cfg->decay_bn_bias) ? 0.0f : cfg->weight_decay;
        optim_run *last = o->n_runs > 0 ? &o->runs[o->n_runs - 1] : NULL;
        if (last && last->weight_decay == wd && last->offset + last->numel == begin) {
            last->numel += end - begin;
        } else {
            o->runs[o->n_runs++] = (optim_run){begin, end - begin, wd};
        }
    }
    return HERD_OK;
}

herd_status herd_optimizer_create(const herd_train_config *cfg, herd_model *m,
                                  herd_optimizer **out)
{
    return herd_optimizer_create_part(cfg, m, 0, m ? m->n_param_floats : 0, out);
}

herd_status herd_optimizer_create_part(const herd_train_config *cfg, herd_model *m, size_t lo,
                                       size_t hi, herd_optimizer **out)
{
    if (!cfg || !m || !out)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "optimizer_create: cfg, model and out must not be NULL");
    *out = NULL;
    if (lo > hi || hi > m->n_param_floats)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "optimizer_create: the part [%zu, %zu) is not inside the model's %zu "
                        "parameter floats", lo, hi, m->n_param_floats);
    const herd_backend *be = m->be;
    if (!be || !be->alloc || !be->free)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "optimizer_create: the model has no backend to allocate state with");
    if (cfg->optimizer != HERD_OPT_SGD && cfg->optimizer != HERD_OPT_ADAMW)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "optimizer_create: unknown optimizer kind %d; use sgd or adamw",
                        (int)cfg->optimizer);
    if (cfg->optimizer == HERD_OPT_SGD && !be->sgd_update)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "backend '%s' has no SGD kernel; try --optimizer adamw or another backend",
                        be->name ? be->name : "?");
    if (cfg->optimizer == HERD_OPT_ADAMW && !be->adamw_update)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "backend '%s' has no AdamW kernel; try --optimizer sgd or another backend",
                        be->name ? be->name : "?");
    if (cfg->optimizer == HERD_OPT_SGD && cfg->nesterov && cfg->momentum <= 0.0f)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "Nesterov momentum needs momentum > 0 (got %g); set --momentum or drop --nesterov",
                        (double)cfg->momentum);
    if (cfg->optimizer == HERD_OPT_ADAMW &&
        !(cfg->beta1 >= 0.0f && cfg->beta1 < 1.0f && cfg->beta2 >= 0.0f && cfg->beta2 < 1.0f))
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "AdamW betas must be in [0, 1) (got %g, %g); the usual values are 0.9 and 0.999",
                        (double)cfg->beta1, (double)cfg->beta2);

    herd_optimizer *o = herd_xcalloc(1, sizeof *o);
    if (!o)
        return HERD_ERR_NOMEM;
    o->kind = cfg->optimizer;
    o->be = be;
    o->n = m->n_param_floats;
    o->lo = lo;
    o->hi = hi;
    o->momentum = cfg->momentum;
    o->nesterov = cfg->nesterov;
    o->decoupled = cfg->decoupled_decay;
    o->beta1 = cfg->beta1;
    o->beta2 = cfg->beta2;
    o->eps = cfg->eps;

    herd_status st = build_runs(o, cfg, m);
    if (st != HERD_OK) {
        herd_optimizer_free(o);
        return st;
    }
    /* SGD always keeps its momentum buffer so checkpoints have the same layout
     * whatever the momentum; AdamW keeps both moments. */
    if (o->kind == HERD_OPT_SGD) {
        o->state_name[0] = "momentum";
        o->n_state = 1;
    } else {
        o->state_name[0] = "exp_avg";
        o->state_name[1] = "exp_avg_sq";
        o->n_state = 2;
    }
    size_t bytes = (hi > lo ? hi - lo : 1) * sizeof(float);
    for (int i = 0; i < o->n_state; i++) {
        herd_mem_category was = herd_mem_category_set(HERD_MEM_OPTIMIZER);
        o->state[i] = be->alloc(bytes);
        herd_mem_category_set(was);
        if (!o->state[i]) {
            herd_status st = HERD_ERR(HERD_ERR_NOMEM, "optimizer state '%s' (%zu bytes): %s",
                                      o->state_name[i], bytes, herd_last_error());
            herd_optimizer_free(o);
            return st;
        }
    }
    *out = o;
    return HERD_OK;
}

herd_status herd_optimizer_step(herd_optimizer *o, herd_model *m, float lr)
{
    if (!o || !m)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "optimizer_step: optimizer and model must not be NULL");
    if (m->n_param_floats != o->n)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "optimizer_step: the model has %zu parameter floats but the optimizer was created "
                        "for %zu; create the optimizer for this model", m->n_param_floats, o->n);
    o->steps++;
    for (int r = 0; r < o->n_runs; r++) {
        const optim_run *run = &o->runs[r];
        float *w = m->params + run->offset;
        const float *g = m->grads + run->offset;
        size_t at = run->offset - o->lo; /* in the state, which holds the part only */
        herd_status st;
        if (o->kind == HERD_OPT_SGD) {
            herd_sgd_args a = {.lr = lr, .momentum = o->momentum, .weight_decay = run->weight_decay,
                               .nesterov = o->nesterov, .decoupled = o->decoupled};
            st = o->be->sgd_update(run->numel, w, g, o->state[0] + at, &a);
        } else {
            herd_adamw_args a = {.lr = lr, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps,
                                 .weight_decay = run->weight_decay, .step = o->steps};
            st = o->be->adamw_update(run->numel, w, g, o->state[0] + at, o->state[1] + at, &a);
        }
        if (st != HERD_OK)
            return st;
    }
    return HERD_OK;
}

void herd_optimizer_free(herd_optimizer *o)
{
    if (!o)
        return;
    for (int i = 0; i < HERD_OPTIM_MAX_STATE; i++)
        if (o->state[i])
            o->be->free(o->state[i]);
    free(o->runs);
    free(o);
}

int herd_optimizer_state_count(const herd_optimizer *o) { return o ? o->n_state : 0; }

float *herd_optimizer_state(herd_optimizer *o, int i, const char **name, size_t *numel)
{
    if (!o || i < 0 || i >= o->n_state)
        return NULL;
    if (name)
        *name = o->state_name[i];
    if (numel)
        *numel = o->hi - o->lo;
    return o->state[i];
}

/* The state tensor's bytes [first, first + n) floats, or an error naming the misuse. */
static herd_status state_range(const herd_optimizer *o, int i, size_t first, size_t n, const char *op,
                               float **at)
{
    if (!o || i < 0 || i >= o->n_state)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: no optimizer state tensor %d", op, i);
    size_t len = o->hi - o->lo;
    if (first > len || n > len - first)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: floats [%zu, %zu) lie outside optimizer state "
                        "'%s' of %zu floats", op, first, first + n, o->state_name[i], len);
    *at = o->state[i] + first;
    return HERD_OK;
}

herd_status herd_optimizer_state_download(const herd_optimizer *o, int i, size_t first, size_t n,
                                          float *host)
{
    float *at = NULL;
    HERD_TRY(state_range(o, i, first, n, "optimizer_state_download", &at));
    if (n == 0)
        return HERD_OK;
    if (o->be->host_memory) { /* such a backend need not have the copies (backend.h) */
        memcpy(host, at, n * sizeof(float));
        return HERD_OK;
    }
    return o->be->memcpy_d2h(host, at, n * sizeof(float));
}

herd_status herd_optimizer_state_upload(herd_optimizer *o, int i, size_t first, size_t n,
                                        const float *host)
{
    float *at = NULL;
    HERD_TRY(state_range(o, i, first, n, "optimizer_state_upload", &at));
    if (n == 0)
        return HERD_OK;
    if (o->be->host_memory) {
        memcpy(at, host, n * sizeof(float));
        return HERD_OK;
    }
    return o->be->memcpy_h2d(at, host, n * sizeof(float));
}

void herd_optimizer_part(const herd_optimizer *o, size_t *lo, size_t *hi)
{
    *lo = o ? o->lo : 0;
    *hi = o ? o->hi : 0;
}

long herd_optimizer_steps(const herd_optimizer *o) { return o ? o->steps : 0; }

herd_optimizer_kind herd_optimizer_get_kind(const herd_optimizer *o) { return o ? o->kind : HERD_OPT_SGD; }

void herd_optimizer_set_steps(herd_optimizer *o, long steps)
{
    if (o)
        o->steps = steps < 0 ? 0 : steps;
}

herd_state_bytes herd_optimizer_state_bytes(herd_optimizer *o, const herd_model *m)
{
    herd_state_bytes b = {.params = (uint64_t)m->n_param_floats * sizeof(float),
                          .grads = (uint64_t)m->n_param_floats * sizeof(float)};
    for (int i = 0; i < herd_optimizer_state_count(o); i++) {
        const char *name;
        size_t numel;
        herd_optimizer_state(o, i, &name, &numel);
        b.optimizer_state += (uint64_t)numel * sizeof(float);
    }
    return b;
}
