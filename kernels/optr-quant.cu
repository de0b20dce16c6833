// optr-quant.cu - OptR's straight-through INT2 quantizer (contract in optr-quant.cuh). Every
// quantizer step names its IEEE rounding (__fdiv_rn, __fadd_rn, ...) so nvcc cannot contract
// or reorder it: the values and the linearisation equal optr-loss.c's on the same rows.
#include "kernels/cuda-common.cuh"
#include "kernels/int2-row.cuh"
#include "kernels/optr-quant.cuh"
#include "kernels/warp-row.cuh"

#include <limits.h>
#include <stdlib.h>

#define QW 8   // warps (rows) per block

enum oscar_status osc_optr_dev_quant_of(const struct oscar_int2_params * p, struct osc_optr_dev_quant * q) {
    const int32_t D = p->head_dim, G = p->group_size > 0 ? p->group_size : D;
    if (p->scheme != OSCAR_INT2_ASYM || p->bf16_dequant)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda optr: the quantizer must be ASYM without bf16 dequantization");
    if (D != 64 && D != 128 && D != 256)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda optr: head_dim %d (built for 64, 128, 256)", (int) D);
    if (D % G) return osc_error(OSCAR_ERR_INVALID, "cuda optr: group size %d does not divide %d", (int) G, (int) D);
    q->head_dim = D, q->group_size = G, q->n_group = D / G;
    q->meta_dtype = (int32_t) p->meta_dtype;
    q->clip_idx = oscar_clip_index(p->clip_ratio, D);
    q->clip_bisect = p->clip_algo == OSCAR_CLIP_BISECT || (p->clip_algo == OSCAR_CLIP_FLUSH && D >= 64);
    return OSCAR_OK;
}

// The first index of the largest (want_max) or smallest value over the warp: (v, i) pairs
// combined by butterfly, ties to the smaller index, so every lane ends with the pair a
// sequential scan with strict comparisons finds (IEEE ==: −0 and +0 tie).
static __device__ void warp_arg(float & v, int & i, bool want_max) {
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(WARP_FULL, v, o);
        const int j = __shfl_xor_sync(WARP_FULL, i, o);
        const bool take = (want_max ? w > v : w < v) || (w == v && j < i);
        v = take ? w : v, i = take ? j : i;
    }
}

static __device__ double warp_sum_f64(double v) {
    for (int o = 16; o > 0; o >>= 1) v = __dadd_rn(v, __shfl_xor_sync(WARP_FULL, v, o));
    return v;
}

template <int VPL> static __global__ void __launch_bounds__(QW * 32)
quant_fwd_kernel(struct osc_optr_dev_quant q, const float * __restrict__ y, int64_t n, float * __restrict__ yh,
                 struct osc_optr_dev_lin lin, int32_t * nonfinite) {
    constexpr int D = 32 * VPL;
    const int lane = threadIdx.x & 31, G = q.group_size, ng = q.n_group;
    for (int64_t r = (int64_t) blockIdx.x * QW + (threadIdx.x >> 5); r < n; r += (int64_t) gridDim.x * QW) {
        const Row<VPL> x = row_load<VPL>(y + r * D, lane);
        bool bad = false;
#pragma unroll
        for (int k = 0; k < VPL; k++) bad |= !isfinite(x.v[k]);
        if (__any_sync(WARP_FULL, bad)) {   // every writer stores the same 1: no race in the result
            if (lane == 0) *nonfinite = 1;
            continue;
        }
        float tau = INFINITY;
        if (q.clip_idx >= 0) tau = q.clip_bisect ? clip_tau_bisect<VPL>(x, q.clip_idx)
                                                 : order_stat_abs<VPL>(x, q.clip_idx, 0, VPL);
        if (lane == 0) lin.clampv[r] = tau;
        Row<VPL> xc, out;
#pragma unroll
        for (int k = 0; k < VPL; k++) {
            const uint8_t f = x.v[k] > tau ? 1 : x.v[k] < -tau ? 2 : 0;
            lin.clipped[r * D + lane + 32 * k] = f;
            xc.v[k] = f == 1 ? tau : f == 2 ? -tau : x.v[k];
        }
        for (int g = 0; g < ng; g++) {
            float m = INFINITY, M = -INFINITY, vmax = -INFINITY, vmin = INFINITY;
            int imax = INT_MAX, imin = INT_MAX;
#pragma unroll
            for (int k = 0; k < VPL; k++) {   // dims ascend with k: strict comparisons keep the first
                const int d = lane + 32 * k;
                if (d / G != g) continue;
                m = fminf(m, xc.v[k]), M = fmaxf(M, xc.v[k]);
                if (xc.v[k] > vmax || imax == INT_MAX) vmax = xc.v[k], imax = d;
                if (xc.v[k] < vmin || imin == INT_MAX) vmin = xc.v[k], imin = d;
            }
            // lib/quant int2.c asym_group on the clipped values (the clip already applied)
            m = __fadd_rn(warp_min(m), 0.0f), M = __fadd_rn(warp_max(M), 0.0f);   // canonical zero sign
            const float scale = __fdiv_rn(fmaxf(__fsub_rn(M, m), 1e-8f), 3.0f), zero = __fdiv_rn(-m, scale);
            const float sq = meta_round(scale, q.meta_dtype), zq = meta_round(zero, q.meta_dtype);
            // the linearisation: optr-loss.c's arg-max / arg-min scan and its scale of their range
            warp_arg(vmax, imax, true);
            warp_arg(vmin, imin, false);
            const float range = __fsub_rn(vmax, vmin), lscale = __fdiv_rn(fmaxf(range, 1e-8f), 3.0f);
            if (lane == 0) {
                lin.scale[r * ng + g] = lscale;
                lin.imax[r * ng + g] = (int16_t) (range < 1e-8f ? -1 : imax - g * G);
                lin.imin[r * ng + g] = (int16_t) (range < 1e-8f ? -1 : imin - g * G);
            }
#pragma unroll
            for (int k = 0; k < VPL; k++) {
                if ((lane + 32 * k) / G != g) continue;
                const float t = __fadd_rn(__fadd_rn(__fdiv_rn(xc.v[k], scale), zero), 0.5f);
                out.v[k] = __fmul_rn(__fsub_rn(code_trunc3(t), zq), sq);
                lin.c[r * D + lane + 32 * k] = __fdiv_rn(__fsub_rn(out.v[k], xc.v[k]), lscale);
            }
        }
        row_store<VPL>(yh + r * D, out, lane);
    }
}

