// test-verify.c - lib/verify: metrics on cases with known answers, the tiering
// rule against lib/attention's tier simulator, the simulated quantized-cache
// attention against a token-by-token paged-cache decode, and quantized-cache
// perplexity with every tier bf16 against plain perplexity; the driver
// (oscar_verify_run) against oscar_perplexity and its own invariants; the
// report.json schema keys, the SVG and the model-card update idempotence.
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
#include "attention/kv-cache.h"
#include "rotation/rotation.h"
#include "verify/metrics.h"
#include "verify/report.h"
#include "verify/verify.h"

#include <jansson.h>
#include <unistd.h>
#include "util/fs.h"

#define SEED 12345u

#include "test-rng.h"

enum { T = 96, HQ = 4, HKV = 2, D = 64, CE = 48 };

struct layer { float * q, * k, * v, * wo; int32_t ss[3]; struct oscar_layer_input in; };
static void make_layer(struct layer * l) {
    l->q = rnd((size_t) T * HQ * D, 1.0), l->k = rnd((size_t) T * HKV * D, 1.0), l->v = rnd((size_t) T * HKV * D, 1.0);
    l->wo = rnd((size_t) CE * HQ * D, 0.1);
    l->ss[0] = 0, l->ss[1] = 40, l->ss[2] = T;   // two sequences
    l->in = (struct oscar_layer_input){.layer = 0, .n_tokens = T, .n_seq = 2, .seq_start = l->ss, .q = l->q,
                                       .k = l->k, .v = l->v, .wo = l->wo, .n_head = HQ, .n_head_kv = HKV,
                                       .head_dim = D, .n_embd = CE};
}
static void free_layer(struct layer * l) { free(l->q), free(l->k), free(l->v), free(l->wo); }

static const struct oscar_tiering none = {.mode = OSCAR_TIERS_NONE, .n_flush = 8, .block = 1};

static void test_identity_zero(void ** state) {
    (void) state;
    printf("seed %u\n", SEED);
    struct layer l;
    make_layer(&l);
    struct oscar_kv_transform tf;
    assert_int_equal(oscar_kv_transform_preset("bf16", 1, HKV, D, 0, OSCAR_META_F32, &none, false, NULL, NULL, false,
                                               NULL, NULL, &tf), OSCAR_OK);
    struct oscar_layer_metrics m;
    assert_int_equal(oscar_verify_layer_metrics(&tf, &l.in, 2, &m), OSCAR_OK);
    // identity: every transformed value equals the original bit for bit, so every error sum is exactly 0
    assert_true(m.k_err == 0 && m.v_err == 0 && m.logit_num == 0 && m.out_num == 0);
    assert_true(m.kl == 0.0);
    assert_int_equal(m.n_queries, T * HQ);
    assert_int_equal(m.n_pairs, (int64_t) HQ * (40 * 41 / 2 + 56 * 57 / 2));
    assert_true(m.k_ref > 0 && m.out_den > 0);
    // a real quantizer gives a non-zero error on the same data
    assert_int_equal(oscar_kv_transform_preset("naive", 1, HKV, D, 0, OSCAR_META_F32, &none, false, NULL, NULL, false,
                                               NULL, NULL, &tf), OSCAR_OK);
    assert_int_equal(oscar_verify_layer_metrics(&tf, &l.in, 2, &m), OSCAR_OK);
    assert_true(m.k_rel_mse > 0.01 && m.kl > 0 && m.out_rel > 0.01);
    free_layer(&l);
}

// V -> (1+eps) V: relMSE_V = eps^2, o -> (1+eps) o so post-W_O rel = eps^2, K untouched: KL = logit_err = 0.
// K -> (1+eps) K: logit_err = eps^2 exactly (each logit scales by 1+eps).
// Tolerance: the scaled copies are rounded to fp32 (relative 6e-8 per element), so eps^2 = 1e-4 is matched
// to ~2*6e-8/eps = 1.2e-5 relative; attention sums in fp64 add < 1e-12. We allow 1e-4 relative (of eps^2).
static void test_scaling(void ** state) {
    (void) state;
    struct layer l;
    make_layer(&l);
    const double eps = 0.01;
    size_t n = (size_t) T * HKV * D;
    float * vs = malloc(sizeof(float) * n), * ks = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) vs[i] = (float) ((double) l.v[i] * (1 + eps)), ks[i] = (float) ((double) l.k[i] * (1 + eps));
    struct oscar_layer_metrics m;
    assert_int_equal(oscar_verify_metrics_explicit(&l.in, &none, l.k, l.v, l.k, vs, 2, &m), OSCAR_OK);
    assert_true(fabs(m.v_rel_mse - eps * eps) < 1e-4 * eps * eps);
    assert_true(fabs(m.out_rel - eps * eps) < 1e-4 * eps * eps);
    assert_true(m.kl == 0.0 && m.logit_err == 0.0 && m.k_rel_mse == 0.0);
    assert_int_equal(oscar_verify_metrics_explicit(&l.in, &none, l.k, l.v, ks, l.v, 2, &m), OSCAR_OK);
    assert_true(fabs(m.logit_err - eps * eps) < 1e-4 * eps * eps);
    assert_true(fabs(m.k_rel_mse - eps * eps) < 1e-4 * eps * eps);
    assert_true(m.kl > 0);
    free(vs), free(ks), free_layer(&l);
}

// K -> K + u (same u for every key): every logit of a query shifts by q.u, so softmax and the output are
// unchanged: KL = 0 and post-W_O = 0 up to rounding, while logit_err = Σ(q.u)^2 |keys| / Σ(q.k)^2 > 0.
// Rounding: logits ~ |q||k|/sqrt(D) ~ 8 carry fp32 error ~8*6e-8*sqrt(D) ~ 4e-6 -> KL ~ (4e-6)^2 ~ 1e-11;
// we require KL < 1e-9 and post-W_O < 1e-9 (vs ~1e-2 for an unrelated perturbation).
static void test_constant_shift(void ** state) {
    (void) state;
    struct layer l;
    make_layer(&l);
    size_t n = (size_t) T * HKV * D;
    float u[HKV * D];
    for (int i = 0; i < HKV * D; i++) u[i] = (float) nrand();
    float * ku = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) ku[i] = l.k[i] + u[i % (HKV * D)];
    struct oscar_layer_metrics m;
    assert_int_equal(oscar_verify_metrics_explicit(&l.in, &none, l.k, l.v, ku, l.v, 2, &m), OSCAR_OK);
    assert_true(m.kl < 1e-9);
    assert_true(m.out_rel < 1e-9);
    // analytic logit error numerator: Σ_t Σ_j (t - s + 1)(q.u)^2 / D, same denominator
    double num = 0;
    for (int32_t s = 0; s < 2; s++)
        for (int32_t t = l.ss[s]; t < l.ss[s + 1]; t++)
            for (int32_t j = 0; j < HQ; j++) {
                double qu = 0;
                for (int d = 0; d < D; d++) qu += (double) l.q[((size_t) t * HQ + j) * D + d] * (double) u[(j / 2) * D + d];
                num += (double) (t - l.ss[s] + 1) * qu * qu / D;
            }
    assert_true(fabs(m.logit_num - num) < 1e-4 * num);   // fp32 logits: 1e-5 relative per term
    free(ku), free_layer(&l);
}

