/* Models shaped for a data set's images and classes (the public herd_model_create*):
 * here, where both the data sets and the models are in reach, so nn needs no data. */
#include "backend/backend.h"
#include "core/error.h"
#include "nn/model.h"

/* A model shaped for ds's images and classes on a named device. */
static herd_status create_for(const char *name_or_path, const herd_dataset *ds, const char *device,
                              bool storage, herd_model **out)
{
    if (!ds)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_model_create%s needs a dataset for the input "
                        "shape", storage ? "" : "_plan");
    const herd_backend *be;
    HERD_TRY(herd_backend_for(device, &be));
    int c, h, w, classes;
    herd_dataset_shape(ds, &c, &h, &w, &classes);
    HERD_TRY(herd_model_create_on(name_or_path, c, h, w, classes, be, storage, out));
    /* Training's loss takes one label per sample: a prediction at every position needs
     * token data, which no data set gives yet. */
    if ((*out)->positions > 1) {
        int t = (*out)->positions;
        herd_model_free(*out);
        *out = NULL;
        return HERD_ERR(HERD_ERR_UNSUPPORTED,
                        "model '%s' predicts at each of %d positions (a language model); "
                        "training and evaluating it needs token data, which herd cannot read yet",
                        name_or_path, t);
    }
    return HERD_OK;
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
