// metrics.h - what a KV-cache transform does to attention (method.md §16
// "Recommendation" definitions), the tiering that decides which rows are
// quantized (method.md §11), and a simulated quantized-cache attention for the
// forward pass (end-to-end perplexity).
//
// A "KV transform" describes one method completely: rotation (identity,
// Hadamard, or explicit per-layer / per-KV-head matrices), quantizer (INT2 asym
// with clip ratios, Lloyd-Max, naive symmetric INT2, INT4 block-Hadamard, KIVI
// per-channel K, bf16 rounding, identity), the BF16 sink/recent tiering and
// optional key-mean centring. Every row is rotated, (bf16-rounded,) quantized,
// dequantized and rotated back, so all metrics are in the UNROTATED basis:
// k̂ = Q(k·R)·Rᵀ. Queries are never rotated here (q·R·(k̂R)ᵀ = q·k̂ᵀ exactly).
//
// Tiering (struct oscar_tiering) decides, for query position t and key
// position p of one sequence, whether the query sees the key's INT2 value
// (k_q) or its high-precision value (k_hp). Modes:
//   NONE    every key is INT2, including the query's own row.
//   STATIC  the whole sequence was prefilled as ONE final chunk (method.md
//           §11.3): keys in [min(len,P), len − min(max(len−P,0),R)) are INT2
//           for every query; the rest BF16. "What decode sees after prefill".
//   DECODE  the first S0 = prompt_len tokens are one final prefill chunk, then
//           every later token is a decode step with page demotion (§11.4).
//           A query t < S0 sees only bf16 rows (prefill attends to its chunk in
//           bf16). For t >= S0, with q0 = min(S0,P), H0 = min(max(S0−P,0),R),
//           c0 = max(0, R + N_Q − 1 − H0): key p is INT2 iff
//             q0 <= p < S0 − H0                          (prefill INT2 middle), or
//             p >= S0 − H0, t >= S0 + c0 and
//             p <= S0 + c0 + floor((t − S0 − c0)/N_Q)·N_Q − R
//           (flushes happen at L = S0 + c0 + m·N_Q and demote [L−R−N_Q+1, L−R],
//           contiguous from the first recent position; tested against
//           lib/attention's struct oscar_tier_sim token by token).
//   RING    the OSCAR llama.cpp fork's HP buffer, decoding token by token: the
//           first P positions and the R latest (p > t − R, a ring of R slots) are
//           high precision, every other key INT2 at once (R = 0: the query's own
//           row too); no pages, no prefill special case.
//   block > 1 (KIVI): a block of `block` positions starting at q0 is INT2 only
//   once its last row is INT2 (partial blocks stay BF16, like KIVI's residual).
// Prefill-middle rows are quantized with int2.clip_algo (sort), decode-demoted
// rows with demote_clip_algo (reference: OSCAR_CLIP_FLUSH = bisection).
//
// Metric definitions (per layer; sums over every query t, query head j, and
// causal key p <= t of the same sequence; in a sliding layer only the keys of
// its window, t - W < p <= t, oscar_layer_input.window):
//   k_rel_mse = Σ‖k̃ − k‖² / Σ‖k‖²     k̃ = the row as the END of its sequence
//   v_rel_mse = same for V               sees it (INT2 or HP value)
//   logit_err = Σ (q·k̂_p − q·k_p)² / Σ (q·k_p)²   (k̂_p the value query t sees)
//   kl        = mean over (t, j) of KL(softmax(q·Kᵀ·s) ‖ softmax(q·K̂ᵀ·s)), nats; s = 1/√D or the
//               model's score scale (oscar_layer_input.attn_scale: Gemma 3's query_pre_attn_scalar^-1/2)
//   out_rel   = Σ‖(ô − o)·W_Oᵀ‖² / Σ‖o·W_Oᵀ‖²  (o: exact fp32 attention, ô: over
//               the transformed cache; W_O [C, Hq·D], all heads together)
// All sums fp64. Hidden drift needs a full forward and lives in the driver
// (lib/verify/verify.h, run.c).
//
// Shapes: T tokens, Hq / Hkv heads, D head_dim, C n_embd, L layers. GQA is
// contiguous: KV head h serves query heads [h·g, (h+1)·g), g = Hq/Hkv.
#ifndef OSCAR_VERIFY_METRICS_H
#define OSCAR_VERIFY_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "quant/quant.h"
#include "rotation/rotations.h"
#include "util/error.h"

