// plot.c - layers.svg (plot.h): which points of which series can be drawn,
// the layout of title, caption, four panels and legend, and the SVG text.
// Coordinates are printed with one decimal, so the bytes depend on the report only.
#include "verify/plot.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fs.h"
#include "util/strbuf.h"

// ---- panels and points --------------------------------------------------------------
enum { N_PANELS = 4 };

struct panel {
    const char * id;      // data-panel, and the report.json key of the metric
    const char * title, * ylabel;
};

static const struct panel panels[N_PANELS] = {
    {"out_rel", "post-W_O output: relative error", "relative error"},
    {"k_rel_mse", "K cache: relative MSE", "relative MSE"},
    {"v_rel_mse", "V cache: relative MSE", "relative MSE"},
    {"kl", "attention: KL(exact \u2016 method)", "KL (nats)"},
};

enum point_kind {
    PT_MISSING,   // the run did not compute the metric (its reference sum is 0)
    PT_BAD,       // NaN, inf or negative: skipped
    PT_ZERO,      // exactly 0: on the "0" row under the log axis
    PT_POS,       // on the log axis
};

// Metric p of one layer, and whether it was computed at all.
static double metric(const struct oscar_layer_metrics * m, int p, bool * computed) {
    switch (p) {
    case 0: *computed = m->out_den > 0; return m->out_rel;
    case 1: *computed = m->k_ref > 0; return m->k_rel_mse;
    case 2: *computed = m->v_ref > 0; return m->v_rel_mse;
    default: *computed = m->n_queries > 0; return m->kl;
    }
}

static enum point_kind point(const struct oscar_verify_method * m, int p, int32_t l, double * v) {
    bool computed;
    *v = metric(&m->layers[l], p, &computed);
    if (!computed) return PT_MISSING;
    if (!isfinite(*v) || *v < 0) return PT_BAD;
    return *v == 0 ? PT_ZERO : PT_POS;
}

struct series_counts {
    int32_t n[4];   // by enum point_kind
};

static struct series_counts count_points(const struct oscar_verify_report * r, int32_t i, int p) {
    struct series_counts c = {{0}};
    double v;
    for (int32_t l = 0; l < r->n_layer; l++) c.n[point(&r->methods[i], p, l, &v)]++;
    return c;
}

static bool drawn(struct series_counts c) { return c.n[PT_POS] + c.n[PT_ZERO] > 0; }
static bool exact(struct series_counts c) { return c.n[PT_POS] == 0 && c.n[PT_ZERO] > 0; }

// ---- styles: Okabe-Ito colours, then dash patterns once the colours are used up -----
static const char * const colors[] = {"#000000", "#E69F00", "#56B4E9", "#009E73",
                                      "#D55E00", "#0072B2", "#CC79A7", "#F0E442"};
enum { N_COLORS = sizeof colors / sizeof colors[0] };
static const char * const dashes[] = {"", "8 3", "3 2", "8 3 2 3"};
// exact zeros: round dots, unlike any of the dashes
#define EXACT_DASH "0.1 4.5"

static const char * color_of(int32_t i) { return colors[i % N_COLORS]; }
static const char * dash_of(int32_t i) { return dashes[(i / N_COLORS) % (int32_t) (sizeof dashes / sizeof dashes[0])]; }

// ---- escaped text -------------------------------------------------------------------
// Length of the valid UTF-8 sequence at s (1..4), or 0 if it is not one.
static int utf8_len(const unsigned char * s) {
    if (s[0] < 0x80) return 1;
    int n = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : 0;
    if (n == 0 || (n == 3 && s[0] > 0xEF)) return 0;
    for (int k = 1; k < n; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    if (n == 3 && ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0))) return 0;   // overlong, surrogate
    if (n == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90))) return 0;   // overlong, > U+10FFFF
    return n;
}

