// optr-loss.c - OptR's per-(KV head, sequence) losses and their analytic
// gradients with respect to the rotation R (y = x·R). fp32 products through
// single-threaded BLAS tiles, fp64 sums in a fixed order.
//
// Derivation (one query head j of the KV head; s = 1/√D; rows t of the
// sequence, query rows i in [lo, L); W_j = W_O[:, jD:(j+1)D], Γ_j = W_jᵀW_j):
//   Y = K_c[Q]·R, Ŷ = INT2(Y) (straight-through), K̂[Q] = Ŷ·Rᵀ, K̂ = K_c elsewhere
//   S = s·q·K̂ᵀ (causal), P̂ = softmax(S), P the same with K_c
//   KL = (1/nq)·Σ_i Σ_t P·(log P − log P̂)        ∂/∂S = (P̂ − P)/nq
//   O  = (1/(nq·C))·Σ_i m_i·Γ_j·m_iᵀ, m = P̂·V − P·V ‖(P̂−P)·V·W_jᵀ‖² / (nq·C)
//        ∂O/∂P̂ = (2/(nq·C))·(m·Γ_j)·Vᵀ, then softmax: ∂/∂S = P̂ ⊙ (dP̂ − rowsum(P̂ ⊙ dP̂))
//   ∂/∂K̂ = s·dSᵀ·q;  K̂[Q] = Ŷ·Rᵀ: dR += dK̂ᵀ·Ŷ, dŶ = dK̂·R;  dY = STE(dŶ);  Y = K_c·R: dR += K_cᵀ·dY
// STE (as the paper's quant_int2_ste): x̂ = x_cl + c·scale(x_cl) with c
// detached, the clip threshold detached, scale = (max − min)/3; so
//   dx_i = [not clipped]·(dx̂_i + [i = argmax]·σ/3 − [i = argmin]·σ/3),  σ = Σ_k dx̂_k·c_k.
// The V loss: m = P̂[:, Q]·(V̂ − V)[Q] with P̂ fixed, O as above, dV̂[Q] = P̂[:, Q]ᵀ·dm.
// Using Γ_j (D x D) instead of projecting to C columns is exact and C/D times cheaper.
// KL uses log P̂ = S − logsumexp(S) (the paper clamps P̂ at 1e-12 before the log:
// equal except where P̂ < 1e-12).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rotation/optr-internal.h"
#include "util/blas.h"

bool osc_optr_scratch_init(struct osc_optr_scratch * s, int32_t Lmax, int32_t nqmax, int32_t D, int32_t ng) {
    memset(s, 0, sizeof(*s));
    size_t LD = (size_t) Lmax * D, QL = (size_t) nqmax * Lmax, QD = (size_t) nqmax * D;
    s->y = malloc(LD * sizeof(float)), s->yh = malloc(LD * sizeof(float)), s->kh = malloc(LD * sizeof(float));
    s->dk = malloc(LD * sizeof(float)), s->dy = malloc(LD * sizeof(float));
    s->s = malloc(QL * sizeof(float)), s->ph = malloc(QL * sizeof(float)), s->ds = malloc(QL * sizeof(float));
    s->m = malloc(QD * sizeof(float)), s->gm = malloc(QD * sizeof(float)), s->qtmp = malloc(QD * sizeof(float));
    s->dr = malloc((size_t) D * D * sizeof(float));
    s->codes = malloc((size_t) Lmax * (size_t) (D / 4) + 1);
    s->meta = malloc((size_t) Lmax * 2 * (size_t) ng * sizeof(float));
    s->clip_scratch = malloc((size_t) D * sizeof(float));
    return s->y && s->yh && s->kh && s->dk && s->dy && s->s && s->ph && s->ds && s->m && s->gm && s->qtmp &&
           s->dr && s->codes && s->meta && s->clip_scratch;
}

void osc_optr_scratch_free(struct osc_optr_scratch * s) {
    free(s->y); free(s->yh); free(s->kh); free(s->dk); free(s->dy); free(s->s); free(s->ph); free(s->ds);
    free(s->m); free(s->gm); free(s->qtmp); free(s->dr); free(s->codes); free(s->meta); free(s->clip_scratch);
    memset(s, 0, sizeof(*s));
}

