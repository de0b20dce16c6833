// fwd-kernels.cuh - device kernels of the CUDA forward pass (kernels/forward-cuda.cu):
// embedding gather (Gemma's sqrt(C) scale), RMSNorm (w or Gemma's 1 + w), the q/k/v epilogue
// (bias, Qwen3/Gemma q/k-norm, HF RoPE over all or the first rope_dim dims), the gated MLP
// activation (SiLU or GELU-tanh), the sandwich norm's normed add, flash-style causal prefill
// attention (sliding windows, any score scale), capture helpers (fp32 -> fp64
// accumulation, pass-2 SST weights) and the seeded weight generators. Wrappers that
// read weights or write GEMM activations come as C++ overloads for bf16 (the default
// pass) and fp32 (the fp32 mode of oscar_fwd_params): same arithmetic, only the
// element type of that tensor differs. Launch wrappers return cudaError_t from
// cudaGetLastError (no sync).
//
// T = tokens, C = n_embd, Hq/Hkv = heads, D = head_dim, F = n_ff.
#ifndef OSCAR_KERNELS_FWD_KERNELS_CUH
#define OSCAR_KERNELS_FWD_KERNELS_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

typedef __nv_bfloat16 osc_bf16;

// Largest head_dim the attention and RoPE kernels handle.
#define OSC_FWD_MAX_HEAD_DIM 256
// Query rows per attention block (the host builds block lists in these units).
#define OSC_ATT_BQ 64

// x [T, C] fp32 = float(embd [V, C] bf16 or fp32)[tokens[t]] * scale (an fp32 product; 1 or
// Gemma's sqrt(C) rounded to fp32, as the CPU's oscar_forward_embed)
cudaError_t osc_fwd_embed(float * x, const osc_bf16 * embd, const int32_t * tokens, int32_t T, int32_t C,
                          float scale, cudaStream_t s);
cudaError_t osc_fwd_embed(float * x, const float * embd, const int32_t * tokens, int32_t T, int32_t C, float scale,
                          cudaStream_t s);
// y [T, C] bf16 or fp32 = (off + w) * (x * rsqrt(mean(x^2) + eps)), sum of squares in double;
// off = 0, or Gemma's norm_offset 1 (off + w in fp32, as the CPU)
cudaError_t osc_fwd_rmsnorm(osc_bf16 * y, const float * x, const float * w, float off, int32_t T, int32_t C,
                            float eps, cudaStream_t s);
cudaError_t osc_fwd_rmsnorm(float * y, const float * x, const float * w, float off, int32_t T, int32_t C, float eps,
                            cudaStream_t s);
// x [T, C] += (off + w) * (y * rsqrt(mean(y^2) + eps)), y [T, C] fp32: a sandwich norm's sub-layer
// output y normed, then added to the residual x (the CPU's add_normed, rounding step by step)
cudaError_t osc_fwd_add_rmsnorm(float * x, const float * y, const float * w, float off, int32_t T, int32_t C,
                                float eps, cudaStream_t s);
// qkv [T, (Hq + 2 Hkv) D] fp32 (+ bias [(Hq + 2 Hkv) D] or NULL) -> q [T, Hq, D], k [T, Hkv, D]
// after optional per-head RMSNorm by (off + qn/kn [D]) (qn/kn NULL: none) and RoPE at pos [T]
// with inv_freq [R/2] over the first R dims (pairs (i, i + R/2); dims R .. D-1 pass through),
// cos/sin multiplied by rope_scale (YaRN's attention factor; 1 is exact);
// v [T, Hkv, D] = the raw v part (+ bias). qb/kb/vb (same shapes, bf16, or all NULL) get
// bf16 copies of q/k/v (the tensor-core attention and the pass-1 capture GEMMs read them).
cudaError_t osc_fwd_qkv_epilogue(float * q, float * k, float * v, osc_bf16 * qb, osc_bf16 * kb, osc_bf16 * vb,
                                 const float * qkv, const float * bias, const float * qn, const float * kn, float off,
                                 const int32_t * pos, const float * inv_freq, float rope_scale, int32_t R, int32_t T,
                                 int32_t Hq, int32_t Hkv, int32_t D, float eps, cudaStream_t s);
