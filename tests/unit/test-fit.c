// test-fit.c - rotation fit: P_br against method.md §5's worked permutations,
// the tie-break, Hadamard, eigh reconstruction, orthogonality and shape of all
// nine compositions, fits from an accumulator (layer and head grouping), the
// canonical eigenvector signs (idempotent, independent of the input signs).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rotation/fit.h"

static uint64_t seed;
#include "test-splitmix.h"

static int setup(void ** state) {
    (void) state;
    const char * e = getenv("OSCAR_TEST_SEED");
    seed = e ? strtoull(e, NULL, 10) : (uint64_t) time(NULL);
    print_message("test-fit seed %llu (set OSCAR_TEST_SEED to repeat)\n", (unsigned long long) seed);
    return 0;
}

static void test_pbr_reference_perms(void ** state) {
    (void) state;
    double ev[128];
    int32_t perm[128], ties = -1;
    for (int i = 0; i < 128; i++) ev[i] = 0.5 + i; // distinct, ascending like eigh
    const int32_t p8[8] = {7, 3, 5, 1, 6, 2, 4, 0};
    assert_int_equal(oscar_fit_pbr_perm(8, ev, perm, &ties), OSCAR_OK);
    assert_memory_equal(perm, p8, sizeof p8);
    assert_int_equal(ties, 0);
    const int32_t p64[8] = {63, 31, 47, 15, 55, 23, 39, 7};
    assert_int_equal(oscar_fit_pbr_perm(64, ev, perm, NULL), OSCAR_OK);
    assert_memory_equal(perm, p64, sizeof p64);
    const int32_t p128[16] = {127, 63, 95, 31, 111, 47, 79, 15, 119, 55, 87, 23, 103, 39, 71, 7};
    assert_int_equal(oscar_fit_pbr_perm(128, ev, perm, NULL), OSCAR_OK);
    assert_memory_equal(perm, p128, sizeof p128);
    assert_int_equal(perm[64], 126);
    assert_int_equal(perm[32], 125);
    assert_int_equal(perm[96], 124);
    assert_int_equal(oscar_fit_pbr_perm(12, ev, perm, NULL), OSCAR_ERR_INVALID);
}

static void test_pbr_tie_break(void ** state) {
    (void) state;
    // λ = [1, 2, 2, 3]: descending with ties by ascending index -> s = [3, 1, 2, 0];
    // perm[bitrev(i)] = s[i], bitrev over 2 bits: 0->0, 1->2, 2->1, 3->3
    const double ev[4] = {1, 2, 2, 3};
    int32_t perm[4], ties = 0;
    assert_int_equal(oscar_fit_pbr_perm(4, ev, perm, &ties), OSCAR_OK);
    const int32_t want[4] = {3, 2, 1, 0};
    assert_memory_equal(perm, want, sizeof want);
    assert_int_equal(ties, 1);
}

static void test_hadamard(void ** state) {
    (void) state;
    float H[64 * 64], ev[64];
    assert_int_equal(oscar_fit_hadamard(64, H, ev), OSCAR_OK);
    for (int i = 0; i < 64; i++) {
        assert_true(ev[i] == 1.0f);
        for (int j = 0; j < 64; j++) {
            const double want = (__builtin_popcount((unsigned) (i & j)) & 1 ? -1.0 : 1.0) / 8.0;
            assert_true((double) H[i * 64 + j] == want); // six levels of x/√2 round to exactly 1/8 in fp64
        }
    }
    // fp32 R, fp64 check: entries are exact here, so R·Rᵀ = I exactly
    assert_true(oscar_fit_orth_error_f32(64, H) == 0.0);
    assert_int_equal(oscar_fit_hadamard(48, H, ev), OSCAR_ERR_INVALID);
}

