// forward-backend.c - oscar_fwd_*: dispatch to the device's vtable, and the CPU
// implementation (lib/model/forward.c plus a capture hook that feeds
// lib/stats). Knows nothing about CUDA (registry.c picks the vtable).
#include "backend/forward-ops.h"

#include <stdlib.h>
#include <string.h>

struct oscar_fwd {
    const struct osc_fwd_ops * ops;
    void * ctx;
};

struct oscar_fwd_params oscar_fwd_default_params(void) {
    struct oscar_fwd_params p;
    memset(&p, 0, sizeof p);
    p.device = "cpu";
    p.max_tokens = 512;
    return p;
}

static enum oscar_status create(const struct oscar_model * m, const struct oscar_model_config * cfg, uint64_t seed,
                                const struct oscar_fwd_params * params, struct oscar_fwd ** out) {
    OSCAR_ASSERT(params && out);
    *out = NULL;
    const struct osc_fwd_ops * ops = NULL;
    enum oscar_status st = osc_fwd_ops_get(params->device, &ops);
    if (st != OSCAR_OK) return st;
    struct oscar_fwd * f = calloc(1, sizeof *f);
    if (!f) return osc_error(OSCAR_ERR_NOMEM, "forward: out of memory");
    f->ops = ops;
    st = ops->init(m, cfg, seed, params, &f->ctx);
    if (st != OSCAR_OK) {
        free(f);
        return st;
    }
    *out = f;
    return OSCAR_OK;
}

enum oscar_status oscar_fwd_init(const struct oscar_model * m, const struct oscar_fwd_params * params,
                                 struct oscar_fwd ** out) {
    OSCAR_ASSERT(m);
    return create(m, NULL, 0, params, out);
}

enum oscar_status oscar_fwd_init_random(const struct oscar_model_config * cfg, uint64_t seed,
                                        const struct oscar_fwd_params * params, struct oscar_fwd ** out) {
    OSCAR_ASSERT(cfg);
    return create(NULL, cfg, seed, params, out);
}

enum oscar_status oscar_fwd_run(struct oscar_fwd * f, const struct oscar_batch * batch, float * logits) {
    return f->ops->run(f->ctx, batch, logits);
}

enum oscar_status oscar_fwd_end_pass(struct oscar_fwd * f) { return f->ops->end_pass(f->ctx); }

enum oscar_status oscar_fwd_copy_wo(struct oscar_fwd * f, int32_t layer, float * out) {
    return f->ops->copy_wo(f->ctx, layer, out);
}

void oscar_fwd_info(const struct oscar_fwd * f, struct oscar_fwd_info * out) {
    memset(out, 0, sizeof *out);
    f->ops->info(f->ctx, out);
}

void oscar_fwd_free(struct oscar_fwd * f) {
    if (!f) return;
    f->ops->free(f->ctx);
    free(f);
}

// ---- the CPU implementation ------------------------------------------------------

struct cpu_fwd {
    struct oscar_forward *            fw;
    struct oscar_model *              owned; // random-init model, or NULL
    const struct oscar_model *        m;
    const struct oscar_capture_hook * user_hook;
    struct oscar_stats *              stats;
    struct oscar_capture_hook         hook;  // chains stats then the user's hook
};

static bool cpu_want(void * user, int32_t layer) {
    const struct cpu_fwd * c = user;
    if (c->stats) return true;
    return !c->user_hook->want || c->user_hook->want(c->user_hook->user, layer);
}

static enum oscar_status cpu_on_layer(void * user, const struct oscar_capture_layer * cap) {
    const struct cpu_fwd * c = user;
    if (c->stats) {
        const struct oscar_stats_chunk ch = {
            .layer = cap->layer, .n_tokens = cap->n_tokens, .n_seq = cap->n_seq, .seq_start = cap->seq_start,
            .q = cap->q, .k = cap->k, .v = cap->v,
        };
        enum oscar_status st = oscar_stats_add(c->stats, &ch);
        if (st != OSCAR_OK) return st;
    }
    const struct oscar_capture_hook * h = c->user_hook;
    if (h && h->on_layer && (!h->want || h->want(h->user, cap->layer))) return h->on_layer(h->user, cap);
    return OSCAR_OK;
}

