// quant.h - KV-cache quantizers as OSCAR serves them (bit-exact CPU reference).
//
// Pure functions on row-major arrays; no allocation that outlives a call.
// Every quantizer first scans its input and returns OSCAR_ERR_NUMERIC naming
// the first row with a NaN/Inf (nothing is written in that case).
//
// Byte layouts (see docs/method.md §8, §18.2, §19):
//
//   INT2 row (D dims, G group size, ng = D/G groups), "quartered" packing:
//     codes[i] = c[i] | c[i+D/4] << 2 | c[i+D/2] << 4 | c[i+3D/4] << 6,  i in [0, D/4)
//     meta     = [scale_0, zero_0, scale_1, zero_1, ...]  (2*ng values of meta_dtype)
//     dequant  x^ = (c - zero) * scale  (fp32, or the bf16 decode-kernel emulation)
//   INT4-BDH row: codes[i] = q[i] | q[i + D/2] << 4, i in [0, D/2); meta [scale, zero].
//   KIVI K block (B tokens x D channels of one KV head), per channel d:
//     codes[d*B/4 + j] = c[j] | c[j+B/4] << 2 | c[j+B/2] << 4 | c[j+3B/4] << 6
//     meta[d] = [scale, bias]; x^ = c * scale + bias   (bias = -zero_q*scale)
//   KIVI V row: INT2 quartered packing as above, meta per group [scale, bias].
//
// Usage:
//   struct oscar_int2_params p = oscar_int2_default_params(128);
//   p.clip_ratio = 0.96; p.clip_algo = OSCAR_CLIP_SORT;
//   uint8_t codes[T * Hkv * 32]; float meta[T * Hkv * 2];
//   oscar_int2_quantize_rows(&p, k_rot, T * Hkv, codes, meta, &stats);  // k_rot [T, Hkv, D]
//
// Numerics: fp32 throughout with IEEE round-to-nearest division (the flush
// kernel's div_rn semantics, method.md §22.2), codes clamped to the level range,
// fp16/bf16 metadata by round-to-nearest-even. No FMA contraction (ISO C mode).
#ifndef OSCAR_QUANT_H
#define OSCAR_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

#define OSCAR_QUANT_FORMAT_VERSION 1

// ---- half-precision helpers (RNE; NaN stays NaN; overflow -> inf) -----------
uint16_t oscar_f32_to_bf16(float x);
float    oscar_bf16_to_f32(uint16_t h);
float    oscar_bf16_round(float x);            // f32 -> bf16 -> f32
uint16_t oscar_f32_to_f16(float x);            // IEEE binary16, subnormals kept
float    oscar_f16_to_f32(uint16_t h);
// Rounds n floats to bf16 precision in place.
void     oscar_bf16_round_array(float * x, size_t n);
// dst[i] = oscar_f32_to_bf16(src[i]), i < n, over the calling thread's OpenMP team (weight uploads).
void     oscar_f32_to_bf16_array(const float * src, uint16_t * dst, size_t n);

// Storage dtype of scale/zero metadata. Append-only.
enum oscar_quant_meta_dtype {
    OSCAR_META_F32  = 0,
    OSCAR_META_F16  = 1,
    OSCAR_META_BF16 = 2,
};
size_t oscar_meta_dtype_size(enum oscar_quant_meta_dtype t);   // 4, 2, 2
// "float32" | "float16" | "bfloat16", or the short "f32" | "f16" | "bf16" (the
// --scale-dtype of every tool). OSCAR_ERR_INVALID naming the accepted values.
enum oscar_status oscar_meta_dtype_parse(const char * text, enum oscar_quant_meta_dtype * out);
// Stores / loads one metadata value with RNE conversion.
void  oscar_meta_store(enum oscar_quant_meta_dtype t, void * meta, size_t i, float v);
float oscar_meta_load(enum oscar_quant_meta_dtype t, const void * meta, size_t i);