// ---- tiering --------------------------------------------------------------------
enum oscar_tier_mode {
    OSCAR_TIERS_NONE   = 0,
    OSCAR_TIERS_STATIC = 1,
    OSCAR_TIERS_DECODE = 2,
    OSCAR_TIERS_RING   = 3, // llama.cpp fork: key p is INT2 for query t iff P <= p <= t − R
};

struct oscar_tiering {
    enum oscar_tier_mode mode;
    int64_t n_sink;      // P
    int64_t n_recent;    // R
    int32_t n_flush;     // N_Q (page size = flush period; reference 8)
    int64_t prompt_len;  // S0 (DECODE); 0 means n_sink
    int32_t block;       // KIVI K block (1 = per-token quantizers)
};

// Is key p INT2 for query t in a sequence of seq_len tokens (p <= t < seq_len)?
bool oscar_tier_is_int2(const struct oscar_tiering * tr, int64_t p, int64_t t, int64_t seq_len);
// The INT2 keys of query t are exactly [*lo, *hi) ∩ [0, t] (empty: lo == hi).
void oscar_tier_int2_range(const struct oscar_tiering * tr, int64_t t, int64_t seq_len, int64_t * lo, int64_t * hi);
// True if row p was written by the prefill path (else: decode demotion).
bool oscar_tier_from_prefill(const struct oscar_tiering * tr, int64_t p, int64_t seq_len);

// ---- KV transform ----------------------------------------------------------------------
enum oscar_kvq {
    OSCAR_KVQ_IDENTITY = 0, // no change (and no bf16 rounding of anything)
    OSCAR_KVQ_BF16     = 1, // rows rounded to bf16
    OSCAR_KVQ_INT2     = 2, // lib/quant INT2 (int2.scheme: ASYM, LLOYD_MAX, SYM)
    OSCAR_KVQ_INT4_BDH = 3, // SAW-INT4: block Hadamard of order int4_order + per-row INT4 (K and V)
    OSCAR_KVQ_KIVI     = 4, // per-channel K over blocks of kivi.k_block_tokens, per-token V groups
    OSCAR_KVQ_Q2_0     = 5, // the llama.cpp fork's Q2_0 (lib/quant) on the rotated row, no in-quant
                            // Hadamard, clip k_clip / v_clip; HP tiers hold fp16 rotated rows
    OSCAR_KVQ_OMNI     = 6, // OScaR: KIVI granularity after Hadamard + omni-token K scaling (kv-omni.c)
};

enum oscar_kv_rot {
    OSCAR_ROT_IDENTITY = 0,
    OSCAR_ROT_HADAMARD = 1, // normalized Sylvester H of size D (D a power of two)
    OSCAR_ROT_MATRIX   = 2, // rots below
};

struct oscar_kv_transform {
    char name[32];
    enum oscar_kvq quant;
    enum oscar_kv_rot rot;
    int32_t n_layer, n_head_kv, head_dim;
    struct oscar_rotations rots;    // a view (not owned, never freed): the matrices of OSCAR_ROT_MATRIX
                                    // (rots.k / rots.v) and the per-layer clips when rots.k_clip / v_clip
                                    // are set (rots.k_mean unused: k_mean below)
    int32_t k_engine_hadamard;      // 0, or b: the engine rotates the rotated row again by the block-
    int32_t v_engine_hadamard;      // diagonal Hadamard diag(H_b, ...) before quantizing (x·R·H): the
                                    // llama.cpp fork's attn_rot (q2_0; b = 128 for K at head_dim 128, 64 for V)
    struct oscar_int2_params int2;  // scheme, group size, meta dtype, prefill clip algo,
                                    // bf16_dequant; clip_ratio is ignored (see below)
    enum oscar_clip_algo demote_clip_algo;
    double k_clip, v_clip;          // ratios when rots.k_clip / rots.v_clip are NULL
    int32_t int4_order;             // SAW-INT4 Hadamard order (power of two dividing D)
    struct oscar_kivi_params kivi;
    bool hp_bf16;                   // HP tiers hold bf16 rotated rows; INT2 quantizes bf16 rows
    const float * k_mean;           // [L, Hkv, D] key mean (unrotated) or NULL (not owned), as rots lays
                                    // it out (oscar_kv_transform_k_mean)
    struct oscar_tiering tiers;
};

