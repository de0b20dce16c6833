// optr-quant.cuh - OptR's straight-through INT2 quantizer on the GPU (the live path of
// lib/rotation/optr-loss.c osc_optr_quant_rows and its quant_back), on flat rows [n, D]:
//   forward: clip at the row's threshold (the sort order statistic or the bisection of
//            lib/quant int2-clip.c), ASYM min/max codes from the fp32 (scale, zero), values
//            (code − zero_m)·scale_m with the metadata rounded to its dtype, and the
//            linearisation the backward needs (struct osc_optr_lin: the code residual c, the
//            clip flags and threshold, each group's first arg-max / arg-min and fp32 scale);
//   backward: dx_i = [not clipped]·(dx̂_i + [i = argmax]·σ/3 − [i = argmin]·σ/3),
//            σ = Σ_group dx̂_k·c_k (fp64 in a fixed butterfly order).
// Bit contract: with the same fp32 rows the forward's values and linearisation equal the
// CPU's bit for bit (explicit IEEE steps, no contraction); the backward differs from the CPU
// only in σ's summation order. One warp per row: D 64, 128, 256; any group size dividing D.
#ifndef OSCAR_KERNELS_OPTR_QUANT_CUH
#define OSCAR_KERNELS_OPTR_QUANT_CUH

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "rotation/optr-internal.h"

// One quantizer as the kernels take it (osc_optr_dev_quant_of).
struct osc_optr_dev_quant {
    int32_t head_dim, group_size, n_group;
    int32_t meta_dtype;         // enum oscar_quant_meta_dtype
    int32_t clip_idx;           // oscar_clip_index of the ratio; -1: no clip
    int32_t clip_bisect;        // 1: the bisection threshold, 0: the exact order statistic
};
// OSCAR_ERR_UNSUPPORTED naming what is missing when the kernels do not cover p (ASYM only, D 64,
// 128 or 256, no bf16 dequantization).
enum oscar_status osc_optr_dev_quant_of(const struct oscar_int2_params * p, struct osc_optr_dev_quant * q);

// The linearisation in device memory (the fields of struct osc_optr_lin).
struct osc_optr_dev_lin {
    float * c;                  // [n, D]
    float * clampv;             // [n]
    uint8_t * clipped;          // [n, D]: 1 clipped above, 2 below, 0 not
    int16_t * imax, * imin;     // [n, n_group]: -1 for a degenerate group
    float * scale;              // [n, n_group]
};

// y [n, D] -> yh [n, D] and lin (device arrays). *nonfinite (device) is set to 1 when a row holds
// a NaN or Inf (that row is left unwritten); it is never cleared here. Asynchronous on stream.
enum oscar_status osc_cuda_optr_quant_fwd(const struct osc_optr_dev_quant * q, const float * y, int64_t n, float * yh,
                                          const struct osc_optr_dev_lin * lin, int32_t * nonfinite, void * stream);
// dyh [n, D] -> dy [n, D] through the straight-through quantizer of lin. drop_range: leave the
// σ/3 range terms out (a wrong gradient: the test's control). Asynchronous on stream.
enum oscar_status osc_cuda_optr_quant_back(const struct osc_optr_dev_quant * q, const struct osc_optr_dev_lin * lin,
                                           const float * dyh, int64_t n, float * dy, bool drop_range, void * stream);

// Test hook: the forward on host rows y [n, D] (copied there and back): yh [n, D] and the
// host arrays of lin, to compare with osc_optr_quant_rows bit for bit.
enum oscar_status osc_cuda_optr_quant_rows(const struct oscar_int2_params * p, const float * y, int32_t n, float * yh,
                                           struct osc_optr_lin * lin);

#ifdef __cplusplus
}
#endif
#endif
