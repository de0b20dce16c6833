// attention.h - reference attention: dense (causal prefill / decode, GQA) and
// the tiered fused attention OSCAR serves (BF16 sink + INT2 middle + BF16
// recent as split-K partial softmaxes merged by log-sum-exp, method.md §12-13).
//
// Everything here runs in the ROTATED space: callers pass q . R_K and read
// o . R_V (apply R_V^T themselves, or fold it into W_O). No rotation happens
// in this module.
//
// GQA grouping is contiguous: KV head h serves query heads [h*g, (h+1)*g),
// g = Hq / Hkv. Softmax scale is D^-1/2, natural exp.
//
// Shapes: q [Tq, Hq, D], k/v [Tk, Hkv, D], out [Tq, Hq, D]. Query row i sits at
// absolute position q_pos0 + i; key row t at position t. Causal masking hides
// keys with t > q_pos0 + i.
//
// Usage (decode over a tiered cache, see kv-cache.h):
//   oscar_attn_tiered_decode(cache, seq, q_rot, Hq, &opts, out);   // q_rot [Hq, D]
#ifndef OSCAR_ATTENTION_H
#define OSCAR_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>

#include "util/error.h"

struct oscar_kv_cache;   // kv-cache.h

enum oscar_attn_accum {
    OSCAR_ACCUM_F32 = 0,  // fp32 scores, softmax and accumulation
    OSCAR_ACCUM_F64 = 1,  // fp64 everywhere after loading fp32 operands
};

struct oscar_attn_shape {
    int32_t n_head;       // Hq
    int32_t n_head_kv;    // Hkv (divides Hq)
    int32_t head_dim;     // D
};
enum oscar_status oscar_attn_shape_check(const struct oscar_attn_shape * s);

// Dense attention. causal = false lets every query see all n_kv keys.
// q [n_q, Hq, D], k/v [n_kv, Hkv, D], out [n_q, Hq, D]. A fully masked query row
// (possible only if q_pos0 < 0) gives zeros.
enum oscar_status oscar_attn_dense(const struct oscar_attn_shape * s,
                                   const float * q, int64_t n_q, int64_t q_pos0,
                                   const float * k, const float * v, int64_t n_kv,
                                   bool causal, enum oscar_attn_accum accum, float * out);

// ---- split-K partials and the log-sum-exp merge (method.md §13) -------------
// One partial over a set of keys for n_rows query rows: o_s = acc / l and
// lse_s = m + ln l, or lse_s = -inf (o_s = 0) when the split saw no key.
// o [n_rows, D], lse [n_rows].
//
// Merge: over splits with lse != -inf, M = max lse; out = sum e^(lse-M) o_s / sum e^(lse-M),
// evaluated as the running-max recurrence of the reference stage-2 kernel.
// o_parts [n_splits, n_rows, D], lse_parts [n_splits, n_rows], out [n_rows, D];
// rows where every split is empty get zeros, rows with a NaN split NaN. lse_out (may be NULL)
// gets the merged lse.
void oscar_attn_merge(int32_t n_splits, int64_t n_rows, int32_t D, const float * o_parts,
                      const float * lse_parts, float * out, float * lse_out);

// Partial softmax of the g query heads of one KV head against an explicit key
// list (fp32 rows). q [g, D] (scaled by D^-1/2 inside), k/v [n, D] with row strides
// (floats), mask_pos: if >= 0, keys with key_pos[t] > mask_pos are skipped
// (key_pos may be NULL when mask_pos < 0). o [g, D], lse [g].
void oscar_attn_partial_rows(int32_t g, int32_t D, const float * q,
                             const float * k, int64_t k_stride, const float * v,
                             int64_t v_stride, int64_t n, const int64_t * key_pos,
                             int64_t mask_pos, float * o, float * lse);

