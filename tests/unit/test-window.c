// test-window.c - sliding-window layers in the calibration and verify consumers: VATT's
// attention-mass weights, the held-out metrics and the candidate errors of a layer whose window
// W is shorter than its sequences equal a dense brute force with the explicit mask
// (query t sees key p iff t - W < p <= t, the forward's and transformers' rule), and the
// full-causal result (window 0) differs from it.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "stats/stats.h"
#include "verify/metrics.h"

enum { T = 48, HQ = 2, HKV = 1, D = 8, C = 6, W = 7, NS = 2 };
static const int32_t SS[NS + 1] = {0, 30, 48};   // both sequences longer than W

struct rows { float q[T * HQ * D], k[T * HKV * D], v[T * HKV * D], kh[T * HKV * D], vh[T * HKV * D], wo[C * HQ * D]; };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float unif(void) {   // [-1, 1), fixed sequence
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float) ((double) (rng >> 40) / (double) (1ull << 24) * 2.0 - 1.0);
}

static void make_rows(struct rows * r) {
    for (int i = 0; i < T * HQ * D; i++) r->q[i] = 2.0f * unif();
    for (int i = 0; i < T * HKV * D; i++) r->k[i] = 2.0f * unif(), r->v[i] = unif();
    for (int i = 0; i < T * HKV * D; i++) r->kh[i] = r->k[i] + 0.1f * unif(), r->vh[i] = r->v[i] + 0.1f * unif();
    for (int i = 0; i < C * HQ * D; i++) r->wo[i] = unif();
}

static bool sees(int t, int p, int w) { return p <= t && (w == 0 || t - p < w); }

static double dot(const float * a, const float * b) {
    double s = 0.0;
    for (int d = 0; d < D; d++) s += (double) a[d] * (double) b[d];
    return s;
}

// Dense softmax row of query (t, head j) of sequence [b, e) over the keys it sees (keys: kk).
static void probs(const struct rows * r, const float * kk, int b, int t, int j, int w, double scale, double * P) {
    double m = -INFINITY, z = 0.0;
    for (int p = b; p <= t; p++) P[p] = sees(t - b, p - b, w) ? dot(r->q + (t * HQ + j) * D, kk + p * D) * scale : (double) -INFINITY;
    for (int p = b; p <= t; p++) m = fmax(m, P[p]);
    for (int p = b; p <= t; p++) z += exp(P[p] - m);
    for (int p = b; p <= t; p++) P[p] = exp(P[p] - m) / z;
}

static void close_to(double a, double ref, double rel, const char * what) {
    if (!(fabs(a - ref) <= rel * fabs(ref))) fail_msg("%s: %.12g vs reference %.12g", what, a, ref);
}

// VATT: w_t = Σ_j Σ_{i sees t} p_{j,i,t}², sigma = Σ w v vᵀ / Σ w (one KV head).
static void vatt_ref(const struct rows * r, int w, double * sig) {
    double wt[T] = {0}, P[T], sw = 0.0;
    for (int s = 0; s < NS; s++)
        for (int j = 0; j < HQ; j++)
            for (int t = SS[s]; t < SS[s + 1]; t++) {
                probs(r, r->k, SS[s], t, j, w, 1.0 / sqrt((double) D), P);
                for (int p = SS[s]; p <= t; p++) wt[p] += P[p] * P[p];
            }
    memset(sig, 0, sizeof(double) * D * D);
    for (int t = 0; t < T; t++) {
        sw += wt[t];
        for (int a = 0; a < D; a++)
            for (int c = 0; c < D; c++) sig[a * D + c] += wt[t] * (double) r->v[t * D + a] * (double) r->v[t * D + c];
    }
    for (int i = 0; i < D * D; i++) sig[i] /= sw;
}

static void vatt(const struct rows * r, int w, double * sig) {
    struct oscar_stats_params p = oscar_stats_default_params();
    p.n_layer = 1, p.n_head = HQ, p.n_head_kv = HKV, p.head_dim = D, p.kinds = OSCAR_STATS_VATT, p.n_threads = 2;
    p.max_tokens = T;
    struct oscar_stats * s;
    assert_int_equal(oscar_stats_init(&p, &s), OSCAR_OK);
    const struct oscar_stats_chunk c = {.layer = 0, .n_tokens = T, .n_seq = NS, .seq_start = SS, .q = r->q, .k = r->k,
                                        .v = r->v, .window = w};
    assert_int_equal(oscar_stats_add(s, &c), OSCAR_OK);
    assert_int_equal(oscar_stats_end_pass(s), OSCAR_OK);
    assert_int_equal(oscar_stats_sigma(s, OSCAR_STATS_VATT, 0, -1, sig), OSCAR_OK);
    oscar_stats_free(s);
}

