// plot.h - layers.svg: the per-layer errors of an oscar-verify report as a
// hand-written SVG figure (no plotting library), and its log10 axis rule.
//
// The figure: a title naming the model, a caption with the run's settings,
// four panels sharing the layer x axis (post-W_O relative error, K relative
// MSE, V relative MSE, attention KL), each on its own log10 y axis, and a
// legend to the right. Per panel and method one series, an SVG element with
// data-method="NAME" data-panel="ID" (ID: out_rel, k_rel_mse, v_rel_mse, kl):
//   - a metric the run did not compute for a method (its reference sum is 0,
//     e.g. out_rel without W_O) has no series; the legend says so;
//   - exact zeros (bf16, the reference) lie on a "0" row under the log axis,
//     drawn dashed; a method that is 0 everywhere is labelled "(exact, 0)";
//   - NaN, inf and negative values are skipped (the line breaks there) and
//     counted in the legend.
// Every string from the report is XML-escaped (and invalid UTF-8 replaced).
// The output depends only on the report: same report, same bytes.
#ifndef OSCAR_VERIFY_PLOT_H
#define OSCAR_VERIFY_PLOT_H

#include <stdint.h>

#include "verify/report.h"

enum oscar_status oscar_verify_write_svg(const struct oscar_verify_report * r, const char * path);
// The same SVG text (malloc'ed, caller frees).
enum oscar_status oscar_verify_svg_text(const struct oscar_verify_report * r, char ** out);

// ---- log10 axis ----------------------------------------------------------------------
#define OSCAR_LOG_AXIS_MAX_TICKS 12

struct oscar_log_axis {
    double lo, hi;                                   // log10 of the axis ends, lo < hi
    int32_t n_ticks;                                 // >= 2; the ends are ticks
    double ticks[OSCAR_LOG_AXIS_MAX_TICKS];          // log10 of each tick, increasing
    char labels[OSCAR_LOG_AXIS_MAX_TICKS][24];       // "1e-3", "2e-3", "5e-3", ...
};

// The axis for data in [vmin, vmax] (0 < vmin <= vmax, finite). Ends and ticks
// come from the 1-2-5 ladder (1e-3, 2e-3, 5e-3, 1e-2, ...) when that gives at
// most 8 ticks, so a range under a decade still has labelled ticks; otherwise
// from whole decades, every k-th so there are at most 7.
void oscar_log_axis_fit(double vmin, double vmax, struct oscar_log_axis * a);

#endif
