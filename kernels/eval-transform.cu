// eval-transform.cu - the per-row K/V transform of the layer evaluator (contract in
// eval-transform.cuh). Every arithmetic step names its IEEE rounding (__fadd_rn,
// __fdiv_rn, __fma_rn, ...) so nvcc cannot contract or reorder it: the results must
// equal lib/verify's CPU transform on the same inputs.
#include "kernels/eval-transform.cuh"
#include "kernels/cuda-common.cuh"
#include "kernels/int2-row.cuh"
#include "kernels/warp-row.cuh"

#define TF_WARPS 8
#define FULL     WARP_FULL

// y = x.R with fp64 sums over i ascending (oscar_kv_rotate_row): fma(x_i, R_ij, s) equals
// s + x_i * R_ij because the product of two floats is exact in fp64.
template <int VPL> static __device__ Row<VPL> rotate_matrix(const Row<VPL> & x, const float * __restrict__ R, int lane) {
    constexpr int D = 32 * VPL;
    double acc[VPL];
#pragma unroll
    for (int k = 0; k < VPL; k++) acc[k] = 0.0;
#pragma unroll
    for (int kk = 0; kk < VPL; kk++) {
        for (int src = 0; src < 32; src++) {
            const double xi = (double) __shfl_sync(FULL, x.v[kk], src);
            const float * Ri = R + (size_t) (kk * 32 + src) * D + lane;
#pragma unroll
            for (int k = 0; k < VPL; k++) acc[k] = __fma_rn(xi, (double) __ldg(Ri + 32 * k), acc[k]);
        }
    }
    Row<VPL> y;
#pragma unroll
    for (int k = 0; k < VPL; k++) y.v[k] = __double2float_rn(acc[k]);
    return y;
}

// y = x.R, then the engine's diag(H_b) when it rotates again (the llama.cpp fork's attn_rot).
template <int VPL> static __device__ Row<VPL> rotate_fwd(const struct osc_eval_transform & a, const Row<VPL> & x,
                                                         const float * R, int lane) {
    if (a.rot == OSCAR_EVAL_ROT_MATRIX) {
        Row<VPL> y = rotate_matrix<VPL>(x, R, lane);
        if (a.engine_hadamard) block_fwht<VPL>(y, a.engine_hadamard, lane);
        return y;
    }
    if (a.rot == OSCAR_EVAL_ROT_HADAMARD) return fwht<VPL>(x, a.had_scale, lane);
    return x;
}

// The inverse of rotate_fwd (Rt: the transposes): diag(H_b) (its own inverse) first, then .R^T.
template <int VPL> static __device__ Row<VPL> rotate_back(const struct osc_eval_transform & a, Row<VPL> x,
                                                          const float * Rt, int lane) {
    if (a.rot == OSCAR_EVAL_ROT_MATRIX) {
        if (a.engine_hadamard) block_fwht<VPL>(x, a.engine_hadamard, lane);
        return rotate_matrix<VPL>(x, Rt, lane);
    }
    if (a.rot == OSCAR_EVAL_ROT_HADAMARD) return fwht<VPL>(x, a.had_scale, lane);
    return x;
}

// lib/quant lloyd-max.c on one clipped row (one group): the fp64 sequential mean and deviation,
// three thresholds on z = (x - mu) / sigma, stored as (scale, zero), dequantized as (c - zero) * scale.
template <int VPL> static __device__ void lloyd_max_dequant(const struct osc_eval_transform & a, Row<VPL> & x) {
    constexpr int D = 32 * VPL;
    const float mu = __double2float_rn(__ddiv_rn(row_sum_f64<VPL>(x), (double) D));
    double v = 0.0;
#pragma unroll
    for (int k = 0; k < VPL; k++)
        for (int src = 0; src < 32; src++) {
            const double e = __dsub_rn((double) __shfl_sync(FULL, x.v[k], src), (double) mu);
            v = __dadd_rn(v, __dmul_rn(e, e));
        }
    const float sigma = __double2float_rn(__dsqrt_rn(__dadd_rn(__ddiv_rn(v, (double) D), 1e-8)));
    const float scale = __fmul_rn(a.lm_k, sigma), zero = __fsub_rn(a.lm_z0, __fdiv_rn(mu, scale));
    const float sq = meta_round(scale, a.meta_dtype), zq = meta_round(zero, a.meta_dtype);
#pragma unroll
    for (int k = 0; k < VPL; k++) {
        const float z = __fdiv_rn(__fsub_rn(x.v[k], mu), sigma);
        const int c = (z >= -a.lm_t) + (z >= 0.0f) + (z >= a.lm_t);
        x.v[k] = __fmul_rn(__fsub_rn((float) c, zq), sq);
    }
}

