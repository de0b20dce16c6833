// hf-config.c - Hugging Face config.json -> struct oscar_model_config (see hf-config.h).
//
// Defaults follow the transformers (5.x) config classes of each model type
// (num_key_value_heads = heads, head_dim = hidden / heads, rope_theta 10000,
// tie_word_embeddings false). RoPE settings come from transformers 5's
// "rope_parameters" or the older "rope_scaling" (+ "rope_theta",
// "partial_rotary_factor" at the top level). Refuses hidden_act other than
// silu, o_proj/MLP biases (llama attention_bias / mlp_bias, qwen3
// attention_bias), RoPE types other than default / linear / llama3 / yarn and
// partial rotary outside phi3 and glm4_moe, naming the field and its value.
//
// Sliding windows, as transformers 5 applies them: mistral and phi3 use
// "sliding_window" in every layer (mistral's default is 4096 when the key is
// absent, phi3's none); qwen2/qwen3 only with use_sliding_window, in the
// layers layer_types marks "sliding_attention" (default: layers >=
// max_window_layers, 28); llama ignores the key (LlamaAttention has no window);
// qwen2_moe / qwen3_moe with use_sliding_window are refused.
//
// qwen2_moe / qwen3_moe: num_experts (or num_local_experts), num_experts_per_tok, moe_intermediate_size,
// shared_expert_intermediate_size (qwen2_moe), norm_topk_prob (default false),
// decoder_sparse_step and mlp_only_layers (the dense layers), qwen2_moe's qkv_bias
// (default true) and qwen3_moe's q/k norms. mixtral: num_local_experts, num_experts_per_tok,
// experts of intermediate_size, top-k always renormalised, sliding_window as phi3 (default none).
//
// gemma3_text (Gemma3ForCausalLM) and gemma3 (Gemma3ForConditionalGeneration: the text model's config is
// its text_config) with Gemma3TextConfig's defaults (parse_gemma3): layer_types or sliding_window_pattern,
// RoPE per layer type from transformers 5's rope_parameters {full_attention, sliding_attention} or the
// Hub's rope_theta / rope_local_base_freq / rope_scaling, query_pre_attn_scalar. Refused by name:
// soft-capping (Gemma 2's), hidden_activation other than gelu_pytorch_tanh, bidirectional attention,
// and the other Gemma families (gemma, gemma2, gemma3n, ...).
//
// glm4_moe: see parse_glm4_moe (Glm4MoeConfig's defaults; partial rotary 0.5, rms_norm_eps 1e-5).
#include "formats/hf-config.h"

#include <jansson.h>
#include <math.h>
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
    {"phi3", "Phi3ForCausalLM", OSCAR_ARCH_PHI3, 4096},
    {"qwen2_moe", "Qwen2MoeForCausalLM", OSCAR_ARCH_QWEN2_MOE, 32768},
    {"qwen3_moe", "Qwen3MoeForCausalLM", OSCAR_ARCH_QWEN3_MOE, 32768},
    {"mixtral", "MixtralForCausalLM", OSCAR_ARCH_MIXTRAL, 32768},
    {"gemma3_text", "Gemma3ForCausalLM", OSCAR_ARCH_GEMMA3, 131072},
    {"gemma3", "Gemma3ForConditionalGeneration", OSCAR_ARCH_GEMMA3, 131072},
    {"glm4_moe", "Glm4MoeForCausalLM", OSCAR_ARCH_GLM4_MOE, 131072},
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
    // The other Gemma families parse like Gemma 3 but compute differently (Gemma 2's soft-capping, Gemma's
    // single RoPE base, Gemma 3n's per-layer inputs): refuse them by family so nobody reads "not supported"
    // as a typo in model_type.
    if (*ti < 0 && strncmp(mt, "gemma", 5) == 0) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: model_type \"%.64s\" (Gemma) is not supported: of the Gemma "
                         "families only Gemma 3 (gemma3_text, gemma3) is; the others are different models", name, mt);
    }
    if (*ti < 0) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: model_type \"%.64s\" is not supported (llama, mistral, qwen2, "
                         "qwen3, phi3, qwen2_moe, qwen3_moe, mixtral, glm4_moe, gemma3_text, gemma3 are)", name, mt);
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
    if (arch != OSCAR_ARCH_QWEN2 && arch != OSCAR_ARCH_QWEN2_MOE && arch != OSCAR_ARCH_GLM4_MOE &&
        get_flag(root, "attention_bias")) { // glm4_moe's is q/k/v only (its o_proj has none)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: attention_bias = true is not supported", name);
    }
    if (get_flag(root, "mlp_bias")) return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: mlp_bias = true is not supported", name);
    return OSCAR_OK;
}

