// kv-cache.h - the paged, tiered KV cache OSCAR serves (one layer) and its
// BF16/INT2 demotion policy (method.md §11).
//
// Per sequence, positions form three contiguous tiers:
//   [0, n_sink)            BF16 sink     (HP pages, block table sink_pages)
//   [n_sink, +n_int2)      INT2 middle   (INT2 pages, block table int2_pages, tier-relative index)
//   [.., len)              BF16 recent   (HP ring of ring_slots slots, block table recent_pages,
//                                          position p lives in ring slot p % ring_slots)
// Every tier stores ROTATED rows (x . R), K optionally centred by mu_rot
// (method.md §17.4); HP tiers hold bf16-rounded rows.
//
// Pool byte layouts (S = pages * page_size slots, physical slot = page * page_size + offset):
//   hp_k, hp_v      uint16 bf16  [S_hp, Hkv, D]
//   q_k, q_v        uint8 codes  [S_q, Hkv, D/4]        (quant.h INT2 packing)
//   q_k_meta, ...   meta_dtype   [S_q, Hkv, 2*ng]       (interleaved scale, zero)
//
// The policy functions (oscar_kv_extend_layout, oscar_kv_flush_counter_init,
// oscar_kv_decode_plan, oscar_kv_radix_trim) are pure and mirror the reference
// allocator; the cache and struct oscar_tier_sim are built on them.
//
// Usage:
//   struct oscar_kv_cache_params p = oscar_kv_cache_default_params(Hkv, D);
//   struct oscar_kv_cache * c; oscar_kv_cache_init(&p, &c);
//   oscar_kv_cache_prefill(c, 0, k_rot, v_rot, T, true);           // [T, Hkv, D]
//   for each step: oscar_kv_cache_decode_append(c, 0, k1, v1, NULL); // [Hkv, D]
//                  oscar_attn_tiered_decode(c, 0, q_rot, Hq, &opts, out);
//   oscar_kv_cache_free(c);
#ifndef OSCAR_KV_CACHE_H
#define OSCAR_KV_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "quant/quant.h"
#include "util/error.h"

enum oscar_kv_tier {
    OSCAR_TIER_SINK   = 0,
    OSCAR_TIER_INT2   = 1,
    OSCAR_TIER_RECENT = 2,
};

// ---- policy (pure) -------------------------------------------------------------
// §11.3 _mixed_extend_layout_counts: half-open position ranges written by one
// prefill/extend chunk that takes the sequence from pre_len to S tokens.
struct oscar_tier_layout {
    int64_t hp_prefix_begin, hp_prefix_end;
    int64_t quant_begin, quant_end;
    int64_t hp_recent_begin, hp_recent_end;
};
void oscar_kv_extend_layout(int64_t pre_len, int64_t S, int64_t n_sink, int64_t n_recent,
                            bool is_final_chunk, struct oscar_tier_layout * out);
// max(0, (R + N_Q - 1) - hp_recent_count).
int32_t oscar_kv_flush_counter_init(int64_t n_recent, int32_t n_flush, int64_t hp_recent_count);
// One decode step (§11.4) for a request whose new token sits at position L:
//   flush = (*counter == 0); *counter = flush ? N_Q - 1 : *counter - 1;
//   for j in [0, N_Q): fp = L - R - (N_Q - 1) + j is demoted iff
//   flush && R > 0 && fp >= protected_len && fp >= 0 && is_hp[fp].
// is_hp [L] (1 = BF16). Writes the demoted positions to fp_out [N_Q] in order and
// returns their count.
int32_t oscar_kv_decode_plan(int32_t * counter, int64_t L, int64_t n_recent, int32_t n_flush,
                             int64_t protected_len, const uint8_t * is_hp, int64_t * fp_out);
// Radix tail trim: 0 if R <= 0 or c <= P, else min(ceil_page(min(R + max(1, K) - 1, c - P)), c - P).
int64_t oscar_kv_radix_trim(int64_t committed, int64_t n_sink, int64_t n_recent,
                            int64_t page_size, int64_t flush_tokens);

// Tier simulator: the tier of every position of one request after a sequence of
// prefill chunks and decode steps (no data). tier [cap] of enum oscar_kv_tier.
struct oscar_tier_sim {
    int64_t n_sink, n_recent, protected_len;
    int32_t n_flush;         // N_Q
    int64_t len, cap;
    int32_t counter;
    uint8_t * tier;          // [cap]
    uint8_t * is_hp;         // [cap] scratch for oscar_kv_decode_plan
    int64_t n_demoted;       // total positions demoted so far
};
enum oscar_status oscar_tier_sim_init(struct oscar_tier_sim * s, int64_t n_sink, int64_t n_recent,
                                      int32_t n_flush, int64_t cap);
void oscar_tier_sim_free(struct oscar_tier_sim * s);
// Extends to len + n; the final chunk also initialises the flush counter.
enum oscar_status oscar_tier_sim_prefill(struct oscar_tier_sim * s, int64_t n, bool is_final_chunk);
// One decode token; returns the number of positions demoted this step (or < 0 on overflow).
int32_t oscar_tier_sim_decode(struct oscar_tier_sim * s);
// Counts per tier over [0, len).
void oscar_tier_sim_counts(const struct oscar_tier_sim * s, int64_t counts[3]);