// Clip, quantize and dequantize one row in place (lib/quant int2.c quantize_row + dequant_row);
// lloyd: the Lloyd-Max scheme after the clip.
template <int VPL> static __device__ void quant_dequant(const struct osc_eval_transform & a, Row<VPL> & x, int idx,
                                                       bool bisect, bool lloyd, int lane) {
    if (!a.sym && idx >= 0) {
        const float tau = bisect ? clip_tau_bisect<VPL>(x, idx) : order_stat_abs<VPL>(x, idx, 0, VPL);
#pragma unroll
        for (int k = 0; k < VPL; k++) x.v[k] = x.v[k] < -tau ? -tau : x.v[k] > tau ? tau : x.v[k];
    }
    if (lloyd) {
        lloyd_max_dequant<VPL>(a, x);
        return;
    }
    const int G = a.group_size, ng = 32 * VPL / G;
    for (int g = 0; g < ng; g++) {
        float m = INFINITY, M = -INFINITY, amax = 0.0f;
#pragma unroll
        for (int k = 0; k < VPL; k++) {
            if ((lane + 32 * k) / G != g) continue;
            m = fminf(m, x.v[k]), M = fmaxf(M, x.v[k]), amax = fmaxf(amax, fabsf(x.v[k]));
        }
        float scale, zero;
        if (a.sym) {
            scale = __fdiv_rn(fmaxf(warp_max(amax), 1e-8f), 1.5f);
            zero = 1.5f;
        } else {
            m = __fadd_rn(warp_min(m), 0.0f), M = __fadd_rn(warp_max(M), 0.0f);
            scale = __fdiv_rn(fmaxf(__fsub_rn(M, m), 1e-8f), 3.0f);
            zero = __fdiv_rn(-m, scale);
        }
        const float sq = meta_round(scale, a.meta_dtype), zq = meta_round(zero, a.meta_dtype);
#pragma unroll
        for (int k = 0; k < VPL; k++) {
            if ((lane + 32 * k) / G != g) continue;
            const float t = a.sym ? __fadd_rn(__fdiv_rn(x.v[k], scale), 2.0f)
                                  : __fadd_rn(__fadd_rn(__fdiv_rn(x.v[k], scale), zero), 0.5f);
            x.v[k] = __fmul_rn(__fsub_rn(code_trunc3(t), zq), sq);
        }
    }
}

// oscar_int4_bdh_rotate_row: every element times (float) (1/sqrt(b)) first, then the butterflies
// of stages h < b.
template <int VPL> static __device__ void block_fwht_prescaled(Row<VPL> & x, int b, float inv, int lane) {
    row_scale<VPL>(x, inv);
    butterflies<VPL>(x, b, lane);
}

