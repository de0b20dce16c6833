// test-sign-search.c - oscar-calibrate's --sign-search (lib/calibrate/signs.c)
// on small synthetic held-out rows: the objective never rises and the recorded
// numbers are the evaluator's for the rotations it leaves; 1 and 2 threads give
// the same bytes (layer and head grouping); a planted sign vector, under which
// every INT2 row is a single spike (exact at clip 1.0), is found from the
// canonical start; compositions without U are refused.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calibrate/calib-verify.h"
#include "calibrate/calibrate.h"

static uint64_t seed;
#include "test-splitmix.h"
#include "calib-stages.h"

enum { L = 2, HQ = 4, HKV = 2, D = 16, C = 32, NSEQ = 2, LEN = 64, T = NSEQ * LEN };

static int setup(void ** state) {
    (void) state;
    const char * e = getenv("OSCAR_TEST_SEED");
    seed = e ? strtoull(e, NULL, 10) : (uint64_t) time(NULL);
    print_message("test-sign-search seed %llu (set OSCAR_TEST_SEED to repeat)\n", (unsigned long long) seed);
    return 0;
}

// Held-out rows: random q and W_O; k and v random with per-channel scales (so that
// signs matter), or, with plant != NULL, c_t · plant / √D plus 1e-3 noise.
struct rows {
    struct oscar_calib_heldout h;
    int32_t seq_start[NSEQ + 1];
    float * q[L], * k[L], * v[L], * wo[L];
    const float * woc[L];
};

static void rows_make(struct rows * r, uint64_t s, const int8_t * k_plant, const int8_t * v_plant) {
    memset(r, 0, sizeof(*r));
    for (int i = 0; i <= NSEQ; i++) r->seq_start[i] = i * LEN;
    for (int l = 0; l < L; l++) {
        r->q[l] = malloc(sizeof(float) * T * HQ * D), r->k[l] = malloc(sizeof(float) * T * HKV * D);
        r->v[l] = malloc(sizeof(float) * T * HKV * D), r->wo[l] = malloc(sizeof(float) * C * HQ * D);
        r->woc[l] = r->wo[l];
        for (int i = 0; i < T * HQ * D; i++) r->q[l][i] = (float) splitmix_unif(&s);
        for (int i = 0; i < C * HQ * D; i++) r->wo[l][i] = (float) (splitmix_unif(&s) * 0.2);
        for (int t = 0; t < T * HKV; t++) {
            double ck = 1.0 + splitmix_unif(&s), cv = 1.0 + splitmix_unif(&s);
            for (int d = 0; d < D; d++) {
                float * kk = &r->k[l][(size_t) t * D + d], * vv = &r->v[l][(size_t) t * D + d];
                *kk = k_plant ? (float) (ck * k_plant[d] / 4.0 + 1e-3 * splitmix_unif(&s))
                              : (float) (splitmix_unif(&s) * (1.0 + d) / 4.0);
                *vv = v_plant ? (float) (cv * v_plant[d] / 4.0 + 1e-3 * splitmix_unif(&s))
                              : (float) (splitmix_unif(&s) * (D - d) / 4.0);
            }
        }
    }
    r->h = (struct oscar_calib_heldout){.n_layer = L, .n_head = HQ, .n_head_kv = HKV, .head_dim = D, .n_embd = C,
                                        .n_seq = NSEQ, .seq_start = r->seq_start, .n_rows = T, .q = r->q, .k = r->k,
                                        .v = r->v, .wo = r->woc};
}

static void rows_free(struct rows * r) {
    for (int l = 0; l < L; l++) free(r->q[l]), free(r->k[l]), free(r->v[l]), free(r->wo[l]);
}

static struct oscar_calib_params params(enum oscar_rotation_grouping g, int32_t threads) {
    struct oscar_calib_params p = oscar_calib_default_params();
    p.grouping = g, p.n_threads = threads, p.sink = 4, p.recent = 8, p.seq_len = LEN;
    p.sign_search = true, p.sign_passes = 2;
    p.k_clip = p.v_clip = 1.0;
    return p;
}