static void random_spd(int D, double * s, uint64_t * st) {
    double * a = malloc(sizeof(double) * (size_t) D * 2 * D);
    for (int i = 0; i < D * 2 * D; i++) a[i] = splitmix_unif(st) * (1.0 + (i % D) * 0.1);
    for (int i = 0; i < D; i++) {
        for (int j = 0; j < D; j++) {
            double acc = 0.0;
            for (int t = 0; t < 2 * D; t++) acc += a[t * D + i] * a[t * D + j];
            s[i * D + j] = acc / (2 * D);
        }
    }
    free(a);
}

static void test_eigh_and_compositions(void ** state) {
    (void) state;
    enum { D = 128 };
    static double sig[D * D], u[D * D], r[D * D], r2[D * D], ev[D];
    static float rf[D * D], evf[D];
    uint64_t st = seed;
    random_spd(D, sig, &st);
    assert_int_equal(oscar_fit_eigh(D, sig, ev, u), OSCAR_OK);
    // Σ = U diag(λ) Uᵀ; backward error of dsyevd is O(D·eps·||Σ||): allow 16·D·eps·λ_max
    double err = 0.0;
    for (int i = 0; i < D; i++) {
        if (i > 0) assert_true(ev[i] >= ev[i - 1]);
        for (int j = 0; j < D; j++) {
            double acc = 0.0;
            for (int k = 0; k < D; k++) acc += u[i * D + k] * ev[k] * u[j * D + k];
            err = fmax(err, fabs(acc - sig[i * D + j]));
        }
    }
    print_message("eigh reconstruction error %.3e (tolerance %.3e)\n", err, 16.0 * D * DBL_EPSILON * ev[D - 1]);
    assert_true(err <= 16.0 * D * DBL_EPSILON * ev[D - 1]);
    int32_t perm[D];
    assert_int_equal(oscar_fit_pbr_perm(D, ev, perm, NULL), OSCAR_OK);
    for (int c = 0; c < OSCAR_COMP_COUNT; c++) {
        enum oscar_composition comp;
        assert_int_equal(oscar_composition_parse(oscar_composition_name((enum oscar_composition) c), &comp), OSCAR_OK);
        assert_int_equal((int) comp, c);
        struct oscar_fit_report rep;
        assert_int_equal(oscar_fit_rotation(D, sig, comp, rf, evf, &rep), OSCAR_OK);
        // fp32 rounding of an orthogonal matrix: each entry off by <= 2^-24 relative, so
        // |R·Rᵀ − I| <= 2·D·2^-24·max|R|² ~ 1.5e-5 worst case; typical is ~1e-7
        assert_true(rep.orth_err < 2.0 * D * 0x1p-24);
        assert_true(rep.eig_min == ev[0] && rep.eig_max == ev[D - 1]);
        for (int i = 0; i < D; i++) assert_true(evf[i] == (float) ev[i]); // ascending, not permuted
    }
    // structure: r_h_pbr column j is column perm[j] of U·H; br_h128 = (U·P)·H
    assert_int_equal(oscar_fit_compose(OSCAR_COMP_R_H, D, u, ev, r, NULL), OSCAR_OK);
    assert_int_equal(oscar_fit_compose(OSCAR_COMP_R_H_PBR, D, u, ev, r2, NULL), OSCAR_OK);
    for (int i = 0; i < D; i++) {
        for (int j = 0; j < D; j++) assert_true(r2[i * D + j] == r[i * D + perm[j]]);
    }
    assert_int_equal(oscar_fit_compose(OSCAR_COMP_PLAIN, D, u, ev, r, NULL), OSCAR_OK);
    assert_memory_equal(r, u, sizeof u);
    assert_int_equal(oscar_fit_compose(OSCAR_COMP_PBR, D, u, ev, r, NULL), OSCAR_OK);
    for (int j = 0; j < D; j++) assert_true(r[perm[j] * D + j] == 1.0);
    enum oscar_composition bad;
    assert_int_equal(oscar_composition_parse("h_r", &bad), OSCAR_ERR_INVALID);
}