// Appends s as XML character data / attribute text: & < > " ' as entities,
// control characters and invalid UTF-8 as U+FFFD (XML forbids them), at most
// max_chars characters, then "…" if it was cut.
static void put_text(struct osc_strbuf * b, const char * s, int32_t max_chars) {
    const unsigned char * u = (const unsigned char *) s;
    for (int32_t chars = 0; *u; chars++) {
        if (chars == max_chars) {
            osc_sb_printf(b, "\u2026");
            return;
        }
        int n = utf8_len(u);
        switch (n ? *u : 0) {
        case '&': osc_sb_printf(b, "&amp;"); break;
        case '<': osc_sb_printf(b, "&lt;"); break;
        case '>': osc_sb_printf(b, "&gt;"); break;
        case '"': osc_sb_printf(b, "&quot;"); break;
        case '\'': osc_sb_printf(b, "&apos;"); break;
        default:
            if (n == 0 || *u < 0x20 || *u == 0x7F) osc_sb_printf(b, "\uFFFD");
            else osc_sb_append(b, (const char *) u, (size_t) n);
        }
        u += n ? n : 1;
    }
}

// The last component of a path ("a/b/" -> "b"); the whole string if it has none.
static const char * base_name(const char * path, char * buf, size_t size) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t s = n;
    while (s > 0 && path[s - 1] != '/') s--;
    snprintf(buf, size, "%.*s", (int) (n - s), path + s);
    return buf;
}

// ---- layout -------------------------------------------------------------------------
#define FIG_W     1100.0
#define PANEL_W   330.0
#define PANEL_H   200.0              // log region, then the "0" row at the bottom
#define LOG_H     (PANEL_H - 34.0)   // height of the log region
#define SEP_DY    (LOG_H + 14.0)     // the line between log region and "0" row, from the panel top
#define ZERO_DY   (PANEL_H - 10.0)   // the "0" row, from the panel top
#define PANEL_X0  82.0
#define COL_GAP   100.0
#define ROW_GAP   78.0
#define PANEL_Y0  118.0
#define LEGEND_X  (PANEL_X0 + 2 * PANEL_W + COL_GAP + 28.0)
#define X_PAD     10.0               // from the panel's sides to the first / last layer
#define TOP_PAD   6.0                // from the panel's top to the highest tick

struct frame {
    double x, y;                     // top left of the plot area
    struct oscar_log_axis ax;
    bool any_pos;                    // some series has a value on the log axis
};

static double layer_x(const struct frame * f, int32_t l, int32_t n_layer) {
    if (n_layer < 2) return f->x + PANEL_W / 2;
    return f->x + X_PAD + (PANEL_W - 2 * X_PAD) * (double) l / (double) (n_layer - 1);
}

static double log_y(const struct frame * f, double lg) {
    return f->y + TOP_PAD + (f->ax.hi - lg) / (f->ax.hi - f->ax.lo) * (LOG_H - TOP_PAD);
}

static struct frame fit_frame(const struct oscar_verify_report * r, int p) {
    struct frame f = {.x = PANEL_X0 + (p % 2) * (PANEL_W + COL_GAP), .y = PANEL_Y0 + (p / 2) * (PANEL_H + ROW_GAP)};
    double lo = INFINITY, hi = -INFINITY, v;
    for (int32_t i = 0; i < r->n_methods; i++)
        for (int32_t l = 0; l < r->n_layer; l++)
            if (point(&r->methods[i], p, l, &v) == PT_POS) lo = fmin(lo, v), hi = fmax(hi, v);
    f.any_pos = lo <= hi;
    oscar_log_axis_fit(f.any_pos ? lo : 1e-6, f.any_pos ? hi : 1.0, &f.ax);
    return f;
}

// Layer labels every 1, 2, 5, 10, 20, ... layers: at most 10 of them.
static int32_t layer_step(int32_t n_layer) {
    static const int32_t m[3] = {1, 2, 5};
    for (int32_t dec = 1;; dec *= 10)
        for (int k = 0; k < 3; k++)
            if (n_layer <= 10 * m[k] * dec) return m[k] * dec;
}

