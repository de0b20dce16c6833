// layer-pass.c - the calibration forward pass, layer-major: every calibration
// and held-out sequence advances through layer l before any enters layer l+1,
// their hidden states resident. For each layer: the batches run that layer
// with the capture hook (pass-1 sums of the calibration rows, the held-out
// rows kept, rows copied to the activation store); the layer's pass 1 ends,
// which finalises its A_h; the SST sums then reuse the K/V rows this layer
// produced (kept for that layer only), so no second forward pass exists.
//
// Weights: with an opened model (oscar_model_open) layer l is read when the
// pass reaches it, layer l + 1 is prefetched while l runs, and l is released
// after its sums; the held-out rows then keep a copy of each layer's W_O for
// the clip search and gate (held->wo_block). A loaded model gives the same bytes.
//
// Same answer as two whole passes: the batches are the same (calibration
// sequences p->batch at a time, then the held-out ones), so every GEMM sees the
// same shapes, and lib/stats sums depend only on each layer's token order
// (stats.h), which is unchanged. Memory: the hidden states of all sequences
// [N, C], one layer's calibration K/V [N_cal, Hkv, D] x 2 when SST is on, the
// held-out rows, and the forward scratch of one batch.
//
// Checkpoints (layer-ckpt.c) are taken between layers, after at least
// p->checkpoint_every token-layers since the last one; --resume continues at
// the layer after the last checkpoint with the same batches.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calibrate/actstore.h"
#include "calibrate/calibrate.h"
#include "calibrate/layer-ckpt.h"
#include "quant/quant.h"
#include "util/log.h"
#include "util/mem.h"

// One forward batch: sequences [s0, s1) of a set, rows [row0, row0 + n) of the hidden states.
struct batch_ref {
    bool    heldout;
    int32_t s0, s1;
    int64_t row0; // into X (calibration rows first, then held-out rows)
    int32_t n;
};

struct layer_pass {
    struct oscar_model * m;    // opened (layers read on demand) or loaded
    const struct oscar_calib_plan * plan;
    const struct oscar_calib_params * p;
    struct oscar_stats * stats;
    struct oscar_calib_heldout * held;
    struct oscar_calib_timing * t;
    struct oscar_forward * f;
    struct batch_ref * batches;
    int32_t n_batches;
    int64_t n_cal, n_rows;     // calibration rows; all rows
    float * x;                 // [n_rows, C] hidden states between layers
    float * keep_k, * keep_v;  // [n_cal, Hkv, D] this layer's calibration K/V (SST), or NULL
    float * rq, * rk, * rv;    // bf16-rounded rows of one batch (capture_bf16), or NULL
    int32_t * sbuf;            // [batch + 1] seq_start of the current batch
    const struct batch_ref * cur;
    double t_accum, t_store;
};

static void round_rows(const float * x, size_t n, float * out) {
    for (size_t i = 0; i < n; i++) out[i] = oscar_bf16_round(x[i]);
}

// The capture hook: the rows of the current batch go to their consumers.
static enum oscar_status on_layer(void * user, const struct oscar_capture_layer * cap) {
    struct layer_pass * lp = user;
    const struct oscar_model_config * c = cap->config;
    const struct batch_ref * b = lp->cur;
    const size_t T = (size_t) cap->n_tokens, D = (size_t) c->head_dim;
    const size_t qrow = (size_t) c->n_head * D, kvrow = (size_t) c->n_head_kv * D;
    const float * q = cap->q, * k = cap->k, * v = cap->v;
    enum oscar_status st = OSCAR_OK;
    if (lp->rq) { // the reference captures bf16: every consumer sees the rounded rows
        round_rows(q, T * qrow, lp->rq), round_rows(k, T * kvrow, lp->rk), round_rows(v, T * kvrow, lp->rv);
        q = lp->rq, k = lp->rk, v = lp->rv;
    }
    if (lp->p->act_out) {
        double t0 = osc_now();
        st = oscar_actstore_append(lp->p->act_out, b->heldout ? OSCAR_ACT_HELDOUT : OSCAR_ACT_CALIB, cap->layer,
                                   cap->n_tokens, cap->n_seq, cap->seq_start, q, k, v);
        lp->t_store += osc_now() - t0;
        if (st != OSCAR_OK) return st;
    }
    if (b->heldout) {
        const size_t r0 = (size_t) (b->row0 - lp->n_cal);
        memcpy(lp->held->q[cap->layer] + r0 * qrow, q, T * qrow * sizeof(float));
        memcpy(lp->held->k[cap->layer] + r0 * kvrow, k, T * kvrow * sizeof(float));
        memcpy(lp->held->v[cap->layer] + r0 * kvrow, v, T * kvrow * sizeof(float));
        return OSCAR_OK;
    }
    if (lp->keep_k) {
        memcpy(lp->keep_k + (size_t) b->row0 * kvrow, k, T * kvrow * sizeof(float));
        memcpy(lp->keep_v + (size_t) b->row0 * kvrow, v, T * kvrow * sizeof(float));
    }
    double t0 = osc_now();
    struct oscar_stats_chunk ch = {.layer = cap->layer, .n_tokens = cap->n_tokens, .n_seq = cap->n_seq,
                                   .seq_start = cap->seq_start, .q = q, .k = k, .v = v};
    st = oscar_stats_add(lp->stats, &ch);
    lp->t_accum += osc_now() - t0;
    return st;
}

