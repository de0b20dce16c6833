// layer-pass.c - the calibration forward pass, layer-major, on one backend
// interface (backend/forward-backend.h: the CPU's lib/model/forward.c or the CUDA
// pass): every calibration and held-out sequence advances through layer l
// before any enters layer l+1, their hidden states resident on the backend. For
// each layer: its weights go to the backend (read from the file when the pass
// reaches the layer, the next one prefetched meanwhile; random-init weights on
// CUDA are made on the device); the batches run that layer, the calibration
// batches feeding the pass-1 sums and keeping their K/V, the held-out batches
// handing their rows to the host (and every batch its rows to the activation
// store); the layer's pass 1 ends, which finalises its A_h, and the backend sums
// SST from the kept K/V, so no second forward pass exists; the held-out rows
// keep a copy of the layer's W_O as the backend ran it; the layer is released;
// with a finisher (finish.c) the layer is finished there and then, and its
// held-out rows slot is reused by the next layer.
//
// Same answer as two whole passes on the CPU: the batches are the same
// (calibration sequences p->batch at a time, then the held-out ones), so every
// GEMM sees the same shapes, and lib/stats sums depend only on each layer's
// token order (stats.h), which is unchanged. Memory: the hidden states of all
// sequences [N, C], one layer's calibration K/V [N_cal, Hkv, D] x 2 when SST is
// on, two layers' weights, the held-out rows (one layer's with a finisher whose
// gate runs per layer, else every layer's), with --refine optr one layer's training rows
// (optr-rows.c), and the forward scratch of one batch.
//
// Checkpoints (layer-ckpt.c) are taken between layers, after at least
// p->checkpoint_every token-layers since the last one; --resume continues at
// the layer after the last checkpoint with the same batches.
//
// Data-parallel (e->dp, calibrate.h): each rank keeps only its share of the
// batches (rows numbered locally: its calibration rows, then on rank 0 the
// held-out rows); the sums meet on rank 0 at each layer end (dp-stats.c);
// checkpoints gather every rank's hidden states into the single-process layout;
// rank 0 finishes each layer with the other ranks scoring parts of its clip grid
// and gate (finish-split.h: they hold one slot of held-out rows, sent by rank 0).
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/forward-backend.h"
#include "calibrate/actstore.h"
#include "calibrate/calibrate.h"
#include "calibrate/dp.h"
#include "calibrate/finish-split.h"
#include "calibrate/layer-ckpt.h"
#include "rotation/optr.h"
#include "util/log.h"
#include "util/mem.h"

// One forward batch: sequences [s0, s1) of a set, rows [row0, row0 + n) of the hidden states.
struct batch_ref {
    bool    heldout;
    int32_t s0, s1;
    int64_t row0; // into the hidden states (calibration rows first, then held-out rows)
    int32_t n;
};

struct layer_pass {
    const struct oscar_calib_engine * e;
    struct oscar_model * m;    // opened, loaded, or (random weights on the device) the shape only
    const struct oscar_model_config * c;
    const struct oscar_calib_plan * plan;
    const struct oscar_calib_params * p;
    struct oscar_stats * stats;
    struct oscar_calib_heldout * held;
    struct oscar_calib_finisher * fin; // rank 0's, begun by the pass, or NULL
    bool split_on;             // several ranks share each layer's clip search and gate (finish-split.h)
    struct osc_calib_split * split;
    struct oscar_calib_timing * t;
    struct oscar_fwd * f;
    struct batch_ref * batches;
    int32_t n_batches;
    int64_t n_cal, n_rows;     // calibration rows; all rows (this rank's)
    float * x_host;            // [n_rows, C] hidden states for checkpoints, or NULL
    struct osc_dp * dp;        // the process group (one process: osc_dp_single)
    int64_t * rank_cal;        // [size] calibration rows of every rank (data-parallel)
    int64_t n_rows_all;        // rows of every rank together (the single-process n_rows)
    float * x_all;             // rank 0 of several: [n_rows_all, C] for checkpoints, or NULL
    int32_t * sbuf;            // [batch + 1] seq_start of the current batch
    const struct batch_ref * cur;
    double t_store;
    bool optr_on;              // --refine optr on rank 0: the layer's training rows are kept
    struct oscar_calib_optr_rows optr;
};

// The host hook: the held-out batches (and with an activation store every batch) want their rows,
// and with --refine optr the calibration batches OptR trains on or takes the key mean of.
static bool want_rows(void * user, int32_t layer) {
    (void) layer;
    const struct layer_pass * lp = user;
    return lp->cur->heldout || lp->p->act_out || (lp->optr_on && oscar_calib_optr_rows_want(&lp->optr, lp->cur->row0));
}

