// test-attn-scale.c - the score scale (Gemma 3's query_pre_attn_scalar^-1/2) as the consumers that
// rebuild softmax(q.k * scale) from captured rows take it: the verify metrics, the candidate errors
// (the clip / gate ranking), the kv-sim row attention and the stats' attention mass (VATT). The
// reference is independent of the scale parameter: the default scale 1/sqrt(D) on queries
// pre-multiplied by s*sqrt(D) forms the same scores. With s*sqrt(D) = 2 (D = 16, s = 1/2) every
// scaling is by a power of two and the results must agree bit for bit; with Gemma's s = 24^-1/2
// they agree to fp32 rounding of the scaled queries. Each case also checks that the scale matters
// (the unscaled queries give different numbers), so a consumer that ignored it would fail.
// End to end on tests/fixtures/models/tiny-gemma3 (query_pre_attn_scalar 24, head_dim 32): verify's
// KV-cache simulation with the identity method ("bf16") gives the forward's own perplexity bit for
// bit, and an INT2 method runs and changes it.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention/attention.h"
#include "model/model.h"
#include "stats/stats.h"
#include "verify/metrics.h"

#define SEED 20261203u

#include "test-rng.h"

enum { T = 48, HQ = 4, HKV = 2, D = 16, CE = 24, NC = 2 };
#define N ((size_t) T * HKV * D)
#define NQ ((size_t) T * HQ * D)

// Gemma's scale: q' = q * (s sqrt(D)) rounds each query element once (2^-24 relative), which moves
// each score by ~2^-24 |s q.k| (|s q.k| ~ 1 here) and the metrics by a few 1e-7 relative.
#define TOL 1e-5

#include "layer-fixture.h"

static void setup(struct fixture * f) {
    const double ratios[NC] = {1.0, 0.85};
    setup_layer(f, 20, 2, 4, ratios, 1);
}

// q times m (fp32), a new array.
static float * scaled(const float * q, size_t n, double m) {
    float * o = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) o[i] = (float) ((double) q[i] * m);
    return o;
}

static void metrics(const struct fixture * f, const float * q, float scale, struct oscar_layer_metrics * m) {
    struct oscar_layer_input in = f->in;
    in.q = q, in.attn_scale = scale;
    assert_int_equal(oscar_verify_metrics_explicit(&in, &f->tr, f->k_hp, f->v_hp, f->kq[1], f->vq[1], 2, m), OSCAR_OK);
}

static void check_metrics(float s, bool exact) {
    struct fixture f;
    setup(&f);
    float * q2 = scaled(f.q, NQ, (double) s * sqrt((double) D));
    struct oscar_layer_metrics a, b, plain;
    metrics(&f, f.q, s, &a);
    metrics(&f, q2, 0.0f, &b);
    metrics(&f, f.q, 0.0f, &plain);
    const double va[] = {a.kl, a.out_rel, a.logit_err, a.out_num, a.out_den};
    const double vb[] = {b.kl, b.out_rel, b.logit_err, b.out_num, b.out_den};
    const char * names[] = {"kl", "out_rel", "logit_err", "out_num", "out_den"};
    for (int i = 0; i < 5; i++) {
        if (exact) assert_memory_equal(&va[i], &vb[i], sizeof va[i]);
        else close_rel(va[i], vb[i], TOL, names[i]);
    }
    assert_true(a.kl > 0 && fabs(a.kl - plain.kl) > 1e-3 * plain.kl);   // the scale changes the softmax
    assert_true(fabs(a.out_num - plain.out_num) > 1e-3 * plain.out_num);
    free(q2);
    teardown(&f);
}

static void test_metrics_pow2(void ** state) { (void) state, printf("seed %u\n", SEED), check_metrics(0.5f, true); }
static void test_metrics_gemma(void ** state) { (void) state, check_metrics((float) (1.0 / sqrt(24.0)), false); }

static void candidates(const struct fixture * f, const float * q, float scale, double * kn, double * kd, double * vn,
                       double * vd) {
    struct oscar_layer_input in = f->in;
    in.q = q, in.attn_scale = scale;
    assert_int_equal(oscar_verify_candidate_errors(&in, &f->tr, NC, f->k_hp, f->v_hp, (const float * const *) f->kq,
                                                   (const float * const *) f->vq, true, 2, kn, kd, vn, vd), OSCAR_OK);
}