// Per-row clip threshold algorithm (method.md §9). Append-only.
enum oscar_clip_algo {
    OSCAR_CLIP_SORT   = 0, // tau = sort_ascending(|x|)[idx]          (prefill kernels)
    OSCAR_CLIP_BISECT = 1, // log2(D) bisection steps, count target D-idx (flush kernel)
    OSCAR_CLIP_FLUSH  = 2, // the flush kernel's rule: BISECT if D >= 64, else SORT
};

// INT2 code schemes sharing the storage format above. Append-only.
enum oscar_int2_scheme {
    // OSCAR default: per-group min/max after the clip.
    //   scale = max(M - m, 1e-8)/3, zero = -m/scale, c = clamp(trunc(x/scale + zero + 0.5), 0, 3)
    OSCAR_INT2_ASYM      = 0,
    // §10 Lloyd-Max variant (requires G == D): z = (x - mu)/sigma, thresholds 0, +-0.98106...
    //   scale = (LM_SPAN/3)*1.16*sigma, zero = 1.5 - mu/scale
    OSCAR_INT2_LLOYD_MAX = 1,
    // "Naive INT2" (§8.7): per-group SYMMETRIC, no rotation, no clip. Levels
    //   {-1.5, -0.5, +0.5, +1.5} * s with s = max(amax, 1e-8)/1.5 (mid-rise, reaches +-amax,
    //   zero is not a level). Stored as scale = s, zero = 1.5 so the ASYM dequant applies;
    //   c = clamp(trunc(x/s + 2), 0, 3) (ties go up).
    OSCAR_INT2_SYM       = 2,
};

struct oscar_int2_params {
    int32_t head_dim;                     // D: multiple of 4
    int32_t group_size;                   // G: divides D (0 means D)
    enum oscar_int2_scheme scheme;
    enum oscar_quant_meta_dtype meta_dtype;
    enum oscar_clip_algo clip_algo;       // ignored when clip_ratio <= 0 or scheme == SYM
    double clip_ratio;                    // r in [0, 1]; <= 0 disables (method.md §9.1)
    bool bf16_dequant;                    // emulate the GQA decode kernel: bf16 scale/zero and
                                          // bf16 arithmetic in (c - zero) * scale (§8.5)
};

// Statistics, accumulated (callers zero-initialise once; NULL is allowed).
struct oscar_quant_stats {
    int64_t n_rows;        // rows (or K blocks) quantized
    int64_t n_degenerate;  // rows/blocks where some group had range < 1e-8 (scale floored)
    int64_t n_clipped;     // elements changed by the clip
};

// D = head_dim, G = 128-by-default group: one (scale, zero) per row.
struct oscar_int2_params oscar_int2_default_params(int32_t head_dim);
// Returns OSCAR_OK or OSCAR_ERR_INVALID with a message (D, G, ratio, scheme combos).
enum oscar_status oscar_int2_params_check(const struct oscar_int2_params * p);
int32_t oscar_int2_n_groups(const struct oscar_int2_params * p);      // D / G
size_t  oscar_int2_code_bytes(const struct oscar_int2_params * p);    // D / 4 per row
size_t  oscar_int2_meta_bytes(const struct oscar_int2_params * p);    // 2 * ng * dtype size per row

// ---- clip thresholds (method.md §9) -----------------------------------------
// idx(r, D): -1 if r <= 0, else min(max(floor(r*D), 0), D-1), r*D in double.
int32_t oscar_clip_index(double ratio, int32_t D);
// tau = sort_ascending(|x|)[idx]; scratch holds D floats. idx in [0, D).
float   oscar_clip_tau_sort(const float * x, int32_t D, int32_t idx, float * scratch);
// Bisection: lo = 0, hi = max|x|; log2(D) times: mid = (lo+hi)*0.5f,
// count(|x| > mid) > D - idx ? lo = mid : hi = mid; returns hi. D a power of two.
float   oscar_clip_tau_bisect(const float * x, int32_t D, int32_t idx);
// Threshold for one row under p (clip algo + ratio); returns +inf when clipping is off.
float   oscar_clip_tau(const struct oscar_int2_params * p, const float * x, float * scratch);

