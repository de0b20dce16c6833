// test-attention.c - tiered fused attention vs dense attention over the
// dequantized cache, all-BF16 equivalence, prefill form, the demotion policy
// (method.md §11, §21 reference cases) and the cache/simulator agreement.
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

#include "oscar.h"
#include "attention/attention.h"
#include "attention/kv-cache.h"

#include "test-xorshift.h"
static void fill(float * x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = nrand();
}
static double rel_l2(const float * a, const float * b, int64_t n) {
    double e = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        e += ((double) a[i] - (double) b[i]) * ((double) a[i] - (double) b[i]);
        r += (double) b[i] * (double) b[i];
    }
    return sqrt(e / (r > 0 ? r : 1));
}

// Builds a cache (prefill of len0 tokens, then n_dec decode steps), compares tiered
// decode with dense fp64 attention over oscar_kv_cache_gather rows. Tolerance 1e-5
// relative L2: both compute the same softmax in fp32 vs fp64 over identical rows; fp32
// accumulation over n <= 8192 terms gives relative error ~ sqrt(n) * 2^-24 ~ 5e-6 at worst.
static void check_case(int Hkv, int g, int D, int page, int P, int R, int64_t len0, int n_dec, bool all_hp) {
    struct oscar_kv_cache_params p = oscar_kv_cache_default_params(Hkv, D);
    p.page_size = page, p.n_sink = P, p.n_recent = R, p.max_seq_len = len0 + n_dec + 1;
    p.k_quant.group_size = D / 2;
    if (all_hp) p.n_recent = (int32_t) (len0 + n_dec + 1);
    struct oscar_kv_cache * c;
    assert_int_equal(oscar_kv_cache_init(&p, &c), OSCAR_OK);
    int64_t row = (int64_t) Hkv * D, L = len0 + n_dec;
    float * k = malloc((size_t) (L * row) * sizeof(float)), * v = malloc((size_t) (L * row) * sizeof(float));
    fill(k, L * row), fill(v, L * row);
    assert_int_equal(oscar_kv_cache_prefill(c, 0, k, v, len0, true), OSCAR_OK);
    for (int s = 0; s < n_dec; s++)
        assert_int_equal(oscar_kv_cache_decode_append(c, 0, k + (len0 + s) * row, v + (len0 + s) * row, NULL), OSCAR_OK);
    const struct oscar_kv_seq * sq = &c->seqs[0];
    assert_int_equal(sq->len, L);
    assert_int_equal(sq->n_sink + sq->n_int2 + sq->n_recent, L);
    if (all_hp) assert_int_equal(sq->n_int2, 0);
    int Hq = Hkv * g;
    float * kg = malloc((size_t) (L * row) * sizeof(float)), * vg = malloc((size_t) (L * row) * sizeof(float));
    float * q = malloc((size_t) Hq * D * sizeof(float)), * o1 = malloc((size_t) Hq * D * sizeof(float));
    float * o2 = malloc((size_t) Hq * D * sizeof(float));
    fill(q, (int64_t) Hq * D);
    assert_int_equal(oscar_kv_cache_gather(c, 0, kg, vg, NULL), OSCAR_OK);
    struct oscar_attn_tiered_opts opts = oscar_attn_tiered_default_opts();
    opts.n_splits_int2 = 1 + (int32_t) (urand() * 8);
    assert_int_equal(oscar_attn_tiered_decode(c, 0, q, Hq, &opts, o1), OSCAR_OK);
    struct oscar_attn_shape sh = { Hq, Hkv, D };
    assert_int_equal(oscar_attn_dense(&sh, q, 1, L - 1, kg, vg, L, true, OSCAR_ACCUM_F64, o2), OSCAR_OK);
    double err = rel_l2(o1, o2, (int64_t) Hq * D);
    if (err >= 1e-5)
        printf("Hkv %d g %d D %d page %d P %d R %d L %lld: rel L2 %.3g\n", Hkv, g, D, page, P, R, (long long) L, err);
    assert_true(err < 1e-5);
    if (all_hp) {
        // With no INT2 tier the cache rows are exactly the bf16-rounded inputs.
        for (int64_t i = 0; i < L * row; i++) assert_true(kg[i] == oscar_bf16_round(k[i]));
    }
    free(k), free(v), free(kg), free(vg), free(q), free(o1), free(o2);
    oscar_kv_cache_free(c);
}

