// optr-route.c - OptR's training rows routed by KV head to the ranks that refine
// them (contract in optr-route.h). Placement only: every row reaches its rank
// with its bits, at its single-process index.
#include <stdlib.h>
#include <string.h>

#include "calibrate/finish-split.h"
#include "calibrate/optr-route.h"

enum oscar_status osc_optr_parts(const int64_t * rank_rows, int32_t size, int64_t n_rows, int64_t * start) {
    int64_t at = 0;
    for (int32_t k = 0; k < size; k++) {
        start[k] = at < n_rows ? at : n_rows;
        at += rank_rows[k];
    }
    start[size] = n_rows;
    if (at < n_rows)
        return osc_error(OSCAR_ERR_INVALID, "optr: the %d ranks hold %lld calibration rows, OptR trains on %lld",
                         (int) size, (long long) at, (long long) n_rows);
    return OSCAR_OK;
}

void osc_optr_pack_heads(const float * rows, int64_t n, int32_t heads, int32_t h0, int32_t nh, int32_t D,
                         float * out) {
    const size_t w = (size_t) nh * (size_t) D, stride = (size_t) heads * (size_t) D;
    for (int64_t t = 0; t < n; t++) memcpy(out + (size_t) t * w, rows + (size_t) t * stride + (size_t) h0 * D, w * sizeof(float));
}

static int32_t group(const struct osc_optr_heads * hs) { return hs->n_head / hs->n_head_kv; }

size_t osc_optr_q_width(const struct osc_optr_heads * hs) {
    return (size_t) hs->nh * (size_t) group(hs) * (size_t) hs->head_dim;
}

size_t osc_optr_kv_width(const struct osc_optr_heads * hs) { return (size_t) hs->nh * (size_t) hs->head_dim; }

size_t osc_optr_part_bytes(const struct osc_optr_heads * hs, int64_t m) {
    return (size_t) m * (osc_optr_q_width(hs) + 2 * osc_optr_kv_width(hs)) * sizeof(float);
}

void osc_optr_pack_part(const struct osc_optr_heads * hs, int64_t m, const float * q, const float * k, const float * v,
                        void * msg) {
    const int32_t g = group(hs), D = hs->head_dim;
    float * out = msg;
    osc_optr_pack_heads(q, m, hs->n_head, hs->h0 * g, hs->nh * g, D, out);
    out += (size_t) m * osc_optr_q_width(hs);
    osc_optr_pack_heads(k, m, hs->n_head_kv, hs->h0, hs->nh, D, out);
    out += (size_t) m * osc_optr_kv_width(hs);
    osc_optr_pack_heads(v, m, hs->n_head_kv, hs->h0, hs->nh, D, out);
}

void osc_optr_unpack_part(const struct osc_optr_heads * hs, int64_t r0, int64_t m, const void * msg, float * q,
                          float * k, float * v) {
    const size_t qw = osc_optr_q_width(hs), kw = osc_optr_kv_width(hs), n = (size_t) m;
    const float * in = msg;
    memcpy(q + (size_t) r0 * qw, in, n * qw * sizeof(float));
    memcpy(k + (size_t) r0 * kw, in + n * qw, n * kw * sizeof(float));
    memcpy(v + (size_t) r0 * kw, in + n * (qw + kw), n * kw * sizeof(float));
}

void osc_optr_routed_free(struct osc_optr_routed * r) {
    free(r->owned);
    memset(r, 0, sizeof *r);
}

// Rank d's heads.
static struct osc_optr_heads heads_of(const struct osc_dp * dp, const struct osc_optr_heads * hs, int32_t d) {
    struct osc_optr_heads h = *hs;
    int64_t a, b;
    osc_dp_share(dp, d, hs->n_head_kv, &a, &b);
    h.h0 = (int32_t) a, h.nh = (int32_t) (b - a);
    return h;
}

// The parts of every rank but d, back to back in rank order: their total bytes.
static size_t others_bytes(const struct osc_dp * dp, const int64_t * start, const struct osc_optr_heads * hd,
                           int32_t d) {
    size_t n = 0;
    for (int32_t k = 0; k < dp->size; k++)
        if (k != d) n += osc_optr_part_bytes(hd, start[k + 1] - start[k]);
    return n;
}

// Where the routed rows go: q [n_rows, q width], k, v [n_rows, kv width].
struct dest {
    float * q, * k, * v;
};

// Those parts (msg) into d's rows.
static void unpack_others(const struct osc_dp * dp, const int64_t * start, const struct osc_optr_heads * hd,
                          int32_t d, const char * msg, const struct dest * out) {
    for (int32_t k = 0; k < dp->size; k++) {
        if (k == d) continue;
        const int64_t m = start[k + 1] - start[k];
        osc_optr_unpack_part(hd, start[k], m, msg, out->q, out->k, out->v);
        msg += osc_optr_part_bytes(hd, m);
    }
}

