/* PLplot page handling shared by herd's plots (metrics curves, timeline bars). */
#ifndef HERD_OBS_PLOT_H
#define HERD_OBS_PLOT_H

#include "herd/herd.h"
#include "obs/plplot_lib.h"

/* Colours of PLplot's cmap0 as herd sets it up. */
enum {
    PLOT_BG = 0, PLOT_FG, PLOT_GRID, PLOT_BLUE, PLOT_ORANGE, PLOT_GREEN, PLOT_RED, PLOT_PURPLE,
    PLOT_GRAY, PLOT_N_COLORS
};

/* Starts a white PNG page of width x height pixels at png with n_panels panels
 * stacked vertically, and gives the PLplot functions to draw it with. Fails (without
 * PLplot exiting the process) when PLplot or its pngcairo driver is missing or png
 * cannot be written. */
herd_status herd_plot_begin(const char *png, int width, int height, int n_panels,
                            const herd_plplot_lib **pl);
/* Text height in pixels, of a digit (PLplot otherwise grows text with the page);
 * call after PLplot's adv. Returns the factor on PLplot's default height, which is what
 * PLplot's legend's text_scale multiplies. A character is about 0.8 of the height wide. */
double herd_plot_text_height(double px);
/* The plot area of the current panel, given the margins around it in pixels. */
void herd_plot_viewport_px(double left, double right, double bottom, double top);
/* Writes the file; reports a PLplot warning raised while drawing. */
herd_status herd_plot_end(const char *png);

#endif
