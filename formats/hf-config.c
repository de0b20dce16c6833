// hf-config.c - Hugging Face config.json -> struct oscar_model_config (see hf-config.h).
//
// Defaults follow the transformers config classes of each model type
// (num_key_value_heads = heads, head_dim = hidden / heads, rope_theta 10000,
// tie_word_embeddings false). rope_theta is also read from transformers 5's
// "rope_parameters". Refuses hidden_act other than silu, o_proj/MLP biases
// (llama attention_bias / mlp_bias, qwen3 attention_bias), RoPE scaling and
// enabled sliding windows.
#include "formats/hf-config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fs.h"

static const struct {
    const char *    model_type;
    const char *    architecture;
    enum oscar_arch arch;
    int32_t         default_ctx;
} TYPES[] = {
    {"llama", "LlamaForCausalLM", OSCAR_ARCH_LLAMA, 2048},
    {"mistral", "MistralForCausalLM", OSCAR_ARCH_LLAMA, 131072},
    {"qwen2", "Qwen2ForCausalLM", OSCAR_ARCH_QWEN2, 32768},
    {"qwen3", "Qwen3ForCausalLM", OSCAR_ARCH_QWEN3, 32768},
};

// Integer field: absent/null -> def (def < 0: required); must be in [1, INT32_MAX].
static enum oscar_status get_int(const char * name, json_t * root, const char * key, int64_t def, int32_t * out) {
    json_t * v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (def < 0) return osc_error(OSCAR_ERR_FORMAT, "%s: required field \"%s\" is missing", name, key);
        *out = (int32_t) def;
        return OSCAR_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > INT32_MAX) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: \"%s\" must be a positive integer", name, key);
    }
    *out = (int32_t) json_integer_value(v);
    return OSCAR_OK;
}

static enum oscar_status get_num(const char * name, json_t * obj, const char * key, double def, double * out) {
    json_t * v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return OSCAR_OK;
    }
    if (!json_is_number(v) || !(json_number_value(v) > 0)) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: \"%s\" must be a positive number", name, key);
    }
    *out = json_number_value(v);
    return OSCAR_OK;
}

static bool get_flag(json_t * root, const char * key) {
    return json_is_true(json_object_get(root, key));
}

static enum oscar_status check_type(const char * name, json_t * root, int * ti) {
    const char * mt = json_string_value(json_object_get(root, "model_type"));
    if (!mt) return osc_error(OSCAR_ERR_FORMAT, "%s: \"model_type\" is missing or not a string", name);
    *ti = -1;
    for (int i = 0; i < (int) (sizeof TYPES / sizeof TYPES[0]); i++) {
        if (strcmp(mt, TYPES[i].model_type) == 0) *ti = i;
    }
    if (*ti < 0) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: model_type \"%.64s\" is not supported (llama, mistral, qwen2, "
                         "qwen3 are)", name, mt);
    }
    json_t * archs = json_object_get(root, "architectures");
    if (archs && !json_is_null(archs)) {
        const char * a = json_string_value(json_array_get(archs, 0));
        if (!json_is_array(archs) || !a) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: \"architectures\" is not a list of strings", name);
        }
        if (strcmp(a, TYPES[*ti].architecture) != 0) {
            return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: architecture \"%.64s\" is not supported for model_type %s "
                             "(expected %s)", name, a, mt, TYPES[*ti].architecture);
        }
    }
    return OSCAR_OK;
}

static enum oscar_status check_features(const char * name, json_t * root, enum oscar_arch arch) {
    json_t * act = json_object_get(root, "hidden_act");
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "silu") != 0)) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: hidden_act \"%.32s\" is not supported (silu is)", name,
                         json_is_string(act) ? json_string_value(act) : "?");
    }
    if (arch != OSCAR_ARCH_QWEN2 && get_flag(root, "attention_bias")) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: attention_bias = true is not supported", name);
    }
    if (get_flag(root, "mlp_bias")) return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: mlp_bias = true is not supported", name);
    json_t * rs = json_object_get(root, "rope_scaling");
    json_t * rp = json_object_get(root, "rope_parameters");
    json_t * objs[2] = {rs, rp};
    for (int k = 0; k < 2; k++) {
        json_t * o = objs[k];
        if (!o || json_is_null(o)) continue;
        const char * t = json_string_value(json_object_get(o, "rope_type"));
        if (!t) t = json_string_value(json_object_get(o, "type"));
        if (!json_is_object(o) || !t || strcmp(t, "default") != 0) {
            return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: %s of type \"%.32s\" is not supported (only null or "
                             "\"default\")", name, k ? "rope_parameters" : "rope_scaling", t ? t : "?");
        }
    }
    json_t * sw = json_object_get(root, "sliding_window");
    bool sw_set = sw && !json_is_null(sw) && !json_is_false(sw);
    bool enabled = arch == OSCAR_ARCH_LLAMA ? sw_set : (sw_set && get_flag(root, "use_sliding_window"));
    if (enabled) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: sliding-window attention (sliding_window = %lld) is not "
                         "supported", name, (long long) json_integer_value(sw));
    }
    return OSCAR_OK;
}

