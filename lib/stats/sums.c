// sums.c - oscar_stats_add_sums: external fp64 sums into the accumulators.
// It adds in a fixed element order, so the result depends only on the values
// handed in; it never stages rows and never reduces anything itself.
#include "stats/stats-internal.h"
#include "stats/stats-sums.h"

#include <stdbool.h>

static void add(double * dst, const double * src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

// Checks x against s in phase `phase` (the accumulator's, or one layer's).
static enum oscar_status check_sums(const struct oscar_stats * s, int32_t phase, const struct oscar_stats_sums * x) {
    const uint32_t k = s->p.kinds;
    if (x->pass != 1 && x->pass != 2)
        return osc_error(OSCAR_ERR_INVALID, "stats: external sums of pass %d (1 or 2)", (int) x->pass);
    if (x->pass != phase)
        return osc_error(OSCAR_ERR_INVALID, "stats: external sums of pass %d while the accumulator is in phase %d",
                         (int) x->pass, (int) phase);
    if (x->n_tokens < 0) return osc_error(OSCAR_ERR_INVALID, "stats: external sums of %lld tokens",
                                          (long long) x->n_tokens);
    const bool p1 = x->pass == 1;
    if (p1 && (!(k & OSCAR_STATS_KTK) != !x->ktk || !(k & OSCAR_STATS_VTV) != !x->vtv ||
               !(k & OSCAR_STATS_QQT) != !x->qqt || !(k & OSCAR_STATS_VATT) != !x->vatt ||
               (x->vatt && !x->vatt_wsum)))
        return osc_error(OSCAR_ERR_INVALID, "stats: external pass-1 sums do not match the kinds 0x%x", (unsigned) k);
    if (!p1 && (!x->sst || !x->sst_wsum || !x->sst_nneg))
        return osc_error(OSCAR_ERR_INVALID, "stats: external pass-2 sums lack sst, its weight sums or counts");
    return OSCAR_OK;
}

// Adds x's layers [l0, l0 + n_l) (x's arrays start at layer l0) into s.
static void add_layers(struct oscar_stats * s, size_t l0, size_t n_l, const struct oscar_stats_sums * x) {
    const size_t H = (size_t) s->p.n_head_kv, n = n_l * H * s->dd, m = l0 * H * s->dd, lh = l0 * H;
    if (x->pass == 1) {
        if (x->ktk) add(s->ktk + m, x->ktk, n);
        if (x->vtv) add(s->vtv + m, x->vtv, n);
        if (x->qqt) add(s->qqt + m, x->qqt, n);
        if (x->vatt) add(s->vatt + m, x->vatt, n), add(s->vatt_wsum + lh, x->vatt_wsum, n_l * H);
        for (size_t l = l0; l < l0 + n_l; l++) s->n_tok1[l] += x->n_tokens;
    } else {
        add(s->sst + m, x->sst, n);
        add(s->sst_wsum + lh, x->sst_wsum, n_l * H);
        for (size_t i = 0; i < n_l * H; i++) s->sst_nneg[lh + i] += x->sst_nneg[i];
        for (size_t l = l0; l < l0 + n_l; l++) s->n_tok2[l] += x->n_tokens;
    }
}

enum oscar_status oscar_stats_add_sums(struct oscar_stats * s, const struct oscar_stats_sums * x) {
    enum oscar_status st = check_sums(s, oscar_stats_phase(s), x);
    if (st == OSCAR_OK) add_layers(s, 0, (size_t) s->p.n_layer, x);
    return st;
}

enum oscar_status oscar_stats_add_layer_sums(struct oscar_stats * s, int32_t layer, const struct oscar_stats_sums * x) {
    if (layer < 0 || layer >= s->p.n_layer)
        return osc_error(OSCAR_ERR_INVALID, "stats: external sums for layer %d of %d", (int) layer, (int) s->p.n_layer);
    enum oscar_status st = check_sums(s, oscar_stats_layer_phase(s, layer), x);
    if (st == OSCAR_OK) add_layers(s, (size_t) layer, 1, x);
    return st;
}
