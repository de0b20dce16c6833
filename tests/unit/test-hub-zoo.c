// test-hub-zoo.c - the parsers behind oscar-zoo list and search: an
// oscar.json's metadata (required keys, types, gate values, token counts) and
// one /api/models page (shape and types, the limit). Wrong input must be a
// FORMAT error naming the file or endpoint, never a crash or a partial result.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hub/hub-internal.h"
#include "oscar.h"

static const char good_meta[] =
    "{\"metadata\": {\"oscar.base_model\": \"SmolLM2-135M-Instruct\", "
    "\"oscar.base_model_id\": \"HuggingFaceTB/SmolLM2-135M-Instruct\", \"oscar.architecture\": \"llama\", "
    "\"oscar.source_grouping\": \"kv_head\", \"oscar.calib_tag\": \"seq20000\", \"oscar.calib_tokens\": \"20000\", "
    "\"oscar.gate\": \"fail\"}, \"files\": {}}";

static enum oscar_status parse(const char * text, struct oscar_hub_artifact * a) {
    return osc_artifact_summary_parse(text, strlen(text), "m/t/oscar.json", a);
}

static void free_artifact(struct oscar_hub_artifact * a) {
    struct oscar_hub_artifacts l = { .items = a, .n = 1 };
    a->path = strdup("");
    oscar_hub_artifacts_free(&l); // frees the fields and a itself
}

static void test_artifact_summary(void ** state) {
    (void) state;
    struct oscar_hub_artifact * a = calloc(1, sizeof *a);
    assert_int_equal(parse(good_meta, a), OSCAR_OK);
    assert_null(a->error);
    assert_string_equal(a->base_model, "SmolLM2-135M-Instruct");
    assert_string_equal(a->base_model_id, "HuggingFaceTB/SmolLM2-135M-Instruct");
    assert_string_equal(a->architecture, "llama");
    assert_string_equal(a->grouping, "kv_head");
    assert_string_equal(a->gate, "fail");
    assert_int_equal(a->calib_tokens, 20000);
    // older artifacts: no base_model_id, no gate
    assert_int_equal(parse("{\"metadata\": {\"oscar.base_model\": \"m\", \"oscar.architecture\": \"qwen3\", "
                           "\"oscar.source_grouping\": \"layer\", \"oscar.calib_tokens\": \"0\"}}", a),
                     OSCAR_OK);
    assert_null(a->base_model_id);
    assert_null(a->gate);
    assert_string_equal(a->architecture, "qwen3");
    assert_int_equal(a->auto_layers, 0);
    // --rotation-grouping auto: per-KV-head tensors, 2 of 3 layers with rotations of their own
    assert_int_equal(parse("{\"metadata\": {\"oscar.base_model\": \"m\", \"oscar.architecture\": \"qwen3\", "
                           "\"oscar.source_grouping\": \"kv_head\", \"oscar.calib_tokens\": \"8\", "
                           "\"oscar.grouping_layers\": \"kv_head,layer,kv_head\"}}", a),
                     OSCAR_OK);
    assert_string_equal(a->grouping, "kv_head");
    assert_int_equal(a->auto_layers, 3);
    assert_int_equal(a->auto_head_layers, 2);
    free_artifact(a);
}

