// int4-bdh.c - SAW-INT4: block-diagonal Hadamard rotation + token-wise INT4
// (method.md §19), bit-exact with the fused kernel's operation order:
//   1. y = x * (float)(1/sqrt(b))            (fp32)
//   2. per block of b dims, stages s = 0..log2(b)-1: (lo, up) -> (lo + up, lo - up)
//   3. round every element through bf16
//   4. scale = max(M - m, 1e-8)/15, zero = -m/scale; q = clamp(trunc(y/scale + zero + 0.5), 0, 15)
//   5. byte i = q[i] | q[i + D/2] << 4; meta [scale, zero]
// Refuses NaN/Inf rows and orders that are not powers of two dividing D.
#include "quant/quant-internal.h"

#include <math.h>
#include <string.h>

#define INT4_MAX_D 1024

// Not oscar_fwht_f32: SAW-INT4 scales by 1/sqrt(b) BEFORE the butterflies
// (method.md §19.2 step 1), and the INT4 codes must match that rounding order.
void oscar_int4_bdh_rotate_row(float * x, int32_t D, int32_t b) {
    if (b <= 1) return;
    const float inv = (float) (1.0 / sqrt((double) b));
    for (int32_t i = 0; i < D; i++) x[i] *= inv;
    for (int32_t base = 0; base < D; base += b) {
        float * y = x + base;
        for (int32_t h = 1; h < b; h <<= 1) {
            for (int32_t i = 0; i < b; i++) {
                if (i & h) continue;
                float lo = y[i], up = y[i + h];
                y[i]     = lo + up;
                y[i + h] = lo - up;
            }
        }
    }
}

static enum oscar_status check_params(const struct oscar_int4_bdh_params * p) {
    int32_t D = p->head_dim, b = p->hadamard_order;
    if (D < 2 || D > INT4_MAX_D || D % 2 != 0)
        return osc_error(OSCAR_ERR_INVALID, "int4-bdh: head_dim %d must be even in [2, %d]", D, INT4_MAX_D);
    if (b < 1 || (b & (b - 1)) != 0 || D % b != 0)
        return osc_error(OSCAR_ERR_INVALID, "int4-bdh: Hadamard order %d must be a power of two dividing %d",
                         b, D);
    if ((unsigned) p->meta_dtype > OSCAR_META_BF16)
        return osc_error(OSCAR_ERR_INVALID, "int4-bdh: unknown meta dtype %d", (int) p->meta_dtype);
    return OSCAR_OK;
}

enum oscar_status oscar_int4_bdh_quantize_rows(const struct oscar_int4_bdh_params * p,
                                               const float * x, int64_t n_rows,
                                               uint8_t * codes, void * meta,
                                               struct oscar_quant_stats * stats) {
    enum oscar_status st = check_params(p);
    if (st != OSCAR_OK) return st;
    int32_t D = p->head_dim, h = D / 2;
    st = oscar_quant_check_finite("int4-bdh quantize", x, n_rows, D);
    if (st != OSCAR_OK) return st;
    float   y[INT4_MAX_D];
    uint8_t q[INT4_MAX_D];
    int64_t n_degenerate = 0;
    for (int64_t r = 0; r < n_rows; r++) {
        memcpy(y, x + r * D, (size_t) D * sizeof(float));
        oscar_int4_bdh_rotate_row(y, D, p->hadamard_order);
        oscar_bf16_round_array(y, (size_t) D);
        float m = y[0], M = y[0];
        for (int32_t i = 1; i < D; i++) {
            m = fminf(m, y[i]);
            M = fmaxf(M, y[i]);
        }
        m += 0.0f;   // canonical zero sign (see int2.c)
        M += 0.0f;
        float scale = fmaxf(M - m, 1e-8f) / 15.0f;
        float zero  = -m / scale;
        n_degenerate += (M - m) < 1e-8f;
        for (int32_t i = 0; i < D; i++) q[i] = (uint8_t) osc_code_trunc(y[i] / scale + zero + 0.5f, 15);
        uint8_t * out = codes + r * h;
        for (int32_t i = 0; i < h; i++) out[i] = (uint8_t) (q[i] | q[i + h] << 4);
        oscar_meta_store(p->meta_dtype, meta, (size_t) (2 * r), scale);
        oscar_meta_store(p->meta_dtype, meta, (size_t) (2 * r + 1), zero);
    }
    if (stats) {
        stats->n_rows += n_rows;
        stats->n_degenerate += n_degenerate;
    }
    return OSCAR_OK;
}

enum oscar_status oscar_int4_bdh_dequantize_rows(const struct oscar_int4_bdh_params * p,
                                                 const uint8_t * codes, const void * meta,
                                                 int64_t n_rows, bool unrotate, float * out) {
    enum oscar_status st = check_params(p);
    if (st != OSCAR_OK) return st;
    int32_t D = p->head_dim, h = D / 2;
    for (int64_t r = 0; r < n_rows; r++) {
        float scale = oscar_meta_load(p->meta_dtype, meta, (size_t) (2 * r));
        float zero  = oscar_meta_load(p->meta_dtype, meta, (size_t) (2 * r + 1));
        const uint8_t * in = codes + r * h;
        float * o = out + r * D;
        for (int32_t i = 0; i < h; i++) {
            o[i]     = ((float) (in[i] & 15) - zero) * scale;
            o[i + h] = ((float) (in[i] >> 4) - zero) * scale;
        }
        // diag(H_b) is symmetric and orthogonal, so the same transform undoes it.
        if (unrotate) oscar_int4_bdh_rotate_row(o, D, p->hadamard_order);
    }
    return OSCAR_OK;
}
