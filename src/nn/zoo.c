/* The model zoo: the model files of models/, embedded at build time, by name. */
#include <stdio.h>
#include <string.h>

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
    herd_model_text_field(herd_zoo_text(name), "description", "", desc, sizeof desc);
    return desc;
}
