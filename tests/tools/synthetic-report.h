// synthetic-report.h - a made-up oscar-verify report for the layers.svg tests
// (tests/unit/test-plot.c and tests/tools/oscar-plot-synth.c), so the plot can
// be checked without running a model. With 3 methods:
//   bf16   every metric computed and exactly 0 (drawn as "(exact, 0)");
//   naive  every metric positive, except out_rel of layer 2: NaN (skipped);
//   oscar  out_rel not computed (its reference sum is 0: no series in that
//          panel); K relMSE within one decade (the 1-2-5 ticks).
// Methods past 3 get positive values a decade apart from each other, for
// looking at many series. The model, corpus and rotations names hold every
// character that XML must escape.
#ifndef OSCAR_TESTS_SYNTHETIC_REPORT_H
#define OSCAR_TESTS_SYNTHETIC_REPORT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verify/verify.h"

#define SYNTH_MODEL_NAME "Evil & <Model> \"q\" 'a'"
#define SYNTH_CORPUS     "held&out<1>.txt"
#define SYNTH_ROTATIONS  "/tmp/arts/rot<&>"

struct synth_report {
    struct oscar_verify_report r;
    struct oscar_verify_method ms[OSCAR_VERIFY_MAX_METHODS];
    struct oscar_layer_metrics * lm;   // [n_methods * n_layer]
    double * drift;                    // [n_methods * n_layer]
};

// Sets the sums of one layer so that the finished metrics are k, v, kl, out
// (out < 0: out_rel not computed).
static inline void synth_layer(struct oscar_layer_metrics * x, double k, double v, double kl, double out) {
    memset(x, 0, sizeof *x);
    x->k_ref = 10, x->k_err = 10 * k;
    x->v_ref = 4, x->v_err = 4 * v;
    x->n_queries = 8, x->kl_sum = 8 * kl;
    x->logit_den = 2, x->logit_num = 2 * k;
    if (!(out < 0)) x->out_den = 1, x->out_num = out;   // NaN too: computed, but NaN
    x->n_rows = 16, x->n_pairs = 64;
    oscar_layer_metrics_finish(x);
}

// n_methods in 1..OSCAR_VERIFY_MAX_METHODS, n_layer >= 1. Returns 0, or -1 when out of memory.
static inline int synth_report_init(struct synth_report * s, int32_t n_methods, int32_t n_layer) {
    static const char * const names[] = {"bf16", "naive", "oscar", "hadamard", "oscar-fixed", "oscar-lm", "int4-bdh", "kivi"};
    memset(s, 0, sizeof *s);
    s->lm = calloc((size_t) n_methods * (size_t) n_layer, sizeof *s->lm);
    s->drift = calloc((size_t) n_methods * (size_t) n_layer, sizeof *s->drift);
    if (!s->lm || !s->drift) return -1;
    struct oscar_verify_report * r = &s->r;
    snprintf(r->model, sizeof r->model, "/models/%s.gguf", SYNTH_MODEL_NAME);
    snprintf(r->model_name, sizeof r->model_name, "%s", SYNTH_MODEL_NAME);
    snprintf(r->corpus, sizeof r->corpus, "%s", SYNTH_CORPUS);
    snprintf(r->rotations, sizeof r->rotations, "%s", SYNTH_ROTATIONS);
    snprintf(r->scale_dtype, sizeof r->scale_dtype, "float16");
    r->n_layer = n_layer, r->ctx = 64, r->sink = 4, r->recent = 8, r->n_flush = 8, r->group_size = 16;
    r->n_windows = 2, r->metric_tokens = 32, r->prompt = 4, r->n_tokens = 1000;
    r->n_methods = n_methods, r->methods = s->ms;
    for (int32_t i = 0; i < n_methods; i++) {
        struct oscar_verify_method * m = &s->ms[i];
        if (i < (int32_t) (sizeof names / sizeof names[0])) snprintf(m->name, sizeof m->name, "%s", names[i]);
        else snprintf(m->name, sizeof m->name, "extra-%d", (int) i);
        m->bpe = i ? 2.25 : 16, m->ppl = 10 + i, m->n_scored = 126;
        m->layers = s->lm + (size_t) i * (size_t) n_layer, m->drift = s->drift + (size_t) i * (size_t) n_layer;
        for (int32_t l = 0; l < n_layer; l++) {
            double w = 1 + 0.5 * sin((double) l + i), scale = pow(10.0, -(double) i);
            if (i == 0) synth_layer(&m->layers[l], 0, 0, 0, 0);
            else if (i == 1) synth_layer(&m->layers[l], 0.2 * w, 0.1 * w, 0.03 * w, l == 2 ? (double) NAN : 0.05 * w);
            else if (i == 2) synth_layer(&m->layers[l], 0.03 + 0.002 * l, 0.02 * w, 0.004 * w, -1);
            else synth_layer(&m->layers[l], scale * w, scale * 0.5 * w, scale * 0.1 * w, scale * 0.3 * w);
            m->drift[l] = i ? 1e-3 * (l + 1) : 0;
        }
    }
    return 0;
}

static inline void synth_report_free(struct synth_report * s) {
    free(s->lm);
    free(s->drift);
    s->lm = NULL, s->drift = NULL;
}

#endif
