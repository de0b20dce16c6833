// test-verify-cand.c - oscar_verify_candidate_errors (the clip search's fast
// ranking, lib/verify/metrics.c) against oscar_verify_metrics_explicit on the
// same rows: K sums equal logit_err's sums with V exact, V sums equal out_rel's
// sums with K exact, the per-head V sums equal out_rel when only that head's
// rows are perturbed; thread-count invariance; DECODE tiering refused.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verify/metrics.h"

#define SEED 424242u

#include "test-rng.h"

enum { T = 96, HQ = 4, HKV = 2, D = 64, CE = 48, NC = 3 };
#define N ((size_t) T * HKV * D)

// Tolerances. K: verify forms each logit as an fp32 dot of D = 64 terms
// (relative rounding <= D·2^-24 ≈ 4e-6 of |q||k|) and squares the difference
// of two such logits; the INT2 error e has |e| ≈ 0.1-0.3 |k|, so one squared
// difference carries up to ~4e-6·√D/0.1 ≈ 3e-4 relative error. These errors
// have random signs over the ~9.5e3 (pair, head) terms, so the sum's relative
// error is ~3e-4/√9.5e3 ≈ 3e-6: K_TOL 1e-5. V: verify takes ô − o in fp32
// (|ô − o| ≈ 0.1|o|: ~1e-6 relative per element) while candidate errors form
// A·E in fp32 over <= 56 keys (<= 56·2^-24 ≈ 3e-6); over T·C = 4608 squared
// outputs with random signs: ~3e-6/√4608 ≈ 5e-8: V_TOL 1e-6.
// (Observed: 4e-9 and 1e-8.)
#define K_TOL 1e-5
#define V_TOL 1e-6

#include "layer-fixture.h"

static void setup(struct fixture * f) {
    const double ratios[NC] = {1.0, 0.9, 0.8};
    setup_layer(f, 40, 4, 8, ratios, 2);
}

static void test_vs_explicit(void ** state) {
    (void) state;
    printf("seed %u\n", SEED);
    struct fixture f;
    setup(&f);
    double kn[NC * HKV], kd[HKV], vn[NC * (HKV + 1)], vd, vh_n[NC * (HKV + 1)], vh_d;   // layer sums / per head
    assert_int_equal(oscar_verify_candidate_errors(&f.in, &f.tr, NC, f.k_hp, f.v_hp, (const float * const *) f.kq,
                                                   (const float * const *) f.vq, false, 2, kn, kd, vn, &vd), OSCAR_OK);
    assert_int_equal(oscar_verify_candidate_errors(&f.in, &f.tr, NC, f.k_hp, f.v_hp, (const float * const *) f.kq,
                                                   (const float * const *) f.vq, true, 2, kn, kd, vh_n, &vh_d), OSCAR_OK);
    assert_memory_equal(&vd, &vh_d, sizeof vd);
    float * vh = malloc(sizeof(float) * N), * vqh = malloc(sizeof(float) * N);
    for (int c = 0; c < NC; c++) {
        struct oscar_layer_metrics m;
        assert_int_equal(oscar_verify_metrics_explicit(&f.in, &f.tr, f.k_hp, f.v, f.kq[c], f.v, 1, &m), OSCAR_OK);
        close_rel(kn[c * HKV] + kn[c * HKV + 1], m.logit_num, K_TOL, "K numerator");
        close_rel(kd[0] + kd[1], m.logit_den, K_TOL, "K denominator");
        assert_true(kn[c * HKV] > 0 && kn[c * HKV + 1] > 0);
        assert_int_equal(oscar_verify_metrics_explicit(&f.in, &f.tr, f.k, f.v_hp, f.k, f.vq[c], 1, &m), OSCAR_OK);
        close_rel(vn[c * (HKV + 1) + HKV], m.out_num, V_TOL, "V numerator");
        assert_true(vh_n[c * (HKV + 1) + HKV] == 0.0);   // per head: the layer sum is skipped
        close_rel(vd, m.out_den, V_TOL, "V denominator");
        for (int h = 0; h < HKV; h++) {   // only head h perturbed
            memcpy(vh, f.v, sizeof(float) * N), memcpy(vqh, f.v, sizeof(float) * N);
            for (int t = 0; t < T; t++) {
                size_t o = ((size_t) t * HKV + (size_t) h) * D;
                memcpy(vh + o, f.v_hp + o, sizeof(float) * D), memcpy(vqh + o, f.vq[c] + o, sizeof(float) * D);
            }
            assert_int_equal(oscar_verify_metrics_explicit(&f.in, &f.tr, f.k, vh, f.k, vqh, 1, &m), OSCAR_OK);
            close_rel(vh_n[c * (HKV + 1) + h], m.out_num, V_TOL, "V per-head numerator");
        }
    }
    // the clip grid must matter: ratio 0.8 and 1.0 give different K errors
    assert_true(fabs(kn[0] - kn[2 * HKV]) > 1e-6 * kn[0]);
    free(vh), free(vqh);
    teardown(&f);
}

static void test_threads_and_refusal(void ** state) {
    (void) state;
    struct fixture f;
    setup(&f);
    double kn[2][NC * HKV], kd[2][HKV], vn[2][NC * (HKV + 1)], vd[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(oscar_verify_candidate_errors(&f.in, &f.tr, NC, f.k_hp, f.v_hp, (const float * const *) f.kq,
                                                       (const float * const *) f.vq, false, i + 1, kn[i], kd[i], vn[i],
                                                       &vd[i]), OSCAR_OK);
    assert_memory_equal(kn[0], kn[1], sizeof kn[0]);
    assert_memory_equal(kd[0], kd[1], sizeof kd[0]);
    assert_memory_equal(vn[0], vn[1], sizeof vn[0]);
    assert_memory_equal(&vd[0], &vd[1], sizeof vd[0]);
    for (int c = 0; c < NC; c++) assert_true(vn[0][c * (HKV + 1)] == 0.0);   // no per-head sums requested
    struct oscar_tiering dec = f.tr;
    dec.mode = OSCAR_TIERS_DECODE;
    assert_int_equal(oscar_verify_candidate_errors(&f.in, &dec, NC, f.k_hp, f.v_hp, (const float * const *) f.kq,
                                                   (const float * const *) f.vq, false, 1, kn[0], kd[0], vn[0], &vd[0]),
                     OSCAR_ERR_UNSUPPORTED);
    teardown(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_vs_explicit), cmocka_unit_test(test_threads_and_refusal)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