// The RoPE parameter object: transformers 5's rope_parameters, else the older rope_scaling; NULL if neither.
static json_t * rope_object(json_t * root, const char ** field) {
    json_t * rp = json_object_get(root, "rope_parameters"), * rs = json_object_get(root, "rope_scaling");
    *field = rp && !json_is_null(rp) ? "rope_parameters" : "rope_scaling";
    return rp && !json_is_null(rp) ? rp : rs && !json_is_null(rs) ? rs : NULL;
}

// A required positive number of the RoPE object, named "<field>.<key>" in errors.
static enum oscar_status rope_num(const char * name, json_t * o, const char * field, const char * key, double * out) {
    json_t * v = json_object_get(o, key);
    if (!json_is_number(v) || !(json_number_value(v) > 0)) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: %s.%s must be a positive number", name, field, key);
    }
    *out = json_number_value(v);
    return OSCAR_OK;
}

// The object's `key` as a number >= 0 (absent or null: def), named "<field>.<key>" in errors.
static enum oscar_status rope_opt(const char * name, json_t * o, const char * field, const char * key, double def,
                                  bool positive, double * out) {
    json_t * v = json_object_get(o, key);
    *out = def;
    if (!v || json_is_null(v)) return OSCAR_OK;
    if (!json_is_number(v) || !(json_number_value(v) >= 0) || (positive && !(json_number_value(v) > 0)))
        return osc_error(OSCAR_ERR_FORMAT, "%s: %s.%s must be a %s number", name, field, key,
                         positive ? "positive" : "non-negative");
    *out = json_number_value(v);
    return OSCAR_OK;
}

// transformers' get_mscale: YaRN's attention scaling for a context `scale` times the original.
static double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0; }

// YaRN as transformers 5 reads it (_compute_yarn_parameters, standardize_rope_params): factor is required
// (null: max_position_embeddings / original); original_max_position_embeddings at the top level wins, then
// the object's, then max_position_embeddings; beta_fast / beta_slow default 32 / 1; truncate defaults to
// true; the attention factor multiplying cos/sin is attention_factor when given, else
// get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are non-zero, else
// get_mscale(factor) = 0.1 ln(factor) + 1.
static enum oscar_status parse_yarn(const char * name, json_t * root, json_t * o, const char * field,
                                    struct oscar_model_config * c) {
    json_t * top = json_object_get(root, "original_max_position_embeddings");
    enum oscar_status s = get_int(name, top && !json_is_null(top) ? root : o, "original_max_position_embeddings",
                                  c->n_ctx_train, &c->rope_orig_ctx);
    if (s != OSCAR_OK) return s;
    json_t * fv = json_object_get(o, "factor");
    double factor, af, fast, slow, ms, ms_all;
    if (!fv) return osc_error(OSCAR_ERR_FORMAT, "%s: %s.factor is required for rope_type yarn", name, field);
    if (json_is_null(fv)) factor = (double)c->n_ctx_train / (double)c->rope_orig_ctx;
    else if ((s = rope_num(name, o, field, "factor", &factor)) != OSCAR_OK) return s;
    s = rope_opt(name, o, field, "attention_factor", 0.0, true, &af);
    if (s == OSCAR_OK) s = rope_opt(name, o, field, "beta_fast", 32.0, true, &fast);
    if (s == OSCAR_OK) s = rope_opt(name, o, field, "beta_slow", 1.0, true, &slow);
    if (s == OSCAR_OK) s = rope_opt(name, o, field, "mscale", 0.0, false, &ms);
    if (s == OSCAR_OK) s = rope_opt(name, o, field, "mscale_all_dim", 0.0, false, &ms_all);
    if (s != OSCAR_OK) return s;
    json_t * tr = json_object_get(o, "truncate");
    if (tr && !json_is_null(tr) && !json_is_boolean(tr))
        return osc_error(OSCAR_ERR_FORMAT, "%s: %s.truncate must be true or false", name, field);
    if (af == 0.0) af = ms != 0.0 && ms_all != 0.0 ? yarn_mscale(factor, ms) / yarn_mscale(factor, ms_all)
                                                   : yarn_mscale(factor, 1.0);
    c->rope_scaling = OSCAR_ROPE_YARN, c->rope_factor = (float)factor, c->rope_attn_factor = (float)af;
    c->rope_beta_fast = (float)fast, c->rope_beta_slow = (float)slow, c->rope_no_truncate = json_is_false(tr);
    return OSCAR_OK;
}