static enum oscar_status on_rows(void * user, const struct oscar_capture_layer * cap) {
    struct layer_pass * lp = user;
    const struct batch_ref * b = lp->cur;
    const size_t T = (size_t) cap->n_tokens, D = (size_t) lp->c->head_dim;
    const size_t qrow = (size_t) lp->c->n_head * D, kvrow = (size_t) lp->c->n_head_kv * D;
    if (lp->p->act_out) {
        double t0 = osc_now();
        enum oscar_status st = oscar_actstore_append(lp->p->act_out, b->heldout ? OSCAR_ACT_HELDOUT : OSCAR_ACT_CALIB,
                                                     cap->layer, cap->n_tokens, cap->n_seq, cap->seq_start, cap->q,
                                                     cap->k, cap->v);
        lp->t_store += osc_now() - t0;
        if (st != OSCAR_OK) return st;
    }
    if (!b->heldout)
        return lp->optr_on ? oscar_calib_optr_rows_add(&lp->optr, cap->layer, b->row0, cap->n_tokens, cap->q, cap->k,
                                                       cap->v)
                           : OSCAR_OK;
    const size_t r0 = (size_t) (b->row0 - lp->n_cal);   // q[l] is the one slot with a finisher
    memcpy(lp->held->q[cap->layer] + r0 * qrow, cap->q, T * qrow * sizeof(float));
    memcpy(lp->held->k[cap->layer] + r0 * kvrow, cap->k, T * kvrow * sizeof(float));
    memcpy(lp->held->v[cap->layer] + r0 * kvrow, cap->v, T * kvrow * sizeof(float));
    return OSCAR_OK;
}

// seq_start of batch b (relative to its first token) into lp->sbuf.
static const int32_t * batch_starts(struct layer_pass * lp, const struct batch_ref * b) {
    const int32_t * starts = b->heldout ? lp->plan->heldout_start : lp->plan->seq_start;
    for (int32_t s = b->s0; s <= b->s1; s++) lp->sbuf[s - b->s0] = starts[s] - starts[b->s0];
    return lp->sbuf;
}

// Layer l on batch b: the calibration batches feed the sums, the hook takes the rows it wants.
static enum oscar_status run_batch_layer(struct layer_pass * lp, const struct batch_ref * b, int32_t l) {
    const int32_t * starts = b->heldout ? lp->plan->heldout_start : lp->plan->seq_start;
    const struct oscar_batch batch = {.n_seq = b->s1 - b->s0, .seq_start = batch_starts(lp, b),
                                      .tokens = lp->plan->tokens + starts[b->s0], .pos = NULL};
    lp->cur = b;
    return oscar_fwd_layer_run(lp->f, l, &batch, b->row0, !b->heldout);
}

// The batches: calibration sequences p->batch at a time, then the held-out ones. Data-parallel:
// this rank's share of the calibration batches (dp.h's contiguous blocks), the held-out ones on
// rank 0; rows numbered within the rank.
static enum oscar_status plan_batches(struct layer_pass * lp) {
    const struct oscar_calib_plan * plan = lp->plan;
    const struct osc_dp * dp = lp->dp;
    const int32_t B = lp->p->batch;
    const int32_t n_cal_b = (plan->n_seq + B - 1) / B, n = n_cal_b + (plan->n_heldout + B - 1) / B;
    if (n_cal_b < dp->size)
        return osc_error(OSCAR_ERR_INVALID, "calibration: %d ranks but only %d calibration batches of %d sequences: "
                         "use fewer ranks, a smaller --batch or more --tokens", (int) dp->size, (int) n_cal_b, (int) B);
    lp->batches = calloc((size_t) n, sizeof *lp->batches);
    lp->rank_cal = calloc((size_t) dp->size, sizeof(int64_t));
    if (!lp->batches || !lp->rank_cal)
        return osc_error(OSCAR_ERR_NOMEM, "calibration: out of memory for %d batches", (int) n);
    int64_t row = 0, all = 0, b0 = 0, b1 = 0;
    osc_dp_share(dp, dp->rank, n_cal_b, &b0, &b1);
    for (int set = 0; set < 2; set++) {
        const int32_t n_seq = set ? plan->n_heldout : plan->n_seq;
        const int32_t * starts = set ? plan->heldout_start : plan->seq_start;
        int32_t i = 0;
        for (int32_t s0 = 0; s0 < n_seq; s0 += B, i++) {
            const int32_t s1 = s0 + B < n_seq ? s0 + B : n_seq, rows = starts[s1] - starts[s0];
            all += rows;
            if (set == 0) {
                int32_t r = 0; // the rank that runs batch i
                for (int64_t c0, c1; osc_dp_share(dp, r, n_cal_b, &c0, &c1), i >= c1; r++) {}
                lp->rank_cal[r] += rows;
            }
            if (set == 0 ? (i < b0 || i >= b1) : dp->rank != 0) continue;
            struct batch_ref * b = &lp->batches[lp->n_batches++];
            b->heldout = set == 1, b->s0 = s0, b->s1 = s1;
            b->row0 = row, b->n = rows;
            row += b->n;
        }
        if (set == 0) lp->n_cal = row;
    }
    lp->n_rows = row, lp->n_rows_all = all;
    if (dp->size > 1) { // bit-identical when every share starts on the stats' block grid
        bool aligned = true;
        for (int64_t r = 1, start = 0; r < dp->size; r++)
            start += lp->rank_cal[r - 1], aligned = aligned && start % OSCAR_STATS_BLOCK == 0;
        osc_info("data-parallel pass over %d ranks (%s): rank 0 runs calibration batches 0-%lld of %d and the "
                 "held-out ones; sums %s", (int) dp->size, dp->engine, (long long) b1 - 1, (int) n_cal_b,
                 aligned ? "bit-identical to one process"
                         : "within fp64 rounding of one process (a rank's share starts off the 128-token block "
                           "grid: make batch x seq_len a multiple of 128 for identical sums)");
    }
    return OSCAR_OK;
}

