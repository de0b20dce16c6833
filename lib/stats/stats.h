// stats.h - streaming fp64 covariance accumulators for OSCAR calibration.
//
// One struct oscar_stats holds, per (layer, KV head), the running sums that
// method.md §2 turns into the matrices the rotations are fitted to:
//
//   KTK   Σ_t k kᵀ                                  -> ktk  Σ = sum / (T·Hkv)
//   VTV   Σ_t v vᵀ                                  -> vtv  Σ = sum / (T·Hkv)
//   QQT   Σ_t Σ_{j∈J(h)} q_j q_jᵀ (contiguous group) -> A_h = sum / (T·g); Σ_K = mean_h A_h
//   SST   Σ_t w v vᵀ, Σ_t w, w = k·A_h·kᵀ (FINAL A_h, pass 2)
//                                                   -> C_h = Σwvvᵀ / max(Σw, 1e-12); Σ_V = mean_h C_h
//   VATT  as SST but w = attention mass (below), single pass (experimental,
//         method.md §22 item 11; not the reference estimator)
//
// (Sums are of column-vector outer products; with row vectors this is xᵀx.)
// Negative SST weights (possible only through fp64 rounding, A_h is PSD) are
// clamped to 0 and counted (method.md §22 item 4).
//
// Attention mass (VATT): for KV head h, token t of a sequence, with causal
// softmax p_{j,i,t} = softmax_t(q_{i,j}·k_{t,h}·attn_scale) over the keys t ≤ i of
// the SAME sequence, w_{h,t} = Σ_{j∈J(h)} Σ_{i≥t} p_{j,i,t}²: the column energy
// (SᵀS)_{tt} of every query head of the group, summed over heads. Each call's
// sequences are taken as complete (keys before a chunk are not seen): feed
// whole sequences when VATT is on. With a chunk window W > 0 (a sliding layer)
// query i sees only keys i - W < t <= i, as the forward pass attends.
//
// Determinism: rows are staged per layer into fixed blocks of
// OSCAR_STATS_BLOCK tokens counted from the start of the stream, and each full
// block is reduced with DSYRK/DGEMM into a zeroed scratch that is then added
// to the accumulator. A (layer, head) sum is always computed by exactly one
// thread. So the sums depend only on the token order per layer: not on how the
// caller chunks the stream, nor on n_threads. The staged rows are part of the
// checkpoint, so a resumed run equals an uninterrupted one bit for bit.
//
// Passes: phase 1 accumulates KTK, VTV, QQT, VATT. oscar_stats_end_pass()
// flushes; if SST is on, phase 2 starts (feed the same tokens again; only k
// and v are read) and a second end_pass finishes it. Getters need the
// relevant pass finished.
//
// Usage:
//   struct oscar_stats_params p = oscar_stats_default_params();
//   p.n_layer = 30; p.n_head = 9; p.n_head_kv = 3; p.head_dim = 64;
//   p.kinds = OSCAR_STATS_QQT | OSCAR_STATS_SST;
//   oscar_stats_init(&p, &s);
//   for each chunk, layer: oscar_stats_add(s, &chunk);      // pass 1
//   oscar_stats_end_pass(s);
//   for each chunk, layer: oscar_stats_add(s, &chunk);      // pass 2
//   oscar_stats_end_pass(s);
//   oscar_stats_sigma(s, OSCAR_STATS_QQT, layer, -1, sigma_k);   // [D, D]
//
// T = tokens, L = n_layer, Hq = n_head, Hkv = n_head_kv, D = head_dim, g = Hq/Hkv.
#ifndef OSCAR_STATS_STATS_H
#define OSCAR_STATS_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

// Rows per deterministic reduction block. Part of the checkpoint format.
#define OSCAR_STATS_BLOCK 128

enum oscar_stats_kind {
    OSCAR_STATS_KTK  = 1 << 0,
    OSCAR_STATS_VTV  = 1 << 1,
    OSCAR_STATS_QQT  = 1 << 2,
    OSCAR_STATS_SST  = 1 << 3, // needs QQT; adds a second pass
    OSCAR_STATS_VATT = 1 << 4, // needs whole sequences per call
};

struct oscar_stats_params {
    int32_t  n_layer;
    int32_t  n_head;     // Hq
    int32_t  n_head_kv;  // Hkv, divides Hq
    int32_t  head_dim;   // D
    float    attn_scale; // VATT's softmax scale of q·k; 0 = 1/√D (oscar_attn_scale_param of the model)
    uint32_t kinds;      // OR of enum oscar_stats_kind
    int32_t  n_threads;  // 0 = OpenMP default; does not change results
    int32_t  max_tokens; // largest T per oscar_stats_add (sizes VATT scratch); 0 = 4096
};

struct oscar_stats_params oscar_stats_default_params(void);

