// test-stats-layer-sums.c - the whole-layer sums of a data-parallel CUDA pass
// (stats-partials.h: oscar_stats_layer_sums_get / _set, as dp-stats.c's sums
// exchange uses them): two accumulators stand for two ranks, each feeding half of
// every layer's tokens; "rank 0" takes the rank-order sum of both ranks' layer
// sums in its layer hook, both ranks weigh pass 2 with the group's pass-1 sums,
// and rank 0 must end with the one-process sums within fp64 rounding.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stats/stats-partials.h"
#include "stats/stats-sums.h"
#include "stats/stats.h"

enum { L = 2, HQ = 4, HKV = 2, D = 8, T = 512, H = 256, SEQ = 64 }; // H: rank 1 starts here; both ranks end
// on a 128-row block boundary, so every sum read before a pass end is flushed (the device pass has
// no pending rows)
static float q[L][T][HQ][D], k[L][T][HKV][D], v[L][T][HKV][D];

#include "test-splitmix.h"

static struct oscar_stats * make(void) {
    struct oscar_stats_params p = oscar_stats_default_params();
    p.n_layer = L, p.n_head = HQ, p.n_head_kv = HKV, p.head_dim = D, p.n_threads = 1, p.max_tokens = T;
    p.kinds = OSCAR_STATS_QQT | OSCAR_STATS_SST;
    struct oscar_stats * s = NULL;
    assert_int_equal(oscar_stats_init(&p, &s), OSCAR_OK);
    return s;
}

static void feed(struct oscar_stats * s, int l, int t0, int t1) {
    for (int t = t0; t < t1; t += SEQ) {
        const int n = t + SEQ < t1 ? SEQ : t1 - t;
        const int32_t starts[2] = {0, n};
        const struct oscar_stats_chunk c = {.layer = l, .n_tokens = n, .n_seq = 1, .seq_start = starts,
                                            .q = &q[l][t][0][0], .k = &k[l][t][0][0], .v = &v[l][t][0][0]};
        assert_int_equal(oscar_stats_add(s, &c), OSCAR_OK);
    }
}

// Rank 0's hook: its own layer sums plus rank 1's (got before), in rank order, become its sums.
struct pending { struct oscar_stats * other; double * mine, * theirs; };
static enum oscar_status hook(void * user, struct oscar_stats * s, int32_t layer, int32_t pass) {
    struct pending * p = user;
    const size_t n = oscar_stats_layer_sums_doubles(s, pass);
    oscar_stats_layer_sums_get(s, layer, p->mine);
    for (size_t e = 0; e < n; e++) p->mine[e] += p->theirs[e];
    return oscar_stats_layer_sums_set(s, layer, p->mine);
}

// Layer l's current-pass sums of src (fed by the block path) added to dst as the CUDA pass adds its
// device totals (oscar_stats_add_layer_sums): dst keeps partials, so only whole-layer sums reach it.
static void add_as_device(struct oscar_stats * dst, const struct oscar_stats * src, int l, int pass, double * buf) {
    oscar_stats_layer_sums_get(src, l, buf);
    const size_t n = (size_t) HKV * D * D;
    int64_t nneg[HKV];
    struct oscar_stats_sums x;
    memset(&x, 0, sizeof x);
    x.pass = pass, x.n_tokens = (int64_t) buf[pass == 1 ? n : n + 2 * HKV];
    if (pass == 1) x.qqt = buf;
    else {
        for (int h = 0; h < HKV; h++) nneg[h] = (int64_t) buf[n + HKV + h];
        x.sst = buf, x.sst_wsum = buf + n, x.sst_nneg = nneg;
    }
    assert_int_equal(oscar_stats_add_layer_sums(dst, l, &x), OSCAR_OK);
}

static void assert_close(const double * a, const double * b, size_t n, const char * what) {
    double big = 0, diff = 0;
    for (size_t e = 0; e < n; e++) big = fmax(big, fabs(a[e])), diff = fmax(diff, fabs(a[e] - b[e]));
    if (!(diff <= 1e-13 * big)) fail_msg("%s: max |diff| %g of max %g", what, diff, big);
}

static void test_two_ranks(void ** state) {
    (void) state;
    uint64_t sd = 5;
    for (size_t i = 0; i < sizeof q / sizeof(float); i++) ((float *) q)[i] = (float) splitmix_unif(&sd);
    for (size_t i = 0; i < sizeof k / sizeof(float); i++) ((float *) k)[i] = (float) splitmix_unif(&sd);
    for (size_t i = 0; i < sizeof v / sizeof(float); i++) ((float *) v)[i] = (float) splitmix_unif(&sd) - 0.5f;
    struct oscar_stats * ref = make(), * r0 = make(), * r1 = make(), * src0 = make();
    const size_t nmax = oscar_stats_layer_sums_doubles(ref, 1) > oscar_stats_layer_sums_doubles(ref, 2)
                            ? oscar_stats_layer_sums_doubles(ref, 1) : oscar_stats_layer_sums_doubles(ref, 2);
    double * a = calloc(nmax, sizeof(double)), * b = calloc(nmax, sizeof(double));
    struct pending p = {.other = r1, .mine = calloc(nmax, sizeof(double)), .theirs = calloc(nmax, sizeof(double))};
    assert_int_equal(oscar_stats_keep_partials(r0, hook, &p), OSCAR_OK);
    for (int l = 0; l < L; l++) {
        for (int pass = 1; pass <= 2; pass++) {
            feed(ref, l, 0, T), feed(src0, l, 0, H), feed(r1, l, H, T);
            add_as_device(r0, src0, l, pass, b);
            oscar_stats_layer_sums_get(r1, l, p.theirs);
            assert_int_equal(oscar_stats_end_layer_pass(r0, l), OSCAR_OK); // the hook adds rank 1's
            oscar_stats_layer_sums_get(ref, l, a);
            const size_t n = oscar_stats_layer_sums_doubles(ref, pass);
            if (pass == 1) { // rank 0 has advanced to pass 2; export reads its pass-1 sums
                oscar_stats_layer_export(r0, l, b);
                assert_close(a, b, n, "pass-1 sums");
                assert_int_equal((int) b[n - 1], T); // the group's token count
                assert_int_equal(oscar_stats_layer_import(r1, l, b), OSCAR_OK); // the broadcast
                assert_int_equal(oscar_stats_layer_import(src0, l, b), OSCAR_OK);
            } else {
                memcpy(b, p.mine, n * sizeof(double)); // what rank 0 set
                assert_close(a, b, n, "pass-2 sums");
                assert_int_equal((int) b[n - 1], T);
            }
            assert_int_equal(oscar_stats_end_layer_pass(ref, l), OSCAR_OK);
            assert_int_equal(oscar_stats_end_layer_pass(r1, l), OSCAR_OK);
            assert_int_equal(oscar_stats_end_layer_pass(src0, l), OSCAR_OK);
        }
    }
    free(a), free(b), free(p.mine), free(p.theirs);
    oscar_stats_free(ref), oscar_stats_free(r0), oscar_stats_free(r1), oscar_stats_free(src0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_two_ranks)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
