// stats-block.c - reduces one staged block of rows into the fp64 accumulators.
//
// Most of the calibration CPU time is spent here. Every (kind, KV head) of a
// layer is one work item handled by exactly one OpenMP thread: the block is
// converted to fp64 (exact), reduced with DSYRK/DGEMM into a zeroed scratch
// and added to the accumulator, so the result does not depend on the thread
// count or on where the caller's chunks began (the block boundaries are
// fixed by the token count). Refuses nothing: inputs were validated when
// they were staged.
//
// With partials kept (partials.c, data-parallel runs) each item writes into
// the block's zeroed part instead: the same DSYRK/DGEMM result added into 0
// (exact), and the per-token weights logged rather than summed, so a replay
// in global block order repeats the additions of a single process.
//
// n = rows in the block (<= B), Hq, Hkv, D, g = Hq/Hkv.
#include "stats/stats-internal.h"
#include "util/blas.h"

#include <omp.h>
#include <string.h>

enum item_kind { IT_KTK, IT_VTV, IT_QQT, IT_VATT, IT_SST };

// G [n, D] = fp64 rows of head h of a staged [B, H, D] array.
static void gather_head(const float * st, int32_t n, int32_t H, int32_t D, int32_t h, double * G) {
    for (int32_t t = 0; t < n; t++) {
        const float * src = st + ((size_t) t * (size_t) H + (size_t) h) * (size_t) D;
        double * dst = G + (size_t) t * (size_t) D;
        for (int32_t d = 0; d < D; d++) dst[d] = (double) src[d];
    }
}

// acc += P (upper triangle only when upper, else the full matrix).
static void add_into(double * acc, const double * P, int32_t D, bool upper) {
    for (int32_t i = 0; i < D; i++) {
        for (int32_t j = upper ? i : 0; j < D; j++) acc[(size_t) i * D + j] += P[(size_t) i * D + j];
    }
}

// acc += Gᵀ G over n rows (upper triangle).
static void syrk_add(double * acc, const double * G, int32_t n, int32_t D, double * P) {
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, D, n, 1.0, G, D, 0.0, P, D);
    add_into(acc, P, D, true);
}

// acc += Σ_t w_t v_tᵀ v_t (full matrix) with Z = w ⊙ V; wsum += Σ w in token order (or, keeping
// partials, the weights copied to wlog for the replay to sum).
static void weighted_add(double * acc, double * wsum, double * wlog, const double * w, const double * V, int32_t n,
                         int32_t D, double * Z, double * P) {
    for (int32_t t = 0; t < n; t++) {
        for (int32_t d = 0; d < D; d++) Z[(size_t) t * D + d] = w[t] * V[(size_t) t * D + d];
        if (wlog) wlog[t] = w[t];
        else *wsum += w[t];
    }
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, D, D, n, 1.0, Z, D, V, D, 0.0, P, D);
    add_into(acc, P, D, false);
}

// Where an item's sums go: the accumulator, or (keeping partials) the block's part.
struct item_out {
    double * acc;      // [D, D]
    double * wsum;     // weighted kinds, accumulator mode
    double * wlog;     // weighted kinds, part mode: [B] weights
    int64_t * nneg;    // SST, accumulator mode
    double * nneg_part; // SST, part mode
};