// ---- INT2 (OSCAR storage format) ---------------------------------------------
// x [n_rows, D] -> codes [n_rows, D/4], meta [n_rows, 2*ng] (meta_dtype).
enum oscar_status oscar_int2_quantize_rows(const struct oscar_int2_params * p,
                                           const float * x, int64_t n_rows,
                                           uint8_t * codes, void * meta,
                                           struct oscar_quant_stats * stats);
// codes [n_rows, D/4], meta [n_rows, 2*ng] -> out [n_rows, D].
enum oscar_status oscar_int2_dequantize_rows(const struct oscar_int2_params * p,
                                             const uint8_t * codes, const void * meta,
                                             int64_t n_rows, float * out);
// The Lloyd-Max scheme's fp32 constants (lloyd-max.c): threshold T, scale per sigma, zero at mu = 0,
// for a quantizer written elsewhere (the CUDA simulation) to use the same bits.
void oscar_lloyd_max_constants(float * threshold, float * scale_per_sigma, float * zero0);
// Unpacked code of dim d from one packed row (0..3).
static inline int oscar_int2_code_at(const uint8_t * row_codes, int32_t D, int32_t d) {
    int32_t q = D / 4;
    return (row_codes[d % q] >> (2 * (d / q))) & 3;
}

// ---- INT4 with block-diagonal Hadamard (SAW-INT4, method.md §19) -----------
struct oscar_int4_bdh_params {
    int32_t head_dim;        // D: even
    int32_t hadamard_order;  // b: power of two dividing D (1 = no rotation)
    enum oscar_quant_meta_dtype meta_dtype;
};
// Raw rows x [n, D]: per row, x*(1/sqrt(b)) then in-place block FWHT (stages s = 0..,
// lower = x + x_p, upper = x_p - x), round through bf16, then per-row min/max INT4:
// scale = max(M-m, 1e-8)/15, zero = -m/scale, q = clamp(trunc(x/scale + zero + 0.5), 0, 15).
// codes [n, D/2], meta [n, 2].
enum oscar_status oscar_int4_bdh_quantize_rows(const struct oscar_int4_bdh_params * p,
                                               const float * x, int64_t n_rows,
                                               uint8_t * codes, void * meta,
                                               struct oscar_quant_stats * stats);
// out [n, D] = (q - zero)*scale in the rotated space; unrotate applies the
// (self-inverse) block Hadamard to return to the original basis.
enum oscar_status oscar_int4_bdh_dequantize_rows(const struct oscar_int4_bdh_params * p,
                                                 const uint8_t * codes, const void * meta,
                                                 int64_t n_rows, bool unrotate, float * out);
// The rotation step alone (fp32, same operation order as the quantizer, no bf16 rounding).
void oscar_int4_bdh_rotate_row(float * x, int32_t D, int32_t b);

// ---- KIVI / OScaR INT2: per-channel K over token blocks, per-token V groups --
// Integer zero point (method.md §18.2): scale = (max-min)/3, zero_q = nearbyint(-min/scale),
// c = clamp(nearbyint(x/scale + zero_q), 0, 3), x^ = c*scale + bias, bias = -zero_q*scale.
// min = max = 0 -> use [-1, 1]; otherwise min = max -> scale = 0, c = 0, bias = min.
struct oscar_kivi_params {
    int32_t head_dim;        // D: multiple of 4
    int32_t k_block_tokens;  // B: tokens per K block, multiple of 4 (OScaR: 32)
    int32_t v_group_size;    // Gv: divides D (OScaR: 32)
    enum oscar_quant_meta_dtype meta_dtype;
};
struct oscar_kivi_params oscar_kivi_default_params(int32_t head_dim);   // B 32, Gv 32, f16
// One K block: x rows t = 0..B-1 at x + t*row_stride (floats), D channels each.
// codes [D, B/4], meta [D, 2].
enum oscar_status oscar_kivi_quantize_k_block(const struct oscar_kivi_params * p,
                                              const float * x, int64_t row_stride,
                                              uint8_t * codes, void * meta,
                                              struct oscar_quant_stats * stats);
