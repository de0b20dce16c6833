// load.c - oscar_model_load / oscar_model_open dispatch (GGUF file or HF
// directory), the layers read on demand, random init, free.
//
// Every tensor's shape is checked against the config by the format source;
// this file only decides what is required (biases for qwen2, q/k norms for
// qwen3, output unless tied; in a sparse layer the router, the stacked experts,
// the shared expert and glm4_moe's choice bias instead of the dense MLP) and where it lives. The config comes from the
// file, so all of it is checked before anything is allocated: sizes and their
// products (overflow-checked), then every tensor (present, right shape), and
// the loaders refuse layer tensors beyond the declared layer count.
//
// Memory: the tensors outside the layers (embedding, output norm, output) in
// one block; each layer in a block of its own (a sparse layer's holds all its
// experts, so acquiring a layer reads its experts), read from the still-open weight
// source when it is acquired and freed when it is released. oscar_model_load
// acquires every layer; oscar_model_open none, and a layer-major caller then
// holds two at a time (the one it runs, the one being prefetched). A prefetch
// reads on a thread of its own into the same block the caller would read
// into, so what is read is the same either way.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/load-internal.h"
#include "util/error.h"
#include "util/mem.h"

struct model_storage {
    float * globals;                 // tok_embd, output_norm, output
    float ** layer_mem;              // [n_layer] the block behind m->layers[l], or NULL
    int64_t layer_floats;            // floats in the largest layer block (dense or sparse)
    struct osc_weight_source src;    // open while any layer may still be read
    bool has_src;
    int32_t prefetch;                // layer being read by the prefetch thread, or -1
    pthread_t thread;
    enum oscar_status prefetch_st;   // its result, and its error message (errors are per thread)
    char prefetch_err[512];
};

const char * oscar_arch_name(enum oscar_arch arch) {
    switch (arch) {
    case OSCAR_ARCH_LLAMA: return "llama";
    case OSCAR_ARCH_QWEN2: return "qwen2";
    case OSCAR_ARCH_QWEN3: return "qwen3";
    case OSCAR_ARCH_PHI3: return "phi3";
    case OSCAR_ARCH_QWEN2_MOE: return "qwen2moe";
    case OSCAR_ARCH_QWEN3_MOE: return "qwen3moe";
    case OSCAR_ARCH_MIXTRAL: return "mixtral";
    case OSCAR_ARCH_GEMMA3: return "gemma3";
    case OSCAR_ARCH_GLM4_MOE: return "glm4moe";
    }
    return "unknown";
}

// Dimensions of the weight tensors; products of config numbers are
// overflow-checked (the config comes from an untrusted file).
struct dims {
    int64_t q, kv;   // n_head * head_dim, n_head_kv * head_dim
    int64_t dense;   // floats of a dense layer
    int64_t sparse;  // floats of a sparse (mixture-of-experts) layer; 0 without experts
    int64_t total;   // floats of the whole model, with a separate output matrix
};

#define MODEL_MAX_FLOATS ((int64_t) 1 << 40)

static bool mul(int64_t a, int64_t b, int64_t * out) {
    return !__builtin_mul_overflow(a, b, out) && *out <= MODEL_MAX_FLOATS;
}

static bool add(int64_t a, int64_t b, int64_t * out) {
    return !__builtin_add_overflow(a, b, out) && *out <= MODEL_MAX_FLOATS;
}

bool oscar_layer_is_moe(const struct oscar_model_config * c, int32_t l) {
    if (c->n_expert <= 0 || c->moe_step <= 0 || (l + 1) % c->moe_step != 0) return false;
    for (int32_t i = 0; i < c->n_dense_layers && i < OSCAR_MAX_DENSE_LAYERS; i++)
        if (c->dense_layers[i] == l) return false;
    return true;
}

// The floats of a sparse layer's MLP: router, E experts of Fe, the shared expert of Fs and its gate
// (unless ungated), the router's choice bias.
static bool moe_floats(const struct oscar_model_config * c, int64_t * out) {
    int64_t C = c->n_embd, x, y;
    bool ok = mul(c->n_expert, C, out) && mul(c->n_ff_expert, C, &x) && mul(x, 3, &x) && mul(x, c->n_expert, &y) &&
              add(*out, y, out) && mul(c->n_ff_shared, C, &x) && mul(x, 3, &x) && add(*out, x, out);
    ok = ok && (!c->expert_bias || add(*out, c->n_expert, out));
    return ok && (c->n_ff_shared <= 0 || c->shared_ungated || add(*out, C, out));
}

