/* A stand-in so that main links until the partition branch lands (its partition.c replaces this file). */
#include <stdio.h>
#include <string.h>
#include "core/error.h"
#include "nn/partition.h"
bool herd_partition_can_cut(const herd_model *m, int b)
{
    for (int j = b; j < m->n_layers; j++)
        for (int k = 0; k < m->layers[j].spec.n_inputs; k++)
            if (m->layers[j].spec.inputs[k] < b - 1) return false;
    return true;
}
herd_status herd_partition_layer_costs(const herd_model *m, int batch, bool measure, double *cost)
{
    (void)batch; (void)measure;
    for (int i = 0; i < m->n_layers; i++) cost[i] = m->layers[i].ops->flops ? 3 * m->layers[i].ops->flops(&m->layers[i]) + 1 : 1;
    return HERD_OK;
}
herd_status herd_partition_balance(const herd_model *m, const double *cost, int stages, int *bounds)
{
    double total = 0; for (int i = 0; i < m->n_layers; i++) total += cost[i];
    bounds[0] = 0; int s = 1; double acc = 0;
    for (int i = 0; i < m->n_layers && s < stages; i++) {
        acc += cost[i];
        if (acc >= total * s / stages && i + 1 < m->n_layers && herd_partition_can_cut(m, i + 1) && i + 1 > bounds[s-1]) bounds[s++] = i + 1;
    }
    if (s < stages) return HERD_ERR(HERD_ERR_INVALID_ARG, "stub: cannot cut into %d", stages);
    bounds[stages] = m->n_layers;
    return HERD_OK;
}
herd_status herd_partition_parse(const herd_model *m, const char *split, int stages, int *bounds)
{
    bounds[0] = 0; int s = 1; char buf[256]; snprintf(buf, sizeof buf, "%s", split);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        int f = -1; for (int i = 0; i < m->n_layers; i++) if (!strcmp(m->layers[i].spec.name, t)) f = i;
        if (f <= 0 || !herd_partition_can_cut(m, f)) return HERD_ERR(HERD_ERR_INVALID_ARG, "stub: bad '%s'", t);
        if (s >= stages) return HERD_ERR(HERD_ERR_INVALID_ARG, "stub: too many");
        bounds[s++] = f;
    }
    if (s != stages) return HERD_ERR(HERD_ERR_INVALID_ARG, "stub: count");
    bounds[stages] = m->n_layers;
    return HERD_OK;
}
void herd_partition_info(const herd_model *m, const double *cost, const int *bounds, int stages, herd_stage_info *out)
{
    for (int s = 0; s < stages; s++) { memset(&out[s], 0, sizeof out[s]); out[s].first = bounds[s]; out[s].end = bounds[s+1];
        for (int i = bounds[s]; i < bounds[s+1]; i++) out[s].cost += cost[i]; }
    (void)m;
}
void herd_partition_describe(const herd_model *m, const double *cost, const int *bounds, int stages, int batch, char *out, size_t cap)
{
    (void)cost; (void)batch; size_t len = 0; out[0] = 0;
    for (int s = 0; s < stages && len < cap; s++)
        len += (size_t)snprintf(out + len, cap - len, "stage %d: layers %s..%s\n", s, m->layers[bounds[s]].spec.name, m->layers[bounds[s+1]-1].spec.name);
}