// C[M, N] (+)= op(A)·op(B), one thread.
static void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float * A, int lda,
                 const float * B, int ldb, float beta, float * C, int ldc) {
    osc_sgemm(1, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

// ---- the straight-through quantizer ----------------------------------------------------
// The k-th smallest of a[0..n) (reordered in place): the value sort_ascending(a)[k]
// by selection instead of a sort (which was a third of the training time).
static float select_kth(float * a, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        float pivot = a[lo + (hi - lo) / 2];
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i <= j) {
                float t = a[i];
                a[i] = a[j], a[j] = t;
                i++, j--;
            }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return a[k];
    }
    return a[k];
}

// The quantizer's clip threshold of one row (+inf when off), equal to oscar_clip_tau.
static float clip_tau(const struct oscar_int2_params * p, const float * x, float * scratch) {
    const int32_t D = p->head_dim;
    const bool bisect = p->clip_algo == OSCAR_CLIP_BISECT || (p->clip_algo == OSCAR_CLIP_FLUSH && D >= 64);
    if (p->clip_ratio <= 0 || bisect) return oscar_clip_tau(p, x, scratch);
    for (int32_t d = 0; d < D; d++) scratch[d] = fabsf(x[d]);
    return select_kth(scratch, D, oscar_clip_index(p->clip_ratio, D));
}

// y [n, D] -> yh [n, D]. Live: this quantizer's codes (bit-exact with serving),
// recording the linearisation. Frozen: the smooth function of the recorded one.
enum oscar_status osc_optr_quant_rows(const struct oscar_int2_params * p, const float * y, int32_t n, bool frozen,
                                      struct osc_optr_lin * lin, float * yh, struct osc_optr_scratch * s) {
    const int32_t D = p->head_dim, G = p->group_size > 0 ? p->group_size : D, ng = D / G;
    if (!frozen) {
        // Clip each row here (the clip is idempotent), then quantize with the clip off:
        // the same codes and metadata as oscar_int2_quantize_rows with it on.
        for (int32_t r = 0; r < n; r++) {
            const float * yr = y + (size_t) r * D;
            float tau = clip_tau(p, yr, s->clip_scratch), * yc = s->dy + (size_t) r * D;
            lin->clampv[r] = tau;
            for (int32_t d = 0; d < D; d++) {
                lin->clipped[(size_t) r * D + d] = yr[d] > tau ? 1 : yr[d] < -tau ? 2 : 0;
                yc[d] = yr[d] < -tau ? -tau : yr[d] > tau ? tau : yr[d];
            }
        }
        struct oscar_int2_params pc = *p;
        pc.clip_ratio = 0.0;
        enum oscar_status st = oscar_int2_quantize_rows(&pc, s->dy, n, s->codes, s->meta, NULL);
        if (st != OSCAR_OK) return st;
        if ((st = oscar_int2_dequantize_rows(&pc, s->codes, s->meta, n, yh)) != OSCAR_OK) return st;
    }
    for (int32_t r = 0; r < n; r++) {
        const float * yr = y + (size_t) r * D;
        float * out = yh + (size_t) r * D, * c = lin->c + (size_t) r * D;
        const uint8_t * clipped = lin->clipped + (size_t) r * D;
        const float tau = lin->clampv[r];
        for (int32_t gi = 0; gi < ng; gi++) {
            const int32_t d0 = gi * G;
            const size_t k = (size_t) r * ng + gi;
            float * xc = s->clip_scratch;   // G floats (free once tau is known)
            for (int32_t d = 0; d < G; d++) {
                uint8_t f = clipped[d0 + d];
                xc[d] = f == 1 ? tau : f == 2 ? -tau : yr[d0 + d];
            }
            if (!frozen) {
                int32_t imax = 0, imin = 0;
                for (int32_t d = 1; d < G; d++) {
                    if (xc[d] > xc[imax]) imax = d;
                    if (xc[d] < xc[imin]) imin = d;
                }
                float range = xc[imax] - xc[imin];
                float scale = fmaxf(range, 1e-8f) / 3.0f;
                lin->scale[k] = scale;
                lin->imax[k] = range < 1e-8f ? -1 : (int16_t) imax;
                lin->imin[k] = range < 1e-8f ? -1 : (int16_t) imin;
                for (int32_t d = 0; d < G; d++) c[d0 + d] = (out[d0 + d] - xc[d]) / scale;
            } else {
                float scale = lin->imax[k] < 0 ? lin->scale[k] : (xc[lin->imax[k]] - xc[lin->imin[k]]) / 3.0f;
                for (int32_t d = 0; d < G; d++) out[d0 + d] = xc[d] + c[d0 + d] * scale;
            }
        }
    }
    return OSCAR_OK;
}