// seq_start of batch b (relative to its first token) into lp->sbuf.
static const int32_t * batch_starts(struct layer_pass * lp, const struct batch_ref * b) {
    const int32_t * starts = b->heldout ? lp->plan->heldout_start : lp->plan->seq_start;
    for (int32_t s = b->s0; s <= b->s1; s++) lp->sbuf[s - b->s0] = starts[s] - starts[b->s0];
    return lp->sbuf;
}

// Layer l on batch b: hidden rows in, the layer (hook fires), hidden rows out.
static enum oscar_status run_batch_layer(struct layer_pass * lp, const struct batch_ref * b, int32_t l) {
    const int32_t * starts = b->heldout ? lp->plan->heldout_start : lp->plan->seq_start;
    const struct oscar_batch batch = {.n_seq = b->s1 - b->s0, .seq_start = batch_starts(lp, b),
                                      .tokens = lp->plan->tokens + starts[b->s0], .pos = NULL};
    enum oscar_status st = oscar_forward_begin(lp->f, &batch);
    if (st != OSCAR_OK) return st;
    const size_t C = (size_t) lp->m->config.n_embd, bytes = (size_t) b->n * C * sizeof(float);
    float * resid = oscar_forward_residual(lp->f), * rows = lp->x + (size_t) b->row0 * C;
    if (l == 0) oscar_forward_embed(lp->f);
    else memcpy(resid, rows, bytes);
    lp->cur = b;
    if ((st = oscar_forward_layer(lp->f, l)) != OSCAR_OK) return st;
    memcpy(rows, resid, bytes);
    return OSCAR_OK;
}

// Layer l's SST sums from its kept calibration K/V, batch by batch as a second pass would feed them.
static enum oscar_status sst_from_kept(struct layer_pass * lp, int32_t l) {
    const size_t kvrow = (size_t) lp->m->config.n_head_kv * (size_t) lp->m->config.head_dim;
    double t0 = osc_now();
    enum oscar_status st = OSCAR_OK;
    for (int32_t i = 0; i < lp->n_batches && st == OSCAR_OK; i++) {
        const struct batch_ref * b = &lp->batches[i];
        if (b->heldout) continue;
        struct oscar_stats_chunk ch = {.layer = l, .n_tokens = b->n, .n_seq = b->s1 - b->s0,
                                       .seq_start = batch_starts(lp, b), .q = NULL,
                                       .k = lp->keep_k + (size_t) b->row0 * kvrow,
                                       .v = lp->keep_v + (size_t) b->row0 * kvrow};
        st = oscar_stats_add(lp->stats, &ch);
    }
    if (st == OSCAR_OK) st = oscar_stats_end_layer_pass(lp->stats, l);
    lp->t->accumulate += osc_now() - t0;
    return st;
}

// The batches: calibration sequences p->batch at a time, then the held-out ones.
static enum oscar_status plan_batches(struct layer_pass * lp) {
    const struct oscar_calib_plan * plan = lp->plan;
    const int32_t B = lp->p->batch;
    const int32_t n = (plan->n_seq + B - 1) / B + (plan->n_heldout + B - 1) / B;
    lp->batches = calloc((size_t) n, sizeof *lp->batches);
    if (!lp->batches) return osc_error(OSCAR_ERR_NOMEM, "calibration: out of memory for %d batches", (int) n);
    int64_t row = 0;
    for (int set = 0; set < 2; set++) {
        const int32_t n_seq = set ? plan->n_heldout : plan->n_seq;
        const int32_t * starts = set ? plan->heldout_start : plan->seq_start;
        for (int32_t s0 = 0; s0 < n_seq; s0 += B) {
            struct batch_ref * b = &lp->batches[lp->n_batches++];
            b->heldout = set == 1, b->s0 = s0, b->s1 = s0 + B < n_seq ? s0 + B : n_seq;
            b->row0 = row, b->n = starts[b->s1] - starts[s0];
            row += b->n;
        }
        if (set == 0) lp->n_cal = row;
    }
    lp->n_rows = row;
    return OSCAR_OK;
}

