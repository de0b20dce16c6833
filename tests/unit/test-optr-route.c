// test-optr-route.c - the placement behind --refine optr split by KV head
// (lib/calibrate/optr-route.c): osc_optr_parts cuts the training rows into the
// ranks' parts in rank order (empty parts past the training rows, a refusal
// when the ranks hold too few rows); a part packed for a rank's KV heads and
// unpacked at its rows gives, for every rank count and head share, exactly the
// single-process rows of those heads (q: the heads' g query heads; k, v: the
// heads), bit for bit; osc_optr_pack_heads takes a W_O-shaped slice too.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "calibrate/dp.h"
#include "calibrate/optr-route.h"
#include "util/error.h"

enum { HQ = 6, HKV = 3, D = 4, G = HQ / HKV, ROWS = 11 };

static void test_parts(void ** state) {
    (void) state;
    const int64_t rank_rows[3] = {192, 256, 64};
    int64_t start[4];
    assert_int_equal(osc_optr_parts(rank_rows, 3, 300, start), OSCAR_OK);
    assert_true(start[0] == 0 && start[1] == 192 && start[2] == 300 && start[3] == 300);
    assert_int_equal(osc_optr_parts(rank_rows, 3, 100, start), OSCAR_OK);   // rank 0 holds them all
    assert_true(start[0] == 0 && start[1] == 100 && start[2] == 100 && start[3] == 100);
    assert_int_equal(osc_optr_parts(rank_rows, 3, 512, start), OSCAR_OK);
    assert_true(start[1] == 192 && start[2] == 448 && start[3] == 512);
    assert_int_equal(osc_optr_parts(rank_rows, 3, 513, start), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "513"));
}

// Every element names its row, head and component: distinct, exact in fp32.
static void fill(float * x, int64_t n, int32_t heads) {
    for (int64_t t = 0; t < n; t++)
        for (int32_t h = 0; h < heads; h++)
            for (int32_t d = 0; d < D; d++) x[(t * heads + h) * D + d] = (float) (t * 1000 + h * 10 + d);
}

// Every rank count and every rank's head share: the parts of every rank, packed and unpacked at
// their rows, are the heads' columns of the whole rows.
static void test_parts_reassemble(void ** state) {
    (void) state;
    float q[ROWS * HQ * D], k[ROWS * HKV * D], v[ROWS * HKV * D];
    fill(q, ROWS, HQ), fill(k, ROWS, HKV), fill(v, ROWS, HKV);
    for (int32_t k_ = 0; k_ < ROWS * HKV * D; k_++) v[k_] = -v[k_];   // v unlike k
    for (int32_t size = 1; size <= 4; size++) {
        int64_t rank_rows[4], start[5], total = 0;
        for (int32_t r = 0; r < size; r++) rank_rows[r] = (r + 2) * 2, total += rank_rows[r];   // 4, 6, 8, 10 rows
        assert_int_equal(osc_optr_parts(rank_rows, size, total < ROWS ? total : ROWS, start), OSCAR_OK);
        const int64_t n = start[size];
        struct osc_dp dp = {.rank = 0, .size = size};
        for (int32_t d = 0; d < size; d++) {
            int64_t a, b;
            osc_dp_share(&dp, d, HKV, &a, &b);
            const struct osc_optr_heads hs = {.n_head = HQ, .n_head_kv = HKV, .head_dim = D, .h0 = (int32_t) a,
                                              .nh = (int32_t) (b - a)};
            const size_t qw = osc_optr_q_width(&hs), kw = osc_optr_kv_width(&hs);
            assert_int_equal(qw, (size_t) (b - a) * G * D);
            float oq[ROWS * HQ * D], ok_[ROWS * HKV * D], ov[ROWS * HKV * D];
            char msg[ROWS * (HQ + 2 * HKV) * D * sizeof(float) + 1];
            for (int32_t r = 0; r < size; r++) {   // rank r's part
                const int64_t m = start[r + 1] - start[r];
                assert_true(osc_optr_part_bytes(&hs, m) <= sizeof msg);
                osc_optr_pack_part(&hs, m, q + start[r] * HQ * D, k + start[r] * HKV * D, v + start[r] * HKV * D, msg);
                osc_optr_unpack_part(&hs, start[r], m, msg, oq, ok_, ov);
            }
            for (int64_t t = 0; t < n; t++) {
                assert_memory_equal(oq + t * qw, q + (t * HQ + a * G) * D, qw * sizeof(float));
                assert_memory_equal(ok_ + t * kw, k + (t * HKV + a) * D, kw * sizeof(float));
                assert_memory_equal(ov + t * kw, v + (t * HKV + a) * D, kw * sizeof(float));
            }
        }
    }
}

// W_O [C, Hq·D]: the columns of KV head 1's query heads.
static void test_pack_wo(void ** state) {
    (void) state;
    enum { C = 5 };
    float wo[C * HQ * D], out[C * G * D];
    fill(wo, C, HQ);
    osc_optr_pack_heads(wo, C, HQ, 1 * G, G, D, out);
    for (int32_t c = 0; c < C; c++)
        for (int32_t j = 0; j < G * D; j++) assert_true(out[c * G * D + j] == wo[c * HQ * D + G * D + j]);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_parts), cmocka_unit_test(test_parts_reassemble),
                                       cmocka_unit_test(test_pack_wo)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
