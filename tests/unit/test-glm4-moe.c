// test-glm4-moe.c - GLM-4.x MoE (glm4_moe / GGUF glm4moe) config and file handling: Glm4MoeConfig's
// defaults, refusals naming the field and value (scoring_func, topk_method, groups, counts, gating
// function), NextN (MTP) layers after the last layer accepted and not run, in both formats.
// The forward pass against transformers is test-forward.c's test_oracle_glm4_moe.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/hf-config.h"
#include "model/load-internal.h"
#include "model/model.h"
#include "util/fs.h"

#define TEST_TMPDIR_NAME "glm4moe"
#include "test-tmpdir.h"

#define GLM_DIR "tests/fixtures/models/tiny-glm4-moe"
#define GLM_GGUF "tests/fixtures/models/tiny-glm4-moe.gguf"

// A glm4_moe config.json (64 hidden, 4 heads of 16, 4 layers) with extra fields.
static enum oscar_status parse_glm(const char * extra, struct oscar_model_config * c) {
    char json[2048];
    snprintf(json, sizeof json, "{\"model_type\":\"glm4_moe\",\"architectures\":[\"Glm4MoeForCausalLM\"],"
             "\"hidden_size\":64,\"num_hidden_layers\":4,\"num_attention_heads\":4,\"intermediate_size\":96,"
             "\"vocab_size\":100%s%s}", extra[0] ? "," : "", extra);
    memset(c, 0xff, sizeof *c);
    return osc_hf_config_parse(json, strlen(json), "cfg.json", c);
}

// The last error names the file and both strings.
static void assert_error_names(const char * file, const char * a, const char * b) {
    const char * e = oscar_last_error();
    if (!strstr(e, file) || !strstr(e, a) || !strstr(e, b)) fprintf(stderr, "error: %s\n", e);
    assert_non_null(strstr(e, file));
    assert_non_null(strstr(e, a));
    assert_non_null(strstr(e, b));
}

// Absent keys take Glm4MoeConfig's defaults (transformers 5): partial_rotary_factor 0.5, rms_norm_eps
// 1e-5, 128 experts of 1408, top-8, one shared expert, the first layer dense, no groups, norm_topk_prob
// true, routed_scaling_factor 1, no attention bias, no q/k norms.
static void test_config_defaults(void ** state) {
    (void) state;
    struct oscar_model_config c;
    assert_int_equal(parse_glm("", &c), OSCAR_OK);
    assert_int_equal(c.arch, OSCAR_ARCH_GLM4_MOE);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.rope_dim, 8);
    assert_true(c.rms_eps == 1e-5f && c.rope_theta == 10000.0f);
    assert_true(c.n_expert == 128 && c.n_expert_used == 8 && c.n_ff_expert == 1408 && c.n_ff_shared == 1408);
    assert_true(c.expert_gating == OSCAR_GATING_SIGMOID && c.expert_bias && c.shared_ungated && c.moe_step == 1);
    assert_true(c.n_expert_group == 1 && c.n_group_used == 1 && c.expert_norm_topk && c.expert_scale == 1.0f);
    assert_true(c.n_dense_layers == 1 && c.dense_layers[0] == 0 && c.n_layer_nextn == 0);
    assert_true(!c.qkv_bias && !c.qk_norm && !c.tied_embeddings);
    assert_int_equal(osc_model_config_check(&c, "cfg.json"), OSCAR_OK);
    assert_true(!oscar_layer_is_moe(&c, 0) && oscar_layer_is_moe(&c, 1) && oscar_layer_is_moe(&c, 3));
    // the Hub's spelling: everything explicit, partial_rotary_factor and rope_theta at the top level
    assert_int_equal(parse_glm("\"head_dim\":32,\"partial_rotary_factor\":0.5,\"rope_theta\":1000000.0,"
                               "\"attention_bias\":true,\"use_qk_norm\":true,\"n_routed_experts\":16,"
                               "\"num_experts_per_tok\":4,\"moe_intermediate_size\":24,\"n_shared_experts\":2,"
                               "\"first_k_dense_replace\":3,\"n_group\":4,\"topk_group\":2,\"norm_topk_prob\":false,"
                               "\"routed_scaling_factor\":2.5,\"num_nextn_predict_layers\":1,"
                               "\"scoring_func\":\"sigmoid\",\"topk_method\":\"noaux_tc\"", &c), OSCAR_OK);
    assert_true(c.head_dim == 32 && c.rope_dim == 16 && c.rope_theta == 1e6f && c.qkv_bias && c.qk_norm);
    assert_true(c.n_expert == 16 && c.n_expert_used == 4 && c.n_ff_expert == 24 && c.n_ff_shared == 48);
    assert_true(c.n_dense_layers == 3 && c.dense_layers[2] == 2 && oscar_layer_is_moe(&c, 3));
    assert_true(c.n_expert_group == 4 && c.n_group_used == 2 && !c.expert_norm_topk && c.expert_scale == 2.5f);
    assert_int_equal(c.n_layer_nextn, 1);
    assert_int_equal(osc_model_config_check(&c, "cfg.json"), OSCAR_OK);
    // first_k_dense_replace beyond the layers: every layer dense; 0: every layer sparse
    assert_int_equal(parse_glm("\"first_k_dense_replace\":9", &c), OSCAR_OK);
    assert_true(c.n_dense_layers == 4 && !oscar_layer_is_moe(&c, 3));
    assert_int_equal(parse_glm("\"first_k_dense_replace\":0", &c), OSCAR_OK);
    assert_true(c.n_dense_layers == 0 && oscar_layer_is_moe(&c, 0));
}