void oscar_kivi_dequantize_k_block(const struct oscar_kivi_params * p, const uint8_t * codes,
                                   const void * meta, float * out, int64_t row_stride);
// V rows x [n, D] -> codes [n, D/4], meta [n, 2*D/Gv].
enum oscar_status oscar_kivi_quantize_v_rows(const struct oscar_kivi_params * p,
                                             const float * x, int64_t n_rows,
                                             uint8_t * codes, void * meta,
                                             struct oscar_quant_stats * stats);
void oscar_kivi_dequantize_v_rows(const struct oscar_kivi_params * p, const uint8_t * codes,
                                  const void * meta, int64_t n_rows, float * out);

// ---- Q2_0: the OSCAR llama.cpp fork's KV-cache type (GGML_TYPE_Q2_0 = 42) ---
// Follows FutureMLS-Lab/OSCAR branch zhongzhu/llamacpp @ 4570ea609 (CPU reference:
// ggml/src/ggml-quants.c quantize_row_q2_0_ref / dequantize_row_q2_0; block_q2_0 in
// ggml/src/ggml-common.h). A row of k elements (k % 32 == 0; the fork passes one token's
// whole K or V row, n_head_kv * head_dim) is cut into groups of g = 128 elements (g = 32
// when k < 128; the last group is shorter when 128 does not divide k). Per group, fp32:
//   mean = (sum of x, sequential) / n;  t = x - mean
//   [hadamard] t = orthonormal WHT(t)  (off under LLAMA_KV_NO_HADAMARD=1)
//   [0 < r < 1] tau = sort_ascending(|t|)[min((int)(r*n), n-1)], t = clamp(t, -tau, tau)
// Per 32-element block of the group, 12 bytes little-endian {f16 d, f16 m, u8 qs[8]}:
//   sigma = sqrtf(sum t^2 / 32); d = f16(sigma) (RNE); m = f16(mean) in the group's first
//   block, 0 in the others; code c = [v >= -T] + [v >= 0] + [v >= T] on v = t * (1/sigma)
//   (1/sigma = 0 when sigma <= 1e-8), T = 0.6745f; element 4j+e at bits 2e of qs[j].
// Dequantize: t = L[c] * f32(d), L = {-0.9816, -0.4528, 0.4528, 0.9816}, [hadamard] WHT,
// x^ = t + f32(m of the group's first block). 3 bits per element. Not the INT2 format
// above (no scale/zero), and not byte-compatible with the SGLang cache.
#define OSCAR_Q2_0_BLOCK       32
#define OSCAR_Q2_0_BLOCK_BYTES 12
#define OSCAR_Q2_0_GROUP       128
struct oscar_q2_0_params {
    bool hadamard;       // the fork's in-quant WHT (its default; false = LLAMA_KV_NO_HADAMARD=1)
    float clip_ratio;    // LLAMA_KV_CLIP_RATIO (fp32, as atof -> float); clips only in (0, 1)
};
size_t oscar_q2_0_row_bytes(int64_t k);    // k / 32 * 12
// The levels L and the threshold T above (for the CUDA simulation).
void oscar_q2_0_constants(float levels[4], float * threshold);
// x [k] -> out [oscar_q2_0_row_bytes(k)]. INVALID for bad k / ratio (or a Hadamard over a
// last group of 96, which the fork computes out of bounds), NUMERIC for NaN/Inf.
enum oscar_status oscar_q2_0_quantize_row(const struct oscar_q2_0_params * p, const float * x, int64_t k,
                                          uint8_t * out, struct oscar_quant_stats * stats);
enum oscar_status oscar_q2_0_dequantize_row(const struct oscar_q2_0_params * p, const uint8_t * in, int64_t k,
                                            float * out);
