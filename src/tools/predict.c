/*
 * herd predict: step time and scaling efficiency. The allreduce's time per message
 * size comes from a given alpha-beta or from the table of `herd bench allreduce -J`;
 * the step is simulated bucket by bucket as training runs it.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fs.h"
#include "tools/tools.h"

double herd_ring_allreduce_s(const herd_alpha_beta *ab, int n, double bytes)
{
    if (n <= 1)
        return 0;
    /* Reduce-scatter then allgather: 2(n-1) steps, each moving bytes/n per rank. */
    return 2.0 * (n - 1) * ab->alpha_s + 2.0 * (n - 1) / n * bytes * ab->beta_s_per_byte;
}

double herd_tree_allreduce_s(const herd_alpha_beta *ab, int n, double bytes)
{
    if (n <= 1)
        return 0;
    /* Binary tree reduce then broadcast, whole messages, not pipelined: 2 ceil(log2 n)
     * hops of alpha + B beta. An upper bound for NCCL's pipelined double binary tree. */
    return 2.0 * ceil(log2((double)n)) * (ab->alpha_s + bytes * ab->beta_s_per_byte);
}

herd_comm_link herd_comm_link_given(double alpha_s, double beta_s_per_byte)
{
    return (herd_comm_link){.given = {alpha_s, beta_s_per_byte}};
}

/* The line through measured points i and i + 1. */
static void segment_line(const herd_comm_link *l, int i, double *a, double *b)
{
    *b = (l->time_s[i + 1] - l->time_s[i]) / (l->bytes[i + 1] - l->bytes[i]);
    *a = l->time_s[i] - *b * l->bytes[i];
}

/* The table's own time for `bytes` (intercept a, slope b of its segment). */
static void table_line(const herd_comm_link *l, double bytes, double *a, double *b, bool *extrapolated)
{
    int p = l->points;
    bool beyond = bytes > l->bytes[p - 1];
    if (extrapolated)
        *extrapolated = beyond;
    if (bytes <= l->bytes[0]) { /* below the smallest message: its latency */
        *a = l->time_s[0], *b = 0;
        return;
    }
    int i = 0;
    while (i < p - 2 && bytes > l->bytes[i + 1])
        i++;
    segment_line(l, i, a, b);
    if (beyond && *b <= 0) /* a falling last segment would promise ever faster transfers */
        *a = 0, *b = l->time_s[p - 1] / l->bytes[p - 1];
}

herd_alpha_beta herd_comm_link_segment(const herd_comm_link *l, double bytes, bool *extrapolated)
{
    if (l->points == 0) {
        if (extrapolated)
            *extrapolated = false;
        return l->given;
    }
    double a, b;
    table_line(l, bytes, &a, &b, extrapolated);
    /* time = a + b bytes is the ring's 2(n-1) alpha + 2(n-1)/n bytes beta at n = ranks. */
    int n = l->ranks;
    return (herd_alpha_beta){a / (2.0 * (n - 1)), b * n / (2.0 * (n - 1))};
}

double herd_comm_link_allreduce_s(const herd_comm_link *l, int n, double bytes)
{
    if (n <= 1)
        return 0;
    if (l->points > 0 && n == l->ranks) { /* measured at this rank count: the table itself */
        double a, b;
        table_line(l, bytes, &a, &b, NULL);
        return a + b * bytes;
    }
    herd_alpha_beta ab = herd_comm_link_segment(l, bytes, NULL);
    /* Another rank count: a noisy segment's negative latency or bandwidth would scale
     * into nonsense, so neither goes below 0. */
    ab.alpha_s = fmax(ab.alpha_s, 0);
    ab.beta_s_per_byte = fmax(ab.beta_s_per_byte, 0);
    return fmin(herd_ring_allreduce_s(&ab, n, bytes), herd_tree_allreduce_s(&ab, n, bytes));
}

