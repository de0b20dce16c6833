// test-stats.c - streaming accumulators: bit-identical results across
// chunkings and thread counts, checkpoint round trip and resume, rejection of
// corrupt checkpoints and bad input, the sst zero-weight guard.
// Exactness against the numpy oracle is in test-stats-oracle.c.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <time.h>

#include "stats/stats.h"

enum { L = 2, HQ = 6, HKV = 2, D = 16, T = 700 }; // T spans 5 full blocks and a partial one
static float q[L][T][HQ][D], k[L][T][HKV][D], v[L][T][HKV][D];
static uint64_t seed;

#include "test-splitmix.h"
static float unif(uint64_t * s) { return (float) splitmix_unif(s); }

static int setup(void ** state) {
    (void) state;
    const char * e = getenv("OSCAR_TEST_SEED");
    seed = e ? strtoull(e, NULL, 10) : (uint64_t) time(NULL);
    print_message("test-stats seed %llu (set OSCAR_TEST_SEED to repeat)\n", (unsigned long long) seed);
    uint64_t s = seed;
    for (size_t i = 0; i < sizeof q / sizeof(float); i++) ((float *) q)[i] = unif(&s);
    for (size_t i = 0; i < sizeof k / sizeof(float); i++) ((float *) k)[i] = unif(&s) * 2.0f;
    for (size_t i = 0; i < sizeof v / sizeof(float); i++) ((float *) v)[i] = unif(&s) * 0.5f;
    return 0;
}

static struct oscar_stats * make(uint32_t kinds, int threads) {
    struct oscar_stats_params p = oscar_stats_default_params();
    p.n_layer = L; p.n_head = HQ; p.n_head_kv = HKV; p.head_dim = D; p.kinds = kinds; p.n_threads = threads;
    p.max_tokens = T;
    struct oscar_stats * s = NULL;
    assert_int_equal(oscar_stats_init(&p, &s), OSCAR_OK);
    return s;
}

static void add(struct oscar_stats * s, int l, int t0, int n, int n_seq, const int32_t * starts) {
    struct oscar_stats_chunk c = {.layer = l, .n_tokens = n, .n_seq = n_seq, .seq_start = starts,
                                  .q = &q[l][t0][0][0], .k = &k[l][t0][0][0], .v = &v[l][t0][0][0]};
    assert_int_equal(oscar_stats_add(s, &c), OSCAR_OK);
}

// Feeds tokens [from, to) of one pass in chunks given by `sizes` (cycled), each chunk one sequence.
static void feed(struct oscar_stats * s, int from, int to, const int * sizes, int n_sizes) {
    int t = from, i = 0;
    while (t < to) {
        int n = sizes[i++ % n_sizes];
        if (n > to - t) n = to - t;
        int32_t starts[2] = {0, n};
        for (int l = 0; l < L; l++) add(s, l, t, n, 1, starts);
        t += n;
    }
}

static uint8_t * snapshot(const struct oscar_stats * s, size_t * n) {
    *n = oscar_stats_checkpoint_size(s);
    uint8_t * b = malloc(*n);
    assert_int_equal(oscar_stats_save(s, b, *n), OSCAR_OK);
    return b;
}

static uint8_t * full_run(uint32_t kinds, int threads, const int * sizes, int n_sizes, size_t * n) {
    struct oscar_stats * s = make(kinds, threads);
    feed(s, 0, T, sizes, n_sizes);
    assert_int_equal(oscar_stats_end_pass(s), OSCAR_OK);
    if (kinds & OSCAR_STATS_SST) {
        feed(s, 0, T, sizes, n_sizes);
        assert_int_equal(oscar_stats_end_pass(s), OSCAR_OK);
    }
    assert_int_equal(oscar_stats_phase(s), 3);
    uint8_t * b = snapshot(s, n);
    oscar_stats_free(s);
    return b;
}

static const uint32_t K4 = OSCAR_STATS_KTK | OSCAR_STATS_VTV | OSCAR_STATS_QQT | OSCAR_STATS_SST;

static void test_chunking_and_threads_invariant(void ** state) {
    (void) state;
    const int whole[] = {T}, ones[] = {1}, odd[] = {3, 127, 1, 200, 64, 9};
    uint64_t s = seed ^ 0x5555;
    int rnd[16];
    for (int i = 0; i < 16; i++) rnd[i] = 1 + (int) (splitmix_next(&s) % 150);
    size_t n0, n;
    uint8_t * ref = full_run(K4, 1, whole, 1, &n0);
    const int * pats[] = {ones, odd, rnd, whole};
    const int npat[] = {1, 6, 16, 1};
    for (int p = 0; p < 4; p++) {
        for (int th = 1; th <= 3; th++) {
            uint8_t * b = full_run(K4, th, pats[p], npat[p], &n);
            assert_int_equal(n, n0);
            assert_memory_equal(b, ref, n); // the whole state, bit for bit
            free(b);
        }
    }
    free(ref);
}

