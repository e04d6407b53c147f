/* The model graph: setup, the contiguous parameter/gradient buffers, and the
 * forward and backward passes over layers in file (topological) order. */
#include "nn/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/parse.h"
#include "nn/recompute.h"
#include "nn/tensor_split.h"

int herd_model_add_tensor(herd_model *m, herd_layer *l, const char *suffix, int ndim,
                          const int64_t *shape, int is_buffer, int no_decay)
{
    if (m->n_views == m->cap_views) {
        int cap = m->cap_views ? 2 * m->cap_views : 64;
        herd_tensor_view *v = realloc(m->views, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        m->views = v;
        m->cap_views = cap;
    }
    herd_tensor_view *v = &m->views[m->n_views];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s.%s", l->spec.name, suffix);
    v->ndim = ndim;
    v->numel = 1;
    for (int i = 0; i < ndim; i++) {
        v->shape[i] = shape[i];
        v->numel *= (size_t)shape[i];
    }
    v->is_buffer = is_buffer;
    v->no_decay = no_decay;
    /* Offsets are assigned in declaration order, so the buffers follow the layers. */
    size_t *cursor = is_buffer ? &m->n_buffer_floats : &m->n_param_floats;
    v->offset = *cursor;
    *cursor += v->numel;
    if (l->n_tensors == 0)
        l->first_tensor = m->n_views;
    l->n_tensors++;
    return m->n_views++;
}

const herd_tensor_view *herd_layer_view(const herd_layer *l, const herd_model *m, int k)
{
    return &m->views[l->first_tensor + k];
}

float *herd_layer_param(const herd_layer *l, const herd_run_ctx *ctx, int k)
{
    const herd_tensor_view *v = &ctx->views[l->first_tensor + k];
    return (v->is_buffer ? ctx->buffers : ctx->params) + v->offset;
}

float *herd_layer_grad(const herd_layer *l, const herd_run_ctx *ctx, int k)
{
    const herd_tensor_view *v = &ctx->views[l->first_tensor + k];
    return v->is_buffer ? NULL : ctx->grads + v->offset;
}

static herd_status setup_layers(herd_model *m, const herd_layer_spec *specs, int n)
{
    m->layers = herd_xcalloc((size_t)n, sizeof *m->layers);
    m->consumers = herd_xcalloc((size_t)n, sizeof *m->consumers);
    m->grad_written = herd_xcalloc((size_t)n, sizeof *m->grad_written);
    m->needs_grad = herd_xcalloc((size_t)n, sizeof *m->needs_grad);
    if (!m->layers || !m->consumers || !m->grad_written || !m->needs_grad)
        return HERD_ERR_NOMEM;
    m->n_layers = n;
    /* HERD_BF16_ACTIVATIONS=fp32 keeps fp32 activations between layers in bf16 runs
     * (to compare the two; docs/performance.md). */
    static const char *const act_formats[] = {"bf16", "fp32", NULL};
    int act_format;
    HERD_TRY(herd_env_choice("HERD_BF16_ACTIVATIONS", act_formats, &act_format));
    m->fp32_acts_only = act_format == 1;
    herd_shape input = {1, m->in_c, m->in_h, m->in_w};
    m->class_first = 0;
    m->class_count = m->classes;
    for (int i = 0; i < n; i++) {
        herd_layer *l = &m->layers[i];
        l->spec = specs[i];
        l->ops = herd_layer_ops_find(specs[i].type);
        if (!l->ops)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "layer %d (%s): unknown type '%s'", i,
                            specs[i].name, specs[i].type);
        if (l->spec.n_inputs != l->ops->n_inputs)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "layer '%s' (%s) takes %d input(s), got %d",
                            l->spec.name, l->spec.type, l->ops->n_inputs, l->spec.n_inputs);
        for (int k = 0; k < l->spec.n_inputs; k++) {
            int src = l->spec.inputs[k];
            if (src >= i || src < -1)
                return HERD_ERR(HERD_ERR_INVALID_ARG,
                                "layer '%s' reads layer %d, which does not come before it",
                                l->spec.name, src);
            l->in_shape[k] = src < 0 ? input : m->layers[src].out_shape;
            if (src >= 0)
                m->consumers[src]++;
            else
                m->input_consumers++;
        }
        if (m->tp.size > 1)
            HERD_TRY(herd_split_check(m, i));
        HERD_TRY(l->ops->setup(l, m));
        if (m->n_views > 0 && !m->views)
            return HERD_NOMEM(sizeof(herd_tensor_view));
        if (herd_shape_per_sample(l->out_shape) == 0)
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "layer '%s' (%s) produces an empty output from input %dx%dx%d; "
                            "the input is too small for this model",
                            l->spec.name, l->spec.type, l->in_shape[0].c, l->in_shape[0].h,
                            l->in_shape[0].w);
        herd_shape o = l->out_shape;
        HERD_TRY(herd_layer_checked_size(l, "output", 3, (int64_t[]){o.c, o.h, o.w}, NULL));
    }
    herd_shape out = m->layers[n - 1].out_shape;
    bool per_position = out.c == 1 && out.h > 1 && out.w == m->class_count;
    m->positions = per_position ? out.h : 1;
    if (!m->open_output && !per_position && herd_shape_per_sample(out) != (size_t)m->classes)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "the last layer ('%s') produces %zu values per sample but there are %d "
                        "classes; end the model with a linear layer with \"out\": \"classes\"",
                        m->layers[n - 1].spec.name, herd_shape_per_sample(out), m->classes);
    for (int i = 0; i < n - 1; i++)
        if (m->consumers[i] == 0)
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "the output of layer '%s' is never used; check the \"input\" names",
                            m->layers[i].spec.name);
    return HERD_OK;
}

