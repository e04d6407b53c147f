/* --deterministic with pipeline stages (docs/determinism.md): the exact grid of the whole
 * model, which a checkpoint holds, gathered from the stages and given back to them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "train/pipeline.h"

int herd_pipeline_stage_first_view(const herd_pipeline *pp, const herd_model *whole, int s)
{
    int first = 0;
    for (int i = 0; i < pp->bounds[s]; i++)
        first += whole->layers[i].n_tensors;
    return first;
}

int herd_pipeline_first_view(const herd_pipeline *pp, const herd_model *whole)
{
    return herd_pipeline_stage_first_view(pp, whole, pp->stage);
}

herd_status herd_pipeline_exact_grid_text(herd_pipeline *pp, const herd_model *whole,
                                          const herd_exact_sum *e, char *buf, size_t size)
{
    buf[0] = '\0';
    int n = whole->n_views, first = herd_pipeline_first_view(pp, whole);
    /* Replica 0's stages each put theirs in place, and a count of the stages that have
     * one; every view is written by exactly one rank, so the sum is the grid. */
    double *all = calloc((size_t)n + 1, sizeof *all);
    int *grid = malloc(((size_t)n + 1) * sizeof *grid);
    if (!all || !grid) {
        free(all);
        free(grid);
        return HERD_NOMEM(((size_t)n + 1) * sizeof *all);
    }
    /* The last stage's copy of a tied token table (its view past the whole model's)
     * adds nothing to its sums: its grid stays 0 and is not kept. */
    if (pp->replica == 0 && e->have_grid) {
        for (int v = 0; v < pp->m->n_views && first + v < n; v++)
            all[first + v] = e->grid[v];
        all[n] = 1;
    }
    herd_status st = pp->job->size > 1 ? pp->job->ops->allreduce_f64(pp->job, all, n + 1) : HERD_OK;
    if (st == HERD_OK && all[n] == pp->stages) {
        for (int v = 0; v < n; v++)
            grid[v] = (int)lrint(all[v]);
        herd_exact_grid_format(grid, n, buf, size);
    }
    free(all);
    free(grid);
    return st;
}

herd_status herd_pipeline_set_exact_grid_text(herd_pipeline *pp, const herd_model *whole,
                                              herd_exact_sum *e, const char *text)
{
    int n = whole->n_views, first = herd_pipeline_first_view(pp, whole);
    int *grid = malloc(((size_t)n + 1) * sizeof *grid);
    if (!grid)
        return HERD_NOMEM(((size_t)n + 1) * sizeof *grid);
    herd_status st = herd_exact_grid_parse(text, n, whole->name, grid);
    if (st == HERD_OK) {
        for (int v = 0; v < pp->m->n_views; v++)
            e->grid[v] = first + v < n ? grid[first + v] : 0; /* a tied copy's: see above */
        e->have_grid = true;
    }
    free(grid);
    return st;
}
