// kv-decode.c - the serving cache of one request advanced step by step, as an
// attention override (contract and schedule in kv-decode.h), and per-token
// log-likelihoods of a window through it or through the one-pass simulation.
#include "verify/kv-decode.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "attention/kv-cache.h"
#include "util/blas.h"

// One layer's cache. Raw rows are kept to quantize a row when it is demoted
// (the transform bf16-rounds it first, as the cache re-quantizes its stored
// bf16 row); kn/vn hold the value a query reads now (HP, or INT2 once served so).
struct dec_layer {
    struct oscar_tier_sim sim;
    float * kx, * vx, * kn, * vn;   // [max_len, Hkv, D]
    uint8_t * int2;                 // [max_len] 1 = kn/vn hold the INT2 value
    int32_t window;                 // oscar_layer_window: a sliding layer's queries see their last `window` keys
    int64_t kb;                     // block > 1: first position of the next K block
};

struct oscar_kv_decode {
    struct oscar_kv_transform tf;
    int32_t n_head, n_threads, max_len;
    float attn_scale;               // oscar_attn_scale_param of the model
    struct dec_layer * layers;      // [n_layer]
    float * scratch;                // [n_threads, scratch_per_thread]
    size_t  scratch_per_thread;     // oscar_kv_attend_scratch(max_len, D)
    struct oscar_quant_stats st[2];
};

void oscar_kv_decode_free(struct oscar_kv_decode * d) {
    if (!d) return;
    for (int32_t l = 0; d->layers && l < d->tf.n_layer; l++) {
        oscar_tier_sim_free(&d->layers[l].sim);
        free(d->layers[l].kx);
        free(d->layers[l].int2);
    }
    free(d->layers);
    free(d->scratch);
    free(d);
}

enum oscar_status oscar_kv_decode_init(const struct oscar_kv_transform * tf, const struct oscar_model_config * cfg,
                                       int32_t max_len, int32_t n_threads, struct oscar_kv_decode ** out) {
    *out = NULL;
    enum oscar_status st = oscar_kv_transform_check(tf);
    if (st != OSCAR_OK) return st;
    if (cfg->n_layer != tf->n_layer || cfg->n_head_kv != tf->n_head_kv || cfg->head_dim != tf->head_dim ||
        tf->tiers.mode != OSCAR_TIERS_DECODE || max_len < 1)
        return osc_error(OSCAR_ERR_INVALID, "kv decode: transform '%s' (L %d Hkv %d D %d, tiering %d) does not fit "
                         "model %s or is not a decode tiering", tf->name, tf->n_layer, tf->n_head_kv, tf->head_dim,
                         (int) tf->tiers.mode, cfg->name);
    struct oscar_kv_decode * d = calloc(1, sizeof *d);
    if (!d) return osc_error(OSCAR_ERR_NOMEM, "kv decode");
    d->tf = *tf, d->n_head = cfg->n_head, d->max_len = max_len, d->attn_scale = oscar_attn_scale_param(cfg);
    d->n_threads = n_threads > 0 ? n_threads : omp_get_max_threads();
    d->layers = calloc((size_t) tf->n_layer, sizeof *d->layers);
    d->scratch_per_thread = oscar_kv_attend_scratch(max_len, tf->head_dim);
    d->scratch = malloc(sizeof(float) * d->scratch_per_thread * (size_t) d->n_threads);
    size_t n = (size_t) max_len * tf->n_head_kv * tf->head_dim;
    for (int32_t l = 0; d->layers && l < tf->n_layer; l++) {
        struct dec_layer * y = &d->layers[l];
        y->kx = malloc(sizeof(float) * 4 * n), y->int2 = calloc((size_t) max_len, 1);
        y->window = oscar_layer_window(cfg, l);
        if (!y->kx || !y->int2) break;
        y->vx = y->kx + n, y->kn = y->kx + 2 * n, y->vn = y->kx + 3 * n;
    }
    if (!d->layers || !d->scratch || !d->layers[tf->n_layer - 1].int2) {
        oscar_kv_decode_free(d);
        return osc_error(OSCAR_ERR_NOMEM, "kv decode: caches for %d tokens x %d layers", max_len, tf->n_layer);
    }
    *out = d;
    return OSCAR_OK;
}

