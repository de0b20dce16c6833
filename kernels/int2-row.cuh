// int2-row.cuh - the exactly rounded pieces of lib/quant's INT2 quantizer on a warp-held row
// (warp-row.cuh layout), shared by the layer evaluator's transform (eval-transform.cu) and
// OptR's straight-through quantizer (optr-quant.cu): the clip threshold (the sort order
// statistic, exactly; the bisection of int2-clip.c step for step) and the code truncation.
#ifndef OSCAR_KERNELS_INT2_ROW_CUH
#define OSCAR_KERNELS_INT2_ROW_CUH

#include "kernels/warp-row.cuh"

// sort(|x|)[idx] over the values k0 <= k < k0 + kn of every lane, exactly: the largest bit
// pattern t with #{|x| < t} <= idx.
template <int VPL> static __device__ float order_stat_abs(const Row<VPL> & x, int idx, int k0, int kn) {
    uint32_t ans = 0;
    for (int b = 30; b >= 0; b--) {
        const uint32_t t = ans | (1u << b);
        int c = 0;
#pragma unroll
        for (int k = 0; k < VPL; k++) c += k >= k0 && k < k0 + kn && (__float_as_uint(x.v[k]) & 0x7fffffffu) < t;
        if (__reduce_add_sync(WARP_FULL, c) <= idx) ans = t;
    }
    return __uint_as_float(ans);
}

// oscar_clip_tau_bisect: log2(D) halvings of [0, max|x|] towards D - idx values above.
template <int VPL> static __device__ float clip_tau_bisect(const Row<VPL> & x, int idx) {
    constexpr int D = 32 * VPL;
    float hi = 0.0f, lo = 0.0f;
#pragma unroll
    for (int k = 0; k < VPL; k++) hi = fmaxf(hi, fabsf(x.v[k]));
    hi = warp_max(hi);
    const int target = D - idx;
    for (int n = D; n > 1; n >>= 1) {
        const float mid = __fmul_rn(__fadd_rn(lo, hi), 0.5f);
        int c = 0;
#pragma unroll
        for (int k = 0; k < VPL; k++) c += fabsf(x.v[k]) > mid;
        if (__reduce_add_sync(WARP_FULL, c) > target) lo = mid;
        else hi = mid;
    }
    return hi;
}

static __device__ __forceinline__ float code_trunc3(float t) {
    return (float) ((t >= 1.0f) + (t >= 2.0f) + (t >= 3.0f));
}

#endif