static void cpu_free(void * ctx) {
    struct cpu_fwd * c = ctx;
    if (!c) return;
    oscar_forward_free(c->fw);
    oscar_model_free(c->owned);
    free(c);
}

static enum oscar_status cpu_init(const struct oscar_model * m, const struct oscar_model_config * cfg, uint64_t seed,
                                  const struct oscar_fwd_params * p, void ** ctx) {
    *ctx = NULL;
    struct cpu_fwd * c = calloc(1, sizeof *c);
    if (!c) return osc_error(OSCAR_ERR_NOMEM, "forward: out of memory");
    enum oscar_status st = OSCAR_OK;
    if (!m) {
        st = oscar_model_init_random(cfg, seed, &c->owned);
        if (st != OSCAR_OK) goto out;
        m = c->owned;
    }
    c->m = m;
    c->user_hook = p->hook;
    c->stats = p->stats;
    c->hook.want = cpu_want;
    c->hook.on_layer = cpu_on_layer;
    c->hook.user = c;
    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.n_threads = p->n_threads;
    fp.max_tokens = p->max_tokens;
    fp.attention = p->attention;
    fp.hook = (p->hook || p->stats) ? &c->hook : NULL;
    st = oscar_forward_init(m, &fp, &c->fw);
out:
    if (st != OSCAR_OK) {
        cpu_free(c);
        return st;
    }
    *ctx = c;
    return OSCAR_OK;
}

static enum oscar_status cpu_run(void * ctx, const struct oscar_batch * b, float * logits) {
    struct cpu_fwd * c = ctx;
    return oscar_forward_run(c->fw, b, logits);
}

static enum oscar_status cpu_end_pass(void * ctx) {
    struct cpu_fwd * c = ctx;
    if (!c->stats) return osc_error(OSCAR_ERR_INVALID, "forward: end_pass without a stats accumulator");
    return oscar_stats_end_pass(c->stats);
}

static enum oscar_status cpu_copy_wo(void * ctx, int32_t layer, float * out) {
    const struct cpu_fwd * c = ctx;
    const struct oscar_model_config * mc = &c->m->config;
    if (layer < 0 || layer >= mc->n_layer) return osc_error(OSCAR_ERR_INVALID, "forward: layer %d out of range", layer);
    memcpy(out, c->m->layers[layer].wo, sizeof(float) * (size_t) mc->n_embd * (size_t) mc->n_head * mc->head_dim);
    return OSCAR_OK;
}

static void cpu_info(const void * ctx, struct oscar_fwd_info * out) {
    const struct cpu_fwd * c = ctx;
    const struct oscar_model_config * g = &c->m->config;
    const int64_t C = g->n_embd, Q = (int64_t) g->n_head * g->head_dim, KV = (int64_t) g->n_head_kv * g->head_dim;
    int64_t per_layer = 2 * C + C * (Q + 2 * KV) + Q * C + 3 * C * g->n_ff;
    int64_t n = per_layer * g->n_layer + (int64_t) g->n_vocab * C * (g->tied_embeddings ? 1 : 2) + C;
    strcpy(out->device, "cpu");
    out->weight_bytes = n * (int64_t) sizeof(float);
}

static const struct osc_fwd_ops cpu_ops = {
    .name = "cpu", .init = cpu_init, .run = cpu_run, .end_pass = cpu_end_pass, .info = cpu_info, .free = cpu_free,
    .copy_wo = cpu_copy_wo,
};

const struct osc_fwd_ops * osc_fwd_ops_cpu(void) { return &cpu_ops; }
