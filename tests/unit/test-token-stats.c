// test-token-stats.c - lib/verify/token-stats (next-token KL / top-1 / Δp / perplexity spread)
// against hand-computed values and against a direct long-double softmax written here.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test-splitmix.h"
#include "verify/recall.h"
#include "verify/token-stats.h"

static void score(const float * l, const float * b, int32_t V, int32_t y, struct osc_token_row * row) {
    struct osc_token_ref ref;
    osc_token_ref_row(b, V, y, &ref);
    osc_token_score_row(l, V, y, b, &ref, row);
}

// Two rows worked by hand. V 2: p = (1/2, 1/2), q = (3/4, 1/4), y = 1:
//   KL = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3); nll = ln 4, nll_ref = ln 2; Δp = 1/4 - 1/2;
//   argmax: l -> 0, b -> 0 (a tie: the first index).
// V 3: b = (1, 2, 3), l = (3, 2, 1), equal lse, so KL = Σ p_j (b_j - l_j) = 2 (p_2 - p_0), and the
//   argmaxes differ (0 vs 2).
static void test_hand_rows(void ** state) {
    (void) state;
    struct osc_token_row r;
    const float l2[2] = {(float) log(3.0), 0}, b2[2] = {0, 0};
    score(l2, b2, 2, 1, &r);
    double l0 = (double) (float) log(3.0);   // the fp32 logit the row really holds
    double q1 = 1 / (exp(l0) + 1);
    assert_true(fabs(r.kl - (0.5 * log(0.5 / (1 - q1)) + 0.5 * log(0.5 / q1))) < 1e-15);
    assert_true(fabs(r.kl - 0.5 * log(4.0 / 3)) < 1e-7);   // the fp32 rounding of ln 3
    assert_true(fabs(r.nll - log(4.0)) < 1e-7 && fabs(r.nll_ref - log(2.0)) < 1e-15);
    assert_true(fabs(r.dp - (q1 - 0.5)) < 1e-15);
    assert_int_equal(r.same_top, 1);
    const float l3[3] = {3, 2, 1}, b3[3] = {1, 2, 3};
    score(l3, b3, 3, 2, &r);
    double z = exp(1) + exp(2) + exp(3);
    assert_true(fabs(r.kl - 2 * (exp(3) - exp(1)) / z) < 1e-14);
    assert_true(fabs(r.nll - (log(z) - 1)) < 1e-14 && fabs(r.nll_ref - (log(z) - 3)) < 1e-14);
    assert_int_equal(r.same_top, 0);
    // without a reference only the perplexity term
    osc_token_score_row(l3, 3, 2, NULL, NULL, &r);
    assert_true(fabs(r.nll - (log(z) - 1)) < 1e-14 && r.kl == 0 && r.dp == 0);
}