static void test_vatt_window(void ** state) {
    (void) state;
    struct rows * r = malloc(sizeof *r);
    make_rows(r);
    double a[D * D], ref[D * D], full[D * D], dmax = 0.0;
    vatt(r, W, a);
    vatt_ref(r, W, ref);
    for (int i = 0; i < D * D; i++) dmax = fmax(dmax, fabs(ref[i]));
    for (int i = 0; i < D * D; i++)
        if (fabs(a[i] - ref[i]) > 1e-9 * dmax) fail_msg("VATT [%d]: %.12g vs %.12g", i, a[i], ref[i]);
    vatt(r, 0, full);   // control: full causal attention gives other weights
    double diff = 0.0;
    for (int i = 0; i < D * D; i++) diff = fmax(diff, fabs(full[i] - ref[i]));
    assert_true(diff > 1e-4 * dmax);
    free(r);
}

static struct oscar_layer_input input(const struct rows * r, int w) {
    struct oscar_layer_input in = {.layer = 0, .n_tokens = T, .n_seq = NS, .seq_start = SS, .q = r->q, .k = r->k,
                                   .v = r->v, .wo = r->wo, .n_head = HQ, .n_head_kv = HKV, .head_dim = D, .n_embd = C,
                                   .window = w};
    return in;
}

// logit_err, kl and out_rel of the cache (kh, vh) at every query, dense with the mask.
static void metrics_ref(const struct rows * r, int w, double * logit, double * kl, double * out_rel, int64_t * pairs) {
    double num = 0.0, den = 0.0, k = 0.0, on = 0.0, od = 0.0, P[T], Ph[T];
    const double sc = 1.0 / sqrt((double) D);
    *pairs = 0;
    float * o = calloc(T * HQ * D, sizeof(float)), * oh = calloc(T * HQ * D, sizeof(float));
    for (int s = 0; s < NS; s++)
        for (int j = 0; j < HQ; j++)
            for (int t = SS[s]; t < SS[s + 1]; t++) {
                const float * q = r->q + (t * HQ + j) * D;
                probs(r, r->k, SS[s], t, j, w, sc, P);
                probs(r, r->kh, SS[s], t, j, w, sc, Ph);
                double ao[D] = {0}, ah[D] = {0};
                for (int p = SS[s]; p <= t; p++) {
                    if (!sees(t - SS[s], p - SS[s], w)) continue;
                    const double x = dot(q, r->k + p * D) * sc, y = dot(q, r->kh + p * D) * sc;
                    num += (y - x) * (y - x), den += x * x, (*pairs)++;
                    k += P[p] * log(P[p] / Ph[p]);
                    for (int d = 0; d < D; d++) ao[d] += P[p] * (double) r->v[p * D + d], ah[d] += Ph[p] * (double) r->vh[p * D + d];
                }
                for (int d = 0; d < D; d++) o[(t * HQ + j) * D + d] = (float) ao[d], oh[(t * HQ + j) * D + d] = (float) ah[d];
            }
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            double y = 0.0, yh = 0.0;
            for (int i = 0; i < HQ * D; i++) y += (double) r->wo[c * HQ * D + i] * (double) o[t * HQ * D + i],
                                             yh += (double) r->wo[c * HQ * D + i] * (double) oh[t * HQ * D + i];
            on += (yh - y) * (yh - y), od += y * y;
        }
    *logit = num / den, *kl = k / (T * HQ), *out_rel = on / od;
    free(o), free(oh);
}

static void test_metrics_window(void ** state) {
    (void) state;
    struct rows * r = malloc(sizeof *r);
    make_rows(r);
    // a tiering that keeps every row in one set: kh/vh everywhere (the window is what is tested)
    const struct oscar_tiering tr = {.mode = OSCAR_TIERS_STATIC, .n_sink = 0, .n_recent = 0, .n_flush = 8, .block = 1};
    struct oscar_layer_metrics m, full;
    struct oscar_layer_input in = input(r, W);
    assert_int_equal(oscar_verify_metrics_explicit(&in, &tr, r->kh, r->vh, r->kh, r->vh, 2, &m), OSCAR_OK);
    double logit, kl, out_rel;
    int64_t pairs;
    metrics_ref(r, W, &logit, &kl, &out_rel, &pairs);
    assert_int_equal(m.n_pairs, pairs * 1);
    close_to(m.logit_err, logit, 1e-5, "logit_err");
    close_to(m.kl, kl, 1e-3, "kl");
    close_to(m.out_rel, out_rel, 1e-4, "out_rel");
    in.window = 0;   // control
    assert_int_equal(oscar_verify_metrics_explicit(&in, &tr, r->kh, r->vh, r->kh, r->vh, 2, &full), OSCAR_OK);
    assert_true(full.n_pairs > m.n_pairs && fabs(full.out_rel - m.out_rel) > 1e-3 * m.out_rel);
    in.window = -1;   // refused by name
    assert_int_equal(oscar_verify_metrics_explicit(&in, &tr, r->kh, r->vh, r->kh, r->vh, 2, &full), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "window"));
    free(r);
}

