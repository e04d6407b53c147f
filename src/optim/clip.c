/* Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_ (L2, clip
 * coefficient max_norm / (norm + 1e-6), applied only when below 1). */
#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/finite.h"
#include "optim/optim.h"

herd_status herd_clip_grad_norm(herd_model *m, float max_norm, const herd_group_sum *group,
                                double *norm, bool *clipped)
{
    return herd_clip_grad_norm_part(m, 0, m->n_param_floats, max_norm, group, norm, clipped);
}

static herd_status check_part(const herd_model *m, size_t first, size_t count)
{
    if (first > m->n_param_floats || count > m->n_param_floats - first)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "gradients: the part [%zu, +%zu) is not inside the "
                        "model's %zu parameter floats", first, count, m->n_param_floats);
    return HERD_OK;
}

static herd_status check_max(float max_norm)
{
    if (!(max_norm > 0.0f) || !isfinite(max_norm))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "gradient clipping: the maximum norm is %g, "
                        "not a positive number", (double)max_norm);
    return HERD_OK;
}

herd_status herd_grad_sum_squares_part(const herd_model *m, size_t first, size_t count,
                                       const herd_group_sum *group, double *sq)
{
    HERD_TRY(check_part(m, first, count));
    HERD_TRY(m->be->sum_squares(count, m->grads + first, sq));
    if (group && group->sum_f64)
        HERD_TRY(group->sum_f64(group->group, sq, 1));
    return HERD_OK;
}

herd_status herd_grad_sum_squares_split(const herd_model *m, size_t first, size_t count,
                                        const herd_group_sum *group,
                                        const herd_group_sum *tensor, double *sq)
{
    HERD_TRY(check_part(m, first, count));
    *sq = 0;
    for (int v = 0; v < m->n_views; v++) {
        const herd_tensor_view *t = &m->views[v];
        size_t lo = t->offset > first ? t->offset : first;
        size_t hi = t->offset + t->numel < first + count ? t->offset + t->numel : first + count;
        if (t->is_buffer || lo >= hi || (t->split_parts <= 1 && m->tp.rank != 0))
            continue;
        double part;
        HERD_TRY(m->be->sum_squares(hi - lo, m->grads + lo, &part));
        *sq += part;
    }
    if (group && group->sum_f64)
        HERD_TRY(group->sum_f64(group->group, sq, 1));
    if (tensor && tensor->sum_f64)
        HERD_TRY(tensor->sum_f64(tensor->group, sq, 1));
    return HERD_OK;
}

herd_status herd_clip_grad_to(herd_model *m, size_t first, size_t count, float max_norm,
                              double norm, bool *clipped)
{
    HERD_TRY(check_max(max_norm));
    HERD_TRY(check_part(m, first, count));
    if (clipped)
        *clipped = false;
    double coef = (double)max_norm / (norm + 1e-6);
    if (coef >= 1.0)
        return HERD_OK;
    HERD_TRY(m->be->grad_unscale_check(count, m->grads + first, (float)coef, NULL));
    if (clipped)
        *clipped = true;
    return HERD_OK;
}

herd_status herd_clip_grad_norm_part(herd_model *m, size_t first, size_t count, float max_norm,
                                     const herd_group_sum *group, double *norm, bool *clipped)
{
    HERD_TRY(check_max(max_norm));
    double sq;
    HERD_TRY(herd_grad_sum_squares_part(m, first, count, group, &sq));
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
    return herd_clip_grad_to(m, first, count, max_norm, total, clipped);
}

herd_status herd_first_nonfinite_grad(const herd_model *m, size_t first, size_t count, int *view)
{
    *view = -1;
    HERD_TRY(check_part(m, first, count));
    float *host = malloc((count ? count : 1) * sizeof *host);
    if (!host)
        return HERD_NOMEM(count * sizeof *host);
    herd_status st = m->be->memcpy_d2h(host, m->grads + first, count * sizeof *host);
    for (int v = 0; st == HERD_OK && v < m->n_views && *view < 0; v++) {
        const herd_tensor_view *t = &m->views[v];
        size_t lo = t->offset > first ? t->offset : first;
        size_t hi = t->offset + t->numel < first + count ? t->offset + t->numel : first + count;
        if (!t->is_buffer && lo < hi && herd_first_nonfinite(host + (lo - first), hi - lo) < hi - lo)
            *view = v;
    }
    free(host);
    return st;
}
