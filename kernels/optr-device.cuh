// optr-device.cuh - OptR for one layer on the GPU: rotation/optr.h's contract and result
// (struct oscar_optr_result), the "cuda" backend's optr_refine_layer.
//
// What runs where: the checks, the sequence choice and the key mean are the CPU reference's
// own code (optr-internal.h); the rows go to the device once per layer, and everything after
// runs there: the exact attention, every loss and gradient (kernels/optr-loss.cu, the
// straight-through quantizer kernels/optr-quant.cu), expm, its Fréchet adjoint and Adam in
// fp64 (kernels/optr-expm.cu). The host only keeps the held-out losses' best step per head.
//
// Precision: as the CPU reference, products are fp32 GEMMs (cuBLAS, default math mode: fp32
// accumulation, no TF32) and every sum of the losses, softmax normalisers and gradients is fp64;
// W_O's Gram matrices, the exponential map and Adam are fp64. The quantizer is bit-exact with
// the CPU's on the same rows. What differs from the CPU is the summation order of the fp32
// GEMMs and of the fp64 sums (and expf's last bit), so a rotated value within an ulp of a code
// boundary can take the other code: losses agree to ~1e-6 relative at the same rotation and the
// trajectories stay within the bounds tests/gpu/test-optr-device.c states and measures.
//
// Deterministic: fixed-order reductions (no atomics), one stream, cuBLAS with a fixed workspace
// on that stream: the same inputs give the same bits from run to run.
//
// Covers head_dim 64, 128, 256 and any INT2 group dividing it; other shapes are refused with
// OSCAR_ERR_UNSUPPORTED (never a silent CPU fallback).
#ifndef OSCAR_KERNELS_OPTR_DEVICE_CUH
#define OSCAR_KERNELS_OPTR_DEVICE_CUH

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "rotation/optr.h"

enum oscar_status osc_cuda_optr_refine_layer(const struct oscar_optr_layer * in, const struct oscar_optr_params * p,
                                             struct oscar_optr_result * out);

// Test API (tests/gpu/test-optr-device.c), mirroring the CPU's osc_optr_prepare / set_loss /
// set_phat / grad_a + Adam + rotation (optr-internal.h), so both can run in lockstep from the
// same state. opts: a deliberately wrong gradient for the control the comparison must fail.
struct osc_optr_dev_opts {
    bool drop_ste_range;   // the straight-through gradient without its σ/3 range terms
};
enum oscar_status osc_cuda_optr_refine_layer_opts(const struct oscar_optr_layer * in,
                                                  const struct oscar_optr_params * p, struct oscar_optr_result * out,
                                                  const struct osc_optr_dev_opts * opts);
// One layer's rows on the device (in, p and their arrays must outlive it); k_mean [Hkv, D] or NULL.
struct osc_cuda_optr;
enum oscar_status osc_cuda_optr_open(const struct oscar_optr_layer * in, const struct oscar_optr_params * p,
                                     const float * k_mean, const struct osc_optr_dev_opts * opts,
                                     struct osc_cuda_optr ** out);
void osc_cuda_optr_close(struct osc_cuda_optr * d);
// Per-head loss [Hkv] of phase 0 (K) or 1 (V, after osc_cuda_optr_phat) on the training or held-out
// set at R (host [Hkv, D, D]); dR (host fp64 [Hkv, D, D], training set) = dloss/dR when not NULL;
// c (host) the code residuals of the set's INT2 rows when not NULL: items in (sequence, head) order,
// each q1 − q0 rows of D.
enum oscar_status osc_cuda_optr_loss(struct osc_cuda_optr * d, int phase, bool held, const float * R, double * loss,
                                     double * dR, float * c);
// P̂ of both sets under the key rotations R_k (host): the V phase's input.
enum oscar_status osc_cuda_optr_phat(struct osc_cuda_optr * d, const float * R_k);
// One optimizer step from host state (fp64 [Hkv, D, D]): the gradient wrt A of dR at R_base·expm(A − Aᵀ),
// Adam (step numbered from 0), and the new rotation R (host fp32); A, m, v are updated in place.
enum oscar_status osc_cuda_optr_step(struct osc_cuda_optr * d, const float * R_base, double * A, double * m, double * v,
                                     const double * dR, int32_t step, float * R);

#ifdef __cplusplus
}
#endif
#endif
