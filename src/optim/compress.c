/* Gradient compression's names: herd_compress as the CLI and the signature spell it.
 * (The training configuration's defaults are src/train/train_config.c's.) */
#include <string.h>

#include "core/error.h"
#include "herd/herd.h"

const char *herd_compress_name(herd_compress c)
{
    switch (c) {
    case HERD_COMPRESS_NONE: return "none";
    case HERD_COMPRESS_FP16: return "fp16";
    case HERD_COMPRESS_BF16: return "bf16";
    }
    return "unknown";
}

herd_status herd_compress_parse(const char *name, herd_compress *out)
{
    static const herd_compress all[] = {HERD_COMPRESS_NONE, HERD_COMPRESS_FP16, HERD_COMPRESS_BF16};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (strcmp(name, herd_compress_name(all[i])) == 0) {
            *out = all[i];
            return HERD_OK;
        }
    return HERD_ERR(HERD_ERR_INVALID_ARG, "unknown compression '%s' (use fp16, bf16 or none)",
                    name ? name : "(null)");
}