static void check_candidates(float s, bool exact) {
    struct fixture f;
    setup(&f);
    float * q2 = scaled(f.q, NQ, (double) s * sqrt((double) D));
    double kn[2][NC * HKV], kd[2][HKV], vn[2][NC * (HKV + 1)], vd[2], kn0[NC * HKV], kd0[HKV], vn0[NC * (HKV + 1)], vd0;
    candidates(&f, f.q, s, kn[0], kd[0], vn[0], &vd[0]);
    candidates(&f, q2, 0.0f, kn[1], kd[1], vn[1], &vd[1]);
    candidates(&f, f.q, 0.0f, kn0, kd0, vn0, &vd0);
    if (exact) {
        assert_memory_equal(kn[0], kn[1], sizeof kn[0]);
        assert_memory_equal(kd[0], kd[1], sizeof kd[0]);
        assert_memory_equal(vn[0], vn[1], sizeof vn[0]);
        assert_memory_equal(&vd[0], &vd[1], sizeof vd[0]);
    } else {
        for (int i = 0; i < NC * HKV; i++) close_rel(kn[0][i], kn[1][i], TOL, "K numerator");
        for (int i = 0; i < HKV; i++) close_rel(kd[0][i], kd[1][i], TOL, "K denominator");
        for (int i = 0; i < NC * (HKV + 1); i++) close_rel(vn[0][i], vn[1][i], TOL, "V numerator");
        close_rel(vd[0], vd[1], TOL, "V denominator");
    }
    // (q.e)^2 s^2 is not (q.e)^2 / D, and the V weights are another softmax
    assert_true(fabs(kn[0][0] - kn0[0]) > 1e-3 * kn0[0] && fabs(vn[0][0] - vn0[0]) > 1e-3 * vn0[0]);   // per-head V sums
    free(q2);
    teardown(&f);
}

static void test_candidates_pow2(void ** state) { (void) state, check_candidates(0.5f, true); }
static void test_candidates_gemma(void ** state) { (void) state, check_candidates((float) (1.0 / sqrt(24.0)), false); }

// The kv-sim / kv-decode row attention (oscar_kv_attend_query), HP rows before key 10, INT2 from there.
static void test_attend_query(void ** state) {
    (void) state;
    struct fixture f;
    setup(&f);
    float * q2 = scaled(f.q, NQ, 2.0);
    const size_t rs = (size_t) HKV * D;
    float * scr = malloc(sizeof(float) * oscar_kv_attend_scratch(T, D));
    float a[D], b[D], c[D];
    for (int64_t t = 0; t < T; t += 7) {
        const float * qa = f.q + (size_t) t * HQ * D, * qb = q2 + (size_t) t * HQ * D;
        oscar_kv_attend_query(qa, D, 0.5f, 0, rs, f.k_hp, f.v_hp, f.kq[0], f.vq[0], t, 10, T, scr, a);
        oscar_kv_attend_query(qb, D, 0.0f, 0, rs, f.k_hp, f.v_hp, f.kq[0], f.vq[0], t, 10, T, scr, b);
        oscar_kv_attend_query(qa, D, 0.0f, 0, rs, f.k_hp, f.v_hp, f.kq[0], f.vq[0], t, 10, T, scr, c);
        assert_memory_equal(a, b, sizeof a);
        if (t > 0) assert_memory_not_equal(a, c, sizeof a);
    }
    free(scr), free(q2);
    teardown(&f);
}

// VATT's attention-mass weights: sigma with the scale on q equals sigma with 1/sqrt(D) on q*s*sqrt(D);
// the checkpoint keeps the scale.
static void vatt(const float * q, const float * k, const float * v, const int32_t * ss, float scale, double * out,
                 struct oscar_stats ** keep) {
    struct oscar_stats_params p = oscar_stats_default_params();
    p.n_layer = 1, p.n_head = HQ, p.n_head_kv = HKV, p.head_dim = D, p.kinds = OSCAR_STATS_VATT, p.n_threads = 2;
    p.max_tokens = T, p.attn_scale = scale;
    struct oscar_stats * s;
    assert_int_equal(oscar_stats_init(&p, &s), OSCAR_OK);
    const struct oscar_stats_chunk c = {.layer = 0, .n_tokens = T, .n_seq = 2, .seq_start = ss, .q = q, .k = k, .v = v};
    assert_int_equal(oscar_stats_add(s, &c), OSCAR_OK);
    assert_int_equal(oscar_stats_end_pass(s), OSCAR_OK);
    assert_int_equal(oscar_stats_sigma(s, OSCAR_STATS_VATT, 0, -1, out), OSCAR_OK);
    if (keep) *keep = s;
    else oscar_stats_free(s);
}