// The one slot of held-out rows page-locked by the backend that uploads it for every layer's
// evaluation (CUDA), when it can; nq / nkv / nwo floats.
static void pin_slot(const char * device, struct oscar_calib_heldout * h, size_t nq, size_t nkv, size_t nwo) {
    const struct oscar_backend_i * be = NULL;
    if (!device || oscar_backend_get(device, &be) != OSCAR_OK || !be->host_pin) return;
    void * p[4] = {h->q[0], h->k[0], h->v[0], h->wo_block};
    const size_t n[4] = {nq, nkv, nkv, nwo};
    int done = 0;
    while (done < 4 && be->host_pin(p[done], n[done] * sizeof(float)) == OSCAR_OK) done++;
    if (done == 4) {
        h->pinned = be;
        return;
    }
    osc_debug("held-out rows stay pageable: %s", oscar_last_error());
    while (done > 0) be->host_unpin(p[--done]);
}

// The held-out rows and W_O copies (the weights the backend ran): of every layer, or with a
// finisher whose gate runs per layer ONE slot that every layer's pointers share, reused each layer.
static enum oscar_status alloc_heldout(struct layer_pass * lp) {
    const struct oscar_model_config * c = lp->c;
    const struct oscar_calib_plan * plan = lp->plan;
    struct oscar_calib_heldout * h = lp->held;
    memset(h, 0, sizeof *h);
    h->n_layer = c->n_layer, h->n_head = c->n_head, h->n_head_kv = c->n_head_kv;
    h->head_dim = c->head_dim, h->n_embd = c->n_embd, h->attn_scale = oscar_attn_scale_param(c);
    h->window = oscar_calib_layer_windows(c);
    h->n_seq = plan->n_heldout;
    h->n_rows = plan->heldout_start[plan->n_heldout] - plan->heldout_start[0];
    const size_t L = (size_t) c->n_layer, T = (size_t) h->n_rows, D = (size_t) c->head_dim;
    if (lp->dp->rank != 0 && !lp->split_on) { // the held-out rows are rank 0's
        h->n_seq = 0, h->n_rows = 0;
        return OSCAR_OK;
    }
    // the other ranks of a split finisher: one slot, which rank 0's rows fill (W_O: their own copy)
    h->n_slot = lp->dp->rank != 0 || (lp->fin && !oscar_calib_finish_gate_at_end(lp->p)) ? 1 : 0;
    const size_t slots = h->n_slot == 1 ? 1 : L;
    h->q = calloc(L, sizeof(float *)), h->k = calloc(L, sizeof(float *)), h->v = calloc(L, sizeof(float *));
    h->wo = calloc(L, sizeof(float *));
    h->seq_start = malloc(((size_t) h->n_seq + 1) * sizeof(int32_t));
    if (!h->q || !h->k || !h->v || !h->wo || !h->seq_start || !h->window) goto nomem;
    const size_t nwo = (size_t) c->n_embd * (size_t) c->n_head * D;
    if (!(h->wo_block = osc_alloc_large(slots * nwo * sizeof(float)))) goto nomem;
    for (int32_t s = 0; s <= h->n_seq; s++) h->seq_start[s] = plan->heldout_start[s] - plan->heldout_start[0];
    for (size_t l = 0; l < L; l++) {
        if (l < slots) {
            h->q[l] = malloc(T * (size_t) c->n_head * D * sizeof(float) + 1);
            h->k[l] = malloc(T * (size_t) c->n_head_kv * D * sizeof(float) + 1);
            h->v[l] = malloc(T * (size_t) c->n_head_kv * D * sizeof(float) + 1);
            if (!h->q[l] || !h->k[l] || !h->v[l]) goto nomem;
        } else {
            h->q[l] = h->q[0], h->k[l] = h->k[0], h->v[l] = h->v[0];
        }
        h->wo[l] = h->wo_block + (l < slots ? l : 0) * nwo;
    }
    if (slots == 1 && T > 0) pin_slot(lp->e->device, h, T * (size_t) c->n_head * D, T * (size_t) c->n_head_kv * D, nwo);
    return OSCAR_OK;
nomem:
    return osc_error(OSCAR_ERR_NOMEM, "held-out rows: out of memory (%zu rows x %zu layers)", T, L);
}