// Fills d, or returns false with *what naming the product that is too large.
static bool model_dims(const struct oscar_model_config * c, struct dims * d, const char ** what) {
    int64_t C = c->n_embd, vc, qc, kvc, fc, x, attn, moe = 0;
    *what = "num_attention_heads x head_dim";
    if (!mul(c->n_head, c->head_dim, &d->q) || d->q > INT32_MAX || !mul(d->q, C, &qc)) return false;
    *what = "num_key_value_heads x head_dim";
    if (!mul(c->n_head_kv, c->head_dim, &d->kv) || !mul(d->kv, C, &kvc)) return false;
    *what = "vocab_size x hidden_size";
    if (!mul(c->n_vocab, C, &vc)) return false;
    *what = "intermediate_size x hidden_size";
    if (!mul(c->n_ff, C, &fc)) return false;
    *what = "num_experts x moe_intermediate_size x hidden_size";
    if (c->n_expert > 0 && !moe_floats(c, &moe)) return false;
    // attention: 2 norms, q, k, v, o (+ q/k/v biases, + q/k norms); then the MLP: gate, up, down or the experts
    *what = "the size of one layer";
    bool ok = mul(C, c->post_norms ? 4 : 2, &attn) && add(attn, 2 * qc, &attn) && mul(kvc, 2, &x) &&
              add(attn, x, &attn);
    if (ok && c->qkv_bias) ok = add(attn, d->q + 2 * d->kv, &attn);
    if (ok && c->qk_norm) ok = add(attn, 2 * (int64_t) c->head_dim, &attn);
    if (!ok || !mul(fc, 3, &x) || !add(attn, x, &d->dense)) return false;
    d->sparse = 0;
    if (c->n_expert > 0 && !add(attn, moe, &d->sparse)) return false;
    *what = "num_hidden_layers x the size of one layer";
    d->total = 0;
    for (int32_t l = 0; l < c->n_layer; l++)
        if (!add(d->total, oscar_layer_is_moe(c, l) ? d->sparse : d->dense, &d->total)) return false;
    return add(d->total, 2 * vc, &d->total) && add(d->total, C, &d->total) &&
           add(d->total, c->has_rope_freqs ? oscar_rope_dim(c) / 2 : 0, &d->total);
}

// Floats of layer l's block.
static int64_t layer_floats(const struct oscar_model_config * c, int32_t l) {
    struct dims d;
    const char * what;
    OSCAR_ASSERT(model_dims(c, &d, &what)); // osc_model_config_check has passed
    return oscar_layer_is_moe(c, l) ? d.sparse : d.dense;
}

// Sigmoid routing's groups and scale (glm4_moe): groups of at least two experts (each is ranked by
// its best two), enough experts in the competing groups for the top-k, a finite scale.
static enum oscar_status check_routing(const struct oscar_model_config * c, const char * what) {
    const int32_t G = c->n_expert_group > 1 ? c->n_expert_group : 1;
    const int32_t used = G > 1 ? c->n_group_used : 1;
    if (c->expert_gating != OSCAR_GATING_SOFTMAX && c->expert_gating != OSCAR_GATING_SIGMOID)
        return osc_error(OSCAR_ERR_FORMAT, "%s: unknown expert gating %d", what, (int) c->expert_gating);
    if (c->n_expert_group < 0 || c->n_expert % G != 0 || (G > 1 && c->n_expert / G < 2) || used < 1 || used > G ||
        c->n_expert_used > used * (c->n_expert / G))
        return osc_error(OSCAR_ERR_FORMAT, "%s: bad expert groups (n_group %d, topk_group %d, %d experts, top-%d: "
                         "the groups must split the experts into groups of >= 2 and the %d chosen groups hold at "
                         "least top-k experts)", what, c->n_expert_group, c->n_group_used, c->n_expert,
                         c->n_expert_used, used);
    if (!(c->expert_scale >= 0.0f) || !isfinite(c->expert_scale))
        return osc_error(OSCAR_ERR_FORMAT, "%s: routed_scaling_factor %g is not a finite non-negative number", what,
                         (double) c->expert_scale);
    if (c->expert_gating == OSCAR_GATING_SOFTMAX && (G > 1 || c->expert_bias || c->expert_scale != 0.0f))
        return osc_error(OSCAR_ERR_FORMAT, "%s: expert groups, a choice bias or a routed scale need sigmoid "
                         "routing", what);
    return OSCAR_OK;
}

