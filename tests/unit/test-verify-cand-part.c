// test-verify-cand-part.c - oscar_verify_candidate_errors_part (a data-parallel
// clip search's share of the grid, lib/verify/metrics.c): every part [c0, c1)
// of an 11-candidate grid gives its rows, k_den and v_den the bits of the whole
// call (D = 64: the V product is 768 columns wide, two column tiles of blas.h,
// so parts inside the first, inside the second and across the two are all
// checked), and the parts put together in order are the whole call's arrays.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/blas.h"
#include "verify/metrics.h"

#define SEED 171717u

#include "test-rng.h"

enum { T = 96, HQ = 4, HKV = 2, D = 64, CE = 48, NC = 11 };
#define N ((size_t) T * HKV * D)

#include "layer-fixture.h"

struct errs {
    double kn[NC * HKV], kd[HKV], vn[NC * (HKV + 1)], vd;
};

static void whole(struct fixture * f, struct errs * w) {
    assert_int_equal(oscar_verify_candidate_errors(&f->in, &f->tr, NC, f->k_hp, f->v_hp, (const float * const *) f->kq,
                                                   (const float * const *) f->vq, true, 2, w->kn, w->kd, w->vn, &w->vd),
                     OSCAR_OK);
}

static void test_every_part(void ** state) {
    (void) state;
    printf("seed %u\n", SEED);
    assert_true((NC + 1) * D > OSC_GEMM_TILE_N);   // the grid spans two column tiles
    double ratios[NC];
    for (int c = 0; c < NC; c++) ratios[c] = 1.0 - 0.04 * c;
    struct fixture f;
    setup_layer(&f, 40, 4, 8, ratios, 2);
    struct errs w;
    whole(&f, &w);
    for (int c0 = 0; c0 <= NC; c0++)
        for (int c1 = c0; c1 <= NC; c1++) {
            struct errs p;
            memset(&p, 0xff, sizeof p);
            const bool vden = c0 == 0 || c1 == c0;
            assert_int_equal(oscar_verify_candidate_errors_part(&f.in, &f.tr, NC, c0, c1, f.k_hp, f.v_hp,
                                                                (const float * const *) f.kq,
                                                                (const float * const *) f.vq, true, c0 % 2 + 1, p.kn,
                                                                p.kd, p.vn, vden ? &p.vd : NULL),
                             OSCAR_OK);
            if (c1 > c0) {
                assert_memory_equal(p.kn + c0 * HKV, w.kn + c0 * HKV, sizeof(double) * (size_t) (c1 - c0) * HKV);
                assert_memory_equal(p.vn + c0 * (HKV + 1), w.vn + c0 * (HKV + 1),
                                    sizeof(double) * (size_t) (c1 - c0) * (HKV + 1));
            }
            assert_memory_equal(p.kd, w.kd, sizeof w.kd);
            if (vden) assert_memory_equal(&p.vd, &w.vd, sizeof w.vd);
            // rows outside the part are not written
            if (c0 > 0) assert_true(isnan(p.kn[0]));
            if (c1 < NC) assert_true(isnan(p.vn[(size_t) c1 * (HKV + 1)]));
        }
    // three parts in order are the whole grid
    struct errs a;
    const int cut[4] = {0, 3, 8, NC};
    for (int r = 0; r < 3; r++)
        assert_int_equal(oscar_verify_candidate_errors_part(&f.in, &f.tr, NC, cut[r], cut[r + 1], f.k_hp, f.v_hp,
                                                            (const float * const *) f.kq, (const float * const *) f.vq,
                                                            true, 1, a.kn, a.kd, a.vn, r == 0 ? &a.vd : NULL),
                         OSCAR_OK);
    assert_memory_equal(a.kn, w.kn, sizeof w.kn);
    assert_memory_equal(a.vn, w.vn, sizeof w.vn);
    assert_memory_equal(&a.vd, &w.vd, sizeof w.vd);
    // the grid matters (a part that computed the wrong candidate would show)
    close_rel(a.kd[0], w.kd[0], 0.0, "k_den");
    assert_true(w.vn[0] != w.vn[(NC - 1) * (HKV + 1)]);
    for (int c = 0; c < NC; c++) assert_true(w.vn[c * (HKV + 1) + HKV] == 0.0);   // per head: no layer sum
    teardown(&f);
}

static void test_bad_part(void ** state) {
    (void) state;
    double ratios[NC];
    for (int c = 0; c < NC; c++) ratios[c] = 1.0 - 0.02 * c;
    struct fixture f;
    setup_layer(&f, 40, 4, 8, ratios, 1);
    struct errs p;
    const int bad[3][2] = {{-1, 2}, {5, 4}, {3, NC + 1}};
    for (int i = 0; i < 3; i++)
        assert_int_equal(oscar_verify_candidate_errors_part(&f.in, &f.tr, NC, bad[i][0], bad[i][1], f.k_hp, f.v_hp,
                                                            (const float * const *) f.kq, (const float * const *) f.vq,
                                                            false, 1, p.kn, p.kd, p.vn, &p.vd),
                         OSCAR_ERR_INVALID);
    teardown(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_every_part), cmocka_unit_test(test_bad_part)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