// The closed-form DECODE tiering equals lib/attention's tier simulator (prefill S0 as a final chunk,
// then one decode step per token) for every (key, query) pair, over many (P, R, N_Q, S0).
static void test_tier_rule(void ** state) {
    (void) state;
    int64_t Ps[] = {0, 4, 32}, Rs[] = {0, 8, 24, 128}, S0s[] = {0, 1, 3, 40, 200};
    int32_t NQs[] = {1, 8};
    const int64_t N = 300;
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t c = 0; c < 2; c++)
                for (size_t e = 0; e < 5; e++) {
                    int64_t S0 = S0s[e] ? S0s[e] : (Ps[a] ? Ps[a] : 1);
                    struct oscar_tiering tr = {.mode = OSCAR_TIERS_DECODE, .n_sink = Ps[a], .n_recent = Rs[b],
                                               .n_flush = NQs[c], .prompt_len = S0, .block = 1};
                    struct oscar_tier_sim sim;
                    assert_int_equal(oscar_tier_sim_init(&sim, Ps[a], Rs[b], NQs[c], N), OSCAR_OK);
                    assert_int_equal(oscar_tier_sim_prefill(&sim, S0, true), OSCAR_OK);
                    for (int64_t t = S0; t < N; t++) {
                        if (t > S0 || S0 == 0) assert_true(oscar_tier_sim_decode(&sim) >= 0);
                        if (t == S0 && S0 > 0) continue;   // query S0-1 is the last prefill row
                        for (int64_t p = 0; p <= t && p < sim.len; p++) {
                            bool want = sim.tier[p] == OSCAR_TIER_INT2;
                            if (oscar_tier_is_int2(&tr, p, sim.len - 1, N) != want) {
                                fprintf(stderr, "P %lld R %lld NQ %d S0 %lld: p %lld t %lld\n", (long long) Ps[a],
                                        (long long) Rs[b], NQs[c], (long long) S0, (long long) p,
                                        (long long) (sim.len - 1));
                                fail();
                            }
                        }
                    }
                    oscar_tier_sim_free(&sim);
                }
}

// The simulated cache attention equals a real paged cache fed token by token (prefill of S0 rows, then
// decode_append + tiered decode attention per token) for an OSCAR-like transform (explicit rotation,
// clips, sort prefill / bisect demotion, bf16 HP rows). Both quantize identical bf16 rotated rows, so the
// INT2 codes are identical; outputs differ only by fp32 summation order and by attending in the rotated vs
// unrotated basis: logit error ~ sqrt(D)*eps32*|q||k|/sqrt(D) ~ 1e-6, output error <= that times max|v|
// (~4): bound 1e-4 absolute leaves a 10x margin while a single wrong tier (INT2 error ~0.1) fails it.
static void test_sim_vs_cache(void ** state) {
    (void) state;
    enum { N = 200, P = 8, R = 32, NQ = 8 };
    float * k = rnd((size_t) N * HKV * D, 1.0), * v = rnd((size_t) N * HKV * D, 1.0), * q = rnd((size_t) N * HQ * D, 1.0);
    float Rk[D * D], Rv[D * D];
    assert_int_equal(oscar_hadamard_matrix_f32(D, Rk), OSCAR_OK);
    for (int i = 0; i < D; i++)   // R_V = H with rows permuted (still orthogonal, not symmetric)
        memcpy(Rv + (size_t) i * D, Rk + (size_t) ((i * 5) % D) * D, sizeof(float) * D);
    struct oscar_tiering tr = {.mode = OSCAR_TIERS_DECODE, .n_sink = P, .n_recent = R, .n_flush = NQ,
                               .prompt_len = 24, .block = 1};
    struct oscar_kv_transform tf;
    assert_int_equal(oscar_kv_transform_preset("oscar", 1, HKV, D, 0, OSCAR_META_F32, &tr, false, Rk, Rv, false,
                                               NULL, NULL, &tf), OSCAR_OK);
    struct oscar_model_config cfg = {.n_layer = 1, .n_head = HQ, .n_head_kv = HKV, .head_dim = D};
    struct oscar_kv_sim * sim;
    cfg.sliding_window = N - 1; // a window shorter than the sequences: simulated with it (test-attn-scale, test-window)
    assert_int_equal(oscar_kv_sim_init(&tf, &cfg, N, 2, &sim), OSCAR_OK);
    oscar_kv_sim_free(sim);
    cfg.sliding_window = N; // the window holds every sequence: exactly full attention
    assert_int_equal(oscar_kv_sim_init(&tf, &cfg, N, 2, &sim), OSCAR_OK);
    int32_t ss[2] = {0, N}, pos[N];
    for (int i = 0; i < N; i++) pos[i] = i;
    struct oscar_capture_layer cap = {.layer = 0, .n_tokens = N, .n_seq = 1, .seq_start = ss, .pos = pos, .q = q,
                                      .k = k, .v = v, .config = &cfg};
    float * out = malloc(sizeof(float) * N * HQ * D);
    struct oscar_attention_override ov = oscar_kv_sim_override(sim);
    assert_int_equal(ov.attend(ov.user, 0, &cap, out), OSCAR_OK);

    struct oscar_kv_cache_params cp = oscar_kv_cache_default_params(HKV, D);
    cp.page_size = NQ, cp.n_sink = P, cp.n_recent = R, cp.n_flush = NQ, cp.max_seq_len = N;
    cp.k_quant = tf.int2, cp.v_quant = tf.int2;
    cp.k_quant.clip_ratio = 0.96, cp.v_quant.clip_ratio = 0.92;
    cp.demote_clip_algo = tf.demote_clip_algo;
    struct oscar_kv_cache * c;
    assert_int_equal(oscar_kv_cache_init(&cp, &c), OSCAR_OK);
    float * kr = malloc(sizeof(float) * N * HKV * D), * vr = malloc(sizeof(float) * N * HKV * D);
    for (int i = 0; i < N * HKV; i++) {
        oscar_kv_rotate_row(Rk, D, k + (size_t) i * D, kr + (size_t) i * D, false);
        oscar_kv_rotate_row(Rv, D, v + (size_t) i * D, vr + (size_t) i * D, false);
    }
    assert_int_equal(oscar_kv_cache_prefill(c, 0, kr, vr, 24, true), OSCAR_OK);
    struct oscar_attn_tiered_opts ao = oscar_attn_tiered_default_opts();
    double worst = 0;
    int64_t n_int2_seen = 0;
    for (int t = 24; t < N; t++) {
        assert_int_equal(oscar_kv_cache_decode_append(c, 0, kr + (size_t) t * HKV * D, vr + (size_t) t * HKV * D, NULL),
                         OSCAR_OK);
        n_int2_seen += c->seqs[0].n_int2;
        float qr[HQ * D], orot[HQ * D], o[D];
        for (int j = 0; j < HQ; j++) oscar_kv_rotate_row(Rk, D, q + ((size_t) t * HQ + j) * D, qr + j * D, false);
        assert_int_equal(oscar_attn_tiered_decode(c, 0, qr, HQ, &ao, orot), OSCAR_OK);
        for (int j = 0; j < HQ; j++) {
            oscar_kv_rotate_row(Rv, D, orot + j * D, o, true);
            for (int d = 0; d < D; d++) worst = fmax(worst, fabs((double) o[d] - (double) out[((size_t) t * HQ + j) * D + d]));
        }
    }
    printf("sim vs paged cache: max |diff| %.3g over %d decode queries (INT2 rows seen %lld)\n", worst, N - 24,
           (long long) n_int2_seen);
    assert_true(n_int2_seen > 1000);
    assert_true(worst < 1e-4);
    oscar_kv_cache_free(c);
    oscar_kv_sim_free(sim);
    free(k), free(v), free(q), free(out), free(kr), free(vr);
}

