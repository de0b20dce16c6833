// metrics.c - attention-aware errors on held-out rows: the tiered INT2 store
// of a sequence, exact causal attention, and the post-W_O relative attention
// error Σ‖(ô − o) W_Oᵀ‖² / Σ‖o W_Oᵀ‖² (method.md §16). Everything is computed in
// the model's basis: ô = attention(q·R_K, Q₂(k·R_K), Q₂(v·R_V))·R_Vᵀ.
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention/kv-cache.h"
#include "calibrate/calibrate-internal.h"

struct oscar_int2_params osc_calib_int2_params(const struct oscar_calib_params * p, int32_t D) {
    struct oscar_int2_params q = oscar_int2_default_params(D);
    q.group_size = p->group_size > 0 ? p->group_size : D;
    q.meta_dtype = p->scale_dtype;
    q.scheme = OSCAR_INT2_ASYM;
    q.clip_algo = OSCAR_CLIP_SORT;
    return q;
}

void osc_calib_rotate(const float * x, int64_t n, int32_t H, int32_t g, int32_t D, const struct oscar_calib_method * m,
                      int32_t layer, bool is_v, bool transpose, float * out) {
    for (int32_t j = 0; j < H; j++) {
        const float * R = m && m->rot ? m->rot(m->user, layer, j / g, is_v) : NULL;
        for (int64_t t = 0; t < n; t++) {
            const float * xr = x + ((size_t) t * (size_t) H + (size_t) j) * (size_t) D;
            float * o = out + ((size_t) t * (size_t) H + (size_t) j) * (size_t) D;
            if (!R) {
                memcpy(o, xr, (size_t) D * sizeof(float));
                continue;
            }
            // row vector times R (or Rᵀ): o[c] = Σ_i x[i] R[i, c]  (transpose: Σ_i x[i] R[c, i])
            cblas_sgemv(CblasRowMajor, transpose ? CblasNoTrans : CblasTrans, D, D, 1.0f, R, D, xr, 1, 0.0f, o, 1);
        }
    }
}

enum oscar_status osc_calib_store_tiered(const float * x, int64_t n, int32_t Hkv, int32_t D, int32_t sink,
                                         int32_t recent, const struct oscar_int2_params * base, const double * clip,
                                         bool err_only, float * out) {
    struct oscar_tier_layout lay;
    oscar_kv_extend_layout(0, n, sink, recent, true, &lay);
    size_t rowsz = (size_t) Hkv * (size_t) D;
    enum oscar_status st = OSCAR_OK;
    for (int64_t t = 0; t < n; t++) {
        const float * xr = x + (size_t) t * rowsz;
        float * o = out + (size_t) t * rowsz;
        bool q = t >= lay.quant_begin && t < lay.quant_end;
        for (size_t i = 0; i < rowsz; i++) o[i] = err_only ? 0.0f : (q ? xr[i] : oscar_bf16_round(xr[i]));
    }
    int64_t nq = lay.quant_end - lay.quant_begin;
    if (nq <= 0) return OSCAR_OK;
    struct oscar_int2_params qp = *base;
    size_t cb = oscar_int2_code_bytes(&qp), mb = oscar_int2_meta_bytes(&qp);
    float * rows = malloc((size_t) nq * (size_t) D * sizeof(float));
    float * deq = malloc((size_t) nq * (size_t) D * sizeof(float));
    uint8_t * codes = malloc((size_t) nq * cb);
    uint8_t * meta = malloc((size_t) nq * mb);
    if (!rows || !deq || !codes || !meta) {
        st = osc_error(OSCAR_ERR_NOMEM, "tiered store: out of memory");
        goto out;
    }
    for (int32_t h = 0; h < Hkv; h++) {
        qp.clip_ratio = clip[h];
        for (int64_t t = 0; t < nq; t++) {
            const float * xr = x + ((size_t) (lay.quant_begin + t) * (size_t) Hkv + (size_t) h) * (size_t) D;
            for (int32_t d = 0; d < D; d++) rows[(size_t) t * (size_t) D + (size_t) d] = oscar_bf16_round(xr[d]);
        }
        if ((st = oscar_int2_quantize_rows(&qp, rows, nq, codes, meta, NULL)) != OSCAR_OK) goto out;
        if ((st = oscar_int2_dequantize_rows(&qp, codes, meta, nq, deq)) != OSCAR_OK) goto out;
        for (int64_t t = 0; t < nq; t++) {
            const float * xr = x + ((size_t) (lay.quant_begin + t) * (size_t) Hkv + (size_t) h) * (size_t) D;
            float * o = out + ((size_t) (lay.quant_begin + t) * (size_t) Hkv + (size_t) h) * (size_t) D;
            for (int32_t d = 0; d < D; d++) {
                float v = deq[(size_t) t * (size_t) D + (size_t) d];
                o[d] = err_only ? v - xr[d] : v;
            }
        }
    }
out:
    free(rows);
    free(deq);
    free(codes);
    free(meta);
    return st;
}

