// eval-transform.cuh - a method's K or V rows as its cache stores them, on the
// GPU (the transform of lib/verify/kv-transform.c, row by row, bit for bit):
//   y  = x.R   (fp64 sums, k ascending, rounded once to fp32; then the engine's diag(H_b) if
//              engine_hadamard; Hadamard: the fp32 butterfly of oscar_fwht_f32; identity: a
//              copy), bf16-rounded if hp_bf16
//   HP rows:   out = y.R^T (f16(y).R^T if hp_f16)
//   INT2 rows: out_c = Q_c(y).R^T for every candidate c: clip (sort order statistic or
//              bisection, lib/quant int2-clip.c), ASYM min/max, SYM mid-rise or Lloyd-Max codes
//              with the same IEEE operations as lib/quant, metadata rounded to its dtype,
//              dequantized as (code - zero) * scale; or SAW-INT4, KIVI V, the fork's Q2_0.
// One warp per (row, head); lane l holds dims l + 32k, k < D/32 (warp-row.cuh).
#ifndef OSCAR_KERNELS_EVAL_TRANSFORM_CUH
#define OSCAR_KERNELS_EVAL_TRANSFORM_CUH

#include <stdint.h>

extern "C" {
#include "backend/backend.h"
}

struct osc_eval_transform {
    int32_t head_dim, n_head_kv, n_rot;
    int32_t rot;                // enum oscar_eval_rot
    float had_scale;            // (float) (1 / sqrt(D)), as oscar_fwht_f32
    const float * R, * Rt;      // device [n_rot, D, D] and the transposes (MATRIX)
    const float * x;            // device [n_rows / Hkv, Hkv, D]
    // device [n_rows / Hkv]: bits 0-1: 0 HP, 1 INT2, 2 INT2 clipped by bisection whatever bisect
    // says; bit 2: the row was written by the prefill path (lloyd_max)
    const uint8_t * int2_row;
    const int32_t * clip_idx;   // device [n_cand, Hkv]: oscar_clip_index (q2_0: the index within a
                                // group, min((int) (r * n), n - 1)), -1 = no clip
    int32_t n_cand;
    int32_t sym, bisect, hp_bf16;
    int32_t meta_dtype;         // enum oscar_quant_meta_dtype
    int32_t group_size;
    // 0: the INT2 quantizer above; > 0: SAW-INT4 instead (lib/quant int4-bdh.c): the block
    // Hadamard of this order on the row, bf16, per-row min/max INT4, dequantized and rotated back
    int32_t int4_order;
    int32_t kivi_group;         // > 0: KIVI's V quantizer instead (lib/quant kivi.c): per-row groups of
                                // this many channels, integer zero point (meta_dtype its metadata)
    int32_t kivi_round_values;  // 1: KIVI V's dequantized values rounded to meta_dtype (OScaR's hfma2)
    int32_t hp_only;            // 1: every row's quantized value is its HP value (KIVI and OScaR K,
                                // whose INT2 values come per block: osc_cuda_kivi_k_blocks)
    int32_t lloyd_max;          // 1: rows of the prefill path use the Lloyd-Max scheme after the clip
    float lm_t, lm_k, lm_z0;    // its constants (oscar_lloyd_max_constants)
    int32_t q2_0;               // 1: the llama.cpp fork's Q2_0 instead (lib/quant q2-0.c, no in-quant WHT)
    float q2_levels[4], q2_t;   // its constants (oscar_q2_0_constants)
    int32_t hp_f16;             // 1: HP rows are f16(y).R^T (the fork's F16 HP buffer)
    int32_t engine_hadamard;    // 0, or b: diag(H_b) after .R (MATRIX only; undone before .R^T)
    const float * mu;           // device [Hkv, D] or NULL: the key mean, subtracted before the
                                // rotation and added back to every output (kv-transform.c)
    int32_t diff;               // 1: out = value - x
    float * out;                // device [n_cand][n_rows, D] at stride out_stride floats
    float * out_hp;             // device [n_rows, D] or NULL: every row's HP value as well (diff ignored)
    int64_t out_stride, n_rows;
};

enum oscar_status osc_cuda_eval_transform(const struct osc_eval_transform * a, void * stream);

// KIVI K (lib/quant kivi.c quantize_k_block + dequantize_k_block, bit for bit): for every block
// start blocks[i] (device; rows [b, b + B) of a [rows, Hkv, D] batch), KV head and channel, the
// B values of hp quantized per channel and their dequantized values written into q.
// round_values: each dequantized value rounded to meta_dtype (OScaR). q may be hp (in place).
enum oscar_status osc_cuda_kivi_k_blocks(const float * hp, float * q, const int32_t * blocks, int32_t n_blocks,
                                         int32_t B, int32_t Hkv, int32_t D, int32_t meta_dtype, bool round_values,
                                         void * stream);

// OScaR K (lib/quant oscar-omni.c, omni-k.cu), T tokens of Hkv heads [T, Hkv, D]:
// osc_cuda_omni_k_tokens: per token the Hadamard of each head, the norm n over all heads (fp64 in
// (head, channel) order; 1 if not > 0), y = bf16(bf16(Hx) / n) into y, n into norm [T], and the
// HP row H(y * n) into hp (oscar_omni_k_scale_token + oscar_omni_k_unscale_token).
enum oscar_status osc_cuda_omni_k_tokens(const float * x, float * y, float * norm, float * hp, int64_t T, int32_t Hkv,
                                         int32_t D, void * stream);
// The rows of the blocks [blocks[i], blocks[i] + B) of y (dequantized in place by
// osc_cuda_kivi_k_blocks): out = H(y * norm), the rows' INT2-tier K.
enum oscar_status osc_cuda_omni_k_unscale(const float * y, const float * norm, const int32_t * blocks, int32_t n_blocks,
                                          int32_t B, int32_t Hkv, int32_t D, float * out, void * stream);

#endif