// The clip search's candidate errors: K sums over the pairs each key is seen in, V through the
// exact windowed weights; both against the brute force and against the metrics.
static void test_candidates_window(void ** state) {
    (void) state;
    struct rows * r = malloc(sizeof *r);
    make_rows(r);
    const struct oscar_tiering tr = {.mode = OSCAR_TIERS_STATIC, .n_sink = 0, .n_recent = 0, .n_flush = 8, .block = 1};
    double kn[HKV], kd[HKV], vn[HKV + 1], vd, P[T], refn = 0.0, refd = 0.0;
    const float * kq[1] = {r->kh}, * vq[1] = {r->vh};
    for (int w = W; w >= 0; w -= W) {
        struct oscar_layer_input in = input(r, w);
        assert_int_equal(oscar_verify_candidate_errors(&in, &tr, 1, r->kh, r->vh, kq, vq, false, 2, kn, kd, vn, &vd),
                         OSCAR_OK);
        if (w == 0) {   // control: the full-causal sums are larger (more pairs)
            assert_true(kd[0] > refd * 1.2);
            break;
        }
        for (int s = 0; s < NS; s++)
            for (int j = 0; j < HQ; j++)
                for (int t = SS[s]; t < SS[s + 1]; t++)
                    for (int p = SS[s]; p <= t; p++) {
                        if (!sees(t - SS[s], p - SS[s], w)) continue;
                        const float * q = r->q + (t * HQ + j) * D;
                        const double x = dot(q, r->k + p * D), y = dot(q, r->kh + p * D);
                        refn += (y - x) * (y - x) / D, refd += x * x / D;
                    }
        close_to(kn[0], refn, 1e-9, "k_num");
        close_to(kd[0], refd, 1e-9, "k_den");
        // V: (A·(V̂ − V))·W_Oᵀ with the exact windowed A, dense
        double on = 0.0, od = 0.0;
        float * e = calloc(T * HQ * D, sizeof(float)), * o = calloc(T * HQ * D, sizeof(float));
        for (int s = 0; s < NS; s++)
            for (int j = 0; j < HQ; j++)
                for (int t = SS[s]; t < SS[s + 1]; t++) {
                    probs(r, r->k, SS[s], t, j, w, 1.0 / sqrt((double) D), P);
                    for (int p = SS[s]; p <= t; p++)
                        for (int d = 0; d < D; d++) {
                            if (!sees(t - SS[s], p - SS[s], w)) continue;
                            e[(t * HQ + j) * D + d] += (float) (P[p] * ((double) r->vh[p * D + d] - (double) r->v[p * D + d]));
                            o[(t * HQ + j) * D + d] += (float) (P[p] * (double) r->v[p * D + d]);
                        }
                }
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                double y = 0.0, ye = 0.0;
                for (int i = 0; i < HQ * D; i++) y += (double) r->wo[c * HQ * D + i] * (double) o[t * HQ * D + i],
                                                 ye += (double) r->wo[c * HQ * D + i] * (double) e[t * HQ * D + i];
                on += ye * ye, od += y * y;
            }
        close_to(vn[HKV], on, 1e-4, "v_num");
        close_to(vd, od, 1e-5, "v_den");
        // Σ k_num / Σ k_den is the metrics' logit_err with the candidate's keys
        struct oscar_layer_metrics m;
        assert_int_equal(oscar_verify_metrics_explicit(&in, &tr, r->kh, r->v, r->kh, r->v, 2, &m), OSCAR_OK);
        close_to(kn[0] / kd[0], m.logit_err, 1e-6, "k_num / k_den vs logit_err");
        free(e), free(o);
    }
    free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vatt_window),
        cmocka_unit_test(test_metrics_window),
        cmocka_unit_test(test_candidates_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
