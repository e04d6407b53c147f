/* Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_ (L2, clip
 * coefficient max_norm / (norm + 1e-6), applied only when below 1). */
#include <math.h>

#include "core/error.h"
#include "optim/optim.h"

herd_status herd_clip_grad_norm(herd_model *m, float max_norm, const herd_group_sum *group,
                                double *norm, bool *clipped)
{
    return herd_clip_grad_norm_part(m, 0, m->n_param_floats, max_norm, group, norm, clipped);
}

herd_status herd_clip_grad_norm_part(herd_model *m, size_t first, size_t count, float max_norm,
                                     const herd_group_sum *group, double *norm, bool *clipped)
{
    if (!(max_norm > 0.0f) || !isfinite(max_norm))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "gradient clipping: the maximum norm is %g, "
                        "not a positive number", (double)max_norm);
    if (first > m->n_param_floats || count > m->n_param_floats - first)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "gradient clipping: the part [%zu, +%zu) is not "
                        "inside the model's %zu parameter floats", first, count, m->n_param_floats);
    double sq;
    HERD_TRY(m->be->sum_squares(count, m->grads + first, &sq));
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
    HERD_TRY(m->be->grad_unscale_check(count, m->grads + first, (float)coef, NULL));
    if (clipped)
        *clipped = true;
    return HERD_OK;
}
