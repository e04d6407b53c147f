/* herd plot --timeline: the mean step time of each rank split into its phases,
 * from a Chrome trace-event file written by herd train --timeline. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "obs/plot.h"

#define MAX_RANKS 4096

/* The trace's "phase" events, in the order a step runs them. */
static const char *const phase_names[] = {"data_wait", "forward", "backward", "comm_wait",
                                          "optimizer"};
enum { N_PHASES = sizeof phase_names / sizeof phase_names[0] };

typedef struct rank_times {
    long steps;
    double step_us;             /* summed over the "step" events */
    double phase_us[N_PHASES];
    char label[96];             /* the process_name metadata: "rank N (host)" */
} rank_times;

typedef struct trace_summary {
    rank_times *ranks;
    int n; /* 1 + the largest pid seen */
} trace_summary;

static int phase_index(const char *name)
{
    for (int k = 0; k < N_PHASES; k++)
        if (strcmp(name, phase_names[k]) == 0)
            return k;
    return -1;
}

static const char *string_of(const cJSON *o, const char *key)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
}

static double number_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Adds one trace event; events other than steps, phases and process names are left out. */
static herd_status add_event(trace_summary *t, const cJSON *ev)
{
    const char *ph = string_of(ev, "ph"), *name = string_of(ev, "name");
    double pid = number_of(ev, "pid");
    if (!ph || !name || !(pid >= 0 && pid < MAX_RANKS))
        return HERD_OK;
    int rank = (int)pid;
    if (rank >= t->n) {
        rank_times *r = realloc(t->ranks, (size_t)(rank + 1) * sizeof *r);
        if (!r)
            return HERD_NOMEM((size_t)(rank + 1) * sizeof *r);
        memset(r + t->n, 0, (size_t)(rank + 1 - t->n) * sizeof *r);
        t->ranks = r;
        t->n = rank + 1;
    }
    rank_times *r = &t->ranks[rank];
    if (strcmp(ph, "M") == 0 && strcmp(name, "process_name") == 0) {
        const char *label = string_of(cJSON_GetObjectItemCaseSensitive(ev, "args"), "name");
        if (label)
            snprintf(r->label, sizeof r->label, "%s", label);
        return HERD_OK;
    }
    const char *cat = string_of(ev, "cat");
    double dur = number_of(ev, "dur");
    if (strcmp(ph, "X") != 0 || !cat || !(dur >= 0))
        return HERD_OK;
    if (strcmp(cat, "step") == 0 && strcmp(name, "step") == 0) {
        r->steps++;
        r->step_us += dur;
    } else if (strcmp(cat, "phase") == 0 && phase_index(name) >= 0) {
        r->phase_us[phase_index(name)] += dur;
    }
    return HERD_OK;
}

/* A trace whose run was killed before its trailer (written last): its whole events,
 * the array closed after the last one (events are written ",\n"-separated). NULL when
 * the text is not such a beginning either. */
static cJSON *parse_cut_off(char *text, const char *path)
{
    static const char head[] = "{\"traceEvents\":[";
    if (strncmp(text, head, sizeof head - 1) != 0)
        return NULL;
    size_t len = strlen(text);
    char *last = NULL;
    for (char *p = strstr(text, ",\n"); p; p = strstr(p + 2, ",\n"))
        last = p;
    char *cut = malloc(len + 4);
    if (!cut)
        return NULL;
    /* Cut at an event's end first; else before the last separator (a cut-off event). */
    snprintf(cut, len + 4, "%s]}", text);
    cJSON *root = cJSON_ParseWithOpts(cut, NULL, 1);
    if (!root && last) {
        memcpy(cut, text, (size_t)(last - text));
        memcpy(cut + (last - text), "]}", 3);
        root = cJSON_ParseWithOpts(cut, NULL, 1);
    }
    free(cut);
    if (root)
        herd_log(HERD_LOG_WARNING, "'%s' ends without its trailer (the run was stopped while "
                 "tracing): plotting the events written before it", path);
    return root;
}

static herd_status read_trace(const char *path, trace_summary *t)
{
    char *text;
    HERD_TRY(herd_read_text(path, "trace", "give the file written by herd train --timeline", &text));
    cJSON *root = cJSON_ParseWithOpts(text, NULL, 1); /* 1: nothing but whitespace may follow */
    if (!root)
        root = parse_cut_off(text, path);
    free(text);
    /* Chrome's format is {"traceEvents": [...]} or, in its short form, the bare array. */
    const cJSON *events = cJSON_IsArray(root) ? root : cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    herd_status st = HERD_OK;
    if (!cJSON_IsArray(events))
        st = HERD_ERR(HERD_ERR_FORMAT, "'%s' is not a Chrome trace (JSON with \"traceEvents\"); "
                      "give the file written by herd train --timeline", path);
    const cJSON *ev;
    cJSON_ArrayForEach(ev, events)
    {
        if (st != HERD_OK)
            break;
        st = add_event(t, ev);
    }
    cJSON_Delete(root);
    long steps = 0;
    for (int i = 0; i < t->n; i++)
        steps += t->ranks[i].steps;
    if (st == HERD_OK && steps == 0)
        st = HERD_ERR(HERD_ERR_FORMAT, "'%s' has no \"step\" events (cat \"step\"); was it "
                      "written by herd train --timeline?", path);
    return st;
}

/* Rank labels on the y axis: bar i (from the top) is rank i. */
static void rank_label(pl_int axis, pl_flt value, char *label, pl_int length, void *data)
{
    const trace_summary *t = data;
    int row = (int)lround(value);
    int rank = t->n - 1 - row;
    label[0] = '\0';
    if (axis != PL_Y_AXIS || fabs(value - row) > 1e-6 || rank < 0 || rank >= t->n)
        return;
    if (t->ranks[rank].label[0])
        snprintf(label, (size_t)length, "%s", t->ranks[rank].label);
    else
        snprintf(label, (size_t)length, "rank %d", rank);
}

