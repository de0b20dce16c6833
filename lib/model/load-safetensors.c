// load-safetensors.c - model config and fp32 weights from a Hugging Face
// directory: config.json + model.safetensors or model.safetensors.index.json.
//
// Tensor names are the transformers ones (model.layers.{i}.self_attn.q_proj.weight,
// ...), already in HF order: no permutation; Phi-3's fused qkv_proj and
// gate_up_proj are split into q/k/v and gate/up rows at load; MoE experts
// (mlp.experts.J.*) are read one tensor per expert into one stacked block (glm4_moe's shared experts are
// mlp.shared_experts.*). With tie_word_embeddings the
// lm_head is not read (tok_embd is shared); without it lm_head.weight is
// required. source_sha256 is that of config.json.
//
// Gemma 3: the text model's tensors sit under model. (Gemma3ForCausalLM), language_model.model.
// (the Hub's Gemma3ForConditionalGeneration checkpoints) or model.language_model. (as transformers 5
// saves that class); the prefix is the one whose embed_tokens exists, and the vision tower's tensors
// are not read. Its norms are pre_feedforward_layernorm (before the MLP) and the sandwich norms
// post_attention_layernorm / post_feedforward_layernorm, stored as w (the forward adds norm_offset 1).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/hf-config.h"
#include "formats/safetensors.h"
#include "model/load-internal.h"
#include "util/sha256.h"
#include "util/fs.h"

struct st_src {
    struct osc_safetensors *          st;
    const char *                      dir;
    const struct oscar_model_config * c;
    const char *                      prefix; // of the text model's tensors: "model." unless Gemma 3's multimodal
    const char *                      head;   // the LM head's name
};

static void tensor_name(const struct st_src * s, enum osc_wkind k, int32_t layer, char * out, size_t n) {
    static const char * names[] = {
        [OSC_W_EMBD] = "embed_tokens.weight", [OSC_W_OUT_NORM] = "norm.weight",
        [OSC_W_OUTPUT] = "", [OSC_W_ATTN_NORM] = "input_layernorm.weight",
        [OSC_W_Q] = "self_attn.q_proj.weight", [OSC_W_K] = "self_attn.k_proj.weight",
        [OSC_W_V] = "self_attn.v_proj.weight", [OSC_W_BQ] = "self_attn.q_proj.bias",
        [OSC_W_BK] = "self_attn.k_proj.bias", [OSC_W_BV] = "self_attn.v_proj.bias",
        [OSC_W_QNORM] = "self_attn.q_norm.weight", [OSC_W_KNORM] = "self_attn.k_norm.weight",
        [OSC_W_O] = "self_attn.o_proj.weight", [OSC_W_FFN_NORM] = "post_attention_layernorm.weight",
        [OSC_W_GATE] = "mlp.gate_proj.weight", [OSC_W_UP] = "mlp.up_proj.weight", [OSC_W_DOWN] = "mlp.down_proj.weight",
        [OSC_W_ROUTER] = "mlp.gate.weight", [OSC_W_SH_GATE] = "mlp.shared_expert.gate_proj.weight",
        [OSC_W_SH_UP] = "mlp.shared_expert.up_proj.weight", [OSC_W_SH_DOWN] = "mlp.shared_expert.down_proj.weight",
        [OSC_W_SH_SCALE] = "mlp.shared_expert_gate.weight", [OSC_W_EXP_BIAS] = "mlp.gate.e_score_correction_bias",
        [OSC_W_POST_ATTN_NORM] = "post_attention_layernorm.weight",
        [OSC_W_POST_FFN_NORM] = "post_feedforward_layernorm.weight",
    };
    const char * nm = names[k];
    if (k == OSC_W_FFN_NORM && s->c->post_norms) nm = "pre_feedforward_layernorm.weight"; // Gemma's sandwich
    if (k == OSC_W_OUTPUT) snprintf(out, n, "%s", s->head);
    else if (layer < 0) snprintf(out, n, "%s%s", s->prefix, nm);
    else snprintf(out, n, "%slayers.%d.%s", s->prefix, layer, nm);
}

// Phi-3 fuses q/k/v into qkv_proj (rows q | k | v) and gate/up into
// gate_up_proj (rows gate | up), as transformers' Phi3Attention / Phi3MLP
// slice them. Sets the fused tensor's name, its total rows and the first row
// of `kind`; false for the tensors Phi-3 stores like Llama.
static bool phi3_fused(const struct oscar_model_config * c, enum osc_wkind kind, int32_t layer, char * name, size_t n,
                       int64_t * total, int64_t * first) {
    const int64_t q = (int64_t) c->n_head * c->head_dim, kv = (int64_t) c->n_head_kv * c->head_dim, F = c->n_ff;
    if (kind == OSC_W_Q || kind == OSC_W_K || kind == OSC_W_V) {
        snprintf(name, n, "model.layers.%d.self_attn.qkv_proj.weight", layer);
        *total = q + 2 * kv, *first = kind == OSC_W_Q ? 0 : kind == OSC_W_K ? q : q + kv;
        return true;
    }
    if (kind == OSC_W_GATE || kind == OSC_W_UP) {
        snprintf(name, n, "model.layers.%d.mlp.gate_up_proj.weight", layer);
        *total = 2 * F, *first = kind == OSC_W_GATE ? 0 : F;
        return true;
    }
    return false;
}

