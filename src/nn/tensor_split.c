/* Tensor parallelism's parts of whole tensors (tensor_split.h). */
#include "nn/tensor_split.h"

#include <string.h>

#include "core/error.h"

static bool element_wise(const herd_layer_spec *s)
{
    return strcmp(s->type, "relu") == 0 || strcmp(s->type, "gelu") == 0 ||
           strcmp(s->type, "dropout") == 0;
}

static bool is_linear(const herd_layer_spec *s, herd_tp_split split)
{
    return strcmp(s->type, "linear") == 0 && s->parallel == split;
}

bool herd_split_output(const herd_model *m, int i)
{
    while (i >= 0 && element_wise(&m->layers[i].spec) && m->layers[i].spec.n_inputs == 1)
        i = m->layers[i].spec.inputs[0];
    return i >= 0 && is_linear(&m->layers[i].spec, HERD_TP_COLUMN);
}

herd_status herd_split_check(const herd_model *m, int i)
{
    const herd_layer_spec *s = &m->layers[i].spec;
    bool row = is_linear(s, HERD_TP_ROW);
    for (int k = 0; k < s->n_inputs; k++) {
        int src = s->inputs[k];
        bool part = src >= 0 && herd_split_output(m, src);
        const char *from = src >= 0 ? m->layers[src].spec.name : "the model input";
        if (part && !row && !element_wise(s))
            return HERD_ERR(HERD_ERR_INVALID_ARG, "model '%s': under --tensor-parallel layer "
                            "'%s' (%s) reads '%s', which holds one part of a column-parallel "
                            "layer's features; only relu, gelu, dropout and a linear with "
                            "\"parallel\": \"row\" may follow one (docs/model-files.md)",
                            m->name, s->name, s->type, from);
        if (row && !part)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "model '%s': under --tensor-parallel layer "
                            "'%s' is row-parallel but reads '%s', which is whole on every part; "
                            "a row-parallel linear follows a column-parallel one (docs/model-files.md)",
                            m->name, s->name, from);
    }
    if (i == m->n_layers - 1 && !m->open_output && herd_split_output(m, i))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "model '%s': under --tensor-parallel its last "
                        "layer '%s' gives one part of a column-parallel layer's features; end "
                        "it with a row-parallel linear (docs/model-files.md)", m->name, s->name);
    return HERD_OK;
}

void herd_split_range(int64_t len, int part, int parts, int64_t *first, int64_t *count)
{
    int64_t base = len / parts, extra = len % parts;
    *first = part * base + (part < extra ? part : extra);
    *count = base + (part < extra ? 1 : 0);
}

int herd_model_add_split_tensor(herd_model *m, herd_layer *l, const char *suffix, int ndim,
                                const int64_t *whole, int dim, int groups, int no_decay)
{
    int parts = m->tp.size > 1 ? m->tp.size : 1;
    int64_t shape[4] = {0};
    memcpy(shape, whole, (size_t)ndim * sizeof *whole);
    if (parts > 1) {
        int64_t first, count;
        if (dim == 0) {
            herd_split_range(whole[0] / groups, m->tp.rank, parts, &first, &count);
            shape[0] = count * groups;
        } else {
            herd_split_range(whole[1], m->tp.rank, parts, &first, &count);
            shape[1] = count;
        }
    }
    int k = herd_model_add_tensor(m, l, suffix, ndim, shape, 0, no_decay);
    if (k < 0 || parts == 1)
        return k;
    herd_tensor_view *v = &m->views[k];
    v->split_dim = dim;
    v->split_groups = dim == 0 ? groups : 1;
    v->split_part = m->tp.rank;
    v->split_parts = parts;
    memcpy(v->whole_shape, whole, (size_t)ndim * sizeof *whole);
    return k;
}

void herd_split_view_range(const herd_tensor_view *v, int64_t *first, int64_t *count)
{
    if (v->split_parts <= 1) {
        *first = 0;
        *count = v->shape[0];
        return;
    }
    int d = v->split_dim;
    herd_split_range(v->whole_shape[d] / (d == 0 ? v->split_groups : 1), v->split_part,
                     v->split_parts, first, count);
}

void herd_split_copy(const herd_tensor_view *v, float *whole, float *part, bool to_part)
{
    /* Runs of run_len floats: the whole tensor once (not split), a run of whole rows per
     * block (dim 0), or a run of columns per row (dim 1). */
    int64_t runs = 1, run_len = (int64_t)v->numel, whole_stride = 0, whole_at = 0;
    if (v->split_parts > 1) {
        int64_t rows = v->whole_shape[0], cols = v->ndim > 1 ? v->whole_shape[1] : 1;
        int64_t first, count;
        if (v->split_dim == 0) {
            int64_t block = rows / v->split_groups;
            herd_split_range(block, v->split_part, v->split_parts, &first, &count);
            runs = v->split_groups, run_len = count * cols, whole_stride = block * cols;
            whole_at = first * cols;
        } else {
            herd_split_range(cols, v->split_part, v->split_parts, &first, &count);
            runs = rows, run_len = count, whole_stride = cols, whole_at = first;
        }
    }
    for (int64_t r = 0; r < runs; r++) {
        float *w = whole + r * whole_stride + whole_at, *p = part + r * run_len;
        if (to_part)
            memcpy(p, w, (size_t)run_len * sizeof *p);
        else
            memcpy(w, p, (size_t)run_len * sizeof *p);
    }
}

herd_status herd_model_plan_part(const herd_model *whole, int part, int parts, herd_model **out)
{
    herd_model *m = herd_xcalloc(1, sizeof *m);
    if (!m)
        return HERD_ERR_NOMEM;
    m->tp.rank = part; /* read by the layers' setup: set before the plan */
    m->tp.size = parts;
    herd_status st = herd_model_build_stage(m, whole, 0, whole->n_layers, false, false, 0);
    if (st != HERD_OK) {
        herd_model_free(m);
        m = NULL;
    }
    *out = m;
    return st;
}