// SAW-INT4 of one row in place (lib/quant int4-bdh.c quantize + dequantize with unrotate).
template <int VPL> static __device__ void int4_quant_dequant(const struct osc_eval_transform & a, Row<VPL> & x,
                                                             int lane) {
    const int b = a.int4_order;
    const float inv = (float) (1.0 / sqrt((double) b));
    block_fwht_prescaled<VPL>(x, b, inv, lane);
    float m = INFINITY, M = -INFINITY;
#pragma unroll
    for (int k = 0; k < VPL; k++) {
        x.v[k] = bf16_round(x.v[k]);
        m = fminf(m, x.v[k]), M = fmaxf(M, x.v[k]);
    }
    m = __fadd_rn(warp_min(m), 0.0f), M = __fadd_rn(warp_max(M), 0.0f);   // canonical zero sign
    const float scale = __fdiv_rn(fmaxf(__fsub_rn(M, m), 1e-8f), 15.0f);
    const float zero = __fdiv_rn(-m, scale);
    const float sq = meta_round(scale, a.meta_dtype), zq = meta_round(zero, a.meta_dtype);
#pragma unroll
    for (int k = 0; k < VPL; k++) {
        const float t = __fadd_rn(__fadd_rn(__fdiv_rn(x.v[k], scale), zero), 0.5f);
        int c = 0;
        for (int j = 1; j <= 15; j++) c += t >= (float) j;   // osc_code_trunc
        x.v[k] = __fmul_rn(__fsub_rn((float) c, zq), sq);
    }
    block_fwht_prescaled<VPL>(x, b, inv, lane);   // diag(H_b) is its own inverse
}

// lib/quant kivi.c kivi_group's scale and bias of values in [m, M] (already min / max), rounded
// to the metadata dtype, and the integer zero point (degenerate: scale 0, codes 0, bias m).
struct kivi_q { float scale, zero_q, sq, bq; bool flat; };
static __device__ kivi_q kivi_params(float m, float M, int dtype) {
    m = __fadd_rn(m, 0.0f), M = __fadd_rn(M, 0.0f);   // canonical zero sign
    if (m == 0.0f && M == 0.0f) m = -1.0f, M = 1.0f;
    kivi_q k;
    k.flat = m == M;
    k.scale = k.flat ? 0.0f : __fdiv_rn(__fsub_rn(M, m), 3.0f);
    k.zero_q = k.flat ? 0.0f : rintf(__fdiv_rn(-m, k.scale));
    const float bias = k.flat ? m : __fmul_rn(-k.zero_q, k.scale);
    k.sq = meta_round(k.scale, dtype), k.bq = meta_round(bias, dtype);
    return k;
}
static __device__ __forceinline__ float kivi_value(float x, const kivi_q & k) {
    float c = 0.0f;
    if (!k.flat) {
        const float t = rintf(__fadd_rn(__fdiv_rn(x, k.scale), k.zero_q));   // nearbyintf: half to even
        c = t <= 0.0f ? 0.0f : t >= 3.0f ? 3.0f : truncf(t);
    }
    return __fadd_rn(__fmul_rn(c, k.sq), k.bq);
}

// KIVI V of one row in place: groups of G channels (kivi.c quantize_v_rows + dequantize_v_rows).
template <int VPL> static __device__ void kivi_v_dequant(const struct osc_eval_transform & a, Row<VPL> & x, int lane) {
    const int G = a.kivi_group, ng = 32 * VPL / G;
    for (int g = 0; g < ng; g++) {
        float m = INFINITY, M = -INFINITY;
#pragma unroll
        for (int k = 0; k < VPL; k++) {
            if ((lane + 32 * k) / G != g) continue;
            m = fminf(m, x.v[k]), M = fmaxf(M, x.v[k]);
        }
        const kivi_q kq = kivi_params(warp_min(m), warp_max(M), a.meta_dtype);
#pragma unroll
        for (int k = 0; k < VPL; k++) {
            if ((lane + 32 * k) / G != g) continue;
            x.v[k] = kivi_value(x.v[k], kq);
            if (a.kivi_round_values) x.v[k] = meta_round(x.v[k], a.meta_dtype);
        }
    }
}