template <int VPL> static __global__ void __launch_bounds__(QW * 32)
quant_back_kernel(struct osc_optr_dev_quant q, struct osc_optr_dev_lin lin, const float * __restrict__ dyh, int64_t n,
                  float * __restrict__ dy, int drop_range) {
    constexpr int D = 32 * VPL;
    const int lane = threadIdx.x & 31, G = q.group_size, ng = q.n_group;
    for (int64_t r = (int64_t) blockIdx.x * QW + (threadIdx.x >> 5); r < n; r += (int64_t) gridDim.x * QW) {
        const Row<VPL> g = row_load<VPL>(dyh + r * D, lane), c = row_load<VPL>(lin.c + r * D, lane);
        uint8_t cl[VPL];
        Row<VPL> o;
#pragma unroll
        for (int k = 0; k < VPL; k++) {
            cl[k] = lin.clipped[r * D + lane + 32 * k];
            o.v[k] = cl[k] ? 0.0f : g.v[k];
        }
        for (int gi = 0; gi < ng && !drop_range; gi++) {
            const int a = lin.imax[r * ng + gi], b = lin.imin[r * ng + gi];
            if (a < 0) continue;   // uniform over the warp
            double s = 0.0;
#pragma unroll
            for (int k = 0; k < VPL; k++)
                if ((lane + 32 * k) / G == gi) s = __dadd_rn(s, __dmul_rn((double) g.v[k], (double) c.v[k]));
            const float t = __double2float_rn(__ddiv_rn(warp_sum_f64(s), 3.0));
#pragma unroll
            for (int k = 0; k < VPL; k++) {
                const int d = lane + 32 * k;
                if (d == gi * G + a && !cl[k]) o.v[k] = __fadd_rn(o.v[k], t);
                if (d == gi * G + b && !cl[k]) o.v[k] = __fsub_rn(o.v[k], t);
            }
        }
        row_store<VPL>(dy + r * D, o, lane);
    }
}

