// token-stats.c - next-token statistics against a reference run (token-stats.h):
// the per-row fp64 log-softmax comparisons and the summary over a method's rows.
// No allocation per row; the accumulator is sized once for all windows.
#include "verify/token-stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// ---- rows ---------------------------------------------------------------------------------
// max, its first index and lse of x [V], in the order perplexity has always used
// (m = running max of the doubles, then Σ exp(x_j - m) in j order).
static double row_lse(const float * x, int32_t V, double * mx_out, int32_t * top_out) {
    double mx = -INFINITY, z = 0;
    int32_t top = 0;
    for (int32_t j = 0; j < V; j++)
        if ((double) x[j] > mx) mx = (double) x[j], top = j;
    for (int32_t j = 0; j < V; j++) z += exp((double) x[j] - mx);
    *mx_out = mx, *top_out = top;
    return log(z);
}

void osc_token_ref_row(const float * b, int32_t V, int32_t y, struct osc_token_ref * out) {
    double mx;
    double lz = row_lse(b, V, &mx, &out->top);
    out->lse = mx + lz;
    out->nll = mx + lz - (double) b[y];
}

void osc_token_score_row(const float * l, int32_t V, int32_t y, const float * b, const struct osc_token_ref * ref,
                         struct osc_token_row * out) {
    double mx;
    int32_t top;
    double lz = row_lse(l, V, &mx, &top);
    memset(out, 0, sizeof *out);
    out->nll = mx + lz - (double) l[y];   // the expression (and bits) of the perplexity sum
    if (!b || !ref) return;
    // KL(p || q) with p the reference: Σ p_j ((b_j - l_j) + (lse_q - lse_p)); the two differences
    // are formed first so that identical rows give exactly 0 (most of the time goes here). No term
    // is skipped: LM logits span a few tens of nats, so a cut-off on p_j would save few exps.
    const double dl = (mx + lz) - ref->lse;
    double kl = 0;
    for (int32_t j = 0; j < V; j++) kl += exp((double) b[j] - ref->lse) * (((double) b[j] - (double) l[j]) + dl);
    out->kl = kl;
    out->nll_ref = ref->nll;
    out->dp = exp(-out->nll) - exp(-ref->nll);
    out->same_top = top == ref->top;
}

// ---- accumulator --------------------------------------------------------------------------
enum oscar_status osc_token_acc_init(struct osc_token_acc * a, int64_t cap, bool has_ref) {
    memset(a, 0, sizeof *a);
    a->cap = cap, a->has_ref = has_ref;
    size_t n = (size_t) (cap > 0 ? cap : 1);
    a->nll = malloc(n * sizeof(double));
    if (has_ref) {
        a->nll_ref = malloc(n * sizeof(double));
        a->kl = malloc(n * sizeof(double));
        a->dp = malloc(n * sizeof(double));
    }
    if (!a->nll || (has_ref && (!a->nll_ref || !a->kl || !a->dp))) {
        osc_token_acc_free(a);
        return osc_error(OSCAR_ERR_NOMEM, "next-token statistics: %lld positions", (long long) cap);
    }
    return OSCAR_OK;
}

void osc_token_acc_add(struct osc_token_acc * a, const struct osc_token_row * rows, int32_t nr) {
    for (int32_t i = 0; i < nr; i++) {
        if (a->n >= a->cap) return;   // contract violation; never silently overrun
        a->nll[a->n] = rows[i].nll;
        if (a->has_ref) {
            a->nll_ref[a->n] = rows[i].nll_ref;
            a->kl[a->n] = rows[i].kl;
            a->dp[a->n] = rows[i].dp;
            a->n_same += rows[i].same_top;
        }
        a->n++;
    }
}

void osc_token_acc_free(struct osc_token_acc * a) {
    free(a->nll), free(a->nll_ref), free(a->kl), free(a->dp);
    memset(a, 0, sizeof *a);
}

// ---- summary ------------------------------------------------------------------------------
static double mean_of(const double * x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    return n ? s / (double) n : 0;
}

