// fwd-cpu.c - the CPU forward backend: lib/model/forward.c (fp32, OpenBLAS) with a
// capture hook that feeds lib/stats, whole passes (oscar_fwd_run) and the
// layer-major pass (oscar_fwd_rows_init ...; forward-backend.h). In the layer-major
// pass the hidden states and the kept K/V are host arrays and the sums are
// lib/stats's own: the statistics depend only on each layer's token order, so
// they equal whole passes over the same batches bit for bit.
#include "backend/forward-ops.h"
#include "quant/quant.h"
#include "util/log.h"
#include "util/mem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cpu_fwd {
    struct oscar_forward *            fw;
    struct oscar_model *              owned; // random-init model, or NULL
    const struct oscar_model *        m;
    struct oscar_fwd_params           p;
    struct oscar_capture_hook         hook;  // chains stats then the user's hook
    // layer-major pass
    float * x;                               // [n_rows, C] hidden states
    float * keep_k, * keep_v;                // [n_keep, Hkv, D] this layer's calibration K/V (SST), or NULL
    float * rq, * rk, * rv;                  // [max_tokens, ...] bf16-rounded q/k/v (capture_bf16), or NULL
    int64_t n_rows, n_keep;
    int64_t row0;                            // rows of the batch in flight
    bool sums;                               // the batch in flight feeds the sums
    double sums_s;                           // seconds in lib/stats inside runs (oscar_fwd_info.host_sums_s)
};

static bool cpu_want(void * user, int32_t layer) {
    const struct cpu_fwd * c = user;
    if (c->p.stats) return true;
    return !c->p.hook->want || c->p.hook->want(c->p.hook->user, layer);
}

static void round_rows(const float * x, size_t n, float * out) {
    for (size_t i = 0; i < n; i++) out[i] = oscar_bf16_round(x[i]);
}

static enum oscar_status add_chunk(struct cpu_fwd * c, const struct oscar_capture_layer * cap) {
    const struct oscar_stats_chunk ch = {
        .layer = cap->layer, .n_tokens = cap->n_tokens, .n_seq = cap->n_seq, .seq_start = cap->seq_start,
        .q = cap->q, .k = cap->k, .v = cap->v, .window = oscar_layer_window(&c->m->config, cap->layer),
    };
    const double t0 = osc_now();
    enum oscar_status st = oscar_stats_add(c->p.stats, &ch);
    c->sums_s += osc_now() - t0;
    return st;
}

// Layer-major: the capture dtype, then the sums and the kept K/V of a sums batch.
static enum oscar_status layered_capture(struct cpu_fwd * c, struct oscar_capture_layer * cap) {
    const struct oscar_model_config * mc = &c->m->config;
    const size_t T = (size_t) cap->n_tokens, qrow = (size_t) mc->n_head * mc->head_dim;
    const size_t kvrow = (size_t) mc->n_head_kv * mc->head_dim;
    if (c->rq) {
        round_rows(cap->q, T * qrow, c->rq), round_rows(cap->k, T * kvrow, c->rk), round_rows(cap->v, T * kvrow, c->rv);
        cap->q = c->rq, cap->k = c->rk, cap->v = c->rv;
    }
    if (!c->sums || !c->p.stats) return OSCAR_OK;
    if (c->keep_k) {
        memcpy(c->keep_k + (size_t) c->row0 * kvrow, cap->k, T * kvrow * sizeof(float));
        memcpy(c->keep_v + (size_t) c->row0 * kvrow, cap->v, T * kvrow * sizeof(float));
    }
    return add_chunk(c, cap);
}

static enum oscar_status cpu_on_layer(void * user, const struct oscar_capture_layer * in) {
    struct cpu_fwd * c = user;
    struct oscar_capture_layer cap = *in;
    enum oscar_status st = c->p.layered ? layered_capture(c, &cap) : c->p.stats ? add_chunk(c, &cap) : OSCAR_OK;
    if (st != OSCAR_OK) return st;
    const struct oscar_capture_hook * h = c->p.hook;
    if (h && h->on_layer && (!h->want || h->want(h->user, cap.layer))) return h->on_layer(h->user, &cap);
    return OSCAR_OK;
}

