// load-gguf.c - model config and fp32 weights from a llama/qwen2/qwen3/qwen2moe/qwen3moe/glm4moe/gemma3/phi3 GGUF.
//
// Keys are "<arch>.block_count" etc. with arch = general.architecture; head_dim
// comes from "<arch>.attention.key_length" when present, else
// embedding_length / head_count. Tensors use llama.cpp names
// (blk.{i}.attn_q.weight, ...); ne[0] is the row length (in-features), so a
// 2-D tensor is [ne[1], ne[0]] row-major like an HF Linear weight. For the
// llama arch the q/k rows (and biases) are un-permuted per head to HF order:
// ggml row 2i -> HF row i, ggml row 2i+1 -> HF row i + D/2 (method.md §1.1).
// qwen2/qwen3 GGUFs use NEOX RoPE and are taken as stored.
//
// RoPE scaling as llama.cpp reads it: rope_freqs.weight (Llama 3.x: per-frequency
// divisors, angle = pos * theta_i / freq_factor_i), "<arch>.rope.scaling.type"
// linear with rope.scaling.factor, yarn (read_yarn); other scaling types, LongRoPE's
// rope_factors_long/short, scaling keys without a type or rope_freqs, and partial rotary
// (rope.dimension_count < head_dim) outside glm4moe and phi3 are refused naming the key and
// its value. "<arch>.attention.sliding_window" (llama.cpp's key; 0 = none) sets a window on
// every layer.
//
// phi3 as llama.cpp's converter (Phi3MiniModel) writes it: no q/k permutation (NEOX RoPE on the
// first rope.dimension_count dims), fused blk.N.attn_qkv and blk.N.ffn_up = gate | up (phi3_fused),
// head_dim = embedding_length / head_count. Its attention.sliding_window is applied as transformers'
// Phi3 applies sliding_window (every layer); llama.cpp's phi3 loader currently drops it ("Phi SWA is
// currently disabled"), so on sequences longer than the window llama.cpp's logits differ from both.
//
// qwen2moe / qwen3moe: <arch>.expert_count, expert_used_count, expert_feed_forward_length,
// expert_shared_feed_forward_length (qwen2moe), expert_weights_norm, expert_gating_func;
// tensors blk.N.ffn_gate_inp (router [E, C]), ffn_{gate,up,down}_exps (3-D, experts stacked
// along ne[2]), ffn_{gate,up,down}_shexp and ffn_gate_inp_shexp (the shared expert).
//
// gemma3 as llama.cpp's converter writes it and its graph reads it: norms stored as 1 + w (so
// norm_offset 0), q/k as stored (NEOX), no output.weight (tied), sandwich norms post_attention_norm /
// post_ffw_norm, q/k norms, GELU-tanh, embedding * sqrt(n_embd). With attention.sliding_window > 0,
// layer i slides iff i % 6 < 5 (llama.cpp's fixed pattern) with RoPE base 1e4 unscaled, the others use
// rope.freq_base and the scaling. No query_pre_attn_scalar key: the score scale is 1/sqrt(head_dim),
// 1/sqrt(n_embd / n_head) for 62 layers (the 27B), as llama.cpp decides.
//
// glm4moe: read_glm4_moe; its FFN pre-norm is blk.N.post_attention_norm, its choice bias
// blk.N.exp_probs_b.bias, and its partial rotary (rope.dimension_count < head_dim) is taken.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "model/load-internal.h"
#include "util/fs.h"
#include "util/sha256.h"

struct gguf_src {
    struct osc_gguf *               g;
    const struct oscar_model_config * c;
    float *                         tmp; // [largest q/k tensor] for the un-permutation
};

