// refine.c - the OptR stage of oscar-calibrate (--refine optr): after the fit,
// before the clip search, every layer's rotations are refined per KV head by
// lib/rotation/optr.h. Training rows: the calibration rows of the activation
// store (--from-activations), or those the layer-major pass kept of the layer
// (optr-rows.c: the training sequences and the key sums, the same bits);
// early stopping: the held-out rows the clip search and the gate use (the paper
// early-stops on held-out chunks disjoint from the training chunks, as these
// are). The losses use the run's INT2 group, scale dtype and BF16 sink/recent,
// and the fixed clip ratios (--clip, default 0.96 / 0.92: the paper trains with
// them; the clip search afterwards picks the served ones). Per-layer rotations
// become per-KV-head ones. Refuses a store whose shapes differ from the held-out rows'.
// The refinement runs on the run's device (p->eval_device: the backend's optr_refine_layer, the
// CPU reference or the CUDA path, the same contract and result).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "calibrate/actstore.h"
#include "calibrate/calibrate.h"
#include "calibrate/finish-split.h"
#include "calibrate/optr-route.h"
#include "rotation/optr.h"
#include "util/log.h"

// max |RᵀR − I| in fp64.
static double orth_err(const float * R, int32_t D) {
    double worst = 0.0;
    for (int32_t i = 0; i < D; i++)
        for (int32_t j = 0; j < D; j++) {
            double s = 0.0;
            for (int32_t k = 0; k < D; k++) s += (double) R[(size_t) k * D + i] * (double) R[(size_t) k * D + j];
            worst = fmax(worst, fabs(s - (i == j ? 1.0 : 0.0)));
        }
    return worst;
}

static double mean_of(const double * x, int32_t n) {
    double s = 0.0;
    for (int32_t i = 0; i < n; i++) s += x[i];
    return s / n;
}

// The held-out loss at the kept step of each head (the base where reverted), averaged over heads.
static double kept_loss(const double * held, const int32_t * best, int32_t Hkv) {
    double s = 0.0;
    for (int32_t h = 0; h < Hkv; h++) s += held[(size_t) (best[h] + 1) * Hkv + h];
    return s / Hkv;
}

static struct oscar_optr_params optr_params(const struct oscar_calib_params * p, int32_t D) {
    struct oscar_optr_params op = oscar_optr_default_params(D, p->group_size);
    op.k_quant.meta_dtype = op.v_quant.meta_dtype = p->scale_dtype;
    op.k_quant.clip_ratio = p->k_clip, op.v_quant.clip_ratio = p->v_clip;
    op.sink = p->sink, op.recent = p->recent;
    op.steps = p->optr_steps > 0 ? p->optr_steps : op.steps;
    op.max_train_seq = p->optr_train_seq;
    op.center = p->optr_center;
    op.n_threads = p->n_threads;
    return op;
}

// The calibration sequences OptR chooses its training ones from: every one when centring (the
// store route reads them all for the mean), else the first p->optr_train_seq.
static int32_t candidate_sequences(const struct oscar_optr_params * op, const struct oscar_calib_plan * plan) {
    return !op->center && op->max_train_seq > 0 && op->max_train_seq < plan->n_seq ? op->max_train_seq : plan->n_seq;
}

int32_t oscar_calib_optr_train_prefix(const struct oscar_calib_params * p, const struct oscar_calib_plan * plan,
                                      int32_t head_dim) {
    const struct oscar_optr_params op = optr_params(p, head_dim);
    const int32_t n_cand = candidate_sequences(&op, plan);
    int32_t * idx = malloc(((size_t) n_cand + 1) * sizeof(int32_t));
    if (!idx) return -1;
    const int32_t n = oscar_optr_train_sequences(&op, plan->seq_start, n_cand, idx);
    const int32_t prefix = n > 0 ? idx[n - 1] + 1 : 0;
    free(idx);
    return prefix;
}