static void cpu_free(void * ctx) {
    struct cpu_fwd * c = ctx;
    if (!c) return;
    oscar_forward_free(c->fw);
    oscar_model_free(c->owned);
    free(c->x), free(c->keep_k), free(c->keep_v), free(c->rq), free(c->rk), free(c->rv);
    free(c);
}

static enum oscar_status cpu_init(const struct oscar_model * m, const struct oscar_model_config * cfg, uint64_t seed,
                                  const struct oscar_fwd_params * p, void ** ctx) {
    *ctx = NULL;
    struct cpu_fwd * c = calloc(1, sizeof *c);
    if (!c) return osc_error(OSCAR_ERR_NOMEM, "forward: out of memory");
    enum oscar_status st = OSCAR_OK;
    if (!m && p->layered) {
        st = osc_error(OSCAR_ERR_INVALID, "forward: the layer-major pass on the cpu reads the model's layers "
                       "(open the random model with oscar_model_open_random)");
        goto out;
    }
    if (!m) {
        st = oscar_model_init_random(cfg, seed, &c->owned);
        if (st != OSCAR_OK) goto out;
        m = c->owned;
    }
    c->m = m;
    c->p = *p;
    c->hook.want = cpu_want;
    c->hook.on_layer = cpu_on_layer;
    c->hook.user = c;
    c->hook.qkv_only = true;
    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.n_threads = p->n_threads;
    fp.max_tokens = p->max_tokens;
    fp.attention = p->attention;
    fp.hook = (p->hook || p->stats) ? &c->hook : NULL;
    if (p->hook) c->hook.qkv_only = p->hook->qkv_only;
    st = oscar_forward_init(m, &fp, &c->fw);
out:
    if (st != OSCAR_OK) {
        cpu_free(c);
        return st;
    }
    *ctx = c;
    return OSCAR_OK;
}

// lib/model's forward takes its attention and hook at init: a new one over the same model (no copy).
static enum oscar_status cpu_reinit(struct cpu_fwd * c, const struct oscar_attention_override * ov,
                                    const struct oscar_capture_hook * hook) {
    if (c->p.layered) return osc_error(OSCAR_ERR_INVALID, "forward: set_attention / set_hook on a layer-major pass");
    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.n_threads = c->p.n_threads, fp.max_tokens = c->p.max_tokens, fp.attention = ov;
    fp.hook = (hook || c->p.stats) ? &c->hook : NULL;
    struct oscar_forward * fw = NULL;
    const bool qkv_only = c->hook.qkv_only;
    c->hook.qkv_only = hook ? hook->qkv_only : true;
    enum oscar_status st = oscar_forward_init(c->m, &fp, &fw);
    if (st != OSCAR_OK) {
        c->hook.qkv_only = qkv_only;
        return st;
    }
    oscar_forward_free(c->fw);
    c->fw = fw, c->p.attention = ov, c->p.hook = hook;
    return OSCAR_OK;
}

static enum oscar_status cpu_set_attention(void * ctx, const struct oscar_fwd_kvsim * kvsim,
                                           const struct oscar_attention_override * ov) {
    struct cpu_fwd * c = ctx;
    if (kvsim)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "forward (cpu): no device simulation of the cache; lib/verify's "
                         "override is the CPU one");
    return cpu_reinit(c, ov, c->p.hook);
}

static enum oscar_status cpu_set_hook(void * ctx, const struct oscar_capture_hook * hook) {
    struct cpu_fwd * c = ctx;
    return cpu_reinit(c, c->p.attention, hook);
}

static enum oscar_status cpu_run(void * ctx, const struct oscar_batch * b, float * logits) {
    struct cpu_fwd * c = ctx;
    if (c->p.layered) return osc_error(OSCAR_ERR_INVALID, "forward: whole passes on a layer-major pass");
    return oscar_forward_run(c->fw, b, logits);
}

