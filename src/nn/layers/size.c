/* Checked size arithmetic for layer shapes: a model file can ask for any sizes, and a
 * product that wraps in int once turned into a request for 2^64 bytes. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "nn/layer.h"

herd_status herd_layer_checked_size(const herd_layer *l, const char *what, int ndim,
                                    const int64_t *dims, int64_t *out)
{
    char text[128] = "";
    for (int i = 0; i < ndim; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text), "%s%lld", i ? " x " : "",
                 (long long)dims[i]);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] <= 0)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "layer '%s' (%s): its %s would be %s elements; "
                            "every size must be positive", l->spec.name, l->spec.type, what, text);
        /* Checked before multiplying, so the product never overflows. */
        if (n > HERD_LAYER_MAX_ELEMS / dims[i])
            return HERD_ERR(HERD_ERR_INVALID_ARG, "layer '%s' (%s): its %s would be %s elements, "
                            "over herd's limit of %lld per tensor (4 GiB of floats); check the "
                            "layer's sizes and those of its input", l->spec.name, l->spec.type,
                            what, text, (long long)HERD_LAYER_MAX_ELEMS);
        n *= dims[i];
    }
    if (out)
        *out = n;
    return HERD_OK;
}