herd_status herd_model_plan(herd_model *m, const herd_layer_spec *specs, int n)
{
    if (n <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "model '%s' has no layers", m->name);
    if (!m->be)
        m->be = herd_backend_cpu();
    return setup_layers(m, specs, n);
}

/* Layer i's draws come from its index in the whole model: a pipeline stage, or a tensor
 * part, draws what the same layer of the whole model draws. */
static void init_layer(herd_model *m, int i, uint64_t seed)
{
    herd_rng rng;
    herd_rng_seed(&rng, seed, 0x1417, (uint64_t)(m->layer_offset + i));
    herd_layer *l = &m->layers[i];
    if (l->ops->init_params)
        l->ops->init_params(l, m, &rng);
}

static void init_layers(herd_model *m, uint64_t seed)
{
    for (int i = 0; i < m->n_layers; i++)
        init_layer(m, i, seed);
}

/* A tensor part holds what the same part of the whole model holds: each layer's whole
 * tensors are drawn into host memory of their own (one layer at a time, so the most
 * held at once is the largest layer) and each view takes its part into hp, hb. */
static herd_status init_split(herd_model *m, uint64_t seed, float *hp, float *hb)
{
    herd_model *whole = NULL;
    HERD_TRY(herd_model_plan_part(m, 0, 1, &whole));
    whole->layer_offset = m->layer_offset;
    herd_status st = HERD_OK;
    for (int i = 0; st == HERD_OK && i < whole->n_layers; i++) {
        herd_layer *l = &whole->layers[i];
        herd_tensor_view *v = whole->views + l->first_tensor;
        size_t sizes[2] = {0, 0}; /* parameters, buffers */
        for (int k = 0; k < l->n_tensors; k++) { /* offsets within the layer's own copies */
            v[k].offset = sizes[v[k].is_buffer != 0];
            sizes[v[k].is_buffer != 0] += v[k].numel;
        }
        whole->params = herd_xcalloc(sizes[0] + 1, sizeof(float));
        whole->buffers = herd_xcalloc(sizes[1] + 1, sizeof(float));
        if (!whole->params || !whole->buffers)
            st = HERD_NOMEM((sizes[0] + sizes[1]) * sizeof(float));
        if (st == HERD_OK && l->n_tensors > 0)
            init_layer(whole, i, seed);
        for (int k = 0; st == HERD_OK && k < l->n_tensors; k++) {
            const herd_tensor_view *p = &m->views[l->first_tensor + k];
            herd_split_copy(p, (v[k].is_buffer ? whole->buffers : whole->params) + v[k].offset,
                            (p->is_buffer ? hb : hp) + p->offset, true);
        }
        free(whole->params);
        free(whole->buffers);
        whole->params = whole->buffers = NULL;
    }
    herd_model_free(whole);
    return st;
}

