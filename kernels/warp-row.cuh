// warp-row.cuh - one head's row of D = 32·VPL values held by a warp (lane l holds dims
// l + 32k, k < VPL), and the exactly rounded row operations the cache transforms share
// (eval-transform.cu, omni-k.cu). Every step names its IEEE rounding (__fadd_rn, ...) so nvcc
// cannot contract or reorder it: the results equal lib/quant's and lib/rotation's CPU bits.
#ifndef OSCAR_KERNELS_WARP_ROW_CUH
#define OSCAR_KERNELS_WARP_ROW_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define WARP_FULL 0xffffffffu

template <int VPL> struct Row {
    float v[VPL];
};

template <int VPL> static __device__ __forceinline__ Row<VPL> row_load(const float * __restrict__ p, int lane) {
    Row<VPL> x;
#pragma unroll
    for (int k = 0; k < VPL; k++) x.v[k] = p[lane + 32 * k];
    return x;
}

template <int VPL> static __device__ __forceinline__ void row_store(float * __restrict__ p, const Row<VPL> & x, int lane) {
#pragma unroll
    for (int k = 0; k < VPL; k++) p[lane + 32 * k] = x.v[k];
}

static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(WARP_FULL, v, o));
    return v;
}
static __device__ __forceinline__ float warp_min(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(WARP_FULL, v, o));
    return v;
}

static __device__ __forceinline__ float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
static __device__ __forceinline__ float f16_round(float x) { return __half2float(__float2half_rn(x)); }

// The value the metadata dtype stores (enum oscar_quant_meta_dtype: 0 f32, 1 f16, 2 bf16).
static __device__ __forceinline__ float meta_round(float x, int dtype) {
    if (dtype == 1) return f16_round(x);
    if (dtype == 2) return bf16_round(x);
    return x;
}

template <int VPL> static __device__ __forceinline__ void row_scale(Row<VPL> & x, float s) {
#pragma unroll
    for (int k = 0; k < VPL; k++) x.v[k] = __fmul_rn(x.v[k], s);
}

// The butterfly stages h < b of oscar_fwht_f32 (x[i] = lo + up, x[i+h] = lo - up), which keep
// pairs inside aligned blocks of b: h < 32 across lanes, the others across k.
template <int VPL> static __device__ void butterflies(Row<VPL> & x, int b, int lane) {
    for (int h = 1; h < 32 && h < b; h <<= 1) {
#pragma unroll
        for (int k = 0; k < VPL; k++) {
            const float p = __shfl_xor_sync(WARP_FULL, x.v[k], h);
            x.v[k] = (lane & h) ? __fsub_rn(p, x.v[k]) : __fadd_rn(x.v[k], p);
        }
    }
#pragma unroll
    for (int m = 1; m < VPL; m <<= 1) {
        if (32 * m >= b) break;
#pragma unroll
        for (int k = 0; k < VPL; k++) {
            if (k & m) continue;
            const float lo = x.v[k], up = x.v[k + m];
            x.v[k] = __fadd_rn(lo, up);
            x.v[k + m] = __fsub_rn(lo, up);
        }
    }
}

// oscar_fwht_f32 on the whole row: the butterflies, then * s (s = (float) (1 / sqrt(D))).
template <int VPL> static __device__ Row<VPL> fwht(Row<VPL> x, float s, int lane) {
    butterflies<VPL>(x, 32 * VPL, lane);
    row_scale<VPL>(x, s);
    return x;
}

// oscar_fwht_block_rows: oscar_fwht_f32 on every aligned block of b (scaled after).
template <int VPL> static __device__ void block_fwht(Row<VPL> & x, int b, int lane) {
    butterflies<VPL>(x, b, lane);
    row_scale<VPL>(x, (float) (1.0 / sqrt((double) b)));
}

// sum over the row in dim order (0, 1, ..., D - 1) in fp64, every lane the same result.
template <int VPL> static __device__ double row_sum_f64(const Row<VPL> & x) {
    double s = 0.0;
#pragma unroll
    for (int k = 0; k < VPL; k++)
        for (int src = 0; src < 32; src++) s = __dadd_rn(s, (double) __shfl_sync(WARP_FULL, x.v[k], src));
    return s;
}

#endif