// Canonical signs: largest-|u| component of each column positive, lowest row on exact ties;
// flipping any input columns gives the same bits; applying it twice changes nothing; the fit's R
// is the composition of the canonical U.
static void test_canonical_signs(void ** state) {
    (void) state;
    enum { D = 64 };
    static double sig[D * D], u[D * D], c1[D * D], c2[D * D], r[D * D], ev[D];
    static float rf[D * D], evf[D];
    uint64_t st = seed ^ 0x5167u;
    random_spd(D, sig, &st);
    assert_int_equal(oscar_fit_eigh(D, sig, ev, u), OSCAR_OK);
    memcpy(c1, u, sizeof c1);
    oscar_fit_canonical_signs(D, c1);
    for (int j = 0; j < D; j++) {
        int best = 0;
        for (int i = 1; i < D; i++)
            if (fabs(c1[i * D + j]) > fabs(c1[best * D + j])) best = i;
        assert_true(c1[best * D + j] > 0.0);
        for (int i = 0; i < D; i++) assert_true(fabs(c1[i * D + j]) == fabs(u[i * D + j]));
    }
    memcpy(c2, c1, sizeof c2);
    oscar_fit_canonical_signs(D, c2);
    assert_memory_equal(c1, c2, sizeof c1);                     // idempotent
    int8_t flip[D];
    for (int j = 0; j < D; j++) flip[j] = (splitmix_next(&st) & 1) ? -1 : 1;
    oscar_fit_apply_signs(D, u, flip, c2);                       // any input signs -> the same output
    oscar_fit_canonical_signs(D, c2);
    assert_memory_equal(c1, c2, sizeof c1);
    // exact tie in magnitude: the lowest row index is made positive
    double t[4] = {-0.5, 0.5, 0.5, 0.5}; // columns (-.5, .5) and (.5, .5): tie in both
    oscar_fit_canonical_signs(2, t);
    assert_true(t[0] == 0.5 && t[2] == -0.5 && t[1] == 0.5 && t[3] == 0.5);
    // the fit composes the canonical U
    assert_int_equal(oscar_fit_compose(OSCAR_COMP_R_H_PBR, D, c1, ev, r, NULL), OSCAR_OK);
    assert_int_equal(oscar_fit_rotation(D, sig, OSCAR_COMP_R_H_PBR, rf, evf, NULL), OSCAR_OK);
    for (int i = 0; i < D * D; i++) assert_true(rf[i] == (float) r[i]);
    assert_true(oscar_composition_uses_u(OSCAR_COMP_R_H_PBR) && !oscar_composition_uses_u(OSCAR_COMP_PBR) &&
                !oscar_composition_uses_u(OSCAR_COMP_H_PBR) && oscar_composition_uses_u(OSCAR_COMP_PLAIN));
}

static void test_non_pow2_and_nan(void ** state) {
    (void) state;
    double s[9] = {2, 0, 0, 0, 1, 0, 0, 0, 3}, u[9], ev[3], r[9];
    assert_int_equal(oscar_fit_eigh(3, s, ev, u), OSCAR_OK);
    assert_true(ev[0] == 1.0 && ev[1] == 2.0 && ev[2] == 3.0);
    assert_int_equal(oscar_fit_compose(OSCAR_COMP_PLAIN, 3, u, ev, r, NULL), OSCAR_OK);
    assert_int_equal(oscar_fit_compose(OSCAR_COMP_R_H_PBR, 3, u, ev, r, NULL), OSCAR_ERR_INVALID);
    s[4] = NAN;
    assert_int_equal(oscar_fit_eigh(3, s, ev, u), OSCAR_ERR_NUMERIC);
}

