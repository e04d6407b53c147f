/* herd plot: training curves from a --metrics file, drawn with PLplot into a PNG
 * (pngcairo), and the page handling the timeline plot shares. */
#include "obs/plot.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"

/* ------------------------------------------------------------------ page */

static char plplot_warning[256];
static int page_width_px, subpage_height_px;
static const herd_plplot_lib *pl; /* PLplot's state is the process's: one page at a time */

/* PLplot's recoverable errors (plabort) come here instead of stderr. */
static void keep_warning(const char *msg)
{
    if (!plplot_warning[0])
        snprintf(plplot_warning, sizeof plplot_warning, "%s", msg);
}

static bool have_device(const char *name)
{
    int n = 128;
    const char **menus = calloc((size_t)n, sizeof *menus), **names = calloc((size_t)n, sizeof *names);
    bool found = false;
    if (menus && names) {
        pl->gdevs(&menus, &names, &n);
        for (int i = 0; i < n && !found; i++)
            found = strcmp(names[i], name) == 0;
    }
    free(menus);
    free(names);
    return found;
}

herd_status herd_plot_begin(const char *png, int width, int height, int n_panels,
                            const herd_plplot_lib **out)
{
    if (width < 200 || height < 150 || width > 20000 || height > 20000)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "plot size %dx%d: width and height must be in "
                        "[200, 20000] and [150, 20000] pixels", width, height);
    HERD_TRY(herd_plplot_open(&pl));
    /* PLplot ends the process on a fatal error, so the two it could meet here are
     * checked first: the driver (plplot-driver-cairo) and the output file. */
    if (!have_device("pngcairo"))
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "PLplot has no pngcairo driver; install "
                        "plplot-driver-cairo (scripts/install-deps.sh)");
    FILE *f = fopen(png, "wb");
    if (!f)
        return HERD_ERR(HERD_ERR_IO, "cannot write the plot '%s': %s; check -o", png, strerror(errno));
    fclose(f);
    static const pl_int r[PLOT_N_COLORS] = {255, 0, 225, 31, 255, 44, 214, 148, 170};
    static const pl_int g[PLOT_N_COLORS] = {255, 0, 225, 119, 127, 160, 39, 103, 170};
    static const pl_int b[PLOT_N_COLORS] = {255, 0, 225, 180, 14, 44, 40, 189, 170};
    plplot_warning[0] = '\0';
    pl->sabort(keep_warning);
    pl->sdev("pngcairo");
    pl->sfnam(png);
    pl->spage(0, 0, width, height, 0, 0);
    pl->scmap0(r, g, b, PLOT_N_COLORS);
    pl->ssub(1, n_panels);
    pl->init();
    page_width_px = width;
    subpage_height_px = height / n_panels;
    *out = pl;
    return HERD_OK;
}

double herd_plot_text_height(double px)
{
    pl_flt def_mm, ht_mm, x0, x1, y0, y1;
    pl->gchr(&def_mm, &ht_mm);
    pl->gspa(&x0, &x1, &y0, &y1);
    double px_per_mm = (double)page_width_px / (x1 - x0);
    double scale = def_mm > 0 && x1 > x0 ? px / (def_mm * px_per_mm) : 1;
    pl->schr(0, scale);
    return scale;
}

void herd_plot_viewport_px(double left, double right, double bottom, double top)
{
    double w = page_width_px, h = subpage_height_px;
    pl->vpor(fmin(0.45, left / w), fmax(0.55, 1 - right / w), fmin(0.45, bottom / h),
           fmax(0.55, 1 - top / h));
}

herd_status herd_plot_end(const char *png)
{
    pl->end();
    pl->sabort(NULL);
    if (plplot_warning[0])
        return HERD_ERR(HERD_ERR_INTERNAL, "PLplot could not draw '%s': %s", png, plplot_warning);
    return HERD_OK;
}

/* ---------------------------------------------------------- metrics file */

#define TEXT_PX 11

typedef struct series {
    double *x, *y;
    int n, cap;
} series;

static herd_status series_add(series *s, double x, double y)
{
    if (!isfinite(x) || !isfinite(y)) /* a diverged loss is null in the file: a gap */
        return HERD_OK;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        double *nx = realloc(s->x, (size_t)cap * sizeof *nx);
        if (nx)
            s->x = nx;
        double *ny = nx ? realloc(s->y, (size_t)cap * sizeof *ny) : NULL;
        if (!ny)
            return HERD_NOMEM((size_t)cap * sizeof *ny);
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
    return HERD_OK;
}

