// finish.c - the finisher (contract in calibrate.h): per layer fit -> sign search
// -> OptR -> clip search -> gate on one evaluator, the model-wide decisions at the
// end. Each stage's per-layer function reads only layer l's rows and results,
// so finishing layer l as soon as its sums end gives what a stage-after-stage
// run over all layers gives, bit for bit; every mean is summed in layer order.
// Under mpirun the fit (fit.c: shares of the layer's eigendecompositions), OptR
// (refine.c: shares of the KV heads), the clip search and the per-layer gate
// (fin->split: parts of the clip grid and of the gate's methods, finish-split.h)
// of each layer are shared with the other ranks, each part with the one-process
// bits, put together on rank 0 by placement; the sign search stays here on rank 0.
// One process runs the same code over fin->dp's one rank.
#include <string.h>

#include "calibrate/calib-verify.h"
#include "calibrate/finish-split.h"
#include "util/log.h"

void oscar_calib_finish_free(struct oscar_calib_finisher * fin) {
    oscar_calib_fit_free(&fin->fit);
    oscar_calib_signs_free(&fin->signs);
    oscar_calib_refine_free(&fin->refine);
    oscar_calib_clip_free(&fin->clip);
    oscar_calib_gate_free(&fin->gate);
    oscar_calib_grouping_free(&fin->grouping);
    oscar_eval_dev_free(fin->ev);
    memset(fin, 0, sizeof(*fin));
}

// The evaluator, opened when first needed: a resume's checkpoint checks (say, of the device) come first.
static enum oscar_status need_eval(struct oscar_calib_finisher * fin, const struct oscar_calib_heldout * h) {
    const struct oscar_calib_params * p = fin->p;
    return fin->ev ? OSCAR_OK : osc_calib_eval_open(h, p, p->clip_search && p->n_grid > 1 ? p->n_grid : 1, &fin->ev);
}

bool oscar_calib_finish_gate_at_end(const struct oscar_calib_params * p) {
    return p->clip_search && oscar_target_get(p->target)->clips != OSCAR_TARGET_CLIPS_LAYER;
}

enum oscar_status oscar_calib_finish_begin(struct oscar_calib_finisher * fin, const struct oscar_calib_params * p,
                                           const struct oscar_calib_heldout * h, struct oscar_actstore * store,
                                           const struct oscar_calib_plan * plan, struct oscar_calib_timing * t) {
    memset(fin, 0, sizeof(*fin));
    fin->p = p, fin->store = store, fin->plan = plan, fin->t = t;
    fin->dp = osc_dp_single();   // the layer-major pass sets its group
    fin->n_layer = h->n_layer, fin->n_head_kv = h->n_head_kv;
    fin->gate_at_end = oscar_calib_finish_gate_at_end(p);
    enum oscar_status st = oscar_calib_fit_alloc(p, h->n_layer, h->n_head_kv, h->head_dim, &fin->fit);
    if (st == OSCAR_OK && p->sign_search) st = oscar_calib_signs_alloc(p, &fin->fit, h->n_head_kv, &fin->signs);
    if (st == OSCAR_OK && p->refine_optr) st = oscar_calib_refine_alloc(store, h, p, &fin->fit, &fin->refine);
    if (st == OSCAR_OK) st = oscar_calib_clip_alloc(p, fin->fit.rot.n_clip, &fin->fit, &fin->clip);
    if (st == OSCAR_OK) st = oscar_calib_gate_alloc(h->n_layer, &fin->gate);
    if (st == OSCAR_OK && p->grouping == OSCAR_GROUP_AUTO)
        st = oscar_calib_grouping_alloc(p, &fin->fit, &fin->grouping);
    if (st != OSCAR_OK) oscar_calib_finish_free(fin);
    return st;
}

