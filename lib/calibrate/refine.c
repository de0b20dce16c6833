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
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/actstore.h"
#include "calibrate/calibrate.h"
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

// The pass's rows of layer l (and its key mean from every calibration row's sums).
static enum oscar_status pass_rows(const struct oscar_calib_optr_rows * r, const struct oscar_calib_plan * plan,
                                   const struct oscar_optr_params * op, int32_t l, struct oscar_optr_rows * tr,
                                   float ** k_mean) {
    if (r->layer != l || (op->center && r->k_summed != r->n_cal_rows && !r->k_gathered) || r->k_summed < r->n_rows)
        return osc_error(OSCAR_ERR_INVALID, "optr: layer %d: the pass kept layer %d's rows (%lld of %lld summed)",
                         (int) l, (int) r->layer, (long long) r->k_summed, (long long) r->n_cal_rows);
    if (op->center) {
        if (!(*k_mean = malloc(r->kv_row * sizeof(float)))) return osc_error(OSCAR_ERR_NOMEM, "optr: out of memory");
        oscar_optr_key_mean_of_blocks(r->k_blocks, r->n_cal_rows, r->kv_row, *k_mean);
    }
    *tr = (struct oscar_optr_rows){.n_seq = r->n_seq, .seq_start = plan->seq_start, .q = r->q, .k = r->k, .v = r->v};
    return OSCAR_OK;
}

enum oscar_status oscar_calib_refine_layer(struct oscar_actstore * store, const struct oscar_calib_optr_rows * rows,
                                           const struct oscar_calib_plan * plan,
                                           const struct oscar_calib_heldout * h, const struct oscar_calib_params * p,
                                           int32_t l, struct oscar_calib_fit * f, struct oscar_calib_refine * out,
                                           struct oscar_calib_timing * t) {
    const double t0 = osc_now(), store0 = t ? t->store : 0.0;
    const int32_t Hq = h->n_head, Hkv = h->n_head_kv, D = h->head_dim;
    // OptR's losses rebuild full causal attention (optr-loss.c): a sliding layer's window is not in them yet
    if (h->window && h->window[l] > 0 && p->seq_len > h->window[l])
        return osc_error(OSCAR_ERR_UNSUPPORTED, "optr: layer %d has a sliding window of %d keys < seq_len %d; OptR "
                         "assumes full causal attention (calibrate without OptR refinement)", (int) l,
                         (int) h->window[l], (int) p->seq_len);
    const struct oscar_optr_params op = optr_params(p, D);
    float * q = NULL, * k = NULL, * v = NULL, * k_mean = NULL;
    struct oscar_optr_rows train;
    enum oscar_status st = rows    ? pass_rows(rows, plan, &op, l, &train, &k_mean)
                           : store ? store_rows(store, plan, h, &op, l, &train, &q, &k, &v, t)
                                   : osc_error(OSCAR_ERR_INVALID, "optr: layer %d: no training rows", (int) l);
    if (st != OSCAR_OK) goto out;
    const size_t HDD = (size_t) Hkv * (size_t) D * (size_t) D;
    struct oscar_optr_layer in = {
        .layer = l, .n_head = Hq, .n_head_kv = Hkv, .head_dim = D, .n_embd = h->n_embd, .wo = h->wo[l],
        .attn_scale = h->attn_scale,
        .k_rot_base = oscar_rotations_k(&f->rot, l, 0), .v_rot_base = oscar_rotations_v(&f->rot, l, 0),
        .train = train, .k_mean = k_mean,
        .held = {.n_seq = h->n_seq, .seq_start = h->seq_start, .q = h->q[l], .k = h->k[l], .v = h->v[l]},
    };
    struct oscar_optr_result r;
    if ((st = oscar_optr_refine_layer(&in, &op, &r)) != OSCAR_OK) {
        osc_error_prefix(st, "optr: layer %d", (int) l);
        goto out;
    }
    memcpy(oscar_rotations_k(&f->rot, l, 0), r.k_rot, HDD * sizeof(float));   // layer l's Hkv heads
    memcpy(oscar_rotations_v(&f->rot, l, 0), r.v_rot, HDD * sizeof(float));
    if (op.center) memcpy(oscar_rotations_k_mean(&f->rot, l, 0), r.k_mean, (size_t) Hkv * D * sizeof(float));
    for (int32_t hh = 0; hh < Hkv; hh++) out->k_kept[l] += r.k_best[hh] >= 0, out->v_kept[l] += r.v_best[hh] >= 0;
    out->k_base[l] = mean_of(r.k_held, Hkv), out->k_best[l] = kept_loss(r.k_held, r.k_best, Hkv);
    out->v_base[l] = mean_of(r.v_held, Hkv), out->v_best[l] = kept_loss(r.v_held, r.v_best, Hkv);
    out->n_train_seq = r.n_train_seq;
    osc_debug("optr layer %d: K held %.4g -> %.4g (%d/%d heads kept), V held %.4g -> %.4g (%d/%d)", (int) l,
              out->k_base[l], out->k_best[l], (int) out->k_kept[l], (int) Hkv, out->v_base[l], out->v_best[l],
              (int) out->v_kept[l], (int) Hkv);
    oscar_optr_result_free(&r);
    for (int32_t hh = 0; hh < Hkv; hh++) {   // the fit's orthogonality report, refined
        f->orth_err_max = fmax(f->orth_err_max, orth_err(oscar_rotations_k(&f->rot, l, hh), D));
        f->orth_err_max = fmax(f->orth_err_max, orth_err(oscar_rotations_v(&f->rot, l, hh), D));
    }
out:
    free(q); free(k); free(v); free(k_mean);
    if (t) t->refine += osc_now() - t0 - (t->store - store0);   // store reads are counted in store
    return st;
}

void oscar_calib_refine_free(struct oscar_calib_refine * r) {
    free(r->k_kept); free(r->v_kept); free(r->k_base); free(r->k_best); free(r->v_base); free(r->v_best);
    memset(r, 0, sizeof(*r));
}
