// forward-backend.c - oscar_fwd_*: dispatch to the device's vtable (fwd-cpu.c is
// the CPU one). Knows nothing about CUDA (registry.c picks the vtable).
#include "backend/forward-ops.h"

#include <stdint.h>
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
    const struct oscar_model_config * c = m ? &m->config : cfg;
    if (params->stats && oscar_stats_get_params(params->stats).attn_scale != oscar_attn_scale_param(c))
        // the attention-mass weights would be a softmax of other scores than the model's
        return osc_error(OSCAR_ERR_INVALID, "forward: the statistics accumulator's score scale %g is not %s's %g "
                         "(set oscar_stats_params.attn_scale = oscar_attn_scale_param)",
                         (double) oscar_stats_get_params(params->stats).attn_scale, m ? m->source : c->name,
                         (double) oscar_attn_scale_param(c));
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

enum oscar_status oscar_fwd_rows_init(struct oscar_fwd * f, int64_t n_rows, int64_t n_keep) {
    if (n_rows <= 0 || n_keep < 0 || n_keep > n_rows)
        return osc_error(OSCAR_ERR_INVALID, "forward: %lld rows, %lld kept", (long long) n_rows, (long long) n_keep);
    return f->ops->rows_init(f->ctx, n_rows, n_keep);
}

enum oscar_status oscar_fwd_layer_set(struct oscar_fwd * f, int32_t l, const struct oscar_layer_weights * w) {
    return f->ops->layer_set(f->ctx, l, w);
}

enum oscar_status oscar_fwd_layer_run(struct oscar_fwd * f, int32_t l, const struct oscar_batch * b, int64_t row0,
                                      bool sums) {
    return f->ops->layer_run(f->ctx, l, b, row0, sums);
}

enum oscar_status oscar_fwd_layer_end(struct oscar_fwd * f, int32_t l) { return f->ops->layer_end(f->ctx, l); }

enum oscar_status oscar_fwd_rows_copy(struct oscar_fwd * f, float * host, bool to_host) {
    return f->ops->rows_copy(f->ctx, host, to_host);
}

enum oscar_status oscar_fwd_set_attention(struct oscar_fwd * f, const struct oscar_fwd_kvsim * kvsim,
                                          const struct oscar_attention_override * ov) {
    if (kvsim && ov) return osc_error(OSCAR_ERR_INVALID, "forward: a device simulation and a host override at once");
    return f->ops->set_attention(f->ctx, kvsim, ov);
}

enum oscar_status oscar_fwd_set_hook(struct oscar_fwd * f, const struct oscar_capture_hook * hook) {
    return f->ops->set_hook(f->ctx, hook);
}

enum oscar_status oscar_fwd_ref_init(struct oscar_fwd * f, int64_t n_rows) {
    if (!f->ops->ref_init)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "forward (%s): no device scoring (lib/verify scores on the host)",
                         f->ops->name);
    if (n_rows < 0) return osc_error(OSCAR_ERR_INVALID, "forward: %lld reference rows", (long long) n_rows);
    return f->ops->ref_init(f->ctx, n_rows);
}

enum oscar_status oscar_fwd_run_scored(struct oscar_fwd * f, const struct oscar_batch * b, int32_t row0, int32_t n,
                                       const int32_t * next, int64_t ref_row, bool save_ref,
                                       struct oscar_fwd_score * out) {
    if (!f->ops->run_scored)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "forward (%s): no device scoring (lib/verify scores on the host)",
                         f->ops->name);
    int32_t shortest = b->n_seq > 0 ? INT32_MAX : 0;
    for (int32_t q = 0; q < b->n_seq; q++)
        if (b->seq_start[q + 1] - b->seq_start[q] < shortest) shortest = b->seq_start[q + 1] - b->seq_start[q];
    if (row0 < 0 || n < 0 || row0 + n > shortest || (save_ref && ref_row < 0))
        return osc_error(OSCAR_ERR_INVALID, "forward: scored rows [%d, %d) of sequences of %d tokens or more "
                         "(reference row %lld)", row0, row0 + n, shortest, (long long) ref_row);
    return f->ops->run_scored(f->ctx, b, row0, n, next, ref_row, save_ref, out);
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