static enum oscar_status cpu_end_pass(void * ctx) {
    struct cpu_fwd * c = ctx;
    if (!c->p.stats) return osc_error(OSCAR_ERR_INVALID, "forward: end_pass without a stats accumulator");
    if (c->p.layered) return osc_error(OSCAR_ERR_INVALID, "forward: a layer-major pass ends layer by layer");
    return oscar_stats_end_pass(c->p.stats);
}

static enum oscar_status cpu_copy_wo(void * ctx, int32_t layer, float * out) {
    const struct cpu_fwd * c = ctx;
    const struct oscar_model_config * mc = &c->m->config;
    if (layer < 0 || layer >= mc->n_layer) return osc_error(OSCAR_ERR_INVALID, "forward: layer %d out of range", layer);
    if (!oscar_model_layer_resident(c->m, layer))
        return osc_error(OSCAR_ERR_INVALID, "forward: W_O of layer %d: the layer is not resident", (int) layer);
    memcpy(out, c->m->layers[layer].wo, sizeof(float) * (size_t) mc->n_embd * (size_t) mc->n_head * mc->head_dim);
    return OSCAR_OK;
}

static void cpu_info(const void * ctx, struct oscar_fwd_info * out) {
    const struct cpu_fwd * c = ctx;
    const struct oscar_model_config * g = &c->m->config;
    const int64_t C = g->n_embd;
    const bool head = c->m->output && c->m->output != c->m->tok_embd; // untied and read
    const int64_t emb = (int64_t) g->n_vocab * C * (head ? 2 : 1) + C;
    const int64_t layers = oscar_model_layer_bytes(c->m) / (int64_t) sizeof(float) * (c->p.layered ? 2 : g->n_layer);
    strcpy(out->device, "cpu");
    out->weight_bytes = (emb + layers) * (int64_t) sizeof(float);
    out->host_sums_s = c->sums_s;
}

// ---- the layer-major pass ------------------------------------------------------------------

static enum oscar_status cpu_rows_init(void * ctx, int64_t n_rows, int64_t n_keep) {
    struct cpu_fwd * c = ctx;
    const struct oscar_model_config * mc = &c->m->config;
    if (!c->p.layered || c->x) return osc_error(OSCAR_ERR_INVALID, "forward: rows_init needs a new layer-major pass");
    const size_t C = (size_t) mc->n_embd, D = (size_t) mc->head_dim, T = (size_t) c->p.max_tokens;
    const size_t kvrow = (size_t) mc->n_head_kv * D;
    bool ok = (c->x = osc_alloc_large((size_t) n_rows * C * sizeof(float))) != NULL;
    if (c->p.stats && (oscar_stats_get_params(c->p.stats).kinds & OSCAR_STATS_SST) && n_keep > 0) {
        ok = ok && (c->keep_k = osc_alloc_large((size_t) n_keep * kvrow * sizeof(float)));
        ok = ok && (c->keep_v = osc_alloc_large((size_t) n_keep * kvrow * sizeof(float)));
    }
    if (c->p.capture_bf16) {
        ok = ok && (c->rq = malloc(T * (size_t) mc->n_head * D * sizeof(float)));
        ok = ok && (c->rk = malloc(T * kvrow * sizeof(float))) && (c->rv = malloc(T * kvrow * sizeof(float)));
    }
    if (!ok)
        return osc_error(OSCAR_ERR_NOMEM, "forward: out of memory for the hidden states of %lld rows",
                         (long long) n_rows);
    c->n_rows = n_rows, c->n_keep = n_keep;
    return OSCAR_OK;
}

static enum oscar_status cpu_layer_set(void * ctx, int32_t l, const struct oscar_layer_weights * w) {
    const struct cpu_fwd * c = ctx;
    if (l < 0 || l >= c->m->config.n_layer) return osc_error(OSCAR_ERR_INVALID, "forward: layer %d out of range", l);
    if (w != &c->m->layers[l] || !oscar_model_layer_resident(c->m, l))
        return osc_error(OSCAR_ERR_INVALID, "forward: layer %d: the cpu backend runs the model's own resident layer "
                         "(oscar_model_layer_acquire first)", (int) l);
    return OSCAR_OK;
}