// A fit from random orthonormal bases (Gram-Schmidt of random vectors, canonical signs),
// or the identity (plant), with distinct eigenvalues; R = compose(U, λ) as the fit does.
static void fit_make(struct oscar_calib_fit * f, const struct oscar_calib_params * p, uint64_t s, bool identity) {
    memset(f, 0, sizeof(*f));
    const int32_t nr = p->grouping == OSCAR_GROUP_HEAD ? HKV : 1;
    assert_int_equal(oscar_rotations_alloc(&f->rot, L, HKV, D, nr, nr, false, false), OSCAR_OK);
    size_t n = (size_t) L * (size_t) nr;   // the stacked [L, nr] matrices, filled in order
    f->k_u = malloc(sizeof(double) * n * D * D), f->v_u = malloc(sizeof(double) * n * D * D);
    f->k_lam = malloc(sizeof(double) * n * D), f->v_lam = malloc(sizeof(double) * n * D);
    double r64[D * D];
    for (size_t i = 0; i < 2 * n; i++) {
        double * u = (i < n ? f->k_u : f->v_u) + (i % n) * D * D, * lam = (i < n ? f->k_lam : f->v_lam) + (i % n) * D;
        for (int a = 0; a < D * D; a++) u[a] = identity ? (a / D == a % D) : splitmix_unif(&s);
        for (int j = 0; j < D && !identity; j++) {   // columns orthonormal
            for (int jj = 0; jj < j; jj++) {
                double dot = 0.0;
                for (int a = 0; a < D; a++) dot += u[a * D + j] * u[a * D + jj];
                for (int a = 0; a < D; a++) u[a * D + j] -= dot * u[a * D + jj];
            }
            double nn = 0.0;
            for (int a = 0; a < D; a++) nn += u[a * D + j] * u[a * D + j];
            for (int a = 0; a < D; a++) u[a * D + j] /= sqrt(nn);
        }
        oscar_fit_canonical_signs(D, u);
        for (int j = 0; j < D; j++) lam[j] = 0.5 + j;
        assert_int_equal(oscar_fit_compose(p->composition, D, u, lam, r64, NULL), OSCAR_OK);
        float * R = (i < n ? f->rot.k : f->rot.v) + (i % n) * D * D;
        for (int a = 0; a < D * D; a++) R[a] = (float) r64[a];
        for (int j = 0; j < D; j++) (i < n ? f->rot.k_eig : f->rot.v_eig)[(i % n) * D + j] = (float) lam[j];
    }
}

// The search's objective of f's layer-l rotations, evaluated afresh.
static void eval_fit(const struct rows * r, const struct oscar_calib_params * p, const struct oscar_calib_fit * f,
                     int32_t l, double * k_obj, double * v_obj) {
    struct oscar_kv_transform tf;
    struct oscar_eval_dev * ev = NULL;
    assert_int_equal(osc_calib_transform("oscar", p, &f->rot, &tf), OSCAR_OK);
    tf.tiers = osc_calib_tiering(p);
    tf.k_clip = p->k_clip, tf.v_clip = p->v_clip;
    assert_int_equal(osc_calib_eval_open(&r->h, p, 1, &ev), OSCAR_OK);
    struct oscar_layer_input in = osc_calib_layer_input(&r->h, l);
    assert_int_equal(oscar_eval_dev_layer(ev, &in), OSCAR_OK);
    const size_t NR = (size_t) f->rot.n_rot;
    double kn[HKV], kd[HKV], vn[HKV + 1], vd;
    assert_int_equal(oscar_eval_dev_rotations(ev, &tf, oscar_rotations_k(&f->rot, l, 0), oscar_rotations_v(&f->rot, l, 0),
                                              NR > 1, kn, kd, vn, &vd),
                     OSCAR_OK);
    *k_obj = *v_obj = 0.0;
    if (NR == 1) {
        *k_obj = (kn[0] + kn[1]) / (kd[0] + kd[1]), *v_obj = vn[HKV] / vd;
    } else {
        for (int h = 0; h < HKV; h++) *k_obj += kn[h] / kd[h] / HKV, *v_obj += vn[h] / vd;
    }
    oscar_eval_dev_free(ev);
}

