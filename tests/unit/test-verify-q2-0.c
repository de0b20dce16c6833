// test-verify-q2-0.c - the verify method q2_0 (the OSCAR llama.cpp fork's cache):
// its row transform is exactly rotate -> Q2_0 (no in-quant Hadamard, clip 0.96 for
// K and V) -> dequantize -> rotate back, its HP value the fp16 rounding of the
// rotated row; the RING tiering is the fork's sink + recent ring rule; its bits per
// element; the shapes it refuses; and oscar_verify_run on the tiny-llama fixture.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/oscar-artifact.h"
#include "model/model.h"
#include "quant/quant.h"
#include "rotation/rotation.h"
#include "verify/metrics.h"
#include "verify/report.h"
#include "verify/verify.h"

#define SEED 20260617u

#include "test-rng.h"

static const struct oscar_tiering ring = {.mode = OSCAR_TIERS_DECODE, .n_sink = 4, .n_recent = 8, .n_flush = 8,
                                          .block = 1};

// A random orthogonal D x D matrix (Gram-Schmidt of Gaussian rows, fp64, stored fp32).
static void random_orthogonal(float * R, int32_t D) {
    double * A = malloc(sizeof(double) * (size_t) D * D);
    for (int32_t i = 0; i < D * D; i++) A[i] = nrand();
    for (int32_t i = 0; i < D; i++) {
        for (int32_t j = 0; j < i; j++) {
            double dot = 0;
            for (int32_t c = 0; c < D; c++) dot += A[i * D + c] * A[j * D + c];
            for (int32_t c = 0; c < D; c++) A[i * D + c] -= dot * A[j * D + c];
        }
        double n = 0;
        for (int32_t c = 0; c < D; c++) n += A[i * D + c] * A[i * D + c];
        for (int32_t c = 0; c < D; c++) A[i * D + c] /= sqrt(n), R[i * D + c] = (float) A[i * D + c];
    }
    free(A);
}

// The method's row = rotation + lib/quant Q2_0, recomputed here from the public pieces.
static void test_row_transform(void ** state) {
    (void) state;
    printf("seed %u\n", SEED);
    enum { L = 2, HKV = 2, D = 128 };
    float * kr = malloc(sizeof(float) * L * D * D), * vr = malloc(sizeof(float) * L * D * D);
    for (int l = 0; l < L; l++) random_orthogonal(kr + l * D * D, D), random_orthogonal(vr + l * D * D, D);
    struct oscar_kv_transform tf;
    assert_int_equal(oscar_kv_transform_preset("q2_0", L, HKV, D, 0, OSCAR_META_F32, &ring, false, kr, vr, false,
                                               NULL, NULL, &tf), OSCAR_OK);
    const struct oscar_q2_0_params qp = {.hadamard = false, .clip_ratio = 0.96f};
    int64_t n_clipped = 0;
    for (int trial = 0; trial < 24; trial++) {
        int l = trial % L, h = (trial / L) % HKV;
        bool is_k = trial % 3 != 0;
        float x[D], y[D], yh[D], yq[D], want_hp[D], want_q[D], hp[D], q[D];
        uint8_t blocks[D / 32 * 12];
        double dc = trial % 4 == 0 ? 5.0 : 0.0;   // a DC offset the fork's centring must carry
        for (int d = 0; d < D; d++) x[d] = (float) (dc + nrand() * (1 + d % 7));
        if (trial % 5 == 0) x[trial % D] = 300.0f;   // an outlier for the clip
        const float * R = (is_k ? kr : vr) + (size_t) l * D * D;
        oscar_kv_rotate_row(R, D, x, y, false);
        for (int d = 0; d < D; d++) yh[d] = oscar_f16_to_f32(oscar_f32_to_f16(y[d]));
        oscar_kv_rotate_row(R, D, yh, want_hp, true);
        struct oscar_quant_stats st = {0};
        assert_int_equal(oscar_q2_0_quantize_row(&qp, y, D, blocks, &st), OSCAR_OK);
        assert_int_equal(oscar_q2_0_dequantize_row(&qp, blocks, D, yq), OSCAR_OK);
        oscar_kv_rotate_row(R, D, yq, want_q, true);
        assert_int_equal(oscar_kv_transform_row(&tf, is_k, l, h, true, x, hp, q, NULL), OSCAR_OK);
        assert_memory_equal(hp, want_hp, sizeof hp);
        assert_memory_equal(q, want_q, sizeof q);
        n_clipped += st.n_clipped;
        // the decode path writes the same row (one quantizer, no flush variant)
        assert_int_equal(oscar_kv_transform_row(&tf, is_k, l, h, false, x, hp, q, NULL), OSCAR_OK);
        assert_memory_equal(q, want_q, sizeof q);
        double err = 0, ref = 0;
        for (int d = 0; d < D; d++) {
            double e = (double) q[d] - (double) x[d];
            err += e * e, ref += (double) x[d] * (double) x[d];
        }
        assert_true(err > 0 && err < 0.5 * ref);   // a real 2-bit quantizer of the row
    }
    assert_true(n_clipped > 0);   // the 0.96 clip acted
    free(kr), free(vr);
}

