// plot-axis.c - the log10 axis rule of plot.h: ends and ticks from the 1-2-5
// ladder or from whole decades.
#include "verify/plot.h"

#include <math.h>
#include <stdio.h>

static const int mantissa[3] = {1, 2, 5};

// Rung k of the ladder ..., 1e-1 (k = -3), 2e-1, 5e-1, 1e0 (k = 0), 2e0, ...
static int64_t rung_exp(int64_t k) { return k >= 0 ? k / 3 : -((-k + 2) / 3); }
static int rung_mant(int64_t k) { return mantissa[k - 3 * rung_exp(k)]; }
static double rung_log(int64_t k) { return (double) rung_exp(k) + log10((double) rung_mant(k)); }

static void add_tick(struct oscar_log_axis * a, double lg, int mant, int64_t e) {
    a->ticks[a->n_ticks] = lg;
    snprintf(a->labels[a->n_ticks], sizeof a->labels[0], "%de%lld", mant, (long long) e);
    a->n_ticks++;
}

void oscar_log_axis_fit(double vmin, double vmax, struct oscar_log_axis * a) {
    // tolerances so that a value printed as 1e-3 counts as on the 1e-3 rung
    const double eps = 1e-9;
    double dmin = log10(vmin), dmax = log10(vmax);
    // the highest rung <= vmin and the lowest rung >= vmax
    int64_t k0 = 3 * (int64_t) floor(dmin + eps), k1 = 3 * (int64_t) ceil(dmax - eps);
    while (rung_log(k0 + 1) <= dmin + eps) k0++;
    while (rung_log(k1 - 1) >= dmax - eps) k1--;
    if (k1 == k0) k0--, k1++;   // one value on a rung: a rung either side
    a->n_ticks = 0;
    if (k1 - k0 + 1 <= 8) {
        for (int64_t k = k0; k <= k1; k++) add_tick(a, rung_log(k), rung_mant(k), rung_exp(k));
    } else {
        int64_t e0 = (int64_t) floor(dmin + eps), e1 = (int64_t) ceil(dmax - eps);
        int64_t step = (e1 - e0 + 5) / 6;   // ceil((e1 - e0) / 6): at most 7 ticks
        e1 = e0 + step * ((e1 - e0 + step - 1) / step);
        for (int64_t e = e0; e <= e1; e += step) add_tick(a, (double) e, 1, e);
    }
    a->lo = a->ticks[0], a->hi = a->ticks[a->n_ticks - 1];
}