// The mixture-of-experts fields: consistent when present, all zero otherwise.
static enum oscar_status check_moe(const struct oscar_model_config * c, const char * what) {
    const bool moe_arch = c->arch == OSCAR_ARCH_QWEN2_MOE || c->arch == OSCAR_ARCH_QWEN3_MOE ||
                          c->arch == OSCAR_ARCH_MIXTRAL || c->arch == OSCAR_ARCH_GLM4_MOE;
    if (!moe_arch) {
        if (c->n_expert != 0 || c->n_expert_used != 0 || c->n_ff_expert != 0 || c->n_ff_shared != 0)
            return osc_error(OSCAR_ERR_FORMAT, "%s: experts given for the dense architecture %s", what,
                             oscar_arch_name(c->arch));
        return OSCAR_OK;
    }
    if (c->n_expert <= 0 || c->n_expert_used <= 0 || c->n_expert_used > c->n_expert || c->n_ff_expert <= 0 ||
        c->n_ff_shared < 0 || c->moe_step <= 0 || c->n_dense_layers < 0 || c->n_dense_layers > OSCAR_MAX_DENSE_LAYERS)
        return osc_error(OSCAR_ERR_FORMAT, "%s: bad experts (num_experts %d, num_experts_per_tok %d, "
                         "moe_intermediate_size %d, shared_expert_intermediate_size %d, decoder_sparse_step %d)",
                         what, c->n_expert, c->n_expert_used, c->n_ff_expert, c->n_ff_shared, c->moe_step);
    if (c->n_expert > OSCAR_MAX_EXPERTS)
        return osc_error(OSCAR_ERR_FORMAT, "%s: num_experts %d is implausibly large", what, c->n_expert);
    return check_routing(c, what);
}

enum oscar_status osc_model_config_check(const struct oscar_model_config * c, const char * what) {
    if (c->arch != OSCAR_ARCH_LLAMA && c->arch != OSCAR_ARCH_QWEN2 && c->arch != OSCAR_ARCH_QWEN3 &&
        c->arch != OSCAR_ARCH_PHI3 && c->arch != OSCAR_ARCH_QWEN2_MOE && c->arch != OSCAR_ARCH_QWEN3_MOE &&
        c->arch != OSCAR_ARCH_MIXTRAL && c->arch != OSCAR_ARCH_GEMMA3 &&
        c->arch != OSCAR_ARCH_GLM4_MOE) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: unknown architecture %d", what, (int) c->arch);
    }
    if (c->act != OSCAR_ACT_SILU && c->act != OSCAR_ACT_GELU_TANH)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: unknown MLP activation %d", what, (int) c->act);
    if (c->post_norms && c->n_expert > 0) // moe_mlp adds its output to the residual itself
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: sandwich norms with experts are not supported", what);
    if (c->swa_pattern < 0 || !(c->rope_theta_swa >= 0) || !(c->attn_scale >= 0) || !(c->norm_offset >= 0))
        return osc_error(OSCAR_ERR_FORMAT, "%s: negative swa_pattern, local RoPE base, score scale or norm offset",
                         what);
    if (c->n_layer <= 0 || c->n_embd <= 0 || c->n_head <= 0 || c->n_head_kv <= 0 || c->head_dim <= 0 ||
        c->n_ff <= 0 || c->n_vocab <= 0) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: non-positive model size (layers %d, embd %d, heads %d/%d, "
                         "head_dim %d, ff %d, vocab %d)", what, c->n_layer, c->n_embd, c->n_head, c->n_head_kv,
                         c->head_dim, c->n_ff, c->n_vocab);
    }
    if (c->n_head % c->n_head_kv != 0 || c->head_dim % 2 != 0) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: %d query heads are not a multiple of %d KV heads, or head_dim %d "
                         "is odd", what, c->n_head, c->n_head_kv, c->head_dim);
    }
    enum oscar_status st = check_moe(c, what);
    if (st != OSCAR_OK) return st;
    // every tensor, and the whole slab, must stay addressable
    struct dims d;
    const char * field = "num_hidden_layers";
    if (c->n_layer > 100000 || !model_dims(c, &d, &field)) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: %s is implausibly large (layers %d, embd %d, heads %d/%d, "
                         "head_dim %d, ff %d, vocab %d)", what, field, c->n_layer, c->n_embd, c->n_head,
                         c->n_head_kv, c->head_dim, c->n_ff, c->n_vocab);
    }
    if (!(c->rope_theta > 0) || !(c->rms_eps > 0)) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: rope_theta and rms_eps must be positive", what);
    }
    return OSCAR_OK;
}

// Layer N of a tensor named "<prefix>N.<rest>", saturated at INT32_MAX; -1
// when the name is not a layer tensor.
static int32_t layer_of(const char * name, const char * prefix) {
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0) return -1;
    const char * p = name + n;
    int64_t v = 0;
    int k = 0;
    for (; p[k] >= '0' && p[k] <= '9'; k++) {
        if (v <= INT32_MAX) v = v * 10 + (p[k] - '0'); // saturates past INT32_MAX
    }
    if (k == 0 || p[k] != '.') return -1;
    return v > INT32_MAX ? INT32_MAX : (int32_t) v;
}

enum oscar_status osc_model_check_layer(const char * what, const char * tensor, const char * prefix,
                                        int32_t n_layer, const char * field) {
    int32_t layer = layer_of(tensor, prefix);
    if (layer < n_layer) return OSCAR_OK;
    return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s' is in layer %d but %s is %d (the weights hold more "
                     "layers than the config declares)", what, tensor, (int) layer, field, (int) n_layer);
}

