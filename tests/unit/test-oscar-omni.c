// test-oscar-omni.c - OScaR (lib/quant/oscar-omni.c) and its oscar-verify method "oscar-omni":
//  - quantizer invariants: scaling a token by a power of two leaves its scaled row and codes
//    unchanged (the norm takes it); a zero token has norm 1; NaN and bad shapes are refused;
//  - the method's transformed rows (oscar_kv_transform_layer) are bitwise the quantizer's:
//    HP K = unscale(scale(k)), INT2 K = the block quantizer from the first INT2 row, V through
//    the V quantizer; rows of an unfinished block keep HP (K and V); the folded K gives the kernel's
//    logit n·(Hq)·ŷ within fp32 rounding;
//  - its BPE formula, and an oscar_verify_run on the tiny-llama fixture that reports it.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "quant/quant.h"
#include "rotation/rotation.h"
#include "verify/metrics.h"
#include "verify/verify.h"

#define SEED 20261215u
#include "test-rng.h"

enum { HKV = 2, D = 32, T = 64, RS = HKV * D };

static void fill(float * x, size_t n, double s) {
    for (size_t i = 0; i < n; i++) x[i] = (float) (nrand() * s);
}

static void test_quantizer_invariants(void ** state) {
    (void) state;
    struct oscar_omni_params p = oscar_omni_default_params(HKV, D);
    float x[32 * RS], x4[32 * RS], y[32 * RS], y4[32 * RS], n1, n4;
    fill(x, 32 * RS, 1.0);
    for (int i = 0; i < 32 * RS; i++) x4[i] = x[i] * 0.25f;
    for (int t = 0; t < 32; t++) {
        assert_int_equal(oscar_omni_k_scale_token(&p, x + t * RS, y + t * RS, &n1), OSCAR_OK);
        assert_int_equal(oscar_omni_k_scale_token(&p, x4 + t * RS, y4 + t * RS, &n4), OSCAR_OK);
        assert_true(n4 == n1 * 0.25f && n1 > 0);
    }
    assert_memory_equal(y, y4, sizeof y);
    uint8_t c1[RS * 8], c4[RS * 8], m1[RS * 4], m4[RS * 4];
    assert_int_equal(oscar_omni_quantize_k_block(&p, y, c1, m1, NULL), OSCAR_OK);
    assert_int_equal(oscar_omni_quantize_k_block(&p, y4, c4, m4, NULL), OSCAR_OK);
    assert_memory_equal(c1, c4, sizeof c1);
    // the scaled token has unit norm up to the two bf16 roundings (2 x 2^-9 relative)
    double ss = 0;
    for (int i = 0; i < RS; i++) ss += (double) y[i] * (double) y[i];
    assert_true(fabs(sqrt(ss) - 1.0) < 4e-3);
    // a zero token: norm 1, zero scaled row
    float z[RS] = {0}, yz[RS], nz = 0;
    assert_int_equal(oscar_omni_k_scale_token(&p, z, yz, &nz), OSCAR_OK);
    assert_true(nz == 1.0f && yz[0] == 0.0f && yz[RS - 1] == 0.0f);
    x[5] = NAN;
    assert_int_equal(oscar_omni_k_scale_token(&p, x, y, &n1), OSCAR_ERR_NUMERIC);
    assert_int_equal(oscar_omni_quantize_v_rows(&p, x, 1, c1, m1, NULL), OSCAR_ERR_NUMERIC);
    p.kivi.head_dim = 48;   // the Hadamard needs a power of two
    assert_int_equal(oscar_omni_k_scale_token(&p, z, yz, &nz), OSCAR_ERR_INVALID);
}

// k_q rows [b0, b0 + 32) as the quantizer alone gives them.
static void expect_block(const float * k, int b0, float * out) {
    struct oscar_omni_params p = oscar_omni_default_params(HKV, D);
    float y[32 * RS], n[32];
    uint8_t codes[RS * 8], meta[RS * 4];
    for (int t = 0; t < 32; t++)
        assert_int_equal(oscar_omni_k_scale_token(&p, k + (b0 + t) * RS, y + t * RS, &n[t]), OSCAR_OK);
    assert_int_equal(oscar_omni_quantize_k_block(&p, y, codes, meta, NULL), OSCAR_OK);
    oscar_omni_dequantize_k_block(&p, codes, meta, y);
    for (int t = 0; t < 32; t++) oscar_omni_k_unscale_token(&p, y + t * RS, n[t], out + t * RS);
}