enum oscar_status osc_calib_attend(const struct oscar_calib_heldout * h, int64_t n, const float * q, const float * k,
                                   const float * v, int32_t n_threads, float * out) {
    struct oscar_model_config cfg = {0};
    cfg.n_head = h->n_head;
    cfg.n_head_kv = h->n_head_kv;
    cfg.head_dim = h->head_dim;
    cfg.n_layer = h->n_layer;
    cfg.n_embd = h->n_embd;
    int32_t seq_start[2] = {0, (int32_t) n};
    int32_t * pos = malloc((size_t) n * sizeof(int32_t));
    if (!pos) return osc_error(OSCAR_ERR_NOMEM, "attention: out of memory");
    for (int64_t t = 0; t < n; t++) pos[t] = (int32_t) t;
    struct oscar_capture_layer in = {.n_tokens = (int32_t) n, .n_seq = 1, .seq_start = seq_start, .pos = pos,
                                     .q = q, .k = k, .v = v, .config = &cfg};
    enum oscar_status st = oscar_attention_causal(&n_threads, 0, &in, out);
    free(pos);
    return st;
}

double osc_calib_wo_energy(const float * o, int64_t n, const float * wo, int32_t C, int32_t HqD, float * y) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int) n, C, HqD, 1.0f, o, HqD, wo, HqD, 0.0f, y, C);
    double s = 0.0;
    for (size_t i = 0; i < (size_t) n * (size_t) C; i++) s += (double) y[i] * (double) y[i];
    return s;
}

enum oscar_status oscar_calib_postwo_error(const struct oscar_calib_heldout * h, int32_t layer,
                                           const struct oscar_calib_method * m, const struct oscar_calib_params * p,
                                           double * rel_err) {
    int32_t Hq = h->n_head, Hkv = h->n_head_kv, D = h->head_dim, g = Hq / Hkv, C = h->n_embd;
    int64_t nmax = 0;
    for (int32_t s = 0; s < h->n_seq; s++) {
        int64_t n = h->seq_start[s + 1] - h->seq_start[s];
        if (n > nmax) nmax = n;
    }
    size_t qsz = (size_t) nmax * (size_t) Hq * (size_t) D, ksz = (size_t) nmax * (size_t) Hkv * (size_t) D;
    float * qr = malloc(qsz * sizeof(float)), * kr = malloc(ksz * sizeof(float)), * vr = malloc(ksz * sizeof(float));
    float * kq = malloc(ksz * sizeof(float)), * vq = malloc(ksz * sizeof(float));
    float * o = malloc(qsz * sizeof(float)), * oh = malloc(qsz * sizeof(float)), * ob = malloc(qsz * sizeof(float));
    float * y = malloc((size_t) nmax * (size_t) C * sizeof(float));
    double * kc = malloc((size_t) Hkv * sizeof(double)), * vc = malloc((size_t) Hkv * sizeof(double));
    enum oscar_status st = OSCAR_ERR_NOMEM;
    double num = 0.0, den = 0.0;
    if (!qr || !kr || !vr || !kq || !vq || !o || !oh || !ob || !y || !kc || !vc) {
        st = osc_error(OSCAR_ERR_NOMEM, "post-W_O error: out of memory");
        goto out;
    }
    struct oscar_int2_params base = osc_calib_int2_params(p, D);
    base.scheme = m->scheme;
    for (int32_t hh = 0; hh < Hkv; hh++) {
        int32_t ci = m->n_clip > 1 ? hh : 0;
        kc[hh] = m->k_clip ? (double) m->k_clip[(size_t) layer * (size_t) m->n_clip + (size_t) ci] : m->k_clip_const;
        vc[hh] = m->v_clip ? (double) m->v_clip[(size_t) layer * (size_t) m->n_clip + (size_t) ci] : m->v_clip_const;
        if (m->scheme == OSCAR_INT2_SYM) kc[hh] = vc[hh] = 0.0;
    }
    for (int32_t s = 0; s < h->n_seq; s++) {
        int64_t r0 = h->seq_start[s], n = h->seq_start[s + 1] - r0;
        const float * q = h->q[layer] + (size_t) r0 * (size_t) Hq * (size_t) D;
        const float * k = h->k[layer] + (size_t) r0 * (size_t) Hkv * (size_t) D;
        const float * v = h->v[layer] + (size_t) r0 * (size_t) Hkv * (size_t) D;
        if ((st = osc_calib_attend(h, n, q, k, v, p->n_threads, o)) != OSCAR_OK) goto out;
        osc_calib_rotate(q, n, Hq, g, D, m, layer, false, false, qr);
        osc_calib_rotate(k, n, Hkv, 1, D, m, layer, false, false, kr);
        osc_calib_rotate(v, n, Hkv, 1, D, m, layer, true, false, vr);
        if ((st = osc_calib_store_tiered(kr, n, Hkv, D, p->sink, p->recent, &base, kc, false, kq)) != OSCAR_OK ||
            (st = osc_calib_store_tiered(vr, n, Hkv, D, p->sink, p->recent, &base, vc, false, vq)) != OSCAR_OK ||
            (st = osc_calib_attend(h, n, qr, kq, vq, p->n_threads, ob)) != OSCAR_OK) {
            goto out;
        }
        osc_calib_rotate(ob, n, Hq, g, D, m, layer, true, true, oh); // o' · R_Vᵀ
        for (size_t i = 0; i < (size_t) n * (size_t) Hq * (size_t) D; i++) oh[i] -= o[i];
        num += osc_calib_wo_energy(oh, n, h->wo[layer], C, Hq * D, y);
        den += osc_calib_wo_energy(o, n, h->wo[layer], C, Hq * D, y);
    }
    *rel_err = num / (den > 0.0 ? den : 1e-300);
    st = OSCAR_OK;
out:
    free(qr); free(kr); free(vr); free(kq); free(vq); free(o); free(oh); free(ob); free(y); free(kc); free(vc);
    return st;
}
