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
#include "calibrate/finish-split.h"
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
    oscar_rotations_free(&g->save);
    oscar_rotations_free(&g->head);
    memset(g, 0, sizeof(*g));
}

enum oscar_status oscar_calib_grouping_alloc(const struct oscar_calib_params * p, struct oscar_calib_fit * f,
                                             struct oscar_calib_grouping * g) {
    memset(g, 0, sizeof(*g));
    struct oscar_calib_params q = *p;
    oscar_calib_resolve_grouping(&q);
    const struct oscar_rotations * r = &f->rot;
    if (q.grouping != OSCAR_GROUP_AUTO || r->n_rot != r->n_head_kv || !r->head_layer)
        return osc_error(OSCAR_ERR_INVALID, "grouping auto: %s", q.grouping_why[0] ? q.grouping_why
                                                                      : "the fit is not per KV head");
    // the candidates' clip records: one choice pooled over the heads, one per head
    enum oscar_status st = oscar_calib_clip_alloc(p, 1, f, &g->clip_layer);
    if (st == OSCAR_OK) st = oscar_calib_clip_alloc(p, r->n_head_kv, f, &g->clip_head);
    if (st == OSCAR_OK)
        st = oscar_rotations_alloc(&g->save, 1, r->n_head_kv, r->head_dim, r->n_rot, r->n_clip, false, false);
    if (st == OSCAR_OK)
        st = oscar_rotations_alloc(&g->head, 1, r->n_head_kv, r->head_dim, r->n_rot, r->n_clip, false, false);
    if (st != OSCAR_OK) oscar_calib_grouping_free(g);
    return st;
}

// Both candidates of layer l from s, their 2 + 2·Hkv fits split over dp's ranks (fit.c's jobs: K
// and V of the layer's rotation, then of each KV head): the layer's rotation into f (copied to
// every head), each KV head's into g->head. Each fit is the one oscar_fit_stats_layer_basis makes
// (the same covariance, eigh and composition).
static enum oscar_status fit_candidates(struct osc_dp * dp, const struct oscar_stats * s,
                                        const struct oscar_calib_params * p, int32_t l, struct oscar_calib_fit * f,
                                        struct oscar_calib_grouping * g) {
    struct oscar_rotations * r = &f->rot;
    const int32_t H = r->n_rot;
    const size_t D = (size_t) r->head_dim, dd = D * D;
    struct oscar_calib_fit_items it;
    enum oscar_status st = oscar_calib_fit_items(dp, s, p, l, H, r->head_dim, &it);
    for (int32_t i = 0; st == OSCAR_OK && i < it.n; i++) {
        bool is_v;
        int32_t h;
        oscar_calib_fit_job(p, H, i, &is_v, &h);
        struct oscar_rotations * to = h < 0 ? r : &g->head;
        const int32_t tl = h < 0 ? l : 0, th = h < 0 ? 0 : h;
        struct oscar_fit_report rep;
        oscar_calib_fit_item_get(&it, i, is_v ? oscar_rotations_v(to, tl, th) : oscar_rotations_k(to, tl, th),
                                 is_v ? oscar_rotations_v_eig(to, tl, th) : oscar_rotations_k_eig(to, tl, th), NULL,
                                 NULL, &rep);
        if (rep.orth_err > f->orth_err_max) f->orth_err_max = rep.orth_err;
        if (rep.n_ties > 0 && p->composition != OSCAR_COMP_PLAIN)
            osc_warn("fit: layer %d head %d: %d exactly tied eigenvalues; P_br uses the tie-break", (int) l, (int) h,
                     (int) rep.n_ties);
    }
    oscar_calib_fit_items_free(&it);
    for (int32_t h = 1; st == OSCAR_OK && h < H; h++) {   // the layer candidate: one rotation for every head
        memcpy(oscar_rotations_k(r, l, h), oscar_rotations_k(r, l, 0), dd * sizeof(float));
        memcpy(oscar_rotations_v(r, l, h), oscar_rotations_v(r, l, 0), dd * sizeof(float));
        memcpy(oscar_rotations_k_eig(r, l, h), oscar_rotations_k_eig(r, l, 0), D * sizeof(float));
        memcpy(oscar_rotations_v_eig(r, l, h), oscar_rotations_v_eig(r, l, 0), D * sizeof(float));
    }
    return st;
}

