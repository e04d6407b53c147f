/* Dynamic loss scaling (Micikevicius et al. 2018; torch.cuda.amp.GradScaler's rule).
 * Half-precision gradients underflow; multiplying the loss by a large scale before
 * backward lifts them into range. Gradients are then unscaled and checked in one
 * pass: a step with any inf/NaN is skipped and the scale halved; after `window`
 * clean steps in a row the scale doubles, so it hovers just below overflow. */
#ifndef HERD_OPTIM_LOSS_SCALE_H
#define HERD_OPTIM_LOSS_SCALE_H

#include "backend/backend.h"

typedef struct herd_loss_scaler {
    float scale;
    int window;      /* clean steps before the scale doubles */
    int clean_steps; /* in a row, since the last change */
    long skipped;    /* steps skipped for overflow */
} herd_loss_scaler;

herd_status herd_loss_scaler_init(herd_loss_scaler *s, float init, int window);
/* Multiplies the loss gradient (the backward input) by the scale. */
herd_status herd_loss_scaler_scale(const herd_loss_scaler *s, const herd_backend *be,
                                   float *dlogits, size_t n);
/* After backward and the gradient reduction: unscales grads in place and updates the
 * scale. *skip is true when the step must not be applied (inf/NaN found). Fails when
 * the scale has collapsed (every step overflows: the model diverged). */
herd_status herd_loss_scaler_unscale(herd_loss_scaler *s, const herd_backend *be, float *grads,
                                     size_t n, bool *skip);
/* The scale rule alone (used by unscale; separate for tests). */
herd_status herd_loss_scaler_update(herd_loss_scaler *s, bool overflow);

#endif
