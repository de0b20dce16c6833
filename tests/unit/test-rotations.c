// test-rotations.c - struct oscar_rotations (lib/rotation/rotations.h): the (layer, KV head)
// lookup of per-layer, per-head and mixed (auto) rotations, clips and key means; a layer view;
// copies that narrow a per-head set to per-layer tensors and widen a per-layer one.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "rotation/rotations.h"

enum { L = 3, HKV = 2, D = 4 };

// Every matrix, eigenvalue and clip of r set to a value naming its slot: 100·l + 10·h + element.
static void fill(struct oscar_rotations * r) {
    for (int32_t l = 0; l < L; l++)
        for (int32_t h = 0; h < r->n_rot; h++) {
            for (int32_t i = 0; i < D * D; i++) {
                oscar_rotations_k(r, l, h)[i] = (float) (100 * l + 10 * h + i);
                oscar_rotations_v(r, l, h)[i] = (float) -(100 * l + 10 * h + i);
            }
            for (int32_t i = 0; i < D; i++) oscar_rotations_k_eig(r, l, h)[i] = (float) (100 * l + 10 * h + i);
        }
    for (int32_t l = 0; l < L; l++)
        for (int32_t h = 0; h < r->n_clip; h++) *oscar_rotations_k_clip(r, l, h) = (float) (l + 0.1 * h);
}

static void test_lookup(void ** state) {
    (void) state;
    struct oscar_rotations lay, head;
    assert_int_equal(oscar_rotations_alloc(&lay, L, HKV, D, 1, 1, false, false), OSCAR_OK);
    assert_int_equal(oscar_rotations_alloc(&head, L, HKV, D, HKV, HKV, true, true), OSCAR_OK);
    fill(&lay), fill(&head);
    for (int32_t l = 0; l < L; l++)
        for (int32_t h = 0; h < HKV; h++) {
            // per layer: every head reads the layer's one matrix and clip
            assert_true(oscar_rotations_k(&lay, l, h) == oscar_rotations_k(&lay, l, 0));
            assert_true(oscar_rotations_k(&lay, l, h)[1] == (float) (100 * l + 1));
            assert_true(*oscar_rotations_k_clip(&lay, l, h) == (float) l);
            // per head: each its own, in [L, Hkv] order
            assert_true(oscar_rotations_k(&head, l, h) == head.k + ((size_t) l * HKV + (size_t) h) * D * D);
            assert_true(oscar_rotations_v(&head, l, h)[2] == (float) -(100 * l + 10 * h + 2));
            assert_true(oscar_rotations_k_eig(&head, l, h)[3] == (float) (100 * l + 10 * h + 3));
            assert_true(*oscar_rotations_k_clip(&head, l, h) == (float) (l + 0.1 * h));
            assert_true(oscar_rotations_k_mean(&head, l, h) == head.k_mean + ((size_t) l * HKV + (size_t) h) * D);
        }
    assert_null(oscar_rotations_k_mean(&lay, 1, 1));
    assert_int_equal(oscar_rotations_n_head_layers(&lay), 0);
    // auto: the choice says which layers are per head
    head.head_layer[1] = 1;
    assert_int_equal(oscar_rotations_n_head_layers(&head), 1);
    assert_false(oscar_rotations_layer_per_head(&head, 0));
    assert_true(oscar_rotations_layer_per_head(&head, 1));
    oscar_rotations_set_layer_clips(&head, 2, 0.5f, 0.25f);
    for (int32_t h = 0; h < HKV; h++)
        assert_true(*oscar_rotations_k_clip(&head, 2, h) == 0.5f && *oscar_rotations_v_clip(&head, 2, h) == 0.25f);
    // a one-layer view reads layer 2 as its layer 0
    const struct oscar_rotations v = oscar_rotations_layer_view(&head, 2);
    assert_int_equal(v.n_layer, 1);
    assert_true(oscar_rotations_k(&v, 0, 1) == oscar_rotations_k(&head, 2, 1));
    assert_true(oscar_rotations_k_mean(&v, 0, 1) == oscar_rotations_k_mean(&head, 2, 1));
    assert_true(*oscar_rotations_v_clip(&v, 0, 1) == 0.25f);
    oscar_rotations_free(&lay), oscar_rotations_free(&head);
    assert_null(lay.k);
}

static void test_copy_narrows_and_widens(void ** state) {
    (void) state;
    struct oscar_rotations head, lay, wide;
    assert_int_equal(oscar_rotations_alloc(&head, L, HKV, D, HKV, HKV, false, false), OSCAR_OK);
    assert_int_equal(oscar_rotations_alloc(&lay, L, HKV, D, 1, 1, false, false), OSCAR_OK);
    assert_int_equal(oscar_rotations_alloc(&wide, L, HKV, D, HKV, HKV, false, true), OSCAR_OK);
    fill(&head);
    oscar_rotations_copy(&lay, &head);   // narrow: head 0 of each layer
    for (int32_t l = 0; l < L; l++) {
        assert_memory_equal(oscar_rotations_k(&lay, l, 0), oscar_rotations_k(&head, l, 0), D * D * sizeof(float));
        assert_true(*oscar_rotations_k_clip(&lay, l, 0) == *oscar_rotations_k_clip(&head, l, 0));
    }
    oscar_rotations_copy(&wide, &lay);   // widen: the layer's one replicated, the choice "layer"
    for (int32_t l = 0; l < L; l++) {
        assert_int_equal(wide.head_layer[l], 0);
        for (int32_t h = 0; h < HKV; h++)
            assert_memory_equal(oscar_rotations_v(&wide, l, h), oscar_rotations_v(&head, l, 0), D * D * sizeof(float));
    }
    oscar_rotations_free(&lay);
    assert_int_equal(oscar_rotations_alloc(&lay, L, HKV, D, 3, 1, false, false), OSCAR_ERR_INVALID);
    assert_null(lay.k);
    oscar_rotations_free(&head), oscar_rotations_free(&wide);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_lookup), cmocka_unit_test(test_copy_narrows_and_widens)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
