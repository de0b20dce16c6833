// token-stats.h - what a quantized KV cache does to the model's next-token
// distribution, against a reference run (bf16) on the same window positions:
// the statistics `llama-perplexity --kl-divergence` reports (its definitions,
// written again here), computed from the logits the perplexity pass already has.
//
// Per scored position t (logits l of the method, b of the reference, target y):
//   nll_t      = lse(l) - l[y]                       lse(x) = log Σ_j exp(x_j)
//   kl_t       = Σ_j p_j (log p_j - log q_j)         p = softmax(b), q = softmax(l)
//              = Σ_j p_j ((b_j - l_j) + (lse(l) - lse(b)))   (exactly 0 when l == b)
//   dp_t       = q[y] - p[y]                          (Δp of the correct token)
//   same_top_t = argmax l == argmax b                 (first index of the max)
// Over the n positions (two-pass means; stderr = sqrt(Σ(x - x̄)² / (n (n-1)))):
//   perplexity exp(mean nll) ± ppl·stderr(nll)  (llama-perplexity's "PPL = x +/- y")
//   KL mean ± stderr, median, p90, p95, p99, max (quantiles interpolated linearly
//   between the sorted values at fraction·(n-1), as llama-perplexity does)
//   same-top-1 fraction f ± sqrt(f (1 - f) / (n - 1))
//   RMS Δp = sqrt(mean dp²) ± stderr(dp²) / (2 RMS)   (delta method)
//   ln(PPL/PPL_ref) = mean(nll - nll_ref) ± stderr of the paired differences, and
//   PPL - PPL_ref ± sqrt(σ² + σ_ref² - 2 PPL PPL_ref cov(nll, nll_ref)/n)
// Everything is fp64 from the fp32 logits. Rows may be scored on any thread; the
// accumulator keeps them in row order, so the numbers do not depend on threads.
//
// V = vocabulary size, n = scored positions.
#ifndef OSCAR_VERIFY_TOKEN_STATS_H
#define OSCAR_VERIFY_TOKEN_STATS_H

#include <stdbool.h>
#include <stdint.h>

#include "util/error.h"

// What a reference row contributes to every later comparison (cached from its own
// pass so that a method's row needs one exp per logit of the reference).
struct osc_token_ref {
    double  lse;                // log Σ exp(b_j)
    double  nll;                // lse - b[y]
    int32_t top;                // argmax b (first index of the max)
};

// One scored position of a method.
struct osc_token_row {
    double  nll;                // lse(l) - l[y]: the perplexity term, same bits as before
    double  nll_ref, kl, dp;    // against the reference (0 without one)
    int32_t same_top;           // 1 if the argmaxes agree
};

// The reference's cache for one row b [V] and target y.
void osc_token_ref_row(const float * b, int32_t V, int32_t y, struct osc_token_ref * out);

// A method's row l [V] with target y; ref/b NULL: only nll. The nll term is
// computed as m + log(Σ exp(l_j - m)) - l[y], m = max l (fp64, j in order).
void osc_token_score_row(const float * l, int32_t V, int32_t y, const float * b, const struct osc_token_ref * ref,
                         struct osc_token_row * out);

// The summary a report carries per method (report.json "next_token", the tables).
struct oscar_token_stats {
    int64_t n;                          // scored positions
    double  nll_mean, nll_stderr;       // nats
    double  ppl, ppl_stderr;            // exp(nll_mean) and ppl · nll_stderr
    bool    has_ref;                    // false: no reference (bf16 not run); the fields below are 0
    double  kl_mean, kl_stderr, kl_median, kl_p90, kl_p95, kl_p99, kl_max;   // nats
    double  same_top1, same_top1_stderr;                                     // fractions
    double  dp_rms, dp_rms_stderr;                                           // probability
    double  ln_ppl_ratio, ln_ppl_ratio_stderr;                               // mean(nll - nll_ref)
    double  dppl, dppl_stderr;                                               // PPL - PPL_ref
};

// The scored rows of one method, in row order. cap is the most rows it will hold.
struct osc_token_acc {
    int64_t n, cap;
    bool    has_ref;
    double * nll, * nll_ref, * kl, * dp;   // [cap] each (nll_ref/kl/dp only with has_ref)
    int64_t n_same;
};

enum oscar_status osc_token_acc_init(struct osc_token_acc * a, int64_t cap, bool has_ref);
// Appends rows[0..nr) in order. Contract: n + nr <= cap.
void osc_token_acc_add(struct osc_token_acc * a, const struct osc_token_row * rows, int32_t nr);
// Fills *out from the rows. Uses a's arrays as scratch (kl is sorted, dp squared):
// call once, then osc_token_acc_free.
void osc_token_acc_finish(struct osc_token_acc * a, struct oscar_token_stats * out);
void osc_token_acc_free(struct osc_token_acc * a);

// The quantile at fraction f in [0, 1] of sorted[0..n), linearly interpolated
// between sorted[floor(f·(n-1))] and the next value (0 for n == 0).
double osc_quantile_sorted(const double * sorted, int64_t n, double f);

#endif