// ---- drawing ------------------------------------------------------------------------
// The stroke attributes of method i's line, or of its dotted line of exact zeros.
static void put_line_style(struct osc_strbuf * b, int32_t i, bool exact_zero) {
    if (exact_zero) {
        osc_sb_printf(b, " stroke-width=\"2.6\" stroke-linecap=\"round\" stroke-dasharray=\"%s\"", EXACT_DASH);
        return;
    }
    osc_sb_printf(b, " stroke-width=\"1.8\"");
    if (*dash_of(i)) osc_sb_printf(b, " stroke-dasharray=\"%s\"", dash_of(i));
}

static void draw_axes(struct osc_strbuf * b, const struct oscar_verify_report * r, const struct frame * f, int p) {
    const struct panel * pn = &panels[p];
    double x = f->x, y = f->y;
    osc_sb_printf(b, "<g class=\"panel\" id=\"panel-%s\">\n", pn->id);
    osc_sb_printf(b, "<text class=\"panel-title\" x=\"%.1f\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\">%s</text>\n",
                  x, y - 9, pn->title);
    osc_sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#fafafa\" stroke=\"none\"/>\n", x,
                  y, PANEL_W, PANEL_H);
    // y: the ladder ticks with gridlines, then the separate "0" row
    for (int32_t t = 0; t < f->ax.n_ticks; t++) {
        double ty = log_y(f, f->ax.ticks[t]);
        osc_sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#dddddd\"/>\n", x, ty,
                      x + PANEL_W, ty);
        osc_sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%s</text>\n", x - 5, ty + 4,
                      f->ax.labels[t]);
    }
    double sep = y + SEP_DY, zy = y + ZERO_DY;
    osc_sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999999\" stroke-dasharray=\"3 3\"/>\n",
                  x, sep, x + PANEL_W, sep);
    osc_sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">0</text>\n", x - 5, zy + 4);
    if (!f->any_pos)
        osc_sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\" fill=\"#666666\">"
                         "no nonzero values</text>\n", x + PANEL_W / 2, y + LOG_H / 2);
    // x: layer numbers on every panel, the axis name on the bottom row
    int32_t step = layer_step(r->n_layer);
    for (int32_t l = 0; l < r->n_layer; l += step) {
        double lx = layer_x(f, l, r->n_layer);
        osc_sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eeeeee\"/>\n", lx, y, lx,
                      y + LOG_H);
        osc_sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\">%d</text>\n", lx,
                      y + PANEL_H + 15, (int) l);
    }
    if (p / 2 == 1)
        osc_sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">layer</text>\n", x + PANEL_W / 2,
                      y + PANEL_H + 34);
    double lx = x - 48, ly = y + PANEL_H / 2;
    osc_sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" transform=\"rotate(-90 %.1f %.1f)\" text-anchor=\"middle\">%s, log"
                     "</text>\n", lx, ly, lx, ly, pn->ylabel);
    osc_sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444444\"/>\n",
                  x, y, PANEL_W, PANEL_H);
    osc_sb_printf(b, "</g>\n");
}

// One method's series in one panel: the polyline on the log axis (a new
// subpath after every skipped point), a dashed stretch on the "0" row for
// exact zeros, and a dot for a point with no drawn neighbour.
static void draw_series(struct osc_strbuf * b, const struct oscar_verify_report * r, const struct frame * f, int p,
                        int32_t i) {
    const struct oscar_verify_method * m = &r->methods[i];
    osc_sb_printf(b, "<g class=\"series\" data-method=\"");
    put_text(b, m->name, 64);
    osc_sb_printf(b, "\" data-panel=\"%s\" stroke=\"%s\" fill=\"none\">\n", panels[p].id, color_of(i));
    for (enum point_kind kind = PT_ZERO; kind <= PT_POS; kind++) {
        bool zero = kind == PT_ZERO, open = false, any = false;
        double v;
        for (int32_t l = 0; l < r->n_layer; l++) {
            if (point(m, p, l, &v) != kind) {
                open = false;
                continue;
            }
            double x = layer_x(f, l, r->n_layer), y = zero ? f->y + ZERO_DY : log_y(f, log10(v));
            if (!any) {
                osc_sb_printf(b, "<path");
                put_line_style(b, i, zero);
                osc_sb_printf(b, " d=\"");
            }
            osc_sb_printf(b, "%s%c%.1f,%.1f", any ? " " : "", open ? 'L' : 'M', x, y);
            any = open = true;
        }
        if (any) osc_sb_printf(b, "\"/>\n");
        // isolated points: a path of one point draws nothing, so a dot
        for (int32_t l = 0; l < r->n_layer; l++) {
            double u;
            bool prev = l > 0 && point(m, p, l - 1, &u) == kind, next = l + 1 < r->n_layer && point(m, p, l + 1, &u) == kind;
            if (point(m, p, l, &v) != kind || prev || next) continue;
            double x = layer_x(f, l, r->n_layer), y = zero ? f->y + ZERO_DY : log_y(f, log10(v));
            osc_sb_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n", x, y, color_of(i));
        }
    }
    osc_sb_printf(b, "</g>\n");
}