static void test_stats_vatt(void ** state) {
    (void) state;
    struct fixture f;
    setup(&f);
    const float sg = (float) (1.0 / sqrt(24.0));
    float * q2 = scaled(f.q, NQ, 2.0), * qg = scaled(f.q, NQ, (double) sg * sqrt((double) D));
    double a[D * D], b[D * D], c[D * D], g[D * D], h[D * D];
    struct oscar_stats * s;
    vatt(f.q, f.k, f.v, f.ss, 0.5f, a, &s);
    vatt(q2, f.k, f.v, f.ss, 0.0f, b, NULL);
    vatt(f.q, f.k, f.v, f.ss, 0.0f, c, NULL);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    vatt(f.q, f.k, f.v, f.ss, sg, g, NULL);
    vatt(qg, f.k, f.v, f.ss, 0.0f, h, NULL);
    double mx = 0.0;   // off-diagonal entries can be near 0: compare against the matrix's scale
    for (int i = 0; i < D * D; i++) mx = fmax(mx, fabs(h[i]));
    for (int i = 0; i < D * D; i++)
        if (fabs(g[i] - h[i]) > TOL * mx) fail_msg("VATT [%d]: %.10g vs %.10g (max %.3g)", i, g[i], h[i], mx);
    // the scale survives a checkpoint (the header's attn_scale, 0 in files written before it)
    size_t n = oscar_stats_checkpoint_size(s);
    void * buf = malloc(n);
    assert_int_equal(oscar_stats_save(s, buf, n), OSCAR_OK);
    struct oscar_stats * r;
    assert_int_equal(oscar_stats_load(buf, n, 1, T, &r), OSCAR_OK);
    assert_true(oscar_stats_get_params(r).attn_scale == 0.5f);
    oscar_stats_free(r), oscar_stats_free(s), free(buf);
    // a bad scale is refused by name
    struct oscar_stats_params p = oscar_stats_default_params();
    p.n_layer = 1, p.n_head = HQ, p.n_head_kv = HKV, p.head_dim = D, p.attn_scale = -1.0f;
    assert_int_equal(oscar_stats_init(&p, &s), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "score scale"));
    free(q2), free(qg);
    teardown(&f);
}

static void gemma3_ppl(const struct oscar_model * m, const int32_t * tok, int32_t n, const char * method,
                       struct oscar_ppl_result * r) {
    const struct oscar_model_config * c = &m->config;
    struct oscar_ppl_params pp = {.n_ctx = n, .stride = n, .n_threads = 2};
    struct oscar_kv_sim * sim = NULL;
    struct oscar_attention_override ov;
    if (method) {
        struct oscar_tiering tr = {.mode = OSCAR_TIERS_STATIC, .n_sink = 2, .n_recent = 2, .n_flush = 8, .block = 1};
        struct oscar_kv_transform tf;
        assert_int_equal(oscar_kv_transform_preset(method, c->n_layer, c->n_head_kv, c->head_dim, 0, OSCAR_META_F32,
                                                   &tr, false, NULL, NULL, false, NULL, NULL, &tf), OSCAR_OK);
        assert_int_equal(oscar_kv_sim_init(&tf, c, n, 2, &sim), OSCAR_OK);
        ov = oscar_kv_sim_override(sim);
        pp.attention = &ov;
    }
    assert_int_equal(oscar_perplexity(m, tok, 4 * n, &pp, r), OSCAR_OK);
    oscar_kv_sim_free(sim);
}

static void test_gemma3_sim(void ** state) {
    (void) state;
    struct oscar_model * m = NULL;
    assert_int_equal(oscar_model_load("tests/fixtures/models/tiny-gemma3", &m), OSCAR_OK);
    assert_false(oscar_attn_scale_is_default(&m->config));
    const int32_t n = oscar_model_window(&m->config);   // 8: windows the simulation attends exactly
    int32_t tok[64];
    for (int i = 0; i < 64; i++) tok[i] = (int32_t) ((i * 97 + 13) % m->config.n_vocab);
    struct oscar_ppl_result exact, bf16, had;
    gemma3_ppl(m, tok, n, NULL, &exact);
    gemma3_ppl(m, tok, n, "bf16", &bf16);
    gemma3_ppl(m, tok, n, "hadamard", &had);
    printf("tiny-gemma3 ppl: forward %.6f, sim bf16 %.6f, hadamard INT2 %.6f\n", exact.ppl, bf16.ppl, had.ppl);
    assert_memory_equal(&exact.nll_sum, &bf16.nll_sum, sizeof exact.nll_sum);
    assert_true(isfinite(had.ppl) && had.nll_sum != exact.nll_sum);
    // windows of 2W tokens: the simulation's sliding layers attend to their last W keys as the
    // forward does (the same bits), and a control with full causal attention differs
    gemma3_ppl(m, tok, 2 * n, NULL, &exact);
    gemma3_ppl(m, tok, 2 * n, "bf16", &bf16);
    assert_memory_equal(&exact.nll_sum, &bf16.nll_sum, sizeof exact.nll_sum);
    struct oscar_ppl_result full;
    m->config.sliding_window = 0;
    gemma3_ppl(m, tok, 2 * n, NULL, &full);
    m->config.sliding_window = n;
    printf("tiny-gemma3 ppl at 2W: windowed %.6f (sim %.6f), full causal %.6f\n", exact.ppl, bf16.ppl, full.ppl);
    assert_true(full.nll_sum != exact.nll_sum);
    oscar_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_pow2),    cmocka_unit_test(test_metrics_gemma),
        cmocka_unit_test(test_candidates_pow2), cmocka_unit_test(test_candidates_gemma),
        cmocka_unit_test(test_attend_query),    cmocka_unit_test(test_stats_vatt),
        cmocka_unit_test(test_gemma3_sim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