herd_status herd_model_init_params(herd_model *m, uint64_t seed)
{
    if (!m->params)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "model '%s' is a plan without parameters "
                        "(herd_model_create_plan): nothing to initialise", m->name);
    const herd_backend *be = m->be;
    if (be->host_memory && m->tp.size <= 1) {
        HERD_TRY(be->fill(m->n_param_floats, 0.0f, m->params));
        HERD_TRY(be->fill(m->n_buffer_floats, 0.0f, m->buffers));
        init_layers(m, seed);
        return HERD_OK;
    }
    /* Layers initialise through host pointers (the same random draws on every
     * backend), so a device model initialises zeroed host copies, swapped in for the
     * duration, and uploads them. */
    float *hp, *hb;
    herd_status st = herd_model_stage(m, false, &hp, &hb);
    if (st == HERD_OK && m->tp.size > 1) { /* a tensor part: through host copies too */
        st = init_split(m, seed, hp, hb);
        if (st == HERD_OK)
            st = herd_model_unstage(m, hp, hb);
    } else if (st == HERD_OK) {
        float *dp = m->params, *db = m->buffers;
        m->params = hp, m->buffers = hb;
        init_layers(m, seed);
        m->params = dp, m->buffers = db;
        st = herd_model_unstage(m, hp, hb);
    }
    free(hp);
    free(hb);
    return st;
}

herd_status herd_model_build(herd_model *m, const herd_layer_spec *specs, int n, uint64_t seed)
{
    HERD_TRY(herd_model_plan(m, specs, n));
    const herd_backend *be = m->be;
    /* Stops at the first refusal, so the message is about what did not fit. */
    herd_mem_category was = herd_mem_category_set(HERD_MEM_PARAMS);
    bool ok = (m->params = be->alloc(m->n_param_floats * sizeof(float))) &&
              (m->buffers = be->alloc(m->n_buffer_floats * sizeof(float)));
    herd_mem_category_set(HERD_MEM_GRADS);
    ok = ok && (m->grads = be->alloc(m->n_param_floats * sizeof(float)));
    herd_mem_category_set(was);
    if (!ok)
        return HERD_ERR_NOMEM; /* the allocator said why */
    return herd_model_init_params(m, seed);
}