// oscar_kv_rotate_rows gives every row oscar_kv_rotate_row's bits, whatever the row count and
// strides (the one-pass simulation rotates blocks of rows, the token-by-token oracle single rows).
static void test_rotate_rows_bits(void ** state) {
    (void) state;
    const int32_t dims[] = {4, 12, 64, 96}, counts[] = {1, 5, 8, 13, 64};
    for (size_t a = 0; a < sizeof dims / sizeof dims[0]; a++)
        for (size_t b = 0; b < sizeof counts / sizeof counts[0]; b++)
            for (int tr = 0; tr < 2; tr++) {
                const int32_t Dd = dims[a], n = counts[b];
                const size_t  xs = (size_t) Dd + 3, ys = (size_t) Dd + 1;
                float * R = rnd((size_t) Dd * Dd, 0.3), * x = rnd((size_t) n * xs, 2.0);
                float * y = malloc(sizeof(float) * (size_t) n * ys), want[96];
                oscar_kv_rotate_rows(R, Dd, n, x, xs, y, ys, tr);
                for (int32_t r = 0; r < n; r++) {
                    oscar_kv_rotate_row(R, Dd, x + (size_t) r * xs, want, tr);
                    assert_memory_equal(y + (size_t) r * ys, want, sizeof(float) * (size_t) Dd);
                }
                free(R), free(x), free(y);
            }
}

// A layer's rows transformed in blocks over threads (oscar_kv_transform_layer) are bitwise each row
// transformed alone (oscar_kv_transform_row, what the decode oracle calls), HP and INT2 values, for
// a rotation matrix with key-mean centring and for Hadamard; two sequences, DECODE tiering.
static void test_transform_layer_rows(void ** state) {
    (void) state;
    enum { N = 150 };
    int32_t ss[3] = {0, 70, N};
    float * k = rnd((size_t) N * HKV * D, 1.0), * v = rnd((size_t) N * HKV * D, 1.0);
    float * Rk = rnd((size_t) D * D, 0.125), * Rv = rnd((size_t) D * D, 0.125), * mu = rnd((size_t) HKV * D, 0.5);
    float * out = malloc(sizeof(float) * 4 * N * HKV * D), hp[D], q[D];
    struct oscar_tiering tr = {.mode = OSCAR_TIERS_DECODE, .n_sink = 4, .n_recent = 16, .n_flush = 8,
                               .prompt_len = 24, .block = 1};
    const char * names[] = {"oscar", "hadamard"};
    for (int m = 0; m < 2; m++) {
        struct oscar_kv_transform tf;
        assert_int_equal(oscar_kv_transform_preset(names[m], 1, HKV, D, 0, OSCAR_META_F32, &tr, false, Rk, Rv,
                                                   false, NULL, NULL, &tf), OSCAR_OK);
        if (m == 0) tf.k_mean = mu;
        size_t n = (size_t) N * HKV * D;
        struct oscar_quant_stats st[2] = {{0}}, st1 = {0};
        assert_int_equal(oscar_kv_transform_layer(&tf, 0, N, 2, ss, k, v, out, out + n, out + 2 * n, out + 3 * n, 2,
                                                  st), OSCAR_OK);
        int64_t n_int2 = 0;
        for (int s = 0; s < 2; s++) {
            int64_t len = ss[s + 1] - ss[s], lo, hi;
            oscar_tier_int2_range(&tf.tiers, len - 1, len, &lo, &hi);
            for (int64_t p = 0; p < len; p++)
                for (int h = 0; h < HKV; h++)
                    for (int kv = 0; kv < 2; kv++) {
                        size_t o = ((size_t) (ss[s] + p) * HKV + h) * D;
                        bool i2 = p >= lo && p < hi;
                        assert_int_equal(oscar_kv_transform_row(&tf, kv == 0, 0, h,
                                                                oscar_tier_from_prefill(&tf.tiers, p, len),
                                                                (kv == 0 ? k : v) + o, hp, i2 ? q : NULL, &st1),
                                         OSCAR_OK);
                        assert_memory_equal(out + (size_t) kv * n + o, hp, sizeof hp);
                        assert_memory_equal(out + (size_t) (2 + kv) * n + o, i2 ? q : hp, sizeof hp);
                        n_int2 += i2;
                    }
        }
        assert_true(n_int2 > N);   // the INT2 values were compared, not only HP copies
        assert_int_equal(st[0].n_rows + st[1].n_rows, st1.n_rows);
    }
    free(k), free(v), free(Rk), free(Rv), free(mu), free(out);
}

// Metrics of several methods in one call (the exact attention computed once, bf16 reusing it) are
// bitwise each method's metrics computed alone; two sequences, DECODE tiering.
static void test_metrics_methods_shared(void ** state) {
    (void) state;
    struct layer l;
    make_layer(&l);
    float * Rk = rnd((size_t) D * D, 0.125), * Rv = rnd((size_t) D * D, 0.125);
    struct oscar_tiering tr = {.mode = OSCAR_TIERS_DECODE, .n_sink = 4, .n_recent = 16, .n_flush = 8,
                               .prompt_len = 8, .block = 1};
    const char * names[] = {"naive", "bf16", "oscar", "hadamard", "kivi"};
    enum { NM = sizeof names / sizeof names[0] };
    struct oscar_kv_transform tf[NM];
    for (int i = 0; i < NM; i++)
        assert_int_equal(oscar_kv_transform_preset(names[i], 1, HKV, D, 0, OSCAR_META_F32, &tr, false, Rk, Rv, false,
                                                   NULL, NULL, &tf[i]), OSCAR_OK);
    struct oscar_layer_metrics all[NM], one;
    assert_int_equal(oscar_verify_layer_metrics_methods(tf, NM, &l.in, 2, all), OSCAR_OK);
    for (int i = 0; i < NM; i++) {
        assert_int_equal(oscar_verify_layer_metrics(&tf[i], &l.in, 1, &one), OSCAR_OK);
        assert_memory_equal(&all[i], &one, sizeof one);
        if (i != 1) assert_true(all[i].kl > 0 && all[i].out_rel > 0);   // quantized: the sums are not trivially 0
    }
    assert_true(all[1].kl == 0 && all[1].logit_err == 0 && all[1].logit_den > 0);
    free(Rk), free(Rv);
    free_layer(&l);
}