// rope_theta, rope type (default, linear, llama3, yarn) and its parameters, partial rotary (phi3).
static enum oscar_status parse_rope(const char * name, json_t * root, struct oscar_model_config * c) {
    const char * field;
    json_t * o = rope_object(root, &field);
    if (o && !json_is_object(o)) return osc_error(OSCAR_ERR_FORMAT, "%s: %s is not an object", name, field);
    double theta, x;
    enum oscar_status s = get_num(name, root, "rope_theta", 10000.0, &theta);
    if (s == OSCAR_OK && o) s = get_num(name, o, "rope_theta", theta, &theta);
    if (s != OSCAR_OK) return s;
    c->rope_theta = (float) theta;
    json_t * tv = o ? json_object_get(o, "rope_type") : NULL;
    if (o && !tv) tv = json_object_get(o, "type");
    const char * t = tv && !json_is_null(tv) ? json_string_value(tv) : "default";
    if (!t) return osc_error(OSCAR_ERR_FORMAT, "%s: %s.rope_type is not a string", name, field);
    if (c->arch == OSCAR_ARCH_PHI3 && strcmp(t, "default") != 0) { // transformers' Phi3 takes default or longrope
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: %s.rope_type \"%.32s\" is not supported for phi3 (default is)",
                         name, field, t);
    }
    if (strcmp(t, "linear") == 0) {
        c->rope_scaling = OSCAR_ROPE_LINEAR;
        s = rope_num(name, o, field, "factor", &x);
        c->rope_factor = (float) x;
    } else if (strcmp(t, "llama3") == 0) {
        double lo, hi;
        c->rope_scaling = OSCAR_ROPE_LLAMA3;
        s = rope_num(name, o, field, "factor", &x);
        if (s == OSCAR_OK) s = rope_num(name, o, field, "low_freq_factor", &lo);
        if (s == OSCAR_OK) s = rope_num(name, o, field, "high_freq_factor", &hi);
        if (s != OSCAR_OK) return s;
        if (!(hi > lo)) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: %s.high_freq_factor %g must exceed low_freq_factor %g", name,
                             field, hi, lo);
        }
        c->rope_factor = (float) x, c->rope_low_freq_factor = (float) lo, c->rope_high_freq_factor = (float) hi;
        // transformers: the top-level original_max_position_embeddings (phi3 style) wins, then the
        // object's, then max_position_embeddings
        json_t * top = json_object_get(root, "original_max_position_embeddings");
        s = get_int(name, top && !json_is_null(top) ? root : o, "original_max_position_embeddings", c->n_ctx_train,
                    &c->rope_orig_ctx);
    } else if (strcmp(t, "yarn") == 0) {
        s = parse_yarn(name, root, o, field, c);
    } else if (strcmp(t, "default") != 0) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: %s.rope_type \"%.32s\" is not supported (default, linear, "
                         "llama3, yarn are)", name, field, t);
    }
    if (s != OSCAR_OK) return s;
    // partial rotary: transformers 5 keeps it in the RoPE object, older configs at the top level
    double prf; // Glm4MoeConfig's default is 0.5
    s = get_num(name, root, "partial_rotary_factor", c->arch == OSCAR_ARCH_GLM4_MOE ? 0.5 : 1.0, &prf);
    if (s == OSCAR_OK && o) s = get_num(name, o, "partial_rotary_factor", prf, &prf);
    if (s != OSCAR_OK) return s;
    if (prf != 1.0) {
        // int(head_dim * partial_rotary_factor), as transformers; a factor outside (0, 1] is refused before
        // the cast (a huge one would overflow int32)
        const bool in_range = prf > 0.0 && prf < 1.0;
        const int32_t dim = in_range ? (int32_t) (c->head_dim * prf) : 0;
        if ((c->arch != OSCAR_ARCH_PHI3 && c->arch != OSCAR_ARCH_GLM4_MOE) || !in_range || dim < 2 || dim % 2 != 0) {
            return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: partial_rotary_factor %g is not supported for %s (phi3 "
                             "and glm4_moe with an even number of rotated dims are)", name, prf,
                             oscar_arch_name(c->arch));
        }
        c->rope_dim = dim;
    }
    return OSCAR_OK;
}

// "sliding_window" as a window size: absent -> def, null/false -> 0, else a positive integer.
static enum oscar_status window_size(const char * name, json_t * root, int32_t def, int32_t * out) {
    json_t * sw = json_object_get(root, "sliding_window");
    if (!sw) *out = def;
    else if (json_is_null(sw) || json_is_false(sw)) *out = 0;
    else return get_int(name, root, "sliding_window", 0, out);
    return OSCAR_OK;
}

