// load.c - oscar_model_load dispatch (GGUF file or HF directory), one fp32
// slab for all weights, random init, free.
//
// Every tensor's shape is checked against the config by the format source;
// this file only decides what is required (biases for qwen2, q/k norms for
// qwen3, output unless tied) and where it lives in the slab. The config
// comes from the file, so all of it is checked before the slab is
// allocated: sizes and their products (overflow-checked), then every tensor
// (present, right shape), and the loaders refuse layer tensors beyond the
// declared layer count.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/load-internal.h"
#include "util/error.h"

struct model_storage {
    float * slab;
};

const char * oscar_arch_name(enum oscar_arch arch) {
    switch (arch) {
    case OSCAR_ARCH_LLAMA: return "llama";
    case OSCAR_ARCH_QWEN2: return "qwen2";
    case OSCAR_ARCH_QWEN3: return "qwen3";
    case OSCAR_ARCH_PHI3: return "phi3";
    }
    return "unknown";
}

// Dimensions of the weight tensors; products of config numbers are
// overflow-checked (the config comes from an untrusted file).
struct dims {
    int64_t q, kv;  // n_head * head_dim, n_head_kv * head_dim
    int64_t layer;  // floats of one layer
    int64_t total;  // floats of the whole slab, with a separate output matrix
};

#define MODEL_MAX_FLOATS ((int64_t) 1 << 40)

static bool mul(int64_t a, int64_t b, int64_t * out) {
    return !__builtin_mul_overflow(a, b, out) && *out <= MODEL_MAX_FLOATS;
}

static bool add(int64_t a, int64_t b, int64_t * out) {
    return !__builtin_add_overflow(a, b, out) && *out <= MODEL_MAX_FLOATS;
}

// Fills d, or returns false with *what naming the product that is too large.
static bool model_dims(const struct oscar_model_config * c, struct dims * d, const char ** what) {
    int64_t C = c->n_embd, vc, qc, kvc, fc, x;
    *what = "num_attention_heads x head_dim";
    if (!mul(c->n_head, c->head_dim, &d->q) || d->q > INT32_MAX || !mul(d->q, C, &qc)) return false;
    *what = "num_key_value_heads x head_dim";
    if (!mul(c->n_head_kv, c->head_dim, &d->kv) || !mul(d->kv, C, &kvc)) return false;
    *what = "vocab_size x hidden_size";
    if (!mul(c->n_vocab, C, &vc)) return false;
    *what = "intermediate_size x hidden_size";
    if (!mul(c->n_ff, C, &fc)) return false;
    // one layer: 2 norms, q, k, v, o, gate, up, down (+ q/k/v biases, + q/k norms)
    *what = "the size of one layer";
    bool ok = mul(C, 2, &d->layer) && add(d->layer, 2 * qc, &d->layer) && mul(kvc, 2, &x) &&
              add(d->layer, x, &d->layer) && mul(fc, 3, &x) && add(d->layer, x, &d->layer);
    if (ok && c->qkv_bias) ok = add(d->layer, d->q + 2 * d->kv, &d->layer);
    if (ok && c->qk_norm) ok = add(d->layer, 2 * (int64_t) c->head_dim, &d->layer);
    if (!ok) return false;
    *what = "num_hidden_layers x the size of one layer";
    return mul(d->layer, c->n_layer, &d->total) && add(d->total, 2 * vc, &d->total) && add(d->total, C, &d->total) &&
           add(d->total, c->has_rope_freqs ? oscar_rope_dim(c) / 2 : 0, &d->total);
}

enum oscar_status osc_model_config_check(const struct oscar_model_config * c, const char * what) {
    if (c->arch != OSCAR_ARCH_LLAMA && c->arch != OSCAR_ARCH_QWEN2 && c->arch != OSCAR_ARCH_QWEN3 &&
        c->arch != OSCAR_ARCH_PHI3) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: unknown architecture %d", what, (int) c->arch);
    }
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