static void run_item(struct oscar_stats * s, int32_t l, enum item_kind kind, int32_t h, const struct item_out * o,
                     double * scr) {
    const int32_t D = s->p.head_dim, H = s->p.n_head_kv, Hq = s->p.n_head, n = s->n_pend[l];
    const size_t B = OSCAR_STATS_BLOCK, mat = ((size_t) l * (size_t) H + (size_t) h) * s->dd;
    double * G = scr;                                                   // [B*g, D]
    double * Y = G + B * (size_t) (s->g > 1 ? s->g : 1) * (size_t) D;  // [B, D]
    double * P = Y + B * (size_t) D;                                    // [D, D]
    double * w = P + s->dd;                                             // [B]
    const float * st_k = s->st_k ? s->st_k + (size_t) l * B * (size_t) H * (size_t) D : NULL;
    const float * st_v = s->st_v ? s->st_v + (size_t) l * B * (size_t) H * (size_t) D : NULL;
    switch (kind) {
    case IT_KTK:
        gather_head(st_k, n, H, D, h, G);
        syrk_add(o->acc, G, n, D, P);
        break;
    case IT_VTV:
        gather_head(st_v, n, H, D, h, G);
        syrk_add(o->acc, G, n, D, P);
        break;
    case IT_QQT: {
        // rows of the g contiguous query heads of KV head h, token-major: [n*g, D]
        const float * st_q = s->st_q + (size_t) l * B * (size_t) Hq * (size_t) D;
        for (int32_t t = 0; t < n; t++) {
            const float * src = st_q + ((size_t) t * (size_t) Hq + (size_t) h * (size_t) s->g) * (size_t) D;
            double * dst = G + (size_t) t * (size_t) s->g * (size_t) D;
            for (size_t i = 0; i < (size_t) s->g * (size_t) D; i++) dst[i] = (double) src[i];
        }
        syrk_add(o->acc, G, n * s->g, D, P);
        break;
    }
    case IT_VATT:
        gather_head(st_v, n, H, D, h, Y);
        for (int32_t t = 0; t < n; t++) w[t] = s->st_w[((size_t) l * B + (size_t) t) * (size_t) H + (size_t) h];
        weighted_add(o->acc, o->wsum, o->wlog, w, Y, n, D, G, P);
        break;
    case IT_SST: {
        // w_t = k_t · A_h · k_tᵀ with the FINAL A_h = qqt / (T·g) (pass 1 is complete)
        const double alpha = 1.0 / ((double) s->n_tok1[l] * (double) s->g);
        gather_head(st_k, n, H, D, h, G);
        cblas_dsymm(CblasRowMajor, CblasRight, CblasUpper, n, D, alpha, s->qqt + mat, D, G, D, 0.0, Y, D);
        for (int32_t t = 0; t < n; t++) {
            double acc = 0.0;
            for (int32_t d = 0; d < D; d++) acc += Y[(size_t) t * D + d] * G[(size_t) t * D + d];
            if (acc < 0.0) { // A_h is PSD: only rounding gets here (method.md §22 item 4)
                if (o->nneg) (*o->nneg)++;
                else *o->nneg_part += 1.0;
                acc = 0.0;
            }
            w[t] = acc;
        }
        gather_head(st_v, n, H, D, h, Y);
        weighted_add(o->acc, o->wsum, o->wlog, w, Y, n, D, G, P);
        break;
    }
    }
}

// The accumulator of (layer l, kind, KV head h).
static void item_target(struct oscar_stats * s, int32_t l, enum item_kind kind, int32_t h, struct item_out * o) {
    const size_t lh = (size_t) l * (size_t) s->p.n_head_kv + (size_t) h, mat = lh * s->dd;
    double * const acc[] = {[IT_KTK] = s->ktk, [IT_VTV] = s->vtv, [IT_QQT] = s->qqt, [IT_VATT] = s->vatt,
                            [IT_SST] = s->sst};
    o->acc = acc[kind] + mat;
    o->wsum = kind == IT_VATT ? &s->vatt_wsum[lh] : kind == IT_SST ? &s->sst_wsum[lh] : NULL;
    o->wlog = NULL, o->nneg_part = NULL;
    o->nneg = kind == IT_SST ? &s->sst_nneg[lh] : NULL;
}

void osc_stats_flush_layer(struct oscar_stats * s, int32_t l) {
    if (s->n_pend[l] == 0) return;
    enum item_kind kinds[5];
    int32_t n_kinds = 0;
    const uint32_t k = s->p.kinds;
    if (s->phase[l] == 1) {
        if (k & OSCAR_STATS_KTK) kinds[n_kinds++] = IT_KTK;
        if (k & OSCAR_STATS_VTV) kinds[n_kinds++] = IT_VTV;
        if (k & OSCAR_STATS_QQT) kinds[n_kinds++] = IT_QQT;
        if (k & OSCAR_STATS_VATT) kinds[n_kinds++] = IT_VATT;
    } else {
        kinds[n_kinds++] = IT_SST;
    }
    const int32_t H = s->p.n_head_kv, n_items = n_kinds * H;
    double * part = s->keep_parts ? osc_stats_new_part(s, l) : NULL; // NULL: accumulator mode
    osc_blas_init(); // each item's BLAS calls run on its own thread
    // each item writes only its own (kind, head) accumulator: no shared sums
#pragma omp parallel for num_threads(s->n_threads) schedule(static)
    for (int32_t it = 0; it < n_items; it++) {
        double * scr = s->scr + (size_t) omp_get_thread_num() * s->scr_per_thread;
        const int32_t ki = it / H, h = it % H;
        struct item_out o;
        if (part) osc_stats_part_target(s, part, s->phase[l], ki, h, &o.acc, &o.wlog, &o.nneg_part);
        else item_target(s, l, kinds[ki], h, &o);
        if (part) o.wsum = NULL, o.nneg = NULL;
        run_item(s, l, kinds[ki], h, &o, scr);
    }
    s->n_pend[l] = 0;
}