static void tensor_name(enum osc_wkind k, int32_t layer, char * out, size_t n) {
    static const char * names[] = {
        [OSC_W_EMBD] = "token_embd.weight", [OSC_W_OUT_NORM] = "output_norm.weight", [OSC_W_OUTPUT] = "output.weight",
        [OSC_W_ATTN_NORM] = "attn_norm.weight", [OSC_W_Q] = "attn_q.weight", [OSC_W_K] = "attn_k.weight",
        [OSC_W_V] = "attn_v.weight", [OSC_W_BQ] = "attn_q.bias", [OSC_W_BK] = "attn_k.bias",
        [OSC_W_BV] = "attn_v.bias", [OSC_W_QNORM] = "attn_q_norm.weight", [OSC_W_KNORM] = "attn_k_norm.weight",
        [OSC_W_O] = "attn_output.weight", [OSC_W_FFN_NORM] = "ffn_norm.weight", [OSC_W_GATE] = "ffn_gate.weight",
        [OSC_W_UP] = "ffn_up.weight", [OSC_W_DOWN] = "ffn_down.weight", [OSC_W_ROPE_FREQS] = "rope_freqs.weight",
        [OSC_W_ROUTER] = "ffn_gate_inp.weight", [OSC_W_EXP_GATE] = "ffn_gate_exps.weight",
        [OSC_W_EXP_UP] = "ffn_up_exps.weight", [OSC_W_EXP_DOWN] = "ffn_down_exps.weight",
        [OSC_W_SH_GATE] = "ffn_gate_shexp.weight", [OSC_W_SH_UP] = "ffn_up_shexp.weight",
        [OSC_W_SH_DOWN] = "ffn_down_shexp.weight", [OSC_W_SH_SCALE] = "ffn_gate_inp_shexp.weight",
        [OSC_W_POST_ATTN_NORM] = "post_attention_norm.weight", [OSC_W_POST_FFN_NORM] = "post_ffw_norm.weight",
        [OSC_W_EXP_BIAS] = "exp_probs_b.bias",
    };
    if (layer < 0) snprintf(out, n, "%s", names[k]);
    else snprintf(out, n, "blk.%d.%s", layer, names[k]);
}

// Rows of each head of `x` [n_rows, cols] from ggml (adjacent-pair) order to HF (half-split) order.
static void unpermute(float * x, float * tmp, int64_t n_rows, int64_t cols, int32_t D) {
    int64_t n_heads = n_rows / D;
    size_t row = (size_t) cols * sizeof(float);
    for (int64_t h = 0; h < n_heads; h++) {
        float * head = x + h * D * cols;
        memcpy(tmp, head, (size_t) D * row);
        for (int32_t i = 0; i < D / 2; i++) {
            memcpy(head + (int64_t) i * cols, tmp + (int64_t) (2 * i) * cols, row);
            memcpy(head + (int64_t) (i + D / 2) * cols, tmp + (int64_t) (2 * i + 1) * cols, row);
        }
    }
}

// Rows [first, first + rows) of the 2-D tensor t of `total` rows of `cols` (a row is ne[0], a whole
// number of quantization blocks) into dst; dst NULL: the shape check only.
static enum oscar_status gguf_rows(const struct gguf_src * s, const struct osc_gguf_tensor * t, int64_t total,
                                   int64_t first, int64_t rows, int64_t cols, float * dst) {
    const char * path = osc_gguf_path(s->g);
    if (t->ne[0] != cols || t->ne[1] != total || t->ne[2] != 1 || t->ne[3] != 1)
        return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld] (ggml order), the "
                         "config needs [%lld, %lld]", path, t->name, (long long) t->ne[0], (long long) t->ne[1],
                         (long long) t->ne[2], (long long) t->ne[3], (long long) cols, (long long) total);
    if (!dst) return OSCAR_OK;
    size_t bb = 0;
    int64_t be = 0;
    if (!osc_ggml_type_info(t->type, &bb, &be))
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: tensor '%s' has an unsupported type", path, t->name);
    const size_t row_bytes = (size_t) (cols / be) * bb;
    const char * src = (const char *) t->data + (size_t) first * row_bytes;
    osc_mapped_will_read(src, (size_t) rows * row_bytes);
    enum oscar_status st = osc_ggml_dequantize(t->type, src, dst, rows * cols);
    osc_mapped_drop(src, (size_t) rows * row_bytes);
    return st == OSCAR_OK ? st : osc_error_prefix(st, "%s: tensor '%s'", path, t->name);
}

