/* The public model API over the graph: a model of a given input shape on a backend,
 * and what the public functions read from a model. Models shaped for a data set are
 * created in src/train (model_create.c), which sees the data sets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "nn/model.h"
#include "nn/tensor_split.h"

herd_status herd_model_create_on(const char *name_or_path, int c, int h, int w, int classes,
                                  const herd_backend *be, bool storage, herd_model **out)
{
    if (!name_or_path || c <= 0 || h <= 0 || w <= 0 || classes <= 0 ||
        (int64_t)c * h > HERD_LAYER_MAX_ELEMS / w)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "model input shape %dx%dx%d with %d classes is invalid (sizes must be "
                        "positive, at most %lld values per sample)",
                        c, h, w, classes, (long long)HERD_LAYER_MAX_ELEMS);
    herd_layer_spec *specs = NULL;
    int n = 0;
    herd_model *m = herd_xcalloc(1, sizeof *m);
    if (!m)
        return HERD_ERR_NOMEM;
    m->be = be;
    herd_status st = herd_model_parse(name_or_path, classes, &specs, &n, m->name, sizeof m->name);
    if (st == HERD_OK) {
        m->in_c = c, m->in_h = h, m->in_w = w, m->classes = classes;
        st = storage ? herd_model_build(m, specs, n, 0) : herd_model_plan(m, specs, n);
    }
    free(specs);
    if (st != HERD_OK) {
        herd_model_free(m);
        return st;
    }
    *out = m;
    return HERD_OK;
}

herd_status herd_model_create_shape(const char *name_or_path, int c, int h, int w, int classes,
                                    herd_model **out)
{
    return herd_model_create_on(name_or_path, c, h, w, classes, herd_backend_cpu(), true, out);
}

herd_status herd_model_create_shape_plan(const char *name_or_path, int c, int h, int w,
                                         int classes, herd_model **out)
{
    return herd_model_create_on(name_or_path, c, h, w, classes, herd_backend_cpu(), false, out);
}

herd_status herd_model_token_shape(const char *name_or_path, int *context, int *vocab)
{
    herd_layer_spec *specs = NULL;
    int n = 0;
    char name[64];
    *context = *vocab = 0;
    HERD_TRY(herd_model_parse(name_or_path, 1, &specs, &n, name, sizeof name));
    for (int i = 0; i < n; i++)
        if (strcmp(specs[i].type, "embedding") == 0 && specs[i].inputs[0] < 0) {
            *context = specs[i].context;
            *vocab = specs[i].vocab;
            break;
        }
    free(specs);
    return HERD_OK;
}

size_t herd_model_param_count(const herd_model *m) { return m->n_param_floats; }

double herd_model_flops_per_sample(const herd_model *m)
{
    double f = 0;
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].ops->flops)
            f += m->layers[i].ops->flops(&m->layers[i]);
    return f;
}

const char *herd_model_name(const herd_model *m) { return m->name; }

size_t herd_model_tensor_count(const herd_model *m) { return (size_t)m->n_views; }

herd_status herd_model_tensor_info(const herd_model *m, size_t i, const char **name, int *ndim,
                                   int64_t shape[4], float **data)
{
    if (i >= (size_t)m->n_views)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "tensor index %zu out of range (model has %d)", i,
                        m->n_views);
    const herd_tensor_view *v = &m->views[i];
    if (name)
        *name = v->name;
    if (ndim)
        *ndim = v->ndim;
    if (shape)
        memcpy(shape, v->shape, sizeof v->shape);
    if (data) /* NULL for a plan, which holds no values */
        *data = m->params ? (v->is_buffer ? m->buffers : m->params) + v->offset : NULL;
    return HERD_OK;
}

size_t herd_model_layer_count(const herd_model *m) { return (size_t)m->n_layers; }

herd_status herd_model_layer_info(const herd_model *m, size_t i, herd_layer_info *out)
{
    if (i >= (size_t)m->n_layers)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "layer index %zu out of range (model has %d)", i,
                        m->n_layers);
    const herd_layer *l = &m->layers[i];
    memset(out, 0, sizeof *out);
    out->name = l->spec.name;
    out->type = l->ops->type;
    out->forward_flops = l->ops->flops ? l->ops->flops(l) : 0;
    out->output_per_sample = herd_shape_per_sample(l->out_shape);
    out->tp_sum_forward = l->tp_sum_forward;
    out->tp_sum_backward = l->tp_sum_backward;
    out->tie = l->spec.tie[0] ? l->spec.tie : NULL;
    bool input_only = true;
    for (int k = 0; k < l->spec.n_inputs; k++)
        input_only &= l->spec.inputs[k] < 0;
    out->backward_flops = (input_only ? 1.0 : 2.0) * out->forward_flops;
    for (int k = 0; k < l->n_tensors; k++) {
        const herd_tensor_view *v = &m->views[l->first_tensor + k];
        if (v->is_buffer)
            continue;
        if (out->n_params == HERD_LAYER_MAX_PARAMS)
            return HERD_ERR(HERD_ERR_UNSUPPORTED, "layer %s has more than %d parameter tensors",
                            l->spec.name, HERD_LAYER_MAX_PARAMS);
        out->param_numel[out->n_params] = v->numel;
        out->param_offset[out->n_params++] = v->offset;
    }
    return HERD_OK;
}

herd_status herd_model_create_part(const herd_model *m, int part, int parts, herd_model **out)
{
    if (!m || !out || parts < 1 || part < 0 || part >= parts)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_model_create_part: part %d of %d of %s", part,
                        parts, m ? "a model" : "no model");
    return herd_model_plan_part(m, part, parts, out);
}

herd_status herd_model_set_precision(herd_model *m, herd_precision p)
{
    if (!m)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_model_set_precision: NULL model");
    if (p < HERD_PRECISION_FP32 || p > HERD_PRECISION_FP16)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "precision %d is not a herd_precision", (int)p);
    HERD_TRY(m->be->set_precision(p)); /* refuses what the device cannot do */
    m->precision = p;
    return HERD_OK;
}

herd_precision herd_model_precision(const herd_model *m) { return m->precision; }

const char *herd_model_device(const herd_model *m) { return m->be->name; }
