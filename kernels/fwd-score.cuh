// fwd-score.cuh - next-token scoring of LM-head rows on the device (the row terms of
// lib/verify/token-stats.h): per row l [V] with target y, and optionally the reference
// row b [V] of the same position,
//   nll = lse(l) - l[y], nll_ref = lse(b) - b[y], kl = Σ_j p_j ((b_j - l_j) + (lse(l) - lse(b)))
//   with p = softmax(b), dp = exp(-nll) - exp(-nll_ref), same_top = argmax l == argmax b
//   (first index of the max), finite = every logit of both rows is finite.
// fp64 sums, each row's terms reduced by one block in a fixed tree order: deterministic,
// and identical rows give kl exactly 0. The CPU sums in index order, so the two agree to
// fp64 rounding, not bit for bit.
#ifndef OSCAR_KERNELS_FWD_SCORE_CUH
#define OSCAR_KERNELS_FWD_SCORE_CUH

#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "backend/forward-backend.h"
}

// l, b: [n, V] fp32 (b NULL: no reference terms); next [n]; out [n].
cudaError_t osc_fwd_score_rows(const float * l, const float * b, const int32_t * next, int32_t n, int32_t V,
                               struct oscar_fwd_score * out, cudaStream_t s);

#endif
