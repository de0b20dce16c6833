// fwd-kernels.cu - the device kernels of the CUDA forward pass (see fwd-kernels.cuh).
// Kernels that touch weights or GEMM activations are templates over bf16 / fp32 (the
// pass's fp32 mode); the bf16 instances are the original kernels unchanged.
// No fast-math intrinsics: expf/cosf/sinf/sqrt are the accurate versions, and every
// reduction runs in a fixed order (results do not depend on scheduling).
#include "kernels/fwd-kernels.cuh"

#include <math.h>

static inline unsigned grid_for(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (unsigned) (b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

// Weights and GEMM activations are bf16 (default) or fp32 (the exact mode): the kernels that
// read or write them are templates over the element type, converted through these.
static __device__ __forceinline__ float to_f32(float x) { return x; }
static __device__ __forceinline__ float to_f32(osc_bf16 x) { return __bfloat162float(x); }
static __device__ __forceinline__ void put(float * p, float x) { *p = x; }
static __device__ __forceinline__ void put(osc_bf16 * p, float x) { *p = __float2bfloat16(x); }

// ---- elementwise --------------------------------------------------------------------

// scale 1 leaves every value as it is (x * 1 is exact)
template <typename E>
__global__ void k_embed(float * x, const E * embd, const int32_t * tokens, int32_t C, float scale) {
    const int32_t t = blockIdx.x;
    const E * src = embd + (size_t) tokens[t] * C;
    float * dst = x + (size_t) t * C;
    for (int32_t i = threadIdx.x; i < C; i += blockDim.x) dst[i] = __fmul_rn(to_f32(src[i]), scale);
}

template <typename E>
static cudaError_t launch_embed(float * x, const E * embd, const int32_t * tokens, int32_t T, int32_t C, float scale,
                                cudaStream_t s) {
    k_embed<E><<<T, 256, 0, s>>>(x, embd, tokens, C, scale);
    return cudaGetLastError();
}

cudaError_t osc_fwd_embed(float * x, const osc_bf16 * embd, const int32_t * tokens, int32_t T, int32_t C,
                          float scale, cudaStream_t s) {
    return launch_embed(x, embd, tokens, T, C, scale, s);
}

cudaError_t osc_fwd_embed(float * x, const float * embd, const int32_t * tokens, int32_t T, int32_t C, float scale,
                          cudaStream_t s) {
    return launch_embed(x, embd, tokens, T, C, scale, s);
}

// Block-wide double sum in a fixed tree order; blockDim.x == 256.
__device__ double block_sum_256(double v, double * sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if ((int) threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

// 1 / sqrt(mean(xr^2) + eps) of one row of C, the sum of squares in fp64 (a block of 256 threads).
static __device__ float row_rms_inv(const float * xr, int32_t C, float eps, double * sh) {
    double ss = 0.0;
    for (int32_t i = threadIdx.x; i < C; i += 256) ss += (double) xr[i] * (double) xr[i];
    ss = block_sum_256(ss, sh);
    return (float) (1.0 / sqrt(ss / (double) C + (double) eps));
}

// off + w: off = 0 gives w itself (the Llama norm, unchanged bits)
template <typename Y>
__global__ void __launch_bounds__(256) k_rmsnorm(Y * y, const float * x, const float * w, float off, int32_t C,
                                                 float eps) {
    __shared__ double sh[256];
    const float * xr = x + (size_t) blockIdx.x * C;
    Y * yr = y + (size_t) blockIdx.x * C;
    const float r = row_rms_inv(xr, C, eps, sh);
    for (int32_t i = threadIdx.x; i < C; i += 256) put(&yr[i], (off + w[i]) * (xr[i] * r));
}

template <typename Y>
static cudaError_t launch_rmsnorm(Y * y, const float * x, const float * w, float off, int32_t T, int32_t C, float eps,
                                  cudaStream_t s) {
    k_rmsnorm<Y><<<T, 256, 0, s>>>(y, x, w, off, C, eps);
    return cudaGetLastError();
}

cudaError_t osc_fwd_rmsnorm(osc_bf16 * y, const float * x, const float * w, float off, int32_t T, int32_t C,
                            float eps, cudaStream_t s) {
    return launch_rmsnorm(y, x, w, off, T, C, eps, s);
}

cudaError_t osc_fwd_rmsnorm(float * y, const float * x, const float * w, float off, int32_t T, int32_t C, float eps,
                            cudaStream_t s) {
    return launch_rmsnorm(y, x, w, off, T, C, eps, s);
}

// The normed value is rounded to fp32 before the add (no fused multiply-add), as the CPU's
// rmsnorm into xn and then x += xn.
__global__ void __launch_bounds__(256) k_add_rmsnorm(float * x, const float * y, const float * w, float off, int32_t C,
                                                     float eps) {
    __shared__ double sh[256];
    const float * yr = y + (size_t) blockIdx.x * C;
    float * xr = x + (size_t) blockIdx.x * C;
    const float r = row_rms_inv(yr, C, eps, sh);
    for (int32_t i = threadIdx.x; i < C; i += 256) xr[i] = __fadd_rn(xr[i], __fmul_rn(off + w[i], __fmul_rn(yr[i], r)));
}

cudaError_t osc_fwd_add_rmsnorm(float * x, const float * y, const float * w, float off, int32_t T, int32_t C,
                                float eps, cudaStream_t s) {
    k_add_rmsnorm<<<T, 256, 0, s>>>(x, y, w, off, C, eps);
    return cudaGetLastError();
}

__device__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One warp per (token, head) of the Hq + 2 Hkv heads; lane holds the rotated pairs (i, i + R/2)
// and the pass-through dims R .. D-1 it owns (none when R = D: the full rotation, unchanged bits).
// PARTIAL = R < D: a template parameter so the full-rotation kernel keeps its registers (the
// pass-through array would put the head in local memory).
template <bool PARTIAL>
__global__ void __launch_bounds__(256) k_qkv_epilogue(float * q, float * k, float * v, osc_bf16 * qb,
                                                      osc_bf16 * kb, osc_bf16 * vb, const float * qkv,
                                                      const float * bias, const float * qn, const float * kn,
                                                      float off, const int32_t * pos, const float * inv_freq,
                                                      float rope_scale, int32_t R, int32_t Hq, int32_t Hkv, int32_t D,
                                                      float eps) {
    const int32_t t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t H = Hq + 2 * Hkv, h2 = R / 2, row = H * D;
    const float p = (float) pos[t];
    for (int32_t hh = warp; hh < H; hh += blockDim.x >> 5) {
        const float * src = qkv + (size_t) t * row + (size_t) hh * D;
        const float * b = bias ? bias + (size_t) hh * D : nullptr;
        float a[OSC_FWD_MAX_HEAD_DIM / 64], c[OSC_FWD_MAX_HEAD_DIM / 64];
        float z[PARTIAL ? OSC_FWD_MAX_HEAD_DIM / 32 : 1]; // the pass-through dims
        int32_t n = 0, nz = 0;
        double ss = 0.0;
        for (int32_t i = lane; i < h2; i += 32, n++) {
            a[n] = src[i] + (b ? b[i] : 0.0f);
            c[n] = src[i + h2] + (b ? b[i + h2] : 0.0f);
            ss += (double) a[n] * (double) a[n] + (double) c[n] * (double) c[n];
        }
        for (int32_t i = R + lane; PARTIAL && i < D; i += 32, nz++) {
            z[nz] = src[i] + (b ? b[i] : 0.0f);
            ss += (double) z[nz] * (double) z[nz];
        }
        if (hh >= Hq + Hkv) { // v: copy
            const size_t o = ((size_t) t * Hkv + (hh - Hq - Hkv)) * D;
            n = 0;
            for (int32_t i = lane; i < h2; i += 32, n++) v[o + i] = a[n], v[o + i + h2] = c[n];
            nz = 0;
            for (int32_t i = R + lane; PARTIAL && i < D; i += 32, nz++) v[o + i] = z[nz];
            if (vb) {
                n = 0;
                for (int32_t i = lane; i < h2; i += 32, n++)
                    vb[o + i] = __float2bfloat16(a[n]), vb[o + i + h2] = __float2bfloat16(c[n]);
                nz = 0;
                for (int32_t i = R + lane; PARTIAL && i < D; i += 32, nz++) vb[o + i] = __float2bfloat16(z[nz]);
            }
            continue;
        }
        const float * nw = hh < Hq ? qn : kn;
        const size_t o = hh < Hq ? ((size_t) t * Hq + hh) * D : ((size_t) t * Hkv + (hh - Hq)) * D;
        float * dst = (hh < Hq ? q : k) + o;
        osc_bf16 * dstb = qb ? (hh < Hq ? qb : kb) + o : nullptr;
        ss = warp_sum_d(ss);
        const float r = nw ? (float) (1.0 / sqrt(ss / (double) D + (double) eps)) : 1.0f;
        n = 0;
        for (int32_t i = lane; i < h2; i += 32, n++) {
            float x0 = a[n], x1 = c[n];
            if (nw) x0 = (off + nw[i]) * (x0 * r), x1 = (off + nw[i + h2]) * (x1 * r);
            const float ang = inv_freq[i] * p; // fp32 angle, as transformers computes it
            // times the attention factor, as the CPU's tables (transformers: emb.cos() * attention_scaling)
            const float cs = __fmul_rn(cosf(ang), rope_scale), sn = __fmul_rn(sinf(ang), rope_scale);
            const float y0 = x0 * cs - x1 * sn, y1 = x1 * cs + x0 * sn;
            dst[i] = y0, dst[i + h2] = y1;
            if (dstb) dstb[i] = __float2bfloat16(y0), dstb[i + h2] = __float2bfloat16(y1);
        }
        nz = 0;
        for (int32_t i = R + lane; PARTIAL && i < D; i += 32, nz++) { // not rotated (partial rotary)
            const float y = nw ? (off + nw[i]) * (z[nz] * r) : z[nz];
            dst[i] = y;
            if (dstb) dstb[i] = __float2bfloat16(y);
        }
    }
}

cudaError_t osc_fwd_qkv_epilogue(float * q, float * k, float * v, osc_bf16 * qb, osc_bf16 * kb, osc_bf16 * vb,
                                 const float * qkv, const float * bias, const float * qn, const float * kn, float off,
                                 const int32_t * pos, const float * inv_freq, float rope_scale, int32_t R, int32_t T,
                                 int32_t Hq, int32_t Hkv, int32_t D, float eps, cudaStream_t s) {
    if (R <= 0 || R > D || R % 2 != 0) return cudaErrorInvalidValue;
    if (R < D)
        k_qkv_epilogue<true><<<T, 256, 0, s>>>(q, k, v, qb, kb, vb, qkv, bias, qn, kn, off, pos, inv_freq,
                                               rope_scale, R, Hq, Hkv, D, eps);
    else
        k_qkv_epilogue<false><<<T, 256, 0, s>>>(q, k, v, qb, kb, vb, qkv, bias, qn, kn, off, pos, inv_freq,
                                                rope_scale, R, Hq, Hkv, D, eps);
    return cudaGetLastError();
}

// torch's gelu(approximate="tanh") in fp32 times u, each operation rounded in the CPU's order
// (_rn: no fused multiply-adds): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) u.
static __device__ __forceinline__ float gelu_tanh_mul(float x, float u) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    const float x3 = __fmul_rn(__fmul_rn(__fmul_rn(k1, x), x), x);
    const float th = tanhf(__fmul_rn(k0, __fadd_rn(x, x3)));
    return __fmul_rn(__fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, th)), u);
}

template <typename Y> __global__ void k_swiglu(Y * h, const float * gu, int32_t F, int64_t n, bool gelu_tanh) {
    for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n; i += (int64_t) gridDim.x * blockDim.x) {
        const int64_t t = i / F, j = i % F;
        const float g = gu[t * 2 * F + j], u = gu[t * 2 * F + F + j];
        put(&h[i], gelu_tanh ? gelu_tanh_mul(g, u) : g / (1.0f + expf(-g)) * u);
    }
}