static enum oscar_status alloc_heldout(struct layer_pass * lp) {
    const struct oscar_model_config * c = &lp->m->config;
    const struct oscar_calib_plan * plan = lp->plan;
    struct oscar_calib_heldout * h = lp->held;
    memset(h, 0, sizeof *h);
    h->n_layer = c->n_layer, h->n_head = c->n_head, h->n_head_kv = c->n_head_kv;
    h->head_dim = c->head_dim, h->n_embd = c->n_embd;
    h->n_seq = plan->n_heldout;
    h->n_rows = plan->heldout_start[plan->n_heldout] - plan->heldout_start[0];
    const size_t L = (size_t) c->n_layer, T = (size_t) h->n_rows, D = (size_t) c->head_dim;
    h->q = calloc(L, sizeof(float *)), h->k = calloc(L, sizeof(float *)), h->v = calloc(L, sizeof(float *));
    h->wo = calloc(L, sizeof(float *));
    h->seq_start = malloc(((size_t) h->n_seq + 1) * sizeof(int32_t));
    if (!h->q || !h->k || !h->v || !h->wo || !h->seq_start) goto nomem;
    const size_t nwo = (size_t) c->n_embd * (size_t) c->n_head * D;
    if (oscar_model_streamed(lp->m) && !(h->wo_block = osc_alloc_large(L * nwo * sizeof(float)))) goto nomem;
    for (int32_t s = 0; s <= h->n_seq; s++) h->seq_start[s] = plan->heldout_start[s] - plan->heldout_start[0];
    for (size_t l = 0; l < L; l++) {
        h->q[l] = malloc(T * (size_t) c->n_head * D * sizeof(float) + 1);
        h->k[l] = malloc(T * (size_t) c->n_head_kv * D * sizeof(float) + 1);
        h->v[l] = malloc(T * (size_t) c->n_head_kv * D * sizeof(float) + 1);
        h->wo[l] = h->wo_block ? h->wo_block + l * nwo : lp->m->layers[l].wo; // the copy: keep_wo
        if (!h->q[l] || !h->k[l] || !h->v[l]) goto nomem;
    }
    return OSCAR_OK;
nomem:
    return osc_error(OSCAR_ERR_NOMEM, "held-out rows: out of memory (%zu rows x %zu layers)", T, L);
}

static void mib(double bytes, char * out, size_t n) { osc_format_count(bytes, "B", out, n); }

// What the pass holds, by part (the sizes it allocated), on stderr at -v.
static void report_memory(const struct layer_pass * lp) {
    const struct oscar_model_config * c = &lp->m->config;
    const struct oscar_calib_heldout * h = lp->held;
    const double f = sizeof(float), C = c->n_embd, D = c->head_dim, KV = c->n_head_kv * D, Q = c->n_head * D;
    const double T = (double) lp->p->batch * lp->p->seq_len, L = c->n_layer;
    const double emb = (double) c->n_vocab * C * f * (c->tied_embeddings ? 1 : 2);
    const double layer = (double) oscar_model_layer_bytes(lp->m), layers = (oscar_model_streamed(lp->m) ? 2 : L) * layer;
    char a[32], b[32], k[32], d[32], e[32], w[32], s[32];
    mib((double) lp->n_rows * C * f, a, sizeof a);
    mib(lp->keep_k ? 2.0 * (double) lp->n_cal * KV * f : 0, k, sizeof k);
    mib((double) h->n_rows * L * (Q + 2 * KV) * f + (h->wo_block ? L * C * Q * f : 0), d, sizeof d);
    mib(T * (2 * C + 2 * Q + 2 * KV + 2 * (double) c->n_ff) * f, s, sizeof s);
    mib(emb, e, sizeof e);
    mib(layers, w, sizeof w);
    mib(layer, b, sizeof b);
    osc_info("layer-major pass holds: hidden states %s, one layer's K/V %s, held-out rows%s %s, forward scratch %s, "
             "embedding %s, layers %s (%s each, %s)", a, k, h->wo_block ? " + W_O copies" : "", d, s, e, w, b,
             oscar_model_streamed(lp->m) ? "two at a time" : "all resident");
}

