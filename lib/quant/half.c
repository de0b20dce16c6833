// half.c - fp32 <-> bf16 / fp16 conversions (round to nearest even) and the
// metadata store/load used by every quantizer. Refuses nothing: NaN stays NaN
// (quiet), overflow rounds to inf, fp16 subnormals are produced exactly.
#include "quant/quant.h"

#include <math.h>
#include <string.h>

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

uint16_t oscar_f32_to_bf16(float x) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t) ((u >> 16) | 0x0040u);  // quiet NaN
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;   // RNE on the dropped 16 bits; carries into the exponent correctly
    return (uint16_t) (u >> 16);
}

float oscar_bf16_to_f32(uint16_t h) {
    return bits_f32((uint32_t) h << 16);
}

float oscar_bf16_round(float x) {
    return oscar_bf16_to_f32(oscar_f32_to_bf16(x));
}

void oscar_bf16_round_array(float * x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = oscar_bf16_round(x[i]);
}

void oscar_f32_to_bf16_array(const float * src, uint16_t * dst, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = oscar_f32_to_bf16(src[i]);
}

uint16_t oscar_f32_to_f16(float x) {
    uint32_t u    = f32_bits(x);
    uint16_t sign = (uint16_t) ((u >> 16) & 0x8000u);
    uint32_t a    = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t) (sign | 0x7e00u);          // NaN
    if (a >= 0x477ff000u) return (uint16_t) (sign | 0x7c00u);         // >= 65520 rounds to inf
    if (a < 0x38800000u) {
        // Result is fp16 subnormal (or zero): value = m * 2^-24, m = round(|x| * 2^24).
        // |x| * 2^24 is exact in fp32 (a power-of-two scaling of a normal/subnormal),
        // and nearbyintf rounds half to even in the default rounding mode.
        float m = nearbyintf(bits_f32(a) * 16777216.0f);
        return (uint16_t) (sign | (uint16_t) m);
    }
    // Normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits.
    uint32_t r   = a - ((uint32_t) (127 - 15) << 23);
    uint32_t lsb = (r >> 13) & 1u;
    r += 0x0fffu + lsb;
    return (uint16_t) (sign | (uint16_t) (r >> 13));
}

float oscar_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t) (h & 0x8000u) << 16;
    uint32_t e    = (h >> 10) & 0x1fu;
    uint32_t m    = h & 0x3ffu;
    if (e == 0) {
        float v = (float) m * (1.0f / 16777216.0f);   // exact: m * 2^-24
        return sign ? -v : v;
    }
    if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
    return bits_f32(sign | ((e + 127 - 15) << 23) | (m << 13));
}

enum oscar_status oscar_meta_dtype_parse(const char * text, enum oscar_quant_meta_dtype * out) {
    static const struct { const char * name, * alias; enum oscar_quant_meta_dtype t; } names[] = {
        {"float32", "f32", OSCAR_META_F32}, {"float16", "f16", OSCAR_META_F16}, {"bfloat16", "bf16", OSCAR_META_BF16}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(text, names[i].name) || !strcmp(text, names[i].alias)) {
            *out = names[i].t;
            return OSCAR_OK;
        }
    return osc_error(OSCAR_ERR_INVALID, "scale dtype '%s': float32 (f32), float16 (f16) or bfloat16 (bf16)", text);
}

size_t oscar_meta_dtype_size(enum oscar_quant_meta_dtype t) {
    return t == OSCAR_META_F32 ? 4 : 2;
}

void oscar_meta_store(enum oscar_quant_meta_dtype t, void * meta, size_t i, float v) {
    switch (t) {
    case OSCAR_META_F32:  ((float *) meta)[i] = v; break;
    case OSCAR_META_F16:  ((uint16_t *) meta)[i] = oscar_f32_to_f16(v); break;
    case OSCAR_META_BF16: ((uint16_t *) meta)[i] = oscar_f32_to_bf16(v); break;
    }
}

float oscar_meta_load(enum oscar_quant_meta_dtype t, const void * meta, size_t i) {
    switch (t) {
    case OSCAR_META_F32:  return ((const float *) meta)[i];
    case OSCAR_META_F16:  return oscar_f16_to_f32(((const uint16_t *) meta)[i]);
    case OSCAR_META_BF16: return oscar_bf16_to_f32(((const uint16_t *) meta)[i]);
    }
    return NAN;
}

enum oscar_status oscar_quant_check_finite(const char * what, const float * x,
                                           int64_t n_rows, int32_t D) {
    for (int64_t r = 0; r < n_rows; r++) {
        for (int32_t d = 0; d < D; d++) {
            float v = x[r * D + d];
            if (!isfinite(v)) {
                return osc_error(OSCAR_ERR_NUMERIC, "%s: row %lld dim %d is %s", what,
                                 (long long) r, d, isnan(v) ? "NaN" : "Inf");
            }
        }
    }
    return OSCAR_OK;
}