// Rank d's heads of every other rank's part, through rank 0 (gather, then scatter unless d is 0).
static enum oscar_status route_to(struct osc_dp * dp, const int64_t * start, const struct osc_optr_source * mine,
                                  const struct osc_optr_heads * hs, int32_t d, const struct dest * out) {
    const struct osc_optr_heads hd = heads_of(dp, hs, d);
    const int32_t me = dp->rank;
    const int64_t m = me == d ? 0 : start[me + 1] - start[me], local = start[me] - mine->row0;
    const size_t mine_bytes = osc_optr_part_bytes(&hd, m), total = others_bytes(dp, start, &hd, d);
    char * msg = malloc(mine_bytes + 1), * got = NULL, * fwd = NULL;
    size_t * counts = calloc((size_t) dp->size, sizeof(size_t));
    enum oscar_status st = msg && counts ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "optr rows: out of memory");
    const size_t qs = (size_t) hs->n_head * hs->head_dim, ks = (size_t) hs->n_head_kv * hs->head_dim;
    if (st == OSCAR_OK && m > 0)
        osc_optr_pack_part(&hd, m, mine->q + (size_t) local * qs, mine->k + (size_t) local * ks,
                           mine->v + (size_t) local * ks, msg);
    if (st == OSCAR_OK) st = osc_calib_gather(dp, OSC_SPLIT_OPTR, msg, mine_bytes, (void **) &got, counts);
    for (int32_t k = 0; st == OSCAR_OK && me == 0 && k < dp->size; k++) {
        const size_t want = k == d ? 0 : osc_optr_part_bytes(&hd, start[k + 1] - start[k]);
        if (counts[k] != want)
            st = osc_error(OSCAR_ERR_IO, "optr rows: rank %d sent %zu bytes of KV heads %d-%d, expected %zu", (int) k,
                           counts[k], (int) hd.h0, (int) (hd.h0 + hd.nh - 1), want);
    }
    if (st == OSCAR_OK && d == 0 && me == 0) unpack_others(dp, start, &hd, d, got, out);
    if (st == OSCAR_OK && d != 0) {   // rank 0 passes them on to d
        for (int32_t k = 0; k < dp->size; k++) counts[k] = k == d ? total : 0;
        if (me == d && !(fwd = malloc(total + 1))) st = osc_error(OSCAR_ERR_NOMEM, "optr rows: out of memory");
        if (st == OSCAR_OK) st = osc_calib_scatter(dp, OSC_SPLIT_OPTR, got, counts, fwd, me == d ? total : 0);
        if (st == OSCAR_OK && me == d) unpack_others(dp, start, &hd, d, fwd, out);
    }
    free(msg), free(got), free(fwd), free(counts);
    return st;
}

enum oscar_status osc_optr_route(struct osc_dp * dp, const int64_t * start, const struct osc_optr_source * mine,
                                 const struct osc_optr_heads * hs, struct osc_optr_routed * out) {
    memset(out, 0, sizeof *out);
    const int32_t me = dp->rank;
    const int64_t n_rows = start[dp->size], r0 = start[me], r1 = start[me + 1];
    if (r1 > r0 && (r0 < mine->row0 || r1 > mine->row0 + mine->n))   // an empty part is held anywhere
        return osc_error(OSCAR_ERR_INVALID, "optr rows: rank %d holds rows %lld-%lld, its part is %lld-%lld", (int) me,
                         (long long) mine->row0, (long long) (mine->row0 + mine->n - 1), (long long) r0,
                         (long long) r1 - 1);
    if (dp->size == 1 && hs->nh == hs->n_head_kv && mine->row0 == 0) {   // nothing moves: no copy
        out->q = mine->q, out->k = mine->k, out->v = mine->v;
        return OSCAR_OK;
    }
    const size_t qw = osc_optr_q_width(hs), kw = osc_optr_kv_width(hs), n = (size_t) n_rows;
    if (hs->nh > 0 && !(out->owned = malloc(n * (qw + 2 * kw) * sizeof(float) + 1)))
        return osc_error(OSCAR_ERR_NOMEM, "optr rows: out of memory for %lld rows", (long long) n_rows);
    const struct dest to = {out->owned, out->owned ? out->owned + n * qw : NULL,
                            out->owned ? out->owned + n * (qw + kw) : NULL};
    out->q = to.q, out->k = to.k, out->v = to.v;
    if (hs->nh > 0 && r1 > r0) {   // this rank's own part goes straight to its rows
        const size_t local = (size_t) (r0 - mine->row0), qs = (size_t) hs->n_head * hs->head_dim,
                     ks = (size_t) hs->n_head_kv * hs->head_dim;
        const int32_t g = hs->n_head / hs->n_head_kv, D = hs->head_dim;
        osc_optr_pack_heads(mine->q + local * qs, r1 - r0, hs->n_head, hs->h0 * g, hs->nh * g, D, to.q + (size_t) r0 * qw);
        osc_optr_pack_heads(mine->k + local * ks, r1 - r0, hs->n_head_kv, hs->h0, hs->nh, D, to.k + (size_t) r0 * kw);
        osc_optr_pack_heads(mine->v + local * ks, r1 - r0, hs->n_head_kv, hs->h0, hs->nh, D, to.v + (size_t) r0 * kw);
    }
    enum oscar_status st = OSCAR_OK;
    for (int32_t d = 0; d < dp->size && st == OSCAR_OK; d++)
        if (heads_of(dp, hs, d).nh > 0) st = route_to(dp, start, mine, hs, d, &to);
    if (st != OSCAR_OK) osc_optr_routed_free(out);
    return st;
}