// Panels (by short name) where method i is in a given state, "K, V"; "" if none.
static void panel_list(const struct oscar_verify_report * r, int32_t i, bool (*pred)(struct series_counts), char * out,
                       size_t size) {
    static const char * const short_names[N_PANELS] = {"post-W_O", "K", "V", "KL"};
    size_t n = 0;
    out[0] = '\0';
    for (int p = 0; p < N_PANELS; p++)
        if (pred(count_points(r, i, p)) && n < size)
            n += (size_t) snprintf(out + n, size - n, "%s%s", n ? ", " : "", short_names[p]);
}

static bool not_drawn(struct series_counts c) { return !drawn(c); }

// The legend: every method once, with its line style, then notes on what it lacks.
// Returns the y under it.
static double draw_legend(struct osc_strbuf * b, const struct oscar_verify_report * r) {
    double x = LEGEND_X, y = PANEL_Y0 - 9;
    osc_sb_printf(b, "<g id=\"legend\" font-size=\"12\">\n");
    osc_sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\">method</text>\n", x, y);
    y += 22;
    for (int32_t i = 0; i < r->n_methods; i++) {
        char missing[64], zeros[64], some[64];
        panel_list(r, i, not_drawn, missing, sizeof missing);
        panel_list(r, i, exact, zeros, sizeof zeros);
        panel_list(r, i, drawn, some, sizeof some);
        int32_t n_bad = 0;
        for (int p = 0; p < N_PANELS; p++) n_bad += count_points(r, i, p).n[PT_BAD];
        bool all_exact = some[0] && !strcmp(zeros, some);
        osc_sb_printf(b, "<g class=\"legend-entry\" data-legend=\"");
        put_text(b, r->methods[i].name, 64);
        osc_sb_printf(b, "\">");
        osc_sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"", x, y - 4, x + 30,
                      y - 4, color_of(i));
        put_line_style(b, i, all_exact);
        osc_sb_printf(b, "/>");
        osc_sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\">", x + 38, y);
        put_text(b, r->methods[i].name, 28);
        osc_sb_printf(b, "%s</text>", all_exact ? " (exact, 0)" : "");
        double ny = y;
        if (!some[0]) {
            osc_sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10.5\" fill=\"#555555\">not drawn: no values</text>",
                          x + 38, ny += 14);
        } else if (missing[0]) {
            osc_sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10.5\" fill=\"#555555\">no values in: %s</text>",
                          x + 38, ny += 14, missing);
        }
        if (zeros[0] && !all_exact)
            osc_sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10.5\" fill=\"#555555\">exact 0 in: %s</text>",
                          x + 38, ny += 14, zeros);
        if (n_bad)
            osc_sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10.5\" fill=\"#555555\">%d NaN/inf point%s skipped"
                             "</text>", x + 38, ny += 14, (int) n_bad, n_bad > 1 ? "s" : "");
        osc_sb_printf(b, "</g>\n");
        y = ny + 20;
    }
    static const char * const notes[] = {"Dotted on the \"0\" row: exactly 0", "(no error), under the log axis.",
                                         "Breaks: NaN/inf values skipped.", "Each panel has its own y range."};
    y += 4;
    for (size_t k = 0; k < sizeof notes / sizeof notes[0]; k++, y += 14) {
        osc_sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10.5\" fill=\"#555555\">", x, y);
        put_text(b, notes[k], 64);
        osc_sb_printf(b, "</text>\n");
    }
    osc_sb_printf(b, "</g>\n");
    return y;
}