// With sink + recent >= ctx nothing is INT2: quantized-cache perplexity (OSCAR transform, fp32 HP rows,
// rotation round trip k.R.R^T) equals plain perplexity. The round trip changes each element by
// <= D*eps32 relative ~ 4e-6; through 2 random layers the NLL moves by far less than 1e-5 relative.
static void test_ppl_all_bf16(void ** state) {
    (void) state;
    struct oscar_model_config cfg = {.arch = OSCAR_ARCH_LLAMA, .n_layer = 2, .n_embd = 64, .n_head = 4,
                                     .n_head_kv = 2, .head_dim = 16, .n_ff = 96, .n_vocab = 128, .n_ctx_train = 256,
                                     .rope_theta = 10000.0f, .rms_eps = 1e-5f};
    struct oscar_model * m;
    assert_int_equal(oscar_model_init_random(&cfg, SEED, &m), OSCAR_OK);
    enum { NT = 200 };
    int32_t toks[NT];
    for (int i = 0; i < NT; i++) toks[i] = (int32_t) (urand() * 128) % 128;
    float Rk[16 * 16], Rv[16 * 16], Rs[2 * 16 * 16], Rvs[2 * 16 * 16];
    assert_int_equal(oscar_hadamard_matrix_f32(16, Rk), OSCAR_OK);
    for (int i = 0; i < 16; i++) memcpy(Rv + i * 16, Rk + ((i * 3) % 16) * 16, sizeof(float) * 16);
    memcpy(Rs, Rk, sizeof Rk), memcpy(Rs + 256, Rk, sizeof Rk), memcpy(Rvs, Rv, sizeof Rv), memcpy(Rvs + 256, Rv, sizeof Rv);
    struct oscar_tiering tr = {.mode = OSCAR_TIERS_DECODE, .n_sink = 16, .n_recent = 48, .n_flush = 8, .block = 1};
    struct oscar_kv_transform tf;
    assert_int_equal(oscar_kv_transform_preset("oscar", 2, 2, 16, 0, OSCAR_META_F32, &tr, false, Rs, Rvs, false, NULL,
                                               NULL, &tf), OSCAR_OK);
    tf.hp_bf16 = false;
    struct oscar_kv_sim * sim;
    assert_int_equal(oscar_kv_sim_init(&tf, &cfg, 64, 1, &sim), OSCAR_OK);
    struct oscar_attention_override ov = oscar_kv_sim_override(sim);
    struct oscar_ppl_params pp = {.n_ctx = 64, .stride = 64, .n_threads = 1};
    struct oscar_ppl_result a, b;
    assert_int_equal(oscar_perplexity(m, toks, NT, &pp, &a), OSCAR_OK);
    pp.attention = &ov;
    assert_int_equal(oscar_perplexity(m, toks, NT, &pp, &b), OSCAR_OK);
    printf("ppl plain %.8f, quantized cache all-bf16 %.8f\n", a.ppl, b.ppl);
    assert_true(fabs(a.nll_sum - b.nll_sum) < 1e-5 * fabs(a.nll_sum));
    struct oscar_quant_stats ks;
    oscar_kv_sim_stats(sim, &ks, NULL);
    assert_int_equal(ks.n_rows, 0);   // nothing was quantized
    // tighter tiers quantize rows and move the perplexity
    oscar_kv_sim_free(sim);
    tr.n_sink = 4, tr.n_recent = 8;
    tf.tiers = tr;
    assert_int_equal(oscar_kv_sim_init(&tf, &cfg, 64, 1, &sim), OSCAR_OK);
    ov = oscar_kv_sim_override(sim);
    assert_int_equal(oscar_perplexity(m, toks, NT, &pp, &b), OSCAR_OK);
    oscar_kv_sim_stats(sim, &ks, NULL);
    assert_true(ks.n_rows > 0);
    assert_true(a.nll_sum != b.nll_sum);
    oscar_kv_sim_free(sim);
    oscar_model_free(m);
}

static void test_bpe(void ** state) {
    (void) state;
    struct oscar_tiering tr = {.mode = OSCAR_TIERS_DECODE, .n_sink = 64, .n_recent = 256, .n_flush = 8, .block = 1};
    struct oscar_kv_transform tf;
    assert_int_equal(oscar_kv_transform_preset("hadamard", 1, 1, 128, 128, OSCAR_META_BF16, &tr, false, NULL, NULL,
                                               false, NULL, NULL, &tf), OSCAR_OK);
    assert_true(fabs(oscar_kv_transform_bpe(&tf, 131072) - 2.2836) < 1e-4);   // method.md §14 table
    assert_int_equal(oscar_kv_transform_preset("bogus", 1, 1, 128, 0, OSCAR_META_F32, &tr, false, NULL, NULL, false,
                                               NULL, NULL, &tf), OSCAR_ERR_INVALID);
    assert_int_equal(oscar_kv_transform_preset("oscar", 1, 1, 128, 0, OSCAR_META_F32, &tr, false, NULL, NULL, false,
                                               NULL, NULL, &tf), OSCAR_ERR_INVALID);   // no rotations
}


// ---- driver ------------------------------------------------------------------------------
static void test_parse_methods(void ** state) {
    (void) state;
    char names[OSCAR_VERIFY_MAX_METHODS][32];
    int32_t n = 0;
    assert_int_equal(oscar_verify_parse_methods(OSCAR_VERIFY_METHODS_ALL, true, names, &n), OSCAR_OK);
    assert_int_equal(n, 8);
    assert_string_equal(names[3], "oscar");
    assert_string_equal(names[4], "oscar-fixed");
    assert_int_equal(oscar_verify_parse_methods(OSCAR_VERIFY_METHODS_NO_ARTIFACT, false, names, &n), OSCAR_OK);
    assert_int_equal(n, 5);
    assert_int_equal(oscar_verify_parse_methods("bf16,oscar-lm", false, names, &n), OSCAR_ERR_INVALID);
    assert_int_equal(oscar_verify_parse_methods("bf16,nope", true, names, &n), OSCAR_ERR_INVALID);
    assert_int_equal(oscar_verify_parse_methods("naive,naive", true, names, &n), OSCAR_ERR_INVALID);
    assert_int_equal(oscar_verify_parse_methods(",", true, names, &n), OSCAR_ERR_INVALID);
}