static void test_tiered_vs_dense(void ** state) {
    (void) state;
    uint64_t seed = (uint64_t) time(NULL);
    printf("seed %llu\n", (unsigned long long) seed);
    rng_state = seed | 1;
    const int64_t lens[] = { 1, 5, 40, 100, 333, 1000 };
    for (int i = 0; i < 6; i++) {
        int g = 1 + (int) (urand() * 8), page = 8 << (int) (urand() * 5);   // 8..128
        check_case(1 + (int) (urand() * 3), g, i % 2 ? 64 : 128, page, 16, 32, lens[i], 1 + (int) (urand() * 40), false);
    }
    check_case(3, 3, 64, 8, 64, 256, 8192, 9, false);    // SmolLM2-like, long
    check_case(2, 4, 128, 16, 64, 256, 3000, 20, false);
    check_case(2, 2, 64, 8, 8, 16, 30, 3, false);        // length shorter than sink + recent
}

static void test_all_bf16_equals_dense(void ** state) {
    (void) state;
    rng_state = 31337;
    check_case(2, 4, 64, 8, 16, 32, 200, 5, true);
    check_case(1, 8, 128, 32, 64, 256, 700, 2, true);
}

static void test_prefill_tiered(void ** state) {
    (void) state;
    rng_state = 2024;
    int Hkv = 2, g = 3, D = 64, Hq = Hkv * g;
    struct oscar_kv_cache_params p = oscar_kv_cache_default_params(Hkv, D);
    p.page_size = 16, p.n_sink = 8, p.n_recent = 16, p.max_seq_len = 512;
    struct oscar_kv_cache * c;
    assert_int_equal(oscar_kv_cache_init(&p, &c), OSCAR_OK);
    int64_t row = Hkv * D, n0 = 100, n1 = 37;
    float * k = malloc((size_t) ((n0 + n1) * row) * sizeof(float)), * v = malloc((size_t) ((n0 + n1) * row) * sizeof(float));
    fill(k, (n0 + n1) * row), fill(v, (n0 + n1) * row);
    assert_int_equal(oscar_kv_cache_prefill(c, 0, k, v, n0, false), OSCAR_OK);   // chunk 1: sink + INT2
    float * q = malloc((size_t) (n1 * Hq * D) * sizeof(float)), * o1 = malloc((size_t) (n1 * Hq * D) * sizeof(float));
    float * o2 = malloc((size_t) (n1 * Hq * D) * sizeof(float));
    fill(q, n1 * Hq * D);
    struct oscar_attn_tiered_opts opts = oscar_attn_tiered_default_opts();
    assert_int_equal(oscar_attn_tiered_prefill(c, 0, q, n1, Hq, k + n0 * row, v + n0 * row, &opts, o1), OSCAR_OK);
    float * kg = malloc((size_t) ((n0 + n1) * row) * sizeof(float)), * vg = malloc((size_t) ((n0 + n1) * row) * sizeof(float));
    assert_int_equal(oscar_kv_cache_gather(c, 0, kg, vg, NULL), OSCAR_OK);
    for (int64_t i = 0; i < n1 * row; i++) {
        kg[n0 * row + i] = oscar_bf16_round(k[n0 * row + i]);
        vg[n0 * row + i] = oscar_bf16_round(v[n0 * row + i]);
    }
    struct oscar_attn_shape sh = { Hq, Hkv, D };
    assert_int_equal(oscar_attn_dense(&sh, q, n1, n0, kg, vg, n0 + n1, true, OSCAR_ACCUM_F64, o2), OSCAR_OK);
    assert_true(rel_l2(o1, o2, n1 * Hq * D) < 1e-5);
    assert_int_equal(c->seqs[0].n_int2, n0 - 8);   // non-final chunk: everything past the sink is INT2
    free(k), free(v), free(q), free(o1), free(o2), free(kg), free(vg);
    oscar_kv_cache_free(c);
}

