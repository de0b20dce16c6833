// test-eval-device.c - verify/eval-device.h on the "cpu" backend (the path the
// calibration gate and clip search take without a GPU): equal to lib/verify's
// own functions on a random layer, and the refusals (shape mismatch, too many
// candidates, clip arrays in a candidate method, "cuda" without a usable GPU).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../gpu/eval-compare.h"

static void test_cpu_equals_lib_verify(void ** state) {
    (void) state;
    const struct ec_case cs = {"cpu", 64, 6, 2, 192, 2, {70, 33, 0}, OSCAR_TIERS_STATIC, 4, 16, 0, OSCAR_META_BF16,
                               OSCAR_CLIP_SORT, 0.0f, 0, 0};
    double rel = 1.0;
    int det = 0;
    assert_int_equal(ec_run("cpu", &cs, 3, &rel, &det), OSCAR_OK);
    assert_true(rel == 0.0);   // the same code on the same inputs
    assert_true(det);
    // with Gemma 3's score scale (query_pre_attn_scalar 24 at head_dim 64) through the shape and the layer
    const struct ec_case gs = {"cpu", 64, 4, 2, 128, 2, {40, 21, 0}, OSCAR_TIERS_STATIC, 4, 8, 0, OSCAR_META_F32,
                               OSCAR_CLIP_SORT, 0.2041241452f, 0, 0};
    assert_int_equal(ec_run("cpu", &gs, 5, &rel, &det), OSCAR_OK);
    assert_true(rel == 0.0 && det);
    // a sliding layer (window 12 < both sequences) through the layer input
    const struct ec_case ws = {"cpu", 64, 4, 2, 128, 2, {40, 21, 0}, OSCAR_TIERS_STATIC, 4, 8, 0, OSCAR_META_F32,
                               OSCAR_CLIP_SORT, 0.2041241452f, 12, 0};
    assert_int_equal(ec_run("cpu", &ws, 5, &rel, &det), OSCAR_OK);
    assert_true(rel == 0.0 && det);
    // keys offset per channel, the OSCAR methods centred (OptR's key mean)
    const struct ec_case cc = {"cpu", 64, 4, 2, 128, 2, {40, 30, 0}, OSCAR_TIERS_STATIC, 4, 8, 0, OSCAR_META_F32,
                               OSCAR_CLIP_SORT, 0.0f, 0, 1};
    assert_int_equal(ec_run("cpu", &cc, 7, &rel, &det), OSCAR_OK);
    assert_true(rel == 0.0 && det);
}

static void test_refusals(void ** state) {
    (void) state;
    struct oscar_eval_shape shape = {.n_head = 4, .n_head_kv = 2, .head_dim = 32, .n_embd = 64, .max_tokens = 16,
                                     .max_len = 16, .max_cand = 2};
    struct oscar_eval_dev * ev = NULL;
    float q[16 * 4 * 32] = {0}, kv[16 * 2 * 32] = {0}, wo[64 * 128] = {0};
    int32_t ss[2] = { 0, 16 };
    struct oscar_layer_input in = {.layer = 0, .n_tokens = 16, .n_seq = 1, .seq_start = ss, .q = q, .k = kv, .v = kv,
                                   .wo = wo, .n_head = 4, .n_head_kv = 2, .head_dim = 32, .n_embd = 64};
    assert_int_equal(oscar_eval_dev_open("cpu", &shape, 1, &ev), OSCAR_OK);
    assert_string_equal(oscar_eval_dev_backend(ev), "cpu");
    struct oscar_layer_input bad = in;
    bad.n_head_kv = 1;
    assert_int_equal(oscar_eval_dev_layer(ev, &bad), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "does not fit"));
    bad = in;
    bad.n_tokens = 17;   // more rows than the evaluator holds
    assert_int_equal(oscar_eval_dev_layer(ev, &bad), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "up to 16"));
    assert_int_equal(oscar_eval_dev_layer(ev, &in), OSCAR_OK);
    struct oscar_tiering tr = {.mode = OSCAR_TIERS_STATIC, .n_sink = 2, .n_recent = 4, .n_flush = 8, .block = 1};
    struct oscar_kv_transform tf;
    float clip[2] = { 0.9f, 0.9f };
    assert_int_equal(oscar_kv_transform_preset("oscar-searched", 1, 2, 32, 0, OSCAR_META_F32, &tr, false, q, q, true,
                                               clip, clip, &tf),
                     OSCAR_OK);
    double g[3] = { 1.0, 0.9, 0.8 }, kn[8], kd[2], vn[8], vd;
    assert_int_equal(oscar_eval_dev_candidates(ev, &tf, 3, g, false, kn, kd, vn, &vd), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "at most 2"));
    assert_int_equal(oscar_eval_dev_candidates(ev, &tf, 2, g, false, kn, kd, vn, &vd), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "carries its own clips"));
    oscar_eval_dev_free(ev);
    // "cuda": without a CUDA build or device, a clear refusal; with one, a working evaluator.
    enum oscar_status st = oscar_eval_dev_open("cuda", &shape, 1, &ev);
    if (st != OSCAR_OK) {
        assert_int_equal(st, OSCAR_ERR_UNSUPPORTED);
        assert_true(strstr(oscar_last_error(), "CUDA") || strstr(oscar_last_error(), "cuda"));
        assert_null(ev);
    } else {
        oscar_eval_dev_free(ev);
    }
    assert_int_equal(oscar_eval_dev_open("tpu", &shape, 1, &ev), OSCAR_ERR_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_equals_lib_verify),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