herd_status herd_model_build_stage(herd_model *stage, const herd_model *whole, int first, int end,
                                   bool storage, bool input_grad, uint64_t seed)
{
    if (first < 0 || end > whole->n_layers || first >= end)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "model '%s': layers %d..%d do not form a stage of its "
                        "%d layers", whole->name, first, end - 1, whole->n_layers);
    snprintf(stage->name, sizeof stage->name, "%s", whole->name);
    stage->be = whole->be;
    stage->precision = whole->precision;
    stage->classes = whole->classes;
    /* A stage of a stage (a pipeline stage's slices) keeps the whole model's numbering
     * (dropout's streams) and its open end. */
    stage->layer_offset = whole->layer_offset + first;
    stage->open_output = end < whole->n_layers || whole->open_output;
    stage->input_grad = input_grad;
    stage->recompute = whole->recompute;
    if (first == 0) {
        stage->in_c = whole->in_c, stage->in_h = whole->in_h, stage->in_w = whole->in_w;
    } else {
        herd_shape in = whole->layers[first - 1].out_shape;
        stage->in_c = in.c, stage->in_h = in.h, stage->in_w = in.w;
    }
    int n = end - first;
    herd_layer_spec *specs = herd_xcalloc((size_t)n, sizeof *specs);
    if (!specs)
        return HERD_ERR_NOMEM;
    herd_status st = HERD_OK;
    for (int i = 0; i < n && st == HERD_OK; i++) {
        specs[i] = whole->layers[first + i].spec;
        for (int k = 0; k < specs[i].n_inputs; k++) {
            int src = specs[i].inputs[k];
            /* Only the previous stage's output may cross the cut. */
            if (src >= first)
                specs[i].inputs[k] = src - first;
            else if (src == first - 1 || (src < 0 && first == 0))
                specs[i].inputs[k] = -1;
            else
                st = HERD_ERR(HERD_ERR_INVALID_ARG,
                              "model '%s': a stage cannot begin at layer '%s', because layer '%s' "
                              "reads '%s', from before the cut",
                              whole->name, whole->layers[first].spec.name, specs[i].name,
                              src < 0 ? "the model input" : whole->layers[src].spec.name);
        }
    }
    if (st == HERD_OK)
        st = storage ? herd_model_build(stage, specs, n, seed) : herd_model_plan(stage, specs, n);
    free(specs);
    return st;
}

herd_status herd_model_stage(const herd_model *m, bool download, float **params, float **buffers)
{
    size_t pb = m->n_param_floats * sizeof(float), bb = m->n_buffer_floats * sizeof(float);
    *params = herd_xcalloc(1, pb ? pb : 1);
    *buffers = herd_xcalloc(1, bb ? bb : 1);
    if (!*params || !*buffers)
        return HERD_NOMEM(pb + bb);
    return download ? herd_model_download(m, *params, *buffers) : HERD_OK;
}

herd_status herd_model_download(const herd_model *m, float *params, float *buffers)
{
    HERD_TRY(m->be->memcpy_d2h(params, m->params, m->n_param_floats * sizeof(float)));
    return m->be->memcpy_d2h(buffers, m->buffers, m->n_buffer_floats * sizeof(float));
}

herd_status herd_model_unstage(const herd_model *m, const float *params, const float *buffers)
{
    HERD_TRY(m->be->memcpy_h2d(m->params, params, m->n_param_floats * sizeof(float)));
    return m->be->memcpy_h2d(m->buffers, buffers, m->n_buffer_floats * sizeof(float));
}

static void free_activations(herd_model *m)
{
    herd_recompute_free(m);
    if (!m->acts)
        return;
    for (int k = 0; k < m->n_grad_slots; k++)
        m->be->free(m->grad_slots[k]);
    free(m->acts);
    free(m->dacts);
    free(m->grad_slots);
    m->grad_slots = NULL;
    m->n_grad_slots = 0;
    m->be->free(m->scratch);
    m->be->free(m->dinput);
    m->acts = m->dacts = NULL;
    m->scratch = NULL;
    m->dinput = NULL;
    m->batch = 0;
}

static herd_status reshape(herd_model *m, int batch);

/*
 * Gradient buffers by liveness. Layer i's output gradient is first written by the
 * backward of its last consumer and last read by i's own backward, so it lives over
 * the backward steps last_consumer(i) down to i. Spans taken in the order they start
 * share a slot when the slot's previous owner ended before (a higher index); the slot
 * grows to its largest owner. A chain needs two slots and a residual net a few,
 * instead of one per layer (resnet50 at batch 32 held 4.2 GiB more with those).
 */