static float * take(float ** cur, int64_t n) {
    float * p = *cur;
    *cur += n;
    return p;
}

// Points w's tensors into block (layer_floats floats, laid out as model_dims counts them).
static void layout_layer(const struct oscar_model_config * c, int32_t l, float * block, struct oscar_layer_weights * w) {
    int64_t C = c->n_embd, q = (int64_t) c->n_head * c->head_dim, kv = (int64_t) c->n_head_kv * c->head_dim;
    float * cur = block;
    memset(w, 0, sizeof *w);
    w->attn_norm = take(&cur, C);
    w->wq = take(&cur, q * C);
    w->wk = take(&cur, kv * C);
    w->wv = take(&cur, kv * C);
    if (c->qkv_bias) {
        w->bq = take(&cur, q);
        w->bk = take(&cur, kv);
        w->bv = take(&cur, kv);
    }
    if (c->qk_norm) {
        w->q_norm = take(&cur, c->head_dim);
        w->k_norm = take(&cur, c->head_dim);
    }
    w->wo = take(&cur, C * q);
    w->ffn_norm = take(&cur, C);
    if (c->post_norms) {
        w->attn_post_norm = take(&cur, C);
        w->ffn_post_norm = take(&cur, C);
    }
    if (!oscar_layer_is_moe(c, l)) {
        w->w_gate = take(&cur, (int64_t) c->n_ff * C);
        w->w_up = take(&cur, (int64_t) c->n_ff * C);
        w->w_down = take(&cur, C * c->n_ff);
        return;
    }
    const int64_t EF = (int64_t) c->n_expert * c->n_ff_expert, FS = c->n_ff_shared;
    w->router = take(&cur, (int64_t) c->n_expert * C);
    w->exp_gate = take(&cur, EF * C);
    w->exp_up = take(&cur, EF * C);
    w->exp_down = take(&cur, EF * C);
    if (FS > 0) {
        w->sh_gate = take(&cur, FS * C);
        w->sh_up = take(&cur, FS * C);
        w->sh_down = take(&cur, C * FS);
        if (!c->shared_ungated) w->sh_scale = take(&cur, C);
    }
    if (c->expert_bias) w->exp_bias = take(&cur, c->n_expert);
}

// Reads every tensor of layer i into l, or with l == NULL only checks that
// each one is there with its shape.
static enum oscar_status visit_layer(const struct oscar_model_config * c, const struct oscar_layer_weights * l,
                                     int32_t i, const struct osc_weight_source * s) {
    int64_t C = c->n_embd, q = (int64_t) c->n_head * c->head_dim, kv = (int64_t) c->n_head_kv * c->head_dim;
    int64_t F = c->n_ff, E = c->n_expert, EF = E * c->n_ff_expert, FS = c->n_ff_shared;
    const struct oscar_layer_weights none = {0}, * w = l ? l : &none;
    bool b = c->qkv_bias, n = c->qk_norm, moe = oscar_layer_is_moe(c, i), dense = !moe, sh = moe && FS > 0;
    bool pn = c->post_norms;
    struct { enum osc_wkind k; int64_t r, cl; float * dst; bool need; } t[] = {
        {OSC_W_ATTN_NORM, C, 0, w->attn_norm, true}, {OSC_W_Q, q, C, w->wq, true}, {OSC_W_K, kv, C, w->wk, true},
        {OSC_W_V, kv, C, w->wv, true}, {OSC_W_BQ, q, 0, w->bq, b}, {OSC_W_BK, kv, 0, w->bk, b},
        {OSC_W_BV, kv, 0, w->bv, b}, {OSC_W_QNORM, c->head_dim, 0, w->q_norm, n},
        {OSC_W_KNORM, c->head_dim, 0, w->k_norm, n}, {OSC_W_O, C, q, w->wo, true},
        {OSC_W_POST_ATTN_NORM, C, 0, w->attn_post_norm, pn}, {OSC_W_FFN_NORM, C, 0, w->ffn_norm, true},
        {OSC_W_POST_FFN_NORM, C, 0, w->ffn_post_norm, pn}, {OSC_W_GATE, F, C, w->w_gate, dense},
        {OSC_W_UP, F, C, w->w_up, dense}, {OSC_W_DOWN, C, F, w->w_down, dense},
        {OSC_W_ROUTER, E, C, w->router, moe}, {OSC_W_EXP_GATE, EF, C, w->exp_gate, moe},
        {OSC_W_EXP_UP, EF, C, w->exp_up, moe}, {OSC_W_EXP_DOWN, E * C, c->n_ff_expert, w->exp_down, moe},
        {OSC_W_SH_GATE, FS, C, w->sh_gate, sh}, {OSC_W_SH_UP, FS, C, w->sh_up, sh},
        {OSC_W_SH_DOWN, C, FS, w->sh_down, sh}, {OSC_W_SH_SCALE, 1, C, w->sh_scale, sh && !c->shared_ungated},
        {OSC_W_EXP_BIAS, E, 0, w->exp_bias, moe && c->expert_bias},
    };
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        if (!t[k].need) continue;
        enum oscar_status st = s->get(s->ctx, t[k].k, i, t[k].r, t[k].cl, t[k].dst);
        if (st != OSCAR_OK) return st;
    }
    return OSCAR_OK;
}

