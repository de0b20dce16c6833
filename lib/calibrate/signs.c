// signs.c - --sign-search: the sign of every eigenvector of every K and V
// rotation, chosen by coordinate descent on the clip search's held-out INT2
// objective (contract in calibrate.h). R = U·diag(s)·H·P is recomposed from
// the fp64 canonical basis for every candidate s, so a sign vector always gives
// the same fp32 R, and the evaluator gives the same number for the same R:
// a flip is kept only when that number drops, so the objective never rises.
//
// L = n_layer, NR = rotations per layer (1 or Hkv), D = head_dim.
#include <stdlib.h>
#include <string.h>

#include "calibrate/calib-verify.h"
#include "util/log.h"

void oscar_calib_signs_free(struct oscar_calib_signs * s) {
    free(s->k_sign); free(s->v_sign); free(s->k_before); free(s->k_after); free(s->v_before); free(s->v_after);
    free(s->k_flips); free(s->v_flips); free(s->evals);
    memset(s, 0, sizeof(*s));
}

// One rotation's search: its signs, the coordinate to try next, the objective
// of the kept signs and how many flips in a row did not help.
struct search {
    int8_t * sign;     // [D] kept signs
    int32_t  next;     // eigenvector tried in the next evaluation
    int32_t  misses;   // consecutive rejections; D = converged
    int32_t  passes;   // coordinates tried / D, rounded up
    int32_t  flips;
    double   obj;
    bool     active;
};

// r_out [D, D] fp32 = compose(U·diag(sign), λ).
static enum oscar_status recompose(const struct oscar_calib_params * p, int32_t D, const double * u,
                                   const double * lam, const int8_t * sign, double * us, double * r64, float * r_out) {
    oscar_fit_apply_signs(D, u, sign, us);
    enum oscar_status st = oscar_fit_compose(p->composition, D, us, lam, r64, NULL);
    if (st != OSCAR_OK) return st;
    for (size_t i = 0; i < (size_t) D * (size_t) D; i++) r_out[i] = (float) r64[i];
    return OSCAR_OK;
}

// The objective of rotation r of K (is_k) or V from one evaluation's sums.
static double objective(bool is_k, int32_t NR, int32_t Hkv, int32_t r, const double * k_num, const double * k_den,
                        const double * v_num, double v_den) {
    if (is_k) {
        double num = 0.0, den = 0.0;   // per layer: the heads pooled, in order
        for (int32_t h = NR > 1 ? r : 0; h < (NR > 1 ? r + 1 : Hkv); h++) num += k_num[h], den += k_den[h];
        return den > 0.0 ? num / den : 0.0;
    }
    double num = NR > 1 ? v_num[r] : v_num[Hkv];
    return v_den > 0.0 ? num / v_den : 0.0;
}

static bool signs_alloc(struct oscar_calib_signs * s, int32_t L, int32_t NR, int32_t D) {
    size_t n = (size_t) L * (size_t) NR * (size_t) D, l = (size_t) L;
    s->k_sign = malloc(n), s->v_sign = malloc(n);
    s->k_before = calloc(l, sizeof(double)), s->k_after = calloc(l, sizeof(double));
    s->v_before = calloc(l, sizeof(double)), s->v_after = calloc(l, sizeof(double));
    s->k_flips = calloc(l, sizeof(int32_t)), s->v_flips = calloc(l, sizeof(int32_t));
    s->evals = calloc(l, sizeof(int32_t));
    return s->k_sign && s->v_sign && s->k_before && s->k_after && s->v_before && s->v_after && s->k_flips &&
           s->v_flips && s->evals;
}

// Scratch of one layer: 2·NR searches (K then V), current and candidate fp32 rotations.
struct layer_scratch {
    struct search * sr;           // [2 NR]
    float * cur_k, * cur_v;       // [NR, D, D] the kept rotations
    float * cand_k, * cand_v;     // [NR, D, D] this evaluation's
    double * us, * r64;           // [D, D] recomposition scratch
    double * k_num, * k_den, * v_num;
};

static void scratch_free(struct layer_scratch * w) {
    free(w->sr); free(w->cur_k); free(w->cur_v); free(w->cand_k); free(w->cand_v); free(w->us); free(w->r64);
    free(w->k_num); free(w->k_den); free(w->v_num);
}

static bool scratch_alloc(struct layer_scratch * w, int32_t NR, int32_t Hkv, int32_t D) {
    size_t dd = (size_t) D * (size_t) D, m = (size_t) NR * dd;
    memset(w, 0, sizeof(*w));
    w->sr = calloc(2 * (size_t) NR, sizeof(*w->sr));
    w->cur_k = malloc(m * sizeof(float)), w->cur_v = malloc(m * sizeof(float));
    w->cand_k = malloc(m * sizeof(float)), w->cand_v = malloc(m * sizeof(float));
    w->us = malloc(dd * sizeof(double)), w->r64 = malloc(dd * sizeof(double));
    w->k_num = malloc((size_t) Hkv * sizeof(double)), w->k_den = malloc((size_t) Hkv * sizeof(double));
    w->v_num = malloc((size_t) (Hkv + 1) * sizeof(double));
    return w->sr && w->cur_k && w->cur_v && w->cand_k && w->cand_v && w->us && w->r64 && w->k_num && w->k_den &&
           w->v_num;
}

