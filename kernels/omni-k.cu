// omni-k.cu - OScaR's K rows on the GPU (contract in eval-transform.cuh): the omni-token
// norm couples the KV heads of a token, so one warp takes a whole token, head after head.
// The bits are lib/quant oscar-omni.c's (fp32 butterflies, fp64 sum of squares in (head,
// channel) order, named IEEE roundings).
#include "kernels/cuda-common.cuh"
#include "kernels/eval-transform.cuh"
#include "kernels/warp-row.cuh"

#define OMNI_WARPS 8

template <int VPL> __global__ void __launch_bounds__(OMNI_WARPS * 32)
    omni_k_tokens_kernel(const float * __restrict__ x, float * __restrict__ y, float * __restrict__ norm,
                         float * __restrict__ hp, int64_t T, int32_t Hkv, float had_scale) {
    constexpr int D = 32 * VPL;
    const int lane = threadIdx.x & 31;
    const int64_t nw = (int64_t) gridDim.x * OMNI_WARPS;
    for (int64_t t = (int64_t) blockIdx.x * OMNI_WARPS + (threadIdx.x >> 5); t < T; t += nw) {
        const size_t o = (size_t) t * Hkv * D;
        double ss = 0.0;
        for (int32_t h = 0; h < Hkv; h++) {
            Row<VPL> r = fwht<VPL>(row_load<VPL>(x + o + (size_t) h * D, lane), had_scale, lane);
#pragma unroll
            for (int k = 0; k < VPL; k++)
                for (int src = 0; src < 32; src++) {
                    const double v = (double) __shfl_sync(WARP_FULL, r.v[k], src);   // before its bf16 store
                    ss = __dadd_rn(ss, __dmul_rn(v, v));
                }
#pragma unroll
            for (int k = 0; k < VPL; k++) r.v[k] = bf16_round(r.v[k]);
            row_store<VPL>(y + o + (size_t) h * D, r, lane);
        }
        float n = __double2float_rn(__dsqrt_rn(ss));
        if (!(n > 0.0f)) n = 1.0f;
        for (int32_t h = 0; h < Hkv; h++) {
            Row<VPL> r = row_load<VPL>(y + o + (size_t) h * D, lane), u;
#pragma unroll
            for (int k = 0; k < VPL; k++) {
                r.v[k] = bf16_round(__fdiv_rn(r.v[k], n));
                u.v[k] = __fmul_rn(r.v[k], n);
            }
            row_store<VPL>(y + o + (size_t) h * D, r, lane);
            row_store<VPL>(hp + o + (size_t) h * D, fwht<VPL>(u, had_scale, lane), lane);
        }
        if (lane == 0) norm[t] = n;
    }
}

template <int VPL> __global__ void __launch_bounds__(OMNI_WARPS * 32)
    omni_k_unscale_kernel(const float * __restrict__ y, const float * __restrict__ norm,
                          const int32_t * __restrict__ blocks, int64_t n_rows, int32_t B, int32_t Hkv,
                          float had_scale, float * __restrict__ out) {
    constexpr int D = 32 * VPL;
    const int lane = threadIdx.x & 31;
    const int64_t nw = (int64_t) gridDim.x * OMNI_WARPS;
    for (int64_t i = (int64_t) blockIdx.x * OMNI_WARPS + (threadIdx.x >> 5); i < n_rows; i += nw) {
        const int64_t per_block = (int64_t) B * Hkv;
        const int64_t t = blocks[i / per_block] + i % per_block / Hkv, h = i % Hkv;
        const size_t o = ((size_t) t * Hkv + (size_t) h) * D;
        Row<VPL> r = row_load<VPL>(y + o, lane);
        row_scale<VPL>(r, norm[t]);
        row_store<VPL>(out + o, fwht<VPL>(r, had_scale, lane), lane);
    }
}

static unsigned grid_for(int64_t warps) {
    const int64_t b = (warps + OMNI_WARPS - 1) / OMNI_WARPS;
    return (unsigned) (b < 4096 ? b : 4096);
}

enum oscar_status osc_cuda_omni_k_tokens(const float * x, float * y, float * norm, float * hp, int64_t T, int32_t Hkv,
                                         int32_t D, void * stream) {
    if (T <= 0) return OSCAR_OK;
    cudaStream_t s = (cudaStream_t) stream;
    const float hs = (float) (1.0 / sqrt((double) D));   // oscar_fwht_f32's factor
    const unsigned g = grid_for(T), nt = OMNI_WARPS * 32;
    switch (D) {
    case 32: omni_k_tokens_kernel<1><<<g, nt, 0, s>>>(x, y, norm, hp, T, Hkv, hs); break;
    case 64: omni_k_tokens_kernel<2><<<g, nt, 0, s>>>(x, y, norm, hp, T, Hkv, hs); break;
    case 128: omni_k_tokens_kernel<4><<<g, nt, 0, s>>>(x, y, norm, hp, T, Hkv, hs); break;
    case 256: omni_k_tokens_kernel<8><<<g, nt, 0, s>>>(x, y, norm, hp, T, Hkv, hs); break;
    default: return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda OScaR K: head_dim %d (built for 32, 64, 128, 256)", D);
    }
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

enum oscar_status osc_cuda_omni_k_unscale(const float * y, const float * norm, const int32_t * blocks, int32_t n_blocks,
                                          int32_t B, int32_t Hkv, int32_t D, float * out, void * stream) {
    const int64_t n = (int64_t) n_blocks * B * Hkv;
    if (n <= 0) return OSCAR_OK;
    cudaStream_t s = (cudaStream_t) stream;
    const float hs = (float) (1.0 / sqrt((double) D));
    const unsigned g = grid_for(n), nt = OMNI_WARPS * 32;
    switch (D) {
    case 32: omni_k_unscale_kernel<1><<<g, nt, 0, s>>>(y, norm, blocks, n, B, Hkv, hs, out); break;
    case 64: omni_k_unscale_kernel<2><<<g, nt, 0, s>>>(y, norm, blocks, n, B, Hkv, hs, out); break;
    case 128: omni_k_unscale_kernel<4><<<g, nt, 0, s>>>(y, norm, blocks, n, B, Hkv, hs, out); break;
    case 256: omni_k_unscale_kernel<8><<<g, nt, 0, s>>>(y, norm, blocks, n, B, Hkv, hs, out); break;
    default: return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda OScaR K: head_dim %d (built for 32, 64, 128, 256)", D);
    }
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}
