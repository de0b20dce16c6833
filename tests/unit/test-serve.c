// test-serve.c - formats/oscar-serve.c: what each engine target refuses (with the reason), the
// recipe's variables and notes, and shell quoting (checked by running the quoted text through
// /bin/sh, an independent parser).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/oscar-serve.h"
#include "util/target.h"

static struct oscar_artifact * artifact(const char * arch, bool per_head, int32_t hkv, int32_t d) {
    struct oscar_artifact * a = NULL;
    assert_int_equal(oscar_artifact_init(2, 4, hkv, d, per_head, per_head, false, &a), OSCAR_OK);
    char g[16];
    snprintf(g, sizeof g, "%d", (int) d);
    const char * kv[][2] = {{"oscar.architecture", arch}, {"oscar.sink", "32"}, {"oscar.recent", "128"},
                            {"oscar.group_size", g}, {"oscar.scale_dtype", "float16"},
                            {"oscar.k_clip_ratio", "0.94"}, {"oscar.v_clip_ratio", "0.90"},
                            {"oscar.clip_mode", "searched"}, {"oscar.target", "sglang"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        assert_int_equal(oscar_artifact_set_meta(a, kv[i][0], kv[i][1]), OSCAR_OK);
    return a;
}

static const struct oscar_target_profile * T(enum oscar_target t) { return oscar_target_get(t); }

static void refused(enum oscar_status st, const char * needle) {
    assert_int_equal(st, OSCAR_ERR_UNSUPPORTED);
    if (!strstr(oscar_last_error(), needle)) fail_msg("'%s' lacks '%s'", oscar_last_error(), needle);
}

static const char * env_of(const struct oscar_serve_recipe * r, const char * name) {
    for (int32_t i = 0; i < r->n_env; i++)
        if (!strcmp(r->env[i].name, name)) return r->env[i].value;
    return NULL;
}

static void test_checks(void ** state) {
    (void) state;
    struct oscar_artifact * a = artifact("llama", false, 2, 64);
    struct oscar_serve_gguf smol = {.base_arch = "llama"}, q3 = {.base_arch = "qwen3"}, none = {0};
    assert_int_equal(oscar_serve_check(a, T(OSCAR_TARGET_SGLANG), NULL), OSCAR_OK);
    assert_int_equal(oscar_serve_check(a, T(OSCAR_TARGET_OSCAR), &none), OSCAR_OK);
    refused(oscar_serve_check(a, T(OSCAR_TARGET_LLAMACPP), &smol), "for a llama model");
    assert_int_equal(oscar_artifact_set_meta(a, "oscar.sink", "30"), OSCAR_OK);
    refused(oscar_serve_check(a, T(OSCAR_TARGET_SGLANG), NULL), "multiples of 8");
    assert_int_equal(oscar_artifact_set_meta(a, "oscar.sink", "32"), OSCAR_OK);
    assert_int_equal(oscar_artifact_set_meta(a, "oscar.group_size", "48"), OSCAR_OK);
    refused(oscar_serve_check(a, T(OSCAR_TARGET_SGLANG), NULL), "group 48 does not divide head_dim 64");
    oscar_artifact_free(a);

    a = artifact("qwen3", false, 2, 64);
    assert_int_equal(oscar_serve_check(a, T(OSCAR_TARGET_LLAMACPP), &q3), OSCAR_OK);
    refused(oscar_serve_check(a, T(OSCAR_TARGET_LLAMACPP), &smol), "--base is a llama GGUF");
    refused(oscar_serve_check(a, T(OSCAR_TARGET_LLAMACPP), &none), "pass --base MODEL.gguf");
    oscar_artifact_free(a);

    // Gemma 3: the SGLang fork's Triton backend drops its INT2 cache for sliding-window models
    a = artifact("gemma3", false, 2, 64);
    refused(oscar_serve_check(a, T(OSCAR_TARGET_SGLANG), NULL), "for a gemma3 model, and the SGLang OSCAR fork: "
            "its Triton backend");
    refused(oscar_serve_check(a, T(OSCAR_TARGET_LLAMACPP), &q3), "no OSCAR engine serves its rotations");
    assert_int_equal(oscar_serve_check(a, T(OSCAR_TARGET_OSCAR), NULL), OSCAR_OK);
    oscar_artifact_free(a);

    a = artifact("qwen3", true, 2, 64);
    refused(oscar_serve_check(a, T(OSCAR_TARGET_SGLANG), NULL),
            "--target oscar: k_rotation_perhead.pt, format_version 2");
    refused(oscar_serve_check(a, T(OSCAR_TARGET_LLAMACPP), &q3), "per-KV-head rotations [2,64,64]");
    assert_int_equal(oscar_serve_check(a, T(OSCAR_TARGET_OSCAR), NULL), OSCAR_OK);
    oscar_artifact_free(a);

    // a key mean: llama.cpp has no tensor for it (refused); the SGLang fork loads the rest (a note)
    a = artifact("qwen3", false, 2, 64);
    a->rot.k_mean = calloc(2 * 2 * 64, sizeof(float));
    assert_non_null(a->rot.k_mean);
    refused(oscar_serve_check(a, T(OSCAR_TARGET_LLAMACPP), &q3), "centres keys on k_mean and the OSCAR llama.cpp "
            "fork reads no key-mean tensor");
    assert_int_equal(oscar_serve_check(a, T(OSCAR_TARGET_SGLANG), NULL), OSCAR_OK);
    struct oscar_serve_files f = {.k_pt = "/r/k.pt", .v_pt = "/r/v.pt"};
    struct oscar_serve_recipe r;
    assert_int_equal(oscar_serve_recipe(a, T(OSCAR_TARGET_SGLANG), &f, &r), OSCAR_OK);
    assert_int_equal(r.n_notes, 1);
    assert_non_null(strstr(r.notes[0], "k_mean_decode.pt, which only the OptR SGLang engine reads"));
    assert_non_null(strstr(r.notes[0], "the SGLang OSCAR fork does not, and serves uncentred keys"));
    assert_null(env_of(&r, "SGLANG_OSCAR_K_MEAN_PATH")); // a variable that fork does not read
    oscar_artifact_free(a);

    a = artifact("qwen3", false, 1, 48); // 48 values per token: not whole Q2_0 blocks
    refused(oscar_serve_check(a, T(OSCAR_TARGET_LLAMACPP), &q3), "Q2_0 blocks of 32");
    oscar_artifact_free(a);
}

static void test_recipes(void ** state) {
    (void) state;
    struct oscar_artifact * a = artifact("qwen3", false, 2, 64);
    struct oscar_serve_files f = {.k_pt = "/r/k.pt", .v_pt = "/r/v.pt", .gguf = "/m/q.gguf"};
    struct oscar_serve_recipe r;
    assert_int_equal(oscar_serve_recipe(a, T(OSCAR_TARGET_SGLANG), &f, &r), OSCAR_OK);
    assert_string_equal(env_of(&r, "SGLANG_MIXED_KV_PREFIX_TOKENS"), "32");
    assert_string_equal(env_of(&r, "SGLANG_MIXED_KV_RECENT_TOKENS"), "128");
    assert_string_equal(env_of(&r, "SGLANG_MIXED_KV_SCALE_DTYPE"), "float16");
    assert_string_equal(env_of(&r, "SGLANG_OSCAR_K_CLIP_RATIO"), "0.94");
    assert_string_equal(env_of(&r, "SGLANG_OSCAR_V_CLIP_RATIO"), "0.90");
    assert_string_equal(env_of(&r, "SGLANG_OSCAR_ABSORB_V_ROTATION"), "1"); // qwen3 folds R_V into qkv_proj
    assert_string_equal(env_of(&r, "SGLANG_OSCAR_K_ROTATION_PATH"), "/r/k.pt");
    assert_non_null(strstr(r.command, "--kv-cache-dtype int2 --kv-cache-quant-group-size 64"));
    assert_int_equal(r.n_notes, 0); // calibrated for sglang: nothing differs
    // the same artifact on llama.cpp: one clip (K's), and notes for the V clip, the quantizer, the target
    assert_int_equal(oscar_serve_recipe(a, T(OSCAR_TARGET_LLAMACPP), &f, &r), OSCAR_OK);
    assert_string_equal(env_of(&r, "LLAMA_KV_CLIP_RATIO"), "0.94");
    assert_string_equal(env_of(&r, "LLAMA_KV_NO_HADAMARD"), "1");
    assert_string_equal(env_of(&r, "LLAMA_ATTN_ROT_DISABLE"), "1"); // no second (upstream) Hadamard
    assert_string_equal(env_of(&r, "LLAMA_KV_HP_SINK"), "32");
    assert_null(env_of(&r, "SGLANG_OSCAR_K_CLIP_RATIO"));
    assert_int_equal(r.n_notes, 3);
    assert_non_null(strstr(r.notes[0], "V's 0.90 is not"));
    assert_non_null(strstr(r.command, "-m /m/q.gguf --cache-type-k q2_0 --cache-type-v q2_0 -fa on"));
    assert_int_equal(oscar_serve_recipe(a, T(OSCAR_TARGET_OSCAR), &f, &r), OSCAR_ERR_INVALID);
    // a llama artifact: V rotated in the pool, not absorbed; per-layer clips noted for sglang
    oscar_artifact_free(a);
    a = artifact("llama", false, 2, 64);
    assert_int_equal(oscar_artifact_set_meta(a, "oscar.target", "oscar"), OSCAR_OK);
    assert_int_equal(oscar_serve_recipe(a, T(OSCAR_TARGET_SGLANG), &f, &r), OSCAR_OK);
    assert_string_equal(env_of(&r, "SGLANG_OSCAR_ABSORB_V_ROTATION"), "0");
    assert_int_equal(r.n_notes, 1);
    assert_non_null(strstr(r.notes[0], "recalibrate with --target sglang"));
    oscar_artifact_free(a);
}

// The quoted text read back by /bin/sh must be the original bytes.
static void sh_round_trip(const char * s) {
    char q[512], cmd[1200];
    assert_true(oscar_serve_shell_quote(s, q, sizeof q));
    snprintf(cmd, sizeof cmd, "printf '%%s' %s", q);
    FILE * p = popen(cmd, "r");
    assert_non_null(p);
    char out[512] = {0};
    size_t n = fread(out, 1, sizeof out - 1, p);
    assert_int_equal(pclose(p), 0);
    out[n] = '\0';
    assert_string_equal(out, s);
}

static void test_shell_quote(void ** state) {
    (void) state;
    char q[64];
    assert_true(oscar_serve_shell_quote("/a/b-c_d.pt", q, sizeof q));
    assert_string_equal(q, "/a/b-c_d.pt");
    assert_true(oscar_serve_shell_quote("it's", q, sizeof q));
    assert_string_equal(q, "'it'\\''s'");
    assert_true(oscar_serve_shell_quote("", q, sizeof q));
    assert_string_equal(q, "''");
    assert_false(oscar_serve_shell_quote("a b c d e f", q, 6));
    const char * cases[] = {"/tmp/rot dir/k.pt", "a'b''c", "$HOME `id` \"x\" \\n", "semi;colon&amp|pipe", "*?[x]~"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) sh_round_trip(cases[i]);
}

static void test_text(void ** state) {
    (void) state;
    struct oscar_artifact * a = artifact("qwen3", false, 2, 64);
    struct oscar_serve_files f = {.k_pt = "/r/k k.pt", .v_pt = "/r/v.pt"};
    struct oscar_serve_recipe r;
    char * text = NULL;
    assert_int_equal(oscar_serve_recipe(a, T(OSCAR_TARGET_SGLANG), &f, &r), OSCAR_OK);
    assert_int_equal(oscar_serve_text(&r, "line one\nline two", &text), OSCAR_OK);
    assert_non_null(strstr(text, "# line one\n# line two\nexport SGLANG_ENABLE_MIXED_KV_WINDOWS=1\n"));
    assert_non_null(strstr(text, "\nexport SGLANG_OSCAR_K_ROTATION_PATH='/r/k k.pt'\n"));
    assert_non_null(strstr(text, "\n: \"${MODEL:?set MODEL to"));
    assert_non_null(strstr(text, "\npython -m sglang.launch_server --model-path \"$MODEL\" "));
    free(text);
    assert_int_equal(oscar_artifact_set_meta(a, "oscar.base_model_id", "Qwen/Qwen3-8B"), OSCAR_OK);
    assert_int_equal(oscar_serve_recipe(a, T(OSCAR_TARGET_SGLANG), &f, &r), OSCAR_OK);
    assert_string_equal(r.model_line, "export MODEL=\"${MODEL:-Qwen/Qwen3-8B}\"");
    oscar_artifact_free(a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checks),
        cmocka_unit_test(test_recipes),
        cmocka_unit_test(test_shell_quote),
        cmocka_unit_test(test_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
