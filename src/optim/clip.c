/* Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_ (L2, clip
 * coefficient max_norm / (norm + 1e-6), applied only when below 1). */
#include <math.h>

#include "core/error.h"
#include "optim/optim.h"

herd_status herd_clip_grad_norm(herd_model *m, float max_norm, const herd_group_sum *group,
                                double *norm, bool *clipped)
{
    if (!(max_norm > 0.0f) || !isfinite(max_norm))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "gradient clipping: the maximum norm is %g, "
                        "not a positive number", (double)max_norm);
    double sq;
    HERD_TRY(m->be->sum_squares(m->n_param_floats, m->grads, &sq));
    if (group && group->sum_f64)
        HERD_TRY(group->sum_f64(group->group, &sq, 1));
    double total = sqrt(sq);
    if (norm)
        *norm = total;
    if (clipped)
        *clipped = false;
    /* Every rank computed the same total, so every rank stops here alike. */
    if (!isfinite(total))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "gradient clipping: the gradient norm is %g: training "
                        "diverged (lower --lr, or use --loss-scale dynamic, which skips such steps)",
                        total);
    double coef = (double)max_norm / (total + 1e-6);
    if (coef >= 1.0)
        return HERD_OK;
    HERD_TRY(m->be->grad_unscale_check(m->n_param_floats, m->grads, (float)coef, NULL));
    if (clipped)
        *clipped = true;
    return HERD_OK;
}