// Phi-3 as llama.cpp's converter writes it: q/k/v fused in blk.N.attn_qkv (rows q | k | v; separate
// attn_q/k/v when it is absent, as llama.cpp's loader also takes), gate and up stacked in blk.N.ffn_up
// (rows gate | up: ggml_swiglu gates with the first half). Sets the fused tensor's name, its rows and the
// first row of `kind`; false for the tensors stored like Llama's.
static bool phi3_fused(const struct gguf_src * s, enum osc_wkind kind, int32_t layer, char * name, size_t n,
                       int64_t * total, int64_t * first) {
    const struct oscar_model_config * c = s->c;
    const int64_t q = (int64_t) c->n_head * c->head_dim, kv = (int64_t) c->n_head_kv * c->head_dim, F = c->n_ff;
    if (kind == OSC_W_Q || kind == OSC_W_K || kind == OSC_W_V) {
        snprintf(name, n, "blk.%d.attn_qkv.weight", layer);
        if (!osc_gguf_find_tensor(s->g, name)) return false;
        *total = q + 2 * kv, *first = kind == OSC_W_Q ? 0 : kind == OSC_W_K ? q : q + kv;
        return true;
    }
    if (kind == OSC_W_GATE || kind == OSC_W_UP) {
        snprintf(name, n, "blk.%d.ffn_up.weight", layer);
        *total = 2 * F, *first = kind == OSC_W_GATE ? 0 : F;
        return true;
    }
    return false;
}

static enum oscar_status gguf_get(void * ctx, enum osc_wkind kind, int32_t layer, int64_t rows, int64_t cols,
                                  float * dst) {
    struct gguf_src * s = ctx;
    char name[96];
    int64_t total = rows, first = 0; // rows [first, first + rows) of a tensor of `total` rows (Phi-3's fused)
    if (s->c->arch != OSCAR_ARCH_PHI3 || !phi3_fused(s, kind, layer, name, sizeof name, &total, &first))
        tensor_name(kind, layer, name, sizeof name);
    if (kind == OSC_W_FFN_NORM && s->c->arch == OSCAR_ARCH_GLM4_MOE) // glm4moe's FFN pre-norm keeps HF's name
        snprintf(name, sizeof name, "blk.%d.post_attention_norm.weight", layer);
    const char * path = osc_gguf_path(s->g);
    const struct osc_gguf_tensor * t = osc_gguf_find_tensor(s->g, name);
    if (!t) return osc_error(OSCAR_ERR_NOT_FOUND, "%s: tensor '%s' is missing", path, name);
    if (total != rows) return gguf_rows(s, t, total, first, rows, cols, dst);
    // the stacked experts are 3-D: [cols, rows of one expert, E] in ggml order
    const bool exps = kind == OSC_W_EXP_GATE || kind == OSC_W_EXP_UP || kind == OSC_W_EXP_DOWN;
    const int64_t E = exps ? s->c->n_expert : 1;
    bool ok = cols == 0 ? (t->n_elements == rows && t->ne[0] == rows)
                        : (t->ne[0] == cols && t->ne[1] * E == rows && t->ne[2] == E && t->ne[3] == 1);
    if (!ok) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld] (ggml order), "
                         "the config needs [%lld, %lld, %lld]", path, name, (long long) t->ne[0], (long long) t->ne[1],
                         (long long) t->ne[2], (long long) t->ne[3], (long long) (cols ? cols : rows),
                         (long long) (cols ? rows / E : 1), (long long) E);
    }
    if (!dst) return OSCAR_OK; // check pass
    osc_mapped_will_read(t->data, t->nbytes);
    enum oscar_status st = osc_ggml_dequantize(t->type, t->data, dst, t->n_elements);
    osc_mapped_drop(t->data, t->nbytes); // read once: its pages need not stay resident
    if (st != OSCAR_OK) return osc_error_prefix(st, "%s: tensor '%s'", path, name);
    bool qk = kind == OSC_W_Q || kind == OSC_W_K || kind == OSC_W_BQ || kind == OSC_W_BK;
    if (qk && (s->c->arch == OSCAR_ARCH_LLAMA || s->c->arch == OSCAR_ARCH_MIXTRAL)) {
        // allocated on first use, after the check pass has seen the q/k tensors it is sized by
        if (!s->tmp) s->tmp = malloc((size_t) s->c->head_dim * (size_t) s->c->n_embd * sizeof(float));
        if (!s->tmp) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
        unpermute(dst, s->tmp, rows, cols ? cols : 1, s->c->head_dim);
    }
    return OSCAR_OK;
}

static enum oscar_status get_i32(struct osc_gguf * g, const char * arch, const char * key, bool required,
                                 int32_t * out) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    uint32_t v;
    enum oscar_status st = osc_gguf_get_u32(g, k, &v);
    if (st == OSCAR_ERR_NOT_FOUND && !required) return OSCAR_OK;
    if (st != OSCAR_OK) return st;
    if (v == 0 || v > INT32_MAX) return osc_error(OSCAR_ERR_FORMAT, "%s: %s = %u is out of range", osc_gguf_path(g), k, v);
    *out = (int32_t) v;
    return OSCAR_OK;
}