static enum oscar_status alloc_weights(struct oscar_model * m, bool with_output) {
    const struct oscar_model_config * c = &m->config;
    struct dims d;
    const char * field;
    OSCAR_ASSERT(model_dims(c, &d, &field)); // osc_model_config_check has passed
    int64_t C = c->n_embd, q = d.q, kv = d.kv, VC = (int64_t) c->n_vocab * C;
    int64_t total = d.total - (with_output ? 0 : VC);
    struct model_storage * st = calloc(1, sizeof *st);
    m->layers = calloc((size_t) c->n_layer, sizeof *m->layers);
    if (st) st->slab = malloc((size_t) total * sizeof(float));
    m->storage = st;
    if (!st || !st->slab || !m->layers) {
        return osc_error(OSCAR_ERR_NOMEM, "%s: cannot allocate %lld MiB of weights", m->source,
                         (long long) (total * 4 >> 20));
    }
    float * cur = st->slab;
    m->tok_embd = take(&cur, VC);
    m->output_norm = take(&cur, C);
    m->output = with_output ? take(&cur, VC) : m->tok_embd;
    if (c->has_rope_freqs) m->rope_freqs = take(&cur, oscar_rope_dim(c) / 2);
    for (int32_t i = 0; i < c->n_layer; i++) {
        struct oscar_layer_weights * l = &m->layers[i];
        l->attn_norm = take(&cur, C);
        l->wq = take(&cur, q * C);
        l->wk = take(&cur, kv * C);
        l->wv = take(&cur, kv * C);
        if (c->qkv_bias) {
            l->bq = take(&cur, q);
            l->bk = take(&cur, kv);
            l->bv = take(&cur, kv);
        }
        if (c->qk_norm) {
            l->q_norm = take(&cur, c->head_dim);
            l->k_norm = take(&cur, c->head_dim);
        }
        l->wo = take(&cur, C * q);
        l->ffn_norm = take(&cur, C);
        l->w_gate = take(&cur, (int64_t) c->n_ff * C);
        l->w_up = take(&cur, (int64_t) c->n_ff * C);
        l->w_down = take(&cur, C * c->n_ff);
    }
    OSCAR_ASSERT(cur == st->slab + total);
    return OSCAR_OK;
}