// The first sliding layer of a qwen2/qwen3 config: layer_types when given (it must be full layers
// then sliding ones: other patterns are refused), else max_window_layers.
static enum oscar_status qwen_first_sliding(const char * name, json_t * root, const struct oscar_model_config * c,
                                            int32_t * first) {
    json_t * lt = json_object_get(root, "layer_types");
    if (!lt || json_is_null(lt)) {
        int32_t mwl = 28;
        json_t * v = json_object_get(root, "max_window_layers");
        if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= INT32_MAX) {
            mwl = (int32_t) json_integer_value(v);
        } else if (v && !json_is_null(v)) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: \"max_window_layers\" must be a non-negative integer", name);
        }
        *first = mwl;
        return OSCAR_OK;
    }
    if (!json_is_array(lt) || json_array_size(lt) != (size_t) c->n_layer) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: \"layer_types\" must be a list of num_hidden_layers (%d) strings",
                         name, c->n_layer);
    }
    *first = c->n_layer;
    for (int32_t i = 0; i < c->n_layer; i++) {
        const char * t = json_string_value(json_array_get(lt, (size_t) i));
        bool sliding = t && strcmp(t, "sliding_attention") == 0;
        if (!sliding && !(t && strcmp(t, "full_attention") == 0)) {
            return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: layer_types[%d] \"%.32s\" is not supported (full_attention, "
                             "sliding_attention are)", name, i, t ? t : "?");
        }
        if (sliding && *first == c->n_layer) *first = i;
        if (!sliding && *first < c->n_layer) {
            return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: layer_types[%d] is full_attention after sliding_attention "
                             "layers (only full layers followed by sliding ones are supported)", name, i);
        }
    }
    return OSCAR_OK;
}

static enum oscar_status parse_window(const char * name, json_t * root, struct oscar_model_config * c) {
    enum oscar_status s = OSCAR_OK;
    if (c->arch == OSCAR_ARCH_LLAMA && strcmp(json_string_value(json_object_get(root, "model_type")), "mistral") == 0) {
        s = window_size(name, root, 4096, &c->sliding_window);
    } else if (c->arch == OSCAR_ARCH_PHI3 || c->arch == OSCAR_ARCH_MIXTRAL) {
        s = window_size(name, root, 0, &c->sliding_window);
    } else if ((c->arch == OSCAR_ARCH_QWEN2_MOE || c->arch == OSCAR_ARCH_QWEN3_MOE) &&
               get_flag(root, "use_sliding_window")) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: use_sliding_window = true is not supported for %s", name,
                         json_string_value(json_object_get(root, "model_type")));
    } else if (c->arch == OSCAR_ARCH_QWEN2 || c->arch == OSCAR_ARCH_QWEN3) {
        int32_t w = 0, first = 0;
        if (get_flag(root, "use_sliding_window")) s = window_size(name, root, 4096, &w);
        if (s == OSCAR_OK) s = qwen_first_sliding(name, root, c, &first);
        if (s == OSCAR_OK && w == 0 && first < c->n_layer && json_is_array(json_object_get(root, "layer_types"))) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: layer_types has sliding_attention layers but no sliding window is "
                             "enabled (use_sliding_window, sliding_window)", name);
        }
        if (s == OSCAR_OK && first < c->n_layer) c->sliding_window = w, c->swa_first_layer = first;
    }
    return s;
}

// The experts of qwen2_moe / qwen3_moe, with transformers' defaults; the router is softmax
// top-k (both families have no other scoring).
static enum oscar_status parse_moe(const char * name, json_t * root, struct oscar_model_config * c) {
    const bool q2 = c->arch == OSCAR_ARCH_QWEN2_MOE;
    if (c->arch == OSCAR_ARCH_MIXTRAL) { // transformers' Mixtral: experts of intermediate_size, always renormalised
        enum oscar_status s = get_int(name, root, "num_local_experts", 8, &c->n_expert);
        if (s == OSCAR_OK) s = get_int(name, root, "num_experts_per_tok", 2, &c->n_expert_used);
        if (s == OSCAR_OK && c->n_expert_used > c->n_expert) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: num_experts_per_tok %d exceeds num_local_experts %d", name,
                             c->n_expert_used, c->n_expert);
        }
        c->n_ff_expert = c->n_ff, c->expert_norm_topk = true, c->moe_step = 1;
        return s;
    }
    // transformers 5 writes num_experts as num_local_experts (its attribute map); the hub's files say num_experts
    const char * ek = json_object_get(root, "num_experts") ? "num_experts" : "num_local_experts";
    enum oscar_status s = get_int(name, root, ek, q2 ? 60 : 128, &c->n_expert);
    int32_t other = c->n_expert;
    if (s == OSCAR_OK && json_object_get(root, "num_experts")) s = get_int(name, root, "num_local_experts", c->n_expert, &other);
    if (s == OSCAR_OK && other != c->n_expert) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: num_experts %d and num_local_experts %d disagree", name, c->n_expert,
                         other);
    }
    if (s == OSCAR_OK) s = get_int(name, root, "num_experts_per_tok", q2 ? 4 : 8, &c->n_expert_used);
    if (s == OSCAR_OK) s = get_int(name, root, "moe_intermediate_size", q2 ? 1408 : 768, &c->n_ff_expert);
    if (s == OSCAR_OK && q2) s = get_int(name, root, "shared_expert_intermediate_size", 5632, &c->n_ff_shared);
    if (s == OSCAR_OK) s = get_int(name, root, "decoder_sparse_step", 1, &c->moe_step);
    if (s != OSCAR_OK) return s;
    if (c->n_expert_used > c->n_expert) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: num_experts_per_tok %d exceeds num_experts %d", name,
                         c->n_expert_used, c->n_expert);
    }
    json_t * nt = json_object_get(root, "norm_topk_prob");
    if (nt && !json_is_null(nt) && !json_is_boolean(nt))
        return osc_error(OSCAR_ERR_FORMAT, "%s: \"norm_topk_prob\" must be true or false", name);
    c->expert_norm_topk = json_is_true(nt);
    json_t * ml = json_object_get(root, "mlp_only_layers");
    if (ml && !json_is_null(ml)) {
        if (!json_is_array(ml) || json_array_size(ml) > OSCAR_MAX_DENSE_LAYERS) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: \"mlp_only_layers\" must be a list of at most %d layer indices",
                             name, OSCAR_MAX_DENSE_LAYERS);
        }
        for (size_t i = 0; i < json_array_size(ml); i++) {
            json_t * v = json_array_get(ml, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= c->n_layer) {
                return osc_error(OSCAR_ERR_FORMAT, "%s: mlp_only_layers[%zu] is not a layer index below "
                                 "num_hidden_layers %d", name, i, c->n_layer);
            }
            c->dense_layers[c->n_dense_layers++] = (int32_t) json_integer_value(v);
        }
    }
    return OSCAR_OK;
}