static void test_transform_equals_quantizer(void ** state) {
    (void) state;
    static float k[T * RS], v[T * RS], khp[T * RS], vhp[T * RS], kq[T * RS], vq[T * RS], e[T * RS];
    fill(k, T * RS, 2.0), fill(v, T * RS, 1.0);
    for (int i = 0; i < RS; i++) k[3 * RS + i] *= 0.01f;   // a low-norm "sink" token in the block
    struct oscar_omni_params p = oscar_omni_default_params(HKV, D);
    int32_t ss[2] = {0, T};
    struct oscar_kv_transform tf;
    // sink 4, recent 8 (static tiers): INT2 = [4, 56), whole blocks only (K and V, as the release
    // flushes) -> [4, 36)
    struct oscar_tiering tr = {.mode = OSCAR_TIERS_STATIC, .n_sink = 4, .n_recent = 8, .n_flush = 8};
    assert_int_equal(oscar_kv_transform_preset("oscar-omni", 1, HKV, D, 0, OSCAR_META_F32, &tr, false, NULL, NULL,
                                               false, NULL, NULL, &tf), OSCAR_OK);
    assert_int_equal(tf.kivi.meta_dtype, OSCAR_META_BF16);   // f32 asked: the release's bf162
    struct oscar_quant_stats st[2] = {0};
    assert_int_equal(oscar_kv_transform_layer(&tf, 0, T, 1, ss, k, v, khp, vhp, kq, vq, 2, st), OSCAR_OK);
    assert_int_equal(st[0].n_rows, HKV);          // one block per KV head
    assert_int_equal(st[1].n_rows, 32 * HKV);     // V rows 4..35
    for (int t = 0; t < T; t++) {                 // HP K: scale then unscale, per token
        float y[RS], n;
        assert_int_equal(oscar_omni_k_scale_token(&p, k + t * RS, y, &n), OSCAR_OK);
        oscar_omni_k_unscale_token(&p, y, n, e + t * RS);
    }
    assert_memory_equal(khp, e, sizeof e);
    expect_block(k, 4, e + 4 * RS);               // INT2 K: the block from row 4
    assert_memory_equal(kq, e, sizeof e);         // rows 0..3 and 36..63 keep HP
    assert_true(memcmp(kq + 4 * RS, khp + 4 * RS, 32 * RS * sizeof(float)) != 0);
    uint8_t codes[D / 4];
    uint8_t meta[8 * sizeof(float)];
    for (int r = 0; r < T * HKV; r++) {           // V: bf16(Hv) rotated back / the V quantizer
        float y[D];
        memcpy(y, v + r * D, sizeof y);
        oscar_fwht_f32(y, D);
        oscar_bf16_round_array(y, D);
        oscar_fwht_f32(y, D);
        assert_memory_equal(vhp + r * D, y, sizeof y);
        int t = r / HKV;
        if (t >= 4 && t < 36) {
            assert_int_equal(oscar_omni_quantize_v_rows(&p, v + r * D, 1, codes, meta, NULL), OSCAR_OK);
            oscar_omni_dequantize_v_rows(&p, codes, meta, 1, true, y);
        }
        assert_memory_equal(vq + r * D, y, sizeof y);
    }
    // The fold: q·k̂ (k̂ = H(n ŷ)) equals the kernel's n·(Hq)·ŷ within fp32 rounding.
    float q[D], hq[D];
    fill(q, D, 1.0);
    memcpy(hq, q, sizeof q);
    oscar_fwht_f32(hq, D);
    uint8_t kc[RS * 8], km[RS * 4];
    float yb[32 * RS], nb[32];
    for (int t = 0; t < 32; t++)
        assert_int_equal(oscar_omni_k_scale_token(&p, k + (4 + t) * RS, yb + t * RS, &nb[t]), OSCAR_OK);
    assert_int_equal(oscar_omni_quantize_k_block(&p, yb, kc, km, NULL), OSCAR_OK);
    oscar_omni_dequantize_k_block(&p, kc, km, yb);
    for (int t = 0; t < 32; t++) {
        double folded = 0, kernel = 0, mag = 0;
        for (int c = 0; c < D; c++) {
            folded += (double) q[c] * (double) kq[(4 + t) * RS + c];
            kernel += (double) hq[c] * (double) yb[t * RS + c];
            mag += fabs((double) hq[c] * (double) yb[t * RS + c]);
        }
        kernel *= (double) nb[t];
        assert_true(fabs(folded - kernel) <= 1e-5 * mag * (double) nb[t]);
    }
}