static void mib(double bytes, char * out, size_t n) { osc_format_count(bytes, "B", out, n); }

// What the pass holds, by part (the sizes it allocated), on stderr at -v.
static void report_memory(const struct layer_pass * lp) {
    const struct oscar_model_config * c = lp->c;
    const struct oscar_calib_heldout * h = lp->held;
    const double f = sizeof(float), C = c->n_embd, D = c->head_dim, KV = c->n_head_kv * D, Q = c->n_head * D;
    const double L = c->n_layer;
    const bool sst = oscar_calib_stats_kinds(lp->p) & OSCAR_STATS_SST;
    struct oscar_fwd_info fi;
    oscar_fwd_info(lp->f, &fi);
    char a[32], k[32], d[32], w[32], s[32];
    mib((double) lp->n_rows * C * f, a, sizeof a);
    mib(sst ? 2.0 * (double) lp->n_cal * KV * f : 0, k, sizeof k);
    const double slots = h->n_slot == 1 ? 1 : L;   // one slot with a finisher (its gate per layer)
    mib((double) h->n_rows * slots * (Q + 2 * KV) * f + slots * C * Q * f, d, sizeof d);
    mib((double) fi.workspace_bytes, s, sizeof s);
    mib((double) fi.weight_bytes, w, sizeof w);
    if (lp->optr_on) {
        char o[32];
        mib((double) lp->optr.n_local * (double) (lp->optr.q_row + 2 * lp->optr.kv_row) * f, o, sizeof o);
        osc_info("--refine optr keeps one layer's training rows on the host: %lld of the %lld rows of %d sequences, %s",
                 (long long) lp->optr.n_local, (long long) lp->optr.n_rows, (int) lp->optr.n_seq, o);
    }
    osc_info("layer-major pass on %s holds: hidden states %s, one layer's K/V %s (both on the %s), "
             "held-out rows + W_O copies %s (host, %s), weights %s (embedding + two layers), workspace %s",
             fi.device, a, k, fi.on_device ? "device" : "host", d,
             h->n_slot == 1 ? "one layer: each is finished as it ends" : "every layer", w, s);
}

// The batches, the held-out rows and the host buffers (before a checkpoint fills them).
static enum oscar_status setup_rows(struct layer_pass * lp) {
    const struct oscar_model_config * c = lp->c;
    const struct oscar_calib_params * p = lp->p;
    // Sliding-window layers: the capture, VATT and the held-out metrics all take each layer's own
    // window (oscar_layer_window), so sequences longer than the window are calibrated as they attend.
    enum oscar_status st = plan_batches(lp);
    if (st != OSCAR_OK || (st = alloc_heldout(lp)) != OSCAR_OK) return st;
    lp->sbuf = malloc(((size_t) p->batch + 1) * sizeof(int32_t));
    if (p->checkpoint_path) lp->x_host = osc_alloc_large((size_t) lp->n_rows * (size_t) c->n_embd * sizeof(float));
    const bool gather = p->checkpoint_path && lp->dp->size > 1 && lp->dp->rank == 0;
    if (gather) lp->x_all = osc_alloc_large((size_t) lp->n_rows_all * (size_t) c->n_embd * sizeof(float));
    if (!lp->sbuf || (p->checkpoint_path && !lp->x_host) || (gather && !lp->x_all))
        return osc_error(OSCAR_ERR_NOMEM, "calibration: out of memory for %lld rows", (long long) lp->n_rows);
    return OSCAR_OK;
}