// Standard error of the mean of x (two-pass): sqrt(Σ(x - m)² / (n (n - 1))), 0 for n < 2.
static double stderr_of(const double * x, int64_t n, double m) {
    if (n < 2) return 0;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (x[i] - m) * (x[i] - m);
    return sqrt(s / ((double) n * (double) (n - 1)));
}

// Σ(a - ma)(b - mb) / (n (n - 1)): the covariance of the two means.
static double cov_of_means(const double * a, const double * b, int64_t n, double ma, double mb) {
    if (n < 2) return 0;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (a[i] - ma) * (b[i] - mb);
    return s / ((double) n * (double) (n - 1));
}

// Total order for qsort with NaN last, so the sort is the same on every run.
static int cmp_double(const void * pa, const void * pb) {
    double a = *(const double *) pa, b = *(const double *) pb;
    if (isnan(a) || isnan(b)) return isnan(a) - isnan(b);
    return (a > b) - (a < b);
}

double osc_quantile_sorted(const double * sorted, int64_t n, double f) {
    if (n <= 0) return 0;
    if (f <= 0) return sorted[0];
    if (f >= 1) return sorted[n - 1];
    double p = f * (double) (n - 1);
    int64_t i = (int64_t) p;
    double w = p - (double) i;
    return i + 1 < n ? (1 - w) * sorted[i] + w * sorted[i + 1] : sorted[i];
}

void osc_token_acc_finish(struct osc_token_acc * a, struct oscar_token_stats * o) {
    int64_t n = a->n;
    memset(o, 0, sizeof *o);
    o->n = n;
    o->nll_mean = mean_of(a->nll, n);
    o->nll_stderr = stderr_of(a->nll, n, o->nll_mean);
    o->ppl = exp(o->nll_mean);
    o->ppl_stderr = o->ppl * o->nll_stderr;
    if (!a->has_ref || n == 0) return;
    o->has_ref = true;
    o->kl_mean = mean_of(a->kl, n);
    o->kl_stderr = stderr_of(a->kl, n, o->kl_mean);
    // Δp² into dp (no longer needed as Δp), the paired NLL differences into kl after the sort
    for (int64_t i = 0; i < n; i++) a->dp[i] *= a->dp[i];
    double ms = mean_of(a->dp, n);
    o->dp_rms = sqrt(ms);
    o->dp_rms_stderr = o->dp_rms > 0 ? 0.5 / o->dp_rms * stderr_of(a->dp, n, ms) : 0;
    o->same_top1 = (double) a->n_same / (double) n;
    o->same_top1_stderr = n > 1 ? sqrt(o->same_top1 * (1 - o->same_top1) / (double) (n - 1)) : 0;
    double mr = mean_of(a->nll_ref, n), sr = stderr_of(a->nll_ref, n, mr);
    double cov = cov_of_means(a->nll, a->nll_ref, n, o->nll_mean, mr);
    double ppl_ref = exp(mr), ppl_ref_err = ppl_ref * sr;
    o->dppl = o->ppl - ppl_ref;
    double v = o->ppl_stderr * o->ppl_stderr + ppl_ref_err * ppl_ref_err - 2 * o->ppl * ppl_ref * cov;
    o->dppl_stderr = v > 0 ? sqrt(v) : 0;
    qsort(a->kl, (size_t) n, sizeof(double), cmp_double);
    o->kl_median = osc_quantile_sorted(a->kl, n, 0.5);
    o->kl_p90 = osc_quantile_sorted(a->kl, n, 0.90);
    o->kl_p95 = osc_quantile_sorted(a->kl, n, 0.95);
    o->kl_p99 = osc_quantile_sorted(a->kl, n, 0.99);
    o->kl_max = a->kl[n - 1];
    for (int64_t i = 0; i < n; i++) a->kl[i] = a->nll[i] - a->nll_ref[i];
    o->ln_ppl_ratio = mean_of(a->kl, n);
    o->ln_ppl_ratio_stderr = stderr_of(a->kl, n, o->ln_ppl_ratio);
}