/* The training figures come twice: from the step lines and from the epoch lines. */
enum { TRAIN_LOSS, TRAIN_ACC, THROUGHPUT, EPOCH_OFFSET, TEST_LOSS = 2 * EPOCH_OFFSET, TEST_ACC,
       N_SERIES };

static double number(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static herd_status add_line(series *s, const cJSON *o)
{
    double step = number(o, "step");
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "kind"));
    if (kind && strcmp(kind, "epoch") == 0) {
        HERD_TRY(series_add(&s[TEST_LOSS], step, number(o, "test_loss")));
        HERD_TRY(series_add(&s[TEST_ACC], step, 100 * number(o, "test_acc")));
        s += EPOCH_OFFSET;
    }
    HERD_TRY(series_add(&s[TRAIN_LOSS], step, number(o, "train_loss")));
    HERD_TRY(series_add(&s[TRAIN_ACC], step, 100 * number(o, "train_acc")));
    return series_add(&s[THROUGHPUT], step, number(o, "samples_per_s"));
}

static herd_status read_metrics(const char *path, series *s)
{
    char *text;
    HERD_TRY(herd_read_text(path, "metrics file", "give the file written by herd train --metrics",
                            &text));
    herd_status st = HERD_OK;
    int line_no = 0, lines = 0;
    for (char *line = text, *next; line && *line && st == HERD_OK; line = next) {
        line_no++;
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (strspn(line, " \t\r") == strlen(line))
            continue;
        cJSON *o = cJSON_ParseWithOpts(line, NULL, 1); /* 1: one record per line, nothing after */
        if (!o && !next) { /* a last line without its newline: a run killed while writing it */
            herd_log(HERD_LOG_WARNING, "'%s' line %d is cut off (the run was stopped while "
                     "writing it): plotting the %d records before it", path, line_no, lines);
            break;
        }
        if (!o || !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "step")))
            st = HERD_ERR(HERD_ERR_FORMAT, "'%s' line %d is not a metrics record (a JSON object "
                          "with \"step\"); give the file written by herd train --metrics",
                          path, line_no);
        else
            st = add_line(s, o);
        cJSON_Delete(o);
        lines++;
    }
    free(text);
    if (st == HERD_OK && lines == 0)
        st = HERD_ERR(HERD_ERR_FORMAT, "'%s' has no metrics records; was the run too short for "
                      "one --log-every interval or epoch?", path);
    return st;
}

static void range(const series *a, const series *b, double *lo, double *hi)
{
    *lo = INFINITY;
    *hi = -INFINITY;
    const series *both[2] = {a, b};
    for (int k = 0; k < 2; k++)
        for (int i = 0; both[k] && i < both[k]->n; i++) {
            *lo = fmin(*lo, both[k]->y[i]);
            *hi = fmax(*hi, both[k]->y[i]);
        }
}

static void draw_line(const series *s, int color, bool log_y, bool markers)
{
    if (s->n == 0)
        return;
    double *y = malloc((size_t)s->n * sizeof *y);
    if (!y)
        return;
    for (int i = 0; i < s->n; i++)
        y[i] = log_y ? log10(s->y[i]) : s->y[i];
    pl->col0(color);
    pl->width(2);
    pl->line(s->n, s->x, y);
    if (markers)
        pl->string(s->n, s->x, y, "#(728)"); /* a Hershey star: the evaluated points */
    pl->width(1);
    free(y);
}

