// layer-fixture.h - one random held-out layer and its INT2-transformed K/V rows at NC clip ratios,
// shared by the tests of lib/verify's candidate errors (test-verify-cand, test-attn-scale).
// The including file defines T, HQ, HKV, D, CE, NC and N (= T * HKV * D) and includes test-rng.h.
#ifndef OSCAR_TEST_LAYER_FIXTURE_H
#define OSCAR_TEST_LAYER_FIXTURE_H

#include "verify/metrics.h"

static void close_rel(double a, double b, double tol, const char * what) {
    double r = fabs(a - b) / (fabs(b) > 0 ? fabs(b) : 1.0);
    if (r > tol) fail_msg("%s: %.10g vs %.10g (rel %.3g > %.3g)", what, a, b, r, tol);
}

struct fixture {
    float * q, * k, * v, * wo, * k_hp, * v_hp, * kq[NC], * vq[NC];
    int32_t ss[3];
    struct oscar_layer_input in;
    struct oscar_tiering tr;
};

// Two sequences split at `split`, static tiers of `sink` + `recent` BF16 rows, and the
// Hadamard INT2 transform of K/V at each of ratios[NC] (computed on n_threads threads).
static void setup_layer(struct fixture * f, int32_t split, int32_t sink, int32_t recent, const double * ratios,
                        int32_t n_threads) {
    f->q = rnd((size_t) T * HQ * D, 1.0), f->k = rnd(N, 1.0), f->v = rnd(N, 1.0), f->wo = rnd((size_t) CE * HQ * D, 0.1);
    f->ss[0] = 0, f->ss[1] = split, f->ss[2] = T;
    f->in = (struct oscar_layer_input){.layer = 0, .n_tokens = T, .n_seq = 2, .seq_start = f->ss, .q = f->q,
                                       .k = f->k, .v = f->v, .wo = f->wo, .n_head = HQ, .n_head_kv = HKV,
                                       .head_dim = D, .n_embd = CE};
    f->tr = (struct oscar_tiering){.mode = OSCAR_TIERS_STATIC, .n_sink = sink, .n_recent = recent, .n_flush = 8,
                                   .block = 1};
    f->k_hp = malloc(sizeof(float) * N), f->v_hp = malloc(sizeof(float) * N);
    struct oscar_kv_transform tf;
    assert_int_equal(oscar_kv_transform_preset("hadamard", 1, HKV, D, 0, OSCAR_META_F32, &f->tr, false, NULL, NULL,
                                               false, NULL, NULL, &tf), OSCAR_OK);
    for (int c = 0; c < NC; c++) {
        f->kq[c] = malloc(sizeof(float) * N), f->vq[c] = malloc(sizeof(float) * N);
        tf.k_clip = tf.v_clip = ratios[c];
        assert_int_equal(oscar_kv_transform_layer(&tf, 0, T, 2, f->ss, f->k, f->v, f->k_hp, f->v_hp, f->kq[c],
                                                  f->vq[c], n_threads, NULL), OSCAR_OK);
    }
}

static void teardown(struct fixture * f) {
    free(f->q), free(f->k), free(f->v), free(f->wo), free(f->k_hp), free(f->v_hp);
    for (int c = 0; c < NC; c++) free(f->kq[c]), free(f->vq[c]);
}

#endif