static enum oscar_status get_f32(struct osc_gguf * g, const char * arch, const char * key, float * out) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    enum oscar_status st = osc_gguf_get_f32(g, k, out);
    return st == OSCAR_ERR_NOT_FOUND ? OSCAR_OK : st; // keep the default
}

// YaRN as llama.cpp runs it for llama / qwen2 / qwen3 / qwen3moe / phi3: rope.scaling.factor (freq_scale =
// 1 / factor), rope.scaling.original_context_length (default context_length: n_ctx_orig_yarn), the
// correction range of beta_fast 32 / beta_slow 1 (its context defaults; these archs do not read the
// converter's yarn_beta_* keys) rounded outwards, and cos/sin scaled by 0.1 ln(factor) + 1 (ggml's mscale
// with the context's attn factor, which llama.cpp recomputes from the factor). That is transformers'
// _compute_yarn_parameters with its defaults. Where the two disagree the file is refused, naming the key:
// the converter writes HF's attention_factor as yarn_attn_factor and beta_fast / beta_slow as
// yarn_beta_*, which transformers would use and llama.cpp ignores for these archs; yarn_ext_factor != 1,
// yarn_log_multiplier (DeepSeek's mscale_all_dim) and rope.scaling.attn_factor != 1 change llama.cpp's
// result and have no transformers counterpart here; rope_freqs.weight with yarn would be applied twice.
static enum oscar_status read_yarn(struct osc_gguf * g, const char * arch, struct oscar_model_config * c) {
    const char * path = osc_gguf_path(g);
    c->rope_scaling = OSCAR_ROPE_YARN, c->rope_orig_ctx = c->n_ctx_train;
    c->rope_beta_fast = 32.0f, c->rope_beta_slow = 1.0f;
    c->rope_attn_factor = c->rope_factor > 1.0f ? (float) (0.1 * log((double) c->rope_factor) + 1.0) : 1.0f;
    enum oscar_status st = get_i32(g, arch, "rope.scaling.original_context_length", false, &c->rope_orig_ctx);
    if (st != OSCAR_OK) return st;
    if (c->has_rope_freqs)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: rope_freqs.weight with %s.rope.scaling.type yarn is not "
                         "supported", path, arch);
    static const char * keys[] = {"rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow",
                                  "rope.scaling.yarn_ext_factor", "rope.scaling.yarn_log_multiplier",
                                  "rope.scaling.attn_factor", "rope.scaling.yarn_attn_factor"};
    const float want[] = {32.0f, 1.0f, 1.0f, 0.0f, 1.0f, c->rope_attn_factor};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        float v = want[i];
        st = get_f32(g, arch, keys[i], &v);
        if (st != OSCAR_OK) return st;
        if (fabsf(v - want[i]) > 1e-6f * fabsf(want[i]))
            return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: %s.%s = %g is not supported (llama.cpp and transformers "
                             "would compute different RoPE; only %g is)", path, arch, keys[i], (double) v,
                             (double) want[i]);
    }
    return OSCAR_OK;
}

