// test-stats-partials.c - data-parallel accumulation (stats-partials.h): three
// threads stand for three processes, each feeding a contiguous share of every
// layer's stream layer by layer; the layer hook moves their block partials to
// "rank 0", which replays them in order, and hands pass 1's sums back to the
// others. Rank 0 must end with the single-process state byte for byte when the
// shares start on block boundaries (its checkpoint bytes are compared), and
// within rounding when they do not.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats/stats-partials.h"
#include "stats/stats.h"

// T: the last rank's share (from token 512) is over 17 blocks of 128, so its kept parts outgrow the first
// allocation (16 parts) in both passes, whose parts differ in size
enum { L = 3, HQ = 4, HKV = 2, D = 8, T = 2700, R = 3, SEQ = 64 };
static float q[L][T][HQ][D], k[L][T][HKV][D], v[L][T][HKV][D];

#include "test-splitmix.h"

static int setup(void ** state) {
    (void) state;
    uint64_t s = 17;
    for (size_t i = 0; i < sizeof q / sizeof(float); i++) ((float *) q)[i] = (float) splitmix_unif(&s);
    for (size_t i = 0; i < sizeof k / sizeof(float); i++) ((float *) k)[i] = (float) splitmix_unif(&s) * 2.0f;
    for (size_t i = 0; i < sizeof v / sizeof(float); i++) ((float *) v)[i] = (float) splitmix_unif(&s) * 0.5f;
    return 0;
}

static struct oscar_stats * make(uint32_t kinds) {
    struct oscar_stats_params p = oscar_stats_default_params();
    p.n_layer = L, p.n_head = HQ, p.n_head_kv = HKV, p.head_dim = D, p.kinds = kinds, p.n_threads = 1;
    p.max_tokens = T;
    struct oscar_stats * s = NULL;
    assert_int_equal(oscar_stats_init(&p, &s), OSCAR_OK);
    return s;
}

// Tokens [t0, t1) of layer l in chunks of one SEQ-token sequence each (VATT needs whole sequences).
static void feed(struct oscar_stats * s, int l, int t0, int t1) {
    for (int t = t0; t < t1; t += SEQ) {
        const int n = t + SEQ < t1 ? SEQ : t1 - t;
        const int32_t starts[2] = {0, n};
        const struct oscar_stats_chunk c = {.layer = l, .n_tokens = n, .n_seq = 1, .seq_start = starts,
                                            .q = &q[l][t][0][0], .k = &k[l][t][0][0], .v = &v[l][t][0][0]};
        assert_int_equal(oscar_stats_add(s, &c), OSCAR_OK);
    }
}

// Layer-major, one process: the reference.
static struct oscar_stats * single(uint32_t kinds) {
    struct oscar_stats * s = make(kinds);
    for (int l = 0; l < L; l++) {
        feed(s, l, 0, T);
        assert_int_equal(oscar_stats_end_layer_pass(s, l), OSCAR_OK);
        if (oscar_stats_layer_phase(s, l) == 2) {
            feed(s, l, 0, T);
            assert_int_equal(oscar_stats_end_layer_pass(s, l), OSCAR_OK);
        }
    }
    return s;
}

struct group {
    pthread_barrier_t bar;
    uint32_t kinds;
    int bounds[R + 1];          // rank r feeds tokens [bounds[r], bounds[r + 1])
    const double * parts[R];
    size_t n_parts[R];
    double * exported;
    struct oscar_stats * s[R];
};
struct rank { struct group * g; int r; char err[512]; };

static enum oscar_status exchange(void * user, struct oscar_stats * s, int32_t layer, int32_t pass) {
    struct rank * me = user;
    struct group * g = me->g;
    g->parts[me->r] = oscar_stats_layer_parts(s, layer, &g->n_parts[me->r]);
    pthread_barrier_wait(&g->bar);
    enum oscar_status st = OSCAR_OK;
    if (me->r == 0) { // every rank's parts, in rank order (= token order)
        const size_t psz = oscar_stats_part_doubles(s, pass);
        size_t n = 0;
        for (int r = 0; r < R; r++) n += g->n_parts[r];
        double * all = malloc(n * psz * sizeof(double) + 1), * at = all;
        for (int r = 0; r < R; r++, at += g->n_parts[r - 1] * psz)
            memcpy(at, g->parts[r], g->n_parts[r] * psz * sizeof(double));
        st = oscar_stats_replay_parts(s, layer, all, n);
        free(all);
        if (pass == 1) oscar_stats_layer_export(s, layer, g->exported);
    }
    pthread_barrier_wait(&g->bar);
    if (pass == 1 && me->r != 0) st = oscar_stats_layer_import(s, layer, g->exported);
    pthread_barrier_wait(&g->bar); // rank 0 is done reading everyone's parts
    return st;
}

static void * run_rank(void * arg) {
    struct rank * me = arg;
    struct group * g = me->g;
    struct oscar_stats * s = g->s[me->r];
    const int t0 = g->bounds[me->r], t1 = g->bounds[me->r + 1];
    for (int l = 0; l < L; l++) {
        feed(s, l, t0, t1);
        if (oscar_stats_end_layer_pass(s, l) != OSCAR_OK) return snprintf(me->err, sizeof me->err, "%s", oscar_last_error()), me->err;
        if (oscar_stats_layer_phase(s, l) == 2) {
            feed(s, l, t0, t1);
            if (oscar_stats_end_layer_pass(s, l) != OSCAR_OK) return snprintf(me->err, sizeof me->err, "%s", oscar_last_error()), me->err;
        }
    }
    return NULL;
}