static void test_bpe(void ** state) {
    (void) state;
    struct oscar_tiering tr = {.mode = OSCAR_TIERS_DECODE, .n_sink = 32, .n_recent = 128, .n_flush = 8};
    struct oscar_kv_transform tf;
    assert_int_equal(oscar_kv_transform_preset("oscar-omni", 30, 3, 64, 0, OSCAR_META_F32, &tr, false, NULL, NULL,
                                               false, NULL, NULL, &tf), OSCAR_OK);
    // bf16 (scale, zero) per 32: 3 bits; bf16 share 160/2048; fp32 norm per token over 3 x 64 K values
    double want = 3.0 + 160.0 / 2048.0 * 13.0 + 16.0 / 192.0;
    assert_true(fabs(oscar_kv_transform_bpe(&tf, 2048) - want) < 1e-12);
    assert_true(fabs(oscar_kv_transform_bpe(&tf, 1 << 30) - 3.0 - 16.0 / 192.0) < 1e-5);   // share 2e-6
}

// oscar_verify_run on the tiny-llama fixture (3 layers, Hkv 2, D 32) with bf16, kivi and oscar-omni.
static void test_verify_fixture(void ** state) {
    (void) state;
    struct oscar_model * m = NULL;
    if (oscar_model_load("tests/fixtures/models/tiny-llama", &m) != OSCAR_OK) printf("%s\n", oscar_last_error());
    assert_non_null(m);
    enum { NT = 300 };
    int32_t toks[NT];
    for (int i = 0; i < NT; i++) toks[i] = (int32_t) (urand() * m->config.n_vocab) % m->config.n_vocab;
    struct oscar_verify_params vp = oscar_verify_default_params();
    vp.methods = "bf16,kivi,oscar-omni";
    vp.ctx = 128, vp.tokens = 256, vp.sink = 4, vp.recent = 16, vp.metric_tokens = 96, vp.n_threads = 1;
    struct oscar_verify_report rep;
    enum oscar_status st = oscar_verify_run(m, NULL, toks, NT, &vp, &rep);
    if (st != OSCAR_OK) printf("oscar_verify_run: %s\n", oscar_last_error());
    assert_int_equal(st, OSCAR_OK);
    assert_int_equal(rep.n_methods, 3);
    const struct oscar_verify_method * om = &rep.methods[2];
    printf("tiny-llama ppl: bf16 %.4f kivi %.4f oscar-omni %.4f (bpe %.4f)\n", rep.methods[0].ppl,
           rep.methods[1].ppl, om->ppl, om->bpe);
    assert_string_equal(om->name, "oscar-omni");
    assert_string_equal(om->kv_sim, "cpu");
    assert_true(om->k_stats.n_rows > 0 && om->v_stats.n_rows > 0);
    assert_true(fabs(om->bpe - (3.0 + 20.0 / 128.0 * 13.0 + 16.0 / 64.0)) < 1e-12);
    for (int32_t l = 0; l < m->config.n_layer; l++) {
        assert_true(om->layers[l].k_rel_mse > 0 && om->layers[l].n_rows_int2 > 0);
        assert_true(om->drift[l] > 0);
    }
    assert_true(om->nll_sum != rep.methods[0].nll_sum && isfinite(om->ppl));
    oscar_verify_report_free(&rep);
    char names[OSCAR_VERIFY_MAX_METHODS][32];
    int32_t n = 0;
    assert_int_equal(oscar_verify_parse_methods("oscar-omni", false, names, &n), OSCAR_OK);   // needs no artifact
    assert_int_equal(n, 1);
    oscar_model_free(m);
}

int main(void) {
    printf("seed %u\n", SEED);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantizer_invariants), cmocka_unit_test(test_transform_equals_quantizer),
        cmocka_unit_test(test_bpe), cmocka_unit_test(test_verify_fixture),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