enum oscar_status oscar_calib_refine_alloc(struct oscar_actstore * store, const struct oscar_calib_heldout * h,
                                           const struct oscar_calib_params * p, const struct oscar_calib_fit * f,
                                           struct oscar_calib_refine * out) {
    const int32_t L = h->n_layer, Hq = h->n_head, Hkv = h->n_head_kv, D = h->head_dim;
    memset(out, 0, sizeof(*out));
    const struct oscar_actstore_info * si = store ? oscar_actstore_get_info(store) : NULL;
    if (si && (si->n_layer != L || si->n_head != Hq || si->n_head_kv != Hkv || si->head_dim != D))
        return osc_error(OSCAR_ERR_INVALID, "optr: the store (L %d Hq %d Hkv %d D %d) does not match the held-out "
                         "rows (L %d Hq %d Hkv %d D %d)", (int) si->n_layer, (int) si->n_head, (int) si->n_head_kv,
                         (int) si->head_dim, (int) L, (int) Hq, (int) Hkv, (int) D);
    if (f->rot.n_layer != L || f->rot.head_dim != D || f->rot.n_rot != Hkv)
        return osc_error(OSCAR_ERR_INVALID, "optr: the fit (L %d D %d, %d rotations per layer) does not match the "
                         "held-out rows (L %d Hkv %d D %d)", (int) f->rot.n_layer, (int) f->rot.head_dim,
                         (int) f->rot.n_rot, (int) L, (int) Hkv, (int) D);
    const struct oscar_optr_params op = optr_params(p, D);
    out->n_layer = L, out->n_head_kv = Hkv, out->steps = op.steps, out->center = op.center;
    out->k_kept = calloc((size_t) L, sizeof(int32_t)), out->v_kept = calloc((size_t) L, sizeof(int32_t));
    out->k_base = calloc((size_t) L, sizeof(double)), out->k_best = calloc((size_t) L, sizeof(double));
    out->v_base = calloc((size_t) L, sizeof(double)), out->v_best = calloc((size_t) L, sizeof(double));
    if (!out->k_kept || !out->v_kept || !out->k_base || !out->k_best || !out->v_base || !out->v_best) {
        oscar_calib_refine_free(out);
        return osc_error(OSCAR_ERR_NOMEM, "optr: out of memory");
    }
    return OSCAR_OK;
}

// The store's rows of layer l: the training sequences' (every row when centring: the mean).
static enum oscar_status store_rows(struct oscar_actstore * store, const struct oscar_calib_plan * plan,
                                    const struct oscar_calib_heldout * h, const struct oscar_optr_params * op,
                                    int32_t l, struct oscar_optr_rows * tr, float ** q, float ** k, float ** v,
                                    struct oscar_calib_timing * t) {
    const int32_t n_seq = candidate_sequences(op, plan);
    const size_t R = (size_t) plan->seq_start[n_seq], D = (size_t) h->head_dim;
    *q = malloc(R * (size_t) h->n_head * D * sizeof(float) + 1);
    *k = malloc(R * (size_t) h->n_head_kv * D * sizeof(float) + 1);
    *v = malloc(R * (size_t) h->n_head_kv * D * sizeof(float) + 1);
    if (!*q || !*k || !*v) return osc_error(OSCAR_ERR_NOMEM, "optr: out of memory (%zu rows)", R);
    double t1 = osc_now();
    enum oscar_status st = oscar_actstore_read(store, OSCAR_ACT_CALIB, l, 0, (int32_t) R, *q, *k, *v);
    if (t) t->store += osc_now() - t1;
    *tr = (struct oscar_optr_rows){.n_seq = n_seq, .seq_start = plan->seq_start, .q = *q, .k = *k, .v = *v};
    return st;
}