// Layer-major order (layer 0: pass 1, end, pass 2, end; then layer 1 ...) gives
// the whole-pass state bit for bit; mixing phases is refused where it must be.
static void test_layer_major_equals_pass_major(void ** state) {
    (void) state;
    const int sizes[] = {5, 130, 64, 1};
    const uint32_t kinds[] = {K4, OSCAR_STATS_QQT | OSCAR_STATS_SST | OSCAR_STATS_VATT};
    for (int ki = 0; ki < 2; ki++) {
        size_t n0, n;
        uint8_t * ref = full_run(kinds[ki], 2, sizes, 4, &n0);
        struct oscar_stats * s = make(kinds[ki], 2);
        for (int l = 0; l < L; l++) {
            for (int pass = 1; pass <= 2; pass++) {
                for (int t = 0, i = 0; t < T; i++) {
                    int m = sizes[i % 4] < T - t ? sizes[i % 4] : T - t;
                    int32_t starts[2] = {0, m};
                    add(s, l, t, m, 1, starts);
                    t += m;
                }
                if (l == 0 && pass == 1) {
                    // layer 1 has not started: a whole-pass end is refused, the layer's own end works
                    assert_int_equal(oscar_stats_end_pass(s), OSCAR_ERR_INVALID);
                }
                assert_int_equal(oscar_stats_end_layer_pass(s, l), OSCAR_OK);
                assert_int_equal(oscar_stats_layer_phase(s, l), pass == 1 ? 2 : 3);
            }
            assert_int_equal(oscar_stats_phase(s), l == L - 1 ? 3 : 1);
            if (l == 0) {   // a checkpoint between layers round-trips the mixed phases
                size_t cn;
                uint8_t * ck = snapshot(s, &cn);
                struct oscar_stats * r = NULL;
                assert_int_equal(oscar_stats_load(ck, cn, 2, T, &r), OSCAR_OK);
                assert_int_equal(oscar_stats_layer_phase(r, 0), 3);
                assert_int_equal(oscar_stats_layer_phase(r, 1), 1);
                oscar_stats_free(s);
                s = r;
                free(ck);
            }
        }
        uint8_t * b = snapshot(s, &n);
        assert_int_equal(n, n0);
        assert_memory_equal(b, ref, n);
        free(b);
        free(ref);
        oscar_stats_free(s);
    }
}

