// eval-quad.cuh - the layer evaluator's error sums written as fp64 quadratic forms
// (kernels/layer-eval.cu uses them; the sums they replace are in verify/metrics.h).
//
// Logit sums of a full-attention layer, per KV head h and key rows e (a key variant
// or its difference from the exact keys):
//   Σ_s Σ_{t >= p} Σ_{j in h} (q_tj · e_p)²  =  Σ_p e_pᵀ S_p e_p,  S_p = Σ_{t >= p} Σ_j q_tj q_tjᵀ,
// as lib/verify's candidate errors sum them (a running fp64 S). Keys go in blocks of
// OSC_QUAD_BLOCK rows (every sequence padded to a block boundary with zero rows): the
// queries after a key's block enter through that block's suffix sum of q·qᵀ (one D×D
// matrix per block and KV head, made once per layer), the queries inside it directly.
// Cost per key variant O(T·D²) instead of the O(T²·D) of the score matrices.
//
// Per-KV-head output energies: Σ_t ‖o_th · W_hᵀ‖² (o_th the g query heads of h, W_h
// their columns of W_O) as o_th · (W_hᵀ W_h) · o_thᵀ: a (g·D)² Gram per head, made
// once per layer, instead of a T×C product per head.
//
// Everything fp64 (cuBLAS DGEMM), every reduction in a fixed order: deterministic.
#ifndef OSCAR_KERNELS_EVAL_QUAD_CUH
#define OSCAR_KERNELS_EVAL_QUAD_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "util/error.h"
}

#define OSC_QUAD_BLOCK 32

struct osc_quad {
    cublasHandle_t blas;
    cudaStream_t stream;
    int32_t Hq, Hkv, D, C;
    // logit sums: the current layer's padded rows
    int32_t n_blk, cap_blk, cap_seq;  // blocks in use; blocks and sequences allocated
    int32_t * blk_start;              // device [n_seq + 1]: each sequence's first block
    int32_t * pad_src;              // device [cap_blk · B]: source row of a padded row, -1 for padding
    double * qd;                    // [cap_blk · B, Hq, D] queries
    double * ed;                    // [cap_blk · B, Hkv, D] one key variant
    double * sfx;                   // [cap_blk, Hkv, D, D] Σ q·qᵀ of the queries after each block
    double * fk;                    // [Hkv, cap_blk · B, D] the rows times their block's suffix sum
    // per-head energies
    int32_t cap_t;
    double * wod;                   // [C, Hq·D] W_O
    double * gram;                  // [Hkv, gD, gD] W_hᵀ·W_h
    double * od;                    // [cap_t, Hq·D] one output
    double * fo;                    // [Hkv, cap_t, gD] its head slices times their Gram
    double * part;                  // [Hkv, max(EV parts, cap_blk)] partial sums
    int32_t n_part;
};

enum oscar_status osc_quad_open(struct osc_quad * x, cublasHandle_t blas, cudaStream_t stream, int32_t Hq,
                                int32_t Hkv, int32_t D, int32_t C, int32_t max_tokens);
void osc_quad_free(struct osc_quad * x);

// The layer's query blocks and suffix sums (q device [T, Hq, D]; seq_start host [n_seq + 1]).
enum oscar_status osc_quad_queries(struct osc_quad * x, const float * q, int32_t T, int32_t n_seq,
                                   const int32_t * seq_start);
// acc[h] += the logit sums of key rows e (device [T, Hkv, D]), h < Hkv (acc device).
enum oscar_status osc_quad_logit_sums(struct osc_quad * x, const float * e, double * acc);

// The layer's per-head W_O Grams (wo device [C, Hq·D]).
enum oscar_status osc_quad_wo(struct osc_quad * x, const float * wo);
// acc[h] += Σ_t ‖o_th · W_hᵀ‖², h < Hkv (o device [T, Hq, D]; acc device).
enum oscar_status osc_quad_head_energies(struct osc_quad * x, const float * o, int32_t T, double * acc);

#endif