// The per-head candidate's rotations and eigenvalues into f's layer l (its clips are the search's).
static void put_head_candidate(const struct oscar_calib_grouping * g, int32_t l, struct oscar_rotations * r) {
    const size_t D = (size_t) r->head_dim, dd = D * D;
    for (int32_t h = 0; h < r->n_rot; h++) {
        memcpy(oscar_rotations_k(r, l, h), oscar_rotations_k(&g->head, 0, h), dd * sizeof(float));
        memcpy(oscar_rotations_v(r, l, h), oscar_rotations_v(&g->head, 0, h), dd * sizeof(float));
        memcpy(oscar_rotations_k_eig(r, l, h), oscar_rotations_k_eig(&g->head, 0, h), D * sizeof(float));
        memcpy(oscar_rotations_v_eig(r, l, h), oscar_rotations_v_eig(&g->head, 0, h), D * sizeof(float));
    }
}

// Layer l's record of a candidate's search (n_clip 1 or Hkv) into c (n_clip Hkv), replicated per head.
static void put_record(const struct oscar_calib_clip * from, int32_t l, struct oscar_calib_clip * c) {
    for (int32_t h = 0; h < c->n_clip; h++) {
        size_t i = (size_t) l * (size_t) c->n_clip + (size_t) h;
        size_t j = (size_t) l * (size_t) from->n_clip + (size_t) (from->n_clip > 1 ? h : 0);
        c->k_err[i] = from->k_err[j], c->v_err[i] = from->v_err[j];
        c->k_err1[i] = from->k_err1[j], c->v_err1[i] = from->v_err1[j];
    }
}

// The gate's OSCAR error of layer l (ev's rows) with f's rotations at their clips.
static enum oscar_status score(struct oscar_eval_dev * ev, const struct oscar_calib_params * p,
                               const struct oscar_rotations * r, double * err, struct oscar_calib_timing * t) {
    double t0 = osc_now();
    struct oscar_kv_transform tf;
    enum oscar_status st = osc_calib_transform("oscar-searched", p, r, &tf);
    if (st == OSCAR_OK) st = oscar_eval_dev_out_rel_methods(ev, &tf, 1, err);
    if (t) t->gate += osc_now() - t0;
    return st;
}

// One candidate (in f): its clips searched (the candidate's own record, put into c; under mpirun the
// grid split over the ranks) and scored.
static enum oscar_status candidate(struct osc_calib_split * split, struct oscar_eval_dev * ev,
                                   const struct oscar_calib_params * p, int32_t l, struct oscar_calib_fit * f,
                                   struct oscar_calib_clip * c, struct oscar_calib_clip * own, double * err,
                                   struct oscar_calib_timing * t) {
    enum oscar_status st = split ? osc_calib_split_candidate(split, ev, l, f, own, t)
                                 : oscar_calib_clip_layer(ev, p, l, f, own, t);
    if (st == OSCAR_OK) put_record(own, l, c);
    return st == OSCAR_OK ? score(ev, p, &f->rot, err, t) : st;
}

enum oscar_status oscar_calib_grouping_layer(struct osc_dp * dp, struct osc_calib_split * split,
                                             struct oscar_eval_dev * ev, const struct oscar_stats * s,
                                             const struct oscar_calib_heldout * h, const struct oscar_calib_params * p,
                                             int32_t l, struct oscar_calib_fit * f, struct oscar_calib_clip * c,
                                             struct oscar_calib_grouping * g, struct oscar_calib_timing * t) {
    struct oscar_rotations * r = &f->rot;
    if (!g->save.k || l < 0 || l >= r->n_layer || c->n_clip != r->n_head_kv)
        return osc_error(OSCAR_ERR_INVALID, "grouping auto: layer %d does not fit the result", (int) l);
    const struct oscar_rotations here = oscar_rotations_layer_view(r, l);
    double el = 0.0, eh = 0.0, t0 = osc_now();
    enum oscar_status st = fit_candidates(dp, s, p, l, f, g);
    if (t) t->eigh += osc_now() - t0;
    if (st == OSCAR_OK && split) st = osc_calib_split_rows(split, h, l);   // the candidates' searches read them
    if (st == OSCAR_OK) st = candidate(split, ev, p, l, f, c, &g->clip_layer, &el, t);
    if (st == OSCAR_OK) oscar_rotations_copy(&g->save, &here);
    if (st == OSCAR_OK) put_head_candidate(g, l, r);
    if (st == OSCAR_OK) st = candidate(split, ev, p, l, f, c, &g->clip_head, &eh, t);
    if (st != OSCAR_OK) return st;
    const bool head = eh < el;   // strictly better; a tie keeps the smaller (layer) form
    if (!head) {
        struct oscar_rotations back = here;
        back.head_layer = NULL;   // the choice is set below
        oscar_rotations_copy(&back, &g->save);
        put_record(&g->clip_layer, l, c);
    }
    r->head_layer[l] = head, f->err_layer[l] = el, f->err_head[l] = eh;
    osc_debug("grouping layer %d: layer %.6g head %.6g -> %s", (int) l, el, eh, head ? "kv_head" : "layer");
    return OSCAR_OK;
}