// dyh [n, D] -> dy [n, D] through the straight-through quantizer.
static void quant_back(const struct oscar_int2_params * p, const struct osc_optr_lin * lin, const float * dyh,
                       int32_t n, float * dy) {
    const int32_t D = p->head_dim, G = p->group_size > 0 ? p->group_size : D, ng = D / G;
    for (int32_t r = 0; r < n; r++) {
        const float * g = dyh + (size_t) r * D, * c = lin->c + (size_t) r * D;
        const uint8_t * clipped = lin->clipped + (size_t) r * D;
        float * o = dy + (size_t) r * D;
        for (int32_t d = 0; d < D; d++) o[d] = clipped[d] ? 0.0f : g[d];
        for (int32_t gi = 0; gi < ng; gi++) {
            const size_t k = (size_t) r * ng + gi;
            if (lin->imax[k] < 0) continue;
            const int32_t d0 = gi * G;
            double sig = 0.0;
            for (int32_t d = 0; d < G; d++) sig += (double) g[d0 + d] * (double) c[d0 + d];
            int32_t a = d0 + lin->imax[k], b = d0 + lin->imin[k];
            if (!clipped[a]) o[a] += (float) (sig / 3.0);
            if (!clipped[b]) o[b] -= (float) (sig / 3.0);
        }
    }
}

// Rows [q0, q1) of x [L, D] through rotate → INT2 → rotate back into out [L, D]
// (other rows copied). s->y holds Y, s->yh holds Ŷ.
static enum oscar_status through_int2(const struct oscar_int2_params * p, const struct osc_optr_item * it,
                                      const float * x, const float * R, bool frozen, struct osc_optr_lin * lin,
                                      float * out, struct osc_optr_scratch * s) {
    const int32_t D = p->head_dim, nr = it->q1 - it->q0;
    memcpy(out, x, (size_t) it->L * D * sizeof(float));
    if (nr <= 0) return OSCAR_OK;
    gemm(CblasNoTrans, CblasNoTrans, nr, D, D, x + (size_t) it->q0 * D, D, R, D, 0.0f, s->y, D);
    enum oscar_status st = osc_optr_quant_rows(p, s->y, nr, frozen, lin, s->yh, s);
    if (st != OSCAR_OK) return st;
    gemm(CblasNoTrans, CblasTrans, nr, D, D, s->yh, D, R, D, 0.0f, out + (size_t) it->q0 * D, D);
    return OSCAR_OK;
}

// Back through through_int2: dx̂ [L, D] (rows [q0, q1) used) -> dR += (fp64).
static void through_int2_back(const struct oscar_int2_params * p, const struct osc_optr_item * it, const float * x,
                              const float * R, const struct osc_optr_lin * lin, const float * dxh, double w,
                              double * dR, struct osc_optr_scratch * s) {
    const int32_t D = p->head_dim, nr = it->q1 - it->q0;
    if (nr <= 0) return;
    const float * dq = dxh + (size_t) it->q0 * D;
    // dR = dX̂ᵀ·Ŷ (from X̂ = Ŷ·Rᵀ) + Xᵀ·STE(dX̂·R) (from Y = X·R)
    gemm(CblasTrans, CblasNoTrans, D, D, nr, dq, D, s->yh, D, 0.0f, s->dr, D);
    gemm(CblasNoTrans, CblasNoTrans, nr, D, D, dq, D, R, D, 0.0f, s->y, D);   // dŶ (Y is no longer needed)
    quant_back(p, lin, s->y, nr, s->dy);
    gemm(CblasTrans, CblasNoTrans, D, D, nr, x + (size_t) it->q0 * D, D, s->dy, D, 1.0f, s->dr, D);
    for (size_t i = 0; i < (size_t) D * D; i++) dR[i] += w * (double) s->dr[i];
}

