/* Host staging of a backend's arrays (host_stage.h). */
#include "train/host_stage.h"

#include <stdlib.h>

#include "core/error.h"

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
