/* Pipeline partitioning (partition.h): valid cuts, per-layer costs, the split that
 * minimises the slowest stage, --stage-split, and the table rank 0 prints. */
#include "nn/partition.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "nn/tensor_split.h"

/* The earliest layer that layers from b on read (-1: the model input). */
static int earliest_read_from(const herd_model *m, int b, int *reader)
{
    int earliest = b - 1;
    for (int j = b; j < m->n_layers; j++)
        for (int k = 0; k < m->layers[j].spec.n_inputs; k++)
            if (m->layers[j].spec.inputs[k] < earliest) {
                earliest = m->layers[j].spec.inputs[k];
                if (reader)
                    *reader = j;
            }
    return earliest;
}

bool herd_partition_can_cut(const herd_model *m, int b)
{
    return b > 0 && b < m->n_layers && earliest_read_from(m, b, NULL) >= b - 1 &&
           !herd_split_output(m, b - 1); /* no tensor part crosses */
}

/* One layer alone, timed: forward and backward at `batch`, best of three. */
static herd_status time_layer(const herd_model *m, int i, int batch, double *seconds)
{
    const herd_layer *l = &m->layers[i];
    herd_model *one = herd_xcalloc(1, sizeof *one);
    if (!one)
        return HERD_ERR_NOMEM;
    snprintf(one->name, sizeof one->name, "%s", m->name);
    one->be = m->be;
    one->in_c = l->in_shape[0].c, one->in_h = l->in_shape[0].h, one->in_w = l->in_shape[0].w;
    one->classes = m->classes;
    one->open_output = true;
    one->layer_offset = m->layer_offset + i;
    bool reads_input = false;
    /* A two-input layer (add) reads the input and a ReLU of it, which is timed with
     * it: a layer may not read one tensor twice, and a ReLU costs what an add does. */
    herd_layer_spec spec[2];
    int n_specs = 0;
    if (l->spec.n_inputs > 1) {
        memset(&spec[0], 0, sizeof spec[0]);
        snprintf(spec[0].type, sizeof spec[0].type, "relu");
        snprintf(spec[0].name, sizeof spec[0].name, "partition.relu");
        spec[0].n_inputs = 1;
        spec[0].inputs[0] = -1;
        n_specs = 1;
    }
    spec[n_specs] = l->spec;
    for (int k = 0; k < l->spec.n_inputs; k++) {
        reads_input |= l->spec.inputs[k] < 0;
        spec[n_specs].inputs[k] = k == 0 ? -1 : 0;
    }
    one->input_grad = !reads_input; /* as in the model: no gradient for the data */
    size_t in_n = 0, out_n = 0;
    float *x = NULL, *dy = NULL;
    herd_status st = herd_model_build(one, spec, n_specs + 1, 1);
    if (st == HERD_OK)
        st = herd_model_reshape(one, batch);
    if (st == HERD_OK) {
        in_n = (size_t)batch * one->in_c * one->in_h * one->in_w;
        out_n = herd_shape_numel(one->layers[n_specs].out_shape);
        x = one->be->alloc(in_n * sizeof(float));
        dy = one->be->alloc(out_n * sizeof(float));
        if (!x || !dy)
            st = HERD_NOMEM((in_n + out_n) * sizeof(float));
    }
    /* An embedding reads token ids: whole numbers below its vocabulary. */
    if (st == HERD_OK)
        st = one->be->fill(in_n, strcmp(l->spec.type, "embedding") == 0 ? 0.0f : 0.5f, x);
    if (st == HERD_OK)
        st = one->be->fill(out_n, 0.01f, dy);
    double best = DBL_MAX;
    for (int rep = 0; rep < 3 && st == HERD_OK; rep++) {
        herd_run_ctx ctx = herd_model_ctx(one, true, 1);
        const float *y;
        double t0 = herd_now();
        st = herd_model_forward(one, &ctx, x, &y);
        if (st == HERD_OK)
            st = herd_model_backward(one, &ctx, x, dy);
        double t = herd_now() - t0;
        if (t < best)
            best = t;
    }
    if (one->be) {
        one->be->free(x);
        one->be->free(dy);
    }
    herd_model_free(one);
    *seconds = best / batch;
    return st;
}

herd_status herd_partition_layer_costs(const herd_model *m, int batch, bool measure, double *cost)
{
    if (batch < 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "layer costs need a batch of at least 1, got %d", batch);
    for (int i = 0; i < m->n_layers; i++) {
        if (measure) {
            HERD_TRY(time_layer(m, i, batch, &cost[i]));
            continue;
        }
        herd_layer_info info;
        HERD_TRY(herd_model_layer_info(m, (size_t)i, &info));
        cost[i] = info.forward_flops + info.backward_flops;
    }
    return HERD_OK;
}