// The check pass (nothing is read or allocated): every tensor the config
// asks for is present with its shape. A missing output is tied here when
// the caller allows it.
static enum oscar_status check_tensors(struct oscar_model * m, const struct osc_weight_source * src,
                                       bool tie_if_missing, bool * with_output) {
    const struct oscar_model_config * c = &m->config;
    enum oscar_status st = src->get(src->ctx, OSC_W_EMBD, -1, c->n_vocab, c->n_embd, NULL);
    if (st == OSCAR_OK) st = src->get(src->ctx, OSC_W_OUT_NORM, -1, c->n_embd, 0, NULL);
    if (st == OSCAR_OK && *with_output) {
        st = src->get(src->ctx, OSC_W_OUTPUT, -1, c->n_vocab, c->n_embd, NULL);
        if (st == OSCAR_ERR_NOT_FOUND && tie_if_missing) {
            *with_output = false;
            m->config.tied_embeddings = true;
            st = OSCAR_OK;
        }
    }
    if (st == OSCAR_OK && c->has_rope_freqs)
        st = src->get(src->ctx, OSC_W_ROPE_FREQS, -1, oscar_rope_dim(c) / 2, 0, NULL);
    for (int32_t i = 0; st == OSCAR_OK && i < c->n_layer; i++) st = visit_layer(c, NULL, i, src);
    return st;
}

enum oscar_status osc_model_attach(struct oscar_model * m, const struct osc_weight_source * src, bool tie_if_missing,
                                   enum osc_vocab_read vocab) {
    const struct oscar_model_config * c = &m->config;
    struct model_storage * ms = calloc(1, sizeof *ms);
    if (!ms) {
        if (src->close) src->close(src->ctx);
        return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", m->source);
    }
    ms->src = *src, ms->has_src = true, ms->prefetch = -1;
    m->storage = ms;
    enum oscar_status st = osc_model_config_check(c, m->source);
    if (st != OSCAR_OK) return st;
    // With tied embeddings no second V x C block is allocated.
    bool with_output = !c->tied_embeddings;
    // Validate first, allocate after: the blocks are sized from the config, so
    // they are only allocated once tensors of exactly those shapes (whose data
    // the format reader has checked to lie inside the file) back all of them.
    if ((st = check_tensors(m, src, tie_if_missing, &with_output)) != OSCAR_OK) return st;
    const bool read_embd = vocab != OSC_READ_VOCAB_NONE;
    const bool read_output = with_output && vocab == OSC_READ_VOCAB_ALL; // checked above either way
    struct dims d;
    const char * field;
    OSCAR_ASSERT(model_dims(c, &d, &field)); // osc_model_config_check has passed
    const int64_t C = c->n_embd, VC = (int64_t) c->n_vocab * C, NF = c->has_rope_freqs ? oscar_rope_dim(c) / 2 : 0;
    ms->layer_floats = d.dense > d.sparse ? d.dense : d.sparse;
    const int64_t n_vc = (read_embd ? 1 : 0) + (read_output ? 1 : 0);
    ms->globals = malloc((size_t) (VC * n_vc + C + NF) * sizeof(float));
    ms->layer_mem = calloc((size_t) c->n_layer, sizeof *ms->layer_mem);
    m->layers = calloc((size_t) c->n_layer, sizeof *m->layers);
    if (!ms->globals || !ms->layer_mem || !m->layers) {
        return osc_error(OSCAR_ERR_NOMEM, "%s: cannot allocate %lld MiB of embeddings", m->source,
                         (long long) (VC * n_vc * 4 >> 20));
    }
    float * cur = ms->globals;
    m->tok_embd = read_embd ? take(&cur, VC) : NULL;
    m->output_norm = take(&cur, C);
    m->output = read_output ? take(&cur, VC) : with_output ? NULL : m->tok_embd;
    if (NF) m->rope_freqs = take(&cur, NF);
    if (read_embd) st = src->get(src->ctx, OSC_W_EMBD, -1, c->n_vocab, c->n_embd, m->tok_embd);
    if (st == OSCAR_OK) st = src->get(src->ctx, OSC_W_OUT_NORM, -1, c->n_embd, 0, m->output_norm);
    if (st == OSCAR_OK && read_output) st = src->get(src->ctx, OSC_W_OUTPUT, -1, c->n_vocab, c->n_embd, m->output);
    if (st == OSCAR_OK && NF) st = src->get(src->ctx, OSC_W_ROPE_FREQS, -1, NF, 0, m->rope_freqs);
    for (int64_t i = 0; st == OSCAR_OK && i < NF; i++) // divisors of the RoPE frequencies
        if (!(m->rope_freqs[i] > 0.0f) || !isfinite(m->rope_freqs[i]))
            st = osc_error(OSCAR_ERR_FORMAT, "%s: rope_freqs.weight[%lld] = %g is not a positive finite divisor",
                           m->source, (long long) i, (double) m->rope_freqs[i]);
    return st;
}