// One layer's searches; f's rotations of layer l become the kept ones.
static enum oscar_status search_layer(struct oscar_eval_dev * ev, const struct oscar_kv_transform * tf,
                                      const struct oscar_calib_params * p, struct oscar_calib_fit * f, int32_t l,
                                      int32_t Hkv, struct layer_scratch * w, struct oscar_calib_signs * out) {
    const int32_t NR = out->n_rot, D = f->rot.head_dim, passes = p->sign_passes > 0 ? p->sign_passes : 1;
    const size_t dd = (size_t) D * (size_t) D;
    const bool per_head = NR > 1;
    double v_den = 0.0;
    enum oscar_status st = OSCAR_OK;
    for (int32_t s = 0; s < 2 * NR; s++) {
        bool is_k = s < NR;
        int32_t r = s % NR;
        struct search * x = &w->sr[s];
        *x = (struct search){.sign = (is_k ? out->k_sign : out->v_sign) + ((size_t) l * NR + (size_t) r) * (size_t) D,
                             .active = true};
        for (int32_t j = 0; j < D; j++) x->sign[j] = 1;
        size_t b = (size_t) l * (size_t) NR + (size_t) r;
        if ((st = recompose(p, D, (is_k ? f->k_u : f->v_u) + b * dd, (is_k ? f->k_lam : f->v_lam) + b * (size_t) D,
                            x->sign, w->us, w->r64, (is_k ? w->cur_k : w->cur_v) + (size_t) r * dd)) != OSCAR_OK)
            return st;
    }
    // the canonical signs' objective
    if ((st = oscar_eval_dev_rotations(ev, tf, w->cur_k, w->cur_v, per_head, w->k_num, w->k_den, w->v_num, &v_den)) !=
        OSCAR_OK)
        return st;
    int32_t n_eval = 1;
    for (int32_t s = 0; s < 2 * NR; s++) {
        w->sr[s].obj = objective(s < NR, NR, Hkv, s % NR, w->k_num, w->k_den, w->v_num, v_den);
        if (s < NR) out->k_before[l] += w->sr[s].obj / NR;
        else out->v_before[l] += w->sr[s].obj;
    }
    for (;;) {
        bool any = false;
        memcpy(w->cand_k, w->cur_k, (size_t) NR * dd * sizeof(float));
        memcpy(w->cand_v, w->cur_v, (size_t) NR * dd * sizeof(float));
        for (int32_t s = 0; s < 2 * NR; s++) {   // each active search flips its next eigenvector
            struct search * x = &w->sr[s];
            if (!x->active) continue;
            bool is_k = s < NR;
            int32_t r = s % NR;
            size_t b = (size_t) l * (size_t) NR + (size_t) r;
            x->sign[x->next] = (int8_t) -x->sign[x->next];
            st = recompose(p, D, (is_k ? f->k_u : f->v_u) + b * dd, (is_k ? f->k_lam : f->v_lam) + b * (size_t) D,
                           x->sign, w->us, w->r64, (is_k ? w->cand_k : w->cand_v) + (size_t) r * dd);
            x->sign[x->next] = (int8_t) -x->sign[x->next];   // kept only if it helps, below
            if (st != OSCAR_OK) return st;
            any = true;
        }
        if (!any) break;
        if ((st = oscar_eval_dev_rotations(ev, tf, w->cand_k, w->cand_v, per_head, w->k_num, w->k_den, w->v_num,
                                           &v_den)) != OSCAR_OK)
            return st;
        n_eval++;
        for (int32_t s = 0; s < 2 * NR; s++) {
            struct search * x = &w->sr[s];
            if (!x->active) continue;
            bool is_k = s < NR;
            int32_t r = s % NR;
            double e = objective(is_k, NR, Hkv, r, w->k_num, w->k_den, w->v_num, v_den);
            if (e < x->obj) {   // strictly better: keep the flip and its rotation
                x->sign[x->next] = (int8_t) -x->sign[x->next];
                x->obj = e, x->misses = 0, x->flips++;
                memcpy((is_k ? w->cur_k : w->cur_v) + (size_t) r * dd, (is_k ? w->cand_k : w->cand_v) + (size_t) r * dd,
                       dd * sizeof(float));
            } else {
                x->misses++;
            }
            if (++x->next == D) x->next = 0, x->passes++;
            if (x->misses >= D || x->passes >= passes) x->active = false;
        }
    }
    // heads 0 .. NR-1 of layer l (optr: spread later)
    memcpy(oscar_rotations_k(&f->rot, l, 0), w->cur_k, (size_t) NR * dd * sizeof(float));
    memcpy(oscar_rotations_v(&f->rot, l, 0), w->cur_v, (size_t) NR * dd * sizeof(float));
    double ka = 0.0, va = 0.0;
    for (int32_t r = 0; r < NR; r++) {   // layer summaries: K pooled as the clip search pools it; V heads summed
        ka += w->sr[r].obj / NR, va += w->sr[NR + r].obj;
        out->k_flips[l] += w->sr[r].flips, out->v_flips[l] += w->sr[NR + r].flips;
    }
    out->k_after[l] = ka, out->v_after[l] = va;
    out->evals[l] = n_eval;
    return OSCAR_OK;
}

