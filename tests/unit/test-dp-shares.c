// test-dp-shares.c - the partition and combination of a data-parallel split
// (lib/calibrate/dp.c): osc_dp_share cuts n items into contiguous shares in
// rank order covering [0, n) for every rank count (also more ranks than
// items), and osc_dp_gather_shares puts each rank's share at its items' place
// on rank 0, refuses a share of the wrong size naming the rank, and leaves
// other ranks' output alone; osc_dp_scatter_shares hands every rank its share
// of rank 0's items (the counts it gives the engine are the shares, back to
// back). The group is a fake engine: its gather hands rank 0 what ranks
// 1 .. size-1 would send (their items numbered by index); its scatter keeps
// the counts and gives the calling rank its bytes from the root's buffer.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "calibrate/dp.h"
#include "util/error.h"

enum { ITEM = 3 };   // doubles per item

struct fake {
    struct osc_dp dp;
    int64_t n;
    int32_t short_rank;   // this rank sends one item fewer (-1: none)
};

// Item i holds i, i + 0.25, i + 0.5.
static void fill(double * out, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++)
        for (int k = 0; k < ITEM; k++) out[(i - i0) * ITEM + k] = (double) i + 0.25 * k;
}

static enum oscar_status fake_gather(struct osc_dp * dp, const void * send, size_t n, void ** recv, size_t * counts) {
    struct fake * f = (struct fake *) dp;
    *recv = NULL;
    if (dp->rank != 0) return OSCAR_OK;
    size_t total = n, off = n;
    counts[0] = n;
    for (int32_t r = 1; r < dp->size; r++) {
        int64_t b0, b1;
        osc_dp_share(dp, r, f->n, &b0, &b1);
        if (r == f->short_rank && b1 > b0) b1--;
        counts[r] = (size_t) (b1 - b0) * ITEM * sizeof(double), total += counts[r];
    }
    char * buf = malloc(total + 1);
    memcpy(buf, send, n);
    for (int32_t r = 1; r < dp->size; r++) {
        int64_t b0, b1;
        osc_dp_share(dp, r, f->n, &b0, &b1);
        fill((double *) (buf + off), b0, b0 + (int64_t) (counts[r] / (ITEM * sizeof(double))));
        off += counts[r];
    }
    *recv = buf;
    return OSCAR_OK;
}

static size_t scatter_counts[16];

// As an engine would: rank r's bytes are counts[r] at the sum of counts[0 .. r-1]; the fake reads
// them from the root's buffer whichever rank calls (a real engine gives non-root ranks no send).
static const void * scatter_root;
static enum oscar_status fake_scatter(struct osc_dp * dp, const void * send, const size_t * counts, void * recv,
                                      size_t n) {
    if (dp->rank == 0) {
        scatter_root = send;
        memcpy(scatter_counts, counts, (size_t) dp->size * sizeof(size_t));
    }
    size_t off = 0;
    for (int32_t r = 0; r < dp->rank; r++) off += scatter_counts[r];
    if (scatter_counts[dp->rank] != n) return osc_error(OSCAR_ERR_IO, "scatter: rank %d expects %zu bytes, gets %zu",
                                                        (int) dp->rank, n, scatter_counts[dp->rank]);
    if (n) memcpy(recv, (const char *) scatter_root + off, n);
    return OSCAR_OK;
}

static const struct osc_dp_ops fake_ops = {.gather = fake_gather, .scatter = fake_scatter};

static void test_share_covers(void ** state) {
    (void) state;
    for (int32_t size = 1; size <= 9; size++)
        for (int64_t n = 0; n <= 23; n++) {
            struct osc_dp dp = {.rank = 0, .size = size};
            int64_t prev = 0;
            for (int32_t r = 0; r < size; r++) {
                int64_t b0, b1;
                osc_dp_share(&dp, r, n, &b0, &b1);
                assert_true(b0 == prev && b1 >= b0 && b1 - b0 <= n / size + 1);
                prev = b1;
            }
            assert_true(prev == n);
        }
}

static void test_gather_places(void ** state) {
    (void) state;
    for (int32_t size = 1; size <= 5; size++)
        for (int64_t n = 0; n <= 12; n++) {
            struct fake f = {.dp = {.rank = 0, .size = size, .engine = "fake", .ops = &fake_ops}, .n = n,
                             .short_rank = -1};
            int64_t b0, b1;
            osc_dp_share(&f.dp, 0, n, &b0, &b1);
            double mine[13 * ITEM], all[13 * ITEM], want[13 * ITEM];
            fill(mine, b0, b1), fill(want, 0, n);
            memset(all, 0xff, sizeof all);
            assert_int_equal(osc_dp_gather_shares(&f.dp, n, ITEM * sizeof(double), mine, all), OSCAR_OK);
            if (n) assert_memory_equal(all, want, (size_t) n * ITEM * sizeof(double));
        }
}

static void test_gather_refuses_and_others(void ** state) {
    (void) state;
    struct fake f = {.dp = {.rank = 0, .size = 3, .engine = "fake", .ops = &fake_ops}, .n = 9, .short_rank = 2};
    double mine[3 * ITEM], all[9 * ITEM];
    fill(mine, 0, 3);
    assert_int_equal(osc_dp_gather_shares(&f.dp, 9, ITEM * sizeof(double), mine, all), OSCAR_ERR_IO);
    assert_non_null(strstr(oscar_last_error(), "rank 2"));
    // a rank other than 0 sends and leaves its output untouched
    f.dp.rank = 1, f.short_rank = -1;
    memset(all, 0x5a, sizeof all);
    double before[9 * ITEM];
    memcpy(before, all, sizeof all);
    fill(mine, 3, 6);
    assert_int_equal(osc_dp_gather_shares(&f.dp, 9, ITEM * sizeof(double), mine, all), OSCAR_OK);
    assert_memory_equal(all, before, sizeof all);
}

// Every rank of every size receives exactly its share's items, rank 0 first (it sets the counts).
static void test_scatter_shares(void ** state) {
    (void) state;
    for (int32_t size = 1; size <= 5; size++)
        for (int64_t n = 0; n <= 12; n++) {
            double all[13 * ITEM], mine[13 * ITEM], want[13 * ITEM];
            fill(all, 0, n);
            for (int32_t r = 0; r < size; r++) {
                struct fake f = {.dp = {.rank = r, .size = size, .engine = "fake", .ops = &fake_ops}, .n = n};
                int64_t b0, b1;
                osc_dp_share(&f.dp, r, n, &b0, &b1);
                memset(mine, 0xff, sizeof mine);
                assert_int_equal(osc_dp_scatter_shares(&f.dp, n, ITEM * sizeof(double), r ? NULL : all, mine),
                                 OSCAR_OK);
                assert_int_equal(scatter_counts[r], (size_t) (b1 - b0) * ITEM * sizeof(double));
                fill(want, b0, b1);
                if (b1 > b0) assert_memory_equal(mine, want, (size_t) (b1 - b0) * ITEM * sizeof(double));
            }
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_share_covers), cmocka_unit_test(test_gather_places),
                                       cmocka_unit_test(test_gather_refuses_and_others),
                                       cmocka_unit_test(test_scatter_shares)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