enum oscar_status oscar_calib_finish_layer(struct oscar_calib_finisher * fin, const struct oscar_stats * s,
                                           const struct oscar_calib_heldout * h, int32_t l) {
    const struct oscar_calib_params * p = fin->p;
    const int32_t Hkv = fin->n_head_kv;
    if (l != fin->n_done || l >= fin->n_layer)
        return osc_error(OSCAR_ERR_INVALID, "finish: layer %d out of order (%d of %d finished)", (int) l,
                         (int) fin->n_done, (int) fin->n_layer);
    // every stage below evaluates this layer's held-out rows: set them once
    const struct oscar_layer_input in = osc_calib_layer_input(h, l);
    enum oscar_status st = need_eval(fin, h);
    const bool autog = p->grouping == OSCAR_GROUP_AUTO;   // fit + clips chosen per layer (grouping.c)
    if (st == OSCAR_OK && !autog) st = oscar_calib_fit_layer(fin->dp, s, p, l, &fin->fit, fin->t);
    if (st == OSCAR_OK) st = oscar_eval_dev_layer(fin->ev, &in);
    if (st == OSCAR_OK && autog)
        st = oscar_calib_grouping_layer(fin->dp, fin->split, fin->ev, s, h, p, l, &fin->fit, &fin->clip,
                                        &fin->grouping, fin->t);   // the rows go out after its fits
    if (st == OSCAR_OK && fin->split && !autog) st = osc_calib_split_rows(fin->split, h, l);   // the later stages' rows
    if (st == OSCAR_OK && p->sign_search) st = oscar_calib_signs_layer(fin->ev, p, Hkv, l, &fin->fit, &fin->signs, fin->t);
    if (st == OSCAR_OK) oscar_calib_fit_spread_heads(p, Hkv, l, &fin->fit);
    if (st == OSCAR_OK && p->refine_optr)
        st = oscar_calib_refine_layer(fin->dp, fin->store, fin->optr_rows, fin->plan, h, p, l, &fin->fit, &fin->refine,
                                      fin->t);
    if (st == OSCAR_OK && fin->split) st = osc_calib_split_finish(fin->split, fin, l); // with the other ranks
    if (st == OSCAR_OK && !fin->split && (!autog || p->refine_optr))   // auto without OptR: the chosen candidate's clips
        st = oscar_calib_clip_layer(fin->ev, p, l, &fin->fit, &fin->clip, fin->t);
    // auto without OptR keeps a candidate as grouping.c scored it: its error is the gate's OSCAR error
    const double * chosen = !autog || p->refine_optr ? NULL
                            : fin->fit.rot.head_layer[l] ? &fin->fit.err_head[l] : &fin->fit.err_layer[l];
    if (st == OSCAR_OK && !fin->split && !fin->gate_at_end)
        st = oscar_calib_gate_layer(fin->ev, &fin->fit.rot, p, l, chosen, &fin->gate, fin->t);
    if (st == OSCAR_OK) fin->n_done = l + 1;
    return st;
}

enum oscar_status oscar_calib_finish_end(struct oscar_calib_finisher * fin, const struct oscar_calib_heldout * h) {
    const struct oscar_calib_params * p = fin->p;
    if (fin->n_done != fin->n_layer)
        return osc_error(OSCAR_ERR_INVALID, "finish: %d of %d layers finished", (int) fin->n_done, (int) fin->n_layer);
    if (p->sign_search) oscar_calib_signs_end(&fin->fit, &fin->signs);
    oscar_calib_clip_end(p, &fin->fit.rot, &fin->clip);
    osc_debug("after the clip search: peak RSS %.1f MiB", oscar_calib_peak_rss_mb());
    enum oscar_status st = fin->gate_at_end ? need_eval(fin, h) : OSCAR_OK;
    for (int32_t l = 0; fin->gate_at_end && l < fin->n_layer && st == OSCAR_OK; l++) {   // at the shared ratio
        const struct oscar_layer_input in = osc_calib_layer_input(h, l);
        if ((st = oscar_eval_dev_layer(fin->ev, &in)) == OSCAR_OK)
            st = oscar_calib_gate_layer(fin->ev, &fin->fit.rot, p, l, NULL, &fin->gate, fin->t);
    }
    if (st == OSCAR_OK) oscar_calib_gate_end(&fin->gate);
    osc_debug("after the gate: peak RSS %.1f MiB", oscar_calib_peak_rss_mb());
    return st;
}

enum oscar_status oscar_calib_finish_all(struct oscar_calib_finisher * fin, const struct oscar_stats * s,
                                         const struct oscar_calib_heldout * h) {
    enum oscar_status st = OSCAR_OK;
    struct osc_progress pr;
    osc_progress_init(&pr, "finishing", "layer", fin->n_layer);
    for (int32_t l = fin->n_done; l < fin->n_layer && st == OSCAR_OK; l++) {
        st = oscar_calib_finish_layer(fin, s, h, l);
        osc_progress_update(&pr, l + 1);
    }
    osc_progress_finish(&pr);
    return st == OSCAR_OK ? oscar_calib_finish_end(fin, h) : st;
}
