/* Shapes of token tensors: a sequence of T positions of C values per sample is the
 * activation 1 x T x C (NCHW with one channel), so rows = batch x T are contiguous. */
#ifndef HERD_NN_LAYERS_TOKENS_H
#define HERD_NN_LAYERS_TOKENS_H

#include "nn/layers/common.h"

/* An error unless l's input i is a token tensor (1 x T x C). */
static inline herd_status herd_token_input(const herd_layer *l, int i)
{
    herd_shape s = l->in_shape[i];
    if (s.c != 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "%s layer '%s' works on each position of a sequence, shaped 1 x "
                        "positions x width (an embedding's output), but gets %dx%dx%d",
                        l->ops->type, l->spec.name, s.c, s.h, s.w);
    return HERD_OK;
}

/* An error naming the op a backend lacks. */
static inline herd_status herd_token_op(const herd_layer *l, const herd_backend *be,
                                        bool has_op, const char *what)
{
    if (!has_op)
        return HERD_ERR(HERD_ERR_UNSUPPORTED,
                        "%s layer '%s': the %s backend has no %s yet; use --device cpu",
                        l->ops->type, l->spec.name, be->name, what);
    return HERD_OK;
}

#endif