// q2_0-attn-rot: the fork's default attention rotation (upstream llama.cpp's attn_rot for quantized
// caches) after the model's: x·R·diag(H_b), b = 128 for K and 64 for V at head_dim 128; the inverse
// applies diag(H_b) first. Recomputed from the public pieces (oscar_fwht_block_rows: natural-order
// normalized Hadamard, the fork's ggml_gen_hadamard).
static void test_row_transform_attn_rot(void ** state) {
    (void) state;
    enum { L = 1, HKV = 2, D = 128 };
    float * kr = malloc(sizeof(float) * L * D * D), * vr = malloc(sizeof(float) * L * D * D);
    random_orthogonal(kr, D), random_orthogonal(vr, D);
    struct oscar_kv_transform tf, plain;
    assert_int_equal(oscar_kv_transform_preset("q2_0-attn-rot", L, HKV, D, 0, OSCAR_META_F32, &ring, false, kr, vr,
                                               false, NULL, NULL, &tf), OSCAR_OK);
    assert_int_equal(oscar_kv_transform_preset("q2_0", L, HKV, D, 0, OSCAR_META_F32, &ring, false, kr, vr, false,
                                               NULL, NULL, &plain), OSCAR_OK);
    assert_int_equal(tf.k_engine_hadamard, 128);
    assert_int_equal(tf.v_engine_hadamard, 64);
    assert_int_equal(plain.k_engine_hadamard, 0);
    const struct oscar_q2_0_params qp = {.hadamard = false, .clip_ratio = 0.96f};
    for (int trial = 0; trial < 8; trial++) {
        bool is_k = trial % 2 == 0;
        int h = (trial / 2) % HKV, b = is_k ? 128 : 64;
        float x[D], y[D], t[D], want_hp[D], want_q[D], hp[D], q[D], q_plain[D];
        uint8_t blocks[D / 32 * 12];
        for (int d = 0; d < D; d++) x[d] = (float) (nrand() * (1 + d % 5));
        oscar_kv_rotate_row(is_k ? kr : vr, D, x, y, false);
        assert_int_equal(oscar_fwht_block_rows(y, 1, D, b), OSCAR_OK);
        for (int d = 0; d < D; d++) t[d] = oscar_f16_to_f32(oscar_f32_to_f16(y[d]));
        assert_int_equal(oscar_fwht_block_rows(t, 1, D, b), OSCAR_OK);
        oscar_kv_rotate_row(is_k ? kr : vr, D, t, want_hp, true);
        struct oscar_quant_stats st = {0};
        assert_int_equal(oscar_q2_0_quantize_row(&qp, y, D, blocks, &st), OSCAR_OK);
        assert_int_equal(oscar_q2_0_dequantize_row(&qp, blocks, D, t), OSCAR_OK);
        assert_int_equal(oscar_fwht_block_rows(t, 1, D, b), OSCAR_OK);
        oscar_kv_rotate_row(is_k ? kr : vr, D, t, want_q, true);
        assert_int_equal(oscar_kv_transform_row(&tf, is_k, 0, h, true, x, hp, q, NULL), OSCAR_OK);
        assert_memory_equal(hp, want_hp, sizeof hp);
        assert_memory_equal(q, want_q, sizeof q);
        assert_int_equal(oscar_kv_transform_row(&plain, is_k, 0, h, true, x, hp, q_plain, NULL), OSCAR_OK);
        assert_memory_not_equal(q, q_plain, sizeof q);   // the extra rotation changes what is quantized
    }
    // the fork's block sizes at other head dims: the largest power of two >= 64 dividing D for K, 64 for
    // V; none below 64 (its attn_rot needs head_dim % 64 == 0)
    float * R = calloc((size_t) 256 * 256, sizeof(float));
    assert_int_equal(oscar_kv_transform_preset("q2_0-attn-rot", 1, 1, 256, 0, OSCAR_META_F32, &ring, false, R, R,
                                               false, NULL, NULL, &tf), OSCAR_OK);
    assert_int_equal(tf.k_engine_hadamard, 256);
    assert_int_equal(tf.v_engine_hadamard, 64);
    assert_int_equal(oscar_kv_transform_preset("q2_0-attn-rot", 1, 1, 64, 0, OSCAR_META_F32, &ring, false, R, R,
                                               false, NULL, NULL, &tf), OSCAR_OK);
    assert_int_equal(tf.k_engine_hadamard, 64);
    assert_int_equal(oscar_kv_transform_preset("q2_0-attn-rot", 1, 2, 32, 0, OSCAR_META_F32, &ring, false, R, R,
                                               false, NULL, NULL, &tf), OSCAR_OK);
    assert_int_equal(tf.k_engine_hadamard, 0);
    assert_int_equal(tf.v_engine_hadamard, 0);
    free(R), free(kr), free(vr);
}