// oscar_verify_run on a random 2-layer model: the bf16 method's perplexity is exactly
// oscar_perplexity's with stride = ctx (same forward and logits; only the order of the fp64 NLL
// sum over 254 terms may differ: <= 254 * 2^-53 relative ~ 3e-14, so 1e-12); bf16 has zero
// metrics and drift; a quantized
// method has positive K relMSE and drift after every layer; with sink + recent >= ctx nothing is
// INT2 so every method's perplexity equals bf16's up to the bf16 rounding of the HP rows.
static void test_run_random_model(void ** state) {
    (void) state;
    struct oscar_model_config cfg = {.arch = OSCAR_ARCH_LLAMA, .n_layer = 2, .n_embd = 128, .n_head = 4,
                                     .n_head_kv = 2, .head_dim = 32, .n_ff = 96, .n_vocab = 128, .n_ctx_train = 256,
                                     .rope_theta = 10000.0f, .rms_eps = 1e-5f};
    struct oscar_model * m;
    assert_int_equal(oscar_model_init_random(&cfg, SEED, &m), OSCAR_OK);
    enum { NT = 300 };
    int32_t toks[NT];
    for (int i = 0; i < NT; i++) toks[i] = (int32_t) (urand() * 128) % 128;
    struct oscar_verify_params p = oscar_verify_default_params();
    p.methods = "bf16,naive,hadamard,int4-bdh,kivi";
    p.ctx = 128, p.tokens = 256, p.sink = 4, p.recent = 16, p.metric_tokens = 96, p.n_threads = 1;
    struct oscar_verify_report rep;
    enum oscar_status st = oscar_verify_run(m, NULL, toks, NT, &p, &rep);
    if (st != OSCAR_OK) printf("oscar_verify_run: %s\n", oscar_last_error());
    assert_int_equal(st, OSCAR_OK);
    assert_int_equal(rep.n_methods, 5);
    assert_int_equal(rep.n_windows, 2);
    struct oscar_ppl_params pp = {.n_ctx = 128, .stride = 128, .n_threads = 1, .max_windows = 2};
    struct oscar_ppl_result ref;
    assert_int_equal(oscar_perplexity(m, toks, 256, &pp, &ref), OSCAR_OK);
    printf("driver bf16 nll %.10f (%lld), oscar_perplexity %.10f (%lld)\n", rep.methods[0].nll_sum,
           (long long) rep.methods[0].n_scored, ref.nll_sum, (long long) ref.n_scored);
    assert_int_equal(rep.methods[0].n_scored, 2 * 127);
    assert_true(fabs(rep.methods[0].nll_sum - ref.nll_sum) < 1e-12 * fabs(ref.nll_sum));
    for (int32_t l = 0; l < 2; l++) {
        assert_true(rep.methods[0].drift[l] == 0 && rep.methods[0].layers[l].k_rel_mse == 0);
        for (int32_t i = 1; i < 5; i++) {
            assert_true(rep.methods[i].drift[l] > 0);
            assert_true(rep.methods[i].layers[l].k_rel_mse > 0);
            assert_true(rep.methods[i].layers[l].n_rows_int2 > 0);
        }
    }
    assert_true(rep.methods[1].bpe < 16 && rep.methods[3].bpe > rep.methods[2].bpe);
    // where each quantized cache was simulated: nowhere for bf16, the CPU for the rest
    assert_string_equal(rep.methods[0].kv_sim, "");
    for (int32_t i = 1; i < 5; i++) assert_string_equal(rep.methods[i].kv_sim, "cpu");
    oscar_verify_report_free(&rep);
    // nothing INT2: every method equals bf16 up to the bf16 rounding of the cache rows (rel <= 2^-9 per
    // element, so each attention score and value moves by <= 2^-9 ~ 2e-3 relative, and the NLL, a
    // smooth function of them, by about that times its sensitivity; through 2 random layers we
    // bound the relative NLL change by 2^-9 / 2 ~ 1e-3 (observed ~2e-6: the errors have random signs)
    p.sink = 64, p.recent = 128;
    assert_int_equal(oscar_verify_run(m, NULL, toks, NT, &p, &rep), OSCAR_OK);
    for (int32_t i = 1; i < 5; i++) {
        printf("all-HP %s: nll %.8f vs bf16 %.8f\n", rep.methods[i].name, rep.methods[i].nll_sum, rep.methods[0].nll_sum);
        assert_int_equal(rep.methods[i].k_stats.n_rows, 0);
        assert_true(fabs(rep.methods[i].nll_sum - rep.methods[0].nll_sum) < 1e-3 * rep.methods[0].nll_sum);
    }
    oscar_verify_report_free(&rep);
    // too few tokens for one window, oscar without an artifact
    p.ctx = 512;
    assert_int_equal(oscar_verify_run(m, NULL, toks, NT, &p, &rep), OSCAR_ERR_INVALID);
    p.ctx = 128, p.methods = "bf16,oscar";
    assert_int_equal(oscar_verify_run(m, NULL, toks, NT, &p, &rep), OSCAR_ERR_INVALID);
    // artifact methods: rotations = a row permutation of H (orthogonal), clips 0.96 / 0.92 like oscar-fixed.
    // With prompt = sink every INT2 row is decode-demoted, which uses the uniform flush quantizer, so
    // oscar-lm must equal oscar-fixed exactly; with a 96-token prefill the middle [4, 80) is Lloyd-Max.
    struct oscar_artifact * art;
    assert_int_equal(oscar_artifact_init(2, 4, 2, 32, false, false, false, &art), OSCAR_OK);
    float H[32 * 32];
    assert_int_equal(oscar_hadamard_matrix_f32(32, H), OSCAR_OK);
    for (int l = 0; l < 2; l++) {
        for (int i = 0; i < 32; i++) {
            memcpy(art->rot.k + (l * 32 + i) * 32, H + ((i * 5) % 32) * 32, sizeof(float) * 32);
            memcpy(art->rot.v + (l * 32 + i) * 32, H + ((i * 7) % 32) * 32, sizeof(float) * 32);
        }
        art->rot.k_clip[l] = 0.96f, art->rot.v_clip[l] = 0.92f;
    }
    p.methods = "oscar,oscar-fixed,oscar-lm", p.sink = 4, p.recent = 16, p.prompt = 0;
    assert_int_equal(oscar_verify_run(m, art, toks, NT, &p, &rep), OSCAR_OK);
    assert_true(rep.methods[1].nll_sum == rep.methods[2].nll_sum);
    assert_true(fabs(rep.methods[0].nll_sum - rep.methods[1].nll_sum) < 1e-6 * rep.methods[1].nll_sum); // fp32 clips
    oscar_verify_report_free(&rep);
    p.prompt = 96;
    assert_int_equal(oscar_verify_run(m, art, toks, NT, &p, &rep), OSCAR_OK);
    printf("prompt 96: oscar-fixed nll %.8f oscar-lm %.8f\n", rep.methods[1].nll_sum, rep.methods[2].nll_sum);
    assert_int_equal(rep.prompt, 96);
    assert_true(rep.methods[1].nll_sum != rep.methods[2].nll_sum);
    oscar_verify_report_free(&rep);
    p.prompt = 2;   // shorter than the sink
    assert_int_equal(oscar_verify_run(m, art, toks, NT, &p, &rep), OSCAR_ERR_INVALID);
    oscar_artifact_free(art);
    oscar_model_free(m);
}