// rope.dimension_count, rope_freqs.weight, rope.scaling.* (see the top of the file).
static enum oscar_status read_rope(struct osc_gguf * g, const char * arch, struct oscar_model_config * c) {
    const char * path = osc_gguf_path(g);
    int32_t n_rot = c->head_dim;
    enum oscar_status st = get_i32(g, arch, "rope.dimension_count", false, &n_rot);
    if (st != OSCAR_OK) return st;
    if ((c->arch == OSCAR_ARCH_GLM4_MOE || c->arch == OSCAR_ARCH_PHI3) && n_rot < c->head_dim && n_rot % 2 == 0) {
        // NEOX on the first n_rot dims
        c->rope_dim = n_rot;
    } else if (n_rot != c->head_dim) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: %s.rope.dimension_count = %d is not supported (partial rotary; "
                         "head_dim is %d)", path, arch, n_rot, c->head_dim);
    }
    c->has_rope_freqs = osc_gguf_find_tensor(g, "rope_freqs.weight") != NULL;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const char * t;
    size_t tl;
    st = osc_gguf_get_str(g, key, &t, &tl);
    if (st != OSCAR_OK && st != OSCAR_ERR_NOT_FOUND) return st;
    char type[32] = "";
    if (st == OSCAR_OK) snprintf(type, sizeof type, "%.*s", (int) (tl < 31 ? tl : 31), t);
    float factor = 1.0f;
    st = get_f32(g, arch, "rope.scaling.factor", &factor);
    if (st != OSCAR_OK) return st;
    static const char * longrope[] = {"rope_factors_long.weight", "rope_factors_short.weight"};
    for (int i = 0; i < 2; i++)
        if (osc_gguf_find_tensor(g, longrope[i]))
            return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: tensor '%s' (LongRoPE) is not supported", path, longrope[i]);
    if (strcmp(type, "linear") == 0 || strcmp(type, "yarn") == 0) {
        if (!(factor > 0.0f)) return osc_error(OSCAR_ERR_FORMAT, "%s: %s.rope.scaling.factor = %g is not positive "
                                               "(%s scaling needs it)", path, arch, (double) factor, type);
        c->rope_scaling = OSCAR_ROPE_LINEAR, c->rope_factor = factor;
        if (strcmp(type, "yarn") != 0) return OSCAR_OK;
        snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
        if (osc_gguf_find_key(g, key) < 0) // llama.cpp would run factor 1 (no scaling): a file that says yarn means more
            return osc_error(OSCAR_ERR_FORMAT, "%s: %s is missing (yarn scaling needs it)", path, key);
        return read_yarn(g, arch, c);
    } else if (type[0] && strcmp(type, "none") != 0 && !(c->has_rope_freqs && strcmp(type, "llama3") == 0)) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: %s = \"%s\" is not supported (none, linear, yarn, or "
                         "rope_freqs.weight are)", path, key, type);
    } else if (!type[0] && factor != 1.0f && !c->has_rope_freqs) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: %s.rope.scaling.factor = %g without %s or rope_freqs.weight: "
                         "the RoPE scaling is unknown", path, arch, (double) factor, key);
    }
    return OSCAR_OK;
}

// The experts of qwen2moe / qwen3moe as llama.cpp reads them: every layer is sparse; the top-k
// weights are renormalised as <arch>.expert_weights_norm says, else as llama.cpp's graph for the
// arch does (qwen3moe yes, qwen2moe no); a gating function other than softmax is refused.
static enum oscar_status read_moe(struct osc_gguf * g, const char * arch, struct oscar_model_config * c) {
    const char * path = osc_gguf_path(g);
    enum oscar_status st = get_i32(g, arch, "expert_count", true, &c->n_expert);
    if (st == OSCAR_OK) st = get_i32(g, arch, "expert_used_count", true, &c->n_expert_used);
    c->n_ff_expert = c->n_ff; // Mixtral GGUFs: the experts are feed_forward_length wide
    if (st == OSCAR_OK)
        st = get_i32(g, arch, "expert_feed_forward_length", c->arch != OSCAR_ARCH_MIXTRAL, &c->n_ff_expert);
    if (st == OSCAR_OK && c->arch == OSCAR_ARCH_QWEN2_MOE)
        st = get_i32(g, arch, "expert_shared_feed_forward_length", true, &c->n_ff_shared);
    if (st != OSCAR_OK) return st;
    c->moe_step = 1;
    char key[128];
    snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
    bool norm = c->arch == OSCAR_ARCH_QWEN3_MOE || c->arch == OSCAR_ARCH_MIXTRAL;
    st = osc_gguf_get_bool(g, key, &norm);
    if (st != OSCAR_OK && st != OSCAR_ERR_NOT_FOUND) return st;
    c->expert_norm_topk = norm;
    snprintf(key, sizeof key, "%s.expert_gating_func", arch);
    uint32_t gating = 1; // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX
    st = osc_gguf_get_u32(g, key, &gating);
    if (st != OSCAR_OK && st != OSCAR_ERR_NOT_FOUND) return st;
    if (gating != 1) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: %s = %u (%s) is not supported (1, softmax, is)", path, key,
                         gating, gating == 2 ? "sigmoid" : gating == 3 ? "softmax_weight" : "unknown");
    }
    if (c->n_expert_used > c->n_expert) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: %s.expert_used_count %d exceeds %s.expert_count %d", path, arch,
                         c->n_expert_used, arch, c->n_expert);
    }
    return OSCAR_OK;
}

