/* The public herd_dist_* API: thin wrappers over the communicator (herd_dist is herd_comm). */
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "dist/comm.h"

herd_status herd_dist_init(const herd_dist_config *cfg, herd_dist **out)
{
    if (!out)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_dist_init: out is NULL");
    herd_comm_config cc = {0};
    if (cfg) {
        cc.stall_warning_s = cfg->stall_warning_s;
        cc.timeout_s = cfg->timeout_s;
    }
    return herd_comm_create_default(&cc, out);
}

int herd_dist_rank(const herd_dist *d) { return d ? d->rank : 0; }
int herd_dist_size(const herd_dist *d) { return d ? d->size : 1; }
int herd_dist_local_rank(const herd_dist *d) { return d ? d->local_rank : 0; }
const char *herd_dist_backend(const herd_dist *d) { return d ? d->ops->name : "local"; }

void herd_dist_abort(herd_dist *d, int code, const char *msg)
{
    if (d) {
        d->ops->abort(d, code, msg);
        return;
    }
    /* No group: abort a group of one, which has the same meaning. */
    herd_comm *local;
    if (herd_comm_local_create(&local) == HERD_OK)
        local->ops->abort(local, code, msg);
}

void herd_dist_free(herd_dist *d) { herd_comm_destroy(d); }

herd_status herd_dist_bind_device(herd_dist *d, const char *device)
{
    if (!d || d->size == 1 || !device || strcmp(device, "cuda") != 0)
        return HERD_OK;
    return herd_backend_cuda_bind(d->local_rank, d->local_size);
}