static enum oscar_status setup(struct layer_pass * lp, struct oscar_capture_hook * hook) {
    const struct oscar_model_config * c = &lp->m->config;
    const struct oscar_calib_params * p = lp->p;
    // The capture runs the model's own attention (sliding windows included), and KTK/VTV/QQT/SST do
    // not depend on the attention pattern; but the attention-mass (VATT) weights and the held-out
    // logit errors of the clip search and the gate take every earlier key of a sequence. That is
    // exact while sequences fit in the window, so only longer sequences are refused.
    const int32_t W = oscar_model_window(c);
    if (W > 0 && p->seq_len > W)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "calibration: %s has sliding-window attention (sliding_window = %d) "
                         "and seq_len %d is longer: the attention-mass (VATT) objective and the held-out metrics "
                         "assume full causal attention; use a seq_len <= %d", lp->m->source, W, p->seq_len, W);
    enum oscar_status st = plan_batches(lp);
    if (st != OSCAR_OK || (st = alloc_heldout(lp)) != OSCAR_OK) return st;
    const size_t C = (size_t) c->n_embd, kvrow = (size_t) c->n_head_kv * (size_t) c->head_dim;
    const size_t T = (size_t) p->batch * (size_t) p->seq_len;
    lp->x = osc_alloc_large((size_t) lp->n_rows * C * sizeof(float));
    lp->sbuf = malloc(((size_t) p->batch + 1) * sizeof(int32_t));
    bool ok = lp->x && lp->sbuf;
    if (oscar_calib_stats_kinds(p) & OSCAR_STATS_SST) {
        lp->keep_k = osc_alloc_large((size_t) lp->n_cal * kvrow * sizeof(float));
        lp->keep_v = osc_alloc_large((size_t) lp->n_cal * kvrow * sizeof(float));
        ok = ok && lp->keep_k && lp->keep_v;
    }
    if (p->capture_bf16) {
        lp->rq = malloc(T * (size_t) c->n_head * (size_t) c->head_dim * sizeof(float));
        lp->rk = malloc(T * kvrow * sizeof(float));
        lp->rv = malloc(T * kvrow * sizeof(float));
        ok = ok && lp->rq && lp->rk && lp->rv;
    }
    if (!ok)
        return osc_error(OSCAR_ERR_NOMEM, "calibration: out of memory for the hidden states of %lld tokens",
                         (long long) lp->n_rows);
    *hook = (struct oscar_capture_hook){.want = NULL, .on_layer = on_layer, .user = lp, .qkv_only = true};
    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.n_threads = p->n_threads;
    fp.max_tokens = p->batch * p->seq_len;
    fp.hook = hook;
    return oscar_forward_init(lp->m, &fp, &lp->f);
}

// Layer l's weights in place before it runs; the next layer read meanwhile.
static enum oscar_status acquire_layer(struct layer_pass * lp, int32_t l) {
    double t0 = osc_now();
    enum oscar_status st = oscar_model_layer_acquire(lp->m, l);
    if (st == OSCAR_OK && l + 1 < lp->m->config.n_layer) oscar_model_layer_prefetch(lp->m, l + 1);
    lp->t->load += osc_now() - t0;
    return st;
}

// After layer l: the held-out rows keep its W_O (a streamed model frees the layer).
static void release_layer(struct layer_pass * lp, int32_t l) {
    struct oscar_calib_heldout * h = lp->held;
    if (h->wo_block) {
        const struct oscar_model_config * c = &lp->m->config;
        memcpy(h->wo_block + (size_t) l * c->n_embd * c->n_head * c->head_dim, lp->m->layers[l].wo,
               (size_t) c->n_embd * (size_t) c->n_head * (size_t) c->head_dim * sizeof(float));
    }
    oscar_model_layer_release(lp->m, l);
}

// W_O of the layers a resumed run does not run again.
static enum oscar_status keep_done_layers(struct layer_pass * lp, int32_t first) {
    enum oscar_status st = OSCAR_OK;
    for (int32_t l = 0; l < first && st == OSCAR_OK && lp->held->wo_block; l++) {
        if ((st = acquire_layer(lp, l)) == OSCAR_OK) release_layer(lp, l);
    }
    return st;
}