// ---- Gemma 3 ------------------------------------------------------------------------------------

// Layer i of layer_types (a list already checked) or of the pattern: sliding?
static bool gemma3_sliding(json_t * lt, int32_t pattern, int32_t i) {
    if (lt) return strcmp(json_string_value(json_array_get(lt, (size_t) i)), "sliding_attention") == 0;
    return (i + 1) % pattern != 0;
}

// The layer types as swa_first_layer + swa_pattern: layer_types when given, else sliding iff
// (i + 1) % sliding_window_pattern != 0 (default 6). A list that is no such pattern is refused.
static enum oscar_status gemma3_layers(const char * name, json_t * t, struct oscar_model_config * c) {
    json_t * lt = json_object_get(t, "layer_types");
    int32_t pattern = 6;
    if (lt && json_is_null(lt)) lt = NULL;
    if (lt) {
        if (!json_is_array(lt) || json_array_size(lt) != (size_t) c->n_layer)
            return osc_error(OSCAR_ERR_FORMAT, "%s: \"layer_types\" must be a list of num_hidden_layers (%d) strings",
                             name, c->n_layer);
        for (int32_t i = 0; i < c->n_layer; i++) {
            const char * ty = json_string_value(json_array_get(lt, (size_t) i));
            if (!ty || (strcmp(ty, "sliding_attention") != 0 && strcmp(ty, "full_attention") != 0))
                return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: layer_types[%d] \"%.32s\" is not supported "
                                 "(full_attention, sliding_attention are)", name, i, ty ? ty : "?");
        }
    } else {
        enum oscar_status s = get_int(name, t, "sliding_window_pattern", 6, &pattern);
        if (s != OSCAR_OK) return s;
    }
    int32_t n_sliding = 0;
    for (int32_t i = 0; i < c->n_layer; i++) n_sliding += gemma3_sliding(lt, pattern, i);
    c->swa_first_layer = n_sliding == 0 ? c->n_layer : 0;
    c->swa_pattern = 0; // all sliding, or none
    if (n_sliding == 0 || n_sliding == c->n_layer) return OSCAR_OK;
    for (int32_t p = 2; p <= c->n_layer; p++) {
        bool same = true;
        for (int32_t i = 0; same && i < c->n_layer; i++) same = gemma3_sliding(lt, pattern, i) == ((i + 1) % p != 0);
        if (same) {
            c->swa_pattern = p;
            return OSCAR_OK;
        }
    }
    return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: layer_types is not supported: only every p-th layer full "
                     "(full_attention at i with (i + 1) %% p == 0, sliding_attention elsewhere) is", name);
}