static void draw_heading(struct osc_strbuf * b, const struct oscar_verify_report * r) {
    char corpus[256], rot[256];
    osc_sb_printf(b, "<text id=\"title\" x=\"%.1f\" y=\"30\" font-size=\"19\" font-weight=\"bold\">oscar-verify: "
                     "per-layer error, ", PANEL_X0 - 50);
    put_text(b, r->model_name[0] ? r->model_name : "(unnamed model)", 72);
    osc_sb_printf(b, "</text>\n");
    osc_sb_printf(b, "<text id=\"caption\" x=\"%.1f\" y=\"54\" font-size=\"12.5\" fill=\"#333333\">", PANEL_X0 - 50);
    osc_sb_printf(b, "<tspan>corpus ");
    put_text(b, r->corpus[0] ? base_name(r->corpus, corpus, sizeof corpus) : "(none)", 48);
    osc_sb_printf(b, " \u00b7 rotations ");
    put_text(b, r->rotations[0] ? base_name(r->rotations, rot, sizeof rot) : "none", 48);
    osc_sb_printf(b, " \u00b7 metric tokens %d</tspan>", (int) r->metric_tokens);
    osc_sb_printf(b, "<tspan x=\"%.1f\" dy=\"18\">ctx %d \u00b7 sink %d \u00b7 recent %d \u00b7 group size %d \u00b7 "
                     "scale ", PANEL_X0 - 50, (int) r->ctx, (int) r->sink, (int) r->recent, (int) r->group_size);
    put_text(b, r->scale_dtype, 16);
    osc_sb_printf(b, " \u00b7 windows scored %d \u00b7 %d layers</tspan></text>\n", (int) r->n_windows,
                  (int) r->n_layer);
}

enum oscar_status oscar_verify_svg_text(const struct oscar_verify_report * r, char ** out) {
    struct osc_strbuf b = {0};
    struct frame frames[N_PANELS];
    for (int p = 0; p < N_PANELS; p++) frames[p] = fit_frame(r, p);
    double panels_bottom = PANEL_Y0 + 2 * PANEL_H + ROW_GAP + 44;
    // the legend's height decides the figure's when it is the taller: draw it first into its own buffer
    struct osc_strbuf leg = {0};
    double legend_bottom = draw_legend(&leg, r);
    double H = ceil(fmax(panels_bottom, legend_bottom) + 10);
    osc_sb_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    osc_sb_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f "
                      "%.0f\" font-family=\"DejaVu Sans, Verdana, sans-serif\" font-size=\"12\">\n",
                  FIG_W, H, FIG_W, H);
    osc_sb_printf(&b, "<title>oscar-verify: per-layer error, ");
    put_text(&b, r->model_name, 128);
    osc_sb_printf(&b, "</title>\n");
    osc_sb_printf(&b, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", FIG_W, H);
    draw_heading(&b, r);
    for (int p = 0; p < N_PANELS; p++) {
        draw_axes(&b, r, &frames[p], p);
        for (int32_t i = 0; i < r->n_methods; i++)
            if (drawn(count_points(r, i, p))) draw_series(&b, r, &frames[p], p, i);
    }
    if (leg.s) osc_sb_append(&b, leg.s, leg.n);
    b.oom |= leg.oom;
    free(leg.s);
    osc_sb_printf(&b, "</svg>\n");
    if (b.oom) {
        free(b.s);
        return osc_error(OSCAR_ERR_NOMEM, "SVG text");
    }
    *out = b.s;
    return OSCAR_OK;
}

enum oscar_status oscar_verify_write_svg(const struct oscar_verify_report * r, const char * path) {
    char * txt = NULL;
    enum oscar_status st = oscar_verify_svg_text(r, &txt);
    if (st == OSCAR_OK) st = osc_write_file_atomic(path, txt, strlen(txt));
    free(txt);
    return st;
}