/* One panel: train (line) and optionally test (line with markers) against step. */
static void panel(const series *train, const series *test, double x_max, const char *title,
                  const char *y_label, const char *train_label, const char *test_label,
                  pl_int legend_corner)
{
    double lo, hi;
    range(train, test, &lo, &hi);
    if (!(lo <= hi)) /* no points: an empty panel with a unit range */
        lo = 0, hi = 1;
    /* Losses fall by orders of magnitude: a log axis keeps the late curve readable. */
    bool log_y = test && lo > 0 && hi / lo >= 50;
    if (log_y) {
        lo = log10(lo);
        hi = log10(hi);
    }
    double pad = hi > lo ? 0.06 * (hi - lo) : (lo != 0 ? 0.1 * fabs(lo) : 1);
    /* The y label clears the widest tick label (digits of the largest value). */
    double widest = log_y ? 4.5 : floor(log10(fmax(fabs(lo), fabs(hi)) + 1)) + 2;
    double label_disp = 1.6 + 0.7 * fmax(widest, 3); /* in text heights */
    pl->adv(0);
    double text_scale = herd_plot_text_height(TEXT_PX);
    herd_plot_viewport_px(TEXT_PX * (label_disp + 1.5), 24, TEXT_PX * 4.6, TEXT_PX * 3.4);
    pl->wind(0, x_max, lo - pad, hi + pad);
    pl->col0(PLOT_GRID);
    pl->box("g", 0, 0, "g", 0, 0);
    pl->col0(PLOT_FG);
    pl->box("bcnst", 0, 0, log_y ? "bcnstvl" : "bcnstv", 0, 0);
    char y_text[96];
    snprintf(y_text, sizeof y_text, "%s%s", y_label, log_y ? " (log scale)" : "");
    pl->lab("step", "", title);
    pl->mtex("l", label_disp, 0.5, 0.5, y_text);
    draw_line(train, PLOT_BLUE, log_y, false);
    if (test)
        draw_line(test, PLOT_ORANGE, log_y, true);

    if (!test)
        return; /* one curve: the title says what it is */
    pl_int opts[2] = {PL_LEGEND_LINE, PL_LEGEND_LINE | PL_LEGEND_SYMBOL};
    pl_int colors[2] = {PLOT_BLUE, PLOT_ORANGE}, styles[2] = {1, 1}, numbers[2] = {0, 1};
    pl_flt widths[2] = {2, 2}, scales[2] = {1, 1};
    const char *texts[2] = {train_label, test_label}, *symbols[2] = {"", "#(728)"};
    pl_flt lw, lh;
    pl->col0(PLOT_FG);
    pl->legend(&lw, &lh, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX,
             legend_corner | PL_POSITION_RIGHT | PL_POSITION_INSIDE, 0.01, 0.02, 0.06, PLOT_BG,
             PLOT_FG, 1, 0, 0, 2, opts, 1.0, 0.9 * text_scale, 1.8, 0, colors, texts, NULL, NULL,
             NULL, NULL, colors, styles, widths, colors, scales, numbers, symbols);
}

/* Which panels: a comma-separated subset of loss, acc, throughput. */
static herd_status parse_panels(const char *list, bool want[3], int *n)
{
    static const char *names[3] = {"loss", "acc", "throughput"};
    *n = 0;
    if (!list) {
        want[0] = want[1] = want[2] = true;
        *n = 3;
        return HERD_OK;
    }
    want[0] = want[1] = want[2] = false;
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        int k = 0;
        while (k < 3 && !(strlen(names[k]) == len && strncmp(p, names[k], len) == 0))
            k++;
        if (k == 3)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "unknown metric '%.*s' in '%s'; choose from "
                            "loss, acc, throughput", (int)len, p, list);
        *n += !want[k];
        want[k] = true;
        p += len + (p[len] == ',');
    }
    if (*n == 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "no metric in '%s'; choose from loss, acc, throughput",
                        list);
    return HERD_OK;
}

herd_status herd_plot_metrics(const char *metrics_path, const char *png_path, const char *metrics,
                              int width, int height)
{
    if (!metrics_path || !png_path)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_plot_metrics needs a metrics file and a PNG path");
    bool want[3];
    int n_panels;
    HERD_TRY(parse_panels(metrics, want, &n_panels));
    series s[N_SERIES] = {{0}};
    herd_status st = read_metrics(metrics_path, s);
    double x_max = 1;
    for (int k = 0; k < N_SERIES; k++)
        for (int i = 0; i < s[k].n; i++)
            x_max = fmax(x_max, s[k].x[i]);
    /* Training curves take the step lines (means over each log interval), or the
     * epoch lines (means over an epoch) when a run was too short for any: one curve
     * never mixes the two averaging windows. */
    const series *train = s[TRAIN_LOSS].n > 0 ? s : s + EPOCH_OFFSET;
    const herd_plplot_lib *lib = NULL;
    if (st == HERD_OK)
        st = herd_plot_begin(png_path, width ? width : 1000, height ? height : 300 * n_panels,
                             n_panels, &lib);
    if (st == HERD_OK) {
        lib->syax(7, 0); /* 12000 samples/s as it is, not 1.2 with an exponent aside */
        if (want[0])
            panel(&train[TRAIN_LOSS], &s[TEST_LOSS], x_max, "Loss", "loss", "train",
                  "test (end of epoch)", PL_POSITION_TOP);
        if (want[1])
            panel(&train[TRAIN_ACC], &s[TEST_ACC], x_max, "Accuracy", "accuracy (%)", "train",
                  "test (end of epoch)", PL_POSITION_BOTTOM);
        if (want[2])
            panel(&train[THROUGHPUT], NULL, x_max, "Throughput (training steps, all ranks)",
                  "samples/s", NULL, NULL, 0);
        st = herd_plot_end(png_path);
    }
    for (int k = 0; k < N_SERIES; k++) {
        free(s[k].x);
        free(s[k].y);
    }
    return st;
}
