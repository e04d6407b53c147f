/* The model zoo and the public model API over the graph. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "nn/model.h"
#include "nn/zoo_files.h"

const char *herd_zoo_text(const char *name)
{
    for (const struct herd_zoo_file *z = herd_zoo_files; z->name; z++)
        if (strcmp(z->name, name) == 0)
            return z->text;
    return NULL;
}

const char *herd_zoo_name(size_t i)
{
    for (size_t k = 0; herd_zoo_files[k].name; k++)
        if (k == i)
            return herd_zoo_files[k].name;
    return NULL;
}

const char *herd_zoo_description(size_t i)
{
    static _Thread_local char desc[160];
    const char *name = herd_zoo_name(i);
    if (!name)
        return NULL;
    /* The description is the first comment line of the model file. */
    const char *text = herd_zoo_text(name);
    desc[0] = '\0';
    if (strncmp(text, "//", 2) == 0) {
        const char *p = text + 2;
        while (*p == ' ')
            p++;
        size_t n = strcspn(p, "\n");
        snprintf(desc, sizeof desc, "%.*s", (int)n, p);
    }
    return desc;
}

static herd_status backend_for(const char *device, const herd_backend **be)
{
    if (!device || strcmp(device, "cpu") == 0) {
        *be = herd_backend_cpu();
        return HERD_OK;
    }
    if (strcmp(device, "cuda") == 0) {
        *be = herd_backend_cuda();
        if (!*be) {
            char why[400]; /* copied: HERD_ERR rewrites the buffer herd_last_error reads */
            snprintf(why, sizeof why, "%s", herd_last_error());
            return HERD_ERR(HERD_ERR_UNSUPPORTED, "device cuda is not available: %s", why);
        }
        return HERD_OK;
    }
    if (strcmp(device, "sim") == 0) { /* the simulated device, for tests */
        *be = herd_backend_sim();
        if (!*be) {
            char why[400];
            snprintf(why, sizeof why, "%s", herd_last_error());
            return HERD_ERR(HERD_ERR_UNSUPPORTED, "device sim is not available: %s", why);
        }
        return HERD_OK;
    }
    return HERD_ERR(HERD_ERR_INVALID_ARG, "unknown device '%s' (use cpu, cuda or sim)", device);
}

static herd_status create_on(const char *name_or_path, int c, int h, int w, int classes,
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
    return create_on(name_or_path, c, h, w, classes, herd_backend_cpu(), true, out);
}

/* A model shaped for ds's images and classes on a named device. */
static herd_status create_for(const char *name_or_path, const herd_dataset *ds, const char *device,
                              bool storage, herd_model **out)
{
    if (!ds)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_model_create%s needs a dataset for the input "
                        "shape", storage ? "" : "_plan");
    const herd_backend *be;
    HERD_TRY(backend_for(device, &be));
    int c, h, w, classes;
    herd_dataset_shape(ds, &c, &h, &w, &classes);
    return create_on(name_or_path, c, h, w, classes, be, storage, out);
}

herd_status herd_model_create_device(const char *name_or_path, const herd_dataset *ds,
                                     const char *device, herd_model **out)
{
    return create_for(name_or_path, ds, device, true, out);
}

herd_status herd_model_create_plan(const char *name_or_path, const herd_dataset *ds,
                                   const char *device, herd_model **out)
{
    return create_for(name_or_path, ds, device, false, out);
}

herd_status herd_model_create(const char *name_or_path, const herd_dataset *ds, herd_model **out)
{
    return herd_model_create_device(name_or_path, ds, "cpu", out);
}

static void init_layers(herd_model *m, uint64_t seed)
{
    herd_rng rng;
    for (int i = 0; i < m->n_layers; i++) {
        herd_layer *l = &m->layers[i];
        /* By the layer's index in the whole model: a pipeline stage draws what the
         * same layers of the whole model draw. */
        herd_rng_seed(&rng, seed, 0x1417, (uint64_t)(m->layer_offset + i));
        if (l->ops->init_params)
            l->ops->init_params(l, m, &rng);
    }
}

herd_status herd_model_init_params(herd_model *m, uint64_t seed)
{
    if (!m->params)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "model '%s' is a plan without parameters "
                        "(herd_model_create_plan): nothing to initialise", m->name);
    const herd_backend *be = m->be;
    if (be->host_memory) {
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
    if (st == HERD_OK) {
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

const char *herd_default_device(void) { return herd_backend_cuda_visible() ? "cuda" : "cpu"; }

herd_status herd_device_set_memory_limit(const char *device, uint64_t bytes)
{
    const herd_backend *be;
    HERD_TRY(backend_for(device, &be));
    if (!be->set_memory_limit)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "device %s has no memory limit", be->name);
    return be->set_memory_limit(bytes);
}

static herd_status counted_backend(const char *device, const herd_backend **be)
{
    HERD_TRY(backend_for(device, be));
    if (!(*be)->memory_usage)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "herd does not count its memory on device %s by "
                        "category (its allocator has its own cap)", (*be)->name);
    return HERD_OK;
}

herd_status herd_device_memory_usage(const char *device, herd_memory_usage *out)
{
    const herd_backend *be;
    HERD_TRY(counted_backend(device, &be));
    be->memory_usage(out);
    return HERD_OK;
}

herd_status herd_device_memory_reset_peak(const char *device)
{
    const herd_backend *be;
    HERD_TRY(counted_backend(device, &be));
    be->memory_reset_peak();
    return HERD_OK;
}