static herd_status plan_grad_slots(herd_model *m)
{
    int n = m->n_layers;
    int *last_use = herd_xcalloc((size_t)n, sizeof *last_use);
    int *slot_of = herd_xcalloc((size_t)n, sizeof *slot_of);
    int *slot_end = herd_xcalloc((size_t)n, sizeof *slot_end); /* previous owner's index */
    size_t *slot_bytes = herd_xcalloc((size_t)n, sizeof *slot_bytes);
    m->grad_slots = herd_xcalloc((size_t)n, sizeof *m->grad_slots);
    herd_status st = HERD_OK;
    if (!last_use || !slot_of || !slot_end || !slot_bytes || !m->grad_slots) {
        st = HERD_ERR_NOMEM;
        goto out;
    }
    for (int j = 0; j < n; j++) {
        last_use[j] = -1;
        for (int k = 0; k < m->layers[j].spec.n_inputs; k++) {
            int src = m->layers[j].spec.inputs[k];
            if (src >= 0 && j > last_use[src])
                last_use[src] = j;
        }
    }
    /* Backward visits layers from the last: spans start at step last_use, descending. */
    for (int step = n - 1; step >= 0; step--) {
        for (int i = step - 1; i >= 0; i--) {
            if (last_use[i] != step)
                continue;
            size_t bytes = herd_act_bytes(&m->layers[i]);
            int pick = -1;
            for (int k = 0; k < m->n_grad_slots; k++)
                if (slot_end[k] > step && (pick < 0 || slot_bytes[k] > slot_bytes[pick]))
                    pick = k;
            if (pick < 0)
                pick = m->n_grad_slots++;
            slot_of[i] = pick;
            slot_end[pick] = i;
            if (bytes > slot_bytes[pick])
                slot_bytes[pick] = bytes;
        }
    }
    for (int k = 0; k < m->n_grad_slots; k++) {
        m->grad_slots[k] = m->be->alloc(slot_bytes[k]);
        if (!m->grad_slots[k]) {
            st = HERD_ERR_NOMEM; /* the allocator said why */
            goto out;
        }
    }
    for (int i = 0; i < n - 1; i++)
        m->dacts[i] = m->grad_slots[slot_of[i]];
out:
    free(last_use);
    free(slot_of);
    free(slot_end);
    free(slot_bytes);
    return st;
}

/* Asked at every reshape (each step): the environment was read at setup. */
static bool bf16_acts_wanted(const herd_model *m)
{
    if (m->fp32_acts_only)
        return false;
    const herd_bf16_act_ops *ops = m->be->bf16_acts;
    return ops && ops->in_use(); /* the backend's arithmetic, which convolutions follow */
}

/* Whether layer j can read bf16 inputs, given the outputs chosen so far. */
static bool takes_bf16(const herd_model *m, const bool *bf16, int j)
{
    herd_bf16_role role = m->layers[j].ops->bf16;
    return role == HERD_BF16_PRODUCES || role == HERD_BF16_CONSUMES ||
           (role == HERD_BF16_KEEPS && bf16[j]);
}

/*
 * Which outputs are bf16: those of layers that write them (convolutions, and layers
 * that keep the format when all their inputs are bf16) with channels in whole blocks
 * of 16, when every reader takes them. The model's output (logits, or what a pipeline
 * stage sends on) and its input stay fp32. Starting from every candidate, an output
 * that breaks a rule is dropped until none does; dropping only ever makes more break.
 */