// The pass's rows of layer l on this rank (rank 0: and the key mean from every calibration row's sums).
static enum oscar_status pass_rows(struct osc_dp * dp, const struct oscar_calib_optr_rows * r,
                                   const struct oscar_calib_plan * plan, const struct oscar_optr_params * op,
                                   int32_t l, struct oscar_optr_rows * tr, float * k_mean) {
    const bool mean_here = op->center && dp->rank == 0;
    const bool took_rows = r->n_local > 0 || r->k_blocks;   // else this rank's batches hold none of them
    if ((took_rows && r->layer != l) || (mean_here && r->k_summed != r->n_cal_rows && !r->k_gathered) ||
        (took_rows && r->k_summed < r->n_local))
        return osc_error(OSCAR_ERR_INVALID, "optr: layer %d: the pass kept layer %d's rows (%lld of %lld summed)",
                         (int) l, (int) r->layer, (long long) r->k_summed, (long long) r->n_cal_rows);
    if (mean_here) oscar_optr_key_mean_of_blocks(r->k_blocks, r->n_cal_rows, r->kv_row, k_mean);
    *tr = (struct oscar_optr_rows){.n_seq = r->n_seq, .seq_start = plan->seq_start, .q = r->q, .k = r->k, .v = r->v};
    return OSCAR_OK;
}

// One KV head's result as it travels: its held-out losses (K, V: [steps + 1]), its rotations
// (K, V: [D, D]), its kept steps and the training sequences used (doubles first: aligned in place).
struct head_tail {
    int32_t k_best, v_best, n_train_seq, pad;
};

static size_t head_item_bytes(int32_t S, int32_t D) {
    return 2 * (size_t) (S + 1) * sizeof(double) + 2 * (size_t) D * D * sizeof(float) + sizeof(struct head_tail);
}

// Head i of r (its layout: [steps + 1, heads] losses, [heads, D, D] rotations) into item it.
static void pack_head(const struct oscar_optr_result * r, int32_t i, unsigned char * it) {
    const int32_t S = r->steps, H = r->n_head_kv;
    const size_t DD = (size_t) r->head_dim * r->head_dim;
    double * held = (double *) (void *) it;
    for (int32_t s = 0; s <= S; s++) held[s] = r->k_held[(size_t) s * H + i], held[S + 1 + s] = r->v_held[(size_t) s * H + i];
    float * rot = (float *) (void *) (held + 2 * (S + 1));
    memcpy(rot, r->k_rot + (size_t) i * DD, DD * sizeof(float));
    memcpy(rot + DD, r->v_rot + (size_t) i * DD, DD * sizeof(float));
    const struct head_tail tail = {.k_best = r->k_best[i], .v_best = r->v_best[i], .n_train_seq = r->n_train_seq};
    memcpy(rot + 2 * DD, &tail, sizeof tail);
}

// Item it as head h of all (allocated for every head of the layer).
static void unpack_head(const unsigned char * it, int32_t h, struct oscar_optr_result * all) {
    const int32_t S = all->steps, H = all->n_head_kv;
    const size_t DD = (size_t) all->head_dim * all->head_dim;
    const double * held = (const double *) (const void *) it;
    for (int32_t s = 0; s <= S; s++) all->k_held[(size_t) s * H + h] = held[s], all->v_held[(size_t) s * H + h] = held[S + 1 + s];
    const float * rot = (const float *) (const void *) (held + 2 * (S + 1));
    memcpy(all->k_rot + (size_t) h * DD, rot, DD * sizeof(float));
    memcpy(all->v_rot + (size_t) h * DD, rot + DD, DD * sizeof(float));
    struct head_tail tail;
    memcpy(&tail, rot + 2 * DD, sizeof tail);
    all->k_best[h] = tail.k_best, all->v_best[h] = tail.v_best, all->n_train_seq = tail.n_train_seq;
}

static bool result_alloc(struct oscar_optr_result * r, int32_t H, int32_t D, int32_t S) {
    memset(r, 0, sizeof *r);
    r->n_head_kv = H, r->head_dim = D, r->steps = S;
    const size_t HDD = (size_t) H * D * D;
    r->k_rot = malloc(HDD * sizeof(float)), r->v_rot = malloc(HDD * sizeof(float));
    r->k_held = malloc((size_t) (S + 1) * H * sizeof(double)), r->v_held = malloc((size_t) (S + 1) * H * sizeof(double));
    r->k_best = malloc((size_t) H * sizeof(int32_t)), r->v_best = malloc((size_t) H * sizeof(int32_t));
    return r->k_rot && r->v_rot && r->k_held && r->v_held && r->k_best && r->v_best;
}