// Reads layer l into a new block (not yet visible in m->layers). Any thread.
static enum oscar_status read_layer(const struct oscar_model * m, int32_t l, float ** out) {
    const struct model_storage * ms = m->storage;
    *out = NULL;
    if (!ms->has_src)
        return osc_error(OSCAR_ERR_INVALID, "%s: layer %d was released and its file is closed", m->source, (int) l);
    const int64_t n = layer_floats(&m->config, l);
    // huge pages where the kernel has them: a layer's first write then costs a few hundred page
    // faults, not one per 4 KiB (an 8B layer in fp32 is 0.8 GB, read again for every layer)
    float * block = osc_alloc_large((size_t) n * sizeof(float));
    if (!block) {
        return osc_error(OSCAR_ERR_NOMEM, "%s: cannot allocate %lld MiB for layer %d", m->source,
                         (long long) (n * 4 >> 20), (int) l);
    }
    struct oscar_layer_weights w;
    layout_layer(&m->config, l, block, &w);
    enum oscar_status st = visit_layer(&m->config, &w, l, &ms->src);
    if (st != OSCAR_OK) {
        free(block);
        return st;
    }
    *out = block;
    return OSCAR_OK;
}

struct prefetch_job {
    struct oscar_model * m;
    int32_t layer;
    float * block;
};

static void * prefetch_main(void * arg) {
    struct prefetch_job * job = arg;
    struct model_storage * ms = job->m->storage;
    ms->prefetch_st = read_layer(job->m, job->layer, &job->block);
    if (ms->prefetch_st != OSCAR_OK) snprintf(ms->prefetch_err, sizeof ms->prefetch_err, "%s", oscar_last_error());
    return job;
}

// Waits for the prefetch thread, if any, and installs what it read.
static enum oscar_status join_prefetch(struct oscar_model * m) {
    struct model_storage * ms = m->storage;
    if (ms->prefetch < 0) return OSCAR_OK;
    void * ret = NULL;
    pthread_join(ms->thread, &ret);
    struct prefetch_job * job = ret;
    const int32_t l = ms->prefetch;
    ms->prefetch = -1;
    enum oscar_status st = ms->prefetch_st;
    if (st == OSCAR_OK) {
        ms->layer_mem[l] = job->block;
        layout_layer(&m->config, l, job->block, &m->layers[l]);
    }
    free(job);
    return st == OSCAR_OK ? OSCAR_OK : osc_error(st, "%s", ms->prefetch_err);
}

static bool valid_layer(const struct oscar_model * m, int32_t l) {
    return m && m->storage && l >= 0 && l < m->config.n_layer;
}

bool oscar_model_layer_resident(const struct oscar_model * m, int32_t l) {
    return valid_layer(m, l) && ((const struct model_storage *) m->storage)->layer_mem[l] != NULL;
}

enum oscar_status oscar_model_layer_acquire(struct oscar_model * m, int32_t l) {
    if (!valid_layer(m, l)) return osc_error(OSCAR_ERR_INVALID, "model: no layer %d", (int) l);
    struct model_storage * ms = m->storage;
    enum oscar_status st = join_prefetch(m);
    if (st != OSCAR_OK || ms->layer_mem[l]) return st;
    if ((st = read_layer(m, l, &ms->layer_mem[l])) == OSCAR_OK) layout_layer(&m->config, l, ms->layer_mem[l], &m->layers[l]);
    return st;
}

void oscar_model_layer_prefetch(struct oscar_model * m, int32_t l) {
    if (!valid_layer(m, l)) return;
    struct model_storage * ms = m->storage;
    if (ms->layer_mem[l] || ms->prefetch >= 0 || !ms->has_src) return; // resident, or one read at a time
    struct prefetch_job * job = calloc(1, sizeof *job);
    if (!job) return; // acquire reads it then
    job->m = m, job->layer = l;
    ms->prefetch = l;
    if (pthread_create(&ms->thread, NULL, prefetch_main, job) != 0) {
        ms->prefetch = -1;
        free(job);
    }
}