// Next-token statistics of the driver (token-stats.h has the math and its own tests):
//  - bf16 against what it keeps for the others (its hidden states, logits recomputed by the same
//    GEMM) gives KL exactly 0, top-1 100 %, Δp 0: the reference the other methods see is bf16's own;
//  - the method order does not change any number (bf16 runs first either way);
//  - --score-from N scores targets N..ctx-1 only: the bf16 NLL equals a long-double sum over
//    those targets of logits from oscar_forward_run (fp32 logits, 2 x 28 fp64 terms: 1e-9 relative
//    covers the summation order and the long-double reference);
//  - without bf16 there is no KL, only the perplexity spread; a score_from >= ctx is refused.
static void test_run_next_token(void ** state) {
    (void) state;
    struct oscar_model_config cfg = {.arch = OSCAR_ARCH_LLAMA, .n_layer = 2, .n_embd = 128, .n_head = 4,
                                     .n_head_kv = 2, .head_dim = 32, .n_ff = 96, .n_vocab = 128, .n_ctx_train = 256,
                                     .rope_theta = 10000.0f, .rms_eps = 1e-5f};
    struct oscar_model * m;
    assert_int_equal(oscar_model_init_random(&cfg, SEED, &m), OSCAR_OK);
    enum { NT = 300 };
    int32_t toks[NT];
    for (int i = 0; i < NT; i++) toks[i] = (int32_t) (urand() * 128) % 128;
    struct oscar_verify_params p = oscar_verify_default_params();
    p.methods = "naive,bf16,kivi";
    p.ctx = 128, p.tokens = 256, p.sink = 4, p.recent = 16, p.metric_tokens = 64, p.n_threads = 1;
    struct oscar_verify_report a, b;
    assert_int_equal(oscar_verify_run(m, NULL, toks, NT, &p, &a), OSCAR_OK);
    const struct oscar_token_stats * bt = &a.methods[1].tok, * nt = &a.methods[0].tok;
    printf("naive vs bf16: KL %.4e +- %.1e (median %.3e p99 %.3e max %.3e), top-1 %.2f %%, RMS dp %.3f %%, "
           "ppl %.3f +- %.3f\n", nt->kl_mean, nt->kl_stderr, nt->kl_median, nt->kl_p99, nt->kl_max,
           100 * nt->same_top1, 100 * nt->dp_rms, a.methods[0].ppl, nt->ppl_stderr);
    assert_true(bt->has_ref && bt->n == 254);
    assert_true(bt->kl_mean == 0 && bt->kl_max == 0 && bt->same_top1 == 1 && bt->dp_rms == 0 && bt->dppl == 0);
    assert_true(bt->ppl_stderr > 0 && bt->ppl == a.methods[1].ppl);
    assert_true(fabs(bt->nll_mean - a.methods[1].nll_sum / 254) < 1e-12 * bt->nll_mean);
    for (int i = 0; i < 3; i += 2) {
        const struct oscar_token_stats * t = &a.methods[i].tok;
        assert_true(t->has_ref && t->n == 254 && t->kl_mean > 0 && t->kl_max >= t->kl_p99);
        assert_true(t->kl_p99 >= t->kl_p95 && t->kl_p95 >= t->kl_p90 && t->kl_p90 >= t->kl_median);
        assert_true(t->same_top1 < 1 && t->dp_rms > 0 && t->kl_stderr > 0);
        assert_true(fabs(t->dppl - (a.methods[i].ppl - a.methods[1].ppl)) < 1e-12 * a.methods[i].ppl);
    }
    p.methods = "bf16,kivi,naive";
    assert_int_equal(oscar_verify_run(m, NULL, toks, NT, &p, &b), OSCAR_OK);
    assert_true(b.methods[0].nll_sum == a.methods[1].nll_sum && b.methods[1].nll_sum == a.methods[2].nll_sum);
    assert_memory_equal(&b.methods[2].tok, &a.methods[0].tok, sizeof a.methods[0].tok);
    assert_memory_equal(&b.methods[1].tok, &a.methods[2].tok, sizeof a.methods[2].tok);
    oscar_verify_report_free(&b);
    // bf16's hidden states kept instead of its logits (recomputed by the same GEMM): the same bits
    p.methods = "naive,bf16,kivi", p.ref_logits_budget = -1;
    assert_int_equal(oscar_verify_run(m, NULL, toks, NT, &p, &b), OSCAR_OK);
    for (int i = 0; i < 3; i++) assert_memory_equal(&b.methods[i].tok, &a.methods[i].tok, sizeof a.methods[i].tok);
    oscar_verify_report_free(&b);
    p.ref_logits_budget = 0, p.methods = "bf16,kivi,naive";
    // --score-from 100: targets 100..127 of both windows
    p.score_from = 100;
    assert_int_equal(oscar_verify_run(m, NULL, toks, NT, &p, &b), OSCAR_OK);
    assert_int_equal(b.score_from, 100);
    assert_int_equal(b.methods[0].n_scored, 2 * 28);
    assert_int_equal(b.methods[1].tok.n, 2 * 28);
    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.n_threads = 1, fp.max_tokens = 128;
    struct oscar_forward * f;
    assert_int_equal(oscar_forward_init(m, &fp, &f), OSCAR_OK);
    float * lg = malloc(sizeof(float) * 128 * 128);
    long double ref = 0;
    for (int w = 0; w < 2; w++) {
        int32_t ss[2] = {0, 128};
        struct oscar_batch bt2 = {.n_seq = 1, .seq_start = ss, .tokens = toks + w * 128, .pos = NULL};
        assert_int_equal(oscar_forward_run(f, &bt2, lg), OSCAR_OK);
        for (int j = 100; j < 128; j++) {
            const float * row = lg + (size_t) (j - 1) * 128;
            long double mx = row[0], z = 0;
            for (int v = 1; v < 128; v++) mx = row[v] > mx ? row[v] : mx;
            for (int v = 0; v < 128; v++) z += expl(row[v] - mx);
            ref += mx + logl(z) - row[toks[w * 128 + j]];
        }
    }
    printf("score-from 100: bf16 nll %.10f, direct %.10Lf\n", b.methods[0].nll_sum, ref);
    assert_true(fabsl(b.methods[0].nll_sum - ref) < 1e-9L * ref);
    oscar_forward_free(f);
    free(lg);
    // the scored positions are a subset: the same methods, fewer and later rows, other numbers
    assert_true(b.methods[2].nll_sum != a.methods[2].nll_sum && b.methods[2].tok.has_ref);
    oscar_verify_report_free(&b);
    // score_from 1 is the default (target 0 has no context), ctx - 1 the last that scores anything
    p.score_from = 1;
    assert_int_equal(oscar_verify_run(m, NULL, toks, NT, &p, &b), OSCAR_OK);
    assert_true(b.methods[0].nll_sum == a.methods[1].nll_sum);
    oscar_verify_report_free(&b);
    p.score_from = 127;
    assert_int_equal(oscar_verify_run(m, NULL, toks, NT, &p, &b), OSCAR_OK);
    assert_int_equal(b.methods[0].n_scored, 2);
    oscar_verify_report_free(&b);
    p.score_from = 128;
    assert_int_equal(oscar_verify_run(m, NULL, toks, NT, &p, &b), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "score_from must be < ctx"));
    p.score_from = -1;
    assert_int_equal(oscar_verify_run(m, NULL, toks, NT, &p, &b), OSCAR_ERR_INVALID);
    // no bf16: no comparison, the perplexity and its spread as before
    p.score_from = 0, p.methods = "naive";
    assert_int_equal(oscar_verify_run(m, NULL, toks, NT, &p, &b), OSCAR_OK);
    assert_true(!b.methods[0].tok.has_ref && b.methods[0].tok.ppl_stderr > 0);
    assert_true(b.methods[0].nll_sum == a.methods[0].nll_sum);
    oscar_verify_report_free(&b);
    oscar_verify_report_free(&a);
    oscar_model_free(m);
}

