/* Saving and loading model weights as safetensors, one tensor per named view,
 * so files load in PyTorch (safetensors.torch.load_file) and numpy. */
#include "nn/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* Backend pointer of a view: host memory on the CPU backend, device memory
 * otherwise (callers copy through be->memcpy_h2d/d2h). */
static float *view_data(const herd_model *m, const herd_tensor_view *v)
{
    return (v->is_buffer ? m->buffers : m->params) + v->offset;
}

static herd_status check_views(const herd_model *m)
{
    for (int i = 0; i < m->n_views; i++) {
        const herd_tensor_view *v = &m->views[i];
        size_t cap = v->is_buffer ? m->n_buffer_floats : m->n_param_floats;
        if (v->offset > cap || v->numel > cap - v->offset || v->ndim < 0 || v->ndim > 4)
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "model '%s': tensor '%s' lies outside its buffer or has a bad shape; "
                            "the model was built inconsistently", m->name, v->name);
    }
    return HERD_OK;
}

herd_status herd_weights_write(const herd_model *m, const char *path, const char *const *keys,
                               const char *const *values, size_t n_meta)
{
    HERD_TRY(check_views(m));
    herd_st_entry *e = herd_xcalloc((size_t)(m->n_views > 0 ? m->n_views : 1), sizeof *e);
    if (!e)
        return HERD_ERR_NOMEM;
    /* A device model is written from one host copy of its parameters and buffers. */
    bool staged = !m->be->host_memory;
    float *hp = NULL, *hb = NULL;
    herd_status st = staged ? herd_model_stage(m, true, &hp, &hb) : HERD_OK;
    for (int i = 0; i < m->n_views; i++) {
        const herd_tensor_view *v = &m->views[i];
        e[i].name = v->name;
        e[i].ndim = v->ndim;
        memcpy(e[i].shape, v->shape, sizeof e[i].shape);
        e[i].data = staged ? (v->is_buffer ? hb : hp) + v->offset : view_data(m, v);
    }
    if (st == HERD_OK)
        st = herd_safetensors_write(path, e, (size_t)m->n_views, keys, values, n_meta);
    free(hp);
    free(hb);
    free(e);
    return st;
}

static void shape_str(char *buf, size_t len, int ndim, const int64_t *shape)
{
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && used < len; d++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
}

herd_status herd_weights_check(const herd_model *m, const herd_st_file *f, const char *path)
{
    HERD_TRY(check_views(m));
    for (int i = 0; i < m->n_views; i++) {
        const herd_tensor_view *v = &m->views[i];
        int ndim;
        int64_t shape[4];
        if (!herd_st_find(f, v->name, &ndim, shape))
            return HERD_ERR(HERD_ERR_FORMAT,
                            "'%s' has no tensor '%s' that model '%s' needs; was it saved from a "
                            "different model?", path, v->name, m->name);
        bool same = ndim == v->ndim;
        for (int d = 0; same && d < ndim; d++)
            same = shape[d] == v->shape[d];
        if (!same) {
            char have[64], want[64];
            shape_str(have, sizeof have, ndim, shape);
            shape_str(want, sizeof want, v->ndim, v->shape);
            return HERD_ERR(HERD_ERR_FORMAT,
                            "'%s': tensor '%s' has shape %s but model '%s' needs %s; was it saved "
                            "from a different model or input size?", path, v->name, have, m->name, want);
        }
    }
    /* Every view was found and names are unique, so equal counts mean no extras. */
    if (herd_st_count(f) != (size_t)m->n_views) {
        for (size_t i = 0; i < herd_st_count(f); i++) {
            const char *name = herd_st_name(f, i);
            int found = 0;
            for (int k = 0; k < m->n_views && !found; k++)
                found = strcmp(m->views[k].name, name) == 0;
            if (!found)
                return HERD_ERR(HERD_ERR_FORMAT,
                                "'%s' has tensor '%s' that model '%s' does not have; was it saved "
                                "from a different model?", path, name, m->name);
        }
    }
    return HERD_OK;
}

herd_status herd_weights_apply(herd_model *m, const herd_st_file *f)
{
    for (int i = 0; i < m->n_views; i++) {
        const herd_tensor_view *v = &m->views[i];
        const float *src = herd_st_find(f, v->name, NULL, NULL);
        if (!src || v->numel == 0)
            continue;
        if (m->be->host_memory) /* such a backend need not have memcpy_h2d (backend.h) */
            memcpy(view_data(m, v), src, v->numel * sizeof(float));
        else
            HERD_TRY(m->be->memcpy_h2d(view_data(m, v), src, v->numel * sizeof(float)));
    }
    return HERD_OK;
}

herd_status herd_model_save(const herd_model *m, const char *path)
{
    if (!m || !path)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "model_save: model and path must not be NULL");
    if (!m->params)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "model_save: model '%s' is a plan without parameters "
                        "(herd_model_create_plan)", m->name);
    const char *keys[] = {"format", "herd_version", "model"};
    const char *values[] = {"pt", HERD_VERSION, m->name};
    return herd_weights_write(m, path, keys, values, 3);
}

herd_status herd_model_load(herd_model *m, const char *path)
{
    if (!m || !path)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "model_load: model and path must not be NULL");
    if (!m->params)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "model_load: model '%s' is a plan without parameters "
                        "(herd_model_create_plan)", m->name);
    herd_st_file *f;
    HERD_TRY(herd_safetensors_read(path, &f));
    /* Everything is checked before anything is copied, so a failed load leaves
     * the model as it was. */
    herd_status st = herd_weights_check(m, f, path);
    if (st == HERD_OK)
        st = herd_weights_apply(m, f);
    herd_st_free(f);
    return st;
}
