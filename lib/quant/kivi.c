// kivi.c - KIVI/OScaR-granularity INT2 (method.md §18.2): K per channel over a
// block of B tokens, V per token over groups of Gv channels, asymmetric with an
// INTEGER zero point:
//   scale = (max - min)/3, zero_q = nearbyint(-min/scale),
//   c = clamp(nearbyint(x/scale + zero_q), 0, 3), x^ = c*scale + bias, bias = -zero_q*scale
//   (nearbyint = round half to even; all fp32). Special cases: min = max = 0 -> [-1, 1];
//   min = max != 0 -> scale = 0, c = 0, bias = min (counted as degenerate).
// Stored meta per channel (K) / group (V): [scale, bias] in meta_dtype.
// Refuses NaN/Inf input and invalid shapes. No rotation or token scaling here.
#include "quant/quant-internal.h"

#include <math.h>

#define KIVI_MAX 1024

struct oscar_kivi_params oscar_kivi_default_params(int32_t head_dim) {
    struct oscar_kivi_params p = {
        .head_dim = head_dim, .k_block_tokens = 32, .v_group_size = 32, .meta_dtype = OSCAR_META_F16,
    };
    return p;
}

static enum oscar_status check_params(const struct oscar_kivi_params * p) {
    int32_t D = p->head_dim, B = p->k_block_tokens, G = p->v_group_size;
    if (D < 4 || D > KIVI_MAX || D % 4 != 0 || B < 4 || B > KIVI_MAX || B % 4 != 0 || G < 1 || D % G != 0)
        return osc_error(OSCAR_ERR_INVALID, "kivi: bad shape (D %d, K block %d, V group %d)", D, B, G);
    if ((unsigned) p->meta_dtype > OSCAR_META_BF16)
        return osc_error(OSCAR_ERR_INVALID, "kivi: unknown meta dtype %d", (int) p->meta_dtype);
    return OSCAR_OK;
}

// Codes for n values x[i * stride]; returns 1 if degenerate.
static int kivi_group(const float * x, int64_t stride, int32_t n, uint8_t * c, float * scale_out,
                      float * bias_out) {
    float m = x[0], M = x[0];
    for (int32_t i = 1; i < n; i++) {
        m = fminf(m, x[i * stride]);
        M = fmaxf(M, x[i * stride]);
    }
    m += 0.0f;   // canonical zero sign (see int2.c)
    M += 0.0f;
    if (m == 0.0f && M == 0.0f) {
        m = -1.0f;
        M = 1.0f;
    }
    if (m == M) {
        for (int32_t i = 0; i < n; i++) c[i] = 0;
        *scale_out = 0.0f;
        *bias_out  = m;
        return 1;
    }
    float scale  = (M - m) / 3.0f;
    float zero_q = nearbyintf(-m / scale);
    for (int32_t i = 0; i < n; i++) {
        float t = nearbyintf(x[i * stride] / scale + zero_q);
        c[i]    = (uint8_t) (t <= 0.0f ? 0 : t >= 3.0f ? 3 : (int) t);
    }
    *scale_out = scale;
    *bias_out  = -zero_q * scale;
    return 0;
}

enum oscar_status oscar_kivi_quantize_k_block(const struct oscar_kivi_params * p,
                                              const float * x, int64_t row_stride,
                                              uint8_t * codes, void * meta,
                                              struct oscar_quant_stats * stats) {
    enum oscar_status st = check_params(p);
    if (st != OSCAR_OK) return st;
    int32_t D = p->head_dim, B = p->k_block_tokens;
    for (int32_t t = 0; t < B; t++) {
        st = oscar_quant_check_finite("kivi K block", x + t * row_stride, 1, D);
        if (st != OSCAR_OK) return osc_error_prefix(st, "token %d of the block", t);
    }
    uint8_t c[KIVI_MAX];
    int degenerate = 0;
    for (int32_t d = 0; d < D; d++) {
        float scale, bias;
        degenerate |= kivi_group(x + d, row_stride, B, c, &scale, &bias);
        osc_pack_int2(c, B, codes + (int64_t) d * (B / 4));
        oscar_meta_store(p->meta_dtype, meta, (size_t) (2 * d), scale);
        oscar_meta_store(p->meta_dtype, meta, (size_t) (2 * d + 1), bias);
    }
    if (stats) {
        stats->n_rows += 1;
        stats->n_degenerate += degenerate;
    }
    return OSCAR_OK;
}

void oscar_kivi_dequantize_k_block(const struct oscar_kivi_params * p, const uint8_t * codes,
                                   const void * meta, float * out, int64_t row_stride) {
    int32_t D = p->head_dim, B = p->k_block_tokens;
    uint8_t c[KIVI_MAX];
    for (int32_t d = 0; d < D; d++) {
        osc_unpack_int2(codes + (int64_t) d * (B / 4), B, c);
        float scale = oscar_meta_load(p->meta_dtype, meta, (size_t) (2 * d));
        float bias  = oscar_meta_load(p->meta_dtype, meta, (size_t) (2 * d + 1));
        for (int32_t t = 0; t < B; t++) out[t * row_stride + d] = (float) c[t] * scale + bias;
    }
}

enum oscar_status oscar_kivi_quantize_v_rows(const struct oscar_kivi_params * p,
                                             const float * x, int64_t n_rows,
                                             uint8_t * codes, void * meta,
                                             struct oscar_quant_stats * stats) {
    enum oscar_status st = check_params(p);
    if (st != OSCAR_OK) return st;
    int32_t D = p->head_dim, G = p->v_group_size, ng = D / G;
    st = oscar_quant_check_finite("kivi V", x, n_rows, D);
    if (st != OSCAR_OK) return st;
    uint8_t c[KIVI_MAX];
    int64_t n_degenerate = 0;
    for (int64_t r = 0; r < n_rows; r++) {
        int degenerate = 0;
        for (int32_t g = 0; g < ng; g++) {
            float scale, bias;
            degenerate |= kivi_group(x + r * D + g * G, 1, G, c + g * G, &scale, &bias);
            oscar_meta_store(p->meta_dtype, meta, (size_t) (r * 2 * ng + 2 * g), scale);
            oscar_meta_store(p->meta_dtype, meta, (size_t) (r * 2 * ng + 2 * g + 1), bias);
        }
        osc_pack_int2(c, D, codes + r * (D / 4));
        n_degenerate += degenerate;
    }
    if (stats) {
        stats->n_rows += n_rows;
        stats->n_degenerate += n_degenerate;
    }
    return OSCAR_OK;
}

void oscar_kivi_dequantize_v_rows(const struct oscar_kivi_params * p, const uint8_t * codes,
                                  const void * meta, int64_t n_rows, float * out) {
    int32_t D = p->head_dim, G = p->v_group_size, ng = D / G;
    uint8_t c[KIVI_MAX];
    for (int64_t r = 0; r < n_rows; r++) {
        osc_unpack_int2(codes + r * (D / 4), D, c);
        for (int32_t g = 0; g < ng; g++) {
            float scale = oscar_meta_load(p->meta_dtype, meta, (size_t) (r * 2 * ng + 2 * g));
            float bias  = oscar_meta_load(p->meta_dtype, meta, (size_t) (r * 2 * ng + 2 * g + 1));
            for (int32_t i = 0; i < G; i++) out[r * D + g * G + i] = (float) c[g * G + i] * scale + bias;
        }
    }
}