herd_status herd_comm_link_from_bench_json(const char *json, herd_comm_link *out)
{
    memset(out, 0, sizeof *out);
    cJSON *root = cJSON_ParseWithOpts(json, NULL, 1); /* 1: nothing but whitespace may follow */
    if (!root)
        return HERD_ERR(HERD_ERR_FORMAT, "not JSON (near '%.20s'); expected the output of "
                        "'herd bench allreduce -J FILE'", cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "");
    herd_status st = HERD_OK;
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(root, "ranks");
    const cJSON *results = cJSON_GetObjectItemCaseSensitive(root, "results");
    const cJSON *coll = cJSON_GetObjectItemCaseSensitive(root, "collective");
    int n = cJSON_IsNumber(ranks) ? ranks->valueint : 0;
    if (cJSON_IsString(coll) && strcmp(coll->valuestring, "allreduce") != 0)
        st = HERD_ERR(HERD_ERR_FORMAT, "the benchmark measured '%s'; predict needs allreduce "
                      "(herd bench allreduce -J FILE)", coll->valuestring);
    else if (cJSON_IsNumber(ranks) && (ranks->valuedouble != floor(ranks->valuedouble) ||
                                       ranks->valuedouble > (double)(1 << 24)))
        st = HERD_ERR(HERD_ERR_FORMAT, "\"ranks\" is %g, not a whole number of ranks (up to %d)",
                      ranks->valuedouble, 1 << 24);
    else if (n < 2 || !cJSON_IsArray(results))
        st = HERD_ERR(HERD_ERR_FORMAT, "expected \"ranks\" >= 2 and a \"results\" array (herd bench "
                      "allreduce -J FILE under mpirun -np 2 or more); a 1-rank run measures no link");
    const cJSON *r;
    const cJSON *walk = st == HERD_OK ? results : (const cJSON *)NULL;
    int points = 0;
    cJSON_ArrayForEach(r, walk)
    {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(r, "bytes");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "time_us");
        const cJSON *wrong = cJSON_GetObjectItemCaseSensitive(r, "wrong");
        if (!cJSON_IsNumber(b) || !cJSON_IsNumber(t) || !(t->valuedouble > 0) || !(b->valuedouble >= 0)) {
            st = HERD_ERR(HERD_ERR_FORMAT, "result %d lacks \"bytes\" or a positive \"time_us\"", points);
            break;
        }
        /* cJSON reads 1e999 as infinity: no measurement is that. */
        if (!isfinite(t->valuedouble) || !isfinite(b->valuedouble)) {
            st = HERD_ERR(HERD_ERR_FORMAT, "result %d: \"%s\" is %g, not a finite number", points,
                          isfinite(b->valuedouble) ? "time_us" : "bytes",
                          isfinite(b->valuedouble) ? t->valuedouble : b->valuedouble);
            break;
        }
        if (cJSON_IsNumber(wrong) && wrong->valuedouble > 0) {
            st = HERD_ERR(HERD_ERR_FORMAT, "the benchmark found %g wrong value(s) at %.0f bytes: "
                          "fix the transport before predicting with it", wrong->valuedouble, b->valuedouble);
            break;
        }
        if (points == HERD_COMM_LINK_MAX_POINTS) {
            st = HERD_ERR(HERD_ERR_FORMAT, "more than %d results; predict reads at most %d "
                          "message sizes (run the benchmark over fewer sizes)", HERD_COMM_LINK_MAX_POINTS,
                          HERD_COMM_LINK_MAX_POINTS);
            break;
        }
        if (points > 0 && b->valuedouble <= out->bytes[points - 1]) {
            st = HERD_ERR(HERD_ERR_FORMAT, "result %d: %.0f bytes after %.0f; the sizes must "
                          "increase, as herd bench allreduce writes them", points, b->valuedouble,
                          out->bytes[points - 1]);
            break;
        }
        out->bytes[points] = b->valuedouble;
        out->time_s[points++] = t->valuedouble * 1e-6;
    }
    cJSON_Delete(root);
    HERD_TRY(st);
    if (points < 2)
        return HERD_ERR(HERD_ERR_FORMAT, "need results at 2 or more message sizes to read latency "
                        "and bandwidth, got %d; run herd bench allreduce over a range of sizes", points);
    if (out->time_s[points - 1] <= out->time_s[0])
        return HERD_ERR(HERD_ERR_FORMAT, "the measured time does not grow with the message size: "
                        "no bandwidth to read; include larger messages (up to 64M or more)");
    out->ranks = n;
    out->points = points;
    for (int i = 1; i + 1 < points; i++) {
        /* the line from i - 1 to i + 1, evaluated at i */
        double b = (out->time_s[i + 1] - out->time_s[i - 1]) / (out->bytes[i + 1] - out->bytes[i - 1]);
        double a = out->time_s[i - 1] - b * out->bytes[i - 1];
        double rel = fabs(a + b * out->bytes[i] - out->time_s[i]) / out->time_s[i];
        if (rel > out->max_rel_residual)
            out->max_rel_residual = rel, out->worst_bytes = out->bytes[i];
    }
    return HERD_OK;
}

herd_status herd_comm_link_from_bench_file(const char *path, herd_comm_link *out)
{
    char *text = NULL, hint[512];
    snprintf(hint, sizeof hint, "write it with herd bench allreduce -J %s", path);
    HERD_TRY(herd_read_text(path, "allreduce results", hint, &text));
    herd_status st = herd_comm_link_from_bench_json(text, out);
    free(text);
    if (st != HERD_OK) {
        char why[768];
        snprintf(why, sizeof why, "%s", herd_last_error());
        return HERD_ERR(st, "%s: %s", path, why);
    }
    return HERD_OK;
}

/* A collective on the communication thread: starts when asked and the thread is free. */
static double comm_run(const herd_comm_link *link, int n, double bytes, double asked, double *comm_free,
                       herd_step_prediction *out)
{
    double t = herd_comm_link_allreduce_s(link, n, bytes);
    out->comm_s += t;
    out->collectives++;
    *comm_free = fmax(asked, *comm_free) + t;
    return *comm_free;
}