// h [T, F] bf16 or fp32 = act(gu[:, :F]) * gu[:, F:], gu [T, 2F] fp32; act SiLU, or with
// gelu_tanh torch's gelu(approximate="tanh") in fp32 (the CPU's glu, operation by operation)
cudaError_t osc_fwd_swiglu(osc_bf16 * h, const float * gu, int32_t T, int32_t F, bool gelu_tanh, cudaStream_t s);
cudaError_t osc_fwd_swiglu(float * h, const float * gu, int32_t T, int32_t F, bool gelu_tanh, cudaStream_t s);

// One attention work item: query rows [q0, q1) of the batch (q1 - q0 <= OSC_ATT_BQ), all
// in the sequence that starts at batch row s0; keys are rows [s0, q1) (causal).
struct osc_att_block {
    int32_t q0, q1, s0, pad;
};
// A layer's attention rule (lib/attention/rows.c): query row i reads key row p iff p <= i and,
// with a sliding window (window > 0), i - p < window; scores are (q . k) * scale
// (oscar_attn_scale: head_dim^-1/2 or Gemma's query_pre_attn_scalar^-1/2). Key tiles that no
// row of a block reads are skipped.
struct osc_att_rule {
    int32_t window;
    float scale;
};
// out [T, Hq, D] bf16 or fp32 = causal softmax(q kᵀ · scale) v per block under rule r, GQA (head
// h reads KV head h / (Hq/Hkv)), fp32 inputs and arithmetic, online softmax over 64-key tiles.
cudaError_t osc_fwd_attention(osc_bf16 * out, const float * q, const float * k, const float * v,
                              const struct osc_att_block * blocks, int32_t n_blocks, int32_t Hq, int32_t Hkv,
                              int32_t D, struct osc_att_rule r, cudaStream_t s);
cudaError_t osc_fwd_attention(float * out, const float * q, const float * k, const float * v,
                              const struct osc_att_block * blocks, int32_t n_blocks, int32_t Hq, int32_t Hkv,
                              int32_t D, struct osc_att_rule r, cudaStream_t s);

// The two-tier cache of a simulated quantized KV cache (forward-backend.h, struct
// oscar_fwd_kvsim): query row t reads key row p of the INT2 rows k, v [T, Hkv, D] iff
// lo[t] <= p < hi[t] (batch rows), else of the HP rows passed as k_hp, v_hp.
struct osc_att_tiers {
    const float * k, * v;
    const int32_t * lo, * hi;   // [T]
};
cudaError_t osc_fwd_attention_tiered(osc_bf16 * out, const float * q, const float * k_hp, const float * v_hp,
                                     const struct osc_att_tiers * t, const struct osc_att_block * blocks,
                                     int32_t n_blocks, int32_t Hq, int32_t Hkv, int32_t D, struct osc_att_rule r,
                                     cudaStream_t s);
cudaError_t osc_fwd_attention_tiered(float * out, const float * q, const float * k_hp, const float * v_hp,
                                     const struct osc_att_tiers * t, const struct osc_att_block * blocks,
                                     int32_t n_blocks, int32_t Hq, int32_t Hkv, int32_t D, struct osc_att_rule r,
                                     cudaStream_t s);

// Tensor-core variant (kernels/fwd-attention-tc.cu): bf16 q/k/v, P rounded to bf16 for
// P.V, fp32 accumulation and softmax. Only where osc_fwd_attention_tc_ok(D).
bool osc_fwd_attention_tc_ok(int32_t D);
cudaError_t osc_fwd_attention_tc(osc_bf16 * out, const osc_bf16 * q, const osc_bf16 * k, const osc_bf16 * v,
                                 const struct osc_att_block * blocks, int32_t n_blocks, int32_t Hq, int32_t Hkv,
                                 int32_t D, struct osc_att_rule r, cudaStream_t s);
// The two-tier cache on the tensor cores (bf16 rows; struct osc_att_tiers with bf16 rows).
struct osc_att_tiers_bf16 {
    const osc_bf16 * k, * v;
    const int32_t * lo, * hi;   // [T]
};
cudaError_t osc_fwd_attention_tc_tiered(osc_bf16 * out, const osc_bf16 * q, const osc_bf16 * k_hp,
                                        const osc_bf16 * v_hp, const struct osc_att_tiers_bf16 * t,
                                        const struct osc_att_block * blocks, int32_t n_blocks, int32_t Hq, int32_t Hkv,
                                        int32_t D, struct osc_att_rule r, cudaStream_t s);

