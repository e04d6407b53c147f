/* Helpers shared by the layer files. */
#ifndef HERD_NN_LAYERS_COMMON_H
#define HERD_NN_LAYERS_COMMON_H

#include <math.h>

#include "core/error.h"
#include "nn/model.h"

/* PyTorch's default for conv and linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for
 * weight and bias (kaiming_uniform with a = sqrt(5)). */
static inline void herd_init_uniform_fan_in(float *x, size_t n, int fan_in, herd_rng *rng)
{
    float bound = 1.0f / sqrtf((float)fan_in);
    for (size_t i = 0; i < n; i++)
        x[i] = (2.0f * herd_rng_uniform(rng) - 1.0f) * bound;
}

/* N(0, std^2) (GPT-2's weights: std 0.02, and its residual projections scaled down). */
static inline void herd_init_normal(float *x, size_t n, float std, herd_rng *rng)
{
    for (size_t i = 0; i < n; i++)
        x[i] = std * herd_rng_normal(rng);
}

static inline float *herd_view_data(herd_model *m, const herd_layer *l, int k)
{
    const herd_tensor_view *v = herd_layer_view(l, m, k);
    return (v->is_buffer ? m->buffers : m->params) + v->offset;
}

/* An activation the model keeps in bf16 (l->in_format / out_format say which): the
 * model's buffers are float arrays, so its bits travel as float pointers. */
static inline const uint16_t *herd_bf16(const float *act) { return (const uint16_t *)act; }

#define HERD_LAYER_FAIL(l, ...) HERD_ERR(HERD_ERR_INVALID_ARG, __VA_ARGS__)

#endif