// theta (default def) and linear factor of one RoPE object (NULL: def, unscaled); `field` names it.
static enum oscar_status gemma3_rope_obj(const char * name, json_t * o, const char * field, double def,
                                         bool allow_linear, struct oscar_model_config * c, double * theta) {
    if (o && !json_is_object(o)) return osc_error(OSCAR_ERR_FORMAT, "%s: %s is not an object", name, field);
    *theta = def;
    if (!o) return OSCAR_OK;
    enum oscar_status s = get_num(name, o, "rope_theta", def, theta);
    if (s != OSCAR_OK) return s;
    json_t * tv = json_object_get(o, "rope_type");
    if (!tv) tv = json_object_get(o, "type");
    const char * ty = tv && !json_is_null(tv) ? json_string_value(tv) : "default";
    if (!ty) return osc_error(OSCAR_ERR_FORMAT, "%s: %s.rope_type is not a string", name, field);
    if (strcmp(ty, "default") == 0) return OSCAR_OK;
    if (strcmp(ty, "linear") != 0 || !allow_linear)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: %s.rope_type \"%.32s\" is not supported for gemma3 (%s)", name,
                         field, ty, allow_linear ? "default, linear are" : "default is");
    double x;
    s = rope_num(name, o, field, "factor", &x);
    if (s == OSCAR_OK) c->rope_scaling = OSCAR_ROPE_LINEAR, c->rope_factor = (float) x;
    return s;
}

// The global layers' RoPE (rope_theta, default 1e6, with its scaling) and the sliding layers' base
// (default 1e4, unscaled), from rope_parameters[type] (transformers 5) or the Hub's keys.
static enum oscar_status gemma3_rope(const char * name, json_t * t, struct oscar_model_config * c) {
    json_t * rp = json_object_get(t, "rope_parameters");
    double full_def = 1e6, local_def = 1e4, full, local;
    enum oscar_status s = get_num(name, t, "rope_theta", 1e6, &full_def);
    if (s == OSCAR_OK) s = get_num(name, t, "rope_local_base_freq", 1e4, &local_def);
    if (s != OSCAR_OK) return s;
    if (json_is_object(rp) && json_object_get(rp, "full_attention")) {
        s = gemma3_rope_obj(name, json_object_get(rp, "full_attention"), "rope_parameters.full_attention", full_def,
                            true, c, &full);
        if (s == OSCAR_OK)
            s = gemma3_rope_obj(name, json_object_get(rp, "sliding_attention"), "rope_parameters.sliding_attention",
                                local_def, false, c, &local);
    } else {
        json_t * rs = json_object_get(t, "rope_scaling");
        s = gemma3_rope_obj(name, rs && !json_is_null(rs) ? rs : NULL, "rope_scaling", full_def, true, c, &full);
        local = local_def;
    }
    if (s != OSCAR_OK) return s;
    c->rope_theta = (float) full, c->rope_theta_swa = (float) local;
    return OSCAR_OK;
}

// A Gemma3TextConfig (the text_config of a gemma3 config), with its defaults for absent fields.
static enum oscar_status parse_gemma3(const char * name, json_t * t, struct oscar_model_config * c) {
    const char * mt = json_string_value(json_object_get(t, "model_type"));
    if (json_object_get(t, "model_type") && (!mt || strcmp(mt, "gemma3_text") != 0))
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: text_config.model_type \"%.64s\" is not supported (gemma3_text "
                         "is)", name, mt ? mt : "?");
    json_t * act = json_object_get(t, "hidden_activation");
    if (act && !json_is_null(act) && (!json_is_string(act) || strcmp(json_string_value(act), "gelu_pytorch_tanh") != 0))
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: hidden_activation \"%.32s\" is not supported for gemma3 "
                         "(gelu_pytorch_tanh is)", name, json_is_string(act) ? json_string_value(act) : "?");
    static const char * refused[] = {"attn_logit_softcapping", "final_logit_softcapping"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        json_t * v = json_object_get(t, refused[i]);
        if (v && !json_is_null(v))
            return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: %s is set: soft-capping (Gemma 2) is not supported", name,
                             refused[i]);
    }
    if (get_flag(t, "use_bidirectional_attention"))
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: use_bidirectional_attention = true is not supported", name);
    if (get_flag(t, "attention_bias")) return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: attention_bias = true is not "
                                                        "supported", name);
    c->arch = OSCAR_ARCH_GEMMA3;
    enum oscar_status s = get_int(name, t, "hidden_size", 2304, &c->n_embd);
    if (s == OSCAR_OK) s = get_int(name, t, "num_hidden_layers", 26, &c->n_layer);
    if (s == OSCAR_OK) s = get_int(name, t, "num_attention_heads", 8, &c->n_head);
    if (s == OSCAR_OK) s = get_int(name, t, "num_key_value_heads", 4, &c->n_head_kv);
    if (s == OSCAR_OK) s = get_int(name, t, "intermediate_size", 9216, &c->n_ff);
    if (s == OSCAR_OK) s = get_int(name, t, "vocab_size", 262208, &c->n_vocab);
    if (s == OSCAR_OK) s = get_int(name, t, "head_dim", 256, &c->head_dim);
    if (s == OSCAR_OK) s = get_int(name, t, "max_position_embeddings", 131072, &c->n_ctx_train);
    double eps, qpas;
    if (s == OSCAR_OK) s = get_num(name, t, "rms_norm_eps", 1e-6, &eps);
    if (s == OSCAR_OK) s = get_num(name, t, "query_pre_attn_scalar", 256, &qpas);
    if (s != OSCAR_OK) return s;
    if (c->n_head % c->n_head_kv != 0)
        return osc_error(OSCAR_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                         name, c->n_head, c->n_head_kv);
    if (c->head_dim % 2 != 0) return osc_error(OSCAR_ERR_FORMAT, "%s: head_dim %d is odd", name, c->head_dim);
    s = gemma3_layers(name, t, c);
    if (s == OSCAR_OK) s = gemma3_rope(name, t, c);
    if (s == OSCAR_OK) s = window_size(name, t, 4096, &c->sliding_window);
    if (s != OSCAR_OK) return s;
    if (c->sliding_window == 0 && c->swa_first_layer < c->n_layer)
        return osc_error(OSCAR_ERR_FORMAT, "%s: sliding_window is null but layers are sliding_attention", name);
    c->rms_eps = (float) eps;
    c->attn_scale = (float) pow(qpas, -0.5); // transformers: query_pre_attn_scalar ** -0.5
    json_t * tie = json_object_get(t, "tie_word_embeddings");
    c->tied_embeddings = !json_is_false(tie); // default true
    c->qk_norm = true, c->post_norms = true, c->embed_scale = true;
    c->norm_offset = 1.0f, c->act = OSCAR_ACT_GELU_TANH;
    return OSCAR_OK;
}