static void test_never_worse_and_recorded(void ** state) {
    (void) state;
    for (int g = 0; g < 2; g++) {
        struct rows r;
        rows_make(&r, seed, NULL, NULL);
        struct oscar_calib_params p = params((enum oscar_rotation_grouping) g, 1);
        struct oscar_calib_fit f;
        struct oscar_calib_signs sg;
        fit_make(&f, &p, seed + 1, false);
        double k0[L], v0[L];
        for (int l = 0; l < L; l++) eval_fit(&r, &p, &f, l, &k0[l], &v0[l]);
        assert_int_equal(sign_search_all(&r.h, &p, &f, &sg), OSCAR_OK);
        assert_null(f.k_u);   // the basis is consumed
        for (int l = 0; l < L; l++) {
            double k1, v1;
            eval_fit(&r, &p, &f, l, &k1, &v1);
            print_message("grouping %s layer %d: K %.6g -> %.6g (%d flips), V %.6g -> %.6g (%d flips), %d evals\n",
                          g ? "head" : "layer", l, sg.k_before[l], sg.k_after[l], sg.k_flips[l], sg.v_before[l],
                          sg.v_after[l], sg.v_flips[l], sg.evals[l]);
            assert_true(sg.k_before[l] == k0[l] && sg.v_before[l] == v0[l]);   // canonical start, same numbers
            assert_true(sg.k_after[l] == k1 && sg.v_after[l] == v1);           // what it leaves is what it reports
            assert_true(sg.k_after[l] <= sg.k_before[l] && sg.v_after[l] <= sg.v_before[l]);
            assert_true(sg.evals[l] >= 1 + D && sg.evals[l] <= 1 + p.sign_passes * D);
            assert_true((sg.k_flips[l] > 0) == (sg.k_after[l] < sg.k_before[l]));
        }
        assert_true(sg.mean_k_after <= sg.mean_k_before && sg.mean_v_after <= sg.mean_v_before);
        oscar_calib_signs_free(&sg);
        oscar_calib_fit_free(&f);
        rows_free(&r);
    }
}

static void test_threads_same_bytes(void ** state) {
    (void) state;
    for (int g = 0; g < 2; g++) {
        struct oscar_calib_fit f[2];
        struct oscar_calib_signs sg[2];
        struct rows r;
        rows_make(&r, seed + 7, NULL, NULL);
        for (int i = 0; i < 2; i++) {
            struct oscar_calib_params p = params((enum oscar_rotation_grouping) g, i + 1);
            fit_make(&f[i], &p, seed + 8, false);
            assert_int_equal(sign_search_all(&r.h, &p, &f[i], &sg[i]), OSCAR_OK);
        }
        size_t n = (size_t) L * (size_t) f[0].rot.n_rot;
        assert_memory_equal(f[0].rot.k, f[1].rot.k, n * D * D * sizeof(float));
        assert_memory_equal(f[0].rot.v, f[1].rot.v, n * D * D * sizeof(float));
        assert_memory_equal(sg[0].k_sign, sg[1].k_sign, n * D);
        assert_memory_equal(sg[0].v_sign, sg[1].v_sign, n * D);
        assert_memory_equal(sg[0].k_after, sg[1].k_after, L * sizeof(double));
        assert_memory_equal(sg[0].v_after, sg[1].v_after, L * sizeof(double));
        assert_memory_equal(sg[0].evals, sg[1].evals, L * sizeof(int32_t));
        for (int i = 0; i < 2; i++) oscar_calib_signs_free(&sg[i]), oscar_calib_fit_free(&f[i]);
        rows_free(&r);
    }
}