// What llama.cpp's gemma3 graph fixes rather than reads (see the top of the file).
static void gemma3_config(struct oscar_model_config * c) {
    c->qk_norm = true, c->post_norms = true, c->embed_scale = true, c->act = OSCAR_ACT_GELU_TANH;
    c->norm_offset = 0.0f; // the converter stored 1 + w
    c->attn_scale = (float) (1.0 / sqrt(c->n_layer == 62 ? (double) c->n_embd / c->n_head : (double) c->head_dim));
    if (c->sliding_window > 0) c->swa_first_layer = 0, c->swa_pattern = 6, c->rope_theta_swa = 10000.0f;
}

// An optional u32 key that may be 0 (get_i32 refuses 0).
static enum oscar_status get_u32_or(struct osc_gguf * g, const char * arch, const char * key, uint32_t max,
                                    uint32_t * out) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    enum oscar_status st = osc_gguf_get_u32(g, k, out);
    if (st == OSCAR_ERR_NOT_FOUND) return OSCAR_OK; // keep the default
    if (st == OSCAR_OK && *out > max)
        return osc_error(OSCAR_ERR_FORMAT, "%s: %s = %u is out of range (at most %u)", osc_gguf_path(g), k, *out, max);
    return st;
}

// glm4moe as llama.cpp reads it (llm_build_glm4_moe): the first leading_dense_block_count layers
// dense, expert_shared_count ungated shared experts of expert_feed_forward_length each,
// sigmoid scores (expert_gating_func 2, or 0 = unset) with the blk.N.exp_probs_b.bias choice
// bias, expert_group_count / expert_group_used_count, expert_weights_norm, expert_weights_scale
// (0 or absent: none); the last nextn_predict_layers of block_count are the NextN (MTP) layers,
// not run. q/k/v biases and q/k norms are used when blk.0 holds them, as llama.cpp's loader does.
static enum oscar_status read_glm4_moe(struct osc_gguf * g, const char * arch, struct oscar_model_config * c) {
    const char * path = osc_gguf_path(g);
    uint32_t n_shared = 0, n_dense = 0, groups = 0, groups_used = 0, nextn = 0, gating = 0;
    enum oscar_status st = get_i32(g, arch, "expert_count", true, &c->n_expert);
    if (st == OSCAR_OK) st = get_i32(g, arch, "expert_used_count", true, &c->n_expert_used);
    if (st == OSCAR_OK) st = get_i32(g, arch, "expert_feed_forward_length", true, &c->n_ff_expert);
    if (st == OSCAR_OK) st = get_u32_or(g, arch, "expert_shared_count", 64, &n_shared);
    if (st == OSCAR_OK) st = get_u32_or(g, arch, "leading_dense_block_count", (uint32_t) c->n_layer, &n_dense);
    if (st == OSCAR_OK) st = get_u32_or(g, arch, "expert_group_count", OSCAR_MAX_EXPERTS, &groups);
    if (st == OSCAR_OK) st = get_u32_or(g, arch, "expert_group_used_count", OSCAR_MAX_EXPERTS, &groups_used);
    if (st == OSCAR_OK) st = get_u32_or(g, arch, "nextn_predict_layers", (uint32_t) c->n_layer - 1, &nextn);
    if (st == OSCAR_OK) st = get_u32_or(g, arch, "expert_gating_func", UINT32_MAX, &gating);
    if (st == OSCAR_OK) st = get_f32(g, arch, "expert_weights_scale", &c->expert_scale);
    if (st != OSCAR_OK) return st;
    char key[128];
    snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
    bool norm = false;
    st = osc_gguf_get_bool(g, key, &norm);
    if (st != OSCAR_OK && st != OSCAR_ERR_NOT_FOUND) return st;
    if (gating != 0 && gating != 2) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: %s.expert_gating_func = %u (%s) is not supported for glm4moe "
                         "(2, sigmoid, is)", path, arch, gating, gating == 1 ? "softmax" : gating == 3 ?
                         "softmax_weight" : "unknown");
    }
    if ((int64_t) c->n_ff_expert * n_shared > INT32_MAX)
        return osc_error(OSCAR_ERR_FORMAT, "%s: %s.expert_shared_count %u is too large", path, arch, n_shared);
    // the NextN layers are the last of block_count: the model is the ones before
    c->n_layer_nextn = (int32_t) nextn, c->n_layer -= (int32_t) nextn;
    n_dense = n_dense < (uint32_t) c->n_layer ? n_dense : (uint32_t) c->n_layer;
    if (n_dense > OSCAR_MAX_DENSE_LAYERS)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: %s.leading_dense_block_count %u is more than %d dense layers",
                         path, arch, n_dense, OSCAR_MAX_DENSE_LAYERS);
    for (uint32_t l = 0; l < n_dense; l++) c->dense_layers[c->n_dense_layers++] = (int32_t) l;
    c->n_ff_shared = c->n_ff_expert * (int32_t) n_shared;
    c->expert_gating = OSCAR_GATING_SIGMOID, c->expert_bias = true, c->shared_ungated = true, c->moe_step = 1;
    c->n_expert_group = (int32_t) groups, c->n_group_used = (int32_t) groups_used, c->expert_norm_topk = norm;
    c->qkv_bias = osc_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    c->qk_norm = osc_gguf_find_tensor(g, "blk.0.attn_q_norm.weight") != NULL;
    return OSCAR_OK;
}

