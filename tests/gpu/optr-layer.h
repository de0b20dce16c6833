// optr-layer.h - a random OptR layer for tests/gpu/test-optr-device.c and
// tests/tools/oscar-optr-flip-probe.c: queries, keys with per-channel offsets and outlier
// channels, values, W_O, random base rotations, and OptR's default parameters for it.
#ifndef OSCAR_TESTS_OPTR_LAYER_H
#define OSCAR_TESTS_OPTR_LAYER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rotation/optr-internal.h"
#include "xorshift-normal.h"

struct lcase {
    const char * name;
    int32_t D, Hq, Hkv, C, G;
    bool center;
    enum oscar_quant_meta_dtype meta;
    int32_t n_train, train_len[16], n_held, held_len[3];
    int32_t steps, eval_every, sink, recent, qwin;
};

struct layer {
    int32_t train_start[17], held_start[4];
    float * q[2], * k[2], * v[2], * wo, * kb, * vb;
    struct oscar_optr_layer in;
    struct oscar_optr_params p;
};

// Keys with per-channel offsets and a few outlier channels (what INT2 struggles with).
static void fill_rows(const struct lcase * c, int32_t T, float * q, float * k, float * v) {
    const int32_t D = c->D;
    for (int32_t t = 0; t < T; t++) {
        for (int32_t i = 0; i < c->Hq * D; i++) q[(size_t) t * c->Hq * D + i] = (float) xn_normal();
        for (int32_t h = 0; h < c->Hkv; h++)
            for (int32_t d = 0; d < D; d++) {
                const double off = d % 5 == 0 ? 2.0 : 0.5 * (d % 3), amp = d % 29 == 3 ? 4.0 : 1.0;
                k[((size_t) t * c->Hkv + h) * D + d] = (float) (off + amp * xn_normal());
                v[((size_t) t * c->Hkv + h) * D + d] = (float) ((d % 31 == 7 ? 3.0 : 1.0) * xn_normal());
            }
    }
}

// A random rotation: expm of a random skew-symmetric matrix (fp64).
static void random_rotation(int32_t D, float * R) {
    double * X = calloc(1, (size_t) D * D * 8), * E = calloc(1, (size_t) D * D * 8), * w = calloc(1, (size_t) 4 * D * D * 8);
    for (int32_t i = 0; i < D; i++)
        for (int32_t j = 0; j <= i; j++) {
            const double a = i == j ? 0.0 : 0.5 * xn_normal();
            X[(size_t) i * D + j] = a, X[(size_t) j * D + i] = -a;
        }
    osc_optr_expm(X, D, E, w);
    for (size_t i = 0; i < (size_t) D * D; i++) R[i] = (float) E[i];
    free(X), free(E), free(w);
}

static void layer_init(const struct lcase * c, uint64_t seed, struct layer * l) {
    memset(l, 0, sizeof *l);
    xn_state = seed * 2654435761u + 1;
    const int32_t D = c->D;
    for (int32_t i = 0; i < c->n_train; i++) l->train_start[i + 1] = l->train_start[i] + c->train_len[i];
    for (int32_t i = 0; i < c->n_held; i++) l->held_start[i + 1] = l->held_start[i] + c->held_len[i];
    const int32_t T[2] = {l->train_start[c->n_train], l->held_start[c->n_held]};
    for (int s = 0; s < 2; s++) {
        l->q[s] = calloc(1, (size_t) T[s] * c->Hq * D * 4);
        l->k[s] = calloc(1, (size_t) T[s] * c->Hkv * D * 4);
        l->v[s] = calloc(1, (size_t) T[s] * c->Hkv * D * 4);
        fill_rows(c, T[s], l->q[s], l->k[s], l->v[s]);
    }
    l->wo = calloc(1, (size_t) c->C * c->Hq * D * 4);
    for (size_t i = 0; i < (size_t) c->C * c->Hq * D; i++) l->wo[i] = (float) (0.05 * xn_normal());
    l->kb = calloc(1, (size_t) c->Hkv * D * D * 4), l->vb = calloc(1, (size_t) c->Hkv * D * D * 4);
    for (int32_t h = 0; h < c->Hkv; h++) random_rotation(D, l->kb + (size_t) h * D * D);
    for (int32_t h = 0; h < c->Hkv; h++) random_rotation(D, l->vb + (size_t) h * D * D);
    l->in = (struct oscar_optr_layer){.layer = 3, .n_head = c->Hq, .n_head_kv = c->Hkv, .head_dim = D,
                                      .n_embd = c->C, .wo = l->wo, .k_rot_base = l->kb, .v_rot_base = l->vb};
    l->in.train = (struct oscar_optr_rows){c->n_train, l->train_start, l->q[0], l->k[0], l->v[0]};
    l->in.held = (struct oscar_optr_rows){c->n_held, l->held_start, l->q[1], l->k[1], l->v[1]};
    l->p = oscar_optr_default_params(D, c->G);
    l->p.k_quant.meta_dtype = l->p.v_quant.meta_dtype = c->meta;
    l->p.center = c->center, l->p.steps = c->steps, l->p.eval_every = c->eval_every;
    l->p.sink = c->sink, l->p.recent = c->recent, l->p.qwin = c->qwin;
}

static void layer_free(struct layer * l) {
    for (int s = 0; s < 2; s++) free(l->q[s]), free(l->k[s]), free(l->v[s]);
    free(l->wo), free(l->kb), free(l->vb);
}

#endif