// What a rank refines: its KV heads' slices of the held-out rows and W_O (the layer's own when it
// has every head), its base rotations and key mean. Owned copies in buf.
struct head_share {
    struct osc_optr_heads hs;
    struct oscar_optr_layer in;
    float * buf;
};

static enum oscar_status share_heads(struct osc_dp * dp, const struct oscar_calib_heldout * h, int32_t l,
                                     const float * kb, const float * vb, const float * k_mean,
                                     struct head_share * sh) {
    const int32_t Hq = h->n_head, Hkv = h->n_head_kv, D = h->head_dim, g = Hq / Hkv;
    int64_t a, b;
    osc_dp_share(dp, dp->rank, Hkv, &a, &b);
    sh->hs = (struct osc_optr_heads){.n_head = Hq, .n_head_kv = Hkv, .head_dim = D, .h0 = (int32_t) a,
                                     .nh = (int32_t) (b - a)};
    const int32_t h0 = sh->hs.h0, nh = sh->hs.nh;
    const size_t DD = (size_t) D * D, T = (size_t) h->n_rows, C = (size_t) h->n_embd;
    const float * q = h->q[l], * k = h->k[l], * v = h->v[l], * wo = h->wo[l];
    if (nh < Hkv) {   // the heads' columns
        const size_t qw = osc_optr_q_width(&sh->hs), kw = osc_optr_kv_width(&sh->hs);
        if (!(sh->buf = malloc((T * (qw + 2 * kw) + C * qw) * sizeof(float) + 1)))
            return osc_error(OSCAR_ERR_NOMEM, "optr: layer %d: out of memory for KV heads %d-%d", (int) l, (int) h0,
                             (int) (h0 + nh - 1));
        float * hq = sh->buf, * hk = hq + T * qw, * hv = hk + T * kw, * hw = hv + T * kw;
        osc_optr_pack_heads(q, (int64_t) T, Hq, h0 * g, nh * g, D, hq);
        osc_optr_pack_heads(k, (int64_t) T, Hkv, h0, nh, D, hk);
        osc_optr_pack_heads(v, (int64_t) T, Hkv, h0, nh, D, hv);
        osc_optr_pack_heads(wo, (int64_t) C, Hq, h0 * g, nh * g, D, hw);
        q = hq, k = hk, v = hv, wo = hw;
    }
    sh->in = (struct oscar_optr_layer){
        .layer = l, .n_head = nh * g, .n_head_kv = nh, .head_dim = D, .n_embd = h->n_embd, .wo = wo,
        .attn_scale = h->attn_scale, .k_rot_base = kb + (size_t) h0 * DD, .v_rot_base = vb + (size_t) h0 * DD,
        .k_mean = k_mean ? k_mean + (size_t) h0 * D : NULL, .n_head_kv_layer = Hkv,
        .held = {.n_seq = h->n_seq, .seq_start = h->seq_start, .q = q, .k = k, .v = v},
    };
    return OSCAR_OK;
}

// Rank 0: the gathered heads (all) into f's layer l and out's record.
static void record_layer(const struct oscar_optr_result * r, const float * k_mean, bool center, int32_t l,
                         struct oscar_calib_fit * f, struct oscar_calib_refine * out) {
    const int32_t Hkv = r->n_head_kv, D = r->head_dim;
    const size_t HDD = (size_t) Hkv * (size_t) D * (size_t) D;
    memcpy(oscar_rotations_k(&f->rot, l, 0), r->k_rot, HDD * sizeof(float));   // layer l's Hkv heads
    memcpy(oscar_rotations_v(&f->rot, l, 0), r->v_rot, HDD * sizeof(float));
    if (center) memcpy(oscar_rotations_k_mean(&f->rot, l, 0), k_mean, (size_t) Hkv * D * sizeof(float));
    for (int32_t hh = 0; hh < Hkv; hh++) out->k_kept[l] += r->k_best[hh] >= 0, out->v_kept[l] += r->v_best[hh] >= 0;
    out->k_base[l] = mean_of(r->k_held, Hkv), out->k_best[l] = kept_loss(r->k_held, r->k_best, Hkv);
    out->v_base[l] = mean_of(r->v_held, Hkv), out->v_best[l] = kept_loss(r->v_held, r->v_best, Hkv);
    out->n_train_seq = r->n_train_seq;
    osc_debug("optr layer %d: K held %.4g -> %.4g (%d/%d heads kept), V held %.4g -> %.4g (%d/%d)", (int) l,
              out->k_base[l], out->k_best[l], (int) out->k_kept[l], (int) Hkv, out->v_base[l], out->v_best[l],
              (int) out->v_kept[l], (int) Hkv);
    for (int32_t hh = 0; hh < Hkv; hh++) {   // the fit's orthogonality report, refined
        f->orth_err_max = fmax(f->orth_err_max, orth_err(oscar_rotations_k(&f->rot, l, hh), D));
        f->orth_err_max = fmax(f->orth_err_max, orth_err(oscar_rotations_v(&f->rot, l, hh), D));
    }
}

