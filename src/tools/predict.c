/*
 * herd predict: step time and scaling efficiency from an alpha-beta model of the
 * allreduce. alpha (per message) and beta (per byte) come from the user or from a
 * least-squares fit to `herd bench allreduce -J` results.
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

herd_status herd_alpha_beta_fit_json(const char *json, herd_alpha_beta *out)
{
    cJSON *root = cJSON_ParseWithOpts(json, NULL, 1); /* 1: nothing but whitespace may follow */
    if (!root)
        return HERD_ERR(HERD_ERR_FORMAT, "not JSON (near '%.20s'); expected the output of "
                        "'herd bench allreduce -J FILE'", cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "");
    herd_status st = HERD_OK;
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(root, "ranks");
    const cJSON *results = cJSON_GetObjectItemCaseSensitive(root, "results");
    const cJSON *coll = cJSON_GetObjectItemCaseSensitive(root, "collective");
    int n = cJSON_IsNumber(ranks) ? ranks->valueint : 0;
    /* Sums of the weighted least squares fit of time = a + b * bytes, each point
     * weighted by 1/time^2 so that small messages (latency) count as much as large
     * ones (bandwidth): it minimises relative, not absolute, errors. */
    double s = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    int points = 0;
    double xs[256], ys[256];
    if (cJSON_IsString(coll) && strcmp(coll->valuestring, "allreduce") != 0)
        st = HERD_ERR(HERD_ERR_FORMAT, "the benchmark measured '%s'; predict needs allreduce "
                      "(herd bench allreduce -J FILE)", coll->valuestring);
    else if (n < 2 || !cJSON_IsArray(results))
        st = HERD_ERR(HERD_ERR_FORMAT, "expected \"ranks\" >= 2 and a \"results\" array (herd bench "
                      "allreduce -J FILE under mpirun -np 2 or more); a 1-rank run measures no link");
    const cJSON *r;
    const cJSON *walk = st == HERD_OK ? results : (const cJSON *)NULL;
    cJSON_ArrayForEach(r, walk)
    {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(r, "bytes");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "time_us");
        const cJSON *wrong = cJSON_GetObjectItemCaseSensitive(r, "wrong");
        if (!cJSON_IsNumber(b) || !cJSON_IsNumber(t) || t->valuedouble <= 0 || b->valuedouble < 0) {
            st = HERD_ERR(HERD_ERR_FORMAT, "result %d lacks \"bytes\" or a positive \"time_us\"", points);
            break;
        }
        if (cJSON_IsNumber(wrong) && wrong->valuedouble > 0) {
            st = HERD_ERR(HERD_ERR_FORMAT, "the benchmark found %g wrong value(s) at %.0f bytes: "
                          "fix the transport before predicting with it", wrong->valuedouble, b->valuedouble);
            break;
        }
        if (points == 256) {
            st = HERD_ERR(HERD_ERR_FORMAT, "more than 256 results; predict fits at most 256 "
                          "message sizes (run the benchmark over fewer sizes)");
            break;
        }
        double x = b->valuedouble, y = t->valuedouble * 1e-6, w = 1.0 / (y * y);
        xs[points] = x, ys[points++] = y;
        s += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
    }
    cJSON_Delete(root);
    HERD_TRY(st);
    double det = s * sxx - sx * sx;
    if (points < 2 || det <= 0)
        return HERD_ERR(HERD_ERR_FORMAT, "need results at 2 or more message sizes to fit latency "
                        "and bandwidth, got %d; run herd bench allreduce over a range of sizes", points);
    double b = (s * sxy - sx * sy) / det, a = (sy - b * sx) / s;
    if (a < 0) { /* noise below a negative latency: fit through the origin instead */
        a = 0;
        b = sxy / sxx;
    }
    if (b <= 0)
        return HERD_ERR(HERD_ERR_FORMAT, "the measured time does not grow with the message size: "
                        "no bandwidth to fit; include larger messages (up to 64M or more)");
    out->ranks = n;
    out->points = points;
    out->alpha_s = a / (2.0 * (n - 1));
    out->beta_s_per_byte = b * n / (2.0 * (n - 1));
    out->max_rel_residual = 0;
    for (int i = 0; i < points; i++) {
        double rel = fabs(herd_ring_allreduce_s(out, n, xs[i]) - ys[i]) / ys[i];
        out->max_rel_residual = fmax(out->max_rel_residual, rel);
    }
    return HERD_OK;
}

herd_status herd_alpha_beta_fit_file(const char *path, herd_alpha_beta *out)
{
    char *text = NULL, hint[512];
    snprintf(hint, sizeof hint, "write it with herd bench allreduce -J %s", path);
    HERD_TRY(herd_read_text(path, "allreduce results", hint, &text));
    herd_status st = herd_alpha_beta_fit_json(text, out);
    free(text);
    if (st != HERD_OK) {
        char why[768];
        snprintf(why, sizeof why, "%s", herd_last_error());
        return HERD_ERR(st, "%s: %s", path, why);
    }
    return HERD_OK;
}

herd_status herd_predict_scaling(const herd_alpha_beta *ab, double grad_bytes, double step_s,
                                 double backward_s, int workers, herd_predict_row *rows)
{
    if (workers < 1 || step_s <= 0 || backward_s < 0 || backward_s > step_s || grad_bytes < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "predict needs workers >= 1, a step time > 0 and a "
                        "backward share between 0 and the step (got %d, %g s, %g s)", workers,
                        step_s, backward_s);
    for (int i = 0; i < workers; i++) {
        herd_predict_row *r = &rows[i];
        int n = i + 1;
        r->workers = n;
        r->ring_s = herd_ring_allreduce_s(ab, n, grad_bytes);
        r->tree_s = herd_tree_allreduce_s(ab, n, grad_bytes);
        r->comm_s = fmin(r->ring_s, r->tree_s);
        /* Weak scaling: each worker keeps its batch, so its compute stays step_s. */
        r->step_s = step_s + r->comm_s;
        r->step_overlap_s = step_s + fmax(0.0, r->comm_s - backward_s);
        r->efficiency = step_s / r->step_s;
        r->efficiency_overlap = step_s / r->step_overlap_s;
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
