// clip.c - clip-ratio search per layer x {K, V} (x KV head with per-head
// rotations) on held-out rows, quantized exactly as the engine stores them
// (tiered: BF16 sink/recent, INT2 middle with the run's group size and scale
// dtype, sort-rule clip): every candidate ratio is one lib/verify KV transform
// ("oscar" with the fitted rotations), and lib/verify's candidate errors rank
// them (verify/metrics.h). Objectives (relative, smaller is better):
//   K: causal logit error under the held-out queries (verify's logit_err with
//      V exact), Σ (q·k̂_p − q·k_p)² / Σ (q·k_p)², per KV head or pooled,
//   V: post-W_O output error with exact attention weights (verify's out_rel
//      with K exact), ‖A·(V̂ − V)·W_Oᵀ‖² / ‖o·W_Oᵀ‖²; per head: head h's error only.
// Ties go to the larger ratio (the grid is visited in the given order, 1.0 first
// by default, and a candidate must be strictly better). The errors come from
// p->eval_device (verify/eval-device.h: lib/verify on the host, or the GPU).
//
// An engine target (util/target.h) that shares clips gets model-wide ratios:
// sglang one K ratio minimising Σ_l K objective_l and one V ratio minimising
// Σ_l V objective_l (each layer's relative objective, as above); llamacpp one
// ratio minimising Σ_l (K objective_l + V objective_l), simulated with the
// fork's Q2_0 quantizer. Every layer then records that ratio and its own
// objective at it. The oscar target keeps the per-layer search unchanged.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/calib-verify.h"
#include "util/log.h"

void oscar_calib_clip_free(struct oscar_calib_clip * c) {
    free(c->k_err); free(c->v_err); free(c->k_err1); free(c->v_err1);
    free(c->grid_k); free(c->grid_v);
    memset(c, 0, sizeof(*c));
}

static int cmp_f(const void * a, const void * b) {
    float x = *(const float *) a, y = *(const float *) b;
    return x < y ? -1 : x > y;
}

static double median(const float * x, size_t n) {
    float * s = malloc(n * sizeof(float));
    if (!s) return x[0];
    memcpy(s, x, n * sizeof(float));
    qsort(s, n, sizeof(float), cmp_f);
    double m = s[(n - 1) / 2];
    free(s);
    return m;
}

static void pick(const struct oscar_calib_params * p, const double * err, int32_t stride, int32_t idx, double ref,
                 float * choice, double * best_err, double * err1) {
    int32_t best = 0;
    for (int32_t c = 1; c < p->n_grid; c++)
        if (err[(size_t) c * (size_t) stride + (size_t) idx] < err[(size_t) best * (size_t) stride + (size_t) idx]) best = c;
    *choice = (float) p->grid[best];
    double r = ref > 0.0 ? ref : 1e-300;
    *best_err = err[(size_t) best * (size_t) stride + (size_t) idx] / r;
    *err1 = err[idx] / r;
}

// Candidate errors of one layer: ek [G, Hkv], kref [Hkv], ev [G, Hkv + 1], vref.
struct clip_errors {
    double * ek, * kref, * ev, vref;
};

static void errors_free(struct clip_errors * s) {
    free(s->ek); free(s->kref); free(s->ev);
}

// Model-wide search: every layer's relative K and V objective per candidate, rk / rv [L, G].
struct shared_errors {
    double * rk, * rv;
};

static double rel(double e, double ref) { return e / (ref > 0.0 ? ref : 1e-300); }

// The candidate minimising Σ_l (wk·rk[l] + wv·rv[l]); ties go to the earlier (larger) ratio.
static int32_t pick_shared(const struct shared_errors * se, int32_t L, int32_t G, double wk, double wv) {
    int32_t best = 0;
    double  best_sum = 0.0;
    for (int32_t g = 0; g < G; g++) {
        double sum = 0.0; // layers in order: deterministic
        for (int32_t l = 0; l < L; l++)
            sum += wk * se->rk[(size_t) l * (size_t) G + (size_t) g] + wv * se->rv[(size_t) l * (size_t) G + (size_t) g];
        if (g == 0 || sum < best_sum) best = g, best_sum = sum;
    }
    return best;
}

