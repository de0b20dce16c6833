// forward-backend.h - the forward pass on a chosen device behind one API:
// "cpu" is lib/model/forward.c (fp32, OpenBLAS), "cuda" is kernels/forward-cuda.cu
// (bf16 weights on the device, cuBLAS GEMMs with fp32 accumulation, flash-style
// causal attention, capture sums accumulated on the device; params.fp32 makes it an
// fp32 pass throughout). Same model description (struct oscar_model), same batches,
// same capture semantics.
//
// Capture: set params.stats to an accumulator (lib/stats) and the pass feeds it.
//   cpu:  every layer's q/k/v go through oscar_stats_add (as calibration does).
//   cuda: KTK/VTV/QQT (pass 1) and SST (pass 2) are summed on the device (fp32
//         GEMM per batch and KV head, added into fp64 device accumulators in a
//         fixed order: deterministic) and added into params.stats at
//         oscar_fwd_end_pass (oscar_stats_add_sums); VATT (pass 1) from device score blocks
//         with fp64 softmax and Σ p² per key (lib/stats/attn-mass.c on the device).
// In both cases the caller ends passes with oscar_fwd_end_pass, never with
// oscar_stats_end_pass directly. A host hook (params.hook) also works on cuda,
// but every wanted layer's tensors are then copied to the host (tests only).
//
// Usage (a whole pass per batch; tests and benchmarks of the capture sums):
//   struct oscar_fwd_params p = oscar_fwd_default_params();
//   p.device = "cuda"; p.max_tokens = 16384; p.stats = s;
//   oscar_fwd_init(model, &p, &f);
//   for each batch: oscar_fwd_run(f, &batch, NULL);      // pass 1
//   oscar_fwd_end_pass(f);
//   for each batch: oscar_fwd_run(f, &batch, NULL);      // pass 2 (SST)
//   oscar_fwd_end_pass(f);
//   oscar_fwd_free(f);                                   // s holds the sums
#ifndef OSCAR_BACKEND_FORWARD_BACKEND_H
#define OSCAR_BACKEND_FORWARD_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/model.h"
#include "stats/stats.h"
#include "util/error.h"

struct oscar_fwd_params {
    const char * device;                                // "cpu" (NULL means cpu) or "cuda"
    int32_t      n_threads;                             // cpu: 0 = all cores
    int32_t      max_tokens;                            // largest batch; sizes every buffer once
    const struct oscar_capture_hook *       hook;       // host hook (cuda: copies to the host)
    const struct oscar_attention_override * attention;  // cuda: called on the host (q/k/v copied there)
    struct oscar_stats *                    stats;      // NULL or the accumulator the pass feeds
    // cuda: weights, activations and every GEMM in fp32 (CUBLAS_COMPUTE_32F with the default
    // math mode, i.e. no TF32), the fp32 attention kernel (osc_fwd_attention), pass-1 Gram
    // GEMMs on the fp32 q/k/v: the CPU pass's numerics up to summation order, twice the
    // weight memory and slower. cpu: ignored (always fp32). Default false (bf16).
    bool fp32;
    // The layer-major pass (oscar_fwd_rows_init ... below): weights arrive one layer at a time
    // (cuda: two device slots, no whole-model upload; the LM head is not kept) and
    // oscar_fwd_run is refused.
    bool layered;
    // Layer-major pass: q/k/v rounded to bf16 before any consumer sees them (sums, hook), as
    // the reference captures. cuda in bf16 precision always captures bf16 (its Gram GEMMs read
    // bf16 copies), so there it must be set.
    bool capture_bf16;
};

struct oscar_fwd_params oscar_fwd_default_params(void);

