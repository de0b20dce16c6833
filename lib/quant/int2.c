// int2.c - OSCAR INT2 quantizer: asymmetric (default), symmetric ("naive")
// and the Lloyd-Max variant, all in the serving storage format (quartered
// codes + interleaved scale/zero), and the matching dequantizer.
//
// D = head_dim, G = group size, ng = D/G. Bit-exact contract (method.md §8):
//   scale = max(M - m, 1e-8f) / 3.0f, zero = -m / scale   (fp32, IEEE division)
//   c = clamp(trunc(x / scale + zero + 0.5f), 0, 3)       (codes from fp32 scale/zero;
//                                                          meta rounded only when stored)
// Refuses NaN/Inf input (OSCAR_ERR_NUMERIC naming the row) and invalid params.
#include "quant/quant-internal.h"

#include <math.h>
#include <string.h>

#define INT2_MAX_D 1024

struct oscar_int2_params oscar_int2_default_params(int32_t head_dim) {
    struct oscar_int2_params p = {
        .head_dim     = head_dim,
        .group_size   = head_dim,
        .scheme       = OSCAR_INT2_ASYM,
        .meta_dtype   = OSCAR_META_F32,
        .clip_algo    = OSCAR_CLIP_SORT,
        .clip_ratio   = 0.0,
        .bf16_dequant = false,
    };
    return p;
}

int32_t oscar_int2_n_groups(const struct oscar_int2_params * p) {
    return p->head_dim / (p->group_size > 0 ? p->group_size : p->head_dim);
}

size_t oscar_int2_code_bytes(const struct oscar_int2_params * p) {
    return (size_t) p->head_dim / 4;
}

size_t oscar_int2_meta_bytes(const struct oscar_int2_params * p) {
    return 2 * (size_t) oscar_int2_n_groups(p) * oscar_meta_dtype_size(p->meta_dtype);
}

enum oscar_status oscar_int2_params_check(const struct oscar_int2_params * p) {
    int32_t D = p->head_dim, G = p->group_size > 0 ? p->group_size : p->head_dim;
    if (D < 4 || D > INT2_MAX_D || D % 4 != 0)
        return osc_error(OSCAR_ERR_INVALID, "int2: head_dim %d must be a multiple of 4 in [4, %d]",
                         D, INT2_MAX_D);
    if (D % G != 0)
        return osc_error(OSCAR_ERR_INVALID, "int2: group size %d does not divide head_dim %d", G, D);
    if (!(p->clip_ratio <= 1.0) || isnan(p->clip_ratio))
        return osc_error(OSCAR_ERR_INVALID, "int2: clip ratio %g outside [0, 1]", p->clip_ratio);
    if ((unsigned) p->scheme > OSCAR_INT2_SYM || (unsigned) p->meta_dtype > OSCAR_META_BF16 ||
        (unsigned) p->clip_algo > OSCAR_CLIP_FLUSH)
        return osc_error(OSCAR_ERR_INVALID, "int2: unknown scheme/meta dtype/clip algorithm");
    if (p->scheme == OSCAR_INT2_LLOYD_MAX && G != D)
        return osc_error(OSCAR_ERR_INVALID, "int2: Lloyd-Max needs one group per row (G %d != D %d)",
                         G, D);
    if (p->clip_ratio > 0 && p->clip_algo != OSCAR_CLIP_SORT && (D & (D - 1)) != 0)
        return osc_error(OSCAR_ERR_INVALID, "int2: bisection clip needs a power-of-two head_dim (%d)", D);
    return OSCAR_OK;
}

// ---- packing ---------------------------------------------------------------------

void osc_pack_int2(const uint8_t * c, int32_t n, uint8_t * out) {
    int32_t q = n / 4;
    for (int32_t i = 0; i < q; i++) {
        out[i] = (uint8_t) (c[i] | c[i + q] << 2 | c[i + 2 * q] << 4 | c[i + 3 * q] << 6);
    }
}

void osc_unpack_int2(const uint8_t * in, int32_t n, uint8_t * c) {
    int32_t q = n / 4;
    for (int32_t i = 0; i < q; i++) {
        for (int k = 0; k < 4; k++) c[i + k * q] = (in[i] >> (2 * k)) & 3;
    }
}

// ---- one row ------------------------------------------------------------------------

// Asymmetric min/max codes for one group of n values; returns 1 if degenerate.
static int asym_group(const float * x, int32_t n, uint8_t * c, float * scale_out, float * zero_out) {
    float m = x[0], M = x[0];
    for (int32_t i = 1; i < n; i++) {
        m = fminf(m, x[i]);
        M = fmaxf(M, x[i]);
    }
    m += 0.0f;   // canonical zero: -0.0 + 0.0 = +0.0, so fminf's choice of zero sign never leaks
    M += 0.0f;
    float range = M - m;
    float scale = fmaxf(range, 1e-8f) / 3.0f;
    float zero  = -m / scale;
    for (int32_t i = 0; i < n; i++) c[i] = (uint8_t) osc_code_trunc(x[i] / scale + zero + 0.5f, 3);
    *scale_out = scale;
    *zero_out  = zero;
    return range < 1e-8f;
}

