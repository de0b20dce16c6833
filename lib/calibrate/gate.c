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

enum oscar_status oscar_calib_gate_run(const struct oscar_calib_heldout * h, const struct oscar_calib_fit * f,
                                       const struct oscar_calib_clip * c, const struct oscar_calib_params * p,
                                       struct oscar_calib_gate * g, struct oscar_calib_timing * t) {
    double t0 = osc_now();
    int32_t L = h->n_layer, Hkv = h->n_head_kv, D = h->head_dim;
    memset(g, 0, sizeof(*g));
    g->n_layer = L;
    g->naive = calloc((size_t) L, sizeof(double));
    g->hadamard = calloc((size_t) L, sizeof(double));
    g->oscar = calloc((size_t) L, sizeof(double));
    enum oscar_status st = OSCAR_OK;
    struct oscar_eval_dev * ev = NULL;
    if (!g->naive || !g->hadamard || !g->oscar) {
        st = osc_error(OSCAR_ERR_NOMEM, "gate: out of memory");
        goto out;
    }
    struct oscar_kv_transform naive, had, osc;
    if ((st = osc_calib_transform("naive", p, NULL, NULL, L, Hkv, D, &naive)) != OSCAR_OK ||
        (st = osc_calib_transform("hadamard", p, NULL, NULL, L, Hkv, D, &had)) != OSCAR_OK ||
        (st = osc_calib_transform("oscar-searched", p, f, c, L, Hkv, D, &osc)) != OSCAR_OK)
        goto out;
    had.k_clip = 0.96, had.v_clip = 0.92;   // the reference's fixed ratios (method.md §9.5)
    if ((st = osc_calib_eval_open(h, p, 1, &ev)) != OSCAR_OK) goto out;
    struct osc_progress pr;
    osc_progress_init(&pr, "gate", "layer", L);
    for (int32_t l = 0; l < L && st == OSCAR_OK; l++) {
        struct oscar_layer_input in = osc_calib_layer_input(h, l);
        if ((st = oscar_eval_dev_layer(ev, &in)) != OSCAR_OK ||
            (st = oscar_eval_dev_out_rel(ev, &naive, &g->naive[l])) != OSCAR_OK ||
            (st = oscar_eval_dev_out_rel(ev, &had, &g->hadamard[l])) != OSCAR_OK ||
            (st = oscar_eval_dev_out_rel(ev, &osc, &g->oscar[l])) != OSCAR_OK)
            break;
        g->mean_naive += g->naive[l] / L;
        g->mean_hadamard += g->hadamard[l] / L;
        g->mean_oscar += g->oscar[l] / L;
        osc_progress_update(&pr, l + 1);
    }
    osc_progress_finish(&pr);
    osc_debug("after the gate: peak RSS %.1f MiB", oscar_calib_peak_rss_mb());
    g->pass = g->mean_oscar < g->mean_hadamard && g->mean_oscar < g->mean_naive;
out:
    oscar_eval_dev_free(ev);
    if (st != OSCAR_OK) oscar_calib_gate_free(g);
    if (t) t->gate += osc_now() - t0;
    return st;
}