static unsigned n_blocks(int64_t n) {
    const int64_t b = (n + QW - 1) / QW;
    return (unsigned) (b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

extern "C" enum oscar_status osc_cuda_optr_quant_fwd(const struct osc_optr_dev_quant * q, const float * y, int64_t n,
                                                     float * yh, const struct osc_optr_dev_lin * lin,
                                                     int32_t * nonfinite, void * stream) {
    if (n <= 0) return OSCAR_OK;
    cudaStream_t s = (cudaStream_t) stream;
    switch (q->head_dim) {
    case 64: quant_fwd_kernel<2><<<n_blocks(n), QW * 32, 0, s>>>(*q, y, n, yh, *lin, nonfinite); break;
    case 128: quant_fwd_kernel<4><<<n_blocks(n), QW * 32, 0, s>>>(*q, y, n, yh, *lin, nonfinite); break;
    case 256: quant_fwd_kernel<8><<<n_blocks(n), QW * 32, 0, s>>>(*q, y, n, yh, *lin, nonfinite); break;
    default: return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda optr: head_dim %d", (int) q->head_dim);
    }
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

extern "C" enum oscar_status osc_cuda_optr_quant_back(const struct osc_optr_dev_quant * q,
                                                      const struct osc_optr_dev_lin * lin, const float * dyh, int64_t n,
                                                      float * dy, bool drop_range, void * stream) {
    if (n <= 0) return OSCAR_OK;
    cudaStream_t s = (cudaStream_t) stream;
    switch (q->head_dim) {
    case 64: quant_back_kernel<2><<<n_blocks(n), QW * 32, 0, s>>>(*q, *lin, dyh, n, dy, drop_range); break;
    case 128: quant_back_kernel<4><<<n_blocks(n), QW * 32, 0, s>>>(*q, *lin, dyh, n, dy, drop_range); break;
    case 256: quant_back_kernel<8><<<n_blocks(n), QW * 32, 0, s>>>(*q, *lin, dyh, n, dy, drop_range); break;
    default: return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda optr: head_dim %d", (int) q->head_dim);
    }
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

extern "C" enum oscar_status osc_cuda_optr_quant_rows(const struct oscar_int2_params * p, const float * y, int32_t n,
                                                      float * yh, struct osc_optr_lin * lin) {
    struct osc_optr_dev_quant q = {};
    enum oscar_status st = osc_optr_dev_quant_of(p, &q);
    if (st != OSCAR_OK) return st;
    const size_t nD = (size_t) n * q.head_dim, nG = (size_t) n * q.n_group;
    // one allocation: y, yh, c [nD] floats, clampv [n], scale [nG], imax/imin [nG] int16, clipped [nD]
    const size_t bytes = (3 * nD + n + nG) * sizeof(float) + 2 * nG * sizeof(int16_t) + nD + 16;
    char * buf = NULL;
    int32_t * flag = NULL, h_flag = 0;
    struct osc_optr_dev_lin dl;
    float * dy, * dyh;
    OSCAR_CUDA_TRY(cudaMalloc((void **) &buf, bytes));
    OSCAR_CUDA_TRY(cudaMalloc((void **) &flag, sizeof(int32_t)));
    dy = (float *) buf, dyh = dy + nD, dl.c = dyh + nD, dl.clampv = dl.c + nD, dl.scale = dl.clampv + n;
    dl.imax = (int16_t *) (dl.scale + nG), dl.imin = dl.imax + nG, dl.clipped = (uint8_t *) (dl.imin + nG);
    OSCAR_CUDA_TRY(cudaMemset(flag, 0, sizeof(int32_t)));
    OSCAR_CUDA_TRY(cudaMemcpy(dy, y, nD * sizeof(float), cudaMemcpyHostToDevice));
    if ((st = osc_cuda_optr_quant_fwd(&q, dy, n, dyh, &dl, flag, NULL)) != OSCAR_OK) goto out;
    OSCAR_CUDA_TRY(cudaMemcpy(&h_flag, flag, sizeof(int32_t), cudaMemcpyDeviceToHost));
    if (h_flag) {
        st = osc_error(OSCAR_ERR_NUMERIC, "cuda optr: a row to quantize holds a NaN or Inf");
        goto out;
    }
    OSCAR_CUDA_TRY(cudaMemcpy(yh, dyh, nD * sizeof(float), cudaMemcpyDeviceToHost));
    OSCAR_CUDA_TRY(cudaMemcpy(lin->c, dl.c, nD * sizeof(float), cudaMemcpyDeviceToHost));
    OSCAR_CUDA_TRY(cudaMemcpy(lin->clampv, dl.clampv, (size_t) n * sizeof(float), cudaMemcpyDeviceToHost));
    OSCAR_CUDA_TRY(cudaMemcpy(lin->clipped, dl.clipped, nD, cudaMemcpyDeviceToHost));
    OSCAR_CUDA_TRY(cudaMemcpy(lin->imax, dl.imax, nG * sizeof(int16_t), cudaMemcpyDeviceToHost));
    OSCAR_CUDA_TRY(cudaMemcpy(lin->imin, dl.imin, nG * sizeof(int16_t), cudaMemcpyDeviceToHost));
    OSCAR_CUDA_TRY(cudaMemcpy(lin->scale, dl.scale, nG * sizeof(float), cudaMemcpyDeviceToHost));
out:
    cudaFree(buf), cudaFree(flag);
    return st;
}
