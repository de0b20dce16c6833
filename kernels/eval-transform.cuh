// eval-transform.cuh - a method's K or V rows as its cache stores them, on the
// GPU (the transform of lib/verify/kv-transform.c, row by row, bit for bit):
//   y  = x.R   (fp64 sums, k ascending, rounded once to fp32; Hadamard: the fp32
//              butterfly of oscar_fwht_f32; identity: a copy), bf16-rounded if hp_bf16
//   HP rows:   out = y.R^T
//   INT2 rows: out_c = Q_c(y).R^T for every candidate c: clip (sort order statistic
//              or bisection, lib/quant int2-clip.c), ASYM min/max or SYM mid-rise codes
//              with the same IEEE operations as lib/quant int2.c, metadata rounded to
//              its dtype, dequantized as (code - zero) * scale.
// One warp per (row, head); lane l holds dims l + 32k, k < D/32.
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
    const uint8_t * int2_row;   // device [n_rows / Hkv]: 0 HP, else INT2 (2: clip by bisection whatever bisect says)
    const int32_t * clip_idx;   // device [n_cand, Hkv]: oscar_clip_index, -1 = no clip
    int32_t n_cand;
    int32_t sym, bisect, hp_bf16;
    int32_t meta_dtype;         // enum oscar_quant_meta_dtype
    int32_t group_size;
    // 0: the INT2 quantizer above; > 0: SAW-INT4 instead (lib/quant int4-bdh.c): the block
    // Hadamard of this order on the row, bf16, per-row min/max INT4, dequantized and rotated back
    int32_t int4_order;
    int32_t kivi_group;         // > 0: KIVI's V quantizer instead (lib/quant kivi.c): per-row groups of
                                // this many channels, integer zero point (meta_dtype its metadata)
    int32_t hp_only;            // 1: every row's quantized value is its HP value (KIVI K, whose INT2
                                // values come per block: osc_cuda_kivi_k_blocks)
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
enum oscar_status osc_cuda_kivi_k_blocks(const float * hp, float * q, const int32_t * blocks, int32_t n_blocks,
                                         int32_t B, int32_t Hkv, int32_t D, int32_t meta_dtype, void * stream);

#endif