// Random rows of V 3000 against a long-double softmax: KL = Σ p ln(p/q), nll, Δp, argmax.
// fp64 sums of 3000 terms of size <= 1 carry <= 3000 * 2^-53 ~ 3e-13 absolute error; 1e-11 leaves
// room for the exp/log rounding. The perplexity term has the bits of run.c's former sum
// (m + log Σ exp(l - m) - l[y], m the running max). Identical rows give KL exactly 0.
static void test_random_rows(void ** state) {
    (void) state;
    enum { V = 3000 };
    const char * env = getenv("OSCAR_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t) time(NULL), sm = seed;
    printf("seed %llu (OSCAR_SEED replays it)\n", (unsigned long long) seed);
    static float l[V], b[V];
    for (int t = 0; t < 20; t++) {
        float scale = 0.5f + 4.0f * (float) t;   // near-uniform to very peaked
        for (int j = 0; j < V; j++) {
            b[j] = scale * (float) splitmix_unif(&sm);
            l[j] = b[j] + (t % 4 == 0 ? 0.0f : (float) splitmix_unif(&sm) * 0.5f * (float) (t % 4));
        }
        int32_t y = (int32_t) (splitmix_next(&sm) % V);
        struct osc_token_row r;
        score(l, b, V, y, &r);
        long double mb = -INFINITY, ml = -INFINITY, zb = 0, zl = 0, kl = 0;
        int32_t tb = 0, tl = 0;
        for (int j = 0; j < V; j++) {
            if (b[j] > mb) mb = b[j], tb = j;
            if (l[j] > ml) ml = l[j], tl = j;
        }
        for (int j = 0; j < V; j++) zb += expl(b[j] - mb), zl += expl(l[j] - ml);
        for (int j = 0; j < V; j++) {
            long double p = expl(b[j] - mb) / zb, q = expl(l[j] - ml) / zl;
            kl += p * logl(p / q);
        }
        long double nll = logl(zl) + ml - l[y], nll_b = logl(zb) + mb - b[y];
        double mx = -INFINITY, zz = 0;
        for (int j = 0; j < V; j++) mx = (double) l[j] > mx ? (double) l[j] : mx;
        for (int j = 0; j < V; j++) zz += exp((double) l[j] - mx);
        double old_term = mx + log(zz) - (double) l[y];
        if (t < 3) printf("t %d: KL %.6e (long double %.6Le), nll %.6f\n", t, r.kl, kl, r.nll);
        assert_true(r.nll == old_term);
        assert_true(fabsl(r.kl - kl) < 1e-11L);
        assert_true(fabsl(r.nll - nll) < 1e-11L && fabsl(r.nll_ref - nll_b) < 1e-11L);
        assert_true(fabsl(r.dp - (expl(-nll) - expl(-nll_b))) < 1e-12L);
        assert_int_equal(r.same_top, tl == tb);
        if (t % 4 == 0) assert_true(r.kl == 0 && r.dp == 0 && r.same_top == 1);
        else assert_true(r.kl > 0);
    }
}

// Five rows with round numbers; every summary value worked by hand:
//   nll {1..5}: mean 3, stderr sqrt(Σ(x-3)² / (5·4)) = sqrt(10/20)
//   KL sorted {.1 .2 .3 .4 .5}: mean .3, stderr sqrt(.1/20), median .3, p90 at 0.9·4 = 3.6 ->
//   .4·.4 + .6·.5 = .46, p95 (3.8) .48, p99 (3.96) .496, max .5
//   same top-1 4/5 ± sqrt(.8·.2/4) = .2
//   Δp² {.01 .01 .04 0 0}: mean .012, stderr sqrt(Σ dev² / 20) with dev² summing to 1.08e-3
//   nll - nll_ref {0 1 1 2 2}: mean 1.2, stderr sqrt(2.8/20)
//   Δppl = e^3 - e^1.8 ± sqrt(e^6·.5 + e^3.6·.14 - 2 e^4.8·.25) (cov of the means 5/20)
static void test_summary_hand(void ** state) {
    (void) state;
    const double nll[5] = {1, 2, 3, 4, 5}, ref[5] = {1, 1, 2, 2, 3}, kl[5] = {.1, .4, .2, .3, .5};
    const double dp[5] = {.1, -.1, .2, 0, 0};
    const int32_t same[5] = {1, 0, 1, 1, 1};
    struct osc_token_acc a;
    assert_int_equal(osc_token_acc_init(&a, 5, true), OSCAR_OK);
    for (int i = 0; i < 5; i++) {
        struct osc_token_row r = {.nll = nll[i], .nll_ref = ref[i], .kl = kl[i], .dp = dp[i], .same_top = same[i]};
        osc_token_acc_add(&a, &r, 1);
    }
    struct oscar_token_stats s;
    osc_token_acc_finish(&a, &s);
    osc_token_acc_free(&a);
    const double e = 1e-12;
    assert_int_equal(s.n, 5);
    assert_true(s.has_ref);
    assert_true(fabs(s.nll_mean - 3) < e && fabs(s.nll_stderr - sqrt(0.5)) < e);
    assert_true(fabs(s.ppl - exp(3)) < 1e-10 && fabs(s.ppl_stderr - exp(3) * sqrt(0.5)) < 1e-10);
    assert_true(fabs(s.kl_mean - .3) < e && fabs(s.kl_stderr - sqrt(.005)) < e);
    assert_true(fabs(s.kl_median - .3) < e && fabs(s.kl_p90 - .46) < e && fabs(s.kl_p95 - .48) < e);
    assert_true(fabs(s.kl_p99 - .496) < e && s.kl_max == .5);
    assert_true(fabs(s.same_top1 - .8) < e && fabs(s.same_top1_stderr - .2) < e);
    assert_true(fabs(s.dp_rms - sqrt(.012)) < e);
    assert_true(fabs(s.dp_rms_stderr - 0.5 / sqrt(.012) * sqrt(1.08e-3 / 20)) < e);
    assert_true(fabs(s.ln_ppl_ratio - 1.2) < e && fabs(s.ln_ppl_ratio_stderr - sqrt(.14)) < e);
    assert_true(fabs(s.dppl - (exp(3) - exp(1.8))) < 1e-10);
    double v = exp(6) * .5 + exp(3.6) * .14 - 2 * exp(4.8) * .25;
    assert_true(fabs(s.dppl_stderr - sqrt(v)) < 1e-10);
    // an even count: the median is the mean of the middle two (llama-perplexity's rule)
    const double sorted[4] = {1, 2, 4, 8};
    assert_true(osc_quantile_sorted(sorted, 4, 0.5) == 3);
    assert_true(osc_quantile_sorted(sorted, 4, 0) == 1 && osc_quantile_sorted(sorted, 4, 1) == 8);
    assert_true(osc_quantile_sorted(sorted, 0, 0.5) == 0);
    // no reference: only the perplexity spread; one row: no spread at all
    assert_int_equal(osc_token_acc_init(&a, 1, false), OSCAR_OK);
    struct osc_token_row r1 = {.nll = 2};
    osc_token_acc_add(&a, &r1, 1);
    osc_token_acc_add(&a, &r1, 1);   // beyond cap: ignored
    osc_token_acc_finish(&a, &s);
    osc_token_acc_free(&a);
    assert_int_equal(s.n, 1);
    assert_true(!s.has_ref && s.nll_stderr == 0 && s.kl_mean == 0 && fabs(s.ppl - exp(2)) < e);
}

// The recall probe's layout (recall.h): filler 0..F-1 with the needle at round(depth·F), then
// the question and the answer; answer_at = T - n_answer; the greedy prefix stops at the first
// row whose argmax (first index of the max) is not the answer token; windows too short are refused.
static void test_recall_layout(void ** state) {
    (void) state;
    enum { T = 20 };
    int32_t filler[T], seq[T], at = 0;
    for (int i = 0; i < T; i++) filler[i] = 100 + i;
    const int32_t needle[3] = {1, 2, 3}, answer[2] = {7, 8}, question[4] = {4, 5, 6, 9};
    struct oscar_recall_probe pr[3] = {{needle, 3, answer, 2, 0.0}, {needle, 3, answer, 2, 0.5},
                                       {needle, 3, answer, 2, 1.0}};
    struct oscar_verify_recall rc = {.probes = pr, .n_probes = 3, .question = question, .n_question = 4};
    assert_int_equal(osc_recall_check(&rc, T, 100), OSCAR_OK);
    // F = 20 - 4 - 2 - 3 = 11 filler tokens
    const int32_t want_pos[3] = {0, 6, 11};   // round(0.5 * 11) = 6 (lround: halves away from 0)
    for (int32_t k = 0; k < 3; k++) {
        int32_t pos = osc_recall_build(&rc, k, filler, T, seq, &at);
        assert_int_equal(pos, want_pos[k]);
        assert_int_equal(at, 18);
        int o = 0;
        for (int i = 0; i < pos; i++) assert_int_equal(seq[o++], 100 + i);
        for (int i = 0; i < 3; i++) assert_int_equal(seq[o++], needle[i]);
        for (int i = pos; i < 11; i++) assert_int_equal(seq[o++], 100 + i);
        for (int i = 0; i < 4; i++) assert_int_equal(seq[o++], question[i]);
        assert_int_equal(seq[18], 7);
        assert_int_equal(seq[19], 8);
    }
    assert_int_equal(osc_recall_check(&rc, 9, 100), OSCAR_ERR_INVALID);    // no filler left
    assert_int_equal(osc_recall_check(&rc, T, 5), OSCAR_ERR_INVALID);      // corpus shorter than the filler
    pr[1].depth = 1.5;
    assert_int_equal(osc_recall_check(&rc, T, 100), OSCAR_ERR_INVALID);
    // greedy prefix over rows of V 4
    const float rows[3 * 4] = {0, 0, 1, 0, /* -> 2 */ 3, 3, 0, 0, /* tie -> 0 */ 0, 0, 0, 5 /* -> 3 */};
    const int32_t a1[3] = {2, 0, 3}, a2[3] = {2, 1, 3}, a3[3] = {1, 0, 3};
    assert_int_equal(osc_recall_prefix(rows, 4, a1, 3), 3);
    assert_int_equal(osc_recall_prefix(rows, 4, a2, 3), 1);
    assert_int_equal(osc_recall_prefix(rows, 4, a3, 3), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_rows),
        cmocka_unit_test(test_random_rows),
        cmocka_unit_test(test_summary_hand),
        cmocka_unit_test(test_recall_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