// A simulated quantized KV cache evaluated where the pass runs (cuda), with the arithmetic of
// lib/verify's one-pass simulation (verify/metrics.h, oscar_kv_sim): per layer every K/V row
// gets its HP value y·Rᵀ, y = bf16(x·R) (hp_bf16), and, if some query of its sequence reads it
// as INT2, its INT2 value Q(y)·Rᵀ (lib/verify kv-transform.c's bits: fp64 rotation sums, the
// lib/quant clip rules and quantizers, quant below); query t of a sequence of len tokens reads key p's
// INT2 value iff lo <= p < hi from int2_range(t, len), else its HP value (fp32 attention). Row p
// is quantized with int2.clip_algo if from_prefill(p, len), else with demote_clip_algo. The
// INT2 rows are the largest set, that of the last query (the tier rules only grow it).
struct oscar_fwd_kvsim_side {
    enum oscar_eval_rot rot;
    const float * rot_mat;      // MATRIX: host [L, n_rot, D, D] (read by oscar_fwd_set_attention)
    int32_t n_rot;              // 1 (per layer) or Hkv (per KV head)
    const double * clip;        // host [L, n_clip] clip ratios (<= 0: none)
    int32_t n_clip;             // 1 or Hkv
    int32_t engine_hadamard;    // 0, or b: the rotated row is rotated again by diag(H_b, ...) (the
                                // llama.cpp fork's attn_rot, lib/verify's k/v_engine_hadamard)
};
// What writes the INT2-tier rows.
enum oscar_fwd_kvq {
    OSCAR_FWD_KVQ_INT2 = 0,     // int2: ASYM or SYM; LLOYD_MAX: Lloyd-Max prefill rows, ASYM demoted rows
    OSCAR_FWD_KVQ_INT4_BDH,     // SAW-INT4 of block-Hadamard order int4_order (int2.meta_dtype; no clips)
    // KIVI: V rows per token in groups, K per channel over blocks of kivi.k_block_tokens rows, the
    // full blocks of the last query's INT2 range of each sequence (the tier rule is then block-
    // aligned); every other K row keeps its HP value
    OSCAR_FWD_KVQ_KIVI,
    OSCAR_FWD_KVQ_OMNI,         // OScaR (lib/quant oscar-omni.c): KIVI's granularity after the Hadamard,
                                // K scaled by each token's norm over all KV heads (rot: Hadamard)
    OSCAR_FWD_KVQ_Q2_0,         // the llama.cpp fork's Q2_0 (lib/quant q2-0.c) on the rotated fp32 row,
                                // HP rows fp16 (not hp_bf16); the clips are its ratios
};
struct oscar_fwd_kvsim {
    enum oscar_fwd_kvq quant;
    struct oscar_int2_params int2;          // scheme, group size, meta dtype, prefill clip algo
    enum oscar_clip_algo demote_clip_algo;
    int32_t int4_order;                     // INT4_BDH
    const float * k_mean;                   // host [L, Hkv, D] key mean (read at set_attention) or NULL
    struct oscar_kivi_params kivi;          // KIVI, OMNI
    bool hp_bf16;
    struct oscar_fwd_kvsim_side k, v;
    void (*int2_range)(const void * user, int64_t t, int64_t len, int64_t * lo, int64_t * hi);
    bool (*from_prefill)(const void * user, int64_t p, int64_t len);
    const void * user;                      // of the two callbacks, alive while the pass uses them
};

struct oscar_fwd;

// Builds the pass for model m on params->device. cuda: converts the fp32
// weights to bf16 on the device (params->fp32: copies them as fp32; m may be
// freed afterwards); fails with
// OSCAR_ERR_UNSUPPORTED and "CUDA backend not compiled in" / "no CUDA device"
// when CUDA is unavailable, and for shapes it does not handle (head_dim > 256).
enum oscar_status oscar_fwd_init(const struct oscar_model * m, const struct oscar_fwd_params * params,
                                 struct oscar_fwd ** out);

