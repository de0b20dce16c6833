// optr-loss.cuh - the element-wise and reduction kernels of OptR's losses on the GPU (the
// non-GEMM steps of lib/rotation/optr-loss.c and optr.c; the GEMMs are cuBLAS calls in
// optr-device.cu). Items are (sequence, KV head) pairs whose arrays lie at a fixed stride;
// a row kernel's grid is (rows of an item, items). Every sum is fp64 in a fixed order (a
// block's threads in turn, then its warps in order, or one thread's loop), so results do not
// vary from run to run; the per-element arithmetic is the CPU's, in the same IEEE steps.
// All launchers are asynchronous on `stream`.
#ifndef OSCAR_KERNELS_OPTR_LOSS_CUH
#define OSCAR_KERNELS_OPTR_LOSS_CUH

#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "util/error.h"
}

// Score rows s [rows, L] of n items (item stride `item` floats; row r is query lo + r % nq and
// sees keys t <= lo + r % nq) become the causal softmax in place: max in fp32, Σ expf in fp64,
// P = expf(s − max)·(float) (1/Σ), 0 above the diagonal. rowval[b·rows + r] = Σ_t w_t·(s_t − lse)
// with w = P itself (p NULL: Σ P log P of the exact attention) or the exact P of p (the KL's
// cross term), lse = max + log Σ.
enum oscar_status osc_optr_softmax_rows(float * s, const float * p, int64_t item, int32_t n, int32_t rows, int32_t nq,
                                        int32_t L, int32_t lo, double * rowval, cudaStream_t stream);
// dS of the K loss: ds holds dP̂ (rows as above); columns [q0, q1) of each row become
// wj·((P̂ − P)/nq + P̂ ⊙ (dP̂ − Σ_t P̂·dP̂)) (0 above the diagonal). Other columns are left as they are.
enum oscar_status osc_optr_dscore_rows(float * ds, const float * ph, const float * p, int64_t item, int32_t n,
                                       int32_t rows, int32_t nq, int32_t L, int32_t lo, int32_t q0, int32_t q1,
                                       double wj, cudaStream_t stream);
// out[o] = Σ_{i < per} x[o·per + i] in order, o < n_out.
enum oscar_status osc_optr_sum_runs(const double * x, int32_t per, int64_t n_out, double * out, cudaStream_t stream);
// out[o] = Σ_i a[o·len + i]·b[o·len + i] (fp64), o < n_slices.
enum oscar_status osc_optr_dot_slices(const float * a, const float * b, int64_t len, int64_t n_slices, double * out,
                                      cudaStream_t stream);
// Each of n items' loss from its g query heads' sums [n, g] (wo = 1/(nq·C), wj = 1/g, w = 1/n_seq):
//   K (quad_only 0): w·Σ_j wj·((plogp − cross)/nq + λ·quad·wo);   V (1): w·Σ_j (wj·wo)·quad.
enum oscar_status osc_optr_item_loss(const double * plogp, const double * cross, const double * quad, int32_t n,
                                     int32_t g, int32_t nq, double wo, double wj, double w, double lambda,
                                     int quad_only, double * loss, cudaStream_t stream);
// out[h] = Σ_s item[s·Hkv + h] over the n_seq sequences in order.
enum oscar_status osc_optr_head_loss(const double * item, int32_t n_seq, int32_t Hkv, double * out,
                                     cudaStream_t stream);
// dR[h] (fp64 [Hkv, dd]) = Σ_s w·dr[s·Hkv + h] in sequence order (dr fp32 [n_seq·Hkv, dd]).
enum oscar_status osc_optr_grad_reduce(const float * dr, int32_t n_seq, int32_t Hkv, int32_t dd, double w, double * dR,
                                       cudaStream_t stream);
// dst[u] = src[u mod mod] for n_units units of `unit` floats.
enum oscar_status osc_optr_replicate(float * dst, const float * src, int64_t n_units, int64_t unit, int32_t mod,
                                     cudaStream_t stream);
// a[b·sa + e] −= x[b·sb + e] for e < len, b < n (fp32).
enum oscar_status osc_optr_sub_items(float * a, int64_t sa, const float * x, int64_t sb, int64_t len, int32_t n,
                                     cudaStream_t stream);
// dst [H, R, D] = src [R, H, D] head-major, minus mean [H, D] when not NULL (fp32).
enum oscar_status osc_optr_heads_major(float * dst, const float * src, int32_t R, int32_t H, int32_t D,
                                       const float * mean, cudaStream_t stream);

#endif