template <typename Y>
static cudaError_t launch_swiglu(Y * h, const float * gu, int32_t T, int32_t F, bool gelu_tanh, cudaStream_t s) {
    const int64_t n = (int64_t) T * F;
    k_swiglu<Y><<<grid_for(n, 256), 256, 0, s>>>(h, gu, F, n, gelu_tanh);
    return cudaGetLastError();
}

cudaError_t osc_fwd_swiglu(osc_bf16 * h, const float * gu, int32_t T, int32_t F, bool gelu_tanh, cudaStream_t s) {
    return launch_swiglu(h, gu, T, F, gelu_tanh, s);
}

cudaError_t osc_fwd_swiglu(float * h, const float * gu, int32_t T, int32_t F, bool gelu_tanh, cudaStream_t s) {
    return launch_swiglu(h, gu, T, F, gelu_tanh, s);
}

// ---- attention --------------------------------------------------------------------------
// Block = (work item, query head), 256 threads as a 16 x 16 grid: thread (tr, tc) owns query
// rows 4 tr .. 4 tr + 3 and, of every 64-key tile, keys tc + 16 j (j < 4); of the output it
// owns columns tc + 16 c (c < DP/16). The 16 threads of a row group are one half-warp, so
// row maxima and sums are half-warp shuffles. Shared: Q [64][DP+1], K [64][DP+1], V [64][DP],
// P [64][65] (padding keeps the column reads conflict-free).
enum { ATT_BK = 64, ATT_THREADS = 256 };

