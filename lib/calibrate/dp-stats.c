// dp-stats.c - the layer hook of a data-parallel pass (dp.h): every rank's
// block partials of the layer to rank 0, replayed there in rank order; after
// pass 1 the group's sums back to every rank. One gather per layer and pass,
// and one broadcast of the pass-1 sums (L_kinds x Hkv x D x D doubles).
#include <stdlib.h>

#include "calibrate/dp.h"
#include "stats/stats-partials.h"
#include "stats/stats.h"

static _Thread_local int64_t bytes_sent, bytes_received; // this rank's (a thread under --ranks)

// After pass 1: rank 0's finished sums of the layer to every rank.
static enum oscar_status bcast_pass1(struct osc_dp * dp, struct oscar_stats * s, int32_t layer) {
    const size_t n = oscar_stats_export_doubles(s);
    double * sums = malloc(n * sizeof(double));
    if (!sums) return osc_error(OSCAR_ERR_NOMEM, "data-parallel exchange: out of memory for %zu sums", n);
    if (dp->rank == 0) oscar_stats_layer_export(s, layer, sums);
    enum oscar_status st = dp->ops->bcast(dp, sums, n * sizeof(double));
    if (dp->rank == 0) bytes_sent += (int64_t) (n * sizeof(double)) * (dp->size - 1);
    else bytes_received += (int64_t) (n * sizeof(double));
    if (st == OSCAR_OK && dp->rank) st = oscar_stats_layer_import(s, layer, sums);
    free(sums);
    return st;
}

static enum oscar_status exchange(void * user, struct oscar_stats * s, int32_t layer, int32_t pass) {
    struct osc_dp * dp = user;
    size_t n_parts = 0;
    const size_t psz = oscar_stats_part_doubles(s, pass) * sizeof(double);
    const double * parts = oscar_stats_layer_parts(s, layer, &n_parts);
    size_t * counts = calloc((size_t) dp->size, sizeof(size_t));
    if (!counts) return osc_error(OSCAR_ERR_NOMEM, "data-parallel exchange: out of memory");
    void * all = NULL;
    enum oscar_status st = dp->ops->gather(dp, parts, n_parts * psz, &all, counts);
    if (dp->rank) bytes_sent += (int64_t) (n_parts * psz);
    size_t total = 0;
    for (int32_t r = 1; dp->rank == 0 && r < dp->size; r++) bytes_received += (int64_t) counts[r];
    for (int32_t r = 0; dp->rank == 0 && r < dp->size; r++) total += counts[r];
    if (st == OSCAR_OK && dp->rank == 0) st = oscar_stats_replay_parts(s, layer, all, total / psz);
    free(all), free(counts);
    if (st != OSCAR_OK || pass != 1) return st;
    return bcast_pass1(dp, s, layer);
}

enum oscar_status osc_dp_stats_attach(struct osc_dp * dp, struct oscar_stats * s) {
    return oscar_stats_keep_partials(s, exchange, dp);
}

// The CUDA pass: every rank's whole-layer device totals to rank 0, added there in rank order
// (rank 0's own first), so a fixed rank count gives the same sums every run.
static enum oscar_status sums_exchange(void * user, struct oscar_stats * s, int32_t layer, int32_t pass) {
    struct osc_dp * dp = user;
    const size_t n = oscar_stats_layer_sums_doubles(s, pass), nb = n * sizeof(double);
    double * mine = malloc(nb);
    size_t * counts = calloc((size_t) dp->size, sizeof(size_t));
    if (!mine || !counts) return free(mine), free(counts), osc_error(OSCAR_ERR_NOMEM, "data-parallel exchange: out of memory");
    oscar_stats_layer_sums_get(s, layer, mine);
    double * all = NULL;
    enum oscar_status st = dp->ops->gather(dp, mine, nb, (void **) &all, counts);
    if (dp->rank) bytes_sent += (int64_t) nb;
    for (int32_t r = 1; st == OSCAR_OK && dp->rank == 0 && r < dp->size; r++) {
        bytes_received += (int64_t) counts[r];
        if (counts[r] != nb)
            st = osc_error(OSCAR_ERR_INVALID, "data-parallel exchange: layer %d: rank %d sent %zu bytes of sums, "
                           "%zu expected", (int) layer, (int) r, counts[r], nb);
        for (size_t e = 0; st == OSCAR_OK && e < n; e++) all[e] += all[(size_t) r * n + e];
    }
    if (st == OSCAR_OK && dp->rank == 0) st = oscar_stats_layer_sums_set(s, layer, all);
    free(all), free(counts), free(mine);
    if (st != OSCAR_OK || pass != 1) return st;
    return bcast_pass1(dp, s, layer);
}

enum oscar_status osc_dp_stats_attach_sums(struct osc_dp * dp, struct oscar_stats * s) {
    return oscar_stats_keep_partials(s, sums_exchange, dp);
}

void osc_dp_stats_bytes(int64_t * sent, int64_t * received) { *sent = bytes_sent, *received = bytes_received; }
