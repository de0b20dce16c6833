// grouping.c - --rotation-grouping auto: per layer, one rotation for the layer or one
// per KV head, whichever the held-out rows say (contract in calibrate.h).
//
// Both candidates come from the same sums (the layer's covariance is the sum of its
// heads'), each gets the clip search its own grouping would run, and both are scored
// by the gate's OSCAR evaluation (post-W_O relative error, "oscar-searched" at those
// clips), so a layer's gate error under auto is the smaller of the two. Ties keep the
// layer's rotation: the artifact stays [D,D] when every layer keeps it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/calib-verify.h"
#include "util/log.h"

const char * oscar_calib_grouping_name(enum oscar_rotation_grouping g) {
    return g == OSCAR_GROUP_HEAD ? "kv_head" : g == OSCAR_GROUP_AUTO ? "auto" : "layer";
}

void oscar_calib_resolve_grouping(struct oscar_calib_params * p) {
    if (p->grouping != OSCAR_GROUP_AUTO) return;
    const struct oscar_target_profile * t = oscar_target_get(p->target);
    if (!t->per_head_rotations || t->clips != OSCAR_TARGET_CLIPS_LAYER)
        snprintf(p->grouping_why, sizeof p->grouping_why, "--target %s: %s loads one [D,D] rotation per layer",
                 t->name, t->engine);
    else if (p->sign_search)
        snprintf(p->grouping_why, sizeof p->grouping_why,
                 "--sign-search searches the signs of one fit per layer, not of two candidates");
    else
        return;
    p->grouping = OSCAR_GROUP_LAYER;
}

void oscar_calib_grouping_free(struct oscar_calib_grouping * g) {
    oscar_calib_clip_free(&g->clip_layer);
    oscar_calib_clip_free(&g->clip_head);
    free(g->save);
    memset(g, 0, sizeof(*g));
}

enum oscar_status oscar_calib_grouping_alloc(const struct oscar_calib_params * p, const struct oscar_calib_fit * f,
                                             int32_t n_head_kv, struct oscar_calib_grouping * g) {
    memset(g, 0, sizeof(*g));
    struct oscar_calib_params q = *p;
    oscar_calib_resolve_grouping(&q);
    if (q.grouping != OSCAR_GROUP_AUTO || f->n_rot != n_head_kv || !f->chosen_head)
        return osc_error(OSCAR_ERR_INVALID, "grouping auto: %s", q.grouping_why[0] ? q.grouping_why
                                                                      : "the fit is not per KV head");
    // the candidates' clip records: a fit view of each grouping's width (clip_alloc reads n_layer, n_rot)
    const struct oscar_calib_fit vl = {.n_layer = f->n_layer, .n_rot = 1, .head_dim = f->head_dim};
    const struct oscar_calib_fit vh = {.n_layer = f->n_layer, .n_rot = n_head_kv, .head_dim = f->head_dim};
    const size_t D = (size_t) f->head_dim, R = (size_t) n_head_kv;
    enum oscar_status st = oscar_calib_clip_alloc(p, &vl, n_head_kv, &g->clip_layer);
    if (st == OSCAR_OK) st = oscar_calib_clip_alloc(p, &vh, n_head_kv, &g->clip_head);
    if (st == OSCAR_OK && !(g->save = malloc(2 * R * (D * D + D) * sizeof(float))))
        st = osc_error(OSCAR_ERR_NOMEM, "grouping auto: out of memory");
    if (st != OSCAR_OK) oscar_calib_grouping_free(g);
    return st;
}

int32_t oscar_calib_grouping_n_head(const struct oscar_calib_fit * f) {
    int32_t n = 0;
    for (int32_t l = 0; f->chosen_head && l < f->n_layer; l++) n += f->chosen_head[l] != 0;
    return n;
}

// Layer l's slices of f: K/V rotations [R, D, D] and eigenvalues [R, D], in this order.
static void slices(struct oscar_calib_fit * f, int32_t l, float * out[4], size_t bytes[4]) {
    const size_t D = (size_t) f->head_dim, R = (size_t) f->n_rot, o = (size_t) l * R;
    out[0] = f->k_rot + o * D * D, out[1] = f->v_rot + o * D * D, out[2] = f->k_eig + o * D, out[3] = f->v_eig + o * D;
    bytes[0] = bytes[1] = R * D * D * sizeof(float), bytes[2] = bytes[3] = R * D * sizeof(float);
}