static void test_fit_stats_layer_and_head(void ** state) {
    (void) state;
    enum { L = 3, HQ = 4, HKV = 2, D = 16, T = 300 };
    static float q[T][HQ][D], k[T][HKV][D], v[T][HKV][D];
    uint64_t st = seed ^ 77;
    for (size_t i = 0; i < sizeof q / 4; i++) ((float *) q)[i] = (float) splitmix_unif(&st);
    for (size_t i = 0; i < sizeof k / 4; i++) ((float *) k)[i] = (float) splitmix_unif(&st);
    for (size_t i = 0; i < sizeof v / 4; i++) ((float *) v)[i] = (float) splitmix_unif(&st);
    struct oscar_stats * s[2];
    for (int th = 0; th < 2; th++) {
        struct oscar_stats_params p = oscar_stats_default_params();
        p.n_layer = L; p.n_head = HQ; p.n_head_kv = HKV; p.head_dim = D; p.n_threads = th + 1;
        assert_int_equal(oscar_stats_init(&p, &s[th]), OSCAR_OK);
        for (int pass = 0; pass < 2; pass++) {
            for (int l = 0; l < L; l++) {
                struct oscar_stats_chunk c = {.layer = l, .n_tokens = T, .q = &q[0][0][0], .k = &k[0][0][0],
                                              .v = &v[0][0][0]};
                assert_int_equal(oscar_stats_add(s[th], &c), OSCAR_OK);
            }
            assert_int_equal(oscar_stats_end_pass(s[th]), OSCAR_OK);
        }
    }
    static float R[2][L * HKV * D * D], E[2][L * HKV * D];
    struct oscar_fit_report rep[L * HKV];
    assert_int_equal(oscar_fit_stats(s[0], OSCAR_STATS_SST, OSCAR_GROUP_LAYER, OSCAR_COMP_R_H_PBR, R[0], E[0], rep),
                     OSCAR_OK);
    assert_int_equal(oscar_fit_stats(s[1], OSCAR_STATS_SST, OSCAR_GROUP_LAYER, OSCAR_COMP_R_H_PBR, R[1], E[1], NULL),
                     OSCAR_OK);
    assert_memory_equal(R[0], R[1], sizeof(float) * L * D * D); // thread count does not matter
    // every layer got the same data, hence the same rotation as a single-matrix fit
    double sig[D * D];
    float r1[D * D], e1[D];
    assert_int_equal(oscar_stats_sigma(s[0], OSCAR_STATS_SST, 2, -1, sig), OSCAR_OK);
    assert_int_equal(oscar_fit_rotation(D, sig, OSCAR_COMP_R_H_PBR, r1, e1, NULL), OSCAR_OK);
    assert_memory_equal(r1, R[0] + 2 * D * D, sizeof r1);
    assert_true(rep[2].orth_err < 1e-5);
    assert_int_equal(oscar_fit_stats(s[0], OSCAR_STATS_QQT, OSCAR_GROUP_HEAD, OSCAR_COMP_PLAIN, R[0], E[0], rep),
                     OSCAR_OK);
    assert_int_equal(oscar_stats_sigma(s[0], OSCAR_STATS_QQT, 1, 1, sig), OSCAR_OK);
    assert_int_equal(oscar_fit_rotation(D, sig, OSCAR_COMP_PLAIN, r1, e1, NULL), OSCAR_OK);
    assert_memory_equal(e1, E[0] + (1 * HKV + 1) * D, sizeof e1);
    assert_int_equal(oscar_fit_stats(s[0], OSCAR_STATS_KTK, OSCAR_GROUP_LAYER, OSCAR_COMP_PLAIN, R[0], E[0], rep),
                     OSCAR_ERR_INVALID); // not accumulated
    oscar_stats_free(s[0]);
    oscar_stats_free(s[1]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pbr_reference_perms),
        cmocka_unit_test(test_pbr_tie_break),
        cmocka_unit_test(test_hadamard),
        cmocka_unit_test(test_eigh_and_compositions),
        cmocka_unit_test(test_canonical_signs),
        cmocka_unit_test(test_non_pow2_and_nan),
        cmocka_unit_test(test_fit_stats_layer_and_head),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