template <int DP> static size_t att_smem_bytes() {
    return sizeof(float) * (2 * OSC_ATT_BQ * (DP + 1) + ATT_BK * DP + OSC_ATT_BQ * (ATT_BK + 1));
}

// The first key row that query row qi of a block reads: s0, or with a sliding window of W keys
// qi - W + 1 when that is later (rows.c's first_of, in batch rows).
static __device__ __forceinline__ int32_t att_first(const struct osc_att_block & blk, int32_t window, int32_t qi) {
    return window > 0 ? max(blk.s0, qi - window + 1) : blk.s0;
}

// Does any of the block's query rows read a key of tile [j0, j0 + BK) from this source (tiered:
// int2 = the INT2 rows, else the HP rows)? Row qi reads keys [first, qi], the INT2 ones in [lo, hi).
static __device__ bool tile_needed(const struct osc_att_block & blk, const struct osc_att_tiers & t, int32_t window,
                                   int32_t j0, bool int2) {
    bool need = false;
    const int32_t qi = blk.q0 + (int32_t) threadIdx.x;
    if ((int32_t) threadIdx.x < OSC_ATT_BQ && qi < blk.q1) {
        const int32_t b = max(j0, att_first(blk, window, qi)), e = min(j0 + ATT_BK, qi + 1);
        const int32_t n_int2 = max(0, min(e, t.hi[qi]) - max(b, t.lo[qi]));
        need = e > b && (int2 ? n_int2 > 0 : e - b > n_int2);
    }
    return __syncthreads_or(need) != 0;
}

