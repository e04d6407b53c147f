#include "optim/loss_scale.h"

#include <float.h>
#include <math.h>

#include "core/error.h"

/* Below this the scale can no longer rescue anything: gradients are inf/NaN at any
 * scale, i.e. the loss itself diverged. 2^-24 is the smallest fp16 subnormal. */
#define MIN_SCALE 5.9604645e-8f

herd_status herd_loss_scaler_init(herd_loss_scaler *s, float init, int window)
{
    if (!(init >= 1.0f) || !isfinite(init) || window < 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "loss scaling needs an initial scale >= 1 (got %g) and a growth window "
                        ">= 1 step (got %d)",
                        (double)init, window);
    *s = (herd_loss_scaler){.scale = init, .window = window};
    return HERD_OK;
}

herd_status herd_loss_scaler_scale(const herd_loss_scaler *s, const herd_backend *be,
                                   float *dlogits, size_t n)
{
    /* Overflow here shows up in the gradients, where it is checked. */
    return be->grad_unscale_check(n, dlogits, s->scale, NULL);
}

herd_status herd_loss_scaler_update(herd_loss_scaler *s, bool overflow)
{
    if (overflow) {
        s->skipped++;
        s->clean_steps = 0;
        s->scale *= 0.5f;
        if (s->scale < MIN_SCALE)
            return HERD_ERR(HERD_ERR_INTERNAL,
                            "gradients are inf or NaN at every loss scale (now %g after %ld "
                            "skipped steps): training diverged; lower --lr or check the data",
                            (double)s->scale, s->skipped);
        return HERD_OK;
    }
    if (++s->clean_steps >= s->window) {
        s->clean_steps = 0;
        if (s->scale <= FLT_MAX / 2) /* stays finite */
            s->scale *= 2.0f;
    }
    return HERD_OK;
}

herd_status herd_loss_scaler_unscale(herd_loss_scaler *s, const herd_backend *be, float *grads,
                                     size_t n, bool *skip)
{
    bool overflow = false;
    HERD_TRY(be->grad_unscale_check(n, grads, 1.0f / s->scale, &overflow));
    *skip = overflow;
    return herd_loss_scaler_update(s, overflow);
}
