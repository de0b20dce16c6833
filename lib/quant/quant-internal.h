// quant-internal.h - helpers shared by the quantizer files (not public API).
#ifndef OSCAR_QUANT_INTERNAL_H
#define OSCAR_QUANT_INTERNAL_H

#include "quant/quant.h"

// Largest level L: code = clamp(trunc(t), 0, L), written as a comparison ladder so a
// NaN t (only possible for overflowing degenerate rows) maps to 0 without UB.
static inline int osc_code_trunc(float t, int L) {
    int c = 0;
    for (int k = 1; k <= L; k++) c += (t >= (float) k);
    return c;
}

// Quartered 2-bit packing of n codes (n % 4 == 0): out[i] holds i, i+n/4, i+n/2, i+3n/4.
void osc_pack_int2(const uint8_t * c, int32_t n, uint8_t * out);
void osc_unpack_int2(const uint8_t * in, int32_t n, uint8_t * c);

// Lloyd-Max row codes (method.md §10): codes [D], scale/zero of the single group.
// Returns 1 if the row is degenerate (max - min < 1e-8), else 0.
int osc_lloyd_max_row(const float * x, int32_t D, uint8_t * codes, float * scale, float * zero);

// Dequantizes one INT2 row (no parameter checks; p must have passed
// oscar_int2_params_check). codes [D/4], meta_row [2*ng] of p->meta_dtype, out [D].
void osc_int2_dequant_row(const struct oscar_int2_params * p, const uint8_t * codes,
                          const void * meta_row, float * out);

#endif