// The fork (llama-kv-cache.cpp): sinks pos < P and the ring of the R latest positions are
// F16; each query sees every other key as Q2_0.
static void test_ring_rule(void ** state) {
    (void) state;
    const int64_t PR[][2] = {{4, 8}, {0, 0}, {0, 5}, {3, 0}, {16, 1}};
    for (size_t c = 0; c < sizeof PR / sizeof PR[0]; c++) {
        struct oscar_tiering tr = {.mode = OSCAR_TIERS_RING, .n_sink = PR[c][0], .n_recent = PR[c][1], .n_flush = 1,
                                   .block = 1};
        for (int64_t t = 0; t < 40; t++)
            for (int64_t p = 0; p <= t; p++) {
                bool hp = p < tr.n_sink || (tr.n_recent > 0 && p > t - tr.n_recent);
                assert_int_equal(oscar_tier_is_int2(&tr, p, t, 40), !hp);
            }
    }
}

static void test_bpe_and_shapes(void ** state) {
    (void) state;
    float R[128 * 128 * 2] = {0};
    struct oscar_kv_transform tf;
    struct oscar_tiering none = {.mode = OSCAR_TIERS_DECODE, .n_sink = 0, .n_recent = 0, .n_flush = 8, .block = 1};
    assert_int_equal(oscar_kv_transform_preset("q2_0", 1, 2, 32, 0, OSCAR_META_F32, &none, false, R, R, false, NULL,
                                               NULL, &tf), OSCAR_OK);
    assert_true(oscar_kv_transform_bpe(&tf, 2048) == 3.0);   // 12 bytes per 32 elements, no HP rows
    struct oscar_tiering tr = {.mode = OSCAR_TIERS_DECODE, .n_sink = 64, .n_recent = 256, .n_flush = 8, .block = 1};
    assert_int_equal(oscar_kv_transform_preset("q2_0", 1, 1, 128, 0, OSCAR_META_BF16, &tr, false, R, R, false, NULL,
                                               NULL, &tf), OSCAR_OK);
    assert_int_equal(tf.tiers.mode, OSCAR_TIERS_RING);
    assert_true(fabs(oscar_kv_transform_bpe(&tf, 131072) - (3.0 + 320.0 / 131072.0 * 13.0)) < 1e-12);
    assert_true(oscar_kv_transform_bpe(&tf, 100) == 16.0);
    // the fork's row groups cross heads (SmolLM2: D 64, 3 KV heads), D not a multiple of 32,
    // per-head rotations, no rotations
    assert_int_equal(oscar_kv_transform_preset("q2_0", 1, 3, 64, 0, OSCAR_META_F32, &tr, false, R, R, false, NULL,
                                               NULL, &tf), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "cross heads"));
    assert_int_equal(oscar_kv_transform_preset("q2_0", 1, 2, 48, 0, OSCAR_META_F32, &tr, false, R, R, false, NULL,
                                               NULL, &tf), OSCAR_ERR_INVALID);
    assert_int_equal(oscar_kv_transform_preset("q2_0", 1, 2, 32, 0, OSCAR_META_F32, &tr, true, R, R, false, NULL,
                                               NULL, &tf), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "one rotation per layer"));
    assert_int_equal(oscar_kv_transform_preset("q2_0", 1, 1, 128, 0, OSCAR_META_F32, &tr, false, NULL, NULL, false,
                                               NULL, NULL, &tf), OSCAR_ERR_INVALID);
    assert_int_equal(oscar_kv_transform_preset("q2_0", 1, 4, 256, 0, OSCAR_META_F32, &tr, false, R, R, false, NULL,
                                               NULL, &tf), OSCAR_OK);   // 128 | D: one head is whole groups
}