// The recall probe through the driver (recall.h). Each probe's answer is made bf16's own greedy
// continuation first (3 forwards of oscar_forward_run on the laid-out window), so bf16 must get
// all 3 tokens right through the driver; any other count means the driver scored other rows or
// another layout. With --recall the perplexity, the next-token statistics and the quantizer counts
// are unchanged (the probes run after them); a window too short for the probe is refused.
static void test_run_recall(void ** state) {
    (void) state;
    struct oscar_model_config cfg = {.arch = OSCAR_ARCH_LLAMA, .n_layer = 2, .n_embd = 128, .n_head = 4,
                                     .n_head_kv = 2, .head_dim = 32, .n_ff = 96, .n_vocab = 128, .n_ctx_train = 256,
                                     .rope_theta = 10000.0f, .rms_eps = 1e-5f};
    struct oscar_model * m;
    assert_int_equal(oscar_model_init_random(&cfg, SEED, &m), OSCAR_OK);
    enum { NT = 300 };
    int32_t toks[NT];
    for (int i = 0; i < NT; i++) toks[i] = (int32_t) (urand() * 128) % 128;
    const int32_t needle[4] = {5, 6, 7, 8}, question[3] = {9, 10, 11};
    int32_t answers[3][3] = {{0}};
    struct oscar_recall_probe pr[3];
    for (int k = 0; k < 3; k++) pr[k] = (struct oscar_recall_probe){needle, 4, answers[k], 3, 0.5 * k};
    struct oscar_verify_recall rc = {.probes = pr, .n_probes = 3, .question = question, .n_question = 3};
    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.n_threads = 1, fp.max_tokens = 128;
    struct oscar_forward * f;
    assert_int_equal(oscar_forward_init(m, &fp, &f), OSCAR_OK);
    float * lg = malloc(sizeof(float) * 128 * 128);
    int32_t seq[128], at, pos[3];
    for (int k = 0; k < 3; k++)
        for (int a = 0; a < 3; a++) {   // answer token a = bf16's argmax after the tokens before it
            pos[k] = osc_recall_build(&rc, k, toks, 128, seq, &at);
            int32_t ss[2] = {0, 128};
            struct oscar_batch bt = {.n_seq = 1, .seq_start = ss, .tokens = seq, .pos = NULL};
            assert_int_equal(oscar_forward_run(f, &bt, lg), OSCAR_OK);
            const float * row = lg + (size_t) (at - 1 + a) * 128;
            int32_t top = 0;
            for (int v = 1; v < 128; v++) top = row[v] > row[top] ? v : top;
            answers[k][a] = top;
        }
    oscar_forward_free(f);
    free(lg);
    struct oscar_verify_params p = oscar_verify_default_params();
    p.methods = "bf16,naive";
    p.ctx = 128, p.tokens = 256, p.sink = 4, p.recent = 16, p.metric_tokens = 64, p.n_threads = 1;
    struct oscar_verify_report a, b;
    assert_int_equal(oscar_verify_run(m, NULL, toks, NT, &p, &a), OSCAR_OK);
    p.recall = &rc;
    assert_int_equal(oscar_verify_run(m, NULL, toks, NT, &p, &b), OSCAR_OK);
    assert_int_equal(b.n_recall, 3);
    for (int k = 0; k < 3; k++) {
        printf("recall probe %d (needle at %d, answer %d %d %d): bf16 %d, naive %d tokens right\n", k, pos[k],
               answers[k][0], answers[k][1], answers[k][2], b.methods[0].recall_right[k], b.methods[1].recall_right[k]);
        assert_int_equal(b.recall_pos[k], pos[k]);
        assert_int_equal(b.recall_len[k], 3);
        assert_int_equal(b.methods[0].recall_right[k], 3);
        assert_true(b.methods[1].recall_right[k] >= 0 && b.methods[1].recall_right[k] <= 3);
    }
    for (int i = 0; i < 2; i++) {
        assert_true(a.methods[i].nll_sum == b.methods[i].nll_sum);
        assert_memory_equal(&a.methods[i].tok, &b.methods[i].tok, sizeof a.methods[i].tok);
        assert_memory_equal(&a.methods[i].k_stats, &b.methods[i].k_stats, sizeof a.methods[i].k_stats);
    }
    oscar_verify_report_free(&a);
    oscar_verify_report_free(&b);
    p.ctx = 12, p.tokens = 12, p.metric_tokens = 8;   // 4 + 3 + 3 = 10 tokens of probe: 2 of filler
    assert_int_equal(oscar_verify_run(m, NULL, toks, NT, &p, &b), OSCAR_OK);
    oscar_verify_report_free(&b);
    p.ctx = 10, p.tokens = 10;                          // no filler left
    assert_int_equal(oscar_verify_run(m, NULL, toks, NT, &p, &b), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "recall: probe 0"));
    oscar_model_free(m);
}

// ---- report files --------------------------------------------------------------------------
static void fake_report(struct oscar_verify_report * r, struct oscar_verify_method * ms, struct oscar_layer_metrics * lm,
                        double * drift) {
    memset(r, 0, sizeof *r);
    snprintf(r->model, sizeof r->model, "m.gguf");
    snprintf(r->model_name, sizeof r->model_name, "tiny");
    snprintf(r->corpus, sizeof r->corpus, "held.txt");
    snprintf(r->scale_dtype, sizeof r->scale_dtype, "float32");
    r->n_layer = 3, r->ctx = 64, r->sink = 4, r->recent = 8, r->n_flush = 8, r->group_size = 16, r->n_windows = 2;
    r->metric_tokens = 32, r->prompt = 4, r->n_tokens = 1000, r->n_methods = 2, r->methods = ms;
    for (int i = 0; i < 2; i++) {
        memset(&ms[i], 0, sizeof ms[i]);
        snprintf(ms[i].name, sizeof ms[i].name, "%s", i ? "oscar" : "bf16");
        snprintf(ms[i].kv_sim, sizeof ms[i].kv_sim, "%s", i ? "cuda" : "");
        ms[i].bpe = i ? 2.5 : 16, ms[i].ppl = 10 + i, ms[i].n_scored = 126, ms[i].layers = lm + 3 * i;
        ms[i].drift = drift + 3 * i;
        ms[i].tok = (struct oscar_token_stats){.n = 126, .ppl = 10 + i, .ppl_stderr = 0.5 + i, .nll_stderr = 0.05,
                                               .has_ref = true, .kl_mean = 0.01 * i, .kl_p99 = 0.1 * i,
                                               .same_top1 = 1 - 0.25 * i, .dppl = i};
        for (int l = 0; l < 3; l++) {
            struct oscar_layer_metrics * x = &lm[3 * i + l];
            memset(x, 0, sizeof *x);
            x->k_err = i * (l + 1.0), x->k_ref = 10, x->v_err = i, x->v_ref = 10, x->out_num = i * 1e-3 * (l + 1),
            x->out_den = 1, x->kl_sum = i * 0.5, x->n_queries = 4, x->logit_num = i, x->logit_den = 4;
            oscar_layer_metrics_finish(x);
            drift[3 * i + l] = i * 1e-3 * (l + 1);
        }
    }
}