// Row p becomes INT2 in every KV head: K and V re-written by the prefill or the flush quantizer.
static enum oscar_status to_int2(struct oscar_kv_decode * d, int32_t layer, int64_t p, bool prefill_path) {
    struct dec_layer * y = &d->layers[layer];
    int32_t Hkv = d->tf.n_head_kv, D = d->tf.head_dim;
    float hp[OSCAR_MAX_HEAD_DIM];
    for (int32_t h = 0; h < Hkv; h++) {
        size_t o = ((size_t) p * Hkv + h) * D;
        enum oscar_status st = OSCAR_OK;
        if (d->tf.quant != OSCAR_KVQ_KIVI && d->tf.quant != OSCAR_KVQ_OMNI)   // K: whole blocks (caller)
            st = oscar_kv_transform_row(&d->tf, true, layer, h, prefill_path, y->kx + o, hp, y->kn + o, &d->st[0]);
        if (st == OSCAR_OK)
            st = oscar_kv_transform_row(&d->tf, false, layer, h, prefill_path, y->vx + o, hp, y->vn + o, &d->st[1]);
        if (st != OSCAR_OK) return st;
    }
    y->int2[p] = 1;
    return OSCAR_OK;
}

// Serves as INT2 every row the tier simulator has demoted and this cache still holds as HP. With
// KIVI blocks (block B > 1) a row turns INT2 only with its whole block [kb, kb + B).
static enum oscar_status apply_tiers(struct oscar_kv_decode * d, int32_t layer, bool prefill_path) {
    struct dec_layer * y = &d->layers[layer];
    int64_t B = d->tf.tiers.block > 1 ? d->tf.tiers.block : 1;
    if (B == 1) {
        for (int64_t p = 0; p < y->sim.len; p++)
            if (y->sim.tier[p] == OSCAR_TIER_INT2 && !y->int2[p]) {
                enum oscar_status st = to_int2(d, layer, p, prefill_path);
                if (st != OSCAR_OK) return st;
            }
        return OSCAR_OK;
    }
    for (;;) {
        if (y->kb + B > y->sim.len) return OSCAR_OK;
        for (int64_t p = y->kb; p < y->kb + B; p++)
            if (y->sim.tier[p] != OSCAR_TIER_INT2) return OSCAR_OK;
        if (d->tf.quant == OSCAR_KVQ_OMNI) {   // all heads at once, from the raw rows
            enum oscar_status st = oscar_kv_transform_omni_block(&d->tf, y->kb, y->kx, y->kn, &d->st[0]);
            if (st != OSCAR_OK) return st;
        }
        for (int32_t h = 0; h < d->tf.n_head_kv && d->tf.quant == OSCAR_KVQ_KIVI; h++) {
            enum oscar_status st = oscar_kv_transform_kivi_block(&d->tf, h, y->kb, y->kn, y->kn, &d->st[0]);
            if (st != OSCAR_OK) return st;
        }
        for (int64_t p = y->kb; p < y->kb + B; p++) {
            enum oscar_status st = to_int2(d, layer, p, prefill_path);
            if (st != OSCAR_OK) return st;
        }
        y->kb += B;
    }
}

// Appends row i of the call (position p) to the layer's cache as an HP row.
static enum oscar_status append_row(struct oscar_kv_decode * d, int32_t layer, const struct oscar_capture_layer * in,
                                    int32_t i, int64_t p) {
    struct dec_layer * y = &d->layers[layer];
    int32_t Hkv = d->tf.n_head_kv, D = d->tf.head_dim;
    size_t rs = (size_t) Hkv * D;
    memcpy(y->kx + (size_t) p * rs, in->k + (size_t) i * rs, sizeof(float) * rs);
    memcpy(y->vx + (size_t) p * rs, in->v + (size_t) i * rs, sizeof(float) * rs);
    y->int2[p] = 0;
    if (d->tf.quant == OSCAR_KVQ_OMNI) {   // K per token: the omni-token norm spans the heads
        size_t ot = (size_t) p * rs;
        enum oscar_status st = oscar_kv_transform_omni_k_token(&d->tf, y->kx + ot, y->kn + ot);
        if (st != OSCAR_OK) return st;
    }
    for (int32_t h = 0; h < Hkv; h++) {
        size_t o = (size_t) p * rs + (size_t) h * D;
        enum oscar_status st = OSCAR_OK;
        if (d->tf.quant != OSCAR_KVQ_OMNI)
            st = oscar_kv_transform_row(&d->tf, true, layer, h, true, y->kx + o, y->kn + o, NULL, NULL);
        if (st == OSCAR_OK) st = oscar_kv_transform_row(&d->tf, false, layer, h, true, y->vx + o, y->vn + o, NULL, NULL);
        if (st != OSCAR_OK) return st;
    }
    return OSCAR_OK;
}