// A model of shape cfg with seeded random weights (std 0.02, norms 1), for
// shape benchmarks. cuda: generated directly as bf16 on the device from a
// counter-based hash (no host copy, so an 8B shape needs ~16 GB of device
// memory and no host memory; params->fp32: fp32, the same values unrounded,
// twice the memory); cpu: oscar_model_init_random (fp32 host copy,
// owned by the pass). The two generators differ: same seed, different weights.
enum oscar_status oscar_fwd_init_random(const struct oscar_model_config * cfg, uint64_t seed,
                                        const struct oscar_fwd_params * params, struct oscar_fwd ** out);

// Runs one batch. logits [T, V] on the host, or NULL (LM head skipped).
enum oscar_status oscar_fwd_run(struct oscar_fwd * f, const struct oscar_batch * batch, float * logits);

// The attention of later runs (whole passes only): kvsim (copied; its matrices uploaded now),
// or the host override ov, or neither (the exact attention). One pass serves every method of
// an evaluation on one resident model. cpu: kvsim is refused (lib/verify's override is the CPU
// simulation), ov replaces params.attention.
enum oscar_status oscar_fwd_set_attention(struct oscar_fwd * f, const struct oscar_fwd_kvsim * kvsim,
                                          const struct oscar_attention_override * ov);

// The host hook of later runs (whole passes only), or NULL: one resident pass serves a metrics
// run (with the hook) and the scored runs (without). cuda: the tensors of every layer the hook
// wants are copied to the host.
enum oscar_status oscar_fwd_set_hook(struct oscar_fwd * f, const struct oscar_capture_hook * hook);

// ---- scoring on the device (oscar-verify's perplexity and next-token statistics) ---------------
// One scored row: the terms of lib/verify/token-stats.h (nll = lse(l) - l[y]; with a reference
// row b: nll_ref, kl = KL(softmax(b) || softmax(l)), dp = exp(-nll) - exp(-nll_ref), same_top),
// fp64, computed where the logits are (cuda: kernels/fwd-score.cuh).
struct oscar_fwd_score {
    double nll, nll_ref, kl, dp;
    int32_t same_top;
    int32_t finite;             // 1 if every logit of the row (and of its reference) is finite
};
// A store of n_rows reference rows (the final normed hidden states of a reference pass, in the
// pass's precision) on the device. cuda only (cpu: OSCAR_ERR_UNSUPPORTED).
enum oscar_status oscar_fwd_ref_init(struct oscar_fwd * f, int64_t n_rows);
// Runs batch b (as oscar_fwd_run, no logits to the host) and scores rows [row0, row0 + n) of each
// of its sequences: row row0 + i of sequence q predicts next[q·n + i] and is scored into
// out[q·n + i] (host, [n_seq·n]). save_ref: these rows go into the reference store at
// [ref_row, ref_row + n_seq·n) first, in the same order; ref_row >= 0: each row is compared with
// the reference row at ref_row + q·n + i (its logits recomputed by the same GEMM, so a reference
// scored against itself has kl exactly 0). A non-finite logit fails the run (OSCAR_ERR_NUMERIC).
enum oscar_status oscar_fwd_run_scored(struct oscar_fwd * f, const struct oscar_batch * b, int32_t row0, int32_t n,
                                       const int32_t * next, int64_t ref_row, bool save_ref,
                                       struct oscar_fwd_score * out);

// Ends the current capture pass of params.stats (see above). Fails if no stats.
enum oscar_status oscar_fwd_end_pass(struct oscar_fwd * f);

