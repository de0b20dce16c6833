// decode-attention.cuh - fused decode attention over the paged, tiered KV cache
// (method.md §13): one query per sequence, GQA, BF16 sink / INT2 middle / BF16
// recent tiers read through block tables, split-K across the sequence, a
// log-sum-exp merge kernel, and the output multiplied by R_V^T (or left in
// the rotated space when R_V is folded into W_O). The BF16 baseline is the
// same kernel on a cache whose every token sits in the BF16 "sink" tier.
//
// Layouts (device, identical to struct oscar_kv_cache, kv-cache.h):
//   hp_k, hp_v      bf16  [S_hp, Hkv, D]
//   q_k, q_v        uint8 [S_q, Hkv, D/4]   quartered INT2 codes
//   q_k_meta, ...   fp32, fp16 or bf16 [S_q, Hkv, 2]   (scale, zero): one group per row (G = D)
//   seq_info        int32 [n_seq, 4]: n_sink, n_int2, n_recent, len
//   sink_pt/int2_pt/recent_pt  int32 page ids [n_seq, *_stride]
// Position p: sink if p < n_sink (page sink_pt[p / ps]); INT2 if p < n_sink + n_int2
// (index j = p - n_sink, page int2_pt[j / ps]); else recent ring slot r = p % ring_slots,
// page recent_pt[r / ps]. Physical slot = page * ps + offset.
//
// Numerics: scores and accumulation in fp32 on tensor cores: q and the softmax
// weights are split into bf16 hi + lo parts (relative error ~2^-17), INT2 codes
// and BF16 rows are exact bf16 operands; INT2 rows are dequantized as
// (c - zero) * scale with fp32 scale/zero (the fp32-dequant reference, not the
// bf16-dequant emulation).
//
// Shapes: head_dim 64, 128 or 256 (one kernel instance each) and GQA groups of
// 1..16 query heads per KV head. A CTA covers at most 8 query heads on the BF16
// tiers and 4 * 256 / D on the INT2 tier (16, 8, 4: the accumulators' register
// budget); larger groups are cut into equal head chunks on more CTAs, which
// re-read the chunk's KV rows (from L2 when they run together). At D 256 the
// BF16 tiers' CTAs also split the output dims in two halves (both compute the
// scores). Refuses other head_dims, groups > 16, G != D, page size not a power of two.
#ifndef OSCAR_KERNELS_DECODE_ATTENTION_CUH
#define OSCAR_KERNELS_DECODE_ATTENTION_CUH

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "quant/quant.h"
#include "util/error.h"

struct oscar_cuda_kv_view {
    int32_t n_head_kv, head_dim, page_size, ring_slots;
    int32_t meta_dtype;                 // enum oscar_quant_meta_dtype of (scale, zero): f32, f16, bf16
    const uint16_t * hp_k, * hp_v;
    const uint8_t * q_k, * q_v;
    const void * q_k_meta, * q_v_meta;
    const int32_t * seq_info;           // [n_seq, 4]
    const int32_t * sink_pt, * int2_pt, * recent_pt;
    int32_t sink_pt_stride, int2_pt_stride, recent_pt_stride;
};

struct oscar_cuda_decode_args {
    struct oscar_cuda_kv_view kv;
    int32_t n_seq, n_head;              // B, Hq
    int32_t splits[3];                  // splits per tier: sink, INT2, recent (>= 1 each)
    const float * q;                    // [B, Hq, D] rotated query (q . R_K), fp32
    const float * rv_t;                 // [D, D] R_V^T (rv_t[e*D + d] = R_V[d][e]) or NULL: rotated output
    float * o_part;                     // scratch [B, Hq, S, D], S = splits[0] + splits[1] + splits[2]
    float * lse_part;                   // scratch [B, Hq, S]
    float * out;                        // [B, Hq, D] fp32
};

#define OSCAR_CUDA_DECODE_MAX_GROUP 16        // query heads per KV head
#define OSCAR_CUDA_DECODE_DEFAULT_SPLITS 64   // per tier
#define OSCAR_CUDA_DECODE_MAX_SPLITS 128      // per tier (the merge kernel's shared memory)

// OSCAR_OK when the kernels cover head_dim and n_head query heads over n_head_kv KV
// heads; else OSCAR_ERR_UNSUPPORTED with a message naming the shape and what is built.
enum oscar_status oscar_cuda_decode_supports(int32_t head_dim, int32_t n_head, int32_t n_head_kv);
// Split counts that fill the device: max_len[3] = the longest tier run of each
// kind in the batch. BF16-only caches put everything in tier 0. max_splits caps
// each tier (<= 0: the default).
void oscar_cuda_decode_splits(int32_t n_seq, int32_t n_head_kv, int32_t n_sm, int32_t max_splits,
                              const int64_t max_len[3], int32_t splits[3]);
// Launches the split kernel and the merge kernel on `stream`. Asynchronous.
enum oscar_status oscar_cuda_decode_attention(const struct oscar_cuda_decode_args * a, void * stream);

#ifdef __cplusplus
}
#endif
#endif