// Bits per element of the INT2 layout (oscar_int2_bpe) against the bytes the CPU cache
// writer fills after a final prefill: BF16 rows of the sink and recent tiers, INT2 codes and
// (scale, zero) of the middle tier, K and V, for each metadata dtype, at 2k, 32k and 128k.
static void test_bpe_matches_cache_bytes(void ** state) {
    (void) state;
    rng_state = 77;
    const int64_t Ls[3] = { 2048, 32768, 131072 };
    const enum oscar_quant_meta_dtype mt[3] = { OSCAR_META_F32, OSCAR_META_F16, OSCAR_META_BF16 };
    int Hkv = 1, D = 128;
    float * k = malloc((size_t) Ls[2] * D * sizeof(float)), * v = malloc((size_t) Ls[2] * D * sizeof(float));
    fill(k, Ls[2] * D), fill(v, Ls[2] * D);
    for (int li = 0; li < 3; li++)
        for (int mi = 0; mi < 3; mi++) {
            struct oscar_kv_cache_params p = oscar_kv_cache_default_params(Hkv, D);
            p.max_seq_len = Ls[li], p.k_quant.meta_dtype = p.v_quant.meta_dtype = mt[mi];
            struct oscar_kv_cache * c;
            assert_int_equal(oscar_kv_cache_init(&p, &c), OSCAR_OK);
            assert_int_equal(oscar_kv_cache_prefill(c, 0, k, v, Ls[li], true), OSCAR_OK);
            const struct oscar_kv_seq * q = &c->seqs[0];
            assert_int_equal(q->n_sink, p.n_sink);
            assert_int_equal(q->n_recent, p.n_recent);
            double bytes = 0;   // K and V
            for (int w = 0; w < 2; w++) {
                const struct oscar_int2_params * qp = w ? &c->p.v_quant : &c->p.k_quant;
                bytes += (double) (q->n_sink + q->n_recent) * Hkv * D * 2 +
                         (double) q->n_int2 * Hkv * (double) (oscar_int2_code_bytes(qp) + oscar_int2_meta_bytes(qp));
            }
            double measured = bytes * 8.0 / (2.0 * (double) Ls[li] * Hkv * D);
            double layout = oscar_int2_bpe(&p.k_quant, p.n_sink, p.n_recent, Ls[li]);
            assert_true(fabs(measured - layout) < 1e-12);
            if (li == 2) assert_true(mi == 0 ? fabs(layout - 2.533) < 5e-4 : fabs(layout - 2.2836) < 5e-5);
            oscar_kv_cache_free(c);
        }
    free(k), free(v);
}

static void test_policy_reference_cases(void ** state) {
    (void) state;
    // §21 flush counter init: max(0, (R + N_Q - 1) - R) == N_Q - 1.
    const int Rs[] = { 16, 64, 128 }, Ns[] = { 4, 8 };
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) assert_int_equal(oscar_kv_flush_counter_init(Rs[i], Ns[j], Rs[i]), Ns[j] - 1);
    // §21 radix trim table.
    assert_int_equal(oscar_kv_radix_trim(1024, 32, 128, 8, 8), 136);
    assert_int_equal(oscar_kv_radix_trim(96, 32, 128, 8, 8), 64);
    assert_int_equal(oscar_kv_radix_trim(32, 32, 128, 8, 8), 0);
    assert_int_equal(oscar_kv_radix_trim(20, 32, 128, 8, 8), 0);
    assert_int_equal(oscar_kv_radix_trim(1024, 32, 0, 8, 8), 0);
    assert_int_equal(oscar_kv_radix_trim(1024, 32, 128, 1, 8), 135);
    const int R2[] = { 8, 64, 128 };
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
            int64_t t = oscar_kv_radix_trim(4 * R2[i] + 32, 32, R2[i], Ns[j], Ns[j]);
            assert_true(t >= R2[i] + Ns[j] - 1 && t % Ns[j] == 0);
        }
    // §21 flush round trip / gating: seq_len = R + K + 64, positions fp = L - R - (K-1) + j.
    uint8_t is_hp[1024];
    int64_t fp[8];
    for (int K = 1; K <= 8; K *= 4) {
        for (int i = 0; i < 1024; i++) is_hp[i] = 1;
        int32_t counter = 0;
        int64_t L = 128 + K + 64;
        assert_int_equal(oscar_kv_decode_plan(&counter, L, 128, K, 0, is_hp, fp), K);
        for (int j = 0; j < K; j++) assert_int_equal(fp[j], L - 128 - (K - 1) + j);
        assert_int_equal(counter, K - 1);
        assert_int_equal(oscar_kv_decode_plan(&counter, L + 1, 128, K, 0, is_hp, fp), K > 1 ? 0 : 1);
    }
    int32_t counter = 0;
    assert_int_equal(oscar_kv_decode_plan(&counter, 300, 0, 8, 0, is_hp, fp), 0);   // R = 0: never
    // §11.3 layouts.
    struct oscar_tier_layout l;
    oscar_kv_extend_layout(0, 1000, 64, 256, true, &l);
    assert_true(l.hp_prefix_end == 64 && l.quant_begin == 64 && l.quant_end == 744 && l.hp_recent_begin == 744);
    oscar_kv_extend_layout(0, 1000, 64, 256, false, &l);
    assert_true(l.quant_end == 1000 && l.hp_recent_begin == l.hp_recent_end);
    oscar_kv_extend_layout(0, 100, 64, 256, true, &l);
    assert_true(l.quant_begin == l.quant_end && l.hp_recent_begin == 64 && l.hp_recent_end == 100);
}