// Queries [i0, i1) of the call (positions t0 ...) attend to the cache rows [0, t] as they are now.
static void attend_rows(struct oscar_kv_decode * d, int32_t layer, const struct oscar_capture_layer * in, int32_t i0,
                        int32_t i1, int64_t t0, float * out) {
    const struct dec_layer * y = &d->layers[layer];
    int32_t Hq = d->n_head, D = d->tf.head_dim, g = Hq / d->tf.n_head_kv;
    size_t rs = (size_t) d->tf.n_head_kv * D;
    int64_t n_rows = (int64_t) (i1 - i0) * Hq;
#pragma omp parallel for schedule(dynamic, 4) num_threads(d->n_threads)
    for (int64_t r = 0; r < n_rows; r++) {
        int32_t i = i0 + (int32_t) (r / Hq), j = (int32_t) (r % Hq);
        size_t o = (size_t) (j / g) * D, qo = ((size_t) i * Hq + j) * D;
        oscar_kv_attend_query(in->q + qo, D, d->attn_scale, y->window, rs, y->kn + o, y->vn + o, y->kn + o, y->vn + o,
                              t0 + (i - i0), 0, 0,
                              d->scratch + d->scratch_per_thread * (size_t) omp_get_thread_num(), out + qo);
    }
}

static enum oscar_status dec_attend(void * user, int32_t layer, const struct oscar_capture_layer * in, float * out) {
    struct oscar_kv_decode * d = user;
    struct dec_layer * y = &d->layers[layer];
    int32_t n = in->n_tokens;
    int64_t pos0 = n > 0 ? in->pos[0] : 0;
    if (in->n_seq != 1 || pos0 + n > d->max_len || (pos0 > 0 && pos0 != y->sim.len))
        return osc_error(OSCAR_ERR_INVALID, "kv decode: layer %d: %d sequences, %d tokens from position %lld (cache "
                         "holds %lld of %d); feed one request in order", layer, in->n_seq, n, (long long) pos0,
                         (long long) y->sim.len, d->max_len);
    const struct oscar_tiering * tr = &d->tf.tiers;
    int32_t i = 0;
    enum oscar_status st = OSCAR_OK;
    if (pos0 == 0) {   // a new request: its first S0 rows are the final prefill chunk
        int64_t S0 = tr->prompt_len > 0 ? tr->prompt_len : tr->n_sink;
        int32_t n_pre = (int32_t) (S0 < n ? S0 : n);
        oscar_tier_sim_free(&y->sim);
        if ((st = oscar_tier_sim_init(&y->sim, tr->n_sink, tr->n_recent, tr->n_flush, d->max_len)) != OSCAR_OK ||
            (st = oscar_tier_sim_prefill(&y->sim, n_pre, true)) != OSCAR_OK)
            return st;
        for (; i < n_pre && st == OSCAR_OK; i++) st = append_row(d, layer, in, i, i);
        if (st != OSCAR_OK) return st;
        attend_rows(d, layer, in, 0, n_pre, 0, out);   // prefill attention: HP rows of the chunk
        y->kb = 0;
        while (y->kb < y->sim.len && y->sim.tier[y->kb] == OSCAR_TIER_SINK) y->kb++;
        if ((st = apply_tiers(d, layer, true)) != OSCAR_OK) return st;
    }
    for (; i < n; i++) {   // decode steps: demote, append, attend
        int64_t L = y->sim.len;
        if (oscar_tier_sim_decode(&y->sim) < 0)
            return osc_error(OSCAR_ERR_INVALID, "kv decode: layer %d: position %lld past %d", layer, (long long) L,
                             d->max_len);
        if ((st = apply_tiers(d, layer, false)) != OSCAR_OK) return st;
        if ((st = append_row(d, layer, in, i, L)) != OSCAR_OK) return st;
        attend_rows(d, layer, in, i, i + 1, L, out);
    }
    return OSCAR_OK;
}

struct oscar_attention_override oscar_kv_decode_override(struct oscar_kv_decode * d) {
    return (struct oscar_attention_override){.attend = dec_attend, .user = d};
}

// ---- per-token log-likelihoods ---------------------------------------------------------
enum { LL_ROWS = 64 };

