/* Devices by name: the backend a device name stands for, and the public device API
 * over it (the default device, memory caps and counts). Here, below nn and train, so
 * everything that names a device finds its backend the same way. */
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"

/* A backend that may be missing from this build or machine: its getter said why. */
static herd_status available(const char *device, const herd_backend *(*get)(void),
                             const herd_backend **be)
{
    *be = get();
    if (*be)
        return HERD_OK;
    char why[400]; /* copied: HERD_ERR rewrites the buffer herd_last_error reads */
    snprintf(why, sizeof why, "%s", herd_last_error());
    return HERD_ERR(HERD_ERR_UNSUPPORTED, "device %s is not available: %s", device, why);
}

herd_status herd_backend_for(const char *device, const herd_backend **be)
{
    if (!device || strcmp(device, "cpu") == 0) {
        *be = herd_backend_cpu();
        return HERD_OK;
    }
    if (strcmp(device, "cuda") == 0)
        return available("cuda", herd_backend_cuda, be);
    if (strcmp(device, "sim") == 0) /* the simulated device, for tests */
        return available("sim", herd_backend_sim, be);
    return HERD_ERR(HERD_ERR_INVALID_ARG, "unknown device '%s' (use cpu, cuda or sim)", device);
}

const char *herd_default_device(void) { return herd_backend_cuda_visible() ? "cuda" : "cpu"; }

herd_status herd_device_set_memory_limit(const char *device, uint64_t bytes)
{
    const herd_backend *be;
    HERD_TRY(herd_backend_for(device, &be));
    if (!be->set_memory_limit)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "device %s has no memory limit", be->name);
    return be->set_memory_limit(bytes);
}

static herd_status counted_backend(const char *device, const herd_backend **be)
{
    HERD_TRY(herd_backend_for(device, be));
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
