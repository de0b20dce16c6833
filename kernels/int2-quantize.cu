// int2-quantize.cu - GPU INT2 write path (see int2-quantize.cuh for the contract).
//
// One warp per row; lane l owns dims l + 32 i (i < D/32). At D >= 128 these are
// the crumbs of whole packed bytes l + 32 (i % (D/128)) (plane i / (D/128)), so
// packing needs no shuffle; at D 64 byte b's crumbs sit on lanes b and b + 16
// (one xor-16 shuffle). A block of 8 warps keeps R (D^2 fp32: 16 or 64 KB) in
// shared memory and walks rows grid-stride, so R is loaded once per block; at
// D 256 R (256 KB) exceeds shared memory and is read through L1/L2 instead.
#include "kernels/int2-quantize.cuh"
#include "kernels/cuda-common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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
template <int E> static __device__ float clip_tau_sort(const float (&v)[E], int idx) {
    uint32_t a[E], ans = 0;
    for (int k = 0; k < E; k++) a[k] = __float_as_uint(v[k]) & 0x7fffffffu;
    for (int b = 30; b >= 0; b--) {
        uint32_t t = ans | (1u << b);
        int c = 0;
        for (int k = 0; k < E; k++) c += a[k] < t;
        if (warp_sum_i(c) <= idx) ans = t;
    }
    return __uint_as_float(ans);
}

// method.md §9.4: log2(D) halvings of [0, max|x|], count target D - idx.
template <int D> static __device__ float clip_tau_bisect(const float (&v)[D / 32], int idx) {
    constexpr int E = D / 32, ITERS = D == 64 ? 6 : D == 128 ? 7 : 8;
    float hi = 0.0f, lo = 0.0f;
    for (int k = 0; k < E; k++) hi = fmaxf(hi, fabsf(v[k]));
    hi = warp_max_f(hi);
    int target = D - idx;
    for (int it = 0; it < ITERS; it++) {
        float mid = __fmul_rn(__fadd_rn(lo, hi), 0.5f);
        int c = 0;
        for (int k = 0; k < E; k++) c += fabsf(v[k]) > mid;
        if (warp_sum_i(c) > target) lo = mid;
        else hi = mid;
    }
    return hi;
}

static __device__ __forceinline__ int code_trunc3(float t) { return (t >= 1.0f) + (t >= 2.0f) + (t >= 3.0f); }

template <int D>
static __device__ void quantize_store(const struct oscar_cuda_int2_write & a, float (&v)[D / 32], int64_t row, int lane) {
    constexpr int E = D / 32;
    if (a.clip_idx >= 0) {
        float tau = a.clip_bisect ? clip_tau_bisect<D>(v, a.clip_idx) : clip_tau_sort<E>(v, a.clip_idx);
        for (int k = 0; k < E; k++) v[k] = fminf(fmaxf(v[k], -tau), tau);
    }
    int G = a.group_size, ng = D / G;
    float sc[E], ze[E];   // per element: its group's scale and zero
    float msc = 0.0f, mze = 0.0f;
    for (int g = 0; g < ng; g++) {
        float m = INFINITY, M = -INFINITY;
        for (int k = 0; k < E; k++) {
            if ((lane + 32 * k) / G == g) m = fminf(m, v[k]), M = fmaxf(M, v[k]);
        }
        // + 0: the CPU's canonical zero (a -0.0 minimum would flip the sign of zero = -m / scale)
        m = __fadd_rn(warp_min_f(m), 0.0f), M = __fadd_rn(warp_max_f(M), 0.0f);
        float scale = __fdiv_rn(fmaxf(__fsub_rn(M, m), 1e-8f), 3.0f);
        float zero  = __fdiv_rn(-m, scale);
        for (int k = 0; k < E; k++) {
            if ((lane + 32 * k) / G == g) sc[k] = scale, ze[k] = zero;
        }
        if (lane == 2 * g) msc = scale;
        if (lane == 2 * g + 1) mze = zero;
    }
    int code[E];
    for (int k = 0; k < E; k++) code[k] = code_trunc3(__fadd_rn(__fadd_rn(__fdiv_rn(v[k], sc[k]), ze[k]), 0.5f));
    uint8_t * out = a.codes + row * (D / 4);
    if constexpr (D == 64) {
        // dims l and l + 32 are planes l/16 and 2 + l/16 of byte l % 16
        const int pl = lane >> 4;
        uint32_t part = (uint32_t) code[0] << (2 * pl) | (uint32_t) code[1] << (2 * (2 + pl));
        part |= __shfl_xor_sync(0xffffffffu, part, 16);
        if (lane < 16) out[lane] = (uint8_t) part;
    } else {
        constexpr int BPL = D / 128;   // bytes per lane: l + 32 bi, element k in byte k % BPL, plane k / BPL
        for (int bi = 0; bi < BPL; bi++) {
            uint32_t byte = 0;
            for (int k = bi; k < E; k += BPL) byte |= (uint32_t) code[k] << (2 * (k / BPL));
            out[lane + 32 * bi] = (uint8_t) byte;
        }
    }
    if (lane < 2 * ng) {
        float mv = (lane & 1) ? mze : msc;
        if (a.meta_dtype == OSCAR_META_BF16) ((uint16_t *) a.meta)[row * 2 * ng + lane] = f32_to_bf16_bits(mv);
        else if (a.meta_dtype == OSCAR_META_F16) ((uint16_t *) a.meta)[row * 2 * ng + lane] = __half_as_ushort(__float2half_rn(mv));
        else ((float *) a.meta)[row * 2 * ng + lane] = mv;
    }
}