static enum oscar_status parse_root(const char * name, json_t * root, struct oscar_model_config * c) {
    int ti = -1;
    enum oscar_status s = check_type(name, root, &ti);
    if (s != OSCAR_OK) return s;
    c->arch = TYPES[ti].arch;
    s = check_features(name, root, c->arch);
    if (s == OSCAR_OK) s = get_int(name, root, "hidden_size", -1, &c->n_embd);
    if (s == OSCAR_OK) s = get_int(name, root, "num_hidden_layers", -1, &c->n_layer);
    if (s == OSCAR_OK) s = get_int(name, root, "num_attention_heads", -1, &c->n_head);
    if (s == OSCAR_OK) s = get_int(name, root, "num_key_value_heads", c->n_head, &c->n_head_kv);
    if (s == OSCAR_OK) s = get_int(name, root, "intermediate_size", -1, &c->n_ff);
    if (s == OSCAR_OK) s = get_int(name, root, "vocab_size", -1, &c->n_vocab);
    if (s == OSCAR_OK) s = get_int(name, root, "max_position_embeddings", TYPES[ti].default_ctx, &c->n_ctx_train);
    if (s != OSCAR_OK) return s;
    if (c->n_head % c->n_head_kv != 0) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                         name, c->n_head, c->n_head_kv);
    }
    json_t * hd = json_object_get(root, "head_dim");
    if ((!hd || json_is_null(hd)) && c->n_embd % c->n_head != 0) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: hidden_size %d is not a multiple of num_attention_heads %d and "
                         "head_dim is not given", name, c->n_embd, c->n_head);
    }
    s = get_int(name, root, "head_dim", c->n_embd / c->n_head, &c->head_dim);
    if (s != OSCAR_OK) return s;
    if (c->head_dim % 2 != 0) return osc_error(OSCAR_ERR_FORMAT, "%s: head_dim %d is odd", name, c->head_dim);
    double theta, eps;
    json_t * rp = json_object_get(root, "rope_parameters");
    s = get_num(name, root, "rope_theta", 10000.0, &theta);
    if (s == OSCAR_OK && json_is_object(rp)) s = get_num(name, rp, "rope_theta", theta, &theta);
    if (s == OSCAR_OK) s = get_num(name, root, "rms_norm_eps", 1e-6, &eps);
    if (s != OSCAR_OK) return s;
    c->rope_theta = (float) theta;
    c->rms_eps = (float) eps;
    c->tied_embeddings = get_flag(root, "tie_word_embeddings");
    c->qkv_bias = c->arch == OSCAR_ARCH_QWEN2;
    c->qk_norm = c->arch == OSCAR_ARCH_QWEN3;
    const char * nm = json_string_value(json_object_get(root, "_name_or_path"));
    snprintf(c->name, sizeof c->name, "%s", nm ? nm : "");
    return OSCAR_OK;
}

enum oscar_status osc_hf_config_parse(const char * json, size_t len, const char * name,
                                      struct oscar_model_config * out) {
    memset(out, 0, sizeof *out);
    json_error_t err;
    json_t * root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
    enum oscar_status s;
    if (!root || !json_is_object(root)) {
        s = osc_error(OSCAR_ERR_FORMAT, "%s: bad JSON: %s (line %d)", name, root ? "not an object" : err.text,
                      err.line);
    } else {
        s = parse_root(name, root, out);
    }
    json_decref(root);
    return s;
}

enum oscar_status osc_hf_config_load(const char * path, struct oscar_model_config * out) {
    char * text = NULL;
    size_t len = 0;
    enum oscar_status s = osc_require_regular(path);
    if (s == OSCAR_OK) s = osc_read_file(path, 16u << 20, &text, &len);
    if (s == OSCAR_OK) s = osc_hf_config_parse(text, len, path, out);
    free(text);
    return s;
}