// ---- GLM-4.x MoE ---------------------------------------------------------------------------------

// A count field: absent/null -> def; else an integer in [0, max].
static enum oscar_status get_count(const char * name, json_t * root, const char * key, int32_t def, int32_t max,
                                   int32_t * out) {
    json_t * v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return OSCAR_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max)
        return osc_error(OSCAR_ERR_FORMAT, "%s: \"%s\" must be an integer in [0, %d]", name, key, max);
    *out = (int32_t) json_integer_value(v);
    return OSCAR_OK;
}

// A string field that, when present, must be `want` (the only rule implemented), named in the refusal.
static enum oscar_status want_string(const char * name, json_t * root, const char * key, const char * want) {
    json_t * v = json_object_get(root, key);
    if (!v || json_is_null(v) || (json_is_string(v) && strcmp(json_string_value(v), want) == 0)) return OSCAR_OK;
    return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: %s \"%.32s\" is not supported for glm4_moe (%s is)", name, key,
                     json_is_string(v) ? json_string_value(v) : "(not a string)", want);
}

// glm4_moe with Glm4MoeConfig's defaults: q/k/v bias iff attention_bias, q/k norms iff use_qk_norm;
// n_routed_experts (128) of moe_intermediate_size (1408), num_experts_per_tok (8), n_shared_experts (1)
// ungated shared experts as one MLP of their summed width, the first first_k_dense_replace (1)
// layers dense; sigmoid scores with e_score_correction_bias for the choice, n_group (1) groups of
// which topk_group (1) compete, norm_topk_prob (true), routed_scaling_factor (1); the
// num_nextn_predict_layers (0) MTP layers after the last are not run. DeepSeek-V3's scoring_func
// and topk_method keys, if a config carries them, must name what this computes.
static enum oscar_status parse_glm4_moe(const char * name, json_t * root, struct oscar_model_config * c) {
    int32_t n_shared = 1, n_dense = 1;
    c->qkv_bias = get_flag(root, "attention_bias");
    c->qk_norm = get_flag(root, "use_qk_norm");
    c->expert_gating = OSCAR_GATING_SIGMOID, c->expert_bias = true, c->shared_ungated = true, c->moe_step = 1;
    enum oscar_status s = want_string(name, root, "scoring_func", "sigmoid");
    if (s == OSCAR_OK) s = want_string(name, root, "topk_method", "noaux_tc");
    if (s == OSCAR_OK) s = get_int(name, root, "n_routed_experts", 128, &c->n_expert);
    if (s == OSCAR_OK) s = get_int(name, root, "num_experts_per_tok", 8, &c->n_expert_used);
    if (s == OSCAR_OK) s = get_int(name, root, "moe_intermediate_size", 1408, &c->n_ff_expert);
    if (s == OSCAR_OK) s = get_count(name, root, "n_shared_experts", 1, 64, &n_shared);
    if (s == OSCAR_OK) s = get_count(name, root, "first_k_dense_replace", 1, INT32_MAX, &n_dense);
    if (s == OSCAR_OK) s = get_int(name, root, "n_group", 1, &c->n_expert_group);
    if (s == OSCAR_OK) s = get_int(name, root, "topk_group", 1, &c->n_group_used);
    if (s == OSCAR_OK) s = get_count(name, root, "num_nextn_predict_layers", 0, 64, &c->n_layer_nextn);
    double scale = 1.0;
    if (s == OSCAR_OK) s = get_num(name, root, "routed_scaling_factor", 1.0, &scale);
    if (s != OSCAR_OK) return s;
    c->expert_scale = (float) scale;
    json_t * nt = json_object_get(root, "norm_topk_prob");
    if (nt && !json_is_null(nt) && !json_is_boolean(nt))
        return osc_error(OSCAR_ERR_FORMAT, "%s: \"norm_topk_prob\" must be true or false", name);
    c->expert_norm_topk = !nt || json_is_null(nt) || json_is_true(nt);
    if (c->n_expert_used > c->n_expert)
        return osc_error(OSCAR_ERR_FORMAT, "%s: num_experts_per_tok %d exceeds n_routed_experts %d", name,
                         c->n_expert_used, c->n_expert);
    if (c->n_expert % c->n_expert_group != 0 || c->n_group_used > c->n_expert_group)
        return osc_error(OSCAR_ERR_FORMAT, "%s: n_group %d does not divide n_routed_experts %d, or topk_group %d "
                         "exceeds it", name, c->n_expert_group, c->n_expert, c->n_group_used);
    if ((int64_t) c->n_ff_expert * n_shared > INT32_MAX)
        return osc_error(OSCAR_ERR_FORMAT, "%s: n_shared_experts %d x moe_intermediate_size %d is too large", name,
                         n_shared, c->n_ff_expert);
    c->n_ff_shared = c->n_ff_expert * n_shared;
    n_dense = n_dense < c->n_layer ? n_dense : c->n_layer; // layers >= first_k_dense_replace are sparse
    if (n_dense > OSCAR_MAX_DENSE_LAYERS)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: first_k_dense_replace %d is more than %d dense layers", name,
                         n_dense, OSCAR_MAX_DENSE_LAYERS);
    for (int32_t l = 0; l < n_dense; l++) c->dense_layers[c->n_dense_layers++] = l;
    return OSCAR_OK;
}