// Fills r's ratios and c (n_clip 1) from the model-wide choice: K at candidate bk, V at bv, each
// layer's objective there.
static void apply_shared(const struct oscar_calib_params * p, const struct shared_errors * se, int32_t L, int32_t bk,
                         int32_t bv, struct oscar_rotations * rot, struct oscar_calib_clip * c) {
    int32_t G = p->n_grid;
    for (int32_t l = 0; l < L; l++) {
        size_t r = (size_t) l * (size_t) G;
        oscar_rotations_set_layer_clips(rot, l, (float) p->grid[bk], (float) p->grid[bv]);
        c->k_err[l] = se->rk[r + (size_t) bk], c->v_err[l] = se->rv[r + (size_t) bv];
        c->k_err1[l] = se->rk[r], c->v_err1[l] = se->rv[r];
    }
    c->k_global = p->grid[bk];
    c->v_global = p->grid[bv];
}

static bool errors_init(struct clip_errors * s, int32_t Hkv, int32_t G) {
    s->ek = calloc((size_t) G * (size_t) Hkv, sizeof(double));
    s->kref = calloc((size_t) Hkv, sizeof(double));
    s->ev = calloc((size_t) G * (size_t) (Hkv + 1), sizeof(double));
    return s->ek && s->kref && s->ev;
}

enum oscar_status oscar_calib_clip_alloc(const struct oscar_calib_params * p, int32_t n_clip,
                                         struct oscar_calib_fit * f, struct oscar_calib_clip * c) {
    const int32_t L = f->rot.n_layer, NC = n_clip, G = p->n_grid;
    const struct oscar_target_profile * prof = oscar_target_get(p->target);
    const bool shared = p->clip_search && prof->clips != OSCAR_TARGET_CLIPS_LAYER;
    memset(c, 0, sizeof(*c));
    if (shared && NC > 1)
        return osc_error(OSCAR_ERR_INVALID, "clip search: target %s shares clips over the model, but the rotations "
                         "are per KV head (calibrate with --rotation-grouping layer)", prof->name);
    c->n_layer = L;
    c->n_clip = NC;
    const size_t n = (size_t) L * (size_t) NC;
    c->k_err = calloc(n, sizeof(double)); c->v_err = calloc(n, sizeof(double));
    c->k_err1 = calloc(n, sizeof(double)); c->v_err1 = calloc(n, sizeof(double));
    bool ok = c->k_err && c->v_err && c->k_err1 && c->v_err1;
    if (shared) {
        c->n_grid = G;
        c->grid_k = calloc((size_t) L * (size_t) G, sizeof(double));
        c->grid_v = calloc((size_t) L * (size_t) G, sizeof(double));
        ok = ok && c->grid_k && c->grid_v;
    }
    if (!ok) {
        oscar_calib_clip_free(c);
        return osc_error(OSCAR_ERR_NOMEM, "clip search: out of memory");
    }
    if (!p->clip_search) {   // fixed ratios: nothing to search
        for (int32_t l = 0; l < L; l++)
            oscar_rotations_set_layer_clips(&f->rot, l, (float) p->k_clip, (float) p->v_clip);
        c->k_global = p->k_clip;
        c->v_global = p->v_clip;
    }
    return OSCAR_OK;
}

// The search's transform: the target's clip quantizer with the fitted rotations, the held-out tiering.
static enum oscar_status clip_transform(const struct oscar_rotations * r, const struct oscar_calib_params * p,
                                        struct oscar_kv_transform * tf) {
    const struct oscar_target_profile * prof = oscar_target_get(p->target);
    enum oscar_status st = osc_calib_transform(prof->clip_quant, p, r, tf);
    tf->tiers = osc_calib_tiering(p); // the held-out tiering whatever the preset's (q2_0: its ring)
    tf->tiers.block = 1;
    return st;
}

enum oscar_status oscar_calib_clip_errors(struct oscar_eval_dev * ev, const struct oscar_rotations * r,
                                          const struct oscar_calib_params * p, bool per_head, int32_t c0, int32_t c1,
                                          double * ek, double * kref, double * evv, double * vref) {
    struct oscar_kv_transform tf;
    enum oscar_status st = clip_transform(r, p, &tf);
    if (st == OSCAR_OK)
        st = oscar_eval_dev_candidates_part(ev, &tf, p->n_grid, c0, c1, p->grid, per_head, ek, kref, evv, vref);
    return st;
}