// One layer's rows of one batch. Pointers are read during the call only.
struct oscar_stats_chunk {
    int32_t         layer;
    int32_t         n_tokens;  // T
    int32_t         n_seq;     // sequences (VATT only; else may be 0)
    const int32_t * seq_start; // [n_seq + 1], 0 .. T (VATT only; else may be NULL)
    const float *   q;         // [T, Hq, D]  post-norm, post-RoPE (NULL if unused)
    const float *   k;         // [T, Hkv, D] post-norm, post-RoPE
    const float *   v;         // [T, Hkv, D] raw v_proj output
    int32_t         window;    // VATT: the layer's sliding window (keys seen per query, itself
                               // included: t - window < key <= t); 0 = full causal (oscar_layer_window)
};

struct oscar_stats;

// Allocates every accumulator and scratch buffer once. Invalid shapes or kind
// sets fail with OSCAR_ERR_INVALID. Free with oscar_stats_free().
enum oscar_status oscar_stats_init(const struct oscar_stats_params * p, struct oscar_stats ** out);
void oscar_stats_free(struct oscar_stats * s);

// The parameters the accumulator was created (or loaded) with.
struct oscar_stats_params oscar_stats_get_params(const struct oscar_stats * s);
// 1 = pass 1, 2 = pass 2 (SST), 3 = finished: the earliest phase of any layer.
int32_t oscar_stats_phase(const struct oscar_stats * s);
// The phase of one layer (layers advance on their own with oscar_stats_end_layer_pass).
int32_t oscar_stats_layer_phase(const struct oscar_stats * s, int32_t layer);

// Adds one layer's chunk to the current pass. Non-finite inputs, bad shapes
// or bad sequence boundaries fail (OSCAR_ERR_NUMERIC / OSCAR_ERR_INVALID)
// before anything is accumulated, so the state is unchanged on error.
enum oscar_status oscar_stats_add(struct oscar_stats * s, const struct oscar_stats_chunk * c);

// Flushes the staged rows and ends the current pass (see the header comment).
// Ending pass 1 fails if a layer saw no tokens, as does ending pass 2 if a
// layer saw a different number of tokens than in pass 1.
enum oscar_status oscar_stats_end_pass(struct oscar_stats * s);
// The same for one layer: a layer-major caller ends layer l's pass 1, feeds
// layer l's pass 2 and ends it before layer l+1 sees a token. The sums are the
// same as with whole passes (each layer's stream is the same). oscar_stats_end_pass
// needs every layer in the same phase.
enum oscar_status oscar_stats_end_layer_pass(struct oscar_stats * s, int32_t layer);

// Finalised, symmetrised fp64 matrix out [D, D] for one kind (not SST|QQT
// combined): head < 0 gives the per-layer matrix (method.md §2), head >= 0
// the matrix of KV head `head` alone (ktk/vtv: sum_h / T; qqt: A_h; sst/vatt: C_h).
enum oscar_status oscar_stats_sigma(const struct oscar_stats * s, enum oscar_stats_kind kind,
                                    int32_t layer, int32_t head, double * out);

struct oscar_stats_layer_info {
    int64_t n_tokens_pass1;
    int64_t n_tokens_pass2;
    int64_t n_negative_sst; // SST weights clamped to 0, summed over KV heads
    double  sst_weight_sum; // Σ_h Σ_t w_{h,t} (after clamping)
    double  vatt_weight_sum;
};
enum oscar_status oscar_stats_layer_info(const struct oscar_stats * s, int32_t layer,
                                         struct oscar_stats_layer_info * out);

// ---- checkpoints -----------------------------------------------------------------
// Byte layout (native little-endian; version OSCAR_STATS_CKPT_VERSION):
//   header (96 bytes): magic "OSCSTATS", version, endian tag 0x01020304,
//     header size, kinds, n_layer, n_head, n_head_kv, head_dim, block, phase,
//     payload size, payload CRC-32, header CRC-32 (over the header with this
//     field zeroed), the VATT score scale (f32; 0 = 1/sqrt(D), what older
//     files' zero reserved bytes read as), then 28 reserved bytes that must be 0
//   payload: per-layer counters, fp64 accumulators of the enabled kinds,
//     SST/VATT weight sums and negative counts, then the staged rows of each
//     layer (pending rows only).
// Loading rejects a wrong magic/endianness/size/CRC (OSCAR_ERR_FORMAT) or a
// newer version (OSCAR_ERR_UNSUPPORTED) with a message saying which.
#define OSCAR_STATS_CKPT_VERSION 2

// Exact number of bytes oscar_stats_save() writes.
size_t oscar_stats_checkpoint_size(const struct oscar_stats * s);
// Writes the whole state into buf (size must be >= oscar_stats_checkpoint_size).
enum oscar_status oscar_stats_save(const struct oscar_stats * s, void * buf, size_t size);
// Creates an accumulator from a checkpoint. n_threads and max_tokens are
// run-time settings (not stored); 0 picks the defaults.
enum oscar_status oscar_stats_load(const void * buf, size_t size, int32_t n_threads, int32_t max_tokens,
                                   struct oscar_stats ** out);

#endif
