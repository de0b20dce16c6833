// int2-quantize.cu - GPU INT2 write path (see int2-quantize.cuh for the contract).
//
// One warp per row; lane l owns dims l, l+32, l+64, l+96, i.e. exactly the four
// crumbs of packed byte l (quartered layout), so packing needs no shuffle.
// A block of 8 warps keeps R (64 KB fp32) in shared memory and walks rows
// grid-stride, so R is loaded once per block.
#include "kernels/int2-quantize.cuh"
#include "kernels/cuda-common.cuh"

#include <cuda_bf16.h>

#define QD     128
#define QWARPS 8

static __device__ __forceinline__ float bf16_bits_to_f32(uint16_t h) { return __uint_as_float((uint32_t) h << 16); }

static __device__ __forceinline__ uint16_t f32_to_bf16_bits(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

static __device__ __forceinline__ int warp_sum_i(int v) { return __reduce_add_sync(0xffffffffu, v); }

static __device__ __forceinline__ float warp_max_f(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
static __device__ __forceinline__ float warp_min_f(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// tau = sort_ascending(|x|)[idx]: the largest bit pattern t with #{|x| < t} <= idx
// (the idx-th order statistic, exact), built bit by bit over the 31 non-sign bits.
static __device__ float clip_tau_sort(const float v[4], int idx) {
    uint32_t a[4], ans = 0;
    for (int k = 0; k < 4; k++) a[k] = __float_as_uint(v[k]) & 0x7fffffffu;
    for (int b = 30; b >= 0; b--) {
        uint32_t t = ans | (1u << b);
        int c = (a[0] < t) + (a[1] < t) + (a[2] < t) + (a[3] < t);
        if (warp_sum_i(c) <= idx) ans = t;
    }
    return __uint_as_float(ans);
}

// method.md §9.4: log2(D) = 7 halvings of [0, max|x|], count target D - idx.
static __device__ float clip_tau_bisect(const float v[4], int idx) {
    float hi = 0.0f, lo = 0.0f;
    for (int k = 0; k < 4; k++) hi = fmaxf(hi, fabsf(v[k]));
    hi = warp_max_f(hi);
    int target = QD - idx;
    for (int it = 0; it < 7; it++) {
        float mid = __fmul_rn(__fadd_rn(lo, hi), 0.5f);
        int c = (fabsf(v[0]) > mid) + (fabsf(v[1]) > mid) + (fabsf(v[2]) > mid) + (fabsf(v[3]) > mid);
        if (warp_sum_i(c) > target) lo = mid;
        else hi = mid;
    }
    return hi;
}

static __device__ __forceinline__ int code_trunc3(float t) { return (t >= 1.0f) + (t >= 2.0f) + (t >= 3.0f); }

static __device__ void quantize_store(const struct oscar_cuda_int2_write & a, float v[4], int64_t row, int lane) {
    if (a.clip_idx >= 0) {
        float tau = a.clip_bisect ? clip_tau_bisect(v, a.clip_idx) : clip_tau_sort(v, a.clip_idx);
        for (int k = 0; k < 4; k++) v[k] = fminf(fmaxf(v[k], -tau), tau);
    }
    int G = a.group_size, ng = QD / G;
    float sc[4], ze[4];   // per element: its group's scale and zero
    float msc = 0.0f, mze = 0.0f;
    for (int g = 0; g < ng; g++) {
        float m = INFINITY, M = -INFINITY;
        for (int k = 0; k < 4; k++) {
            if ((lane + 32 * k) / G == g) m = fminf(m, v[k]), M = fmaxf(M, v[k]);
        }
        m = warp_min_f(m), M = warp_max_f(M);
        float scale = __fdiv_rn(fmaxf(__fsub_rn(M, m), 1e-8f), 3.0f);
        float zero  = __fdiv_rn(-m, scale);
        for (int k = 0; k < 4; k++) {
            if ((lane + 32 * k) / G == g) sc[k] = scale, ze[k] = zero;
        }
        if (lane == 2 * g) msc = scale;
        if (lane == 2 * g + 1) mze = zero;
    }
    uint32_t byte = 0;
    for (int k = 0; k < 4; k++) {
        float t = __fadd_rn(__fadd_rn(__fdiv_rn(v[k], sc[k]), ze[k]), 0.5f);
        byte |= (uint32_t) code_trunc3(t) << (2 * k);
    }
    a.codes[row * (QD / 4) + lane] = (uint8_t) byte;
    if (lane < 2 * ng) {
        float mv = (lane & 1) ? mze : msc;
        if (a.meta_bf16) ((uint16_t *) a.meta)[row * 2 * ng + lane] = f32_to_bf16_bits(mv);
        else ((float *) a.meta)[row * 2 * ng + lane] = mv;
    }
}

__global__ void __launch_bounds__(QWARPS * 32) int2_write_kernel(struct oscar_cuda_int2_write a) {
    extern __shared__ float smem[];            // [D*D] R (if any) then [QWARPS, D] rows
    float * Rs = smem;
    float * xs = smem + (a.rot ? QD * QD : 0);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (a.rot) {
        for (int i = threadIdx.x; i < QD * QD; i += blockDim.x) Rs[i] = a.rot[i];
        __syncthreads();
    }
    float * xw = xs + w * QD;
    for (int64_t r = (int64_t) blockIdx.x * QWARPS + w; r < a.n_rows; r += (int64_t) gridDim.x * QWARPS) {
        int64_t s = a.src ? a.src[r] : r;
        const uint16_t * xr = a.x + s * QD;
        float v[4];
        if (a.rot) {
            for (int k = 0; k < 4; k++) xw[lane + 32 * k] = bf16_bits_to_f32(xr[lane + 32 * k]);
            __syncwarp();
            float acc[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
            for (int kk = 0; kk < QD; kk++) {
                float xv = xw[kk];
                for (int k = 0; k < 4; k++) acc[k] = __fmaf_rn(xv, Rs[kk * QD + lane + 32 * k], acc[k]);
            }
            __syncwarp();
            // The pool stores bf16 rotated rows (method.md §8.5): round before the clip.
            for (int k = 0; k < 4; k++) v[k] = bf16_bits_to_f32(f32_to_bf16_bits(acc[k]));
        } else {
            for (int k = 0; k < 4; k++) v[k] = bf16_bits_to_f32(xr[lane + 32 * k]);
        }
        int64_t d = a.dst ? a.dst[r] : r;
        if (d < 0) {
            for (int k = 0; k < 4; k++) a.hp[(-1 - d) * QD + lane + 32 * k] = f32_to_bf16_bits(v[k]);
            continue;
        }
        quantize_store(a, v, d, lane);
    }
}

extern "C" enum oscar_status oscar_cuda_int2_write(const struct oscar_cuda_int2_write * a, void * stream) {
    if (a->head_dim != QD || (a->group_size != 32 && a->group_size != 64 && a->group_size != 128))
        return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda int2 write: D %d / G %d (kernels are built for D 128, "
                         "G 32/64/128)", a->head_dim, a->group_size);
    if (a->clip_idx >= QD) return osc_error(OSCAR_ERR_INVALID, "cuda int2 write: clip index %d", a->clip_idx);
    if (a->n_rows <= 0) return OSCAR_OK;
    size_t shmem = ((a->rot ? QD * QD : 0) + QWARPS * QD) * sizeof(float);
    OSCAR_CUDA_CHECK(cudaFuncSetAttribute(int2_write_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) shmem));
    int dev = 0, n_sm = 0;
    OSCAR_CUDA_CHECK(cudaGetDevice(&dev));
    OSCAR_CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    int64_t blocks = (a->n_rows + QWARPS - 1) / QWARPS, cap = (int64_t) n_sm * (a->rot ? 2 : 8);
    if (blocks > cap) blocks = cap;
    int2_write_kernel<<<(unsigned) blocks, QWARPS * 32, shmem, (cudaStream_t) stream>>>(*a);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}
