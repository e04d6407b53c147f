/* Models shaped for a data set's images and classes (the public herd_model_create*):
 * here, where both the data sets and the models are in reach, so nn needs no data. */
#include "backend/backend.h"
#include "core/error.h"
#include "data/dataset.h"
#include "nn/model.h"

static herd_status check_context(int seq_len, const char *name_or_path, int context)
{
    if (context > 0 && seq_len > context)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "sequence length %d is longer than model '%s' "
                        "reads (context %d); use --seq-len %d or less", seq_len, name_or_path,
                        context, context);
    return HERD_OK;
}

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
    bool tokens;
    int seq_len = herd_dataset_seq_len(ds, &tokens), context = 0, vocab = 0;
    HERD_TRY(herd_model_token_shape(name_or_path, &context, &vocab));
    if (tokens) {
        /* Refused before building, so the message names both lengths rather than the
         * embedding's input shape. */
        if (seq_len == 0)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: token data needs a sequence length "
                            "(herd_dataset_set_seq_len) before a model is shaped for it", ds->spec);
        HERD_TRY(check_context(seq_len, name_or_path, context));
        /* Every token must be a row of the model's table; a larger table (llm.c pads
         * GPT-2's 50257 to 50304) is fine. */
        if (context > 0 && classes > vocab)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: the data's vocabulary %d is larger than "
                            "model '%s''s %d; give the model's with tokens:FILE,%d if the tokens "
                            "fit", ds->spec, classes, name_or_path, vocab, vocab);
        classes = vocab;
    }
    /* The loss takes one label per prediction: a language model predicts at each
     * position and needs token data, whose samples have a label per position. */
    if ((context > 0) != tokens) {
        if (tokens)
            return HERD_ERR(HERD_ERR_UNSUPPORTED, "model '%s' predicts once per sample, but token "
                            "data has a label at each of %d positions; use a language model "
                            "such as gpt-nano", name_or_path, seq_len);
        return HERD_ERR(HERD_ERR_UNSUPPORTED,
                        "model '%s' is a language model (a prediction at each of up to %d "
                        "positions); training and evaluating it needs token data "
                        "(--data tokens:FILE)", name_or_path, context);
    }
    HERD_TRY(herd_model_create_on(name_or_path, c, h, w, classes, be, storage, out));
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

herd_status herd_dataset_fit_seq_len(herd_dataset *ds, const char *name_or_path, int seq_len)
{
    bool tokens;
    herd_dataset_seq_len(ds, &tokens);
    if (!tokens && seq_len == 0)
        return HERD_OK;
    if (!tokens)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "a sequence length (%d) applies to token data "
                        "(tokens:FILE), not '%s'", seq_len, ds->spec);
    int context = 0, vocab = 0;
    HERD_TRY(herd_model_token_shape(name_or_path, &context, &vocab));
    if (context == 0)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "model '%s' reads no token sequences; token data "
                        "trains a language model such as gpt-nano", name_or_path);
    /* Checked here too, before the data set is cut into sequences of a length that
     * cannot be used. */
    HERD_TRY(check_context(seq_len, name_or_path, context));
    return herd_dataset_set_seq_len(ds, seq_len ? seq_len : context);
}