// Causal softmax of S [nq, L] in place into P̂ (row i is query row lo + i: keys t <= lo + i);
// returns log-sum-exp per row into lse.
static void softmax_rows(const struct osc_optr_item * it, const float * S, float * P, double * lse) {
    for (int32_t i = 0; i < it->nq; i++) {
        const int32_t n = it->lo + i + 1;
        const float * sr = S + (size_t) i * it->L;
        float * pr = P + (size_t) i * it->L;
        float mx = sr[0];
        for (int32_t t = 1; t < n; t++) mx = sr[t] > mx ? sr[t] : mx;
        double sum = 0.0;
        for (int32_t t = 0; t < n; t++) {
            pr[t] = expf(sr[t] - mx);
            sum += (double) pr[t];
        }
        const float inv = (float) (1.0 / sum);
        for (int32_t t = 0; t < n; t++) pr[t] *= inv;
        for (int32_t t = n; t < it->L; t++) pr[t] = 0.0f;
        if (lse) lse[i] = (double) mx + log(sum);
    }
}

// Σ_i m_i·Γ·m_iᵀ with gm = m·Γ (fp64 sum).
static double quad_form(const float * m, const float * gram, int32_t nq, int32_t D, float * gm) {
    gemm(CblasNoTrans, CblasNoTrans, nq, D, D, m, D, gram, D, 0.0f, gm, D);
    double o = 0.0;
    for (size_t i = 0; i < (size_t) nq * D; i++) o += (double) m[i] * (double) gm[i];
    return o;
}