static enum oscar_status read_config(struct osc_gguf * g, struct oscar_model_config * c) {
    const char * path = osc_gguf_path(g);
    const char * a;
    size_t alen;
    enum oscar_status st = osc_gguf_get_str(g, "general.architecture", &a, &alen);
    if (st != OSCAR_OK) return st;
    char arch[32];
    snprintf(arch, sizeof arch, "%.*s", (int) (alen < 31 ? alen : 31), a);
    if (strlen(arch) != alen) alen = 0; // embedded NUL or too long: never matches
    uint32_t n_exp = 0;
    if (alen && strcmp(arch, "llama") == 0) { // llama.cpp stores Mixtral as llama with llama.expert_count
        c->arch = osc_gguf_get_u32(g, "llama.expert_count", &n_exp) == OSCAR_OK && n_exp > 0 ? OSCAR_ARCH_MIXTRAL
                                                                                           : OSCAR_ARCH_LLAMA;
    } else if (alen && strcmp(arch, "qwen2") == 0) c->arch = OSCAR_ARCH_QWEN2;
    else if (alen && strcmp(arch, "qwen3") == 0) c->arch = OSCAR_ARCH_QWEN3;
    else if (alen && strcmp(arch, "qwen2moe") == 0) c->arch = OSCAR_ARCH_QWEN2_MOE;
    else if (alen && strcmp(arch, "qwen3moe") == 0) c->arch = OSCAR_ARCH_QWEN3_MOE;
    else if (alen && strcmp(arch, "glm4moe") == 0) c->arch = OSCAR_ARCH_GLM4_MOE;
    else if (alen && strcmp(arch, "phi3") == 0) c->arch = OSCAR_ARCH_PHI3;
    else if (alen && strcmp(arch, "gemma3") == 0) c->arch = OSCAR_ARCH_GEMMA3;
    else if (alen && strncmp(arch, "gemma", 5) == 0) { // as hf-config.c: the other Gemma families by name
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: GGUF architecture '%s' (Gemma) is not supported: of the Gemma "
                         "families only gemma3 is; the others are different models", path, arch);
    } else {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: GGUF architecture '%.*s' is not supported (llama, qwen2, qwen3, "
                         "qwen2moe, qwen3moe, glm4moe, gemma3, phi3 are)", path, (int) (alen > 64 ? 64 : alen), a);
    }
    c->n_ctx_train = 2048;
    c->rope_theta = 10000.0f;
    c->rms_eps = 1e-5f;
    st = get_i32(g, arch, "block_count", true, &c->n_layer);
    if (st == OSCAR_OK) st = get_i32(g, arch, "embedding_length", true, &c->n_embd);
    if (st == OSCAR_OK) st = get_i32(g, arch, "feed_forward_length", true, &c->n_ff);
    if (st == OSCAR_OK) st = get_i32(g, arch, "attention.head_count", true, &c->n_head);
    c->n_head_kv = c->n_head;
    if (st == OSCAR_OK) st = get_i32(g, arch, "attention.head_count_kv", false, &c->n_head_kv);
    if (st == OSCAR_OK) st = get_i32(g, arch, "context_length", false, &c->n_ctx_train);
    if (st == OSCAR_OK) st = get_f32(g, arch, "rope.freq_base", &c->rope_theta);
    if (st == OSCAR_OK) st = get_f32(g, arch, "attention.layer_norm_rms_epsilon", &c->rms_eps);
    if (st != OSCAR_OK) return st;
    c->head_dim = c->n_embd % c->n_head == 0 ? c->n_embd / c->n_head : 0;
    st = get_i32(g, arch, "attention.key_length", false, &c->head_dim);
    if (st != OSCAR_OK) return st;
    st = read_rope(g, arch, c);
    uint32_t swa = 0; // 0 or absent: no window (the phi3 converter writes 0 for none)
    if (st == OSCAR_OK) st = get_u32_or(g, arch, "attention.sliding_window", INT32_MAX, &swa);
    c->sliding_window = (int32_t) swa;
    if (st != OSCAR_OK) return st;
    const struct osc_gguf_tensor * emb = osc_gguf_find_tensor(g, "token_embd.weight");
    if (!emb) return osc_error(OSCAR_ERR_FORMAT, "%s: tensor 'token_embd.weight' is missing", path);
    if (emb->ne[1] > INT32_MAX) return osc_error(OSCAR_ERR_FORMAT, "%s: vocabulary too large", path);
    c->n_vocab = (int32_t) emb->ne[1];
    c->tied_embeddings = osc_gguf_find_tensor(g, "output.weight") == NULL;
    c->qkv_bias = c->arch == OSCAR_ARCH_QWEN2 || c->arch == OSCAR_ARCH_QWEN2_MOE;
    c->qk_norm = c->arch == OSCAR_ARCH_QWEN3 || c->arch == OSCAR_ARCH_QWEN3_MOE;
    if ((c->arch == OSCAR_ARCH_QWEN2_MOE || c->arch == OSCAR_ARCH_QWEN3_MOE || c->arch == OSCAR_ARCH_MIXTRAL) &&
        (st = read_moe(g, arch, c)) != OSCAR_OK)
        return st;
    if (c->arch == OSCAR_ARCH_GEMMA3) gemma3_config(c);
    if (c->arch == OSCAR_ARCH_GLM4_MOE && (st = read_glm4_moe(g, arch, c)) != OSCAR_OK) return st;
    const char * nm;
    size_t nl;
    if (osc_gguf_get_str(g, "general.name", &nm, &nl) == OSCAR_OK) {
        snprintf(c->name, sizeof c->name, "%.*s", (int) (nl < 127 ? nl : 127), nm);
    }
    return OSCAR_OK;
}