// R_SMEM: R is staged in shared memory (D <= 128), else read from global memory.
template <int D>
__global__ void __launch_bounds__(QWARPS * 32) int2_write_kernel(struct oscar_cuda_int2_write a) {
    constexpr int E = D / 32;
    constexpr bool R_SMEM = D <= 128;
    extern __shared__ float smem[];            // [D*D] R (if staged) then [QWARPS, D] rows
    const float * Rs = a.rot;
    float * xs = smem + (a.rot && R_SMEM ? D * D : 0);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (a.rot && R_SMEM) {
        for (int i = threadIdx.x; i < D * D; i += blockDim.x) smem[i] = a.rot[i];
        __syncthreads();
        Rs = smem;
    }
    float * xw = xs + w * D;
    for (int64_t r = (int64_t) blockIdx.x * QWARPS + w; r < a.n_rows; r += (int64_t) gridDim.x * QWARPS) {
        int64_t s = a.src ? a.src[r] : r;
        const uint16_t * xr = a.x + s * D;
        float v[E];
        if (a.rot) {
            for (int k = 0; k < E; k++) xw[lane + 32 * k] = bf16_bits_to_f32(xr[lane + 32 * k]);
            __syncwarp();
            float acc[E];
            for (int k = 0; k < E; k++) acc[k] = 0.0f;
            for (int kk = 0; kk < D; kk++) {
                float xv = xw[kk];
                for (int k = 0; k < E; k++) {
                    float rk = R_SMEM ? Rs[kk * D + lane + 32 * k] : __ldg(Rs + kk * D + lane + 32 * k);
                    acc[k] = __fmaf_rn(xv, rk, acc[k]);
                }
            }
            __syncwarp();
            // The pool stores bf16 rotated rows (method.md §8.5): round before the clip.
            for (int k = 0; k < E; k++) v[k] = bf16_bits_to_f32(f32_to_bf16_bits(acc[k]));
        } else {
            for (int k = 0; k < E; k++) v[k] = bf16_bits_to_f32(xr[lane + 32 * k]);
        }
        int64_t d = a.dst ? a.dst[r] : r;
        if (d < 0) {
            for (int k = 0; k < E; k++) a.hp[(-1 - d) * D + lane + 32 * k] = f32_to_bf16_bits(v[k]);
            continue;
        }
        quantize_store<D>(a, v, d, lane);
    }
}

extern "C" enum oscar_status oscar_cuda_int2_write_supports(int32_t head_dim, int32_t group_size) {
    int32_t G = group_size > 0 ? group_size : head_dim;
    if ((head_dim != 64 && head_dim != 128 && head_dim != 256) || G < 32 || G > head_dim || head_dim % G != 0 ||
        (G & (G - 1)) != 0)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda int2 write: D %d / G %d (the kernels are built for D 64, 128 "
                         "and 256 with G a power of two in [32, D])", head_dim, G);
    return OSCAR_OK;
}

template <int D> static enum oscar_status launch(const struct oscar_cuda_int2_write * a, cudaStream_t stream) {
    constexpr bool R_SMEM = D <= 128;
    size_t shmem = ((a->rot && R_SMEM ? D * D : 0) + QWARPS * D) * sizeof(float);
    OSCAR_CUDA_CHECK(cudaFuncSetAttribute(int2_write_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) shmem));
    int dev = 0, n_sm = 0;
    OSCAR_CUDA_CHECK(cudaGetDevice(&dev));
    OSCAR_CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    int64_t blocks = (a->n_rows + QWARPS - 1) / QWARPS, cap = (int64_t) n_sm * (a->rot && R_SMEM ? 2 : 8);
    if (blocks > cap) blocks = cap;
    int2_write_kernel<D><<<(unsigned) blocks, QWARPS * 32, shmem, stream>>>(*a);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

extern "C" enum oscar_status oscar_cuda_int2_write(const struct oscar_cuda_int2_write * a, void * stream) {
    enum oscar_status st = oscar_cuda_int2_write_supports(a->head_dim, a->group_size);
    if (st != OSCAR_OK) return st;
    if ((unsigned) a->meta_dtype > OSCAR_META_BF16)
        return osc_error(OSCAR_ERR_INVALID, "cuda int2 write: meta dtype %d (0 f32, 1 f16, 2 bf16)", a->meta_dtype);
    if (a->clip_idx >= a->head_dim)
        return osc_error(OSCAR_ERR_INVALID, "cuda int2 write: clip index %d (D %d)", a->clip_idx, a->head_dim);
    if (a->n_rows <= 0) return OSCAR_OK;
    cudaStream_t s = (cudaStream_t) stream;
    if (a->head_dim == 64) return launch<64>(a, s);
    if (a->head_dim == 128) return launch<128>(a, s);
    return launch<256>(a, s);
}