// ---- the cache -----------------------------------------------------------------------
struct oscar_kv_cache_params {
    int32_t n_head_kv;         // Hkv
    int32_t head_dim;          // D
    int32_t page_size;         // tokens per page in both pools (>= 1)
    int32_t n_sink;            // P  (reference scripts 64)
    int32_t n_recent;          // R  (reference scripts 256; >= 1)
    int32_t n_flush;           // N_Q: tokens demoted together, also the flush period (8)
    int32_t n_seq_max;         // sequences (block-table sets)
    int64_t max_seq_len;       // per sequence (sizes the block tables)
    int64_t n_hp_pages;        // HP pool capacity (pages); 0 = enough for n_seq_max full sequences
    int64_t n_int2_pages;      // INT2 pool capacity (pages); 0 = same
    struct oscar_int2_params k_quant;    // prefill INT2 path (sort clip by default)
    struct oscar_int2_params v_quant;
    enum oscar_clip_algo demote_clip_algo;   // decode demotion (reference: OSCAR_CLIP_FLUSH)
    const float * k_mean_rot;  // [Hkv, D] mu . R_K or NULL (copied by init)
};
// Defaults: page 8, P 64, R 256, N_Q 8, 1 sequence of 32768, G = D, fp32 meta,
// clip K 0.96 / V 0.92 by sort, demotion OSCAR_CLIP_FLUSH, no centring.
struct oscar_kv_cache_params oscar_kv_cache_default_params(int32_t n_head_kv, int32_t head_dim);

// Per-sequence state. Read-only for callers (kernels read the block tables).
struct oscar_kv_seq {
    int64_t len;                     // tokens stored
    int64_t n_sink, n_int2, n_recent;  // tier counts; n_sink + n_int2 + n_recent == len
    int32_t counter;                 // flush counter (§11.4)
    bool    prefill_done;            // a final chunk was seen (decode allowed)
    int32_t * sink_pages;            // [ceil(P / page_size)]     HP page ids
    int32_t * int2_pages;            // [ceil(max_seq_len / page_size)] INT2 page ids
    int32_t * recent_pages;          // [ring_slots / page_size]  HP page ids
    int32_t n_sink_pages, n_int2_pages, n_recent_pages;  // allocated so far
    uint8_t * is_hp;                 // [max_seq_len] 1 = BF16 tier (input of the decode plan)
};

struct oscar_kv_cache {
    struct oscar_kv_cache_params p;  // k_mean_rot points at mu_rot below
    int32_t n_groups_k, n_groups_v;
    int64_t ring_slots;              // ceil((R + N_Q - 1) / page_size) * page_size
    uint16_t * hp_k, * hp_v;         // [n_hp_pages * page_size, Hkv, D] bf16 bits
    uint8_t  * q_k, * q_v;           // [n_int2_pages * page_size, Hkv, D/4]
    void     * q_k_meta, * q_v_meta; // [n_int2_pages * page_size, Hkv, 2*ng]
    float    * mu_rot;               // [Hkv, D] or NULL
    int32_t  * hp_free, * q_free;    // free page stacks
    int64_t    n_hp_free, n_q_free;
    struct oscar_kv_seq * seqs;      // [n_seq_max]
    float    * scratch;              // [max(page_size, n_flush), Hkv, D] staging rows
    struct oscar_quant_stats stats_k, stats_v;   // accumulated over all INT2 writes
};

// Allocates the pools once. *out is owned by the caller: free with oscar_kv_cache_free.
enum oscar_status oscar_kv_cache_init(const struct oscar_kv_cache_params * p,
                                      struct oscar_kv_cache ** out);
void oscar_kv_cache_free(struct oscar_kv_cache * c);
// Returns the sequence's pages to the pools and empties it.
void oscar_kv_cache_seq_reset(struct oscar_kv_cache * c, int32_t seq);

// Prefill/extend chunk of n rotated rows k, v [n, Hkv, D] (fp32). Placement by
// oscar_kv_extend_layout; INT2 rows are quantized from the centred, bf16-rounded rows
// with k_quant / v_quant. The final chunk initialises the flush counter.
enum oscar_status oscar_kv_cache_prefill(struct oscar_kv_cache * c, int32_t seq,
                                         const float * k, const float * v, int64_t n,
                                         bool is_final_chunk);
// One decode token k, v [Hkv, D] at position len: first the demotion step (§11.4;
// the N_Q oldest recent rows are re-quantized from their stored bf16 values with
// demote_clip_algo and the ASYM scheme, as the flush kernel does), then the token is
// written to the recent ring. n_demoted (may be NULL) receives the count.
enum oscar_status oscar_kv_cache_decode_append(struct oscar_kv_cache * c, int32_t seq,
                                               const float * k, const float * v,
                                               int32_t * n_demoted);
// Dequantized rows in position order: k, v [len, Hkv, D] (fp32; HP rows are the stored
// bf16 values; INT2 rows via oscar_int2_dequantize_rows). tier [len] may be NULL.
enum oscar_status oscar_kv_cache_gather(const struct oscar_kv_cache * c, int32_t seq,
                                        float * k, float * v, uint8_t * tier);

// Physical slot of position pos (pos < len) and its tier; for kernels and tests.
int64_t oscar_kv_cache_slot(const struct oscar_kv_cache * c, int32_t seq, int64_t pos,
                            enum oscar_kv_tier * tier);
// KV bytes one decode step reads for seq (codes + meta + bf16 rows, K and V).
int64_t oscar_kv_cache_bytes_read(const struct oscar_kv_cache * c, int32_t seq);

#endif