// TIERED: every key tile is read from the HP rows (k, v) and again from the INT2 rows (t.k, t.v)
// where some row needs it, each pass masked to the keys that row reads from that source; the
// online softmax takes the two passes as one key set.
template <int DP, bool TIERED, typename O>
__global__ void __launch_bounds__(ATT_THREADS) k_attention(O * out, const float * q, const float * k,
                                                           const float * v, const struct osc_att_block * blocks,
                                                           struct osc_att_tiers tiers, int32_t Hq, int32_t Hkv,
                                                           int32_t D, struct osc_att_rule rule) {
    extern __shared__ float sm[];
    float * sQ = sm;                               // [BQ][DP+1]
    float * sK = sQ + OSC_ATT_BQ * (DP + 1);       // [BK][DP+1]
    float * sV = sK + ATT_BK * (DP + 1);           // [BK][DP]
    float * sP = sV + ATT_BK * DP;                 // [BQ][BK+1]
    const struct osc_att_block blk = blocks[blockIdx.x];
    const int32_t h = blockIdx.y, kh = h / (Hq / Hkv);
    const int32_t tid = threadIdx.x, tr = tid >> 4, tc = tid & 15;
    const int32_t W = rule.window;
    const float scale = rule.scale;
    // tiles start at the first key any row of the block reads (a window skips the older ones)
    const int32_t j_begin = att_first(blk, W, blk.q0);
    constexpr int NC = DP / 16;

    for (int32_t e = tid; e < OSC_ATT_BQ * DP; e += ATT_THREADS) {
        const int32_t r = e / DP, d = e % DP, i = blk.q0 + r;
        sQ[r * (DP + 1) + d] = (i < blk.q1 && d < D) ? q[((size_t) i * Hq + h) * D + d] : 0.0f;
    }
    float o[4][NC], m[4], l[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY, l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < NC; c++) o[i][c] = 0.0f;
    }
    for (int32_t it = 0; it < (TIERED ? 2 : 1) * ((blk.q1 - j_begin + ATT_BK - 1) / ATT_BK); it++) {
        const int32_t j0 = j_begin + (TIERED ? it >> 1 : it) * ATT_BK;
        const bool int2 = TIERED && (it & 1);
        if (TIERED) {
            if (!tile_needed(blk, tiers, W, j0, int2)) continue; // (a barrier, as below)
        } else {
            __syncthreads(); // the previous tile's K, V, P are no longer read
        }
        const float * ks = int2 ? tiers.k : k, * vs = int2 ? tiers.v : v;
        for (int32_t e = tid; e < ATT_BK * DP; e += ATT_THREADS) {
            const int32_t r = e / DP, d = e % DP, j = j0 + r;
            const bool ok = j < blk.q1 && d < D;
            const size_t off = ((size_t) j * Hkv + kh) * D + d;
            sK[r * (DP + 1) + d] = ok ? ks[off] : 0.0f;
            sV[r * DP + d] = ok ? vs[off] : 0.0f;
        }
        __syncthreads();
        float s[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) s[i][j] = 0.0f;
        for (int d = 0; d < DP; d++) {
            float qa[4], kb[4];
#pragma unroll
            for (int i = 0; i < 4; i++) qa[i] = sQ[(tr * 4 + i) * (DP + 1) + d];
#pragma unroll
            for (int j = 0; j < 4; j++) kb[j] = sK[(tc + 16 * j) * (DP + 1) + d];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) s[i][j] = fmaf(qa[i], kb[j], s[i][j]);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int32_t qi = blk.q0 + tr * 4 + i;
            const int32_t lo = TIERED && qi < blk.q1 ? tiers.lo[qi] : 0, hi = TIERED && qi < blk.q1 ? tiers.hi[qi] : 0;
            float mt = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int32_t kj = j0 + tc + 16 * j;
                const bool src_ok = !TIERED || ((kj >= lo && kj < hi) == int2);
                const bool in_window = W <= 0 || qi - kj < W;
                s[i][j] = (kj <= qi && qi < blk.q1 && src_ok && in_window) ? s[i][j] * scale : -INFINITY;
                mt = fmaxf(mt, s[i][j]);
            }
            for (int off = 8; off > 0; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
            const float mn = fmaxf(m[i], mt);
            const float alpha = mn == -INFINITY ? 1.0f : expf(m[i] - mn);
            float ps = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float pj = mn == -INFINITY ? 0.0f : expf(s[i][j] - mn);
                sP[(tr * 4 + i) * (ATT_BK + 1) + tc + 16 * j] = pj;
                ps += pj;
            }
            for (int off = 8; off > 0; off >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, off);
            l[i] = l[i] * alpha + ps;
            m[i] = mn;
