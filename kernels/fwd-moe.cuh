// fwd-moe.cuh - the sparse (mixture-of-experts) MLP of the CUDA forward pass: routing on the
// device with lib/model's rules (softmax top-k, or glm4_moe's sigmoid with a choice-only bias,
// grouped top-k and a routed scale), the (token, slot) entries grouped by expert with a stable
// counting sort, one cuBLAS GEMM pair per non-empty expert over its gathered rows, the shared
// expert, and a combine that adds each token's expert outputs in its top-k order, then the
// shared expert's (no atomics: two runs are bit-identical).
//
// T = tokens, C = n_embd, E = experts, K = experts per token, Fe / Fs = the routed / shared
// expert's intermediate size, NR = E + 1 when a shared_expert_gate row follows the router's.
#ifndef OSCAR_KERNELS_FWD_MOE_CUH
#define OSCAR_KERNELS_FWD_MOE_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "model/model.h"
}
#include "kernels/cuda-common.cuh"

// Most expert groups the device routing handles (a bit mask per token).
#define OSC_MOE_MAX_GROUPS 64

// One sparse layer's device weights. Matrices are of type wtype (bf16, or fp32 in the fp32 mode).
struct osc_moe_dlayer {
    float * router;   // [NR, C] fp32: mlp.gate's rows, then shared_expert_gate's row (gated shared expert)
    float * exp_bias; // [E] the choice-only bias, or NULL
    void *  exp_gu;   // [E, 2 Fe, C]: each expert's gate rows, then its up rows
    void *  exp_down; // [E, C, Fe]
    void *  sh_gu;    // [2 Fs, C] or NULL (no shared expert)
    void *  sh_down;  // [C, Fs]
};

// Scratch of one batch of up to T tokens.
struct osc_moe_work {
    float *   logit;  // [T, NR] router output; sigmoid gating: overwritten with the scores
    float *   choice; // [T, E] softmax probabilities, or sigmoid scores + bias (what the top-k picks from)
    int32_t * top_e;  // [T, K] each token's experts, best first
    float *   top_w;  // [T, K] their weights
    int32_t * by_exp; // [T K] the entries t K + j grouped by expert, tokens ascending within one
    int32_t * row_of; // [T K] the position of entry t K + j in by_exp
    int32_t * cnt;    // [E] entries per expert
    int32_t * h_cnt;  // [E] pinned host copy
    void *    xg;     // [T K, C] gathered normed rows (wtype)
    float *   gu;     // [T K, 2 Fe] and [T, 2 Fs] gate/up outputs; then [T, C] the shared expert's output
    void *    h;      // [T K, Fe] and [T, Fs] activations (wtype)
    float *   ye;     // [T K, C] expert outputs in by_exp order
};

// Whether the router matrix carries shared_expert_gate's row (NR = E + 1).
bool osc_moe_has_gate_row(const struct oscar_model_config * c);

// x [T, C] += the sparse MLP of w on the normed rows: xr [T, C] fp32 (router input, the CPU's
// fp32 normed rows) and xn [T, C] of type wtype (the experts' input; fp32 mode: xn == xr).
// Synchronises the stream once (the per-expert row counts size the GEMMs on the host).
enum oscar_status osc_moe_mlp(cublasHandle_t blas, cudaStream_t s, cudaDataType_t wtype,
                              const struct oscar_model_config * c, const struct osc_moe_dlayer * w,
                              const struct osc_moe_work * k, float * x, const float * xr, const void * xn, int32_t T);

#endif