enum oscar_status osc_optr_loss_k(const struct osc_optr_head * hd, struct osc_optr_item * it, const float * R,
                                  double w, bool frozen, bool phat_out, double * dR, struct osc_optr_scratch * s,
                                  double * loss) {
    const int32_t D = hd->D, L = it->L, nq = it->nq;
    const float sc = hd->sc;
    const double wo = 1.0 / ((double) nq * hd->C), wj = 1.0 / hd->g;
    enum oscar_status st = through_int2(hd->quant, it, it->kc, R, frozen, &it->lin, s->kh, s);
    if (st != OSCAR_OK) return st;
    if (dR) memset(s->dk, 0, (size_t) L * D * sizeof(float));
    double total = 0.0, lse[4096];
    for (int32_t j = 0; j < hd->g; j++) {
        const float * q = it->q + (size_t) j * nq * D, * P = it->p + (size_t) j * nq * L;
        const float * gram = hd->gram + (size_t) j * D * D;
        // S = s·q·K̂ᵀ, P̂ = softmax(S)
        osc_sgemm(1, CblasNoTrans, CblasTrans, nq, L, D, sc, q, D, s->kh, D, 0.0f, s->s, L);
        softmax_rows(it, s->s, s->ph, lse);
        if (phat_out) memcpy(it->phat + (size_t) j * nq * L, s->ph, (size_t) nq * L * sizeof(float));
        // KL = (Σ P log P − Σ P (S − lse)) / nq
        double cross = 0.0;
        for (int32_t i = 0; i < nq; i++) {
            const int32_t n = it->lo + i + 1;
            const float * pr = P + (size_t) i * L, * sr = s->s + (size_t) i * L;
            for (int32_t t = 0; t < n; t++) cross += (double) pr[t] * ((double) sr[t] - lse[i]);
        }
        const double kl = (it->plogp[j] - cross) / nq;
        // m = P̂·V − P·V
        gemm(CblasNoTrans, CblasNoTrans, nq, D, L, s->ph, L, it->v, D, 0.0f, s->m, D);
        const float * pv = it->pv + (size_t) j * nq * D;
        for (size_t i = 0; i < (size_t) nq * D; i++) s->m[i] -= pv[i];
        const double o = quad_form(s->m, gram, nq, D, s->gm) * wo;
        total += wj * (kl + hd->lambda * o);
        if (!dR) continue;
        // dP̂ = (2λ·wo)·gm·Vᵀ; dS = w·wj·[(P̂ − P)/nq + P̂ ⊙ (dP̂ − rowsum(P̂ ⊙ dP̂))]
        osc_sgemm(1, CblasNoTrans, CblasTrans, nq, L, D, (float) (2.0 * hd->lambda * wo), s->gm, D, it->v, D, 0.0f,
                  s->ds, L);
        for (int32_t i = 0; i < nq; i++) {
            const int32_t n = it->lo + i + 1;
            float * dr = s->ds + (size_t) i * L;
            const float * ph = s->ph + (size_t) i * L, * pr = P + (size_t) i * L;
            double dot = 0.0;
            for (int32_t t = 0; t < n; t++) dot += (double) ph[t] * (double) dr[t];
            for (int32_t t = 0; t < n; t++)
                dr[t] = (float) (wj * (((double) ph[t] - (double) pr[t]) / nq + (double) ph[t] * ((double) dr[t] - dot)));
            for (int32_t t = n; t < L; t++) dr[t] = 0.0f;
        }
        // dK̂ += s·dSᵀ·q
        osc_sgemm(1, CblasTrans, CblasNoTrans, L, D, nq, sc, s->ds, L, q, D, 1.0f, s->dk, D);
    }
    if (dR) through_int2_back(hd->quant, it, it->kc, R, &it->lin, s->dk, w, dR, s);
    *loss = w * total;
    return OSCAR_OK;
}

enum oscar_status osc_optr_loss_v(const struct osc_optr_head * hd, struct osc_optr_item * it, const float * R,
                                  double w, bool frozen, double * dR, struct osc_optr_scratch * s, double * loss) {
    const int32_t D = hd->D, L = it->L, nq = it->nq, q0 = it->q0, nr = it->q1 - it->q0;
    const double wo = 1.0 / ((double) nq * hd->C), wj = 1.0 / hd->g;
    *loss = 0.0;
    if (nr <= 0) return OSCAR_OK;
    enum oscar_status st = through_int2(hd->quant, it, it->v, R, frozen, &it->lin, s->kh, s);
    if (st != OSCAR_OK) return st;
    // ΔV [nr, D] in s->kh rows q0.. (in place: V̂ − V)
    float * dv = s->kh + (size_t) q0 * D;
    const float * v = it->v + (size_t) q0 * D;
    for (size_t i = 0; i < (size_t) nr * D; i++) dv[i] -= v[i];
    if (dR) memset(s->dk, 0, (size_t) L * D * sizeof(float));
    double total = 0.0;
    for (int32_t j = 0; j < hd->g; j++) {
        const float * ph = it->phat + (size_t) j * nq * L + q0;   // columns [q0, q1) of P̂ (row stride L)
        gemm(CblasNoTrans, CblasNoTrans, nq, D, nr, ph, L, dv, D, 0.0f, s->m, D);
        total += wj * wo * quad_form(s->m, hd->gram + (size_t) j * D * D, nq, D, s->gm);
        if (!dR) continue;
        // dV̂[Q] += (2·wo·wj)·P̂[:, Q]ᵀ·gm
        osc_sgemm(1, CblasTrans, CblasNoTrans, nr, D, nq, (float) (2.0 * wo * wj), ph, L, s->gm, D, 1.0f,
                  s->dk + (size_t) q0 * D, D);
    }
    if (dR) through_int2_back(hd->quant, it, it->v, R, &it->lin, s->dk, w, dR, s);
    *loss = w * total;
    return OSCAR_OK;
}
