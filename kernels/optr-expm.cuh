// optr-expm.cuh - OptR's parameterisation on the GPU, batched over the KV heads of a layer,
// all in fp64 as lib/rotation/optr-expm.c and optr.c: R = R_base·expm(A − Aᵀ), the gradient
// dL/dA through the adjoint of expm's Fréchet derivative, and the Adam step. The same
// algorithm step for step (scaling by 2^-s with ‖X‖₁/2^s <= 1/4 per head, 14 Taylor terms,
// s squarings, the product rule for the derivative); the D x D products are cuBLAS DGEMMs,
// so sums run in cuBLAS's order (fp64 rounding apart, the CPU's numbers). Deterministic.
#ifndef OSCAR_KERNELS_OPTR_EXPM_CUH
#define OSCAR_KERNELS_OPTR_EXPM_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "util/error.h"
}

struct osc_optr_expm_ws;   // device workspace for n heads of D x D

enum oscar_status osc_optr_expm_open(cublasHandle_t blas, cudaStream_t stream, int32_t n, int32_t D,
                                     struct osc_optr_expm_ws ** out);
void osc_optr_expm_free(struct osc_optr_expm_ws * w);

// R (fp32 [n, D, D]) = (float) (Rb·expm(A − Aᵀ)); Rb, A fp64 [n, D, D] device arrays.
// Waits for the stream once (the squaring counts).
enum oscar_status osc_optr_expm_rotation(struct osc_optr_expm_ws * w, const double * Rb, const double * A, float * R);
// gA = dL/dA at R = Rb·expm(A − Aᵀ) from dR = dL/dR (fp64 [n, D, D]). Waits for the stream once.
enum oscar_status osc_optr_expm_grad_a(struct osc_optr_expm_ws * w, const double * Rb, const double * A,
                                       const double * dR, double * gA);
// One Adam step (betas 0.9, 0.999, eps 1e-8) of A, m, v [n_elem] with the gradient gA / n_heads (the
// layer's KV heads: optr.c's mean over heads); bc1, bc2 = 1 − β^t.
enum oscar_status osc_optr_dev_adam(double * A, double * m, double * v, const double * gA, int64_t n_elem, double n_heads,
                                    double lr, double bc1, double bc2, cudaStream_t stream);

#endif