#pragma unroll
            for (int c = 0; c < NC; c++) o[i][c] *= alpha;
        }
        __syncthreads();
        for (int kk = 0; kk < ATT_BK; kk++) {
            float pa[4], vb[NC];
#pragma unroll
            for (int i = 0; i < 4; i++) pa[i] = sP[(tr * 4 + i) * (ATT_BK + 1) + kk];
#pragma unroll
            for (int c = 0; c < NC; c++) vb[c] = sV[kk * DP + tc + 16 * c];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int c = 0; c < NC; c++) o[i][c] = fmaf(pa[i], vb[c], o[i][c]);
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int32_t qi = blk.q0 + tr * 4 + i;
        if (qi >= blk.q1) continue;
        const float inv = 1.0f / l[i];
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const int32_t d = tc + 16 * c;
            if (d < D) put(&out[((size_t) qi * Hq + h) * D + d], o[i][c] * inv);
        }
    }
}

template <int DP, bool TIERED, typename O>
static cudaError_t launch_attention(O * out, const float * q, const float * k, const float * v,
                                    const struct osc_att_block * blocks, int32_t n_blocks,
                                    const struct osc_att_tiers & t, int32_t Hq, int32_t Hkv, int32_t D,
                                    struct osc_att_rule r, cudaStream_t s) {
    const size_t smem = att_smem_bytes<DP>();
    cudaError_t e =
        cudaFuncSetAttribute(k_attention<DP, TIERED, O>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) smem);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned) n_blocks, (unsigned) Hq);
    k_attention<DP, TIERED, O><<<grid, ATT_THREADS, smem, s>>>(out, q, k, v, blocks, t, Hq, Hkv, D, r);
    return cudaGetLastError();
}

template <bool TIERED, typename O>
static cudaError_t attention_any(O * out, const float * q, const float * k, const float * v,
                                 const struct osc_att_block * blocks, int32_t n_blocks, const struct osc_att_tiers & t,
                                 int32_t Hq, int32_t Hkv, int32_t D, struct osc_att_rule r, cudaStream_t s) {
    if (n_blocks <= 0) return cudaSuccess;
    if (!(r.scale > 0.0f) || r.window < 0) return cudaErrorInvalidValue;
    if (D <= 64) return launch_attention<64, TIERED>(out, q, k, v, blocks, n_blocks, t, Hq, Hkv, D, r, s);
    if (D <= 128) return launch_attention<128, TIERED>(out, q, k, v, blocks, n_blocks, t, Hq, Hkv, D, r, s);
    if (D <= 256) return launch_attention<256, TIERED>(out, q, k, v, blocks, n_blocks, t, Hq, Hkv, D, r, s);
    return cudaErrorInvalidValue;
}

