// refine.c - the OptR stage of oscar-calibrate (--refine optr): after the fit,
// before the clip search, every layer's rotations are refined per KV head by
// lib/rotation/optr.h. Training rows: the calibration rows of the activation
// store (--from-activations; the layer-major pass keeps only the held-out rows,
// see calibrate.h); early stopping: the held-out rows the clip search and the
// gate use (the paper early-stops on held-out chunks disjoint from the training
// chunks, as these are). The losses use the run's INT2 group, scale dtype and
// BF16 sink/recent, and the fixed clip ratios (--clip, default 0.96 / 0.92: the
// paper trains with them; the clip search afterwards picks the served ones).
// Per-layer rotations become per-KV-head ones. Refuses a store whose shapes
// differ from the held-out rows'.
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

enum oscar_status oscar_calib_refine_alloc(struct oscar_actstore * store, const struct oscar_calib_heldout * h,
                                           const struct oscar_calib_params * p, const struct oscar_calib_fit * f,
                                           struct oscar_calib_refine * out) {
    const int32_t L = h->n_layer, Hq = h->n_head, Hkv = h->n_head_kv, D = h->head_dim;
    memset(out, 0, sizeof(*out));
    if (!store)
        return osc_error(OSCAR_ERR_INVALID, "--refine optr trains on the calibration rows of an activation store: "
                         "give --from-activations STORE (write one with --save-activations); the layer-major pass "
                         "keeps only the held-out rows");
    const struct oscar_actstore_info * si = oscar_actstore_get_info(store);
    if (si->n_layer != L || si->n_head != Hq || si->n_head_kv != Hkv || si->head_dim != D || f->n_layer != L ||
        f->head_dim != D || f->n_rot != Hkv)
        return osc_error(OSCAR_ERR_INVALID, "optr: the store (L %d Hq %d Hkv %d D %d) and the fit (L %d D %d, %d "
                         "rotations per layer) do not match the held-out rows (L %d Hq %d Hkv %d D %d)",
                         (int) si->n_layer, (int) si->n_head, (int) si->n_head_kv, (int) si->head_dim,
                         (int) f->n_layer, (int) f->head_dim, (int) f->n_rot, (int) L, (int) Hq, (int) Hkv, (int) D);
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

enum oscar_status oscar_calib_refine_layer(struct oscar_actstore * store, const struct oscar_calib_plan * plan,
                                           const struct oscar_calib_heldout * h, const struct oscar_calib_params * p,
                                           int32_t l, struct oscar_calib_fit * f, struct oscar_calib_refine * out,
                                           struct oscar_calib_timing * t) {
    double t0 = osc_now();
    const int32_t Hq = h->n_head, Hkv = h->n_head_kv, D = h->head_dim;
    // OptR's losses rebuild full causal attention (optr-loss.c): a sliding layer's window is not in them yet
    if (h->window && h->window[l] > 0 && p->seq_len > h->window[l])
        return osc_error(OSCAR_ERR_UNSUPPORTED, "optr: layer %d has a sliding window of %d keys < seq_len %d; OptR "
                         "assumes full causal attention (calibrate without OptR refinement)", (int) l,
                         (int) h->window[l], (int) p->seq_len);
    const struct oscar_optr_params op = optr_params(p, D);
    // rows to read: every calibration row when centring (the mean), else the training sequences'
    int32_t n_seq_used = op.max_train_seq > 0 && op.max_train_seq < plan->n_seq ? op.max_train_seq : plan->n_seq;
    const int32_t n_rows = op.center ? plan->seq_start[plan->n_seq] : plan->seq_start[n_seq_used];
    const size_t R = (size_t) n_rows;
    float * q = malloc(R * (size_t) Hq * (size_t) D * sizeof(float) + 1);
    float * k = malloc(R * (size_t) Hkv * (size_t) D * sizeof(float) + 1);
    float * v = malloc(R * (size_t) Hkv * (size_t) D * sizeof(float) + 1);
    enum oscar_status st = OSCAR_OK;
    if (!q || !k || !v) {
        st = osc_error(OSCAR_ERR_NOMEM, "optr: out of memory (%d rows)", (int) n_rows);
        goto out;
    }
    double t1 = osc_now();
    if ((st = oscar_actstore_read(store, OSCAR_ACT_CALIB, l, 0, n_rows, q, k, v)) != OSCAR_OK) goto out;
    const double dt_read = osc_now() - t1;
    if (t) t->store += dt_read, t0 += dt_read;   // store reads are counted in store, not refine
    const size_t HDD = (size_t) Hkv * (size_t) D * (size_t) D;
    struct oscar_optr_layer in = {
        .layer = l, .n_head = Hq, .n_head_kv = Hkv, .head_dim = D, .n_embd = h->n_embd, .wo = h->wo[l],
        .attn_scale = h->attn_scale,
        .k_rot_base = f->k_rot + (size_t) l * HDD, .v_rot_base = f->v_rot + (size_t) l * HDD,
        .train = {.n_seq = op.center ? plan->n_seq : n_seq_used, .seq_start = plan->seq_start, .q = q, .k = k, .v = v},
        .held = {.n_seq = h->n_seq, .seq_start = h->seq_start, .q = h->q[l], .k = h->k[l], .v = h->v[l]},
    };
    struct oscar_optr_result r;
    if ((st = oscar_optr_refine_layer(&in, &op, &r)) != OSCAR_OK) {
        osc_error_prefix(st, "optr: layer %d", (int) l);
        goto out;
    }
    memcpy(f->k_rot + (size_t) l * HDD, r.k_rot, HDD * sizeof(float));
    memcpy(f->v_rot + (size_t) l * HDD, r.v_rot, HDD * sizeof(float));
    if (op.center) memcpy(f->k_mean + (size_t) l * Hkv * D, r.k_mean, (size_t) Hkv * D * sizeof(float));
    for (int32_t hh = 0; hh < Hkv; hh++) out->k_kept[l] += r.k_best[hh] >= 0, out->v_kept[l] += r.v_best[hh] >= 0;
    out->k_base[l] = mean_of(r.k_held, Hkv), out->k_best[l] = kept_loss(r.k_held, r.k_best, Hkv);
    out->v_base[l] = mean_of(r.v_held, Hkv), out->v_best[l] = kept_loss(r.v_held, r.v_best, Hkv);
    out->n_train_seq = r.n_train_seq;
    osc_debug("optr layer %d: K held %.4g -> %.4g (%d/%d heads kept), V held %.4g -> %.4g (%d/%d)", (int) l,
              out->k_base[l], out->k_best[l], (int) out->k_kept[l], (int) Hkv, out->v_base[l], out->v_best[l],
              (int) out->v_kept[l], (int) Hkv);
    oscar_optr_result_free(&r);
    for (int32_t hh = 0; hh < Hkv; hh++) {   // the fit's orthogonality report, refined
        const size_t i = (size_t) l * (size_t) Hkv + (size_t) hh;
        f->orth_err_max = fmax(f->orth_err_max, orth_err(f->k_rot + i * (size_t) D * D, D));
        f->orth_err_max = fmax(f->orth_err_max, orth_err(f->v_rot + i * (size_t) D * D, D));
    }
out:
    free(q); free(k); free(v);
    if (t) t->refine += osc_now() - t0;
    return st;
}

void oscar_calib_refine_free(struct oscar_calib_refine * r) {
    free(r->k_kept); free(r->v_kept); free(r->k_base); free(r->k_best); free(r->v_base); free(r->v_best);
    memset(r, 0, sizeof(*r));
}