static void test_sim_matches_cache(void ** state) {
    (void) state;
    // Steady state: recent tier holds between R and R + N_Q - 1 tokens; sim and cache agree.
    rng_state = 5;
    struct oscar_kv_cache_params p = oscar_kv_cache_default_params(1, 16);
    p.n_sink = 16, p.n_recent = 32, p.max_seq_len = 600;
    struct oscar_kv_cache * c;
    assert_int_equal(oscar_kv_cache_init(&p, &c), OSCAR_OK);
    struct oscar_tier_sim s;
    assert_int_equal(oscar_tier_sim_init(&s, 16, 32, 8, 600), OSCAR_OK);
    float k[600 * 16], v[600 * 16];
    fill(k, 600 * 16), fill(v, 600 * 16);
    assert_int_equal(oscar_kv_cache_prefill(c, 0, k, v, 50, false), OSCAR_OK);
    assert_int_equal(oscar_kv_cache_prefill(c, 0, k + 50 * 16, v + 50 * 16, 30, true), OSCAR_OK);
    oscar_tier_sim_prefill(&s, 50, false);
    oscar_tier_sim_prefill(&s, 30, true);
    for (int t = 80; t < 500; t++) {
        int32_t nd = -1;
        assert_int_equal(oscar_kv_cache_decode_append(c, 0, k + t * 16, v + t * 16, &nd), OSCAR_OK);
        assert_int_equal(oscar_tier_sim_decode(&s), nd);
        int64_t cnt[3];
        oscar_tier_sim_counts(&s, cnt);
        assert_int_equal(cnt[0], c->seqs[0].n_sink);
        assert_int_equal(cnt[1], c->seqs[0].n_int2);
        assert_int_equal(cnt[2], c->seqs[0].n_recent);
        if (t > 120) assert_true(cnt[2] >= 32 && cnt[2] <= 32 + 7);
        if (nd > 0) assert_int_equal(cnt[2], 32);   // exactly R right after a flush
    }
    oscar_tier_sim_free(&s);
    // NaN rows are rejected by the cache.
    k[0] = NAN;
    oscar_kv_cache_seq_reset(c, 0);
    assert_int_equal(oscar_kv_cache_prefill(c, 0, k, v, 4, true), OSCAR_ERR_NUMERIC);
    oscar_kv_cache_free(c);
}