// Pass-1 capture reduction: part [n_part, n_slot, DD] fp32 holds per-chunk Gram matrices;
// acc[o] [DD] fp64 += Σ_p Σ_{i < per[o]} part[p, first[o] + i] for each output o < n_out,
// summed in that fixed order (p outer, i inner). first/per [n_out] in device memory;
// acc_ptrs [n_out] device pointers to the fp64 accumulators.
cudaError_t osc_fwd_gram_reduce(double * const * acc_ptrs, const float * part, const int32_t * first,
                                const int32_t * per, int32_t n_out, int32_t n_part, int32_t n_slot, int64_t DD,
                                cudaStream_t s);

// acc [n] fp64 += src [n] fp32
cudaError_t osc_fwd_acc_add(double * acc, const float * src, int64_t n, cudaStream_t s);
// Pass-2 SST weights for one layer: y [Hkv, T, D] = A_h k_t (from cuBLAS); w[h, t] =
// max(0, Σ_d y·k) (fp64 dot), neg[h, t] = 1 if clamped; z [Hkv, T, D] = float(w) * v_t.
cudaError_t osc_fwd_sst_weights(double * w, uint8_t * neg, float * z, const float * y, const float * k,
                                const float * v, int32_t T, int32_t Hkv, int32_t D, cudaStream_t s);
// wsum[h] += Σ_t w[h, t], nneg[h] += Σ_t neg[h, t] (fixed-order tree: deterministic);
// neg and nneg may both be NULL (no clamp counts).
cudaError_t osc_fwd_sst_reduce(double * wsum, int64_t * nneg, const double * w, const uint8_t * neg, int32_t T,
                               int32_t Hkv, cudaStream_t s);

// Attention-mass weights (VATT, lib/stats/attn-mass.c) of one block of query rows
// [i0, i0 + rows) against keys [0, nk), nk = i0 + rows: S [rows, nk] fp32 raw scores
// q_i.k_t (keys t > i are ignored). lz [rows] = m + log Σ_{t<=i} exp(x - m) with
// x = scale·S in fp64; then w [nk] fp64 += Σ_{rows i >= t} exp(2 (x_it - lz_i)), one
// thread per key summing rows in order (deterministic). window > 0 (a sliding layer): row i
// sees only keys i - window < t <= i, in both sums; 0 = full causal.
cudaError_t osc_fwd_vatt_block(double * w, double * lz, const float * S, int32_t i0, int32_t rows, double scale,
                               int32_t window, cudaStream_t s);
// z [Hkv, T, D] = float(w [Hkv, T]) * v [T, Hkv, D]
cudaError_t osc_fwd_scale_rows(float * z, const double * w, const float * v, int32_t T, int32_t Hkv, int32_t D,
                               cudaStream_t s);

// dst [n] bf16 = bf16(src [n] fp32), round to nearest even
cudaError_t osc_fwd_to_bf16(osc_bf16 * dst, const float * src, int64_t n, cudaStream_t s);
// dst [n] = 1 (norm) or N(0, 0.02^2) from a counter hash of (seed, tensor id, index); the
// bf16 generator rounds exactly the values the fp32 one (ones = false) returns
cudaError_t osc_fwd_random_bf16(osc_bf16 * dst, int64_t n, uint64_t seed, uint64_t tensor, cudaStream_t s);
cudaError_t osc_fwd_random_f32(float * dst, int64_t n, uint64_t seed, uint64_t tensor, bool ones,
                               cudaStream_t s);
// dst [n] fp32 = value (random norms of a model whose norms multiply by norm_offset + w)
cudaError_t osc_fwd_fill_f32(float * dst, int64_t n, float value, cudaStream_t s);
// dst [n] fp32 = float(src [n] bf16)
cudaError_t osc_fwd_bf16_to_f32(float * dst, const osc_bf16 * src, int64_t n, cudaStream_t s);
// x [n] fp32 = float(bf16(x)) in place, round to nearest even (a bf16 capture)
cudaError_t osc_fwd_round_bf16(float * x, int64_t n, cudaStream_t s);

#endif