herd_status herd_predict_step(const herd_comm_link *link, int n, const herd_step_model *m,
                              herd_step_prediction *out)
{
    memset(out, 0, sizeof *out);
    double backward = 0;
    for (int l = 0; l < m->n_layers; l++)
        backward += m->backward_s[l];
    if (n < 1 || m->forward_s < 0 || m->other_s < 0 || backward < 0 || m->wire_bytes_per_float <= 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "predict needs workers >= 1 and no negative phase "
                        "(got %d workers, forward %g s, backward %g s, other %g s)", n, m->forward_s,
                        backward, m->other_s);
    for (int k = 0; k < m->n_buckets; k++)
        if (m->buckets[k].ready_layer < 0 || m->buckets[k].ready_layer >= m->n_layers ||
            (k > 0 && m->buckets[k].ready_layer > m->buckets[k - 1].ready_layer))
            return HERD_ERR(HERD_ERR_INVALID_ARG, "bucket %d is ready after layer %d: not a "
                            "plan of this model's %d layers in backward order", k,
                            m->buckets[k].ready_layer, m->n_layers);
    out->compute_s = m->forward_s + backward + m->other_s;
    if (n == 1) {
        out->serial_s = out->step_s = out->compute_s;
        return HERD_OK;
    }
    double comm_free = 0;
    if (m->metrics == HERD_METRICS_STEP_LATE) /* the previous step's, queued at its end */
        comm_run(link, n, HERD_METRICS_BYTES, 0, &comm_free, out);
    double t = m->forward_s; /* --sync-bn: forward's exchanges counted at its end */
    for (int l = 0; m->sync_bn_channels && l < m->n_layers; l++)
        if (m->sync_bn_channels[l] > 0) {
            t = comm_run(link, n, 8.0 * (m->sync_bn_channels[l] + 1), t, &comm_free, out);
            t = comm_run(link, n, 8.0 * m->sync_bn_channels[l], t, &comm_free, out);
        }
    int next = 0;
    for (int l = m->n_layers - 1; l >= 0; l--) {
        t += m->backward_s[l];
        if (m->sync_bn_channels && m->sync_bn_channels[l] > 0) /* blocking, behind queued buckets */
            t = comm_run(link, n, 16.0 * m->sync_bn_channels[l], t, &comm_free, out);
        for (; next < m->n_buckets && m->buckets[next].ready_layer >= l; next++) {
            double bytes = (double)m->buckets[next].numel * m->wire_bytes_per_float;
            if (next == m->n_buckets - 1 && m->metrics == HERD_METRICS_LAST_BUCKET)
                bytes += HERD_METRICS_BYTES;
            comm_run(link, n, bytes, t, &comm_free, out);
        }
    }
    t = fmax(t, comm_free) + m->other_s; /* wait for the reductions, then the update */
    if (m->metrics == HERD_METRICS_BLOCKING)
        t = comm_run(link, n, HERD_METRICS_BYTES, t, &comm_free, out);
    out->step_s = t;
    out->serial_s = out->compute_s + out->comm_s;
    out->exposed_s = out->step_s - out->compute_s;
    return HERD_OK;
}

herd_status herd_predict_scaling(const herd_comm_link *link, const herd_step_model *m,
                                 double grad_bytes, int workers, herd_predict_row *rows)
{
    if (workers < 1 || grad_bytes < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "predict needs workers >= 1 and gradient bytes >= 0 "
                        "(got %d, %g)", workers, grad_bytes);
    for (int i = 0; i < workers; i++) {
        herd_predict_row *r = &rows[i];
        int n = i + 1;
        herd_step_prediction p;
        HERD_TRY(herd_predict_step(link, n, m, &p));
        if (p.compute_s <= 0)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "predict needs a step time > 0");
        herd_alpha_beta ab = herd_comm_link_segment(link, grad_bytes, NULL);
        r->workers = n;
        r->ring_s = herd_ring_allreduce_s(&ab, n, grad_bytes);
        r->tree_s = herd_tree_allreduce_s(&ab, n, grad_bytes);
        r->comm_s = p.comm_s;
        /* Weak scaling: each worker keeps its batch, so its compute stays the same. */
        r->step_s = p.serial_s;
        r->step_overlap_s = p.step_s;
        r->efficiency = p.compute_s / r->step_s;
        r->efficiency_overlap = p.compute_s / r->step_overlap_s;
    }
    return HERD_OK;
}

int herd_predict_max_workers(const herd_predict_row *rows, int workers, double threshold, bool overlap)
{
    int best = 0;
    for (int i = 0; i < workers; i++)
        if ((overlap ? rows[i].efficiency_overlap : rows[i].efficiency) >= threshold)
            best = rows[i].workers;
    return best;
}