static herd_status plan_act_formats(herd_model *m)
{
    int n = m->n_layers;
    bool *bf16 = NULL;
    if (m->bf16_acts && !(bf16 = herd_xcalloc((size_t)n, sizeof *bf16)))
        return HERD_ERR_NOMEM;
    for (int i = 0; i < n && bf16; i++) {
        const herd_layer *l = &m->layers[i];
        herd_bf16_role role = l->ops->bf16;
        bf16[i] = i < n - 1 && m->consumers[i] > 0 && l->out_shape.c % 16 == 0 &&
                  (role == HERD_BF16_PRODUCES || role == HERD_BF16_KEEPS);
    }
    for (bool changed = bf16 != NULL; changed;) {
        changed = false;
        for (int i = 0; i < n; i++) {
            if (!bf16[i])
                continue;
            const herd_layer *l = &m->layers[i];
            bool ok = true;
            for (int k = 0; k < l->spec.n_inputs && l->ops->bf16 == HERD_BF16_KEEPS; k++)
                ok = ok && l->spec.inputs[k] >= 0 && bf16[l->spec.inputs[k]];
            for (int j = i + 1; j < n && ok; j++)
                for (int k = 0; k < m->layers[j].spec.n_inputs; k++)
                    if (m->layers[j].spec.inputs[k] == i && !takes_bf16(m, bf16, j))
                        ok = false;
            if (!ok) {
                bf16[i] = false;
                changed = true;
            }
        }
    }
    for (int i = 0; i < n; i++) {
        herd_layer *l = &m->layers[i];
        l->out_format = bf16 && bf16[i] ? HERD_ACT_BF16 : HERD_ACT_F32;
        for (int k = 0; k < l->spec.n_inputs; k++) {
            int src = l->spec.inputs[k];
            l->in_format[k] = src >= 0 && bf16 && bf16[src] ? HERD_ACT_BF16 : HERD_ACT_F32;
        }
    }
    free(bf16);
    return HERD_OK;
}

void herd_model_set_recompute(herd_model *m, bool on) { m->recompute = on; }

int herd_model_head_batch(const herd_model *m, int batch)
{
    return m->loss_chunk > 0 && m->loss_chunk < batch ? m->loss_chunk : batch;
}

herd_status herd_model_reshape(herd_model *m, int batch)
{
    if (batch <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "batch size must be positive, got %d", batch);
    bool bf16 = bf16_acts_wanted(m);
    if (batch == m->batch && bf16 == m->bf16_acts && m->rc && m->rc->recompute == m->recompute &&
        !herd_recompute_stale(m) &&
        m->layers[m->n_layers - 1].batch == herd_model_head_batch(m, batch))
        return HERD_OK;
    m->bf16_acts = bf16;
    herd_mem_category was = herd_mem_category_set(HERD_MEM_ACTIVATIONS);
    herd_status st = reshape(m, batch);
    herd_mem_category_set(was);
    return st;
}

/* Activations and the layers' per-batch plans for a new batch size. */
static herd_status reshape(herd_model *m, int batch)
{
    free_activations(m);
    HERD_TRY(plan_act_formats(m));
    m->acts = herd_xcalloc((size_t)m->n_layers, sizeof(float *));
    m->dacts = herd_xcalloc((size_t)m->n_layers, sizeof(float *));
    if (!m->acts || !m->dacts)
        return HERD_ERR_NOMEM;
    for (int i = 0; i < m->n_layers; i++) {
        herd_layer *l = &m->layers[i];
        for (int k = 0; k < l->spec.n_inputs; k++)
            l->in_shape[k].n = batch;
        l->out_shape.n = batch;
        l->batch = batch;
    }
    herd_layer *head = &m->layers[m->n_layers - 1];
    head->batch = head->out_shape.n = herd_model_head_batch(m, batch);
    HERD_TRY(herd_recompute_alloc(m)); /* the outputs and stashes */
    size_t largest = 0;
    for (int i = 0; i < m->n_layers; i++) {
        herd_layer *l = &m->layers[i];
        size_t bytes = herd_act_bytes(l);
        if (m->consumers[i] > 1 && bytes > largest)
            largest = bytes;
        if (l->ops->reshape) { /* the kernels' plans and scratch */
            herd_mem_category was = herd_mem_category_set(HERD_MEM_WORKSPACE);
            herd_status st = l->ops->reshape(l, m->be, batch);
            herd_mem_category_set(was);
            HERD_TRY(st);
        }
    }
    HERD_TRY(plan_grad_slots(m));
    size_t in_bytes = (size_t)batch * m->in_c * m->in_h * m->in_w * sizeof(float);
    if (m->input_grad) {
        m->dinput = m->be->alloc(in_bytes);
        if (!m->dinput)
            return HERD_ERR_NOMEM; /* the allocator said why */
        if (m->input_consumers > 1 && in_bytes > largest)
            largest = in_bytes;
    }
    if (largest) {
        /* One slot per input of a two-input layer, so both can accumulate at once. */
        m->scratch = m->be->alloc(HERD_MAX_INPUTS * largest);
        if (!m->scratch)
            return HERD_ERR_NOMEM; /* the allocator said why */
        m->scratch_floats = largest / sizeof(float);
    }
    m->batch = batch;
    return HERD_OK;
}