// Values this does not compute, refused naming the field and the value.
static void test_config_refusals(void ** state) {
    (void) state;
    struct oscar_model_config c;
    assert_int_equal(parse_glm("\"scoring_func\":\"softmax\"", &c), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("cfg.json", "scoring_func \"softmax\"", "(sigmoid is)");
    assert_int_equal(parse_glm("\"topk_method\":\"group_limited_greedy\"", &c), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("cfg.json", "topk_method \"group_limited_greedy\"", "(noaux_tc is)");
    assert_int_equal(parse_glm("\"scoring_func\":3", &c), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("cfg.json", "scoring_func", "not a string");
    assert_int_equal(parse_glm("\"n_routed_experts\":8,\"n_group\":3", &c), OSCAR_ERR_FORMAT);
    assert_error_names("cfg.json", "n_group 3", "n_routed_experts 8");
    assert_int_equal(parse_glm("\"n_routed_experts\":8,\"n_group\":2,\"topk_group\":3", &c), OSCAR_ERR_FORMAT);
    assert_error_names("cfg.json", "topk_group 3", "n_group 2");
    assert_int_equal(parse_glm("\"n_routed_experts\":8,\"num_experts_per_tok\":9", &c), OSCAR_ERR_FORMAT);
    assert_error_names("cfg.json", "num_experts_per_tok 9", "n_routed_experts 8");
    assert_int_equal(parse_glm("\"first_k_dense_replace\":-1", &c), OSCAR_ERR_FORMAT);
    assert_error_names("cfg.json", "\"first_k_dense_replace\"", "integer");
    assert_int_equal(parse_glm("\"n_shared_experts\":1.5", &c), OSCAR_ERR_FORMAT);
    assert_error_names("cfg.json", "\"n_shared_experts\"", "integer");
    assert_int_equal(parse_glm("\"norm_topk_prob\":\"yes\"", &c), OSCAR_ERR_FORMAT);
    assert_error_names("cfg.json", "\"norm_topk_prob\"", "true or false");
    assert_int_equal(parse_glm("\"routed_scaling_factor\":-1", &c), OSCAR_ERR_FORMAT);
    assert_error_names("cfg.json", "\"routed_scaling_factor\"", "positive");
    assert_int_equal(parse_glm("\"partial_rotary_factor\":0.1", &c), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("cfg.json", "partial_rotary_factor 0.1", "glm4_moe");
    assert_int_equal(parse_glm("\"hidden_act\":\"gelu\"", &c), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("cfg.json", "hidden_act", "gelu");
    // groups of one expert parse but cannot be ranked by their best two: the model check refuses them
    assert_int_equal(parse_glm("\"n_routed_experts\":8,\"num_experts_per_tok\":1,\"n_group\":8", &c), OSCAR_OK);
    assert_int_equal(osc_model_config_check(&c, "cfg.json"), OSCAR_ERR_FORMAT);
    assert_error_names("cfg.json", "n_group 8", "groups of >= 2");
    // more experts per token than the competing groups hold
    assert_int_equal(parse_glm("\"n_routed_experts\":8,\"num_experts_per_tok\":5,\"n_group\":2", &c), OSCAR_OK);
    assert_int_equal(osc_model_config_check(&c, "cfg.json"), OSCAR_ERR_FORMAT);
    assert_error_names("cfg.json", "topk_group 1", "top-5");
}

// A copy of the fixture directory under tmpdir/name with config.json's `from` replaced by `to`.
static char * hf_copy(const char * name, const char * from, const char * to) {
    char * dir = osc_path_join(tmpdir, name), cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp " GLM_DIR "/model.safetensors '%s/'", dir, dir);
    assert_int_equal(system(cmd), 0);
    char * text = NULL;
    size_t n = 0;
    assert_int_equal(osc_read_file(GLM_DIR "/config.json", 1 << 20, &text, &n), OSCAR_OK);
    char * at = strstr(text, from), out[4096];
    assert_non_null(at);
    snprintf(out, sizeof out, "%.*s%s%s", (int) (at - text), text, to, at + strlen(from));
    char * cfg = osc_path_join(dir, "config.json");
    assert_int_equal(osc_write_file_atomic(cfg, out, strlen(out)), OSCAR_OK);
    free(cfg);
    free(text);
    return dir;
}

// A copy of the fixture GGUF under tmpdir/name with the u32 key `key` set to v.
static char * gguf_copy(const char * name, const char * key, uint32_t v) {
    char * data = NULL;
    size_t n = 0;
    assert_int_equal(osc_read_file(GLM_GGUF, 4 << 20, &data, &n), OSCAR_OK);
    char * k = memmem(data, n, key, strlen(key));
    assert_non_null(k);
    uint32_t type;
    memcpy(&type, k + strlen(key), 4);
    assert_int_equal(type, 4); // GGUF uint32
    memcpy(k + strlen(key) + 4, &v, 4);
    char * path = osc_path_join(tmpdir, name);
    assert_int_equal(osc_write_file_atomic(path, data, n), OSCAR_OK);
    free(data);
    return path;
}

// The fixture read with its last layer as a NextN layer: 3 layers run, the 4th's tensors accepted. Without
// the NextN count the same weights are refused as more layers than declared.
static void test_nextn_layers(void ** state) {
    (void) state;
    struct oscar_model * m = NULL;
    char * dir = hf_copy("nextn", "\"num_nextn_predict_layers\": 0", "\"num_nextn_predict_layers\": 1");
    char cmd[1024]; // and num_hidden_layers 3
    snprintf(cmd, sizeof cmd, "sed -i 's/\"num_hidden_layers\": 4/\"num_hidden_layers\": 3/' '%s/config.json'", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(oscar_model_load(dir, &m), OSCAR_OK);
    assert_true(m->config.n_layer == 3 && m->config.n_layer_nextn == 1);
    oscar_model_free(m);
    m = NULL;
    free(dir);
    dir = hf_copy("three", "\"num_hidden_layers\": 4", "\"num_hidden_layers\": 3");
    assert_int_equal(oscar_model_load(dir, &m), OSCAR_ERR_FORMAT);
    assert_error_names("config.json", "model.layers.3.", "num_hidden_layers is 3");
    assert_null(m);
    free(dir);
    // GGUF: block_count counts the NextN layers (llama.cpp's converter), the model is the ones before
    char * g = gguf_copy("nextn.gguf", "glm4moe.nextn_predict_layers", 1);
    assert_int_equal(oscar_model_load(g, &m), OSCAR_OK);
    assert_true(m->config.n_layer == 3 && m->config.n_layer_nextn == 1 && m->config.n_dense_layers == 1);
    oscar_model_free(m);
    m = NULL;
    free(g);
    g = gguf_copy("nextn4.gguf", "glm4moe.nextn_predict_layers", 4);
    assert_int_equal(oscar_model_load(g, &m), OSCAR_ERR_FORMAT);
    assert_error_names("nextn4.gguf", "glm4moe.nextn_predict_layers = 4", "out of range");
    free(g);
}

// GGUF keys this does not compute, refused naming the key and value.
static void test_gguf_refusals(void ** state) {
    (void) state;
    struct oscar_model * m = NULL;
    char * g = gguf_copy("softmax.gguf", "glm4moe.expert_gating_func", 1);
    assert_int_equal(oscar_model_load(g, &m), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("softmax.gguf", "glm4moe.expert_gating_func = 1 (softmax)", "(2, sigmoid, is)");
    assert_null(m);
    free(g);
    g = gguf_copy("groups.gguf", "glm4moe.expert_group_count", 3);
    assert_int_equal(oscar_model_load(g, &m), OSCAR_ERR_FORMAT);
    assert_error_names("groups.gguf", "n_group 3", "8 experts");
    free(g);
    g = gguf_copy("rot.gguf", "glm4moe.rope.dimension_count", 15);
    assert_int_equal(oscar_model_load(g, &m), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("rot.gguf", "glm4moe.rope.dimension_count = 15", "partial rotary");
    free(g);
    // the CUDA forward's MoE layers are checked on a GPU (tests/gpu/test-forward-gpu.c, gpu-moe-check.sh)
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_defaults),
        cmocka_unit_test(test_config_refusals),
        cmocka_unit_test(test_nextn_layers),
        cmocka_unit_test(test_gguf_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