// The search's transform: the target's clip quantizer at the fixed clips, the held-out
// tiering; the rotations come with each evaluation (NR of them, the fitted ones).
static enum oscar_status search_transform(const struct oscar_calib_params * p, const struct oscar_calib_fit * f,
                                          int32_t NR, struct oscar_kv_transform * tf) {
    const struct oscar_target_profile * prof = oscar_target_get(p->target);
    struct oscar_rotations view = f->rot;   // the fitted rotations: OptR's per-head copies and k_mean come after
    view.n_rot = NR, view.k_mean = NULL;
    enum oscar_status st = osc_calib_transform(prof->clip_quant, p, &view, tf);
    if (st != OSCAR_OK) return st;
    tf->tiers = osc_calib_tiering(p);   // as the clip search: the held-out tiering, per-token quantizers
    tf->tiers.block = 1;
    tf->rots.k_clip = tf->rots.v_clip = NULL;   // the fixed ratios below
    tf->k_clip = p->k_clip;
    tf->v_clip = prof->clips == OSCAR_TARGET_CLIPS_ONE ? p->k_clip : p->v_clip;
    return OSCAR_OK;
}

enum oscar_status oscar_calib_signs_alloc(const struct oscar_calib_params * p, const struct oscar_calib_fit * f,
                                          int32_t n_head_kv, struct oscar_calib_signs * out) {
    const int32_t L = f->rot.n_layer, D = f->rot.head_dim, NR = oscar_calib_fit_n_fitted(p, n_head_kv);
    memset(out, 0, sizeof(*out));
    if (!oscar_composition_uses_u(p->composition))
        return osc_error(OSCAR_ERR_INVALID, "--sign-search: composition %s has no eigenvectors (no U) to sign",
                         oscar_composition_name(p->composition));
    if (!f->k_u || !f->v_u || !f->k_lam || !f->v_lam)
        return osc_error(OSCAR_ERR_INVALID, "sign search: the fit keeps no fp64 basis for its %d layers", (int) L);
    out->n_layer = L, out->n_rot = NR, out->head_dim = D, out->max_passes = p->sign_passes > 0 ? p->sign_passes : 1;
    if (!signs_alloc(out, L, NR, D)) {
        oscar_calib_signs_free(out);
        return osc_error(OSCAR_ERR_NOMEM, "sign search: out of memory");
    }
    return OSCAR_OK;
}

enum oscar_status oscar_calib_signs_layer(struct oscar_eval_dev * ev, const struct oscar_calib_params * p,
                                          int32_t n_head_kv, int32_t l, struct oscar_calib_fit * f,
                                          struct oscar_calib_signs * out, struct oscar_calib_timing * t) {
    double t0 = osc_now();
    const int32_t NR = out->n_rot;
    struct layer_scratch w = {0};
    struct oscar_kv_transform tf;
    enum oscar_status st = OSCAR_OK;
    if (!scratch_alloc(&w, NR, n_head_kv, f->rot.head_dim)) st = osc_error(OSCAR_ERR_NOMEM, "sign search: out of memory");
    if (st == OSCAR_OK) st = search_transform(p, f, NR, &tf);
    if (st == OSCAR_OK && (st = search_layer(ev, &tf, p, f, l, n_head_kv, &w, out)) != OSCAR_OK)
        osc_error_prefix(st, "sign search: layer %d", (int) l);
    scratch_free(&w);
    if (t) t->signs += osc_now() - t0;
    return st;
}

void oscar_calib_signs_end(struct oscar_calib_fit * f, struct oscar_calib_signs * out) {
    const int32_t L = out->n_layer;
    out->mean_k_before = out->mean_k_after = out->mean_v_before = out->mean_v_after = 0.0;
    for (int32_t l = 0; l < L; l++) {   // layers in order: the means of a whole-model loop
        out->mean_k_before += out->k_before[l] / L, out->mean_k_after += out->k_after[l] / L;
        out->mean_v_before += out->v_before[l] / L, out->mean_v_after += out->v_after[l] / L;
    }
    // consumed: the rotations no longer match the canonical basis
    free(f->k_u); free(f->v_u); free(f->k_lam); free(f->v_lam);
    f->k_u = f->v_u = NULL, f->k_lam = f->v_lam = NULL;
}