// The backend's pass, feeding lp->stats; a resumed run's hidden states go to it.
static enum oscar_status setup_backend(struct layer_pass * lp, struct oscar_capture_hook * hook, bool resumed) {
    const struct oscar_calib_params * p = lp->p;
    *hook = (struct oscar_capture_hook){.want = want_rows, .on_layer = on_rows, .user = lp, .qkv_only = true};
    struct oscar_fwd_params fp = oscar_fwd_default_params();
    fp.device = lp->e->device ? lp->e->device : "cpu";
    fp.n_threads = p->n_threads;
    fp.max_tokens = p->batch * p->seq_len;
    fp.hook = hook;
    fp.stats = lp->stats;
    fp.fp32 = lp->e->fp32;
    fp.layered = true;
    fp.capture_bf16 = p->capture_bf16;
    enum oscar_status st = lp->e->random_on_device ? oscar_fwd_init_random(lp->c, p->seed, &fp, &lp->f)
                                                   : oscar_fwd_init(lp->m, &fp, &lp->f);
    if (st == OSCAR_OK) st = oscar_fwd_rows_init(lp->f, lp->n_rows, lp->n_cal);
    if (st == OSCAR_OK && resumed) st = oscar_fwd_rows_copy(lp->f, lp->x_host, false);
    return st;
}

// The ranks' sums meet on rank 0 as the backend adds them: per block as rows stream (cpu), or
// as whole-layer totals at each layer's end (a backend that keeps its sums on the device).
static enum oscar_status attach_exchange(struct layer_pass * lp) {
    struct oscar_fwd_info fi;
    oscar_fwd_info(lp->f, &fi);
    return fi.layer_sums ? osc_dp_stats_attach_sums(lp->dp, lp->stats) : osc_dp_stats_attach(lp->dp, lp->stats);
}

// Layer l's weights on the backend before it runs; the next layer read meanwhile.
static enum oscar_status acquire_layer(struct layer_pass * lp, int32_t l) {
    double t0 = osc_now();
    enum oscar_status st = OSCAR_OK;
    if (!lp->e->random_on_device) {
        st = oscar_model_layer_acquire(lp->m, l);
        if (st == OSCAR_OK && l + 1 < lp->c->n_layer) oscar_model_layer_prefetch(lp->m, l + 1);
    }
    if (st == OSCAR_OK) st = oscar_fwd_layer_set(lp->f, l, lp->e->random_on_device ? NULL : &lp->m->layers[l]);
    lp->t->load += osc_now() - t0;
    return st;
}

// After layer l: the held-out rows keep its W_O as the backend ran it; the host layer is freed
// (a streamed model; the backend keeps its own copy until the slot is reused).
static enum oscar_status release_layer(struct layer_pass * lp, int32_t l) {
    enum oscar_status st = OSCAR_OK;
    if (lp->held->wo_block) // rank 0's; its layer's slot
        st = oscar_fwd_copy_wo(lp->f, l, lp->held->wo_block + (size_t) (lp->held->n_slot == 1 ? 0 : l) *
                                             (size_t) lp->c->n_embd * (size_t) lp->c->n_head *
                                             (size_t) lp->c->head_dim);
    if (!lp->e->random_on_device) oscar_model_layer_release(lp->m, l);
    return st;
}

// W_O of the layers a resumed run does not run again (when every layer's rows are kept: a
// finisher with one slot has their results from the checkpoint and needs none).
static enum oscar_status keep_done_layers(struct layer_pass * lp, int32_t first) {
    enum oscar_status st = OSCAR_OK;
    if (lp->held->n_slot == 1) return OSCAR_OK;
    for (int32_t l = 0; l < first && st == OSCAR_OK; l++) {
        if ((st = acquire_layer(lp, l)) == OSCAR_OK) st = release_layer(lp, l);
    }
    return st;
}

// A new accumulator at layer 0, or the checkpoint's state (--resume).
static enum oscar_status start(struct layer_pass * lp, const struct osc_layer_ckpt * ck, int32_t * first_layer) {
    const struct oscar_model_config * c = lp->c;
    *first_layer = 0;
    // rank 0 reads the checkpoint (and says whether there is one); the others start empty at its layer
    int32_t have = lp->dp->rank == 0 && lp->p->resume && ck->path && access(ck->path, F_OK) == 0;
    enum oscar_status st = lp->dp->ops->bcast(lp->dp, &have, sizeof have);
    if (st != OSCAR_OK) return st;
    if (have && lp->dp->rank == 0) {
        st = osc_layer_ckpt_load(ck, &lp->stats, first_layer); // and the finished layers' results
        if (st == OSCAR_OK)
            osc_info("resuming at layer %d/%d from %s", (int) *first_layer, (int) c->n_layer, ck->path);
        if (st != OSCAR_OK || lp->dp->size == 1) return st;
    }
    if (have && (st = lp->dp->ops->bcast(lp->dp, first_layer, sizeof *first_layer)) != OSCAR_OK) return st;
    if (have && lp->dp->rank == 0) return OSCAR_OK;
    struct oscar_stats_params sp = oscar_stats_default_params();
    sp.n_layer = c->n_layer, sp.n_head = c->n_head, sp.n_head_kv = c->n_head_kv, sp.head_dim = c->head_dim;
    sp.attn_scale = oscar_attn_scale_param(c);
    sp.kinds = oscar_calib_stats_kinds(lp->p);
    sp.n_threads = lp->p->n_threads;
    sp.max_tokens = lp->p->batch * lp->p->seq_len;
    return oscar_stats_init(&sp, &lp->stats);
}