static void test_artifact_summary_rejects(void ** state) {
    (void) state;
    static const struct {
        const char * text;
        const char * says; // in the message, after the file name
    } bad[] = {
        { "{\"metadata\": {\"oscar.base_model\": \"x\"", "not valid JSON" },
        { "[]", "no \"metadata\" object" },
        { "{\"metadata\": \"x\"}", "no \"metadata\" object" },
        { "{\"metadata\": {\"oscar.architecture\": \"llama\"}}", "no \"oscar.base_model\"" },
        { "{\"metadata\": {\"oscar.base_model\": 7, \"oscar.architecture\": \"llama\"}}",
          "\"oscar.base_model\" is not a string" },
        { "{\"metadata\": {\"oscar.base_model\": \"m\", \"oscar.architecture\": \"llama\", \"oscar.source_grouping\": "
          "\"layer\", \"oscar.calib_tokens\": \"12k\"}}",
          "not a token count" },
        { "{\"metadata\": {\"oscar.base_model\": \"m\", \"oscar.architecture\": \"llama\", \"oscar.source_grouping\": "
          "\"layer\", \"oscar.calib_tokens\": \"-5\"}}",
          "not a token count" },
        { "{\"metadata\": {\"oscar.base_model\": \"m\", \"oscar.architecture\": \"llama\", \"oscar.source_grouping\": "
          "\"layer\", \"oscar.calib_tokens\": \"5\", \"oscar.gate\": \"maybe\"}}",
          "'maybe', not pass or fail" },
        { "{\"metadata\": {\"oscar.base_model\": \"m\", \"oscar.architecture\": \"llama\", \"oscar.source_grouping\": "
          "\"layer\", \"oscar.calib_tokens\": \"5\", \"oscar.gate\": true}}",
          "\"oscar.gate\" is not a string" },
        { "{\"metadata\": {\"oscar.base_model\": \"m\", \"oscar.architecture\": \"llama\", \"oscar.source_grouping\": "
          "\"kv_head\", \"oscar.calib_tokens\": \"5\", \"oscar.grouping_layers\": 3}}",
          "\"oscar.grouping_layers\" is not a string" },
        { "{\"metadata\": {\"oscar.base_model\": \"m\", \"oscar.architecture\": \"llama\", \"oscar.source_grouping\": "
          "\"kv_head\", \"oscar.calib_tokens\": \"5\", \"oscar.grouping_layers\": \"layer,kv_head,\"}}",
          "word 2 is not layer or kv_head" },
        { "{\"metadata\": {\"oscar.base_model\": \"m\", \"oscar.architecture\": \"llama\", \"oscar.source_grouping\": "
          "\"kv_head\", \"oscar.calib_tokens\": \"5\", \"oscar.grouping_layers\": \"\"}}",
          "word 0 is not layer or kv_head" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct oscar_hub_artifact * a = calloc(1, sizeof *a);
        assert_int_equal(parse(good_meta, a), OSCAR_OK); // filled first: a failure must clear it
        assert_int_equal(parse(bad[i].text, a), OSCAR_ERR_FORMAT);
        assert_non_null(a->error);
        if (strncmp(a->error, "m/t/oscar.json: ", 16) || !strstr(a->error, bad[i].says)) {
            fail_msg("case %zu: '%s' does not say '%s'", i, a->error, bad[i].says);
        }
        assert_string_equal(oscar_last_error(), a->error);
        assert_null(a->base_model);
        assert_null(a->base_model_id);
        assert_null(a->gate);
        assert_int_equal(a->auto_layers, 0);
        free_artifact(a);
    }
}

static enum oscar_status parse_page(const char * text, int limit, struct oscar_hub_models * m) {
    json_error_t e;
    json_t *     j = json_loads(text, 0, &e);
    assert_non_null(j);
    enum oscar_status st = osc_search_parse_page(j, "GET /api/models", limit, m);
    json_decref(j);
    return st;
}

static void test_search_page(void ** state) {
    (void) state;
    struct oscar_hub_models m = { 0 };
    assert_int_equal(parse_page("[{\"id\": \"me/zoo\", \"lastModified\": \"2025-01-02T03:04:05.000Z\", "
                                "\"private\": false, \"tags\": [\"oscar\"]}, {\"_id\": \"x\", \"id\": \"team/r\", "
                                "\"private\": true}]",
                                100, &m),
                     OSCAR_OK);
    assert_int_equal(m.n, 2);
    assert_string_equal(m.items[0].id, "me/zoo");
    assert_string_equal(m.items[0].last_modified, "2025-01-02T03:04:05.000Z");
    assert_false(m.items[0].is_private);
    assert_null(m.items[1].last_modified);
    assert_true(m.items[1].is_private);
    // a second page appends, up to the limit
    assert_int_equal(parse_page("[{\"id\": \"a/b\"}, {\"id\": \"c/d\"}]", 3, &m), OSCAR_OK);
    assert_int_equal(m.n, 3);
    assert_string_equal(m.items[2].id, "a/b");
    oscar_hub_models_free(&m);
    assert_int_equal(m.n, 0);
    assert_int_equal(parse_page("[]", 10, &m), OSCAR_OK);
    assert_int_equal(m.n, 0);
}

static void test_search_page_rejects(void ** state) {
    (void) state;
    static const char * const bad[] = {
        "{\"id\": \"me/zoo\"}",                               // not an array
        "[\"me/zoo\"]",                                       // entries are objects
        "[{\"modelId\": \"me/zoo\"}]",                        // no id
        "[{\"id\": 5}]",                                      // id not a string
        "[{\"id\": \"\"}]",                                   // empty id
        "[{\"id\": \"me/zoo\", \"lastModified\": 17}]",      // wrong type
        "[{\"id\": \"me/zoo\", \"private\": \"no\"}]",       // wrong type
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct oscar_hub_models m = { 0 };
        if (parse_page(bad[i], 10, &m) != OSCAR_ERR_FORMAT) {
            fail_msg("case %zu (%s) accepted", i, bad[i]);
        }
        assert_non_null(strstr(oscar_last_error(), "GET /api/models"));
        oscar_hub_models_free(&m);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_artifact_summary), cmocka_unit_test(test_artifact_summary_rejects),
        cmocka_unit_test(test_search_page),      cmocka_unit_test(test_search_page_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