static void test_merge_exact(void ** state) {
    (void) state;
    // Partials over any split of the keys merge to the unsplit result.
    rng_state = 77;
    float q[2 * 32], k[100 * 32], v[100 * 32], o[3][2 * 32], lse[3][2], out[2 * 32], ref[2 * 32], lref[2];
    fill(q, 64), fill(k, 3200), fill(v, 3200);
    oscar_attn_partial_rows(2, 32, q, k, 32, v, 32, 100, NULL, -1, ref, lref);
    oscar_attn_partial_rows(2, 32, q, k, 32, v, 32, 37, NULL, -1, o[0], lse[0]);
    oscar_attn_partial_rows(2, 32, q, k + 37 * 32, 32, v + 37 * 32, 32, 63, NULL, -1, o[1], lse[1]);
    oscar_attn_partial_rows(2, 32, q, k, 32, v, 32, 0, NULL, -1, o[2], lse[2]);   // empty split
    assert_true(lse[2][0] == -INFINITY);
    float lm[2];
    oscar_attn_merge(3, 2, 32, &o[0][0], &lse[0][0], out, lm);
    assert_true(rel_l2(out, ref, 64) < 1e-6);
    assert_true(fabsf(lm[0] - lref[0]) < 1e-5f);
    // a NaN split (a NaN partial of row 1) stays NaN in that row, the other row is unchanged
    float out2[2 * 32], lm2[2];
    lse[1][1] = NAN;
    oscar_attn_merge(3, 2, 32, &o[0][0], &lse[0][0], out2, lm2);
    assert_memory_equal(out2, out, 32 * sizeof(float));
    for (int32_t d = 0; d < 32; d++) assert_true(isnan(out2[32 + d]));
    assert_true(isnan(lm2[1]));
    // every split empty: zeros and -inf
    for (int32_t s = 0; s < 3; s++) lse[s][0] = lse[s][1] = -INFINITY;
    oscar_attn_merge(3, 2, 32, &o[0][0], &lse[0][0], out2, lm2);
    for (int32_t d = 0; d < 64; d++) assert_true(out2[d] == 0.0f);
    assert_true(lm2[0] == -INFINITY && lm2[1] == -INFINITY);
}