static enum oscar_status cpu_layer_run(void * ctx, int32_t l, const struct oscar_batch * b, int64_t row0, bool sums) {
    struct cpu_fwd * c = ctx;
    if (!c->x) return osc_error(OSCAR_ERR_INVALID, "forward: layer_run before rows_init");
    enum oscar_status st = oscar_forward_begin(c->fw, b);
    if (st != OSCAR_OK) return st;
    const int64_t T = b->seq_start[b->n_seq];
    if (row0 < 0 || row0 + T > c->n_rows || (sums && c->keep_k && row0 + T > c->n_keep))
        return osc_error(OSCAR_ERR_INVALID, "forward: rows [%lld, %lld) outside the pass's %lld rows (%lld kept)",
                         (long long) row0, (long long) (row0 + T), (long long) c->n_rows, (long long) c->n_keep);
    const size_t C = (size_t) c->m->config.n_embd, bytes = (size_t) T * C * sizeof(float);
    float * resid = oscar_forward_residual(c->fw), * rows = c->x + (size_t) row0 * C;
    if (l == 0) oscar_forward_embed(c->fw);
    else memcpy(resid, rows, bytes);
    c->row0 = row0, c->sums = sums;
    if ((st = oscar_forward_layer(c->fw, l)) != OSCAR_OK) return st;
    memcpy(rows, resid, bytes);
    return OSCAR_OK;
}

static enum oscar_status cpu_layer_end(void * ctx, int32_t l) {
    struct cpu_fwd * c = ctx;
    struct oscar_stats * s = c->p.stats;
    if (!s) return OSCAR_OK;
    enum oscar_status st = oscar_stats_end_layer_pass(s, l);
    const size_t kvrow = (size_t) c->m->config.n_head_kv * (size_t) c->m->config.head_dim;
    for (int64_t r0 = 0; st == OSCAR_OK && oscar_stats_layer_phase(s, l) == 2 && r0 < c->n_keep;
         r0 += c->p.max_tokens) {
        const int64_t n = c->n_keep - r0 < c->p.max_tokens ? c->n_keep - r0 : c->p.max_tokens;
        const struct oscar_stats_chunk ch = {.layer = l, .n_tokens = (int32_t) n, .k = c->keep_k + (size_t) r0 * kvrow,
                                             .v = c->keep_v + (size_t) r0 * kvrow};
        st = oscar_stats_add(s, &ch);
    }
    if (st == OSCAR_OK && oscar_stats_layer_phase(s, l) == 2) st = oscar_stats_end_layer_pass(s, l);
    return st;
}

static enum oscar_status cpu_rows_copy(void * ctx, float * host, bool to_host) {
    struct cpu_fwd * c = ctx;
    if (!c->x) return osc_error(OSCAR_ERR_INVALID, "forward: rows_copy before rows_init");
    const size_t bytes = (size_t) c->n_rows * (size_t) c->m->config.n_embd * sizeof(float);
    memcpy(to_host ? host : c->x, to_host ? c->x : host, bytes);
    return OSCAR_OK;
}

static const struct osc_fwd_ops cpu_ops = {
    .name = "cpu", .init = cpu_init, .run = cpu_run, .end_pass = cpu_end_pass, .info = cpu_info, .free = cpu_free,
    .copy_wo = cpu_copy_wo, .set_attention = cpu_set_attention, .rows_init = cpu_rows_init, .layer_set = cpu_layer_set, .layer_run = cpu_layer_run,
    .layer_end = cpu_layer_end, .rows_copy = cpu_rows_copy, .set_hook = cpu_set_hook,
};

const struct osc_fwd_ops * osc_fwd_ops_cpu(void) { return &cpu_ops; }
