// calib-stages.h - one calibrate stage over every layer of held-out rows, for
// tests that give the fit themselves: the per-layer functions the finisher
// (lib/calibrate/finish.c) calls, in its order, on one evaluator per stage.
#ifndef OSCAR_TEST_CALIB_STAGES_H
#define OSCAR_TEST_CALIB_STAGES_H

#include "calibrate/calib-verify.h"

// The sign search of every layer: f's rotations become the searched ones, its basis is consumed.
static inline enum oscar_status sign_search_all(const struct oscar_calib_heldout * h, const struct oscar_calib_params * p,
                                                struct oscar_calib_fit * f, struct oscar_calib_signs * sg) {
    struct oscar_eval_dev * ev = NULL;
    enum oscar_status st = oscar_calib_signs_alloc(p, f, h->n_head_kv, sg);
    if (st == OSCAR_OK) st = osc_calib_eval_open(h, p, 1, &ev);
    for (int32_t l = 0; l < h->n_layer && st == OSCAR_OK; l++) {
        const struct oscar_layer_input in = osc_calib_layer_input(h, l);
        if ((st = oscar_eval_dev_layer(ev, &in)) == OSCAR_OK)
            st = oscar_calib_signs_layer(ev, p, h->n_head_kv, l, f, sg, NULL);
    }
    if (st == OSCAR_OK) oscar_calib_signs_end(f, sg);
    oscar_eval_dev_free(ev);
    if (st != OSCAR_OK) oscar_calib_signs_free(sg);
    return st;
}

// The clip search of every layer at f's rotations, with the model-wide choice of p->target: the
// ratios into f's clips, the record into c.
static inline enum oscar_status clip_search_all(const struct oscar_calib_heldout * h, struct oscar_calib_fit * f,
                                                const struct oscar_calib_params * p, struct oscar_calib_clip * c) {
    struct oscar_eval_dev * ev = NULL;
    enum oscar_status st = oscar_calib_clip_alloc(p, f->rot.n_clip, f, c);
    if (st == OSCAR_OK) st = osc_calib_eval_open(h, p, p->clip_search ? p->n_grid : 1, &ev);
    for (int32_t l = 0; l < h->n_layer && st == OSCAR_OK; l++) {
        const struct oscar_layer_input in = osc_calib_layer_input(h, l);
        if ((st = oscar_eval_dev_layer(ev, &in)) == OSCAR_OK)
            st = oscar_calib_clip_layer(ev, p, l, f, c, NULL);
    }
    if (st == OSCAR_OK) oscar_calib_clip_end(p, &f->rot, c);
    oscar_eval_dev_free(ev);
    if (st != OSCAR_OK) oscar_calib_clip_free(c);
    return st;
}

#endif