// ---- blocked causal rows (rows.c) ------------------------------------------
// n query rows of one head against the keys of one KV head: row r sees keys
// p = 0 .. t[r] (first[r] .. t[r] with a window, below), key p read from (k_alt, v_alt) when lo[r] <= p < hi[r] and
// from (k, v) otherwise (lo = hi = NULL: always (k, v)). Key row p sits at
// p·row_stride floats in each buffer. q row r at q + r·q_stride, out row r at
// out + r·out_stride. Softmax scale `scale` (0: D^-1/2), fp32 scores and weights, fp64
// normaliser. Row r's result does not depend on the other rows of the call
// (same bits for n = 1 and n = 64). scratch: oscar_attn_rows_scratch(n,
// max t + 1, D) floats, 8-byte aligned.
// kt / kt_alt (optional): k / k_alt already transposed by oscar_attn_keys_transpose
// (from key 0), so that calls for many blocks and query heads share one copy.
// window > 0 (sliding-window attention): row r sees only keys p > t[r] - window,
// the last `window` keys up to itself; 0 = all keys 0 .. t[r] (the same bits as
// before the window existed).
struct oscar_attn_keys {
    int32_t       head_dim;
    size_t        row_stride;
    const float * k, * v;
    const float * k_alt, * v_alt;
    const float * kt, * kt_alt;
    int64_t       window;
    float         scale;   // 0 = D^-1/2 (Gemma's query_pre_attn_scalar^-1/2 otherwise)
};
// The score scale a consumer applies for its `attn_scale` parameter (0 = D^-1/2), in fp64: every
// consumer that rebuilds softmax(q.k * scale) from captured rows uses this one definition.
static inline double oscar_attn_score_scale(float attn_scale, int32_t D) {
    return attn_scale > 0.0f ? (double) attn_scale : 1.0 / sqrt((double) D);
}
size_t oscar_attn_rows_scratch(int32_t n_rows, int64_t n_keys, int32_t head_dim);
// Keys [0, n_keys) of k (rows row_stride apart) in the tiled transposed layout
// kt takes: oscar_attn_keys_transposed_size floats.
size_t oscar_attn_keys_transposed_size(int64_t n_keys, int32_t head_dim);
void   oscar_attn_keys_transpose(const float * k, size_t row_stride, int64_t n_keys, int32_t head_dim, float * out);
void oscar_attn_rows(const struct oscar_attn_keys * kv, int32_t n, const float * q, size_t q_stride,
                     const int64_t * t, const int64_t * lo, const int64_t * hi, float * out, size_t out_stride,
                     float * scratch);

// ---- tiered attention over a paged cache (kv-cache.h) -----------------------
struct oscar_attn_tiered_opts {
    int32_t n_splits_hp;     // splits per BF16 tier run (reference: 8 for HP); >= 1
    int32_t n_splits_int2;   // splits for the INT2 tier (reference: <= 8); >= 1
    int32_t min_block_kv;    // split length rounds up to a multiple of this (reference 32)
};
struct oscar_attn_tiered_opts oscar_attn_tiered_default_opts(void);   // 8, 8, 32

// Decode: one query per sequence at position L = seq_len (the newest token,
// already appended to the cache). q [Hq, D] rotated (and NOT centred: K-mean
// centring, when the cache has it, is a per-query constant logit shift).
// out [Hq, D]. INT2 rows are dequantized with the cache's params (fp32 unless
// bf16_dequant). Each tier (sink, INT2, recent) is split into ceil-rounded
// splits; partials are merged with oscar_attn_merge.
enum oscar_status oscar_attn_tiered_decode(const struct oscar_kv_cache * c, int32_t seq,
                                           const float * q, int32_t n_head,
                                           const struct oscar_attn_tiered_opts * opts,
                                           float * out);

// Prefill/extend (method.md §12): queries q [n_q, Hq, D] at positions
// [P0, P0 + n_q) where P0 = the cached length of seq (the cache is NOT modified),
// attend to the dequantized cached prefix (every tier, unmasked) and to the
// chunk's own rotated rows k/v [n_q, Hkv, D] causally (bf16-rounded like the
// cache's HP tier; K-mean centred if the cache centres). out [n_q, Hq, D].
enum oscar_status oscar_attn_tiered_prefill(const struct oscar_kv_cache * c, int32_t seq,
                                            const float * q, int64_t n_q, int32_t n_head,
                                            const float * k, const float * v,
                                            const struct oscar_attn_tiered_opts * opts,
                                            float * out);

#endif