// A new accumulator at layer 0, or the checkpoint's state (--resume).
static enum oscar_status start(struct layer_pass * lp, const struct osc_layer_ckpt * ck, int32_t * first_layer) {
    const struct oscar_model_config * c = &lp->m->config;
    *first_layer = 0;
    if (lp->p->resume && ck->path && access(ck->path, F_OK) == 0) {
        enum oscar_status st = osc_layer_ckpt_load(ck, &lp->stats, first_layer);
        if (st == OSCAR_OK)
            osc_info("resuming at layer %d/%d from %s", (int) *first_layer, (int) c->n_layer, ck->path);
        return st;
    }
    struct oscar_stats_params sp = oscar_stats_default_params();
    sp.n_layer = c->n_layer, sp.n_head = c->n_head, sp.n_head_kv = c->n_head_kv, sp.head_dim = c->head_dim;
    sp.kinds = oscar_calib_stats_kinds(lp->p);
    sp.n_threads = lp->p->n_threads;
    sp.max_tokens = lp->p->batch * lp->p->seq_len;
    return oscar_stats_init(&sp, &lp->stats);
}

static void teardown(struct layer_pass * lp) {
    oscar_forward_free(lp->f);
    oscar_stats_free(lp->stats);
    free(lp->batches);
    free(lp->x);
    free(lp->keep_k);
    free(lp->keep_v);
    free(lp->rq);
    free(lp->rk);
    free(lp->rv);
    free(lp->sbuf);
}

enum oscar_status oscar_calib_capture(struct oscar_model * m, const struct oscar_calib_plan * plan,
                                      const struct oscar_calib_params * p, struct oscar_stats ** stats,
                                      struct oscar_calib_heldout * held, struct oscar_calib_timing * t) {
    struct layer_pass lp = {.m = m, .plan = plan, .p = p, .held = held, .t = t};
    struct oscar_capture_hook hook;
    *stats = NULL;
    memset(held, 0, sizeof *held); // freed on any failure, even one before it is filled
    enum oscar_status st = setup(&lp, &hook);
    const int32_t L = m->config.n_layer;
    const struct osc_layer_ckpt ck = {.path = p->checkpoint_path, .m = m, .plan = plan, .p = p,
                                      .kinds = oscar_calib_stats_kinds(p),
                                      .x = lp.x, .n_rows = lp.n_rows, .held = held};
    int32_t first = 0;
    if (st == OSCAR_OK) st = start(&lp, &ck, &first);
    if (st == OSCAR_OK) st = keep_done_layers(&lp, first);
    if (st == OSCAR_OK) report_memory(&lp);
    struct osc_progress pr;
    osc_progress_init(&pr, "layer-major pass", "token-layers", (int64_t) L * lp.n_rows);
    int64_t since = 0;   // token-layers since the last checkpoint
    for (int32_t l = first; l < L && st == OSCAR_OK; l++) {
        st = acquire_layer(&lp, l);
        for (int32_t i = 0; i < lp.n_batches && st == OSCAR_OK; i++) {
            const struct batch_ref * b = &lp.batches[i];
            double t0 = osc_now(), a0 = lp.t_accum, w0 = lp.t_store;
            st = run_batch_layer(&lp, b, l);
            const double dt = osc_now() - t0 - (lp.t_accum - a0) - (lp.t_store - w0);
            if (b->heldout) t->heldout += dt;
            else t->forward += dt;
            osc_progress_update(&pr, (int64_t) l * lp.n_rows + b->row0 + b->n);
        }
        double t0 = osc_now();
        if (st == OSCAR_OK) st = oscar_stats_end_layer_pass(lp.stats, l);
        t->accumulate += osc_now() - t0;
        if (st == OSCAR_OK && oscar_stats_layer_phase(lp.stats, l) == 2) st = sst_from_kept(&lp, l);
        if (st == OSCAR_OK) release_layer(&lp, l);
        since += lp.n_rows;
        if (st == OSCAR_OK && ck.path && p->checkpoint_every > 0 && since >= p->checkpoint_every && l + 1 < L) {
            st = osc_layer_ckpt_save(&ck, lp.stats, l + 1);
            since = 0;
        }
    }
    if (st == OSCAR_OK) {
        osc_progress_finish(&pr);
        osc_debug("after the layer-major pass: peak RSS %.1f MiB", oscar_calib_peak_rss_mb());
    }
    t->accumulate += lp.t_accum;
    t->store += lp.t_store;
    if (st == OSCAR_OK) {
        *stats = lp.stats;
        lp.stats = NULL;
    } else {
        oscar_calib_heldout_free(held);
    }
    teardown(&lp);
    return st;
}