static void test_report_json_schema(void ** state) {
    (void) state;
    struct oscar_verify_report r;
    struct oscar_verify_method ms[2];
    struct oscar_layer_metrics lm[6];
    double drift[6];
    fake_report(&r, ms, lm, drift);
    char dir[] = "/tmp/oscar-test-verify-XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(oscar_verify_write_dir(&r, dir), OSCAR_OK);
    char p[256];
    snprintf(p, sizeof p, "%s/report.json", dir);
    json_error_t je;
    json_t * j = json_load_file(p, 0, &je);
    assert_non_null(j);
    static const char * const top[] = {"version", "model", "model_name", "rotations", "corpus", "corpus_sha256",
                                       "config", "corpus_tokens", "wall_seconds", "methods"};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) assert_non_null(json_object_get(j, top[i]));
    assert_int_equal(json_integer_value(json_object_get(j, "version")), OSCAR_VERIFY_REPORT_VERSION);
    static const char * const cfgk[] = {"ctx", "sink", "recent", "page_size", "prompt", "group_size", "scale_dtype", "windows",
                                        "metric_tokens", "tiering", "score_from"};
    json_t * cfgj = json_object_get(j, "config");
    for (size_t i = 0; i < sizeof cfgk / sizeof cfgk[0]; i++) assert_non_null(json_object_get(cfgj, cfgk[i]));
    assert_int_equal(json_integer_value(json_object_get(cfgj, "recent")), 8);
    json_t * jm = json_object_get(j, "methods");
    assert_int_equal(json_array_size(jm), 2);
    static const char * const mk[] = {"name", "bpe", "ppl", "nll_sum", "n_scored", "seconds", "kv_sim", "mean",
                                      "layers", "k_quant", "v_quant", "ppl_stderr", "nll_stderr", "next_token"};
    static const char * const tk[] = {"reference", "n", "kl_mean", "kl_stderr", "kl_median", "kl_p90", "kl_p95",
                                      "kl_p99", "kl_max", "same_top1", "same_top1_stderr", "dp_rms", "dp_rms_stderr",
                                      "ln_ppl_ratio", "ln_ppl_ratio_stderr", "dppl", "dppl_stderr"};
    static const char * const lk[] = {"k_rel_mse", "v_rel_mse", "logit_err", "kl", "out_rel", "hidden_drift",
                                      "n_rows", "n_rows_int2", "n_pairs", "n_pairs_int2"};
    for (size_t i = 0; i < 2; i++) {
        json_t * m = json_array_get(jm, i);
        for (size_t k = 0; k < sizeof mk / sizeof mk[0]; k++) assert_non_null(json_object_get(m, mk[k]));
        json_t * layers = json_object_get(m, "layers");
        assert_int_equal(json_array_size(layers), 3);
        for (size_t l = 0; l < 3; l++)
            for (size_t k = 0; k < sizeof lk / sizeof lk[0]; k++)
                assert_non_null(json_object_get(json_array_get(layers, l), lk[k]));
        assert_string_equal(json_string_value(json_object_get(m, "kv_sim")), i ? "cuda" : "none");
        json_t * nt = json_object_get(m, "next_token");
        for (size_t k = 0; k < sizeof tk / sizeof tk[0]; k++) assert_non_null(json_object_get(nt, tk[k]));
        assert_true(fabs(json_real_value(json_object_get(nt, "same_top1")) - (1 - 0.25 * (double) i)) < 1e-12);
        assert_true(fabs(json_real_value(json_object_get(m, "ppl_stderr")) - (0.5 + (double) i)) < 1e-12);
        // values round-trip: layer 2 K relMSE = i * 3 / 10, drift = i * 3e-3; mean drift = last layer
        assert_true(fabs(json_real_value(json_object_get(json_array_get(layers, 2), "k_rel_mse")) - 0.3 * (double) i) < 1e-12);
        assert_true(fabs(json_real_value(json_object_get(json_object_get(m, "mean"), "hidden_drift")) - 3e-3 * (double) i) < 1e-12);
    }
    json_decref(j);
    // without bf16 in the run: "next_token" is null
    ms[1].tok.has_ref = false;
    char * txt = NULL;
    assert_int_equal(oscar_verify_json_text(&r, &txt), OSCAR_OK);
    j = json_loads(txt, 0, &je);
    free(txt);
    assert_true(json_is_null(json_object_get(json_array_get(json_object_get(j, "methods"), 1), "next_token")));
    json_decref(j);
    // SVG (tests/unit/test-plot.c checks it in detail): one series per method in each of the 4 panels
    char * svg = NULL;
    size_t n = 0;
    snprintf(p, sizeof p, "%s/layers.svg", dir);
    assert_int_equal(osc_read_file(p, 1 << 20, &svg, &n), OSCAR_OK);
    int series[2] = {0, 0};
    for (const char * q = svg; (q = strstr(q, "data-method=\"bf16\"")); q++) series[0]++;
    for (const char * q = svg; (q = strstr(q, "data-method=\"oscar\"")); q++) series[1]++;
    assert_int_equal(series[0], 4);
    assert_int_equal(series[1], 4);
    assert_non_null(strstr(svg, "bf16 (exact, 0)"));
    assert_non_null(strstr(svg, "</svg>"));
    free(svg);
    const char * files[] = {"report.json", "layers.svg", "summary.md"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        assert_int_equal(unlink(p), 0);
    }
    assert_int_equal(rmdir(dir), 0);
}

static int count(const char * s, const char * pat) {
    int c = 0;
    for (const char * q = s; (q = strstr(q, pat)); q++) c++;
    return c;
}

static void test_update_card_idempotent(void ** state) {
    (void) state;
    char path[] = "/tmp/oscar-test-card-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    const char * card = "---\nlicense: apache-2.0\n---\n# rotations\n\nSome text.";   // no final newline
    assert_int_equal(osc_write_file_atomic(path, card, strlen(card)), OSCAR_OK);
    struct oscar_verify_report r;
    struct oscar_verify_method ms[2];
    struct oscar_layer_metrics lm[6];
    double drift[6];
    fake_report(&r, ms, lm, drift);
    char * md = NULL, * a = NULL, * b = NULL, * c = NULL;
    size_t na, nb, nc;
    assert_int_equal(oscar_verify_markdown(&r, &md), OSCAR_OK);
    assert_non_null(strstr(md, "| oscar | 2.500 | 11.0000 ± 1.5000 | +1.0000 |"));
    assert_non_null(strstr(md, "| 1.000e-02 / 1.000e-01 | 75.00 % |\n"));
    assert_int_equal(oscar_verify_update_card(path, md), OSCAR_OK);
    assert_int_equal(osc_read_file(path, 1 << 20, &a, &na), OSCAR_OK);
    assert_int_equal(oscar_verify_update_card(path, md), OSCAR_OK);
    assert_int_equal(osc_read_file(path, 1 << 20, &b, &nb), OSCAR_OK);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);                       // byte-identical after the second run
    assert_int_equal(count(b, "<!-- oscar-verify:begin -->"), 1);
    assert_int_equal(count(b, "<!-- oscar-verify:end -->"), 1);
    assert_int_equal(strncmp(b, card, strlen(card)), 0); // the card before the block is kept
    // a different summary replaces the block, the rest stays
    ms[1].ppl = 12;
    free(md);
    assert_int_equal(oscar_verify_markdown(&r, &md), OSCAR_OK);
    assert_int_equal(oscar_verify_update_card(path, md), OSCAR_OK);
    assert_int_equal(osc_read_file(path, 1 << 20, &c, &nc), OSCAR_OK);
    assert_int_equal(count(c, "<!-- oscar-verify:begin -->"), 1);
    assert_non_null(strstr(c, "| oscar | 2.500 | 12.0000 ± 1.5000 |"));
    assert_null(strstr(c, "| oscar | 2.500 | 11.0000 ± 1.5000 |"));
    assert_int_equal(nc, nb);
    free(md), free(a), free(b), free(c);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity_zero), cmocka_unit_test(test_scaling),   cmocka_unit_test(test_constant_shift),
        cmocka_unit_test(test_tier_rule),     cmocka_unit_test(test_sim_vs_cache), cmocka_unit_test(test_ppl_all_bf16),
        cmocka_unit_test(test_bpe),           cmocka_unit_test(test_parse_methods),
        cmocka_unit_test(test_run_random_model), cmocka_unit_test(test_run_next_token), cmocka_unit_test(test_run_recall),
        cmocka_unit_test(test_report_json_schema),
        cmocka_unit_test(test_update_card_idempotent), cmocka_unit_test(test_rotate_rows_bits),
        cmocka_unit_test(test_transform_layer_rows), cmocka_unit_test(test_metrics_methods_shared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