// This rank's heads refined on their routed training rows; their results packed in head order.
static enum oscar_status refine_heads(struct osc_dp * dp, const struct oscar_backend_i * be,
                                      const struct oscar_optr_rows * train, const struct osc_optr_source * src,
                                      const int64_t * start, struct head_share * sh,
                                      const struct oscar_optr_params * op, size_t item, unsigned char * mine) {
    struct osc_optr_routed rt;
    enum oscar_status st = osc_optr_route(dp, start, src, &sh->hs, &rt);
    if (st != OSCAR_OK || sh->hs.nh == 0) return st;
    sh->in.train = (struct oscar_optr_rows){.n_seq = train->n_seq, .seq_start = train->seq_start, .q = rt.q, .k = rt.k,
                                            .v = rt.v};
    struct oscar_optr_result r;
    if ((st = be->optr_refine_layer(&sh->in, op, &r)) != OSCAR_OK) {
        osc_error_prefix(st, "optr: layer %d, KV heads %d-%d", (int) sh->in.layer, (int) sh->hs.h0,
                         (int) (sh->hs.h0 + sh->hs.nh - 1));
    } else {
        for (int32_t i = 0; i < sh->hs.nh; i++) pack_head(&r, i, mine + (size_t) i * item);
        oscar_optr_result_free(&r);
    }
    osc_optr_routed_free(&rt);
    return st;
}