void oscar_model_layer_release(struct oscar_model * m, int32_t l) {
    if (!valid_layer(m, l)) return;
    struct model_storage * ms = m->storage;
    if (!ms->has_src) return; // a loaded model keeps its layers (its file is closed)
    if (ms->prefetch == l) (void) join_prefetch(m); // then freed like a read one (its error, if any, dropped)
    free(ms->layer_mem[l]);
    ms->layer_mem[l] = NULL;
    memset(&m->layers[l], 0, sizeof m->layers[l]);
}

bool oscar_model_streamed(const struct oscar_model * m) {
    return m && m->storage && ((const struct model_storage *) m->storage)->has_src;
}

int64_t oscar_model_layer_bytes(const struct oscar_model * m) {
    return m && m->storage ? ((const struct model_storage *) m->storage)->layer_floats * (int64_t) sizeof(float) : 0;
}

// Every layer resident, the weight source closed: what oscar_model_load returns.
static enum oscar_status acquire_all(struct oscar_model * m) {
    struct model_storage * ms = m->storage;
    enum oscar_status st = OSCAR_OK;
    for (int32_t l = 0; st == OSCAR_OK && l < m->config.n_layer; l++) st = oscar_model_layer_acquire(m, l);
    if (st == OSCAR_OK) {
        if (ms->src.close) ms->src.close(ms->src.ctx);
        ms->has_src = false;
    }
    return st;
}

void oscar_model_free(struct oscar_model * m) {
    if (!m) return;
    struct model_storage * ms = m->storage;
    if (ms) {
        (void) join_prefetch(m);
        if (ms->has_src && ms->src.close) ms->src.close(ms->src.ctx);
        for (int32_t l = 0; ms->layer_mem && l < m->config.n_layer; l++) free(ms->layer_mem[l]);
        free(ms->layer_mem);
        free(ms->globals);
        free(ms);
    }
    free(m->layers);
    free(m);
}

static enum oscar_status open_model(const char * path, enum osc_vocab_read vocab, struct oscar_model ** out) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) return osc_error(OSCAR_ERR_NOT_FOUND, "%s: no such file or directory", path);
    if (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode)) { // a FIFO would block in open()
        return osc_error(OSCAR_ERR_IO, "%s: not a regular file or a directory", path);
    }
    struct oscar_model * m = calloc(1, sizeof *m);
    if (!m) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
    snprintf(m->source, sizeof m->source, "%s", path);
    struct osc_weight_source src;
    enum oscar_status st = S_ISDIR(sb.st_mode) ? osc_model_open_hf(path, m, &src) : osc_model_open_gguf(path, m, &src);
    if (st == OSCAR_OK) st = osc_model_attach(m, &src, false, vocab);
    if (st != OSCAR_OK) {
        oscar_model_free(m);
        return st;
    }
    *out = m;
    return OSCAR_OK;
}

enum oscar_status oscar_model_open(const char * path, struct oscar_model ** out) {
    return open_model(path, OSC_READ_VOCAB_ALL, out);
}

enum oscar_status oscar_model_open_no_head(const char * path, struct oscar_model ** out) {
    return open_model(path, OSC_READ_VOCAB_NO_HEAD, out);
}

enum oscar_status oscar_model_open_lazy(const char * path, struct oscar_model ** out) {
    return open_model(path, OSC_READ_VOCAB_NONE, out);
}

enum oscar_status oscar_model_read_vocab(const struct oscar_model * m, bool output, float ** out) {
    *out = NULL;
    const struct oscar_model_config * c = &m->config;
    const struct model_storage * ms = m->storage;
    const float * resident = output ? m->output : m->tok_embd;
    const size_t n = (size_t) c->n_vocab * (size_t) c->n_embd;
    if (!resident && (!ms || !ms->has_src))
        return osc_error(OSCAR_ERR_INVALID, "%s: the %s is not resident and the file is closed", m->source,
                         output ? "LM head" : "token embedding");
    float * a = osc_alloc_large(n * sizeof(float));
    if (!a) return osc_error(OSCAR_ERR_NOMEM, "%s: cannot allocate %zu MiB for the %s", m->source, n * 4 >> 20,
                             output ? "LM head" : "token embedding");
    enum oscar_status st = OSCAR_OK;
    if (resident) memcpy(a, resident, n * sizeof(float));
    else st = ms->src.get(ms->src.ctx, output && !c->tied_embeddings ? OSC_W_OUTPUT : OSC_W_EMBD, -1, c->n_vocab,
                          c->n_embd, a);
    if (st != OSCAR_OK) {
        free(a);
        return st;
    }
    *out = a;
    return OSCAR_OK;
}

enum oscar_status oscar_model_read_layer(const struct oscar_model * m, int32_t l, float ** block,
                                         struct oscar_layer_weights * w) {
    *block = NULL;
    memset(w, 0, sizeof *w);
    if (!valid_layer(m, l)) return osc_error(OSCAR_ERR_INVALID, "model: no layer %d", (int) l);
    enum oscar_status st = read_layer(m, l, block);
    if (st == OSCAR_OK) layout_layer(&m->config, l, *block, w);
    return st;
}