// --refine optr's key block sums of layer l: every rank's blocks to rank 0, added into its own in
// rank order. Shares that start on the block grid own whole blocks: the one-process bits; a block
// two ranks share gets both partial sums (within fp64 rounding).
static enum oscar_status exchange_key_blocks(struct layer_pass * lp, int32_t l) {
    struct osc_dp * dp = lp->dp;
    struct oscar_calib_optr_rows * r = &lp->optr;
    const int64_t B = OSCAR_OPTR_KEY_BLOCK, lo = r->row_base / B, hi = (r->row_base + lp->n_cal + B - 1) / B;
    const size_t blk = r->kv_row * sizeof(double);
    size_t * counts = calloc((size_t) dp->size, sizeof(size_t));
    double * all = NULL;
    enum oscar_status st = counts ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "optr key sums: out of memory");
    if (st == OSCAR_OK) st = dp->ops->gather(dp, r->k_blocks + lo * (int64_t) r->kv_row, (size_t) (hi - lo) * blk,
                                             (void **) &all, counts);
    const double * from = all;
    int64_t start = 0;   // rank k's first calibration row
    for (int32_t k = 0; st == OSCAR_OK && dp->rank == 0 && k < dp->size; start += lp->rank_cal[k++]) {
        const int64_t klo = start / B, khi = (start + lp->rank_cal[k] + B - 1) / B;
        if (counts[k] != (size_t) (khi - klo) * blk) {
            st = osc_error(OSCAR_ERR_IO, "optr key sums: layer %d: rank %d sent %zu bytes, expected %zu", (int) l,
                           (int) k, counts[k], (size_t) (khi - klo) * blk);
            break;
        }
        for (size_t i = 0; k > 0 && i < (size_t) (khi - klo) * r->kv_row; i++)   // rank 0's are in place
            r->k_blocks[(size_t) klo * r->kv_row + i] += from[i];
        from += counts[k] / sizeof(double);
    }
    if (st == OSCAR_OK && dp->rank == 0) r->k_gathered = true;
    free(all), free(counts);
    return st;
}

// Rows of every rank in the single-process order (calibration rows by rank, then the held-out
// rows, which are at the end of rank 0's): to_all gathers x_host into x_all on rank 0, else
// rank 0's x_all is scattered back. One process: x_host is already that layout.
static enum oscar_status exchange_rows(struct layer_pass * lp, bool to_all) {
    struct osc_dp * dp = lp->dp;
    if (dp->size == 1) return OSCAR_OK;
    int64_t n_cal_all = 0;
    for (int32_t r = 0; r < dp->size; r++) n_cal_all += lp->rank_cal[r];
    const size_t row = (size_t) lp->c->n_embd * sizeof(float), n_held = (size_t) (lp->n_rows_all - n_cal_all);
    size_t * counts = calloc(dp->size > 0 ? (size_t) dp->size : 1, sizeof(size_t));
    float * buf = NULL; // rank 0: every rank's rows in rank order (rank 0's held-out rows after its own)
    enum oscar_status st = counts ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "checkpoint rows: out of memory");
    for (int32_t r = 0; st == OSCAR_OK && r < dp->size; r++)
        counts[r] = ((size_t) lp->rank_cal[r] + (r == 0 ? n_held : 0)) * row;
    if (st == OSCAR_OK && to_all) {
        void * got = NULL;
        st = dp->ops->gather(dp, lp->x_host, (size_t) lp->n_rows * row, &got, counts);
        buf = got;
    } else if (st == OSCAR_OK && dp->rank == 0 && !(buf = osc_alloc_large((size_t) lp->n_rows_all * row))) {
        st = osc_error(OSCAR_ERR_NOMEM, "checkpoint rows: out of memory for %lld rows", (long long) lp->n_rows_all);
    }
    if (st == OSCAR_OK && dp->rank == 0) { // reorder between the two layouts
        char * a = (char *) lp->x_all, * g = (char *) buf;
        const size_t own = (size_t) lp->rank_cal[0] * row;
        const size_t others = (size_t) (lp->n_rows_all - (int64_t) n_held) * row - own;
        if (to_all) {
            memcpy(a, g, own), memcpy(a + own, g + own + n_held * row, others);
            memcpy(a + own + others, g + own, n_held * row);
        } else {
            memcpy(g, a, own), memcpy(g + own + n_held * row, a + own, others);
            memcpy(g + own, a + own + others, n_held * row);
        }
    }
    if (st == OSCAR_OK && !to_all) st = dp->ops->scatter(dp, buf, counts, lp->x_host, (size_t) lp->n_rows * row);
    free(buf), free(counts);
    return st;
}