herd_status herd_partition_balance(const herd_model *m, const double *cost, int stages, int *bounds)
{
    int n = m->n_layers, cuts = 0;
    for (int b = 1; b < n; b++)
        cuts += herd_partition_can_cut(m, b);
    if (stages < 1 || stages > cuts + 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "model '%s' can be cut into at most %d stages (a stage begins only where one "
                        "whole tensor crosses, so residual blocks, and a column-parallel linear "
                        "with the row-parallel one after it, stay whole); %d stages were asked for",
                        m->name, cuts + 1, stages);
    /* best[k][j]: the slowest stage's cost when layers 0..j-1 form k+1 stages. */
    size_t cells = (size_t)stages * (size_t)(n + 1);
    double *best = malloc(cells * sizeof *best), *prefix = malloc((size_t)(n + 1) * sizeof *prefix);
    int *from = malloc(cells * sizeof *from);
    if (!best || !prefix || !from) {
        free(best), free(prefix), free(from);
        return HERD_ERR_NOMEM;
    }
    prefix[0] = 0;
    for (int i = 0; i < n; i++)
        prefix[i + 1] = prefix[i] + cost[i];
#define AT(k, j) ((size_t)(k) * (size_t)(n + 1) + (size_t)(j))
    for (int j = 0; j <= n; j++) {
        best[AT(0, j)] = prefix[j];
        from[AT(0, j)] = 0;
    }
    for (int k = 1; k < stages; k++)
        for (int j = 0; j <= n; j++) {
            best[AT(k, j)] = DBL_MAX;
            from[AT(k, j)] = -1;
            /* Stage k is layers i..j-1, beginning at a valid cut i. */
            for (int i = 1; i < j; i++) {
                if (!herd_partition_can_cut(m, i) || best[AT(k - 1, i)] == DBL_MAX)
                    continue;
                double slowest = best[AT(k - 1, i)];
                double mine = prefix[j] - prefix[i];
                if (mine > slowest)
                    slowest = mine;
                if (slowest < best[AT(k, j)]) { /* strictly: ties keep the earliest cut */
                    best[AT(k, j)] = slowest;
                    from[AT(k, j)] = i;
                }
            }
        }
    bounds[stages] = n;
    for (int k = stages - 1, j = n; k > 0; k--) {
        j = from[AT(k, j)];
        bounds[k] = j;
    }
    bounds[0] = 0;
#undef AT
    free(best), free(prefix), free(from);
    return HERD_OK;
}

static int find_layer(const herd_model *m, const char *name, size_t len)
{
    for (int i = 0; i < m->n_layers; i++)
        if (strlen(m->layers[i].spec.name) == len && strncmp(m->layers[i].spec.name, name, len) == 0)
            return i;
    return -1;
}

/* "conv2, relu4, ..." : the names where a stage may begin, for error messages. */
static void valid_names(const herd_model *m, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (int b = 1; b < m->n_layers && len + 1 < cap; b++)
        if (herd_partition_can_cut(m, b))
            len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? ", " : "", m->layers[b].spec.name);
    if (len + 1 >= cap && cap > 4)
        strcpy(out + cap - 4, "...");
}