herd_run_ctx herd_model_ctx(const herd_model *m, bool training, uint64_t seed)
{
    herd_run_ctx ctx = {
        .be = m->be, .training = training, .seed = seed, .views = m->views,
        .params = m->params, .grads = m->grads, .buffers = m->buffers, .grad_beta = 0.0f,
        .tp = m->tp.size > 1 ? &m->tp : NULL,
    };
    return ctx;
}

static const float *layer_input(const herd_model *m, const float *x, int src)
{
    return src < 0 ? x : m->acts[src];
}

const float *herd_model_layer_input(const herd_model *m, const float *x, int i, int k)
{
    return layer_input(m, x, m->layers[i].spec.inputs[k]);
}

/* A chunked last layer holds a chunk's logits: the whole-batch calls would read past them. */
static herd_status whole_batch_only(const herd_model *m, const char *what)
{
    if (m->layers[m->n_layers - 1].batch == m->batch)
        return HERD_OK;
    return HERD_ERR(HERD_ERR_INTERNAL, "model '%s': %s over the whole batch, but its last layer "
                    "runs in chunks of %d samples (--loss-chunk): a caller that does not know them",
                    m->name, what, m->layers[m->n_layers - 1].batch);
}

herd_status herd_model_forward(herd_model *m, const herd_run_ctx *ctx, const float *x,
                               const float **logits)
{
    HERD_TRY(whole_batch_only(m, "the forward"));
    HERD_TRY(herd_model_forward_layers(m, ctx, x, m->n_layers));
    *logits = m->acts[m->n_layers - 1];
    return HERD_OK;
}

herd_status herd_model_forward_layers(herd_model *m, const herd_run_ctx *ctx, const float *x,
                                      int end)
{
    for (int i = 0; i < end; i++) {
        herd_layer *l = &m->layers[i];
        const float *in[HERD_MAX_INPUTS] = {0};
        for (int k = 0; k < l->spec.n_inputs; k++)
            in[k] = layer_input(m, x, l->spec.inputs[k]);
        if (ctx->before_forward)
            HERD_TRY(ctx->before_forward(ctx->before_user, i));
        double t0 = herd_trace_start(ctx->trace);
        HERD_TRY(l->ops->forward(l, ctx, in, m->acts[i]));
        herd_trace_end(ctx->trace, HERD_TL_FWD_LAYER, l->spec.name, t0);
        herd_recompute_forward_done(m, i);
        if (ctx->between_layers)
            ctx->between_layers(ctx->between_user);
    }
    return HERD_OK;
}

/* Whether the output of layer src (the model input: src < 0) gets a gradient. */
static bool input_needs_grad(const herd_model *m, int src)
{
    return src < 0 ? m->input_grad : m->needs_grad[src];
}

void herd_model_backward_begin(herd_model *m)
{
    memset(m->grad_written, 0, (size_t)m->n_layers * sizeof *m->grad_written);
    m->input_written = 0;
    for (int i = 0; i < m->n_layers; i++) { /* inputs come before their readers */
        const herd_layer *l = &m->layers[i];
        bool needs = l->n_tensors > 0;
        for (int k = 0; k < l->spec.n_inputs; k++)
            needs = needs || input_needs_grad(m, l->spec.inputs[k]);
        m->needs_grad[i] = needs;
    }
}

/* An output read by several layers gets its gradient summed: the first consumer seen
 * in reverse order writes it, later ones write to scratch and add (backward_done). */
