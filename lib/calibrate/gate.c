// gate.c - the pre-write gate: post-W_O relative attention error on held-out
// rows (lib/verify's out_rel, method.md §16: Σ‖(ô − o)·W_Oᵀ‖² / Σ‖o·W_Oᵀ‖²,
// BF16 sink/recent kept, INT2 middle), per layer, for naive INT2 (no rotation,
// symmetric, no clip), Hadamard (data-free Sylvester H, asymmetric, reference
// clips 0.96 / 0.92) and OSCAR (fitted rotations, the chosen clips). Passes
// when OSCAR's mean is below both. Runs on p->eval_device (verify/eval-device.h:
// lib/verify on the host, or the same errors on the GPU). Refuses nothing beyond
// lib/verify's and the evaluator's checks.
#include <stdlib.h>
#include <string.h>

#include "calibrate/calib-verify.h"
#include "util/log.h"

void oscar_calib_gate_free(struct oscar_calib_gate * g) {
    free(g->naive); free(g->hadamard); free(g->oscar);
    memset(g, 0, sizeof(*g));
}

enum oscar_status oscar_calib_gate_alloc(int32_t n_layer, struct oscar_calib_gate * g) {
    memset(g, 0, sizeof(*g));
    g->n_layer = n_layer;
    g->naive = calloc((size_t) n_layer, sizeof(double));
    g->hadamard = calloc((size_t) n_layer, sizeof(double));
    g->oscar = calloc((size_t) n_layer, sizeof(double));
    if (!g->naive || !g->hadamard || !g->oscar) {
        oscar_calib_gate_free(g);
        return osc_error(OSCAR_ERR_NOMEM, "gate: out of memory");
    }
    return OSCAR_OK;
}

enum oscar_status oscar_calib_gate_methods(struct oscar_eval_dev * ev, const struct oscar_rotations * r,
                                           const struct oscar_calib_params * p, unsigned mask, double err[3]) {
    struct oscar_kv_transform all[3], tf[3];
    int32_t n = 0, which[3];
    enum oscar_status st;
    if ((st = osc_calib_transform("naive", p, r, &all[0])) != OSCAR_OK ||
        (st = osc_calib_transform("hadamard", p, r, &all[1])) != OSCAR_OK ||
        ((mask & OSCAR_GATE_OSCAR) && (st = osc_calib_transform("oscar-searched", p, r, &all[2])) != OSCAR_OK))
        return st;
    all[1].k_clip = 0.96, all[1].v_clip = 0.92;   // the reference's fixed ratios (method.md §9.5)
    for (int32_t i = 0; i < 3; i++)
        if (mask & (1u << i)) tf[n] = all[i], which[n++] = i;
    double e[3] = {0};
    st = n ? oscar_eval_dev_out_rel_methods(ev, tf, n, e) : OSCAR_OK; // one exact attention for them all
    for (int32_t i = 0; i < n; i++) err[which[i]] = e[i];
    return st;
}

enum oscar_status oscar_calib_gate_layer(struct oscar_eval_dev * ev, const struct oscar_rotations * r,
                                         const struct oscar_calib_params * p, int32_t l, const double * oscar_err,
                                         struct oscar_calib_gate * g, struct oscar_calib_timing * t) {
    double t0 = osc_now(), err[3] = {0};
    enum oscar_status st = oscar_calib_gate_methods(ev, r, p, oscar_err ? OSCAR_GATE_NAIVE | OSCAR_GATE_HADAMARD
                                                                        : OSCAR_GATE_ALL, err);
    if (oscar_err) err[2] = *oscar_err;
    if (st == OSCAR_OK) g->naive[l] = err[0], g->hadamard[l] = err[1], g->oscar[l] = err[2];
    if (t) t->gate += osc_now() - t0;
    return st;
}

void oscar_calib_gate_end(struct oscar_calib_gate * g) {
    const int32_t L = g->n_layer;
    g->mean_naive = g->mean_hadamard = g->mean_oscar = 0.0;
    for (int32_t l = 0; l < L; l++) {   // layers in order
        g->mean_naive += g->naive[l] / L;
        g->mean_hadamard += g->hadamard[l] / L;
        g->mean_oscar += g->oscar[l] / L;
    }
    g->pass = g->mean_oscar < g->mean_hadamard && g->mean_oscar < g->mean_naive;
}