herd_status herd_partition_parse(const herd_model *m, const char *split, int stages, int *bounds)
{
    char names[1024];
    valid_names(m, names, sizeof names);
    int count = 0;
    const char *p = split;
    bounds[0] = 0;
    while (p && *p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0)
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "--stage-split '%s': an empty layer name at position %ld", split,
                            (long)(p - split) + 1);
        int b = find_layer(m, p, len);
        if (b < 0)
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "--stage-split '%s': model '%s' has no layer '%.*s'; stages may begin at: %s",
                            split, m->name, (int)len, p, names);
        if (b == 0)
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "--stage-split '%s': '%.*s' is the first layer, where stage 0 begins; name "
                            "where stages 1.. begin", split, (int)len, p);
        int reader = -1;
        if (earliest_read_from(m, b, &reader) < b - 1) {
            int src = -2;
            for (int k = 0; k < m->layers[reader].spec.n_inputs; k++)
                if (m->layers[reader].spec.inputs[k] < b - 1)
                    src = m->layers[reader].spec.inputs[k];
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "--stage-split '%s': a stage cannot begin at '%.*s': layer '%s' reads '%s', "
                            "from before it (a cut must leave one tensor crossing; a residual block "
                            "stays whole); stages may begin at: %s",
                            split, (int)len, p, m->layers[reader].spec.name,
                            src < 0 ? "the model input" : m->layers[src].spec.name, names);
        }
        if (herd_split_output(m, b - 1))
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "--stage-split '%s': a stage cannot begin at '%.*s': '%s' gives one "
                            "tensor part of a column-parallel layer's features, which a "
                            "row-parallel layer after it sums; stages may begin at: %s",
                            split, (int)len, p, m->layers[b - 1].spec.name, names);
        if (count + 1 >= stages)
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "--stage-split '%s': --pipeline-stages %d needs %d name%s, got more", split,
                            stages, stages - 1, stages - 1 == 1 ? "" : "s");
        if (b <= bounds[count])
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "--stage-split '%s': '%.*s' does not come after '%s'; name the layers in "
                            "model order, each once", split, (int)len, p,
                            m->layers[bounds[count]].spec.name);
        bounds[++count] = b;
        p = comma ? comma + 1 : NULL;
        if (comma && !*p)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "--stage-split '%s': ends with a comma", split);
    }
    if (count != stages - 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "--stage-split '%s': --pipeline-stages %d needs %d name%s, got %d", split,
                        stages, stages - 1, stages - 1 == 1 ? "" : "s", count);
    bounds[stages] = m->n_layers;
    return HERD_OK;
}

void herd_partition_info(const herd_model *m, const double *cost, const int *bounds, int stages,
                         herd_stage_info *out)
{
    for (int s = 0; s < stages; s++) {
        herd_stage_info *in = &out[s];
        memset(in, 0, sizeof *in);
        in->first = bounds[s];
        in->end = bounds[s + 1];
        for (int i = in->first; i < in->end; i++) {
            const herd_layer *l = &m->layers[i];
            in->cost += cost ? cost[i] : 0;
            in->activation_bytes += herd_shape_per_sample(l->out_shape) * sizeof(float);
            for (int k = 0; k < l->n_tensors; k++) {
                const herd_tensor_view *v = &m->views[l->first_tensor + k];
                in->params += v->is_buffer ? 0 : v->numel;
            }
        }
        if (s + 1 < stages)
            in->boundary_bytes = herd_shape_per_sample(m->layers[in->end - 1].out_shape) * sizeof(float);
    }
}

void herd_partition_describe(const herd_model *m, const double *cost, const int *bounds, int stages,
                             int batch, char *out, size_t cap)
{
    herd_stage_info info[64];
    if (stages > 64)
        stages = 64;
    herd_partition_info(m, cost, bounds, stages, info);
    double total = 0;
    for (int s = 0; s < stages; s++)
        total += info[s].cost;
    size_t len = 0;
    out[0] = '\0';
    for (int s = 0; s < stages && len + 1 < cap; s++) {
        const herd_stage_info *in = &info[s];
        double mib = 1.0 / (1024.0 * 1024.0);
        len += (size_t)snprintf(out + len, cap - len,
                                "%sstage %d: layers %s..%s (%d), %zu parameters (%.1f MiB), cost %.1f%%, "
                                "activations %.1f MiB per micro-batch of %d",
                                s ? "\n" : "", s, m->layers[in->first].spec.name,
                                m->layers[in->end - 1].spec.name, in->end - in->first, in->params,
                                (double)in->params * sizeof(float) * mib,
                                total > 0 ? 100.0 * in->cost / total : 0.0,
                                (double)in->activation_bytes * batch * mib, batch);
        if (in->boundary_bytes && len + 1 < cap)
            len += (size_t)snprintf(out + len, cap - len, ", sends %.1f KiB",
                                    (double)in->boundary_bytes * batch / 1024.0);
    }
}

herd_status herd_model_pipeline_split(const herd_model *m, int stages, const double *cost,
                                      int *bounds)
{
    if (!m || !bounds)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_model_pipeline_split needs a model and bounds");
    if (cost)
        return herd_partition_balance(m, cost, stages, bounds);
    double *flops = herd_xcalloc((size_t)m->n_layers, sizeof *flops);
    if (!flops)
        return HERD_ERR_NOMEM;
    herd_status st = herd_partition_layer_costs(m, 1, false, flops);
    if (st == HERD_OK)
        st = herd_partition_balance(m, flops, stages, bounds);
    free(flops);
    return st;
}