// Named presets. "bf16" (identity: the exact model), "naive" (SYM INT2, no
// rotation, no clip), "hadamard" (ASYM INT2, H, no clip), "oscar" (ASYM INT2,
// k_rot/v_rot, fixed clips 0.96/0.92), "oscar-searched" (as oscar with the
// per-layer clips k_clip/v_clip), "oscar-lm" (Lloyd-Max, G = D), "int4-bdh"
// (order min(128, D)), "kivi" (B = 32, Gv = 32, f16 meta), "q2_0" (the OSCAR
// llama.cpp fork's cache: k_rot/v_rot per layer, Q2_0 for K and V with its one
// clip 0.96 (oscar-verify sets the artifact's oscar.k_clip_ratio, as served), fp16 sink/recent from tiers, RING tiering; head_dim a multiple of 32
// with 128 | head_dim or n_head_kv·head_dim < 128, where the fork's row groups
// coincide with heads), "q2_0-attn-rot" (q2_0 plus the fork's attn_rot Hadamard,
// k_engine_hadamard / v_engine_hadamard), "oscar-omni" (OScaR: lib/quant oscar-omni.c, B = 32,
// Gv = 32, bf16 meta unless f16 asked). rots (NULL for methods that use no
// rotation, else INVALID) is viewed, not copied: its matrices for the matrix
// methods, its clips for oscar-searched alone; never its key mean (the caller
// sets out->k_mean where the method centres keys). group_size 0 = D.
// Tiering is copied from tiers.
enum oscar_status oscar_kv_transform_preset_rot(const char * name, int32_t n_layer, int32_t n_head_kv,
                                            int32_t head_dim, int32_t group_size,
                                            enum oscar_quant_meta_dtype meta_dtype,
                                            const struct oscar_tiering * tiers, const struct oscar_rotations * rots,
                                            struct oscar_kv_transform * out);
// The same from flat arrays (oscar_rotations_view): k_rot, v_rot [L, R, D, D] with R = rot_per_head ?
// Hkv : 1, k_clip, v_clip [L, Nc] with Nc = clip_per_head ? Hkv : 1; any may be NULL.
enum oscar_status oscar_kv_transform_preset(const char * name, int32_t n_layer, int32_t n_head_kv,
                                                 int32_t head_dim, int32_t group_size,
                                                 enum oscar_quant_meta_dtype meta_dtype,
                                                 const struct oscar_tiering * tiers, bool rot_per_head,
                                                 const float * k_rot, const float * v_rot, bool clip_per_head,
                                                 const float * k_clip, const float * v_clip,
                                                 struct oscar_kv_transform * out);
// The key mean [D] tf subtracts from head h's keys in layer `layer`, or NULL.
const float * oscar_kv_transform_k_mean(const struct oscar_kv_transform * tf, int32_t layer, int32_t h);
enum oscar_status oscar_kv_transform_check(const struct oscar_kv_transform * tf);

// y [D] = x [D]·R (transpose false) or x·Rᵀ, fp64 sums rounded once to fp32
// (so the result does not depend on batching; tests use it to feed caches).
void oscar_kv_rotate_row(const float * R, int32_t D, const float * x, float * y, bool transpose);
// The same for n rows, row r at x + r·xs into y + r·ys (lib/verify/kv-rotate.c): each row gets
// oscar_kv_rotate_row's bits whatever n is (the transforms rotate blocks of rows with it).
void oscar_kv_rotate_rows(const float * R, int32_t D, int64_t n, const float * x, size_t xs, float * y, size_t ys,
                          bool transpose);