// Symmetric mid-rise codes: levels (c - 1.5) * s, s = max(amax, 1e-8)/1.5.
static int sym_group(const float * x, int32_t n, uint8_t * c, float * scale_out, float * zero_out) {
    float amax = 0.0f;
    for (int32_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    float s = fmaxf(amax, 1e-8f) / 1.5f;
    for (int32_t i = 0; i < n; i++) c[i] = (uint8_t) osc_code_trunc(x[i] / s + 2.0f, 3);
    *scale_out = s;
    *zero_out  = 1.5f;
    return amax < 1e-8f;
}

// Quantizes one row (buf is clipped in place). Returns 1 if degenerate.
static int quantize_row(const struct oscar_int2_params * p, float * buf, float * scratch,
                        uint8_t * codes, void * meta_row, int64_t * n_clipped) {
    int32_t D = p->head_dim, G = p->group_size > 0 ? p->group_size : D, ng = D / G;
    uint8_t c[INT2_MAX_D];
    float   sz[2 * INT2_MAX_D];
    int degenerate = 0;
    if (p->scheme != OSCAR_INT2_SYM && p->clip_ratio > 0) {
        float tau = oscar_clip_tau(p, buf, scratch);
        for (int32_t d = 0; d < D; d++) {
            float y = buf[d] < -tau ? -tau : buf[d] > tau ? tau : buf[d];
            *n_clipped += (y != buf[d]);
            buf[d] = y;
        }
    }
    if (p->scheme == OSCAR_INT2_LLOYD_MAX) {
        degenerate = osc_lloyd_max_row(buf, D, c, &sz[0], &sz[1]);
    } else {
        for (int32_t g = 0; g < ng; g++) {
            int dg = p->scheme == OSCAR_INT2_SYM
                         ? sym_group(buf + g * G, G, c + g * G, &sz[2 * g], &sz[2 * g + 1])
                         : asym_group(buf + g * G, G, c + g * G, &sz[2 * g], &sz[2 * g + 1]);
            degenerate |= dg;
        }
    }
    for (int32_t i = 0; i < 2 * ng; i++) oscar_meta_store(p->meta_dtype, meta_row, (size_t) i, sz[i]);
    osc_pack_int2(c, D, codes);
    return degenerate;
}

enum oscar_status oscar_int2_quantize_rows(const struct oscar_int2_params * p,
                                           const float * x, int64_t n_rows,
                                           uint8_t * codes, void * meta,
                                           struct oscar_quant_stats * stats) {
    enum oscar_status st = oscar_int2_params_check(p);
    if (st != OSCAR_OK) return st;
    int32_t D = p->head_dim;
    st = oscar_quant_check_finite("int2 quantize", x, n_rows, D);
    if (st != OSCAR_OK) return st;

    size_t cb = oscar_int2_code_bytes(p), mb = oscar_int2_meta_bytes(p);
    float buf[INT2_MAX_D], scratch[INT2_MAX_D];
    int64_t n_degenerate = 0, n_clipped = 0;
    for (int64_t r = 0; r < n_rows; r++) {
        memcpy(buf, x + r * D, (size_t) D * sizeof(float));
        n_degenerate += quantize_row(p, buf, scratch, codes + r * (int64_t) cb,
                                     (uint8_t *) meta + r * (int64_t) mb, &n_clipped);
    }
    if (stats) {
        stats->n_rows += n_rows;
        stats->n_degenerate += n_degenerate;
        stats->n_clipped += n_clipped;
    }
    return OSCAR_OK;
}

void osc_int2_dequant_row(const struct oscar_int2_params * p, const uint8_t * codes,
                          const void * meta_row, float * out) {
    int32_t D = p->head_dim, G = p->group_size > 0 ? p->group_size : D, ng = D / G, q = D / 4;
    for (int32_t g = 0; g < ng; g++) {
        float scale = oscar_meta_load(p->meta_dtype, meta_row, (size_t) (2 * g));
        float zero  = oscar_meta_load(p->meta_dtype, meta_row, (size_t) (2 * g + 1));
        if (p->bf16_dequant) {
            // Decode GQA kernel: scale/zero cast to bf16, bf16 arithmetic (each op
            // computed in fp32 and rounded to bf16, as Triton does for bf16 tensors).
            scale = oscar_bf16_round(scale);
            zero  = oscar_bf16_round(zero);
        }
        for (int32_t d = g * G; d < (g + 1) * G; d++) {
            float c = (float) ((codes[d % q] >> (2 * (d / q))) & 3);
            out[d]  = p->bf16_dequant ? oscar_bf16_round(oscar_bf16_round(c - zero) * scale)
                                      : (c - zero) * scale;
        }
    }
}

enum oscar_status oscar_int2_dequantize_rows(const struct oscar_int2_params * p,
                                             const uint8_t * codes, const void * meta,
                                             int64_t n_rows, float * out) {
    enum oscar_status st = oscar_int2_params_check(p);
    if (st != OSCAR_OK) return st;
    size_t cb = oscar_int2_code_bytes(p), mb = oscar_int2_meta_bytes(p);
    for (int64_t r = 0; r < n_rows; r++)
        osc_int2_dequant_row(p, codes + r * (int64_t) cb, (const uint8_t *) meta + r * (int64_t) mb,
                             out + r * p->head_dim);
    return OSCAR_OK;
}