// Reads every tensor of layer i into l, or with l == NULL only checks that
// each one is there with its shape.
static enum oscar_status visit_layer(const struct oscar_model_config * c, const struct oscar_layer_weights * l,
                                     int32_t i, const struct osc_weight_source * s) {
    int64_t C = c->n_embd, q = (int64_t) c->n_head * c->head_dim, kv = (int64_t) c->n_head_kv * c->head_dim;
    int64_t F = c->n_ff;
    const struct oscar_layer_weights none = {0}, * w = l ? l : &none;
    bool b = c->qkv_bias, n = c->qk_norm;
    struct { enum osc_wkind k; int64_t r, cl; float * dst; bool need; } t[] = {
        {OSC_W_ATTN_NORM, C, 0, w->attn_norm, true}, {OSC_W_Q, q, C, w->wq, true}, {OSC_W_K, kv, C, w->wk, true},
        {OSC_W_V, kv, C, w->wv, true}, {OSC_W_BQ, q, 0, w->bq, b}, {OSC_W_BK, kv, 0, w->bk, b},
        {OSC_W_BV, kv, 0, w->bv, b}, {OSC_W_QNORM, c->head_dim, 0, w->q_norm, n},
        {OSC_W_KNORM, c->head_dim, 0, w->k_norm, n}, {OSC_W_O, C, q, w->wo, true},
        {OSC_W_FFN_NORM, C, 0, w->ffn_norm, true}, {OSC_W_GATE, F, C, w->w_gate, true},
        {OSC_W_UP, F, C, w->w_up, true}, {OSC_W_DOWN, C, F, w->w_down, true},
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
    if (st == OSCAR_OK && c->has_rope_freqs) st = src->get(src->ctx, OSC_W_ROPE_FREQS, -1, oscar_rope_dim(c) / 2, 0,
                                                           NULL);
    for (int32_t i = 0; st == OSCAR_OK && i < c->n_layer; i++) st = visit_layer(c, NULL, i, src);
    return st;
}

enum oscar_status osc_model_fill(struct oscar_model * m, const struct osc_weight_source * src, bool tie_if_missing) {
    const struct oscar_model_config * c = &m->config;
    enum oscar_status st = osc_model_config_check(c, m->source);
    if (st != OSCAR_OK) return st;
    // With tied embeddings no second V x C block is allocated.
    bool with_output = !c->tied_embeddings;
    // Validate first, allocate after: the slab is sized from the config, so
    // it is only allocated once tensors of exactly those shapes (whose data
    // the format reader has checked to lie inside the file) back all of it.
    st = check_tensors(m, src, tie_if_missing, &with_output);
    if (st == OSCAR_OK) st = alloc_weights(m, with_output);
    if (st != OSCAR_OK) return st;
    st = src->get(src->ctx, OSC_W_EMBD, -1, c->n_vocab, c->n_embd, m->tok_embd);
    if (st == OSCAR_OK) st = src->get(src->ctx, OSC_W_OUT_NORM, -1, c->n_embd, 0, m->output_norm);
    if (st == OSCAR_OK && with_output) st = src->get(src->ctx, OSC_W_OUTPUT, -1, c->n_vocab, c->n_embd, m->output);
    if (st == OSCAR_OK && m->rope_freqs)
        st = src->get(src->ctx, OSC_W_ROPE_FREQS, -1, oscar_rope_dim(c) / 2, 0, m->rope_freqs);
    for (int32_t i = 0; st == OSCAR_OK && i < c->n_layer; i++) st = visit_layer(c, &m->layers[i], i, src);
    return st;
}

void oscar_model_free(struct oscar_model * m) {
    if (!m) return;
    struct model_storage * st = m->storage;
    if (st) free(st->slab);
    free(st);
    free(m->layers);
    free(m);
}

enum oscar_status oscar_model_load(const char * path, struct oscar_model ** out) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) return osc_error(OSCAR_ERR_NOT_FOUND, "%s: no such file or directory", path);
    if (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode)) { // a FIFO would block in open()
        return osc_error(OSCAR_ERR_IO, "%s: not a regular file or a directory", path);
    }
    struct oscar_model * m = calloc(1, sizeof *m);
    if (!m) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
    snprintf(m->source, sizeof m->source, "%s", path);
    enum oscar_status st = S_ISDIR(sb.st_mode) ? osc_model_load_hf(path, m) : osc_model_load_gguf(path, m);
    if (st != OSCAR_OK) {
        oscar_model_free(m);
        return st;
    }
    *out = m;
    return OSCAR_OK;
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

struct random_src {
    uint64_t state;
};

static enum oscar_status random_get(void * ctx, enum osc_wkind kind, int32_t layer, int64_t rows, int64_t cols,
                                    float * dst) {
    (void) layer;
    struct random_src * r = ctx;
    if (!dst) return OSCAR_OK; // check pass: every shape exists
    int64_t n = rows * (cols ? cols : 1);
    bool norm = kind == OSC_W_OUT_NORM || kind == OSC_W_ATTN_NORM || kind == OSC_W_FFN_NORM ||
                kind == OSC_W_QNORM || kind == OSC_W_KNORM || kind == OSC_W_ROPE_FREQS;
    for (int64_t i = 0; i < n; i += 2) { // Box-Muller pairs
        double u1 = uniform01(&r->state), u2 = uniform01(&r->state);
        double rad = sqrt(-2.0 * log(u1));
        dst[i] = norm ? 1.0f : (float) (0.02 * rad * cos(6.283185307179586 * u2));
        if (i + 1 < n) dst[i + 1] = norm ? 1.0f : (float) (0.02 * rad * sin(6.283185307179586 * u2));
    }
    return OSCAR_OK;
}

enum oscar_status oscar_model_init_random(const struct oscar_model_config * cfg, uint64_t seed,
                                          struct oscar_model ** out) {
    *out = NULL;
    struct oscar_model * m = calloc(1, sizeof *m);
    if (!m) return osc_error(OSCAR_ERR_NOMEM, "random model: out of memory");
    m->config = *cfg;
    snprintf(m->source, sizeof m->source, "random(seed=%llu)", (unsigned long long) seed);
    struct random_src r = {seed};
    struct osc_weight_source src = {random_get, &r};
    enum oscar_status st = osc_model_fill(m, &src, false);
    if (st != OSCAR_OK) {
        oscar_model_free(m);
        return st;
    }
    *out = m;
    return OSCAR_OK;
}