// Effective bits per element at context ctx (method.md §14, configured metadata
// width; hp 16 bits). bf16 gives 16.
double oscar_kv_transform_bpe(const struct oscar_kv_transform * tf, int64_t ctx);

// One layer's rows of n_seq complete sequences (each starting at position 0):
// k, v [T, Hkv, D] -> k_hp, v_hp (the HP-tier value of every row) and k_q, v_q
// (the INT2-tier value of every row that can be INT2 at some time, else a copy
// of the HP value), all unrotated [T, Hkv, D]. The quantization path of a row
// (prefill or demotion) follows tf->tiers. Rows go in blocks of one KV head over
// n_threads (0: OpenMP's default); every row gets oscar_kv_transform_row's bits.
// st (may be NULL): [2] = {K, V}, accumulated.
enum oscar_status oscar_kv_transform_layer(const struct oscar_kv_transform * tf, int32_t layer, int32_t n_tokens,
                                           int32_t n_seq, const int32_t * seq_start, const float * k,
                                           const float * v, float * k_hp, float * v_hp, float * k_q, float * v_q,
                                           int32_t n_threads, struct oscar_quant_stats * st);

// One row x [D] of KV head h (K if is_k): hp = its HP-tier value and, if q != NULL, q = its INT2-tier
// value as written by the prefill path (prefill_path) or by decode demotion; both unrotated. KIVI K
// rows are quantized per block (below), not here. st (may be NULL) accumulates.
enum oscar_status oscar_kv_transform_row(const struct oscar_kv_transform * tf, bool is_k, int32_t layer, int32_t h,
                                         bool prefill_path, const float * x, float * hp, float * q,
                                         struct oscar_quant_stats * st);
// KIVI: K block [b0, b0 + kivi.k_block_tokens) of KV head h from its HP rows k_hp (row p at
// p·Hkv·D + h·D) into k_q (same layout).
enum oscar_status oscar_kv_transform_kivi_block(const struct oscar_kv_transform * tf, int32_t h, int64_t b0,
                                                const float * k_hp, float * k_q, struct oscar_quant_stats * st);

// OScaR (quant OSCAR_KVQ_OMNI): K rows are transformed per token, since the omni-token norm spans
// every KV head. hp [Hkv, D] = the HP-tier K of one token x [Hkv, D] (Hadamard, scaled, bf16, unscaled).
enum oscar_status oscar_kv_transform_omni_k_token(const struct oscar_kv_transform * tf, const float * x, float * hp);
// OScaR K block [b0, b0 + kivi.k_block_tokens) of all KV heads from the raw rows k (row p at p·Hkv·D)
// into k_q (same layout): quantized in the scaled basis, then multiplied by each token's norm and
// rotated back, which is the kernel's multiplication of each logit q·k̂ by the norm (linear, so exact).
enum oscar_status oscar_kv_transform_omni_block(const struct oscar_kv_transform * tf, int64_t b0, const float * k,
                                                float * k_q, struct oscar_quant_stats * st);

// ---- per-layer metrics -------------------------------------------------------------
struct oscar_layer_input {
    int32_t layer;
    int32_t n_tokens;            // T
    int32_t n_seq;
    const int32_t * seq_start;   // [n_seq + 1]; every sequence starts at position 0
    const float * q;             // [T, Hq, D] post-RoPE
    const float * k;             // [T, Hkv, D] post-RoPE
    const float * v;             // [T, Hkv, D]
    const float * wo;            // [C, Hq*D] or NULL (then out_rel is not computed)
    int32_t n_head, n_head_kv, head_dim, n_embd;
    float attn_scale;            // scores q·k·attn_scale; 0 = D^-1/2 (oscar_attn_scale_param of the model)
    int32_t window;              // the layer's sliding window: query t sees keys t - window < p <= t
                                 // (oscar_layer_window); 0 = full causal
};