// ---- OScaR: Hadamard + omni-token scaling, KIVI-granularity INT2 (oscar-omni.c) ----
// Follows ZunhaiSu/OScaR-KV-Quant @ d2109f5 (method.md §18.2). K of one token, every KV head h:
//   r_h = H x_h (normalized Sylvester FWHT of size D, fp32), n = sqrt(sum_{h,c} r_{h,c}^2)
//   (fp64 sum in (h, c) order, rounded to fp32; 1 when not > 0), y_h = bf16(bf16(r_h) / n).
// K is quantized per channel over blocks of B tokens (the KIVI K block above, per head);
// V rows are bf16(H v) quantized per token in groups of Gv (the KIVI V rows above).
// Dequantized values are rounded to meta_dtype (the kernel's bf16/fp16 hfma2; f32: no rounding).
// Restoring K: x^_h = H (y^_h * n), which multiplies the logit q.k by n exactly as the kernel does.
struct oscar_omni_params {
    int32_t n_head_kv;              // Hkv: the norm spans every KV head of a token
    struct oscar_kivi_params kivi;  // D (power of two), B, Gv, meta dtype
};
struct oscar_omni_params oscar_omni_default_params(int32_t n_head_kv, int32_t head_dim); // B 32, Gv 32, bf16
enum oscar_status oscar_omni_params_check(const struct oscar_omni_params * p);
// One token's K x [Hkv*D] -> y [Hkv*D] (rotated, scaled, bf16 values) and *norm.
enum oscar_status oscar_omni_k_scale_token(const struct oscar_omni_params * p, const float * x, float * y,
                                           float * norm);
// Back to the model's basis: out_h = H (y_h * norm). y and out [Hkv*D] may alias.
void oscar_omni_k_unscale_token(const struct oscar_omni_params * p, const float * y, float norm, float * out);
// K block of B scaled tokens y [B, Hkv, D] -> codes [Hkv, D, B/4], meta [Hkv, D, 2] (meta_dtype).
enum oscar_status oscar_omni_quantize_k_block(const struct oscar_omni_params * p, const float * y,
                                              uint8_t * codes, void * meta, struct oscar_quant_stats * stats);
// -> y^ [B, Hkv, D] in the scaled, rotated basis.
void oscar_omni_dequantize_k_block(const struct oscar_omni_params * p, const uint8_t * codes, const void * meta,
                                   float * out);
// Raw V rows x [n, D] -> codes [n, D/4], meta [n, 2*D/Gv] of bf16(H x).
enum oscar_status oscar_omni_quantize_v_rows(const struct oscar_omni_params * p, const float * x, int64_t n_rows,
                                             uint8_t * codes, void * meta, struct oscar_quant_stats * stats);
// -> out [n, D], rotated back by H when unrotate.
void oscar_omni_dequantize_v_rows(const struct oscar_omni_params * p, const uint8_t * codes, const void * meta,
                                  int64_t n_rows, bool unrotate, float * out);

// ---- effective bits per element (method.md §14) -----------------------------
// b = b_code + meta_bits/G; BPE(L) = b + (n_sink + n_recent)/L * (hp_bits - b), with the
// BF16 share capped at 1 (L <= n_sink + n_recent gives hp_bits).
double oscar_bpe(int32_t b_code, int32_t meta_bits_per_group, int32_t group_size,
                 int64_t n_sink, int64_t n_recent, int64_t context_len, int32_t hp_bits);
// The same for the INT2 layout of p (2-bit codes, one (scale, zero) of p->meta_dtype per
// group of p->group_size, 0 = head_dim) with BF16 sink and recent tiers: 2.28 at 128k
// with 16-bit metadata, G = 128, sink 64 + recent 256.
double oscar_int2_bpe(const struct oscar_int2_params * p, int64_t n_sink, int64_t n_recent, int64_t context_len);

// Scans rows [n, D] for NaN/Inf; OSCAR_ERR_NUMERIC naming `what`, the row and dim.
enum oscar_status oscar_quant_check_finite(const char * what, const float * x,
                                           int64_t n_rows, int32_t D);

#endif