cudaError_t osc_fwd_attention(osc_bf16 * out, const float * q, const float * k, const float * v,
                              const struct osc_att_block * blocks, int32_t n_blocks, int32_t Hq, int32_t Hkv,
                              int32_t D, struct osc_att_rule r, cudaStream_t s) {
    return attention_any<false>(out, q, k, v, blocks, n_blocks, osc_att_tiers{}, Hq, Hkv, D, r, s);
}

cudaError_t osc_fwd_attention(float * out, const float * q, const float * k, const float * v,
                              const struct osc_att_block * blocks, int32_t n_blocks, int32_t Hq, int32_t Hkv,
                              int32_t D, struct osc_att_rule r, cudaStream_t s) {
    return attention_any<false>(out, q, k, v, blocks, n_blocks, osc_att_tiers{}, Hq, Hkv, D, r, s);
}

cudaError_t osc_fwd_attention_tiered(osc_bf16 * out, const float * q, const float * k_hp, const float * v_hp,
                                     const struct osc_att_tiers * t, const struct osc_att_block * blocks,
                                     int32_t n_blocks, int32_t Hq, int32_t Hkv, int32_t D, struct osc_att_rule r,
                                     cudaStream_t s) {
    return attention_any<true>(out, q, k_hp, v_hp, blocks, n_blocks, *t, Hq, Hkv, D, r, s);
}

cudaError_t osc_fwd_attention_tiered(float * out, const float * q, const float * k_hp, const float * v_hp,
                                     const struct osc_att_tiers * t, const struct osc_att_block * blocks,
                                     int32_t n_blocks, int32_t Hq, int32_t Hkv, int32_t D, struct osc_att_rule r,
                                     cudaStream_t s) {
    return attention_any<true>(out, q, k_hp, v_hp, blocks, n_blocks, *t, Hq, Hkv, D, r, s);
}

// ---- capture -------------------------------------------------------------------------

__global__ void k_acc_add(double * acc, const float * src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n; i += (int64_t) gridDim.x * blockDim.x)
        acc[i] += (double) src[i];
}

cudaError_t osc_fwd_acc_add(double * acc, const float * src, int64_t n, cudaStream_t s) {
    k_acc_add<<<grid_for(n, 256), 256, 0, s>>>(acc, src, n);
    return cudaGetLastError();
}

__global__ void k_gram_reduce(double * const * acc_ptrs, const float * part, const int32_t * first,
                              const int32_t * per, int32_t n_part, int32_t n_slot, int64_t DD) {
    const int32_t o = blockIdx.y;
    const int32_t f0 = first[o], np = per[o];
    double * acc = acc_ptrs[o];
    for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < DD; i += (int64_t) gridDim.x * blockDim.x) {
        double a = 0.0;
        for (int32_t p = 0; p < n_part; p++)
            for (int32_t j = 0; j < np; j++) a += (double) part[((int64_t) p * n_slot + f0 + j) * DD + i];
        acc[i] += a;
    }
}

cudaError_t osc_fwd_gram_reduce(double * const * acc_ptrs, const float * part, const int32_t * first,
                                const int32_t * per, int32_t n_out, int32_t n_part, int32_t n_slot, int64_t DD,
                                cudaStream_t s) {
    if (n_out <= 0) return cudaSuccess;
    const dim3 grid((unsigned) ((DD + 255) / 256), (unsigned) n_out);
    k_gram_reduce<<<grid, 256, 0, s>>>(acc_ptrs, part, first, per, n_part, n_slot, DD);
    return cudaGetLastError();
}

// One warp per (head, token).
__global__ void k_sst_weights(double * w, uint8_t * neg, float * z, const float * y, const float * k,
                              const float * v, int32_t T, int32_t Hkv, int32_t D) {
    const int64_t item = (int64_t) blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int32_t lane = threadIdx.x & 31;
    if (item >= (int64_t) T * Hkv) return;
    const int32_t h = (int32_t) (item / T), t = (int32_t) (item % T);
    const float * yr = y + ((size_t) h * T + t) * D;
    const float * kr = k + ((size_t) t * Hkv + h) * D;
    const float * vr = v + ((size_t) t * Hkv + h) * D;
    double acc = 0.0;
    for (int32_t d = lane; d < D; d += 32) acc += (double) yr[d] * (double) kr[d];
    acc = warp_sum_d(acc);
    const bool clamp = acc < 0.0; // A_h is PSD: only rounding gets here (method.md §22 item 4)
    if (clamp) acc = 0.0;
    if (lane == 0) w[(size_t) h * T + t] = acc, neg[(size_t) h * T + t] = clamp ? 1 : 0;
    const float wf = (float) acc;
    float * zr = z + ((size_t) h * T + t) * D;
    for (int32_t d = lane; d < D; d += 32) zr[d] = wf * vr[d];
}