// No blk.N.* tensor beyond block_count (missing ones fail in osc_model_attach).
static enum oscar_status check_layers(const struct osc_gguf * g, const struct oscar_model_config * c) {
    char field[64]; // the arch names are the GGUF key prefixes
    snprintf(field, sizeof field, "%s.block_count", c->arch == OSCAR_ARCH_MIXTRAL ? "llama" : oscar_arch_name(c->arch));
    enum oscar_status st = OSCAR_OK;
    for (int64_t i = 0; st == OSCAR_OK && i < osc_gguf_n_tensors(g); i++) {
        st = osc_model_check_layer(osc_gguf_path(g), osc_gguf_tensor(g, i)->name, "blk.", c->n_layer + c->n_layer_nextn,
                                   field);
    }
    return st;
}

static void gguf_close(void * ctx) {
    struct gguf_src * s = ctx;
    if (!s) return;
    free(s->tmp);
    osc_gguf_close(s->g);
    free(s);
}

enum oscar_status osc_model_open_gguf(const char * path, struct oscar_model * m, struct osc_weight_source * src) {
    struct gguf_src * s = calloc(1, sizeof *s);
    if (!s) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
    enum oscar_status st = osc_gguf_open(path, &s->g);
    if (st == OSCAR_OK) st = read_config(s->g, &m->config);
    if (st == OSCAR_OK) st = osc_model_config_check(&m->config, path);
    if (st == OSCAR_OK) st = check_layers(s->g, &m->config);
    if (st == OSCAR_OK) st = osc_sha256_file(path, m->source_sha256);
    if (st != OSCAR_OK) {
        gguf_close(s);
        return st;
    }
    s->c = &m->config;
    *src = (struct osc_weight_source){gguf_get, gguf_close, s};
    return OSCAR_OK;
}