// Rows [first, first + rows) of tensor `name` of `total` rows x cols (cols 0: a vector) into dst,
// or with dst NULL only the check of its presence and shape.
static size_t slice_bytes = (size_t) 64 << 20;   // source bytes converted per slice (read_rows)

void osc_st_set_slice_bytes(size_t bytes) { slice_bytes = bytes ? bytes : (size_t) 64 << 20; }

static enum oscar_status read_rows(const struct st_src * s, const char * name, int64_t total, int64_t first,
                                   int64_t rows, int64_t cols, float * dst) {
    const struct osc_st_tensor * t = osc_safetensors_find(s->st, name);
    if (!t) return osc_error(OSCAR_ERR_NOT_FOUND, "%s: tensor '%s' is missing", s->dir, name);
    bool ok = cols == 0 ? (t->n_dims == 1 && t->shape[0] == total)
                        : (t->n_dims == 2 && t->shape[0] == total && t->shape[1] == cols);
    if (!ok) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s' has %d dims [%lld, %lld, ...], config.json needs "
                         "[%lld%s%lld]", t->file, name, t->n_dims, (long long) t->shape[0],
                         (long long) (t->n_dims > 1 ? t->shape[1] : 0), (long long) total, cols ? ", " : "",
                         (long long) (cols ? cols : 0));
    }
    if (!dst) return OSCAR_OK; // check pass
    // Views of the rows wanted, a slice of rows at a time: rows are contiguous, so each slice is
    // the same tensor with fewer rows. Read once, each slice's mapped pages are dropped after it
    // is converted, so the file's pages resident at a time are one slice's, not the tensor's (the
    // Qwen3-8B embedding: 1.2 GB of bf16 beside its 2.5 GB of fp32).
    const int64_t row = cols ? cols : 1;
    const size_t esz = osc_st_dtype_size(t->dtype);
    const int64_t per = (int64_t) (slice_bytes / (esz * (size_t) row)), slice = per > 0 ? per : 1;
    enum oscar_status st = OSCAR_OK;
    for (int64_t r0 = 0; r0 < rows && st == OSCAR_OK; r0 += slice) {
        struct osc_st_tensor part = *t;
        part.shape[0] = rows - r0 < slice ? rows - r0 : slice;
        part.n_elements = part.shape[0] * row;
        part.nbytes = (size_t) part.n_elements * esz;
        part.data = (const char *) t->data + (size_t) ((first + r0) * row) * esz;
        osc_mapped_will_read(part.data, part.nbytes);
        st = osc_st_to_f32(&part, dst + r0 * row);
        osc_mapped_drop(part.data, part.nbytes);
    }
    return st;
}

// The routed experts: one tensor per expert (mlp.experts.J.{gate,up,down}_proj), stacked in expert order.
static enum oscar_status read_experts(const struct st_src * s, enum osc_wkind kind, int32_t layer, int64_t rows,
                                      int64_t cols, float * dst) {
    const bool mx = s->c->arch == OSCAR_ARCH_MIXTRAL; // block_sparse_moe.experts.J.w1 (gate), w3 (up), w2 (down)
    const char * proj = kind == OSC_W_EXP_GATE ? (mx ? "w1" : "gate_proj") : kind == OSC_W_EXP_UP ? (mx ? "w3" : "up_proj")
                                                                                                 : (mx ? "w2" : "down_proj");
    const int64_t E = s->c->n_expert, per = rows / E;
    enum oscar_status st = OSCAR_OK;
    for (int64_t j = 0; st == OSCAR_OK && j < E; j++) {
        char name[160];
        snprintf(name, sizeof name, "model.layers.%d.%s.experts.%lld.%s.weight", layer, mx ? "block_sparse_moe" : "mlp",
                 (long long) j, proj);
        st = read_rows(s, name, per, 0, per, cols, dst ? dst + j * per * cols : NULL);
    }
    return st;
}