void oscar_calib_clip_choose(const struct oscar_calib_params * p, int32_t l, double * ek, const double * kref,
                             const double * evv, double vref, struct oscar_rotations * r, struct oscar_calib_clip * c) {
    const int32_t Hkv = r->n_head_kv, NC = c->n_clip, G = p->n_grid;
    if (NC == 1) { // pool K heads; V: all heads together
        double kr = 0.0;
        for (int32_t hh = 0; hh < Hkv; hh++) kr += kref[hh];
        for (int32_t g = 0; g < G; g++) {
            double sum = 0.0;
            for (int32_t hh = 0; hh < Hkv; hh++) sum += ek[(size_t) g * (size_t) Hkv + (size_t) hh];
            ek[(size_t) g * (size_t) Hkv] = sum;
        }
        for (int32_t g = 0; c->grid_k && g < G; g++) {
            c->grid_k[(size_t) l * (size_t) G + (size_t) g] = rel(ek[(size_t) g * (size_t) Hkv], kr);
            c->grid_v[(size_t) l * (size_t) G + (size_t) g] =
                rel(evv[(size_t) g * (size_t) (Hkv + 1) + (size_t) Hkv], vref);
        }
        float kc, vc;   // one choice for every head of the layer
        pick(p, ek, Hkv, 0, kr, &kc, &c->k_err[l], &c->k_err1[l]);
        pick(p, evv, Hkv + 1, Hkv, vref, &vc, &c->v_err[l], &c->v_err1[l]);
        oscar_rotations_set_layer_clips(r, l, kc, vc);
    } else {
        for (int32_t hh = 0; hh < Hkv; hh++) {
            size_t i = (size_t) l * (size_t) Hkv + (size_t) hh;
            pick(p, ek, Hkv, hh, kref[hh], oscar_rotations_k_clip(r, l, hh), &c->k_err[i], &c->k_err1[i]);
            pick(p, evv, Hkv + 1, hh, vref, oscar_rotations_v_clip(r, l, hh), &c->v_err[i], &c->v_err1[i]);
        }
    }
    osc_debug("clip layer %d: K %.2f V %.2f", (int) l, (double) *oscar_rotations_k_clip(r, l, 0),
              (double) *oscar_rotations_v_clip(r, l, 0));
}

enum oscar_status oscar_calib_clip_layer(struct oscar_eval_dev * ev, const struct oscar_calib_params * p, int32_t l,
                                         struct oscar_calib_fit * f, struct oscar_calib_clip * c,
                                         struct oscar_calib_timing * t) {
    if (!p->clip_search) return OSCAR_OK;
    double t0 = osc_now();
    const int32_t Hkv = f->rot.n_head_kv, G = p->n_grid;
    struct clip_errors s = {0};
    struct oscar_kv_transform tf;
    enum oscar_status st = clip_transform(&f->rot, p, &tf);
    if (st != OSCAR_OK) goto out;
    if (!errors_init(&s, Hkv, G)) {
        st = osc_error(OSCAR_ERR_NOMEM, "clip search: out of memory");
        goto out;
    }
    if ((st = oscar_eval_dev_candidates(ev, &tf, G, p->grid, c->n_clip > 1, s.ek, s.kref, s.ev, &s.vref)) != OSCAR_OK)
        goto out;
    oscar_calib_clip_choose(p, l, s.ek, s.kref, s.ev, s.vref, &f->rot, c);
out:
    errors_free(&s);
    if (t) t->clip += osc_now() - t0;
    return st;
}

void oscar_calib_clip_end(const struct oscar_calib_params * p, struct oscar_rotations * r,
                          struct oscar_calib_clip * c) {
    if (!p->clip_search) return;   // the fixed ratios, set at allocation
    const struct oscar_target_profile * prof = oscar_target_get(p->target);
    const int32_t L = c->n_layer, G = p->n_grid;
    const struct shared_errors se = {.rk = c->grid_k, .rv = c->grid_v};
    if (prof->clips == OSCAR_TARGET_CLIPS_KV) {
        apply_shared(p, &se, L, pick_shared(&se, L, G, 1.0, 0.0), pick_shared(&se, L, G, 0.0, 1.0), r, c);
    } else if (prof->clips == OSCAR_TARGET_CLIPS_ONE) {
        int32_t b = pick_shared(&se, L, G, 1.0, 1.0);
        apply_shared(p, &se, L, b, b, r, c);
    } else {
        const size_t n = (size_t) L * (size_t) r->n_clip;
        c->k_global = median(r->k_clip, n);
        c->v_global = median(r->v_clip, n);
    }
    if (prof->clips != OSCAR_TARGET_CLIPS_LAYER)
        osc_info("clip search (target %s, %s): K %.2f V %.2f", prof->name, oscar_target_clips_name(prof->clips),
                 c->k_global, c->v_global);
}
