/* The layer types a model file can name. */
#include <string.h>

#include "nn/layer.h"

extern const herd_layer_ops herd_layer_conv2d, herd_layer_linear, herd_layer_relu,
    herd_layer_maxpool, herd_layer_avgpool, herd_layer_global_avgpool, herd_layer_batchnorm,
    herd_layer_dropout, herd_layer_flatten, herd_layer_add, herd_layer_embedding,
    herd_layer_layernorm, herd_layer_attention, herd_layer_gelu, herd_layer_lm_head;

static const herd_layer_ops *const all_layers[] = {
    &herd_layer_conv2d,  &herd_layer_linear,  &herd_layer_relu,    &herd_layer_maxpool,
    &herd_layer_avgpool, &herd_layer_global_avgpool, &herd_layer_batchnorm,
    &herd_layer_dropout, &herd_layer_flatten, &herd_layer_add,  &herd_layer_embedding,
    &herd_layer_layernorm, &herd_layer_attention, &herd_layer_gelu, &herd_layer_lm_head,
};
#define N_LAYERS (sizeof all_layers / sizeof all_layers[0])

const herd_layer_ops *herd_layer_ops_find(const char *type)
{
    for (size_t i = 0; i < N_LAYERS; i++)
        if (strcmp(all_layers[i]->type, type) == 0)
            return all_layers[i];
    return NULL;
}

const char *const *herd_layer_type_names(void)
{
    static const char *names[N_LAYERS + 1];
    if (!names[0])
        for (size_t i = 0; i < N_LAYERS; i++)
            names[i] = all_layers[i]->type;
    return names;
}
