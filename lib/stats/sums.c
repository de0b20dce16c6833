// sums.c - oscar_stats_add_sums: external fp64 sums into the accumulators.
// It adds in a fixed element order, so the result depends only on the values
// handed in; it never stages rows and never reduces anything itself.
#include "stats/stats-internal.h"
#include "stats/stats-sums.h"

#include <stdbool.h>

static void add(double * dst, const double * src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

enum oscar_status oscar_stats_add_sums(struct oscar_stats * s, const struct oscar_stats_sums * x) {
    const uint32_t k = s->p.kinds;
    if (x->pass != 1 && x->pass != 2)
        return osc_error(OSCAR_ERR_INVALID, "stats: external sums of pass %d (1 or 2)", (int) x->pass);
    if (x->pass != oscar_stats_phase(s))
        return osc_error(OSCAR_ERR_INVALID, "stats: external sums of pass %d while the accumulator is in phase %d",
                         (int) x->pass, (int) oscar_stats_phase(s));
    if (x->n_tokens < 0) return osc_error(OSCAR_ERR_INVALID, "stats: external sums of %lld tokens",
                                          (long long) x->n_tokens);
    const bool p1 = x->pass == 1;
    if (p1 && (!(k & OSCAR_STATS_KTK) != !x->ktk || !(k & OSCAR_STATS_VTV) != !x->vtv ||
               !(k & OSCAR_STATS_QQT) != !x->qqt || !(k & OSCAR_STATS_VATT) != !x->vatt ||
               (x->vatt && !x->vatt_wsum)))
        return osc_error(OSCAR_ERR_INVALID, "stats: external pass-1 sums do not match the kinds 0x%x", (unsigned) k);
    if (!p1 && (!x->sst || !x->sst_wsum || !x->sst_nneg))
        return osc_error(OSCAR_ERR_INVALID, "stats: external pass-2 sums lack sst, its weight sums or counts");
    const size_t L = (size_t) s->p.n_layer, H = (size_t) s->p.n_head_kv, n = L * H * s->dd;
    if (p1) {
        if (x->ktk) add(s->ktk, x->ktk, n);
        if (x->vtv) add(s->vtv, x->vtv, n);
        if (x->qqt) add(s->qqt, x->qqt, n);
        if (x->vatt) add(s->vatt, x->vatt, n), add(s->vatt_wsum, x->vatt_wsum, L * H);
        for (size_t l = 0; l < L; l++) s->n_tok1[l] += x->n_tokens;
    } else {
        add(s->sst, x->sst, n);
        add(s->sst_wsum, x->sst_wsum, L * H);
        for (size_t i = 0; i < L * H; i++) s->sst_nneg[i] += x->sst_nneg[i];
        for (size_t l = 0; l < L; l++) s->n_tok2[l] += x->n_tokens;
    }
    return OSCAR_OK;
}