enum oscar_status oscar_calib_refine_layer(struct osc_dp * dp, struct oscar_actstore * store,
                                           const struct oscar_calib_optr_rows * rows,
                                           const struct oscar_calib_plan * plan,
                                           const struct oscar_calib_heldout * h, const struct oscar_calib_params * p,
                                           int32_t l, struct oscar_calib_fit * f, struct oscar_calib_refine * out,
                                           struct oscar_calib_timing * t) {
    const double t0 = osc_now(), store0 = t ? t->store : 0.0;
    const int32_t Hkv = h->n_head_kv, D = h->head_dim;
    const bool root = dp->rank == 0;
    // OptR's losses rebuild full causal attention (optr-loss.c): a sliding layer's window is not in them yet
    if (h->window && h->window[l] > 0 && p->seq_len > h->window[l])
        return osc_error(OSCAR_ERR_UNSUPPORTED, "optr: layer %d has a sliding window of %d keys < seq_len %d; OptR "
                         "assumes full causal attention (calibrate without OptR refinement)", (int) l,
                         (int) h->window[l], (int) p->seq_len);
    const struct oscar_optr_params op = optr_params(p, D);
    const size_t HD = (size_t) Hkv * D, HDD = HD * D, item = head_item_bytes(op.steps, D);
    float * q = NULL, * k = NULL, * v = NULL;
    float * own = root ? NULL : malloc(2 * HDD * sizeof(float)), * k_mean = op.center ? malloc(HD * sizeof(float)) : NULL;
    float * kb = root ? oscar_rotations_k(&f->rot, l, 0) : own, * vb = root ? oscar_rotations_v(&f->rot, l, 0) : own + HDD;
    struct head_share sh = {0};
    struct oscar_optr_result all = {0};
    unsigned char * mine = malloc((size_t) Hkv * item), * every = root ? malloc((size_t) Hkv * item) : NULL;
    int64_t one[1], * start = malloc(((size_t) (rows && rows->rank_rows ? rows->n_ranks : 1) + 1) * sizeof(int64_t));
    struct oscar_optr_rows train;
    struct osc_optr_source src;
    enum oscar_status st = (!root && !own) || (op.center && !k_mean) || !mine || (root && !every) || !start ||
                                   (root && !result_alloc(&all, Hkv, D, op.steps))
                               ? osc_error(OSCAR_ERR_NOMEM, "optr: layer %d: out of memory", (int) l)
                               : OSCAR_OK;
    if (st == OSCAR_OK) {   // this rank's training rows and, on rank 0, the key mean
        st = rows    ? pass_rows(dp, rows, plan, &op, l, &train, k_mean)
           : store   ? store_rows(store, plan, h, &op, l, &train, &q, &k, &v, t)
                     : osc_error(OSCAR_ERR_INVALID, "optr: layer %d: no training rows", (int) l);
    }
    if (st == OSCAR_OK && store && op.center) oscar_optr_key_mean(&train, Hkv, D, k_mean);   // the mean of every row read
    if (st == OSCAR_OK) {   // which rank holds which training rows
        src = rows ? (struct osc_optr_source){.q = rows->q, .k = rows->k, .v = rows->v, .row0 = rows->row_base,
                                              .n = rows->n_local}
                   : (struct osc_optr_source){.q = q, .k = k, .v = v, .row0 = 0, .n = train.seq_start[train.n_seq]};
        one[0] = rows ? rows->n_cal_rows : src.n;
        const bool ranks = rows && rows->rank_rows;
        st = osc_optr_parts(ranks ? rows->rank_rows : one, ranks ? rows->n_ranks : 1,
                            rows ? rows->n_rows : src.n, start);
    }
    // the bases (after the sign search) and the key mean, from rank 0
    if (st == OSCAR_OK) st = osc_calib_bcast(dp, OSC_SPLIT_OPTR, kb, HDD * sizeof(float));
    if (st == OSCAR_OK) st = osc_calib_bcast(dp, OSC_SPLIT_OPTR, vb, HDD * sizeof(float));
    if (st == OSCAR_OK && op.center) st = osc_calib_bcast(dp, OSC_SPLIT_OPTR, k_mean, HD * sizeof(float));
    if (st == OSCAR_OK) st = share_heads(dp, h, l, kb, vb, k_mean, &sh);
    const struct oscar_backend_i * be = NULL;   // the run's device ("cpu": the reference)
    if (st == OSCAR_OK) st = oscar_backend_get(p->eval_device, &be);
    if (st == OSCAR_OK && !be->optr_refine_layer)
        st = osc_error(OSCAR_ERR_UNSUPPORTED, "optr: the %s backend has no OptR", be->name);
    if (st == OSCAR_OK) st = refine_heads(dp, be, &train, &src, start, &sh, &op, item, mine);
    if (st == OSCAR_OK) st = osc_calib_gather_shares(dp, OSC_SPLIT_OPTR, Hkv, item, mine, every);
    for (int32_t hh = 0; st == OSCAR_OK && root && hh < Hkv; hh++) unpack_head(every + (size_t) hh * item, hh, &all);
    if (st == OSCAR_OK && root) record_layer(&all, k_mean, op.center, l, f, out);
    free(q), free(k), free(v), free(k_mean), free(own), free(sh.buf), free(mine), free(every), free(start);
    oscar_optr_result_free(&all);
    if (t) t->refine += osc_now() - t0 - (t->store - store0);   // store reads are counted in store
    return st;
}

void oscar_calib_refine_free(struct oscar_calib_refine * r) {
    free(r->k_kept); free(r->v_kept); free(r->k_base); free(r->k_best); free(r->v_base); free(r->v_best);
    memset(r, 0, sizeof(*r));
}
