// gate.c - the pre-write gate: post-W_O relative attention error on held-out
// rows, per layer, for naive INT2 (no rotation, symmetric, no clip), Hadamard
// (data-free Sylvester H, asymmetric, reference clips 0.96 / 0.92) and OSCAR
// (fitted rotations, the chosen clips). Passes when OSCAR's mean is below both.
#include <stdlib.h>
#include <string.h>

#include "calibrate/calibrate-internal.h"
#include "rotation/rotation.h"
#include "util/log.h"

struct gate_rot {
    const struct oscar_calib_fit * f;
    const float * had; // [D, D]
};

static const float * had_fn(const void * user, int32_t layer, int32_t head, bool is_v) {
    (void) layer; (void) head; (void) is_v;
    return ((const struct gate_rot *) user)->had;
}

static const float * oscar_fn(const void * user, int32_t layer, int32_t head, bool is_v) {
    const struct oscar_calib_fit * f = ((const struct gate_rot *) user)->f;
    size_t D = (size_t) f->head_dim, r = f->n_rot > 1 ? (size_t) head : 0;
    return (is_v ? f->v_rot : f->k_rot) + ((size_t) layer * (size_t) f->n_rot + r) * D * D;
}

void oscar_calib_gate_free(struct oscar_calib_gate * g) {
    free(g->naive); free(g->hadamard); free(g->oscar);
    memset(g, 0, sizeof(*g));
}

enum oscar_status oscar_calib_gate_run(const struct oscar_calib_heldout * h, const struct oscar_calib_fit * f,
                                       const struct oscar_calib_clip * c, const struct oscar_calib_params * p,
                                       struct oscar_calib_gate * g, struct oscar_calib_timing * t) {
    double t0 = osc_now();
    int32_t L = h->n_layer, D = h->head_dim;
    memset(g, 0, sizeof(*g));
    g->n_layer = L;
    g->naive = calloc((size_t) L, sizeof(double));
    g->hadamard = calloc((size_t) L, sizeof(double));
    g->oscar = calloc((size_t) L, sizeof(double));
    float * had = malloc((size_t) D * (size_t) D * sizeof(float));
    enum oscar_status st = OSCAR_OK;
    if (!g->naive || !g->hadamard || !g->oscar || !had) {
        st = osc_error(OSCAR_ERR_NOMEM, "gate: out of memory");
        goto out;
    }
    if ((st = oscar_hadamard_matrix_f32(D, had)) != OSCAR_OK) goto out;
    struct gate_rot gr = {f, had};
    struct oscar_calib_method naive = {.name = "naive", .scheme = OSCAR_INT2_SYM};
    struct oscar_calib_method hm = {.name = "hadamard", .rot = had_fn, .user = &gr, .scheme = OSCAR_INT2_ASYM,
                                    .k_clip_const = 0.96, .v_clip_const = 0.92};
    struct oscar_calib_method om = {.name = "oscar", .rot = oscar_fn, .user = &gr, .scheme = OSCAR_INT2_ASYM,
                                    .k_clip = c->k, .v_clip = c->v, .n_clip = c->n_clip};
    struct osc_progress pr;
    osc_progress_init(&pr, "gate", "layer", L);
    for (int32_t l = 0; l < L && st == OSCAR_OK; l++) {
        if ((st = oscar_calib_postwo_error(h, l, &naive, p, &g->naive[l])) != OSCAR_OK ||
            (st = oscar_calib_postwo_error(h, l, &hm, p, &g->hadamard[l])) != OSCAR_OK ||
            (st = oscar_calib_postwo_error(h, l, &om, p, &g->oscar[l])) != OSCAR_OK) {
            break;
        }
        g->mean_naive += g->naive[l] / L;
        g->mean_hadamard += g->hadamard[l] / L;
        g->mean_oscar += g->oscar[l] / L;
        osc_progress_update(&pr, l + 1);
    }
    osc_progress_finish(&pr);
    g->pass = g->mean_oscar < g->mean_hadamard && g->mean_oscar < g->mean_naive;
out:
    free(had);
    if (st != OSCAR_OK) oscar_calib_gate_free(g);
    if (t) t->gate += osc_now() - t0;
    return st;
}