static void test_vatt_sequence_grouping_invariant(void ** state) {
    (void) state;
    // sequences of lengths 50, 120, 30, 200, 300 fed one per call or all in one call
    const int lens[] = {50, 120, 30, 200, 300};
    struct oscar_stats * a = make(OSCAR_STATS_VATT, 1), * b = make(OSCAR_STATS_VATT, 2);
    feed(a, 0, T, lens, 5);
    int32_t starts[6] = {0};
    for (int i = 0; i < 5; i++) starts[i + 1] = starts[i] + lens[i];
    for (int l = 0; l < L; l++) add(b, l, 0, T, 5, starts);
    assert_int_equal(oscar_stats_end_pass(a), OSCAR_OK);
    assert_int_equal(oscar_stats_end_pass(b), OSCAR_OK);
    size_t na, nb;
    uint8_t * ba = snapshot(a, &na), * bb = snapshot(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(ba, bb, na);
    // the weights of one sequence sum to the number of query heads times its length
    // minus nothing: Σ_t p_{i,t} = 1 per row, and Σ p² ≤ Σ p, so 0 < Σ_t w ≤ g·n per head
    struct oscar_stats_layer_info info;
    assert_int_equal(oscar_stats_layer_info(a, 0, &info), OSCAR_OK);
    assert_true(info.vatt_weight_sum > 0.0 && info.vatt_weight_sum <= (double) HQ * T);
    free(ba); free(bb);
    oscar_stats_free(a); oscar_stats_free(b);
}

static void test_checkpoint_resume(void ** state) {
    (void) state;
    const int sizes[] = {37, 100, 5};
    size_t n_ref;
    uint8_t * ref = full_run(K4, 2, sizes, 3, &n_ref);
    const int cuts[][2] = {{1, 333}, {2, 401}, {1, 128}}; // (pass, token) where the run is interrupted
    for (int c = 0; c < 3; c++) {
        struct oscar_stats * s = make(K4, 2);
        const int pass = cuts[c][0], cut = cuts[c][1];
        feed(s, 0, pass == 1 ? cut : T, sizes, 3);
        if (pass == 2) {
            assert_int_equal(oscar_stats_end_pass(s), OSCAR_OK);
            feed(s, 0, cut, sizes, 3);
        }
        size_t n;
        uint8_t * ck = snapshot(s, &n);
        oscar_stats_free(s);
        struct oscar_stats * r = NULL;
        assert_int_equal(oscar_stats_load(ck, n, 1, 0, &r), OSCAR_OK);
        size_t n2;
        uint8_t * ck2 = snapshot(r, &n2); // round trip is bit-identical
        assert_int_equal(n, n2);
        assert_memory_equal(ck, ck2, n);
        // continue where it stopped; chunk boundaries after the cut differ from the reference
        const int rest[] = {77};
        feed(r, cut, T, rest, 1); // the rest of the interrupted pass
        assert_int_equal(oscar_stats_end_pass(r), OSCAR_OK);
        if (pass == 1) {
            feed(r, 0, T, rest, 1);
            assert_int_equal(oscar_stats_end_pass(r), OSCAR_OK);
        }
        free(ck2);
        ck2 = snapshot(r, &n2);
        assert_int_equal(n2, n_ref);
        assert_memory_equal(ck2, ref, n_ref);
        free(ck); free(ck2);
        oscar_stats_free(r);
    }
    free(ref);
}

static void test_checkpoint_rejects_corruption(void ** state) {
    (void) state;
    struct oscar_stats * s = make(K4 | OSCAR_STATS_VATT, 1);
    const int sizes[] = {60};
    feed(s, 0, 300, sizes, 1);
    size_t n;
    uint8_t * b = snapshot(s, &n);
    oscar_stats_free(s);
    struct oscar_stats * r = NULL;
    // every single-byte flip (sampled) is caught by a size, field or CRC check
    uint64_t st = seed ^ 0xABCD;
    for (int i = 0; i < 200; i++) {
        const size_t at = i < 96 ? (size_t) i : 96 + (size_t) (splitmix_next(&st) % (n - 96));
        b[at] ^= (uint8_t) (1u << (splitmix_next(&st) % 8));
        enum oscar_status e = oscar_stats_load(b, n, 1, 0, &r);
        assert_true(e == OSCAR_ERR_FORMAT || e == OSCAR_ERR_UNSUPPORTED);
        assert_null(r);
        free(b); // start the next flip from a fresh, intact snapshot
        s = make(K4 | OSCAR_STATS_VATT, 1);
        feed(s, 0, 300, sizes, 1);
        b = snapshot(s, &n);
        oscar_stats_free(s);
    }
    // a nonzero reserved byte (offset 70: reserved[2], after the score scale at 64) under a valid header CRC is refused: it could not be written back
    b[70] = 1;
    memset(b + 60, 0, 4);
    const uint32_t hcrc = (uint32_t) crc32_z(0, b, 96);
    memcpy(b + 60, &hcrc, 4);
    assert_int_equal(oscar_stats_load(b, n, 1, 0, &r), OSCAR_ERR_FORMAT);
    assert_non_null(strstr(oscar_last_error(), "reserved header byte 2"));
    free(b);
    s = make(K4 | OSCAR_STATS_VATT, 1);
    feed(s, 0, 300, sizes, 1);
    b = snapshot(s, &n);
    oscar_stats_free(s);
    assert_int_equal(oscar_stats_load(b, n - 1, 1, 0, &r), OSCAR_ERR_FORMAT); // truncated
    assert_int_equal(oscar_stats_load(b, 10, 1, 0, &r), OSCAR_ERR_FORMAT);
    assert_int_equal(oscar_stats_load(NULL, 0, 1, 0, &r), OSCAR_ERR_FORMAT);
    assert_non_null(strstr(oscar_last_error(), "stats checkpoint"));
    assert_int_equal(oscar_stats_load(b, n, 1, 0, &r), OSCAR_OK); // the intact buffer still loads
    oscar_stats_free(r);
    free(b);
}

static void test_bad_input_leaves_state_unchanged(void ** state) {
    (void) state;
    struct oscar_stats * s = make(K4, 1);
    const int sizes[] = {90};
    feed(s, 0, 180, sizes, 1);
    size_t n0, n1;
    uint8_t * before = snapshot(s, &n0);
    const float keep = k[1][200][1][3];
    k[1][200][1][3] = NAN;
    struct oscar_stats_chunk c = {.layer = 1, .n_tokens = 50, .q = &q[1][180][0][0], .k = &k[1][180][0][0],
                                  .v = &v[1][180][0][0]};
    assert_int_equal(oscar_stats_add(s, &c), OSCAR_ERR_NUMERIC);
    assert_non_null(strstr(oscar_last_error(), "layer 1"));
    k[1][200][1][3] = keep;
    c.layer = L;
    assert_int_equal(oscar_stats_add(s, &c), OSCAR_ERR_INVALID);
    c.layer = 0;
    c.k = NULL;
    assert_int_equal(oscar_stats_add(s, &c), OSCAR_ERR_INVALID);
    uint8_t * after = snapshot(s, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    double m[D * D];
    assert_int_equal(oscar_stats_sigma(s, OSCAR_STATS_QQT, 0, -1, m), OSCAR_ERR_INVALID); // pass 1 not ended
    assert_int_equal(oscar_stats_end_pass(s), OSCAR_OK);
    assert_int_equal(oscar_stats_sigma(s, OSCAR_STATS_QQT, 0, -1, m), OSCAR_OK);
    assert_int_equal(oscar_stats_sigma(s, OSCAR_STATS_SST, 0, -1, m), OSCAR_ERR_INVALID); // pass 2 not ended
    feed(s, 0, 100, sizes, 1);
    assert_int_equal(oscar_stats_end_pass(s), OSCAR_ERR_INVALID); // 100 tokens in pass 2 vs 180
    assert_non_null(strstr(oscar_last_error(), "pass 2"));
    free(before); free(after);
    oscar_stats_free(s);

    struct oscar_stats_params p = oscar_stats_default_params();
    p.n_layer = 1; p.n_head = 6; p.n_head_kv = 4; p.head_dim = 8;
    struct oscar_stats * x = NULL;
    assert_int_equal(oscar_stats_init(&p, &x), OSCAR_ERR_INVALID); // 6 % 4 != 0
    p.n_head_kv = 2;
    p.kinds = OSCAR_STATS_SST;
    assert_int_equal(oscar_stats_init(&p, &x), OSCAR_ERR_INVALID); // sst needs qqt
    assert_null(x);
}

static void test_sst_zero_weights_no_nan(void ** state) {
    (void) state;
    // q = 0 makes A_h = 0, so every weight is 0: C_h = 0 / max(0, 1e-12) = 0, not NaN
    static float zq[T][HQ][D];
    struct oscar_stats_params p = oscar_stats_default_params();
    p.n_layer = 1; p.n_head = HQ; p.n_head_kv = HKV; p.head_dim = D; p.n_threads = 1;
    struct oscar_stats * s = NULL;
    assert_int_equal(oscar_stats_init(&p, &s), OSCAR_OK);
    struct oscar_stats_chunk c = {.layer = 0, .n_tokens = T, .q = &zq[0][0][0], .k = &k[0][0][0][0],
                                  .v = &v[0][0][0][0]};
    assert_int_equal(oscar_stats_add(s, &c), OSCAR_OK);
    assert_int_equal(oscar_stats_end_pass(s), OSCAR_OK);
    assert_int_equal(oscar_stats_add(s, &c), OSCAR_OK);
    assert_int_equal(oscar_stats_end_pass(s), OSCAR_OK);
    double m[D * D];
    assert_int_equal(oscar_stats_sigma(s, OSCAR_STATS_SST, 0, -1, m), OSCAR_OK);
    for (int i = 0; i < D * D; i++) assert_true(m[i] == 0.0);
    struct oscar_stats_layer_info info;
    assert_int_equal(oscar_stats_layer_info(s, 0, &info), OSCAR_OK);
    assert_true(info.n_tokens_pass1 == T && info.n_tokens_pass2 == T && info.n_negative_sst == 0);
    assert_true(info.sst_weight_sum == 0.0);
    oscar_stats_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunking_and_threads_invariant),
        cmocka_unit_test(test_layer_major_equals_pass_major),
        cmocka_unit_test(test_vatt_sequence_grouping_invariant),
        cmocka_unit_test(test_checkpoint_resume),
        cmocka_unit_test(test_checkpoint_rejects_corruption),
        cmocka_unit_test(test_bad_input_leaves_state_unchanged),
        cmocka_unit_test(test_sst_zero_weights_no_nan),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