// lib/quant q2-0.c on one head's row, which is one fork row here (kv_transform_check's shapes),
// without the in-quant Hadamard: per group of 128 values (one 32-block when D < 128) the
// sequential fp32 mean, the clip at the order statistic idx of |x - mean| (-1: none), then per
// 32-block its sigma, the codes, and L[c] * f16(sigma) + f16(mean).
template <int VPL> static __device__ void q2_0_dequant(const struct osc_eval_transform & a, Row<VPL> & x, int idx) {
    constexpr int KB = VPL >= 4 ? 4 : 1;   // 32-blocks per group
#pragma unroll
    for (int k0 = 0; k0 < VPL; k0 += KB) {
        float s = 0.0f;
#pragma unroll
        for (int k = k0; k < k0 + KB; k++)
            for (int src = 0; src < 32; src++) s = __fadd_rn(s, __shfl_sync(FULL, x.v[k], src));
        const float mean = __fdiv_rn(s, (float) (32 * KB));
#pragma unroll
        for (int k = k0; k < k0 + KB; k++) x.v[k] = __fsub_rn(x.v[k], mean);
        if (idx >= 0) {
            const float thr = order_stat_abs<VPL>(x, idx, k0, KB);
#pragma unroll
            for (int k = k0; k < k0 + KB; k++) {
                const float c = x.v[k] > thr ? thr : x.v[k];
                x.v[k] = c < -thr ? -thr : c;
            }
        }
        const float m16 = f16_round(mean);
#pragma unroll
        for (int k = k0; k < k0 + KB; k++) {
            float ss = 0.0f;
            for (int src = 0; src < 32; src++) {
                const float v = __shfl_sync(FULL, x.v[k], src);
                ss = __fadd_rn(ss, __fmul_rn(v, v));
            }
            const float sigma = __fsqrt_rn(__fdiv_rn(ss, 32.0f));
            const float inv = sigma > 1e-8f ? __fdiv_rn(1.0f, sigma) : 0.0f;
            const float vs = __fmul_rn(x.v[k], inv);
            const int c = (vs >= -a.q2_t) + (vs >= 0.0f) + (vs >= a.q2_t);
            x.v[k] = __fadd_rn(__fmul_rn(a.q2_levels[c], f16_round(sigma)), m16);
        }
    }
}

// One thread per (block, KV head, channel): the block's B values of that channel (in place when
// q == hp: each thread reads its values before it writes them).
__global__ void kivi_k_kernel(const float * hp, float * q, const int32_t * __restrict__ blocks, int32_t n_blocks,
                              int32_t B, int32_t Hkv, int32_t D, int32_t meta_dtype, int32_t round_values) {
    const int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x, per = (int64_t) Hkv * D;
    if (i >= (int64_t) n_blocks * per) return;
    const int64_t b = blocks[i / per], col = i % per;   // col = h * D + d
    const float * x = hp + b * per + col;
    float m = x[0], M = x[0];
    for (int32_t t = 1; t < B; t++) m = fminf(m, x[(int64_t) t * per]), M = fmaxf(M, x[(int64_t) t * per]);
    const kivi_q kq = kivi_params(m, M, meta_dtype);
    for (int32_t t = 0; t < B; t++) {
        const float v = kivi_value(x[(int64_t) t * per], kq);
        q[(b + t) * per + col] = round_values ? meta_round(v, meta_dtype) : v;
    }
}

