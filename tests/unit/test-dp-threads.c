// test-dp-threads.c - the in-process group of oscar-calibrate --ranks N
// (lib/calibrate/dp-threads.c), each rank a real thread: gather puts every
// rank's bytes on rank 0 in rank order with their counts (ranks of different
// sizes, an empty one), broadcast gives every rank rank 0's bytes and refuses
// a rank expecting another size (naming it) without hanging the others,
// scatter hands each rank its part of rank 0's buffer in rank order, many
// collectives in a row keep their order, and osc_dp_gather_shares over the
// group places shares as over MPI. A one-rank group works alone.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/dp.h"
#include "util/error.h"

enum { MAX_RANKS = 5 };

struct rank_job {
    struct osc_dp * dp;
    int fails;                  // checks that failed on this rank
    enum oscar_status odd_bcast; // the broadcast with a wrong size on rank 1 (others: OK)
};

#define CHECK(cond) (job->fails += !(cond))

// Rank r's gather payload: r + 1 bytes of value 10·r + i (rank 2 sends none).
static size_t payload(int32_t r, unsigned char * out) {
    if (r == 2) return 0;
    for (int32_t i = 0; i <= r; i++) out[i] = (unsigned char) (10 * r + i);
    return (size_t) r + 1;
}

static void * rank_main(void * arg) {
    struct rank_job * job = arg;
    struct osc_dp * dp = job->dp;
    const int32_t me = dp->rank, P = dp->size;
    // gather, in rank order with counts
    unsigned char mine[MAX_RANKS + 1] = {0};
    size_t counts[MAX_RANKS] = {0};
    void * all = NULL;
    const size_t n_mine = payload(me, mine);
    CHECK(dp->ops->gather(dp, mine, n_mine, &all, counts) == OSCAR_OK);
    if (me == 0) {
        const unsigned char * at = all;
        for (int32_t r = 0; r < P; r++) {
            unsigned char want[MAX_RANKS + 1] = {0};
            const size_t n = payload(r, want);
            CHECK(counts[r] == n);
            CHECK(memcmp(at, want, n) == 0);
            at += n;
        }
    } else {
        CHECK(all == NULL);
    }
    free(all);
    // broadcast: rank 0's bytes everywhere
    double x[4] = {0};
    if (me == 0) x[0] = 1.5, x[1] = -2.0, x[2] = 1e300, x[3] = 3.0;
    CHECK(dp->ops->bcast(dp, x, sizeof x) == OSCAR_OK);
    CHECK(x[0] == 1.5 && x[1] == -2.0 && x[2] == 1e300 && x[3] == 3.0);
    // a rank expecting another size gets an error naming it; the group goes on
    double y[3] = {7, 8, 9};
    job->odd_bcast = dp->ops->bcast(dp, y, me == 1 ? 2 * sizeof(double) : sizeof y);
    // scatter: rank r gets 2 + r ints of rank 0's buffer, in rank order
    int32_t src[64], got[MAX_RANKS + 2] = {0};
    size_t sc[MAX_RANKS];
    for (int32_t i = 0; i < 64; i++) src[i] = 100 + i;
    for (int32_t r = 0; r < P; r++) sc[r] = (size_t) (2 + r) * sizeof(int32_t);
    CHECK(dp->ops->scatter(dp, me == 0 ? src : NULL, me == 0 ? sc : NULL, got, (size_t) (2 + me) * sizeof(int32_t)) ==
          OSCAR_OK);
    int32_t first = 0;
    for (int32_t r = 0; r < me; r++) first += 2 + r;
    for (int32_t i = 0; i < 2 + me; i++) CHECK(got[i] == 100 + first + i);
    // many collectives in a row keep their order
    for (int32_t round = 0; round < 200; round++) {
        int32_t v = me == 0 ? round : -1;
        CHECK(dp->ops->bcast(dp, &v, sizeof v) == OSCAR_OK && v == round);
    }
    // shares of 7 items of 2 doubles, placed on rank 0 at their items
    int64_t b0, b1;
    osc_dp_share(dp, me, 7, &b0, &b1);
    double share[14], whole[14] = {0};
    for (int64_t i = b0; i < b1; i++) share[2 * (i - b0)] = (double) i, share[2 * (i - b0) + 1] = -(double) i;
    CHECK(osc_dp_gather_shares(dp, 7, 2 * sizeof(double), share, me == 0 ? whole : NULL) == OSCAR_OK);
    for (int64_t i = 0; me == 0 && i < 7; i++) CHECK(whole[2 * i] == (double) i && whole[2 * i + 1] == -(double) i);
    osc_dp_close(dp);
    return NULL;
}

static void run_group(int32_t n) {
    struct osc_dp ** dps = NULL;
    assert_int_equal(osc_dp_open_threads(n, &dps), OSCAR_OK);
    struct rank_job jobs[MAX_RANKS];
    pthread_t th[MAX_RANKS];
    for (int32_t r = 0; r < n; r++) {
        jobs[r] = (struct rank_job){.dp = dps[r]};
        assert_int_equal(dps[r]->rank, r);
        assert_int_equal(dps[r]->size, n);
        assert_string_equal(dps[r]->engine, "threads");
    }
    for (int32_t r = 0; r < n; r++) assert_int_equal(pthread_create(&th[r], NULL, rank_main, &jobs[r]), 0);
    for (int32_t r = 0; r < n; r++) pthread_join(th[r], NULL);
    for (int32_t r = 0; r < n; r++) {
        assert_int_equal(jobs[r].fails, 0);
        assert_int_equal(jobs[r].odd_bcast, r == 1 ? OSCAR_ERR_INVALID : OSCAR_OK);
    }
}

static void test_one_rank(void ** state) {
    (void) state;
    run_group(1);
}

static void test_three_ranks(void ** state) {
    (void) state;
    run_group(3);
}

static void test_five_ranks(void ** state) {
    (void) state;
    run_group(5);
}

static void test_refuses_no_ranks(void ** state) {
    (void) state;
    struct osc_dp ** dps = (struct osc_dp **) (void *) &dps;
    assert_int_equal(osc_dp_open_threads(0, &dps), OSCAR_ERR_INVALID);
    assert_null(dps);
    assert_non_null(strstr(oscar_last_error(), "--ranks 0"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_rank),
        cmocka_unit_test(test_three_ranks),
        cmocka_unit_test(test_five_ranks),
        cmocka_unit_test(test_refuses_no_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