cudaError_t osc_fwd_sst_weights(double * w, uint8_t * neg, float * z, const float * y, const float * k,
                                const float * v, int32_t T, int32_t Hkv, int32_t D, cudaStream_t s) {
    const int64_t items = (int64_t) T * Hkv;
    k_sst_weights<<<(unsigned) ((items + 7) / 8), 256, 0, s>>>(w, neg, z, y, k, v, T, Hkv, D);
    return cudaGetLastError();
}

__global__ void __launch_bounds__(256) k_sst_reduce(double * wsum, int64_t * nneg, const double * w,
                                                    const uint8_t * neg, int32_t T) {
    __shared__ double sh[256];
    const int32_t h = blockIdx.x;
    double a = 0.0, c = 0.0;
    for (int32_t t = threadIdx.x; t < T; t += 256) a += w[(size_t) h * T + t], c += neg ? neg[(size_t) h * T + t] : 0;
    a = block_sum_256(a, sh);
    c = block_sum_256(c, sh);
    if (threadIdx.x == 0) {
        wsum[h] += a;
        if (nneg) nneg[h] += (int64_t) c;
    }
}

cudaError_t osc_fwd_sst_reduce(double * wsum, int64_t * nneg, const double * w, const uint8_t * neg, int32_t T,
                               int32_t Hkv, cudaStream_t s) {
    k_sst_reduce<<<Hkv, 256, 0, s>>>(wsum, nneg, w, neg, T);
    return cudaGetLastError();
}

// ---- attention-mass weights (VATT) ----------------------------------------------------------

__global__ void __launch_bounds__(256) k_vatt_rowstats(double * lz, const float * S, int32_t i0, int32_t nk,
                                                       double scale, int32_t window) {
    __shared__ double sh[256];
    const int32_t r = blockIdx.x, last = i0 + r;   // causal: keys first .. last (a sliding layer: its window)
    const int32_t first = window > 0 && last - window + 1 > 0 ? last - window + 1 : 0;
    const float * row = S + (size_t) r * nk;
    double m = -INFINITY;
    for (int32_t t = first + threadIdx.x; t <= last; t += 256) m = fmax(m, (double) row[t] * scale);
    sh[threadIdx.x] = m;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if ((int) threadIdx.x < o) sh[threadIdx.x] = fmax(sh[threadIdx.x], sh[threadIdx.x + o]);
        __syncthreads();
    }
    m = sh[0];
    __syncthreads();
    double z = 0.0;
    for (int32_t t = first + threadIdx.x; t <= last; t += 256) z += exp((double) row[t] * scale - m);
    z = block_sum_256(z, sh);
    if (threadIdx.x == 0) lz[r] = m + log(z);
}

__global__ void k_vatt_colsum(double * w, const double * lz, const float * S, int32_t i0, int32_t rows, int32_t nk,
                              double scale, int32_t window) {
    const int32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= nk) return;
    double acc = 0.0;
    // rows i0 + r that see key t: r >= t - i0, and in a sliding layer i0 + r < t + window
    const int32_t end = window > 0 && t + window - i0 < rows ? t + window - i0 : rows;
    for (int32_t r = t > i0 ? t - i0 : 0; r < end; r++) {
        const double p = exp((double) S[(size_t) r * nk + t] * scale - lz[r]);
        acc += p * p;
    }
    w[t] += acc;
}

cudaError_t osc_fwd_vatt_block(double * w, double * lz, const float * S, int32_t i0, int32_t rows, double scale,
                               int32_t window, cudaStream_t s) {
    const int32_t nk = i0 + rows;
    k_vatt_rowstats<<<rows, 256, 0, s>>>(lz, S, i0, nk, scale, window);
    k_vatt_colsum<<<(unsigned) ((nk + 255) / 256), 256, 0, s>>>(w, lz, S, i0, rows, nk, scale, window);
    return cudaGetLastError();
}