// oscar_attn_rows: each row's result is the same bits alone (n = 1) as in a block of 37
// rows and with keys the caller transposed, for head_dim 64/128/256 and an odd 40, with
// per-row alternative-key ranges; and it
// equals fp64 dense attention over the keys each row reads within 2e-6 relative L2 (fp32
// scores, weights and sums over <= 300 keys: ~sqrt(300)·2^-24 ~ 1e-6).
static void test_rows_blocking_invariant(void ** state) {
    (void) state;
    rng_state = 4242;
    const int32_t dims[] = {64, 128, 256, 40};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        const int32_t D = dims[di], N = 300, n = 37, Hkv = 2;
        const size_t  rs = (size_t) Hkv * D;
        float * k = malloc(sizeof(float) * N * rs), * v = malloc(sizeof(float) * N * rs);
        float * ka = malloc(sizeof(float) * N * rs), * va = malloc(sizeof(float) * N * rs);
        float * q = malloc(sizeof(float) * n * D), * blk = malloc(sizeof(float) * n * D);
        float * one = malloc(sizeof(float) * D), * ref = malloc(sizeof(float) * D);
        float * kr = malloc(sizeof(float) * N * D), * vr = malloc(sizeof(float) * N * D);
        float * scr = malloc(sizeof(float) * oscar_attn_rows_scratch(n, N, D));
        assert_true(k && v && ka && va && q && blk && one && ref && kr && vr && scr);
        fill(k, N * (int64_t) rs), fill(v, N * (int64_t) rs), fill(ka, N * (int64_t) rs), fill(va, N * (int64_t) rs);
        fill(q, n * (int64_t) D);
        int64_t t[37], lo[37], hi[37];
        for (int32_t r = 0; r < n; r++) {
            t[r] = N - 1 - (int64_t) (urand() * 200);
            lo[r] = (int64_t) (urand() * (double) t[r]);
            hi[r] = r % 5 == 0 ? lo[r] : lo[r] + (int64_t) (urand() * (double) (t[r] + 1 - lo[r]));
        }
        // KV head 1 of the interleaved buffers
        const struct oscar_attn_keys kv = {.head_dim = D, .row_stride = rs, .k = k + D, .v = v + D,
                                           .k_alt = ka + D, .v_alt = va + D};
        oscar_attn_rows(&kv, n, q, (size_t) D, t, lo, hi, blk, (size_t) D, scr);
        // keys transposed once by the caller: the same bits
        float * kt = malloc(sizeof(float) * 2 * oscar_attn_keys_transposed_size(N, D)), * pre = malloc(sizeof(float) * n * D);
        assert_true(kt && pre);
        oscar_attn_keys_transpose(k + D, rs, N, D, kt);
        oscar_attn_keys_transpose(ka + D, rs, N, D, kt + oscar_attn_keys_transposed_size(N, D));
        struct oscar_attn_keys kvt = kv;
        kvt.kt = kt, kvt.kt_alt = kt + oscar_attn_keys_transposed_size(N, D);
        oscar_attn_rows(&kvt, n, q, (size_t) D, t, lo, hi, pre, (size_t) D, scr);
        assert_memory_equal(pre, blk, sizeof(float) * (size_t) n * (size_t) D);
        free(kt), free(pre);
        double worst = 0;
        for (int32_t r = 0; r < n; r++) {
            oscar_attn_rows(&kv, 1, q + (size_t) r * D, 0, &t[r], &lo[r], &hi[r], one, 0, scr);
            assert_memory_equal(one, blk + (size_t) r * D, sizeof(float) * (size_t) D);
            for (int64_t p = 0; p <= t[r]; p++) {   // the rows this query reads, gathered
                bool alt = p >= lo[r] && p < hi[r];
                memcpy(kr + p * D, (alt ? ka : k) + (size_t) p * rs + D, sizeof(float) * (size_t) D);
                memcpy(vr + p * D, (alt ? va : v) + (size_t) p * rs + D, sizeof(float) * (size_t) D);
            }
            struct oscar_attn_shape sh = {.n_head = 1, .n_head_kv = 1, .head_dim = D};
            assert_int_equal(oscar_attn_dense(&sh, q + (size_t) r * D, 1, t[r], kr, vr, t[r] + 1, true,
                                              OSCAR_ACCUM_F64, ref), OSCAR_OK);
            double e = rel_l2(one, ref, D);
            worst = e > worst ? e : worst;
        }
        printf("attn rows D %d: blocked == alone bitwise; worst rel L2 vs fp64 dense %.2e\n", D, worst);
        assert_true(worst < 2e-6);
        free(k), free(v), free(ka), free(va), free(q), free(blk), free(one), free(ref), free(kr), free(vr), free(scr);
    }
}