static void fill_box(const herd_plplot_lib *pl, double x0, double x1, double y0, double y1, int color)
{
    pl_flt xs[4] = {x0, x1, x1, x0}, ys[4] = {y0, y0, y1, y1};
    pl->col0(color);
    pl->fill(4, xs, ys);
}

static void draw_bars(const herd_plplot_lib *pl, const trace_summary *t)
{
    /* In the step's order; "other" is step time outside the phases. */
    static const int colors[N_PHASES + 1] = {PLOT_PURPLE, PLOT_BLUE, PLOT_ORANGE, PLOT_RED,
                                             PLOT_GREEN, PLOT_GRAY};
    static const char *const texts[N_PHASES + 1] = {"data wait", "forward", "backward",
                                                    "comm wait (exposed)", "optimizer", "other"};
    double x_max = 0, label_len = 0;
    long steps_min = -1, steps_max = 0;
    for (int i = 0; i < t->n; i++) {
        const rank_times *r = &t->ranks[i];
        if (r->steps == 0)
            continue;
        x_max = fmax(x_max, r->step_us / (double)r->steps / 1e3);
        steps_min = steps_min < 0 || r->steps < steps_min ? r->steps : steps_min;
        steps_max = r->steps > steps_max ? r->steps : steps_max;
        label_len = fmax(label_len, r->label[0] ? (double)strlen(r->label) : 7);
    }
    /* Margins in pixels: the longest rank label on the left; the totals column
     * and the legend on the right. */
    const double text_px = 11, char_px = 0.8 * text_px;
    pl->adv(0);
    double text_scale = herd_plot_text_height(text_px);
    herd_plot_viewport_px(1.5 * text_px + char_px * label_len, 11 * char_px + 230, 4.5 * text_px,
                          3 * text_px);
    double y_lo = -0.6, y_hi = t->n - 0.4;
    pl->wind(0, x_max > 0 ? 1.03 * x_max : 1, y_lo, y_hi);
    pl->col0(PLOT_GRID);
    pl->box("g", 0, 0, "", 0, 0);
    for (int i = 0; i < t->n; i++) {
        const rank_times *r = &t->ranks[i];
        if (r->steps == 0)
            continue;
        double y = t->n - 1 - i, x = 0, per = 1e3 * (double)r->steps;
        double phases = 0;
        for (int k = 0; k < N_PHASES; k++) {
            double w = r->phase_us[k] / per;
            fill_box(pl, x, x + w, y - 0.35, y + 0.35, colors[k]);
            x += w;
            phases += w;
        }
        double total = r->step_us / per;
        if (total > phases)
            fill_box(pl, x, total, y - 0.35, y + 0.35, colors[N_PHASES]);
        char text[32];
        snprintf(text, sizeof text, "%.2f ms", fmax(total, phases));
        pl->col0(PLOT_FG);
        pl->mtex("rv", 0.8, (y - y_lo) / (y_hi - y_lo), 0, text); /* the totals column */
    }
    pl->col0(PLOT_FG);
    pl->slabelfunc(rank_label, (void *)t);
    /* y: one horizontal rank label per bar (PLplot labels only ticked axes). */
    pl->box("bcnst", 0, 0, "bcntvo", 1, 0);
    pl->slabelfunc(NULL, NULL);
    char title[128];
    if (steps_min == steps_max)
        snprintf(title, sizeof title, "Step time per rank (mean over %ld steps)", steps_max);
    else
        snprintf(title, sizeof title, "Step time per rank (mean over %ld to %ld steps)", steps_min,
                 steps_max);
    pl->lab("ms per step", "", title);

    pl_int opts[N_PHASES + 1], box_colors[N_PHASES + 1], patterns[N_PHASES + 1];
    pl_int text_colors[N_PHASES + 1];
    pl_flt scales[N_PHASES + 1], widths[N_PHASES + 1];
    const char *legend_texts[N_PHASES + 1];
    for (int k = 0; k <= N_PHASES; k++) {
        opts[k] = PL_LEGEND_COLOR_BOX;
        box_colors[k] = colors[k];
        patterns[k] = 0;
        scales[k] = 0.8;
        widths[k] = 1;
        text_colors[k] = PLOT_FG;
        legend_texts[k] = texts[k];
    }
    pl_flt lw, lh;
    pl->legend(&lw, &lh, 0, PL_POSITION_RIGHT | PL_POSITION_INSIDE | PL_POSITION_SUBPAGE, 0.01, 0, 0.03,
             PLOT_BG, PLOT_FG, 1, N_PHASES + 1, 1, N_PHASES + 1, opts, 0.5, 0.9 * text_scale, 2.0, 0, text_colors,
             legend_texts, box_colors, patterns, scales, widths, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL);
}

herd_status herd_plot_timeline(const char *trace_path, const char *png_path, int width, int height)
{
    if (!trace_path || !png_path)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_plot_timeline needs a trace and a PNG path");
    trace_summary t = {0};
    herd_status st = read_trace(trace_path, &t);
    const herd_plplot_lib *pl = NULL;
    if (st == HERD_OK)
        st = herd_plot_begin(png_path, width ? width : 1000, height ? height : 240 + 45 * t.n, 1, &pl);
    if (st == HERD_OK) {
        draw_bars(pl, &t);
        st = herd_plot_end(png_path);
    }
    free(t.ranks);
    return st;
}
