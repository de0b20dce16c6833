// lloyd-max.c - the Lloyd-Max INT2 variant of OSCAR's single-scale prefill
// kernel (method.md §10): standardise the (clipped) row, 3 fixed thresholds,
// uniformly spaced levels stored in the ordinary (scale, zero) format so the
// decode kernel is unchanged. One group per row only.
//
// Pinned reduction order (the reference reduces in fp32 in an unspecified tree
// order; we pin a sequential fp64 sum so the oracle can match bit for bit):
//   mu    = (float)(sum_d (double)x_d / D)
//   sigma = (float)sqrt(sum_d ((double)x_d - (double)mu)^2 / D + 1e-8)
//   z_d   = (x_d - mu) / sigma                       (fp32)
//   c_d   = [z >= -T] + [z >= 0] + [z >= T],  T = 0.9810652732849121f
//   scale = LM_K * sigma, zero = LM_Z0 - mu / scale  (fp32; constants rounded from fp64)
#include "quant/quant-internal.h"

#include <math.h>

#define LM_T      0.9810652732849121
#define LM_C0_EFF (-1.5095585584640503)
#define LM_SPAN   3.0191171169281006
#define LM_RATIO  1.16

void oscar_lloyd_max_constants(float * threshold, float * scale_per_sigma, float * zero0) {
    *threshold       = (float) LM_T;
    *scale_per_sigma = (float) (LM_SPAN / 3.0 * LM_RATIO);
    *zero0           = (float) (-LM_C0_EFF / (LM_SPAN / 3.0));
}

int osc_lloyd_max_row(const float * x, int32_t D, uint8_t * codes, float * scale_out,
                      float * zero_out) {
    float t, k, z0;
    oscar_lloyd_max_constants(&t, &k, &z0);
    double s = 0.0;
    float  m = x[0], M = x[0];
    for (int32_t d = 0; d < D; d++) {
        s += (double) x[d];
        m = fminf(m, x[d]);
        M = fmaxf(M, x[d]);
    }
    float  mu = (float) (s / (double) D);
    double v  = 0.0;
    for (int32_t d = 0; d < D; d++) {
        double e = (double) x[d] - (double) mu;
        v += e * e;
    }
    float sigma = (float) sqrt(v / (double) D + 1e-8);
    for (int32_t d = 0; d < D; d++) {
        float z  = (x[d] - mu) / sigma;
        codes[d] = (uint8_t) ((z >= -t) + (z >= 0.0f) + (z >= t));
    }
    float scale = k * sigma;
    *scale_out  = scale;
    *zero_out   = z0 - mu / scale;
    return (M - m) < 1e-8f;
}