// U = I: R = H·P, and k_t ∝ s* makes k·diag(s*)·H one spike (exact INT2 at clip 1.0, up to the
// 1e-3 noise). s* differs from the canonical +1 in two eigenvectors for K and two for V. Other
// sign vectors can be as good (any that leaves at most four evenly spaced values per row), so the
// search must reach the planted vector's objective (within 2x: both are noise), not s* itself.
// Coordinate descent is local: from two wrong signs it reached the plant for 19 of seeds 1..20
// (three wrong: 16), so this case has a fixed seed (1) rather than the run's.
static void test_finds_planted_signs(void ** state) {
    (void) state;
    int8_t ks[D], vs[D];
    const uint64_t plant_seed = 1;
    uint64_t s = plant_seed + 99;
    for (int d = 0; d < D; d++) ks[d] = vs[d] = 1;
    int a = (int) (splitmix_next(&s) % D), b = (a + 1 + (int) (splitmix_next(&s) % (D - 1))) % D;
    ks[a] = ks[b] = -1;
    vs[(a + 3) % D] = vs[(a + 8) % D] = -1;
    struct rows r;
    rows_make(&r, plant_seed + 3, ks, vs);
    struct oscar_calib_params p = params(OSCAR_GROUP_LAYER, 1);
    struct oscar_calib_fit f, planted;
    struct oscar_calib_signs sg;
    fit_make(&f, &p, 0, true);
    fit_make(&planted, &p, 0, true);   // R = diag(s*)·H·P: the planted optimum
    double us[D * D], r64[D * D];
    for (int l = 0; l < L; l++) {
        for (int kv = 0; kv < 2; kv++) {
            oscar_fit_apply_signs(D, (kv ? planted.v_u : planted.k_u) + l * D * D, kv ? vs : ks, us);
            assert_int_equal(oscar_fit_compose(p.composition, D, us, planted.k_lam + l * D, r64, NULL), OSCAR_OK);
            for (int i = 0; i < D * D; i++) (kv ? planted.rot.v : planted.rot.k)[l * D * D + i] = (float) r64[i];
        }
    }
    assert_int_equal(sign_search_all(&r.h, &p, &f, &sg), OSCAR_OK);
    for (int l = 0; l < L; l++) {
        double kp, vp;
        eval_fit(&r, &p, &planted, l, &kp, &vp);
        print_message("planted layer %d: K %.4g -> %.4g (planted %.4g), V %.4g -> %.4g (planted %.4g)\n", l,
                      sg.k_before[l], sg.k_after[l], kp, sg.v_before[l], sg.v_after[l], vp);
        assert_true(kp < 0.01 * sg.k_before[l] && vp < 0.01 * sg.v_before[l]);   // the plant is a real gain
        assert_true(sg.k_after[l] <= 2.0 * kp && sg.v_after[l] <= 2.0 * vp);
        assert_true(sg.k_flips[l] >= 1 && sg.v_flips[l] >= 1);
    }
    oscar_calib_signs_free(&sg);
    oscar_calib_fit_free(&f);
    oscar_calib_fit_free(&planted);
    rows_free(&r);
}

static void test_refusals(void ** state) {
    (void) state;
    struct rows r;
    rows_make(&r, seed, NULL, NULL);
    struct oscar_calib_params p = params(OSCAR_GROUP_LAYER, 1);
    struct oscar_calib_fit f;
    struct oscar_calib_signs sg;
    fit_make(&f, &p, seed, false);
    p.composition = OSCAR_COMP_H_PBR;
    assert_int_equal(sign_search_all(&r.h, &p, &f, &sg), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "h_pbr"));
    p.composition = OSCAR_COMP_R_H_PBR;
    free(f.k_u), f.k_u = NULL;   // a fit made without the basis
    assert_int_equal(sign_search_all(&r.h, &p, &f, &sg), OSCAR_ERR_INVALID);
    oscar_calib_fit_free(&f);
    rows_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_never_worse_and_recorded),
        cmocka_unit_test(test_threads_same_bytes),
        cmocka_unit_test(test_finds_planted_signs),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
