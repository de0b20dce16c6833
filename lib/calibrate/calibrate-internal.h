// calibrate-internal.h - helpers shared by metrics.c, clip.c and gate.c.
#ifndef OSCAR_CALIBRATE_INTERNAL_H
#define OSCAR_CALIBRATE_INTERNAL_H

#include "calibrate/calibrate.h"

// out [n, H, D] = x [n, H, D] with head j rotated by the rotation of KV head
// j / g (rot NULL or returning NULL: copy).
void osc_calib_rotate(const float * x, int64_t n, int32_t H, int32_t g, int32_t D, const struct oscar_calib_method * m,
                      int32_t layer, bool is_v, bool transpose, float * out);
// Tiered storage of one sequence's rotated rows x [n, Hkv, D] as the engine
// holds them after a final prefill chunk (method.md §11.3): sink and recent
// rows bf16-rounded, the middle INT2-quantized per KV head with clip[h]
// (clip ratios [Hkv]), dequantized to out [n, Hkv, D]. err_only: out gets
// (dequantized - x) on INT2 rows and 0 elsewhere.
enum oscar_status osc_calib_store_tiered(const float * x, int64_t n, int32_t Hkv, int32_t D, int32_t sink,
                                         int32_t recent, const struct oscar_int2_params * base, const double * clip,
                                         bool err_only, float * out);
// Exact causal attention of one sequence: q [n, Hq, D], k/v [n, Hkv, D] -> out [n, Hq, D].
enum oscar_status osc_calib_attend(const struct oscar_calib_heldout * h, int64_t n, const float * q, const float * k,
                                   const float * v, int32_t n_threads, float * out);
// Σ‖o W_Oᵀ‖² for o [n, Hq*D], W_O [C, Hq*D]; y [n, C] scratch.
double osc_calib_wo_energy(const float * o, int64_t n, const float * wo, int32_t C, int32_t HqD, float * y);
// Base INT2 params of the run (scheme ASYM, sort clip, group, scale dtype).
struct oscar_int2_params osc_calib_int2_params(const struct oscar_calib_params * p, int32_t D);

#endif
