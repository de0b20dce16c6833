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

// Test hooks (tests/gpu/test-optr-device.c): a deliberately wrong gradient, for the control
// that the comparison with the CPU must fail.
struct osc_optr_dev_opts {
    bool drop_ste_range;   // the straight-through gradient without its σ/3 range terms
};
enum oscar_status osc_cuda_optr_refine_layer_opts(const struct oscar_optr_layer * in,
                                                  const struct oscar_optr_params * p, struct oscar_optr_result * out,
                                                  const struct osc_optr_dev_opts * opts);

#ifdef __cplusplus
}
#endif
#endif