// glm4_moe's own names: mlp.shared_experts (plural); a checkpoint without the router's
// e_score_correction_bias reads it as transformers' zero-initialised buffer.
static enum oscar_status glm4_moe_get(const struct st_src * s, enum osc_wkind kind, int32_t layer, int64_t rows,
                                      int64_t cols, float * dst) {
    char name[160];
    const char * sh = kind == OSC_W_SH_GATE ? "gate_proj" : kind == OSC_W_SH_UP ? "up_proj"
                                                          : kind == OSC_W_SH_DOWN ? "down_proj" : NULL;
    if (sh) snprintf(name, sizeof name, "%slayers.%d.mlp.shared_experts.%s.weight", s->prefix, layer, sh);
    else tensor_name(s, kind, layer, name, sizeof name);
    if (kind == OSC_W_EXP_BIAS && !osc_safetensors_find(s->st, name)) {
        if (dst) memset(dst, 0, (size_t) rows * sizeof(float));
        return OSCAR_OK;
    }
    return read_rows(s, name, rows, 0, rows, cols, dst);
}

static enum oscar_status st_get(void * ctx, enum osc_wkind kind, int32_t layer, int64_t rows, int64_t cols,
                                float * dst) {
    struct st_src * s = ctx;
    char name[128];
    if (kind == OSC_W_ROUTER && s->c->arch == OSCAR_ARCH_MIXTRAL) {
        snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.gate.weight", layer);
        return read_rows(s, name, rows, 0, rows, cols, dst);
    }
    if (kind == OSC_W_EXP_GATE || kind == OSC_W_EXP_UP || kind == OSC_W_EXP_DOWN)
        return read_experts(s, kind, layer, rows, cols, dst);
    if (s->c->arch == OSCAR_ARCH_GLM4_MOE) return glm4_moe_get(s, kind, layer, rows, cols, dst);
    int64_t total = rows, first = 0; // the rows [first, first + rows) of a tensor of `total` rows
    if (s->c->arch != OSCAR_ARCH_PHI3 || !phi3_fused(s->c, kind, layer, name, sizeof name, &total, &first)) {
        if (kind == OSC_W_ROPE_FREQS) return osc_error(OSCAR_ERR_NOT_FOUND, "%s: no rope_freqs in HF models", s->dir);
        tensor_name(s, kind, layer, name, sizeof name);
    }
    return read_rows(s, name, total, first, rows, cols, dst);
}

// Where the text model's tensors are: Gemma 3's multimodal layouts, else model.*.
static void find_prefix(struct st_src * s) {
    static const struct { const char * prefix, * head; } layouts[] = {
        {"language_model.model.", "language_model.lm_head.weight"}, {"model.language_model.", "lm_head.weight"},
    };
    s->prefix = "model.", s->head = "lm_head.weight";
    if (s->c->arch != OSCAR_ARCH_GEMMA3 || osc_safetensors_find(s->st, "model.embed_tokens.weight")) return;
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "%sembed_tokens.weight", layouts[i].prefix);
        if (osc_safetensors_find(s->st, name)) {
            s->prefix = layouts[i].prefix, s->head = layouts[i].head;
            return;
        }
    }
}

// No <prefix>layers.N.* tensor beyond num_hidden_layers (missing ones fail in osc_model_attach).
static enum oscar_status check_layers(const struct st_src * src, const char * cfg, int32_t n_layer) {
    enum oscar_status s = OSCAR_OK;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%slayers.", src->prefix);
    for (int64_t i = 0; s == OSCAR_OK && i < osc_safetensors_n_tensors(src->st); i++) {
        s = osc_model_check_layer(cfg, osc_safetensors_tensor(src->st, i)->name, prefix, n_layer,
                                  "num_hidden_layers");
    }
    return s;
}

static void st_close(void * ctx) {
    struct st_src * s = ctx;
    if (!s) return;
    osc_safetensors_close(s->st);
    free(s);
}

enum oscar_status osc_model_open_hf(const char * dir, struct oscar_model * m, struct osc_weight_source * src) {
    struct st_src * s = calloc(1, sizeof *s);
    char * cfg = osc_path_join(dir, "config.json");
    enum oscar_status st = s && cfg ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", dir);
    if (st == OSCAR_OK) {
        s->dir = m->source, s->c = &m->config; // both outlive the source: the model's own
        st = osc_hf_config_load(cfg, &m->config);
    }
    if (st == OSCAR_OK) st = osc_model_config_check(&m->config, cfg);
    if (st == OSCAR_OK) st = osc_safetensors_open(dir, &s->st);
    // glm4_moe's NextN (MTP) layers follow the last one; transformers does not load them either
    if (st == OSCAR_OK) {
        find_prefix(s);
        st = check_layers(s, cfg, m->config.n_layer + m->config.n_layer_nextn);
    }
    if (st == OSCAR_OK) st = osc_sha256_file(cfg, m->source_sha256);
    free(cfg);
    if (st != OSCAR_OK) {
        st_close(s);
        return st;
    }
    *src = (struct osc_weight_source){st_get, st_close, s};
    return OSCAR_OK;
}