enum oscar_status osc_cuda_kivi_k_blocks(const float * hp, float * q, const int32_t * blocks, int32_t n_blocks,
                                         int32_t B, int32_t Hkv, int32_t D, int32_t meta_dtype, bool round_values,
                                         void * stream) {
    const int64_t n = (int64_t) n_blocks * Hkv * D;
    if (n <= 0) return OSCAR_OK;
    kivi_k_kernel<<<(unsigned) ((n + 255) / 256), 256, 0, (cudaStream_t) stream>>>(hp, q, blocks, n_blocks, B, Hkv, D,
                                                                                    meta_dtype, round_values);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

template <int VPL> static __device__ void add_mean(Row<VPL> & x, const float * mu, int lane) {
    if (!mu) return;
#pragma unroll
    for (int k = 0; k < VPL; k++) x.v[k] = __fadd_rn(x.v[k], mu[lane + 32 * k]);
}

template <int VPL> static __device__ void store(const struct osc_eval_transform & a, int64_t c, int64_t r,
                                                const Row<VPL> & val, const Row<VPL> & x, int lane) {
    float * o = a.out + c * a.out_stride + r * (32 * VPL) + lane;
#pragma unroll
    for (int k = 0; k < VPL; k++) o[32 * k] = a.diff ? __fsub_rn(val.v[k], x.v[k]) : val.v[k];
}

template <int VPL> __global__ void __launch_bounds__(TF_WARPS * 32) transform_kernel(struct osc_eval_transform a) {
    constexpr int D = 32 * VPL;
    const int lane = threadIdx.x & 31;
    const int64_t nw = (int64_t) gridDim.x * TF_WARPS;
    for (int64_t r = (int64_t) blockIdx.x * TF_WARPS + (threadIdx.x >> 5); r < a.n_rows; r += nw) {
        const int h = (int) (r % a.n_head_kv);
        const size_t rm = (size_t) (a.n_rot > 1 ? h : 0) * D * D;
        const float * mu = a.mu ? a.mu + (size_t) h * D : NULL;
        const Row<VPL> x = row_load<VPL>(a.x + r * D, lane);
        Row<VPL> xc = x;
        if (mu) {
#pragma unroll
            for (int k = 0; k < VPL; k++) xc.v[k] = __fsub_rn(x.v[k], mu[lane + 32 * k]);
        }
        Row<VPL> y = rotate_fwd<VPL>(a, xc, a.R + rm, lane);
        if (a.hp_bf16) {
#pragma unroll
            for (int k = 0; k < VPL; k++) y.v[k] = bf16_round(y.v[k]);
        }
        const int mode = a.int2_row[r / a.n_head_kv], tier = mode & 3;
        if (!tier || a.out_hp) {
            Row<VPL> hy = y;
            if (a.hp_f16) {
#pragma unroll
                for (int k = 0; k < VPL; k++) hy.v[k] = f16_round(y.v[k]);
            }
            Row<VPL> hp = rotate_back<VPL>(a, hy, a.Rt + rm, lane);
            add_mean<VPL>(hp, mu, lane);
            if (a.out_hp) row_store<VPL>(a.out_hp + r * D, hp, lane);
            if (!tier) {
                for (int c = 0; c < a.n_cand; c++) store<VPL>(a, c, r, hp, x, lane);
                continue;
            }
        }
        for (int c = 0; c < a.n_cand; c++) {
            Row<VPL> q = y;
            const int idx = a.clip_idx[c * a.n_head_kv + h];
            if (a.int4_order > 0) int4_quant_dequant<VPL>(a, q, lane);
            else if (a.kivi_group > 0) kivi_v_dequant<VPL>(a, q, lane);
            else if (a.q2_0) q2_0_dequant<VPL>(a, q, idx);
            else if (!a.hp_only) quant_dequant<VPL>(a, q, idx, a.bisect || tier == 2, a.lloyd_max && (mode & 4), lane);
            Row<VPL> val = rotate_back<VPL>(a, q, a.Rt + rm, lane);
            add_mean<VPL>(val, mu, lane);
            store<VPL>(a, c, r, val, x, lane);
        }
    }
}

template <int VPL> static enum oscar_status launch(const struct osc_eval_transform * a, cudaStream_t stream) {
    int dev = 0, n_sm = 0;
    OSCAR_CUDA_CHECK(cudaGetDevice(&dev));
    OSCAR_CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    int64_t blocks = (a->n_rows + TF_WARPS - 1) / TF_WARPS, cap = (int64_t) n_sm * 16;
    if (blocks > cap) blocks = cap;
    transform_kernel<VPL><<<(unsigned) blocks, TF_WARPS * 32, 0, stream>>>(*a);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

enum oscar_status osc_cuda_eval_transform(const struct osc_eval_transform * a, void * stream) {
    if (a->n_rows <= 0 || a->n_cand <= 0) return OSCAR_OK;
    cudaStream_t s = (cudaStream_t) stream;
    switch (a->head_dim) {
    case 32: return launch<1>(a, s);
    case 64: return launch<2>(a, s);
    case 128: return launch<4>(a, s);
    case 256: return launch<8>(a, s);
    }
    return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda layer eval: head_dim %d (built for 32, 64, 128, 256)", a->head_dim);
}