static void teardown(struct layer_pass * lp) {
    oscar_fwd_free(lp->f);
    oscar_stats_free(lp->stats);
    free(lp->batches);
    free(lp->x_host);
    free(lp->x_all);
    free(lp->rank_cal);
    free(lp->sbuf);
    if (lp->fin) lp->fin->optr_rows = NULL, lp->fin->split = NULL, lp->fin->dp = osc_dp_single();
    osc_calib_split_free(lp->split);
    oscar_calib_optr_rows_free(&lp->optr);
}

// Layer l over every batch, its sums ended (pass 1, then SST).
static enum oscar_status run_layer(struct layer_pass * lp, int32_t l, struct osc_progress * pr) {
    struct oscar_calib_timing * t = lp->t;
    enum oscar_status st = OSCAR_OK;
    for (int32_t i = 0; i < lp->n_batches && st == OSCAR_OK; i++) {
        const struct batch_ref * b = &lp->batches[i];
        double t0 = osc_now(), w0 = lp->t_store;
        st = run_batch_layer(lp, b, l);
        const double dt = osc_now() - t0 - (lp->t_store - w0);
        if (b->heldout) t->heldout += dt;
        else t->forward += dt;
        osc_progress_update(pr, (int64_t) l * lp->n_rows + b->row0 + b->n);
    }
    double t0 = osc_now();
    if (st == OSCAR_OK) st = oscar_fwd_layer_end(lp->f, l);
    t->accumulate += osc_now() - t0;
    return st;
}