struct oscar_fwd_info {
    char    device[128];       // "cpu" or the GPU name
    bool    on_device;         // activations and capture sums live off the host (cuda)
    bool    layer_sums;        // the capture hands lib/stats whole-layer totals at each layer's end
                               // (oscar_stats_add_layer_sums, cuda) rather than per block as rows stream (cpu)
    int64_t weight_bytes;      // device copy of the weights (cuda) / host fp32 weights (cpu)
    int64_t workspace_bytes;   // activations, capture accumulators, cuBLAS workspace
    int64_t device_used_bytes; // cuda: total - free of cudaMemGetInfo, largest seen (0 on cpu)
    // cuda with OSCAR_FWD_PROFILE=1 in the environment at init: device milliseconds per stage
    // summed over every run so far (cudaEvents between stages; adds sync-free event records).
    // Stages: 0 rmsnorm + qkv GEMM, 1 q/k/v epilogue, 2 attention, 3 o GEMM, 4 MLP (norm,
    // gate/up GEMM, SwiGLU, down GEMM), 5 capture. All 0 otherwise.
    double  stage_ms[6];
    // ... and within stage 4 of the sparse layers: 0 router GEMM, routing, grouping by expert and
    // gather, 1 the expert and shared GEMMs with their activation (after the host sync on the
    // row counts), 2 the combine
    double  moe_ms[3];
    int32_t attention_tc;      // cuda: 1 if the tensor-core attention runs (0: fp32 kernel, always with fp32)
    double  host_sums_s;       // cpu: seconds spent in lib/stats adding sums inside runs (not layer ends)
};
void oscar_fwd_info(const struct oscar_fwd * f, struct oscar_fwd_info * out);

// out [C, Hq D] fp32 = layer's attention output projection W_O as the pass uses it (cpu:
// the model's matrix; cuda: the bf16 device copy widened, or the fp32 copy with fp32).
// For held-out error metrics of models that live only on the device (oscar_fwd_init_random).
enum oscar_status oscar_fwd_copy_wo(struct oscar_fwd * f, int32_t layer, float * out);

void oscar_fwd_free(struct oscar_fwd * f);

// ---- the layer-major pass (lib/calibrate/layer-pass.c) ----------------------------------------
// Every sequence of the pass advances through layer l before any enters layer l + 1. The
// hidden states of all n_rows rows stay where the backend keeps them (cuda: device memory),
// and so do layer l's calibration K/V (rows < n_keep) until its SST sums are done. Usage:
//   p.layered = true, p.stats = s;  oscar_fwd_init(m, &p, &f)  (m: config, embedding, rope_freqs)
//   oscar_fwd_rows_init(f, n_rows, n_keep);
//   for l: oscar_fwd_layer_set(f, l, &m->layers[l])   (NULL: the random weights of init_random)
//          for each batch: oscar_fwd_layer_run(f, l, &batch, row0, row0 < n_keep)
//          oscar_fwd_layer_end(f, l)
// Sums (sums = true): layer l's pass-1 kinds of p.stats from that batch, and its K/V kept at
// rows [row0, row0 + T) (which must lie below n_keep). The hook (p.hook, host arrays) sees every
// batch it wants, after the capture dtype is applied.
enum oscar_status oscar_fwd_rows_init(struct oscar_fwd * f, int64_t n_rows, int64_t n_keep);
// Layer l's weights into the backend (cpu: checks that w is the resident layer the pass reads;
// cuda: converted into slot l % 2, so w may be released afterwards). NULL: the random weights
// of oscar_fwd_init_random, made for this layer.
enum oscar_status oscar_fwd_layer_set(struct oscar_fwd * f, int32_t l, const struct oscar_layer_weights * w);
// Layer l over rows [row0, row0 + T) as batch b (T = b's tokens; l == 0 embeds b->tokens).
enum oscar_status oscar_fwd_layer_run(struct oscar_fwd * f, int32_t l, const struct oscar_batch * b, int64_t row0,
                                      bool sums);
// Ends layer l's pass 1 in p.stats (its A_h finalised); with SST on, feeds its pass 2 from the
// kept K/V in slices of max_tokens rows (a fixed order, whatever the batches were) and ends it.
enum oscar_status oscar_fwd_layer_end(struct oscar_fwd * f, int32_t l);
// All hidden states to or from host memory host [n_rows, C] (checkpoints).
enum oscar_status oscar_fwd_rows_copy(struct oscar_fwd * f, float * host, bool to_host);

#endif
