// dense.c - plain dense attention (the reference everything else is compared
// against): causal or full, GQA with contiguous grouping, softmax scale
// D^-1/2, fp32 or fp64 accumulation. Two passes per query row (max, then
// exp-sum and weighted V sum); one scratch buffer per call.
//
// q [n_q, Hq, D], k/v [n_kv, Hkv, D], out [n_q, Hq, D].
#include "attention/attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum oscar_status oscar_attn_shape_check(const struct oscar_attn_shape * s) {
    if (s->n_head < 1 || s->n_head_kv < 1 || s->n_head % s->n_head_kv != 0 || s->head_dim < 1)
        return osc_error(OSCAR_ERR_INVALID, "attention: bad shape Hq %d, Hkv %d, D %d", s->n_head, s->n_head_kv,
                         s->head_dim);
    return OSCAR_OK;
}

// One query row against keys [0, n_vis) of KV head h, fp64 accumulation.
static void row_f64(const float * q, const float * k, const float * v, int64_t n_vis, int64_t stride, int32_t D,
                    double * sc, double * acc, float * out) {
    double scale = 1.0 / sqrt((double) D), m = -INFINITY, l = 0.0;
    for (int64_t t = 0; t < n_vis; t++) {
        double s = 0.0;
        for (int32_t d = 0; d < D; d++) s += (double) q[d] * (double) k[t * stride + d];
        sc[t] = s * scale;
        m     = fmax(m, sc[t]);
    }
    memset(acc, 0, (size_t) D * sizeof *acc);
    for (int64_t t = 0; t < n_vis; t++) {
        double p = exp(sc[t] - m);
        l += p;
        for (int32_t d = 0; d < D; d++) acc[d] += p * (double) v[t * stride + d];
    }
    for (int32_t d = 0; d < D; d++) out[d] = n_vis > 0 ? (float) (acc[d] / l) : 0.0f;
}

static void row_f32(const float * q, const float * k, const float * v, int64_t n_vis, int64_t stride, int32_t D,
                    float * sc, float * acc, float * out) {
    float scale = (float) (1.0 / sqrt((double) D)), m = -INFINITY, l = 0.0f;
    for (int64_t t = 0; t < n_vis; t++) {
        float s = 0.0f;
        for (int32_t d = 0; d < D; d++) s += q[d] * k[t * stride + d];
        sc[t] = s * scale;
        m     = fmaxf(m, sc[t]);
    }
    memset(acc, 0, (size_t) D * sizeof *acc);
    for (int64_t t = 0; t < n_vis; t++) {
        float p = expf(sc[t] - m);
        l += p;
        for (int32_t d = 0; d < D; d++) acc[d] += p * v[t * stride + d];
    }
    for (int32_t d = 0; d < D; d++) out[d] = n_vis > 0 ? acc[d] / l : 0.0f;
}

enum oscar_status oscar_attn_dense(const struct oscar_attn_shape * s, const float * q, int64_t n_q, int64_t q_pos0,
                                   const float * k, const float * v, int64_t n_kv, bool causal,
                                   enum oscar_attn_accum accum, float * out) {
    enum oscar_status st = oscar_attn_shape_check(s);
    if (st != OSCAR_OK) return st;
    int32_t Hq = s->n_head, Hkv = s->n_head_kv, D = s->head_dim, g = Hq / Hkv;
    size_t  el = accum == OSCAR_ACCUM_F64 ? sizeof(double) : sizeof(float);
    void *  sc = malloc((size_t) (n_kv > 0 ? n_kv : 1) * el), * acc = malloc((size_t) D * el);
    if (!sc || !acc) {
        free(sc), free(acc);
        return osc_error(OSCAR_ERR_NOMEM, "attention: %lld scores", (long long) n_kv);
    }
    int64_t stride = (int64_t) Hkv * D;
    for (int64_t i = 0; i < n_q; i++) {
        int64_t n_vis = n_kv;
        if (causal) {
            n_vis = q_pos0 + i + 1;
            if (n_vis > n_kv) n_vis = n_kv;
            if (n_vis < 0) n_vis = 0;
        }
        for (int32_t hq = 0; hq < Hq; hq++) {
            int32_t h = hq / g;
            const float * qr = q + (i * Hq + hq) * D;
            float * o = out + (i * Hq + hq) * D;
            if (accum == OSCAR_ACCUM_F64) row_f64(qr, k + h * D, v + h * D, n_vis, stride, D, sc, acc, o);
            else row_f32(qr, k + h * D, v + h * D, n_vis, stride, D, sc, acc, o);
        }
    }
    free(sc), free(acc);
    return OSCAR_OK;
}