enum oscar_status oscar_calib_capture(const struct oscar_calib_engine * e, const struct oscar_calib_plan * plan,
                                      const struct oscar_calib_params * p, struct oscar_calib_finisher * fin,
                                      struct oscar_stats ** stats, struct oscar_calib_heldout * held,
                                      struct oscar_calib_timing * t) {
    struct layer_pass lp = {.e = e, .m = e->m, .c = &e->m->config, .plan = plan, .p = p, .held = held, .t = t,
                            .dp = e->dp ? e->dp : osc_dp_single(), .optr = {.layer = -1}};
    lp.fin = lp.dp->rank == 0 ? fin : NULL; // rank 0 alone has the held-out rows
    lp.split_on = fin && osc_calib_split_applies(lp.dp);   // the same on every rank
    struct oscar_capture_hook hook;
    *stats = NULL;
    memset(held, 0, sizeof *held); // freed on any failure, even one before it is filled
    const int32_t L = lp.c->n_layer;
    enum oscar_status st = setup_rows(&lp);
    const struct osc_layer_ckpt ck = {.path = p->checkpoint_path, .m = e->m, .plan = plan, .p = p,
                                      .device = e->device ? e->device : "cpu", .fp32 = e->fp32,
                                      .kinds = oscar_calib_stats_kinds(p),
                                      .x = lp.x_all ? lp.x_all : lp.x_host, .n_rows = lp.n_rows_all, .held = held,
                                      .fin = lp.fin};
    int32_t first = 0;
    const bool several = lp.dp->size > 1;
    if (st == OSCAR_OK && lp.fin) st = oscar_calib_finish_begin(lp.fin, p, held, NULL, plan, t);
    if (st == OSCAR_OK && lp.fin) lp.fin->dp = lp.dp;   // its fit, sign search and OptR split over the group
    // --refine optr: every rank keeps its part of one layer's training rows (the finisher routes them by
    // KV head, optr-route.h); with centring every rank sums its keys in blocks, which rank 0 gathers
    // after each layer (exchange_key_blocks)
    if (st == OSCAR_OK && p->refine_optr && (lp.fin || lp.split_on)) {
        int64_t row_base = 0;
        for (int32_t r = 0; r < lp.dp->rank; r++) row_base += lp.rank_cal[r];
        st = oscar_calib_optr_rows_alloc(p, plan, lp.c->n_head, lp.c->n_head_kv, lp.c->head_dim, row_base, lp.n_cal,
                                         &lp.optr);
        lp.optr_on = st == OSCAR_OK;
        lp.optr.rank_rows = lp.rank_cal, lp.optr.n_ranks = lp.dp->size;
        if (lp.fin) lp.fin->optr_rows = lp.optr_on ? &lp.optr : NULL;
    }
    if (st == OSCAR_OK && lp.split_on)
        st = osc_calib_split_open(lp.dp, p, held, plan, lp.optr_on ? &lp.optr : NULL, &lp.split);
    if (st == OSCAR_OK && lp.fin) lp.fin->split = lp.split;
    if (st == OSCAR_OK) st = start(&lp, &ck, &first);
    if (st == OSCAR_OK && several && first > 0) st = exchange_rows(&lp, false);
    if (st == OSCAR_OK) st = setup_backend(&lp, &hook, first > 0);
    if (st == OSCAR_OK && several) st = attach_exchange(&lp);
    if (st == OSCAR_OK && lp.dp->rank == 0) st = keep_done_layers(&lp, first);
    if (st == OSCAR_OK) report_memory(&lp);
    struct osc_progress pr;
    osc_progress_init(&pr, "layer-major pass", "token-layers", (int64_t) L * lp.n_rows);
    int64_t since = 0;   // token-layers since the last checkpoint
    for (int32_t l = first; l < L && st == OSCAR_OK; l++) {
        st = acquire_layer(&lp, l);
        if (st == OSCAR_OK) st = run_layer(&lp, l, &pr);
        if (st == OSCAR_OK) st = release_layer(&lp, l);
        if (st == OSCAR_OK && several && lp.optr_on && lp.optr.k_blocks) st = exchange_key_blocks(&lp, l);
        if (st == OSCAR_OK && lp.fin) st = oscar_calib_finish_layer(lp.fin, lp.stats, held, l); // then the slot is free
        else if (st == OSCAR_OK && lp.split) st = osc_calib_split_work(lp.split, held, l);     // rank 0 finishes with it
        since += lp.n_rows_all; // the same on every rank: they checkpoint together
        if (st == OSCAR_OK && ck.path && p->checkpoint_every > 0 && since >= p->checkpoint_every && l + 1 < L) {
            st = oscar_fwd_rows_copy(lp.f, lp.x_host, true);
            if (st == OSCAR_OK) st = exchange_rows(&lp, true);
            if (st == OSCAR_OK && lp.dp->rank == 0) st = osc_layer_ckpt_save(&ck, lp.stats, l + 1);
            since = 0;
        }
    }
    if (st == OSCAR_OK && lp.fin) st = oscar_calib_finish_end(lp.fin, held);
    if (st == OSCAR_OK) {
        osc_progress_finish(&pr);
        struct oscar_fwd_info fi;
        oscar_fwd_info(lp.f, &fi);
        if (fi.device_used_bytes > t->device_peak_bytes) t->device_peak_bytes = fi.device_used_bytes;
        t->forward -= fi.host_sums_s;   // the CPU adds the sums inside its runs
        t->accumulate += fi.host_sums_s;
        osc_debug("after the layer-major pass: peak RSS %.1f MiB", oscar_calib_peak_rss_mb());
        if (fi.stage_ms[4] > 0.0) // cuda with OSCAR_FWD_PROFILE=1: where the device time of the batches went
            osc_info("forward stages (device s, every batch): qkv %.2f, epilogue %.2f, attention %.2f, o %.2f, "
                     "MLP %.2f (sparse: route+group %.2f, expert GEMMs %.2f, combine %.2f), capture %.2f",
                     fi.stage_ms[0] * 1e-3, fi.stage_ms[1] * 1e-3, fi.stage_ms[2] * 1e-3, fi.stage_ms[3] * 1e-3,
                     fi.stage_ms[4] * 1e-3, fi.moe_ms[0] * 1e-3, fi.moe_ms[1] * 1e-3, fi.moe_ms[2] * 1e-3,
                     fi.stage_ms[5] * 1e-3);
        if (several) {
            int64_t sent, got;
            osc_dp_stats_bytes(&sent, &got);
            osc_debug("data-parallel sums: rank %d sent %.2f MiB and received %.2f MiB", (int) lp.dp->rank,
                      (double) sent / 1048576.0, (double) got / 1048576.0);
            osc_calib_split_bytes(&sent, &got);
            if (lp.split)
                osc_debug("data-parallel finishing (fit, %sgate split over %d ranks): rank %d sent %.2f MiB and "
                          "received %.2f MiB", p->clip_search ? "clip search and " : "", (int) lp.dp->size,
                          (int) lp.dp->rank, (double) sent / 1048576.0, (double) got / 1048576.0);
            for (int s = 0; lp.split && s < OSC_SPLIT_STAGES; s++) {   // by stage
                osc_calib_split_stage_bytes((enum osc_split_stage) s, &sent, &got);
                if (sent || got)
                    osc_debug("data-parallel %s: rank %d sent %.2f MiB and received %.2f MiB",
                              osc_calib_split_stage_name((enum osc_split_stage) s), (int) lp.dp->rank,
                              (double) sent / 1048576.0, (double) got / 1048576.0);
            }
        }
    }
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