__global__ void k_scale_rows(float * z, const double * w, const float * v, int32_t T, int32_t Hkv, int32_t D) {
    const int64_t n = (int64_t) Hkv * T * D;
    for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n; i += (int64_t) gridDim.x * blockDim.x) {
        const int64_t ht = i / D, d = i % D, h = ht / T, t = ht % T;
        z[i] = (float) w[ht] * v[((size_t) t * Hkv + h) * D + d];
    }
}

cudaError_t osc_fwd_scale_rows(float * z, const double * w, const float * v, int32_t T, int32_t Hkv, int32_t D,
                               cudaStream_t s) {
    k_scale_rows<<<grid_for((int64_t) Hkv * T * D, 256), 256, 0, s>>>(z, w, v, T, Hkv, D);
    return cudaGetLastError();
}

// ---- weights ----------------------------------------------------------------------------

// Elementwise dtype conversion through to_f32 / put (fp32 -> bf16 rounds to nearest even).
template <typename D, typename S> __global__ void k_convert(D * dst, const S * src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n; i += (int64_t) gridDim.x * blockDim.x)
        put(dst + i, to_f32(src[i]));
}

cudaError_t osc_fwd_to_bf16(osc_bf16 * dst, const float * src, int64_t n, cudaStream_t s) {
    k_convert<<<grid_for(n, 256), 256, 0, s>>>(dst, src, n);
    return cudaGetLastError();
}

cudaError_t osc_fwd_bf16_to_f32(float * dst, const osc_bf16 * src, int64_t n, cudaStream_t s) {
    k_convert<<<grid_for(n, 256), 256, 0, s>>>(dst, src, n);
    return cudaGetLastError();
}

__global__ void k_round_bf16(float * x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n; i += (int64_t) gridDim.x * blockDim.x) {
        osc_bf16 b;
        put(&b, x[i]);
        x[i] = to_f32(b);
    }
}

cudaError_t osc_fwd_round_bf16(float * x, int64_t n, cudaStream_t s) {
    k_round_bf16<<<grid_for(n, 256), 256, 0, s>>>(x, n);
    return cudaGetLastError();
}

__device__ uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Normal(0, 0.02) for element i: Box-Muller on the two 32-bit halves of a hash of
// (seed, tensor, i / 2); even i takes the cosine branch, odd i the sine branch.
__device__ float random_normal(uint64_t seed, uint64_t tensor, int64_t i) {
    const uint64_t r = splitmix64(seed ^ splitmix64(tensor * 0x100000001B3ull + (uint64_t) (i >> 1)));
    const double u1 = ((double) (r >> 32) + 1.0) * (1.0 / 4294967296.0); // (0, 1]
    const double u2 = (double) (r & 0xffffffffu) * (1.0 / 4294967296.0);
    const double rad = sqrt(-2.0 * log(u1)), a = 6.283185307179586 * u2;
    return (float) (0.02 * rad * ((i & 1) ? sin(a) : cos(a)));
}

__global__ void k_random_bf16(osc_bf16 * dst, int64_t n, uint64_t seed, uint64_t tensor) {
    for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n; i += (int64_t) gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16(random_normal(seed, tensor, i));
}

__global__ void k_random_f32(float * dst, int64_t n, uint64_t seed, uint64_t tensor, bool ones) {
    for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n; i += (int64_t) gridDim.x * blockDim.x)
        dst[i] = ones ? 1.0f : random_normal(seed, tensor, i);
}

cudaError_t osc_fwd_random_bf16(osc_bf16 * dst, int64_t n, uint64_t seed, uint64_t tensor, cudaStream_t s) {
    k_random_bf16<<<grid_for(n, 256), 256, 0, s>>>(dst, n, seed, tensor);
    return cudaGetLastError();
}

cudaError_t osc_fwd_random_f32(float * dst, int64_t n, uint64_t seed, uint64_t tensor, bool ones,
                               cudaStream_t s) {
    k_random_f32<<<grid_for(n, 256), 256, 0, s>>>(dst, n, seed, tensor, ones);
    return cudaGetLastError();
}

__global__ void k_fill_f32(float * dst, int64_t n, float value) {
    for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n; i += (int64_t) gridDim.x * blockDim.x)
        dst[i] = value;
}

cudaError_t osc_fwd_fill_f32(float * dst, int64_t n, float value, cudaStream_t s) {
    k_fill_f32<<<grid_for(n, 256), 256, 0, s>>>(dst, n, value);
    return cudaGetLastError();
}