void herd_model_backward_io(const herd_model *m, int i, const float *x, const float *dlogits,
                            herd_layer_io *io)
{
    const herd_layer *l = &m->layers[i];
    memset(io, 0, sizeof *io);
    for (int k = 0; k < l->spec.n_inputs; k++) {
        int src = l->spec.inputs[k];
        io->in[k] = layer_input(m, x, src);
        if (!input_needs_grad(m, src))
            continue;
        io->via_scratch[k] = (src < 0 ? m->input_written : m->grad_written[src]) > 0;
        io->din[k] = io->via_scratch[k] ? m->scratch + k * m->scratch_floats
                                        : src < 0 ? m->dinput : m->dacts[src];
    }
    io->y = m->acts[i];
    io->dy = i == m->n_layers - 1 ? dlogits : m->dacts[i];
}

herd_status herd_model_backward_done(herd_model *m, int i, const herd_layer_io *io)
{
    const herd_backend *be = m->be;
    const herd_layer *l = &m->layers[i];
    size_t input_numel = (size_t)m->batch * m->in_c * m->in_h * m->in_w;
    for (int k = 0; k < l->spec.n_inputs; k++) {
        int src = l->spec.inputs[k];
        if (!input_needs_grad(m, src))
            continue;
        if (io->via_scratch[k] && l->in_format[k] == HERD_ACT_BF16)
            HERD_TRY(be->bf16_acts->accumulate(herd_shape_numel(m->layers[src].out_shape),
                                               (const uint16_t *)io->din[k],
                                               (uint16_t *)m->dacts[src]));
        else if (io->via_scratch[k])
            HERD_TRY(src < 0 ? be->axpy(input_numel, 1.0f, io->din[k], m->dinput)
                             : be->axpy(herd_shape_numel(m->layers[src].out_shape), 1.0f,
                                        io->din[k], m->dacts[src]));
        if (src < 0)
            m->input_written++;
        else
            m->grad_written[src]++;
    }
    return HERD_OK;
}

herd_status herd_model_backward(herd_model *m, const herd_run_ctx *ctx, const float *x,
                                const float *dlogits)
{
    HERD_TRY(whole_batch_only(m, "the backward"));
    herd_model_backward_begin(m);
    return herd_model_backward_layers(m, ctx, x, dlogits, m->n_layers - 1);
}

herd_status herd_model_backward_layers(herd_model *m, const herd_run_ctx *ctx, const float *x,
                                       const float *dlogits, int from)
{
    for (int i = from; i >= 0; i--) {
        herd_layer *l = &m->layers[i];
        HERD_TRY(herd_recompute_before_backward(m, ctx, x, i));
        herd_layer_io io;
        herd_model_backward_io(m, i, x, dlogits, &io);
        double t0 = herd_trace_start(ctx->trace);
        /* No parameters and no input gradient to give: nothing to compute (its dy is
         * not written either). */
        herd_status st = m->needs_grad[i] ? l->ops->backward(l, ctx, io.in, io.y, io.dy, io.din)
                                          : HERD_OK;
        herd_trace_end(ctx->trace, HERD_TL_BWD_LAYER, l->spec.name, t0);
        if (st == HERD_OK && ctx->after_backward)
            st = ctx->after_backward(ctx->hook_user, i);
        if (ctx->between_layers)
            ctx->between_layers(ctx->between_user);
        HERD_TRY(st);
        HERD_TRY(herd_model_backward_done(m, i, &io));
    }
    return HERD_OK;
}

void herd_model_free(herd_model *m)
{
    if (!m)
        return;
    free_activations(m);
    herd_recompute_unshare(m);
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].ops && m->layers[i].ops->destroy)
            m->layers[i].ops->destroy(&m->layers[i], m->be);
    if (m->be) {
        m->be->free(m->params);
        m->be->free(m->grads);
        m->be->free(m->buffers);
    }
    free(m->layers);
    free(m->consumers);
    free(m->grad_written);
    free(m->needs_grad);
    free(m->views);
    free(m);
}