// Rank 0's accumulator after a data-parallel run with the given share boundaries.
static struct oscar_stats * parallel(uint32_t kinds, int b1, int b2, struct oscar_stats * others[R - 1]) {
    struct group g = {.kinds = kinds, .bounds = {0, b1, b2, T}};
    pthread_barrier_init(&g.bar, NULL, R);
    struct rank ranks[R];
    pthread_t th[R];
    for (int r = 0; r < R; r++) {
        g.s[r] = make(kinds);
        ranks[r] = (struct rank){.g = &g, .r = r};
        assert_int_equal(oscar_stats_keep_partials(g.s[r], exchange, &ranks[r]), OSCAR_OK);
    }
    g.exported = malloc(oscar_stats_export_doubles(g.s[0]) * sizeof(double));
    for (int r = 0; r < R; r++) pthread_create(&th[r], NULL, run_rank, &ranks[r]);
    for (int r = 0; r < R; r++) {
        void * err;
        pthread_join(th[r], &err);
        if (err) fail_msg("rank %d failed: %s", r, (const char *) err);
    }
    pthread_barrier_destroy(&g.bar);
    free(g.exported);
    for (int r = 1; r < R; r++) others[r - 1] = g.s[r];
    return g.s[0];
}

static void * save(const struct oscar_stats * s, size_t * n) {
    *n = oscar_stats_checkpoint_size(s);
    void * buf = malloc(*n);
    assert_int_equal(oscar_stats_save(s, buf, *n), OSCAR_OK);
    return buf;
}

static void check_identical(uint32_t kinds) {
    struct oscar_stats * ref = single(kinds), * others[R - 1];
    struct oscar_stats * dp = parallel(kinds, 2 * 128, 4 * 128, others); // shares start on block boundaries
    size_t na, nb;
    void * a = save(ref, &na), * b = save(dp, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    // every rank ended pass 1 with the group's sums (pass 2's weights used them)
    double * x = malloc(oscar_stats_export_doubles(ref) * sizeof(double));
    double * y = malloc(oscar_stats_export_doubles(ref) * sizeof(double));
    for (int r = 0; r < R - 1; r++) {
        for (int l = 0; l < L; l++) {
            oscar_stats_layer_export(ref, l, x), oscar_stats_layer_export(others[r], l, y);
            assert_memory_equal(x, y, oscar_stats_export_doubles(ref) * sizeof(double));
        }
        oscar_stats_free(others[r]);
    }
    free(x), free(y), free(a), free(b);
    oscar_stats_free(ref), oscar_stats_free(dp);
}

static void test_identical_qqt_sst(void ** state) { (void) state; check_identical(OSCAR_STATS_QQT | OSCAR_STATS_SST); }
static void test_identical_ktk_vtv_vatt(void ** state) {
    (void) state;
    check_identical(OSCAR_STATS_KTK | OSCAR_STATS_VTV | OSCAR_STATS_VATT);
}

// Shares off the block grid: other blocks, so only equal within rounding.
static void test_unaligned_close(void ** state) {
    (void) state;
    const uint32_t kinds = OSCAR_STATS_QQT | OSCAR_STATS_SST;
    struct oscar_stats * ref = single(kinds), * others[R - 1];
    struct oscar_stats * dp = parallel(kinds, 3 * SEQ, 7 * SEQ, others);
    double a[D * D], b[D * D];
    for (int l = 0; l < L; l++) {
        const enum oscar_stats_kind ks[] = {OSCAR_STATS_QQT, OSCAR_STATS_SST};
        for (int i = 0; i < 2; i++) {
            assert_int_equal(oscar_stats_sigma(ref, ks[i], l, -1, a), OSCAR_OK);
            assert_int_equal(oscar_stats_sigma(dp, ks[i], l, -1, b), OSCAR_OK);
            double num = 0, den = 0;
            for (int e = 0; e < D * D; e++) num += (a[e] - b[e]) * (a[e] - b[e]), den += a[e] * a[e];
            assert_true(sqrt(num / den) < 1e-13);
        }
    }
    for (int r = 0; r < R - 1; r++) oscar_stats_free(others[r]);
    oscar_stats_free(ref), oscar_stats_free(dp);
}

// Partials must be on before any token; a replayed part's row count is checked.
static void test_refusals(void ** state) {
    (void) state;
    struct oscar_stats * s = make(OSCAR_STATS_QQT);
    feed(s, 0, 0, SEQ);
    assert_int_equal(oscar_stats_keep_partials(s, NULL, NULL), OSCAR_ERR_INVALID);
    oscar_stats_free(s);
    s = make(OSCAR_STATS_QQT);
    const size_t psz = oscar_stats_part_doubles(s, 1);
    double * part = calloc(psz, sizeof(double));
    part[0] = 129; // more than a block
    assert_int_equal(oscar_stats_replay_parts(s, 0, part, 1), OSCAR_ERR_INVALID);
    free(part);
    oscar_stats_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identical_qqt_sst),
        cmocka_unit_test(test_identical_ktk_vtv_vatt),
        cmocka_unit_test(test_unaligned_close),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
