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
// Each expert's rows start at a multiple of this in the grouped buffers (xg, gu, h, ye): the
// GEMMs run over whole tiles and see few distinct row counts (one cuBLAS plan per count); the
// padding rows are computed and never read.
#define OSC_MOE_ROW_ALIGN 128

// Rows of the grouped buffers for T tokens: T K entries plus each expert's padding.
static inline size_t osc_moe_rows(const struct oscar_model_config * c, size_t T) {
    return T * (size_t) c->n_expert_used + (size_t) c->n_expert * (OSC_MOE_ROW_ALIGN - 1);
}

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
    int32_t * row_of; // [T K] the grouped row of entry t K + j: its expert's rows, tokens ascending
    int32_t * cnt;    // [E] entries per expert
    int32_t * h_cnt;  // [E] pinned host copy
    void *    xg;     // [R, C] gathered normed rows (wtype), R = osc_moe_rows
    float *   gu;     // [R, 2 Fe] and [T, 2 Fs] gate/up outputs; then [T, C] the shared expert's output
    void *    h;      // [R, Fe] and [T, Fs] activations (wtype)
    float *   ye;     // [R, C] expert outputs
};

// Whether the router matrix carries shared_expert_gate's row (NR = E + 1).
bool osc_moe_has_gate_row(const struct oscar_model_config * c);

// x [T, C] += the sparse MLP of w on the normed rows: xr [T, C] fp32 (router input, the CPU's
// fp32 normed rows) and xn [T, C] of type wtype (the experts' input; fp32 mode: xn == xr).
// Synchronises the stream once (the per-expert row counts size the GEMMs on the host). ev: NULL,
// or 4 events recorded at the start, after the grouping, after the expert and shared GEMMs, and
// after the combine (profiling).
enum oscar_status osc_moe_mlp(cublasHandle_t blas, cudaStream_t s, cudaDataType_t wtype,
                              const struct oscar_model_config * c, const struct osc_moe_dlayer * w,
                              const struct osc_moe_work * k, float * x, const float * xr, const void * xn, int32_t T,
                              cudaEvent_t * ev);

#endif