// Layer l's rotations of grouping g from s (per KV head in f; a layer fit replicated over the heads).
static enum oscar_status fit_candidate(const struct oscar_stats * s, const struct oscar_calib_params * p,
                                       enum oscar_rotation_grouping g, int32_t l, struct oscar_calib_fit * f) {
    const int32_t NF = g == OSCAR_GROUP_HEAD ? f->n_rot : 1;
    const size_t D = (size_t) f->head_dim, dd = D * D, R = (size_t) l * (size_t) f->n_rot;
    struct oscar_fit_report * rep = calloc((size_t) NF, sizeof(*rep));
    enum oscar_status st = rep ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "grouping auto: out of memory");
    for (int kv = 0; kv < 2 && st == OSCAR_OK; kv++) {
        float * rot = (kv ? f->v_rot : f->k_rot) + R * dd, * eig = (kv ? f->v_eig : f->k_eig) + R * D;
        st = oscar_fit_stats_layer_basis(s, kv ? p->v_objective : p->k_objective, g, p->composition, l, rot, eig, rep,
                                         NULL, NULL);
        for (int32_t i = 0; st == OSCAR_OK && i < NF; i++)
            if (rep[i].orth_err > f->orth_err_max) f->orth_err_max = rep[i].orth_err;
        for (int32_t h = 1; st == OSCAR_OK && NF == 1 && h < f->n_rot; h++) {
            memcpy(rot + (size_t) h * dd, rot, dd * sizeof(float));
            memcpy(eig + (size_t) h * D, eig, D * sizeof(float));
        }
    }
    free(rep);
    return st;
}

// Layer l's record of a candidate's clips (n_clip 1 or Hkv) into c (n_clip Hkv), replicated per head.
static void put_clips(const struct oscar_calib_clip * from, int32_t l, struct oscar_calib_clip * c) {
    for (int32_t h = 0; h < c->n_clip; h++) {
        size_t i = (size_t) l * (size_t) c->n_clip + (size_t) h;
        size_t j = (size_t) l * (size_t) from->n_clip + (size_t) (from->n_clip > 1 ? h : 0);
        c->k[i] = from->k[j], c->v[i] = from->v[j];
        c->k_err[i] = from->k_err[j], c->v_err[i] = from->v_err[j];
        c->k_err1[i] = from->k_err1[j], c->v_err1[i] = from->v_err1[j];
    }
}

// The gate's OSCAR error of layer l (ev's rows) with f's rotations and c's clips.
static enum oscar_status score(struct oscar_eval_dev * ev, const struct oscar_calib_params * p,
                               const struct oscar_calib_fit * f, const struct oscar_calib_clip * c, int32_t n_head_kv,
                               double * err, struct oscar_calib_timing * t) {
    double t0 = osc_now();
    struct oscar_kv_transform tf;
    enum oscar_status st = osc_calib_transform("oscar-searched", p, f, c, f->n_layer, n_head_kv, f->head_dim, &tf);
    if (st == OSCAR_OK) st = oscar_eval_dev_out_rel_methods(ev, &tf, 1, err);
    if (t) t->gate += osc_now() - t0;
    return st;
}

// One candidate: fitted, its clips searched (the candidate's own record), put into c and scored.
static enum oscar_status candidate(struct oscar_eval_dev * ev, const struct oscar_stats * s,
                                   const struct oscar_calib_params * p, enum oscar_rotation_grouping g,
                                   int32_t n_head_kv, int32_t l, struct oscar_calib_fit * f, struct oscar_calib_clip * c,
                                   struct oscar_calib_clip * own, double * err, struct oscar_calib_timing * t) {
    double t0 = osc_now();
    enum oscar_status st = fit_candidate(s, p, g, l, f);
    if (t) t->eigh += osc_now() - t0;
    if (st == OSCAR_OK) st = oscar_calib_clip_layer(ev, f, p, n_head_kv, l, own, t);
    if (st == OSCAR_OK) put_clips(own, l, c);
    return st == OSCAR_OK ? score(ev, p, f, c, n_head_kv, err, t) : st;
}

enum oscar_status oscar_calib_grouping_layer(struct oscar_eval_dev * ev, const struct oscar_stats * s,
                                             const struct oscar_calib_params * p, int32_t n_head_kv, int32_t l,
                                             struct oscar_calib_fit * f, struct oscar_calib_clip * c,
                                             struct oscar_calib_grouping * g, struct oscar_calib_timing * t) {
    if (!g->save || l < 0 || l >= f->n_layer || c->n_clip != n_head_kv)
        return osc_error(OSCAR_ERR_INVALID, "grouping auto: layer %d does not fit the result", (int) l);
    float * sl[4];
    size_t by[4];
    slices(f, l, sl, by);
    double el = 0.0, eh = 0.0;
    enum oscar_status st = candidate(ev, s, p, OSCAR_GROUP_LAYER, n_head_kv, l, f, c, &g->clip_layer, &el, t);
    float * sv = g->save;
    for (int i = 0; i < 4 && st == OSCAR_OK; sv += by[i] / sizeof(float), i++) memcpy(sv, sl[i], by[i]);
    if (st == OSCAR_OK) st = candidate(ev, s, p, OSCAR_GROUP_HEAD, n_head_kv, l, f, c, &g->clip_head, &eh, t);
    if (st != OSCAR_OK) return st;
    const bool head = eh < el;   // strictly better; a tie keeps the smaller (layer) form
    if (!head) {
        sv = g->save;
        for (int i = 0; i < 4; sv += by[i] / sizeof(float), i++) memcpy(sl[i], sv, by[i]);
        put_clips(&g->clip_layer, l, c);
    }
    f->chosen_head[l] = head, f->err_layer[l] = el, f->err_head[l] = eh;
    osc_debug("grouping layer %d: layer %.6g head %.6g -> %s", (int) l, el, eh, head ? "kv_head" : "layer");
    return OSCAR_OK;
}