// ll[i] = ln softmax(hidden[i]·outputᵀ)[next[i]] for n rows, LL_ROWS at a time. logits [LL_ROWS, V].
static void rows_loglik(const struct oscar_model * m, const float * hidden, int32_t n, const int32_t * next,
                        int32_t nt, float * logits, double * ll) {
    int32_t C = m->config.n_embd, V = m->config.n_vocab;
    for (int32_t r0 = 0; r0 < n; r0 += LL_ROWS) {
        int32_t nb = n - r0 < LL_ROWS ? n - r0 : LL_ROWS;
        osc_sgemm(nt, CblasNoTrans, CblasTrans, nb, V, C, 1.0f, hidden + (size_t) r0 * C, C, m->output, C, 0.0f,
                  logits, V);
        for (int32_t i = 0; i < nb; i++) {
            const float * lg = logits + (size_t) i * V;
            double mx = -INFINITY, z = 0;
            for (int32_t j = 0; j < V; j++) mx = fmax(mx, (double) lg[j]);
            for (int32_t j = 0; j < V; j++) z += exp((double) lg[j] - mx);
            ll[r0 + i] = (double) lg[next[r0 + i]] - mx - log(z);
        }
    }
}

// Forward of tok[b, e) at positions b.. (one sequence); hidden rows of the scored ones into ll.
static enum oscar_status run_span(struct oscar_forward * f, const struct oscar_model * m, const int32_t * tok,
                                  int32_t n, int32_t b, int32_t e, int32_t nt, int32_t * pos, float * logits,
                                  double * ll) {
    int32_t ss[2] = {0, e - b}, th = 0;
    for (int32_t i = b; i < e; i++) pos[i - b] = i;
    struct oscar_batch bt = {.n_seq = 1, .seq_start = ss, .tokens = tok + b, .pos = pos};
    enum oscar_status st = oscar_forward_run(f, &bt, NULL);
    const float * hid = st == OSCAR_OK ? oscar_forward_hidden(f, &th) : NULL;
    if (st != OSCAR_OK) return st;
    if (!hid || th != e - b) return osc_error(OSCAR_ERR_NUMERIC, "kv loglik: no hidden state");
    int32_t last = e < n ? e : n - 1;   // the final token predicts nothing
    if (last > b) rows_loglik(m, hid, last - b, tok + b + 1, nt, logits, ll + b);
    return OSCAR_OK;
}

enum oscar_status oscar_kv_window_loglik(const struct oscar_model * m, const struct oscar_kv_transform * tf,
                                         enum oscar_kv_path path, const int32_t * tok, int32_t n, int32_t n_threads,
                                         double * ll) {
    if (n < 2) return osc_error(OSCAR_ERR_INVALID, "kv loglik: a window needs 2 tokens, got %d", n);
    bool quant = tf && tf->quant != OSCAR_KVQ_IDENTITY;
    struct oscar_kv_sim * sim = NULL;
    struct oscar_kv_decode * dec = NULL;
    struct oscar_attention_override ov = {0};
    enum oscar_status st = OSCAR_OK;
    if (quant && path == OSCAR_KV_ONE_PASS) {
        if ((st = oscar_kv_sim_init(tf, &m->config, n, n_threads, &sim)) == OSCAR_OK) ov = oscar_kv_sim_override(sim);
    } else if (quant) {
        if ((st = oscar_kv_decode_init(tf, &m->config, n, n_threads, &dec)) == OSCAR_OK)
            ov = oscar_kv_decode_override(dec);
    }
    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.n_threads = n_threads, fp.max_tokens = n, fp.attention = ov.attend ? &ov : NULL;
    struct oscar_forward * f = NULL;
    float * logits = malloc(sizeof(float) * LL_ROWS * (size_t) m->config.n_vocab);
    int32_t * pos = malloc(sizeof(int32_t) * (size_t) n);
    if (st == OSCAR_OK && (!logits || !pos)) st = osc_error(OSCAR_ERR_NOMEM, "kv loglik: logits");
    if (st == OSCAR_OK) st = oscar_forward_init(m, &fp, &f);
    if (st == OSCAR_OK && (path != OSCAR_KV_DECODE_STEPS || !quant)) {   // the exact forward keeps no cache
        st = run_span(f, m, tok, n, 0, n, n_threads, pos, logits, ll);
    } else if (st == OSCAR_OK) {
        // Serving order: the prompt as one chunk (at least one token), then one token per forward.
        int64_t S0 = tf ? (tf->tiers.prompt_len > 0 ? tf->tiers.prompt_len : tf->tiers.n_sink) : 0;
        int32_t e = (int32_t) (S0 < 1 ? 1 : S0 > n ? n : S0);
        st = run_span(f, m, tok, n, 0, e, n_threads, pos, logits, ll);
        for (int32_t t = e; t < n && st == OSCAR_OK; t++) st = run_span(f, m, tok, n, t, t + 1, n_threads, pos, logits, ll);
    }
    oscar_forward_free(f);
    oscar_kv_sim_free(sim);
    oscar_kv_decode_free(dec);
    free(logits);
    free(pos);
    return st;
}
