/*
 * PLplot, opened when a plot is drawn (dlopen) rather than linked. Linked, every herd
 * process loaded it and its eight libraries (3.7 ms and 76 page faults a start here),
 * and building herd needed libplplot-dev, whose dependencies (Qt 5, GTK 3, wxWidgets,
 * gfortran: 50 packages, 97 MB) were half of what a new machine installs to build.
 * Now building needs nothing of PLplot; drawing needs libplplot17 and
 * plplot-driver-cairo (scripts/install-deps.sh).
 *
 * The declarations are herd's own, of the functions herd calls, by the names the
 * library exports (plplot.h maps plinit to c_plinit, and so on), for PLplot built with
 * double precision (PL_DOUBLE: Debian's, and PLplot's default).
 */
#ifndef HERD_OBS_PLPLOT_LIB_H
#define HERD_OBS_PLPLOT_LIB_H

#include <stdint.h>

#include "core/error.h"

/* plplot.h's PLINT (int32_t) and PLFLT (double). */
typedef int32_t pl_int;
typedef double pl_flt;

/* plplot.h's values of the flags herd passes. */
enum {
    PL_POSITION_RIGHT = 0x2,
    PL_POSITION_TOP = 0x4,
    PL_POSITION_BOTTOM = 0x8,
    PL_POSITION_INSIDE = 0x10,
    PL_POSITION_SUBPAGE = 0x80,
    PL_LEGEND_COLOR_BOX = 0x2,
    PL_LEGEND_LINE = 0x4,
    PL_LEGEND_SYMBOL = 0x8,
    PL_LEGEND_BACKGROUND = 0x20,
    PL_LEGEND_BOUNDING_BOX = 0x40,
    PL_Y_AXIS = 2,
};

typedef void (*pl_label_fn)(pl_int axis, pl_flt value, char *label, pl_int length, void *data);

typedef struct herd_plplot_lib {
    void (*sabort)(void (*handler)(const char *message));
    void (*gdevs)(const char ***menus, const char ***names, int *n);
    void (*sdev)(const char *device);
    void (*sfnam)(const char *file);
    void (*spage)(pl_flt xp, pl_flt yp, pl_int xlen, pl_int ylen, pl_int xoff, pl_int yoff);
    void (*scmap0)(const pl_int *r, const pl_int *g, const pl_int *b, pl_int n);
    void (*ssub)(pl_int nx, pl_int ny);
    void (*init)(void);
    void (*end)(void);
    void (*adv)(pl_int page);
    void (*gchr)(pl_flt *def_mm, pl_flt *ht_mm);
    void (*gspa)(pl_flt *xmin, pl_flt *xmax, pl_flt *ymin, pl_flt *ymax);
    void (*schr)(pl_flt def_mm, pl_flt scale);
    void (*vpor)(pl_flt xmin, pl_flt xmax, pl_flt ymin, pl_flt ymax);
    void (*wind)(pl_flt xmin, pl_flt xmax, pl_flt ymin, pl_flt ymax);
    void (*syax)(pl_int digmax, pl_int digits);
    void (*box)(const char *xopt, pl_flt xtick, pl_int nxsub, const char *yopt, pl_flt ytick,
                pl_int nysub);
    void (*slabelfunc)(pl_label_fn label, void *data);
    void (*lab)(const char *x, const char *y, const char *title);
    void (*mtex)(const char *side, pl_flt disp, pl_flt pos, pl_flt just, const char *text);
    void (*col0)(pl_int color);
    void (*width)(pl_flt width);
    void (*line)(pl_int n, const pl_flt *x, const pl_flt *y);
    void (*string)(pl_int n, const pl_flt *x, const pl_flt *y, const char *text);
    void (*fill)(pl_int n, const pl_flt *x, const pl_flt *y);
    void (*legend)(pl_flt *width, pl_flt *height, pl_int opt, pl_int position, pl_flt x, pl_flt y,
                   pl_flt plot_width, pl_int bg_color, pl_int bb_color, pl_int bb_style, pl_int nrow,
                   pl_int ncolumn, pl_int nlegend, const pl_int *opts, pl_flt text_offset,
                   pl_flt text_scale, pl_flt text_spacing, pl_flt text_justification,
                   const pl_int *text_colors, const char *const *texts, const pl_int *box_colors,
                   const pl_int *box_patterns, const pl_flt *box_scales,
                   const pl_flt *box_line_widths, const pl_int *line_colors,
                   const pl_int *line_styles, const pl_flt *line_widths,
                   const pl_int *symbol_colors, const pl_flt *symbol_scales,
                   const pl_int *symbol_numbers, const char *const *symbols);
} herd_plplot_lib;

/* The library, opened by the first call (thread-safe); an error naming the file,
 * dlerror's reason and the package to install when it cannot be opened or lacks a
 * function. */
herd_status herd_plplot_open(const herd_plplot_lib **out);

#endif