struct oscar_layer_metrics {
    double k_rel_mse, v_rel_mse, logit_err, kl, out_rel;   // finished values
    // raw fp64 sums (oscar_layer_metrics_add / _finish):
    double k_err, k_ref, v_err, v_ref, logit_num, logit_den, kl_sum, out_num, out_den;
    int64_t n_rows;         // rows (tokens × KV heads) seen
    int64_t n_rows_int2;    // of them INT2 at the end of their sequence
    int64_t n_queries;      // (token, query head) pairs
    int64_t n_pairs;        // causal (query, key) pairs × query heads
    int64_t n_pairs_int2;   // of them attending to an INT2 value
};

// Transforms the layer's K/V with tf and computes every metric.
// n_threads 0 = OpenMP default. Results do not depend on n_threads.
enum oscar_status oscar_verify_layer_metrics(const struct oscar_kv_transform * tf,
                                             const struct oscar_layer_input * in, int32_t n_threads,
                                             struct oscar_layer_metrics * out);
// The same for n methods tf[0..n) at once, out[i] of tf[i], each the bits oscar_verify_layer_metrics
// gives it alone: the exact attention is computed once and shared, and an identity method's
// attention is the exact one (not recomputed). n <= OSCAR_METRICS_MAX_CACHES.
enum oscar_status oscar_verify_layer_metrics_methods(const struct oscar_kv_transform * tf, int32_t n,
                                                     const struct oscar_layer_input * in, int32_t n_threads,
                                                     struct oscar_layer_metrics * out);

// One transformed cache of a layer: HP and INT2-tier rows [T, Hkv, D] (any may be the layer's own
// k / v) read per its tiering. A cache whose four row sets are all the layer's own k and v is
// the exact attention, reused instead of recomputed.
struct oscar_metrics_cache {
    const struct oscar_tiering * tiers;
    const float * k_hp, * v_hp, * k_q, * v_q;
};
enum { OSCAR_METRICS_MAX_CACHES = 16 };
// Every metric of n caches of one layer against its exact attention (computed once); out[i] of c[i],
// the same bits as a call with c[i] alone.
enum oscar_status oscar_verify_metrics_caches(const struct oscar_layer_input * in, int32_t n,
                                              const struct oscar_metrics_cache * c, int32_t n_threads,
                                              struct oscar_layer_metrics * out);

// The same with explicit transformed rows (any of k_q/v_q/k_hp/v_hp may be
// the original k / v) and a tiering: for tests and custom perturbations.
enum oscar_status oscar_verify_metrics_explicit(const struct oscar_layer_input * in,
                                                const struct oscar_tiering * tiers, const float * k_hp,
                                                const float * v_hp, const float * k_q, const float * v_q,
                                                int32_t n_threads, struct oscar_layer_metrics * out);

void oscar_layer_metrics_add(struct oscar_layer_metrics * dst, const struct oscar_layer_metrics * src);
void oscar_layer_metrics_finish(struct oscar_layer_metrics * m);   // ratios from the sums

// ---- candidate errors (ranking many variants of one layer's cache) ----------------
// Errors of n_cand transformed versions of one layer's K and V on the same
// rows, cheap enough to rank a clip-ratio grid. The tiering's INT2 set must not
// depend on the query (NONE or STATIC; DECODE: OSCAR_ERR_UNSUPPORTED).
// k_hp / v_hp: the HP-tier rows (shared by all candidates); k_q[c] / v_q[c]: the
// INT2-tier rows of candidate c; all [T, Hkv, D], unrotated, e.g. from
// oscar_kv_transform_layer. in->wo is required. Per candidate c and KV head h:
//   k_num[c·Hkv + h] = Σ (q·k̂_p − q·k_p)²/D over causal pairs (t, p) and the
//                      query heads of h; k_den[h] = Σ (q·k_p)²/D. Σ_h k_num / Σ_h
//                      k_den is logit_err of oscar_verify_metrics_explicit with
//                      the candidate's K.
//   v_num[c·(Hkv+1) + Hkv] (unless v_per_head, else 0) = ‖(A·(V̂ − V))·W_Oᵀ‖² with the
//                      EXACT attention weights A (V's error alone; attention is linear
//                      in V); v_den = ‖o·W_Oᵀ‖². v_num/v_den is out_rel of
//                      oscar_verify_metrics_explicit with exact K and the candidate's V.
//   v_num[c·(Hkv+1) + h] (only when v_per_head, else 0): the same with V̂ − V kept
//                      in KV head h only (its query heads' W_O columns). A search per
//                      KV head reads these alone, so the whole layer's sum is skipped.
// All sums fp64 (the A·E products are sgemm in fp32). Results do not depend on
// n_threads. Memory: O(n_cand · T · Hq · D) floats + one [len, len] matrix.
enum oscar_status oscar_verify_candidate_errors(const struct oscar_layer_input * in,
                                                const struct oscar_tiering * tiers, int32_t n_cand,
                                                const float * k_hp, const float * v_hp,
                                                const float * const * k_q, const float * const * v_q,
                                                bool v_per_head, int32_t n_threads, double * k_num,
                                                double * k_den, double * v_num, double * v_den);

