// finalize.c - turns the running sums into the matrices of method.md §2.
//
//   ktk/vtv  layer: Σ_h S_h / (T·Hkv)     head h: S_h / T
//   qqt      layer: mean_h A_h, A_h = S_h / (T·g)   head h: A_h
//   sst/vatt layer: mean_h C_h, C_h = S_h / max(Σ_t w_{h,t}, 1e-12)   head h: C_h
// Every result is symmetrised, (Σ + Σᵀ)/2, as the reference does before eigh.
// DSYRK sums hold the upper triangle only; it is mirrored first (the lower
// triangle of an exact-arithmetic xᵀx sum computed in the same order would be
// bit-identical, so mirroring is what symmetrising would give).
//
// D = head_dim.
#include "stats/stats-internal.h"

#include <string.h>

static void mirror_upper(double * m, int32_t D) {
    for (int32_t i = 0; i < D; i++) {
        for (int32_t j = 0; j < i; j++) m[(size_t) i * D + j] = m[(size_t) j * D + i];
    }
}

static void symmetrise(double * m, int32_t D) {
    for (int32_t i = 0; i < D; i++) {
        for (int32_t j = i + 1; j < D; j++) {
            const double a = 0.5 * (m[(size_t) i * D + j] + m[(size_t) j * D + i]);
            m[(size_t) i * D + j] = a;
            m[(size_t) j * D + i] = a;
        }
    }
}

// The finalised matrix of one KV head into out (not yet symmetrised).
static void head_matrix(const struct oscar_stats * s, enum oscar_stats_kind kind, int32_t l, int32_t h,
                        double * out) {
    const size_t lh = (size_t) l * (size_t) s->p.n_head_kv + (size_t) h;
    const double * src = NULL;
    double div = 1.0;
    bool upper = true;
    const double T = (double) s->n_tok1[l];
    switch (kind) {
    case OSCAR_STATS_KTK:  src = s->ktk; div = T; break;
    case OSCAR_STATS_VTV:  src = s->vtv; div = T; break;
    case OSCAR_STATS_QQT:  src = s->qqt; div = T * (double) s->g; break;
    case OSCAR_STATS_SST:
        src = s->sst; upper = false;
        div = s->sst_wsum[lh] > 1e-12 ? s->sst_wsum[lh] : 1e-12;
        break;
    case OSCAR_STATS_VATT:
        src = s->vatt; upper = false;
        div = s->vatt_wsum[lh] > 1e-12 ? s->vatt_wsum[lh] : 1e-12;
        break;
    }
    src += lh * s->dd;
    for (size_t i = 0; i < s->dd; i++) out[i] = src[i] / div;
    if (upper) mirror_upper(out, s->p.head_dim);
}

enum oscar_status oscar_stats_sigma(const struct oscar_stats * s, enum oscar_stats_kind kind, int32_t layer,
                                    int32_t head, double * out) {
    const struct oscar_stats_params * p = &s->p;
    if (layer < 0 || layer >= p->n_layer || head >= p->n_head_kv) {
        return osc_error(OSCAR_ERR_INVALID, "stats: no layer %d / KV head %d", (int) layer, (int) head);
    }
    const bool single = kind == OSCAR_STATS_KTK || kind == OSCAR_STATS_VTV || kind == OSCAR_STATS_QQT ||
                        kind == OSCAR_STATS_SST || kind == OSCAR_STATS_VATT;
    if (!single || !(p->kinds & kind)) {
        return osc_error(OSCAR_ERR_INVALID, "stats: estimator 0x%x was not accumulated", (unsigned) kind);
    }
    const int32_t need = kind == OSCAR_STATS_SST ? 3 : 2;
    if (s->phase[layer] < need) {
        return osc_error(OSCAR_ERR_INVALID, "stats: layer %d: pass %d has not ended yet", (int) layer,
                         (int) (need - 1));
    }
    const int32_t D = p->head_dim;
    if (head >= 0) {
        head_matrix(s, kind, layer, head, out);
    } else {
        // mean over KV heads of the per-head matrices; for ktk/vtv this is the
        // pooled Σ_h S_h / (T·Hkv) of method.md §2 (up to rounding order)
        double * tmp = s->scr; // scratch is free between adds (single-threaded here)
        memset(out, 0, s->dd * sizeof(double));
        for (int32_t h = 0; h < p->n_head_kv; h++) {
            head_matrix(s, kind, layer, h, tmp);
            for (size_t i = 0; i < s->dd; i++) out[i] += tmp[i];
        }
        for (size_t i = 0; i < s->dd; i++) out[i] /= (double) p->n_head_kv;
    }
    symmetrise(out, D);
    return OSCAR_OK;
}

enum oscar_status oscar_stats_layer_info(const struct oscar_stats * s, int32_t layer,
                                         struct oscar_stats_layer_info * out) {
    if (layer < 0 || layer >= s->p.n_layer) return osc_error(OSCAR_ERR_INVALID, "stats: no layer %d", (int) layer);
    memset(out, 0, sizeof *out);
    out->n_tokens_pass1 = s->n_tok1[layer];
    out->n_tokens_pass2 = s->n_tok2[layer];
    for (int32_t h = 0; h < s->p.n_head_kv; h++) {
        const size_t lh = (size_t) layer * (size_t) s->p.n_head_kv + (size_t) h;
        out->n_negative_sst += s->sst_nneg[lh];
        out->sst_weight_sum += s->sst_wsum[lh];
        out->vatt_weight_sum += s->vatt_wsum[lh];
    }
    return OSCAR_OK;
}