static enum oscar_status parse_root(const char * name, json_t * root, struct oscar_model_config * c) {
    int ti = -1;
    enum oscar_status s = check_type(name, root, &ti);
    if (s != OSCAR_OK) return s;
    c->arch = TYPES[ti].arch;
    if (c->arch == OSCAR_ARCH_GEMMA3) {
        json_t * text = root;
        if (strcmp(TYPES[ti].model_type, "gemma3") == 0) { // Gemma3ForConditionalGeneration: the text model's
            text = json_object_get(root, "text_config");
            if (!json_is_object(text))
                return osc_error(OSCAR_ERR_FORMAT, "%s: model_type gemma3 needs a \"text_config\" object", name);
        }
        s = parse_gemma3(name, text, c);
        const char * nm = json_string_value(json_object_get(root, "_name_or_path"));
        snprintf(c->name, sizeof c->name, "%s", nm ? nm : "");
        return s;
    }
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
    double eps;
    s = parse_rope(name, root, c);
    if (s == OSCAR_OK) s = parse_window(name, root, c);
    if (s == OSCAR_OK) s = get_num(name, root, "rms_norm_eps", c->arch == OSCAR_ARCH_GLM4_MOE ? 1e-5 : 1e-6, &eps);
    if (s != OSCAR_OK) return s;
    c->rms_eps = (float) eps;
    c->tied_embeddings = get_flag(root, "tie_word_embeddings");
    c->qkv_bias = c->arch == OSCAR_ARCH_QWEN2;
    c->qk_norm = c->arch == OSCAR_ARCH_QWEN3 || c->arch == OSCAR_ARCH_QWEN3_MOE;
    if (c->arch == OSCAR_ARCH_QWEN2_MOE) { // transformers' Qwen2MoeConfig.qkv_bias, default true
        json_t * qb = json_object_get(root, "qkv_bias");
        c->qkv_bias = !qb || json_is_null(qb) || json_is_true(qb);
    }
    if (c->arch == OSCAR_ARCH_QWEN2_MOE || c->arch == OSCAR_ARCH_QWEN3_MOE || c->arch == OSCAR_ARCH_MIXTRAL)
        s = parse_moe(name, root, c);
    if (c->arch == OSCAR_ARCH_GLM4_MOE) s = parse_glm4_moe(name, root, c);
    if (s != OSCAR_OK) return s;
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