// oscar_verify_run with q2_0 on the tiny-llama fixture (D 32, 2 KV heads: one token row of
// 64 < 128, so the fork quantizes it in 32-blocks, each inside one head).
static void test_run_tiny_llama(void ** state) {
    (void) state;
    struct oscar_model * m = NULL;
    if (oscar_model_load("tests/fixtures/models/tiny-llama", &m) != OSCAR_OK) fprintf(stderr, "%s\n", oscar_last_error());
    assert_non_null(m);
    const struct oscar_model_config * c = &m->config;
    enum { NT = 300 };
    int32_t toks[NT];
    for (int i = 0; i < NT; i++) toks[i] = (int32_t) (urand() * c->n_vocab) % c->n_vocab;
    struct oscar_artifact * art;
    assert_int_equal(oscar_artifact_init(c->n_layer, c->n_head, c->n_head_kv, c->head_dim, false, false, false, &art),
                     OSCAR_OK);
    const int32_t D = c->head_dim;
    for (int l = 0; l < c->n_layer; l++) {
        random_orthogonal(art->rot.k + (size_t) l * D * D, D);
        random_orthogonal(art->rot.v + (size_t) l * D * D, D);
        art->rot.k_clip[l] = 0.96f, art->rot.v_clip[l] = 0.92f;
    }
    struct oscar_verify_params p = oscar_verify_default_params();
    p.methods = "bf16,q2_0";
    p.ctx = 128, p.tokens = 256, p.sink = 4, p.recent = 16, p.metric_tokens = 96, p.n_threads = 1;
    struct oscar_verify_report rep;
    enum oscar_status st = oscar_verify_run(m, art, toks, NT, &p, &rep);
    if (st != OSCAR_OK) printf("oscar_verify_run: %s\n", oscar_last_error());
    assert_int_equal(st, OSCAR_OK);
    assert_int_equal(rep.n_methods, 2);
    const struct oscar_verify_method * q = &rep.methods[1];
    printf("tiny-llama: bf16 ppl %.6f, q2_0 ppl %.6f, bpe %.4f\n", rep.methods[0].ppl, q->ppl, q->bpe);
    assert_string_equal(q->name, "q2_0");
    assert_string_equal(q->kv_sim, "cpu");
    assert_true(fabs(q->bpe - (3.0 + 20.0 / 128.0 * 13.0)) < 1e-12);
    assert_true(q->nll_sum != rep.methods[0].nll_sum && q->k_stats.n_rows > 0 && q->v_stats.n_rows > 0);
    for (int32_t l = 0; l < c->n_layer; l++) {
        assert_true(q->drift[l] > 0 && q->layers[l].k_rel_mse > 0 && q->layers[l].v_rel_mse > 0);
        assert_true(q->layers[l].n_rows_int2 > 0 && q->layers[l].n_rows_int2 < q->layers[l].n_rows);
    }
    // the clip is the artifact's oscar.k_clip_ratio for K and V (LLAMA_KV_CLIP_RATIO of the recipe):
    // 0.96 without one; V's ratio and the per-layer tensors do not reach the fork
    const double nll_default = q->nll_sum;
    oscar_verify_report_free(&rep);
    assert_int_equal(oscar_artifact_set_meta(art, "oscar.k_clip_ratio", "0.96"), OSCAR_OK);
    assert_int_equal(oscar_verify_run(m, art, toks, NT, &p, &rep), OSCAR_OK);
    assert_true(rep.methods[1].nll_sum == nll_default);
    oscar_verify_report_free(&rep);
    assert_int_equal(oscar_artifact_set_meta(art, "oscar.k_clip_ratio", "0.80"), OSCAR_OK);
    assert_int_equal(oscar_verify_run(m, art, toks, NT, &p, &rep), OSCAR_OK);
    const double nll_080 = rep.methods[1].nll_sum;
    assert_true(nll_080 != nll_default);
    oscar_verify_report_free(&rep);
    assert_int_equal(oscar_artifact_set_meta(art, "oscar.v_clip_ratio", "0.50"), OSCAR_OK);
    for (int l = 0; l < c->n_layer; l++) art->rot.k_clip[l] = 0.70f, art->rot.v_clip[l] = 0.60f;
    assert_int_equal(oscar_verify_run(m, art, toks, NT, &p, &rep), OSCAR_OK);
    assert_true(rep.methods[1].nll_sum == nll_080);
    oscar_verify_report_free(&rep);
    // no HP buffer (the fork's default): every row of every window is Q2_0
    p.sink = 0, p.recent = 0;
    assert_int_equal(oscar_verify_run(m, art, toks, NT, &p, &rep), OSCAR_OK);
    for (int32_t l = 0; l < c->n_layer; l++)
        assert_int_equal(rep.methods[1].layers[l].n_rows_int2, rep.methods[1].layers[l].n_rows);
    assert_true(rep.methods[1].bpe == 3.0);
    oscar_verify_report_free(&rep);
    // per-head rotations cannot be served by the fork
    struct oscar_artifact * ph;
    assert_int_equal(oscar_artifact_init(c->n_layer, c->n_head, c->n_head_kv, D, true, false, false, &ph), OSCAR_OK);
    assert_int_equal(oscar_verify_run(m, ph, toks, NT, &p, &rep), OSCAR_ERR_INVALID);
    oscar_artifact_free(ph);
    oscar_artifact_free(art);
    oscar_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_transform), cmocka_unit_test(test_row_transform_attn_rot),
        cmocka_unit_test(test_ring_rule),
        cmocka_unit_test(test_bpe_and_shapes), cmocka_unit_test(test_run_tiny_llama),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
