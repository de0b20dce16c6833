// test-kv-sim-device.c - kv-sim-device through the "cpu" backend (lib/attention's
// paged tiered decode over a cache whose sequences are the window's query
// positions) against metrics.h's CPU kv sim, for every tiering mode.
//
// Tolerance: both evaluate the same rows (the same fp64 rotation, bf16
// rounding and quantizer codes); the sim attends in the unrotated basis (rows
// rotated back), the device path in the rotated basis with fp32 blocked
// online softmax and rotates the output back. The difference is fp32 rounding
// of D = 128 term dot products and <= 64-term weighted sums, ~ (D + T) 2^-24
// ~ 2e-5 relative per row at worst; 1e-4 leaves 5x headroom, while a wrong tier
// boundary or a misplaced page moves rows by the INT2 error (~1e-1).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "../gpu/sim-compare.h"

static void test_modes(void ** state) {
    (void) state;
    const enum oscar_tier_mode modes[3] = { OSCAR_TIERS_NONE, OSCAR_TIERS_STATIC, OSCAR_TIERS_DECODE };
    for (int m = 0; m < 3; m++) {
        double rel = 1.0;
        uint64_t seed = 11 + (uint64_t) m;
        enum oscar_status st = sim_compare("cpu", seed, modes[m], 61, 40, 2, &rel);
        printf("kv-sim-device cpu: mode %d seed %llu: max row rel err %.3e (bound 1e-4)\n", m,
               (unsigned long long) seed, rel);
        assert_int_equal(st, OSCAR_OK);
        assert_true(rel < 1e-4);
    }
}

static void test_refuses(void ** state) {
    (void) state;
    struct oscar_model_config cfg = {.n_layer = 1, .n_embd = 256, .n_head = 2, .n_head_kv = 1, .head_dim = 128};
    struct oscar_tiering none = {.mode = OSCAR_TIERS_NONE, .n_flush = 8, .block = 1};
    struct oscar_kv_transform tf;
    struct oscar_kv_sim_dev * s = NULL;
    assert_int_equal(oscar_kv_transform_preset("naive", 1, 1, 128, 0, OSCAR_META_F32, &none, false, NULL, NULL, false,
                                               NULL, NULL, &tf), OSCAR_OK);
    assert_int_equal(oscar_kv_sim_dev_init("cpu", &tf, &cfg, 16, &s), OSCAR_ERR_UNSUPPORTED);
    assert_null(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_modes),
        cmocka_unit_test(test_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
