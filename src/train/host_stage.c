/* Host staging of a backend's arrays (host_stage.h). */
#include "train/host_stage.h"

#include <stdlib.h>

#include "core/error.h"
#include "nn/tensor_split.h"

herd_status herd_host_stage(const herd_backend *be, float *dev, size_t n, bool read, float **out)
{
    *out = dev;
    if (be->host_memory)
        return HERD_OK;
    if (!(*out = calloc(n ? n : 1, sizeof(float))))
        return HERD_NOMEM(n * sizeof(float));
    return read && n ? be->memcpy_d2h(*out, dev, n * sizeof(float)) : HERD_OK;
}

herd_status herd_host_unstage(const herd_backend *be, float *dev, float *host, size_t n, bool write,
                              herd_status st)
{
    if (host == dev)
        return st;
    if (st == HERD_OK && write && n)
        st = be->memcpy_h2d(dev, host, n * sizeof(float));
    free(host);
    return st;
}

herd_status herd_host_take_part(herd_model *part, const herd_model *whole, int first, int n)
{
    const herd_backend *be = part->be;
    float *wp = NULL, *wb = NULL, *mp = NULL, *mb = NULL;
    herd_status st = herd_host_stage(be, whole->params, whole->n_param_floats, true, &wp);
    if (st == HERD_OK)
        st = herd_host_stage(be, whole->buffers, whole->n_buffer_floats, true, &wb);
    if (st == HERD_OK)
        st = herd_host_stage(be, part->params, part->n_param_floats, false, &mp);
    if (st == HERD_OK)
        st = herd_host_stage(be, part->buffers, part->n_buffer_floats, false, &mb);
    for (int j = 0; st == HERD_OK && j < n; j++) {
        const herd_tensor_view *v = &part->views[j], *w = &whole->views[first + j];
        herd_split_copy(v, (v->is_buffer ? wb : wp) + w->offset,
                        (v->is_buffer ? mb : mp) + v->offset, true);
    }
    if (mp)
        st = herd_host_unstage(be, part->params, mp, part->n_param_floats, true, st);
    if (mb)
        st = herd_host_unstage(be, part->buffers, mb, part->n_buffer_floats, true, st);
    if (wp)
        st = herd_host_unstage(be, whole->params, wp, 0, false, st);
    if (wb)
        st = herd_host_unstage(be, whole->buffers, wb, 0, false, st);
    return st;
}