enum oscar_status oscar_model_load(const char * path, struct oscar_model ** out) {
    enum oscar_status st = oscar_model_open(path, out);
    if (st == OSCAR_OK && (st = acquire_all(*out)) != OSCAR_OK) {
        oscar_model_free(*out);
        *out = NULL;
    }
    return st;
}

// ---- random init ---------------------------------------------------------------------
static uint64_t splitmix64(uint64_t * s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t * s) {
    return ((double) (splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Any tensor can be read first: splitmix64's state after k draws is seed +
// k * its increment, and the check pass (which visits every tensor in the
// order a whole-model fill reads them) records each tensor's first draw. A
// streamed random model is therefore the same model as a loaded one.
#define RANDOM_KINDS OSC_W_N_KINDS

struct random_src {
    uint64_t seed;
    int32_t n_layer;
    uint64_t * first_draw; // [(n_layer + 1) * RANDOM_KINDS]; row 0: the tensors outside the layers
    uint64_t n_draws;      // counted by the check pass
    float norm_offset;     // the config's
};

static void random_close(void * ctx) {
    struct random_src * r = ctx;
    if (r) free(r->first_draw);
    free(r);
}

static enum oscar_status random_get(void * ctx, enum osc_wkind kind, int32_t layer, int64_t rows, int64_t cols,
                                    float * dst) {
    struct random_src * r = ctx;
    const int64_t n = rows * (cols ? cols : 1);
    uint64_t * first = &r->first_draw[(size_t) (layer + 1) * RANDOM_KINDS + kind];
    if (!dst) { // check pass: every shape exists; count the draws
        *first = r->n_draws;
        r->n_draws += 2 * (uint64_t) ((n + 1) / 2);
        return OSCAR_OK;
    }
    uint64_t state = r->seed + *first * 0x9e3779b97f4a7c15ull;
    bool norm = kind == OSC_W_OUT_NORM || kind == OSC_W_ATTN_NORM || kind == OSC_W_FFN_NORM ||
                kind == OSC_W_QNORM || kind == OSC_W_KNORM || kind == OSC_W_ROPE_FREQS ||
                kind == OSC_W_POST_ATTN_NORM || kind == OSC_W_POST_FFN_NORM;
    // norms multiply by norm_offset + w: stored so that the factor is 1
    const float one = kind == OSC_W_ROPE_FREQS ? 1.0f : 1.0f - r->norm_offset;
    for (int64_t i = 0; i < n; i += 2) { // Box-Muller pairs
        double u1 = uniform01(&state), u2 = uniform01(&state);
        double rad = sqrt(-2.0 * log(u1));
        dst[i] = norm ? one : (float) (0.02 * rad * cos(6.283185307179586 * u2));
        if (i + 1 < n) dst[i + 1] = norm ? one : (float) (0.02 * rad * sin(6.283185307179586 * u2));
    }
    return OSCAR_OK;
}

enum oscar_status oscar_model_open_random(const struct oscar_model_config * cfg, uint64_t seed,
                                          struct oscar_model ** out) {
    *out = NULL;
    struct oscar_model * m = calloc(1, sizeof *m);
    struct random_src * r = calloc(1, sizeof *r);
    if (m) m->config = *cfg;
    enum oscar_status st = m && r ? osc_model_config_check(cfg, "random model") : OSCAR_ERR_NOMEM;
    if (st == OSCAR_OK) {
        r->seed = seed, r->n_layer = cfg->n_layer, r->norm_offset = cfg->norm_offset;
        r->first_draw = calloc(((size_t) cfg->n_layer + 1) * RANDOM_KINDS, sizeof *r->first_draw);
        if (!r->first_draw) st = OSCAR_ERR_NOMEM;
    }
    if (st != OSCAR_OK) {
        random_close(r);
        free(m);
        return st == OSCAR_ERR_NOMEM ? osc_error(st, "random model: out of memory") : st;
    }
    snprintf(m->source, sizeof m->source, "random(seed=%llu)", (unsigned long long) seed);
    struct osc_weight_source src = {random_get, random_close, r};
    if ((st = osc_model_attach(m, &src, false, OSC_READ_VOCAB_ALL)) != OSCAR_OK) {
        oscar_model_free(m);
        return st;
    }
    *out = m;
    return OSCAR_OK;
}

enum oscar_status oscar_model_init_random(const struct oscar_model_config * cfg, uint64_t seed,
                                          struct oscar_model ** out) {
    enum oscar_status st = oscar_model_open_random(cfg, seed, out);
    if (st == OSCAR_OK && (st = acquire_all(*out)) != OSCAR_OK) {
        oscar_model_free(*out);
        *out = NULL;
    }
    return st;
}
