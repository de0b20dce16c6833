// tiny-safetensors.h - TEST-ONLY reader of the committed tiny HF fixture models (config.json +
// one F32 model.safetensors) into a struct oscar_model, used by test-forward until the real loader
// (oscar_model_load, branch `formats`) is merged. It handles only what the fixtures contain and is
// no substitute for the loader: no other dtypes, no sharding, minimal validation.
#ifndef OSCAR_TESTS_TINY_SAFETENSORS_H
#define OSCAR_TESTS_TINY_SAFETENSORS_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/fs.h"

struct tiny_model {
    struct oscar_model          m;
    struct oscar_layer_weights  layers[16];
    char *                      blob; // the whole safetensors file
    size_t                      size;
    json_t *                    header;
};

static float * tiny_tensor(struct tiny_model * t, const char * name, size_t n_elems) {
    json_t * e = json_object_get(t->header, name);
    if (!e) return NULL;
    json_t * off = json_object_get(e, "data_offsets");
    const char * dt = json_string_value(json_object_get(e, "dtype"));
    if (!dt || strcmp(dt, "F32") != 0) return NULL;
    size_t a = (size_t)json_integer_value(json_array_get(off, 0)), b = (size_t)json_integer_value(json_array_get(off, 1));
    uint64_t hlen;
    memcpy(&hlen, t->blob, 8);
    if (b - a != n_elems * sizeof(float) || 8 + hlen + b > t->size) return NULL;
    return (float *)(void *)(t->blob + 8 + hlen + a);
}

static int cfg_int(json_t * cfg, const char * key, int dflt) {
    json_t * v = json_object_get(cfg, key);
    return v ? (int)json_integer_value(v) : dflt;
}

static double cfg_real(json_t * cfg, const char * key, double dflt) {
    json_t * v = json_object_get(cfg, key);
    return v ? json_number_value(v) : dflt;
}

static void tiny_free(struct tiny_model * t) {
    if (!t) return;
    if (t->header) json_decref(t->header);
    free(t->blob);
    free(t);
}

static struct tiny_model * tiny_load(const char * dir) {
    char path[1024];
    struct tiny_model * t = calloc(1, sizeof *t);
    json_error_t err;
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t * cfg = json_load_file(path, 0, &err);
    if (!t || !cfg) goto fail;
    struct oscar_model_config * c = &t->m.config;
    const char * mt = json_string_value(json_object_get(cfg, "model_type"));
    c->arch = !strcmp(mt, "qwen3") ? OSCAR_ARCH_QWEN3 : !strcmp(mt, "qwen2") ? OSCAR_ARCH_QWEN2 : OSCAR_ARCH_LLAMA;
    c->n_layer   = cfg_int(cfg, "num_hidden_layers", 0);
    c->n_embd    = cfg_int(cfg, "hidden_size", 0);
    c->n_head    = cfg_int(cfg, "num_attention_heads", 0);
    c->n_head_kv = cfg_int(cfg, "num_key_value_heads", c->n_head);
    c->head_dim  = cfg_int(cfg, "head_dim", c->n_embd / c->n_head);
    c->n_ff      = cfg_int(cfg, "intermediate_size", 0);
    c->n_vocab   = cfg_int(cfg, "vocab_size", 0);
    c->rms_eps   = (float)cfg_real(cfg, "rms_norm_eps", 1e-6);
    json_t * rp  = json_object_get(cfg, "rope_parameters");
    c->rope_theta = (float)cfg_real(rp ? rp : cfg, "rope_theta", 10000.0);
    c->tied_embeddings = json_is_true(json_object_get(cfg, "tie_word_embeddings"));
    c->qk_norm  = c->arch == OSCAR_ARCH_QWEN3;
    c->qkv_bias = c->arch == OSCAR_ARCH_QWEN2;
    json_decref(cfg);
    cfg = NULL;
    if (c->n_layer <= 0 || c->n_layer > 16) goto fail;
    snprintf(t->m.source, sizeof t->m.source, "%s", dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (osc_read_file(path, (size_t)1 << 30, &t->blob, &t->size) != OSCAR_OK || t->size < 8) goto fail;
    uint64_t hlen;
    memcpy(&hlen, t->blob, 8);
    if (8 + hlen > t->size) goto fail;
    t->header = json_loadb(t->blob + 8, hlen, 0, &err);
    if (!t->header) goto fail;
    const size_t C = (size_t)c->n_embd, D = (size_t)c->head_dim, F = (size_t)c->n_ff;
    const size_t Q = (size_t)c->n_head * D, KV = (size_t)c->n_head_kv * D;
    t->m.tok_embd    = tiny_tensor(t, "model.embed_tokens.weight", (size_t)c->n_vocab * C);
    t->m.output_norm = tiny_tensor(t, "model.norm.weight", C);
    t->m.output      = c->tied_embeddings ? t->m.tok_embd
                                          : tiny_tensor(t, "lm_head.weight", (size_t)c->n_vocab * C);
    t->m.layers      = t->layers;
    for (int32_t l = 0; l < c->n_layer; l++) {
        struct oscar_layer_weights * w = &t->layers[l];
        char n[128];
#define TT(field, suffix, count)                                  \
    snprintf(n, sizeof n, "model.layers.%d.%s", (int)l, suffix); \
    w->field = tiny_tensor(t, n, count)
        TT(attn_norm, "input_layernorm.weight", C);
        TT(wq, "self_attn.q_proj.weight", Q * C);
        TT(wk, "self_attn.k_proj.weight", KV * C);
        TT(wv, "self_attn.v_proj.weight", KV * C);
        TT(bq, "self_attn.q_proj.bias", Q);
        TT(bk, "self_attn.k_proj.bias", KV);
        TT(bv, "self_attn.v_proj.bias", KV);
        TT(q_norm, "self_attn.q_norm.weight", D);
        TT(k_norm, "self_attn.k_norm.weight", D);
        TT(wo, "self_attn.o_proj.weight", C * Q);
        TT(ffn_norm, "post_attention_layernorm.weight", C);
        TT(w_gate, "mlp.gate_proj.weight", F * C);
        TT(w_up, "mlp.up_proj.weight", F * C);
        TT(w_down, "mlp.down_proj.weight", C * F);
#undef TT
    }
    return t;
fail:
    fprintf(stderr, "tiny_load(%s) failed\n", dir);
    if (cfg) json_decref(cfg);
    tiny_free(t);
    return NULL;
}

#endif