// oscar_attn_rows with a sliding window W: row t reads keys t - W < p <= t (transformers'
// sliding_window_overlay: kv_idx > q_idx - W). Checked at the boundary (key t - W is never read, key
// t - W + 1 always is), against fp64 dense attention over exactly those keys, blocked == alone
// bitwise, W = 1 returns v_t itself, and a window no row reaches gives the bits of no window.
static void test_rows_window(void ** state) {
    (void) state;
    rng_state = 777;
    const int32_t D = 40, N = 100;
    const size_t  rs = (size_t) D;
    float * k = malloc(sizeof(float) * N * rs), * v = malloc(sizeof(float) * N * rs);
    float * ka = malloc(sizeof(float) * N * rs), * va = malloc(sizeof(float) * N * rs);
    float * q = malloc(sizeof(float) * N * D), * blk = malloc(sizeof(float) * N * D), * full = malloc(sizeof(float) * N * D);
    float * one = malloc(sizeof(float) * D), * ref = malloc(sizeof(float) * D), * chg = malloc(sizeof(float) * D);
    float * kr = malloc(sizeof(float) * N * D), * vr = malloc(sizeof(float) * N * D);
    float * scr = malloc(sizeof(float) * oscar_attn_rows_scratch(N, N, D));
    assert_true(k && v && ka && va && q && blk && full && one && ref && chg && kr && vr && scr);
    fill(k, N * D), fill(v, N * D), fill(ka, N * D), fill(va, N * D), fill(q, N * D);
    int64_t t[100], lo[100], hi[100];
    for (int32_t r = 0; r < N; r++) {   // alternative keys on a run of some rows, straddling windows
        t[r] = r;
        lo[r] = r / 2, hi[r] = r % 3 == 0 ? r / 2 : r / 2 + (r + 1) / 3;
    }
    struct oscar_attn_keys kv = {.head_dim = D, .row_stride = rs, .k = k, .v = v, .k_alt = ka, .v_alt = va};
    oscar_attn_rows(&kv, N, q, (size_t) D, t, lo, hi, full, (size_t) D, scr);
    const int64_t windows[] = {1, 5, 31, 32, 33, 64, 100, 150};
    for (size_t wi = 0; wi < sizeof windows / sizeof windows[0]; wi++) {
        const int64_t W = windows[wi];
        kv.window = W;
        oscar_attn_rows(&kv, N, q, (size_t) D, t, lo, hi, blk, (size_t) D, scr);
        if (W >= N) assert_memory_equal(blk, full, sizeof(float) * N * D); // no row reaches past its window
        double worst = 0;
        for (int32_t r = 0; r < N; r++) {
            oscar_attn_rows(&kv, 1, q + (size_t) r * D, 0, &t[r], &lo[r], &hi[r], one, 0, scr);
            assert_memory_equal(one, blk + (size_t) r * D, sizeof(float) * D);
            const int64_t first = t[r] - W + 1 > 0 ? t[r] - W + 1 : 0;
            for (int64_t p = first; p <= t[r]; p++) {
                bool alt = p >= lo[r] && p < hi[r];
                memcpy(kr + (p - first) * D, (alt ? ka : k) + (size_t) p * rs, sizeof(float) * D);
                memcpy(vr + (p - first) * D, (alt ? va : v) + (size_t) p * rs, sizeof(float) * D);
            }
            const int64_t nk = t[r] + 1 - first;
            struct oscar_attn_shape sh = {.n_head = 1, .n_head_kv = 1, .head_dim = D};
            assert_int_equal(oscar_attn_dense(&sh, q + (size_t) r * D, 1, nk - 1, kr, vr, nk, true, OSCAR_ACCUM_F64,
                                              ref), OSCAR_OK);
            double e = rel_l2(one, ref, D);
            worst = e > worst ? e : worst;
            if (W == 1) assert_memory_equal(one, vr, sizeof(float) * D); // one key: weight exactly 1
        }
        printf("attn rows window %lld: blocked == alone bitwise; worst rel L2 vs fp64 dense %.2e\n", (long long) W,
               worst);
        assert_true(worst < 2e-6);
    }
    // the boundary, row t = 60 (lo = hi there: plain keys), W = 5: key 55 = t - W is outside, 56 inside
    kv.window = 5;
    int64_t t60 = 60, l60 = 0, h60 = 0;
    oscar_attn_rows(&kv, 1, q + 60 * D, 0, &t60, &l60, &h60, one, 0, scr);
    for (int32_t d = 0; d < D; d++) k[55 * rs + d] += 3.0f, v[55 * rs + d] += 3.0f;
    oscar_attn_rows(&kv, 1, q + 60 * D, 0, &t60, &l60, &h60, chg, 0, scr);
    assert_memory_equal(one, chg, sizeof(float) * D);
    for (int32_t d = 0; d < D; d++) k[56 * rs + d] += 3.0f, v[56 * rs + d] += 3.0f;
    oscar_attn_rows(&kv, 1, q + 60 * D, 0, &t60, &l60, &h60, chg, 0, scr);
    assert_true(rel_l2(chg, one, D) > 1e-3);
    free(k), free(v), free(ka), free(va), free(q), free(blk), free(full), free(one), free(ref), free(chg);
    free(kr), free(vr), free(scr);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiered_vs_dense), cmocka_unit_test(test_all_bf16_equals_dense),
        cmocka_unit_test(test_prefill_tiered),  cmocka_unit_test(test_policy_reference_cases),
        cmocka_unit_test(test_bpe_matches_cache_bytes),
        cmocka_unit_test(test_sim_matches_cache), cmocka_unit_test(test_merge_exact),
        cmocka_unit_test(test_rows_blocking_invariant), cmocka_unit_test(test_rows_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