// The same for candidates [c0, c1) of the n_cand alone (k_q / v_q indexed 0 .. n_cand-1, only those
// read): k_num and v_num rows c0 .. c1-1 (laid out as above) and k_den get the bits the whole call
// gives them; v_den (NULL: not computed) too. The work is about that part's share of the whole
// call's plus what every part repeats (the exact attention weights and q·qᵀ sums), so parts of a
// grid run on several processes give the one-process numbers bit for bit.
enum oscar_status oscar_verify_candidate_errors_part(const struct oscar_layer_input * in,
                                                     const struct oscar_tiering * tiers, int32_t n_cand, int32_t c0,
                                                     int32_t c1, const float * k_hp, const float * v_hp,
                                                     const float * const * k_q, const float * const * v_q,
                                                     bool v_per_head, int32_t n_threads, double * k_num,
                                                     double * k_den, double * v_num, double * v_den);

// ---- simulated quantized-cache attention (for oscar_perplexity / forward) --------
// An oscar_attention_override: every batch must hold complete sequences from
// position 0 (whole perplexity windows). Each query attends to the HP or INT2
// value of each key as tf->tiers says for that (key, query) pair, which equals
// running the sequence through a serving cache (test-verify-sim checks this
// against lib/attention's paged cache decoded token by token).
struct oscar_kv_sim;
enum oscar_status oscar_kv_sim_init(const struct oscar_kv_transform * tf, const struct oscar_model_config * cfg,
                                    int32_t max_tokens, int32_t n_threads, struct oscar_kv_sim ** out);
void oscar_kv_sim_free(struct oscar_kv_sim * s);
struct oscar_attention_override oscar_kv_sim_override(struct oscar_kv_sim * s);
// One query row of the simulation: out [D] = softmax(q·kᵀ·scale)·v (scale: oscar_attn_score_scale of
// attn_scale) over keys p in [0, t] (in a sliding layer, window > 0: (t - window, t]), key p taken
// from (k_q, v_q) if lo <= p < hi, else (k_hp, v_hp); row p of each buffer at p·rs. fp32 scores and
// weights, fp64 normaliser: lib/attention's oscar_attn_rows for one row, which gives a row the same
// bits alone as in the simulation's blocks, so lib/verify/kv-decode.c (the oracle) and the
// one-pass simulation agree bit for bit on the same rows. scratch: oscar_kv_attend_scratch(t + 1, D)
// floats, 8-byte aligned.
size_t oscar_kv_attend_scratch(int64_t max_len, int32_t D);
void oscar_kv_attend_query(const float * q, int32_t D, float attn_scale, int64_t window, size_t rs, const float * k_hp,
                           const float * v_hp, const float * k_q, const float * v_q, int64_t t, int64_t lo, int64_t hi,
                           float * scratch, float * out);
// Quantizer statistics accumulated over all layers and calls (K and V).
void oscar_kv_sim_stats(const struct oscar_kv_sim * s, struct oscar_quant_stats * k, struct oscar_quant_stats * v);

#endif
