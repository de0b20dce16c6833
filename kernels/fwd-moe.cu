// fwd-moe.cu - the sparse MLP of the CUDA forward pass: see fwd-moe.cuh.
//
// Routing runs one thread per token with lib/model's arithmetic: softmax in fp32 with a double
// denominator (forward.c's route), or osc_moe_route_sigmoid's (moe-route.c); the top k by
// repeated argmax (a tie to the lower expert). The kept groups of grouped top-k are the first
// n_group_used by (group score descending, index ascending): the set the CPU's repeated argmax
// picks. The counting sort is one block per expert scanning the entries in order, so the
// entries of an expert keep their token order whatever the launch; each expert's rows start
// at a multiple of OSC_MOE_ROW_ALIGN.
#include "kernels/cublas-check.cuh"
#include "kernels/fwd-kernels.cuh"
#include "kernels/fwd-moe.cuh"

#include <math.h>

enum { SORT_THREADS = 1024, SCATTER_ITEMS = 4, ROW_THREADS = 256 };

bool osc_moe_has_gate_row(const struct oscar_model_config * c) { return c->n_ff_shared > 0 && !c->shared_ungated; }

// ---- routing -------------------------------------------------------------------------------

// Index of the largest of x[0..n) (the first on a tie).
__device__ static int32_t argmax_row(const float * x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

__global__ void k_route_softmax(const float * logit, int32_t NR, float * choice, int32_t * te, float * tw, int32_t T,
                                int32_t E, int32_t K, bool norm) {
    const int32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const float * l = logit + (size_t) t * NR;
    float * p = choice + (size_t) t * E;
    float mx = l[0];
    for (int32_t e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    double sum = 0.0;
    for (int32_t e = 0; e < E; e++) {
        p[e] = expf(l[e] - mx);
        sum += (double) p[e];
    }
    for (int32_t e = 0; e < E; e++) p[e] = (float) ((double) p[e] / sum);
    int32_t * e_out = te + (size_t) t * K;
    float * w_out = tw + (size_t) t * K;
    for (int32_t j = 0; j < K; j++) { // probabilities are >= 0: a taken expert's -inf never wins again
        const int32_t b = argmax_row(p, E);
        e_out[j] = b, w_out[j] = p[b], p[b] = -INFINITY;
    }
    if (norm) {
        float s = 0.0f;
        for (int32_t j = 0; j < K; j++) s += w_out[j];
        for (int32_t j = 0; j < K; j++) w_out[j] /= s;
    }
}

// The sum of the two best of x[0..n) (n >= 2), as moe-route.c ranks a group.
__device__ static float top2_sum(const float * x, int32_t n) {
    float a = -INFINITY, b = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        if (x[i] > a) b = a, a = x[i];
        else if (x[i] > b) b = x[i];
    }
    return a + b;
}

__global__ void k_route_sigmoid(float * logit, int32_t NR, const float * bias, float * choice, int32_t * te,
                                float * tw, int32_t T, int32_t E, int32_t K, int32_t G, int32_t G_used, bool norm,
                                float scale) {
    const int32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    float * sc = logit + (size_t) t * NR; // the scores, in place
    float * ch = choice + (size_t) t * E;
    for (int32_t e = 0; e < E; e++) {
        sc[e] = 1.0f / (1.0f + expf(-sc[e]));
        ch[e] = sc[e] + (bias ? bias[e] : 0.0f);
    }
    if (G > 1) {
        const int32_t per = E / G;
        // rank of each group among all (score descending, lower index first on a tie); groups from
        // the G_used best keep their experts. The masking waits until every rank is known.
        uint64_t drop_lo = 0; // the groups to drop (G <= OSC_MOE_MAX_GROUPS)
        for (int32_t g = 0; g < G; g++) {
            const float sg = top2_sum(ch + (size_t) g * per, per);
            int32_t rank = 0;
            for (int32_t h = 0; h < G && rank < G_used; h++) {
                if (h == g) continue;
                const float sh = top2_sum(ch + (size_t) h * per, per);
                rank += sh > sg || (sh == sg && h < g);
            }
            if (rank >= G_used) drop_lo |= 1ull << g;
        }
        for (int32_t g = 0; g < G; g++)
            if (drop_lo >> g & 1ull)
                for (int32_t i = 0; i < per; i++) ch[(size_t) g * per + i] = -INFINITY;
    }
    int32_t * e_out = te + (size_t) t * K;
    float * w_out = tw + (size_t) t * K;
    float sum = 0.0f;
    for (int32_t j = 0; j < K; j++) {
        const int32_t b = argmax_row(ch, E);
        e_out[j] = b, w_out[j] = sc[b], ch[b] = -INFINITY;
        sum += w_out[j];
    }
    for (int32_t j = 0; j < K; j++) w_out[j] = (norm ? w_out[j] / (sum + 1e-20f) : w_out[j]) * scale;
}

// ---- grouping by expert ----------------------------------------------------------------------

// cnt[e] = entries routed to expert e (block e; integer sums: any order gives the same count).
__global__ void __launch_bounds__(SORT_THREADS) k_count(const int32_t * te, int32_t n, int32_t * cnt) {
    const int32_t e = blockIdx.x;
    int32_t mine = 0;
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) mine += te[i] == e;
    __shared__ int32_t part[SORT_THREADS / 32];
    for (int32_t o = 16; o > 0; o >>= 1) mine += __shfl_down_sync(0xffffffffu, mine, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t s = 0;
        for (int32_t w = 0; w < (int32_t) (blockDim.x >> 5); w++) s += part[w];
        cnt[e] = s;
    }
}

__host__ __device__ static int32_t pad_rows(int32_t m) {
    return (m + OSC_MOE_ROW_ALIGN - 1) / OSC_MOE_ROW_ALIGN * OSC_MOE_ROW_ALIGN;
}

// Block e gives expert e's entries, in entry order, the rows from Σ_{e' < e} pad_rows(cnt) on.
// Each thread takes SCATTER_ITEMS consecutive entries per step and the threads' counts are
// scanned in thread order, so the ranks follow the entry order.
__global__ void __launch_bounds__(SORT_THREADS) k_scatter(const int32_t * te, int32_t n, const int32_t * cnt,
                                                          int32_t * row_of) {
    const int32_t e = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __shared__ int32_t base, wsum[SORT_THREADS / 32];
    if (threadIdx.x == 0) {
        int32_t o = 0;
        for (int32_t i = 0; i < e; i++) o += pad_rows(cnt[i]);
        base = o;
    }
    __syncthreads();
    for (int32_t i0 = 0; i0 < n; i0 += (int32_t) blockDim.x * SCATTER_ITEMS) {
        const int32_t first = i0 + (int32_t) threadIdx.x * SCATTER_ITEMS;
        int32_t mine = 0;
        for (int32_t q = 0; q < SCATTER_ITEMS; q++) mine += first + q < n && te[first + q] == e;
        int32_t incl = mine; // inclusive scan over the warp's lanes
        for (int32_t o = 1; o < 32; o <<= 1) {
            const int32_t v = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += v;
        }
        if (lane == 31) wsum[warp] = incl;
        __syncthreads();
        int32_t before = 0, total = 0;
        for (int32_t w = 0; w < (int32_t) (blockDim.x >> 5); w++) {
            before += w < warp ? wsum[w] : 0;
            total += wsum[w];
        }
        int32_t r = base + before + incl - mine;
        for (int32_t q = 0; q < SCATTER_ITEMS; q++)
            if (first + q < n && te[first + q] == e) row_of[first + q] = r++;
        __syncthreads(); // wsum and base are rewritten below
        if (threadIdx.x == 0) base += total;
        __syncthreads();
    }
}

// xg row row_of[i] = xn row i / K (block i: entry i).
template <typename X>
__global__ void k_gather(X * xg, const X * xn, const int32_t * row_of, int32_t K, int32_t C) {
    const int32_t i = blockIdx.x;
    const X * src = xn + (size_t) (i / K) * C;
    X * dst = xg + (size_t) row_of[i] * C;
    for (int32_t i = threadIdx.x; i < C; i += blockDim.x) dst[i] = src[i];
}

// The same in 16-byte words (rows of a multiple of 16 bytes: every row starts 16-byte aligned).
__global__ void k_gather16(uint4 * xg, const uint4 * xn, const int32_t * row_of, int32_t K, int32_t words) {
    const int32_t i = blockIdx.x;
    const uint4 * src = xn + (size_t) (i / K) * words;
    uint4 * dst = xg + (size_t) row_of[i] * words;
    for (int32_t j = threadIdx.x; j < words; j += blockDim.x) dst[j] = src[j];
}

// x[t] += Σ_j tw[t, j] ye[row_of[t K + j]] (j in top-k order), then + g_t ysh[t] (g_t the shared
// gate's sigmoid, or 1 ungated): the CPU's moe_mlp order, one thread per element.
__global__ void k_combine(float * x, const float * ye, const int32_t * row_of, const float * tw, const float * ysh,
                          const float * logit, int32_t NR, int32_t gate_col, int32_t K, int32_t C) {
    const int32_t t = blockIdx.x;
    float g = 1.0f;
    if (ysh && gate_col >= 0) g = 1.0f / (1.0f + expf(-logit[(size_t) t * NR + gate_col]));
    for (int32_t i = threadIdx.x; i < C; i += blockDim.x) {
        float acc = 0.0f;
        for (int32_t j = 0; j < K; j++)
            acc += tw[(size_t) t * K + j] * ye[(size_t) row_of[(size_t) t * K + j] * C + i];
        if (ysh) acc += g * ysh[(size_t) t * C + i];
        x[(size_t) t * C + i] += acc;
    }
}

// ---- the MLP -------------------------------------------------------------------------------

// Y [n, N] fp32 = X [n, Kd] . W [N, Kd]ᵀ (row-major; wtype inputs, fp32 accumulation, no TF32).
static cublasStatus_t gemm_rows(cublasHandle_t blas, cudaDataType_t wtype, float * Y, const void * X, const void * W,
                                int32_t n, int32_t N, int32_t Kd) {
    const float one = 1.0f, zero = 0.0f;
    return cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, N, n, Kd, &one, W, wtype, Kd, X, wtype, Kd, &zero, Y,
                        CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

static cudaError_t act(cudaDataType_t wtype, void * h, const float * gu, int32_t n, int32_t F, bool gelu,
                       cudaStream_t s) {
    if (wtype == CUDA_R_32F) return osc_fwd_swiglu((float *) h, gu, n, F, gelu, s);
    return osc_fwd_swiglu((osc_bf16 *) h, gu, n, F, gelu, s);
}

enum oscar_status osc_moe_mlp(cublasHandle_t blas, cudaStream_t s, cudaDataType_t wtype,
                              const struct oscar_model_config * c, const struct osc_moe_dlayer * w,
                              const struct osc_moe_work * k, float * x, const float * xr, const void * xn, int32_t T,
                              cudaEvent_t * ev) {
    const int32_t E = c->n_expert, K = c->n_expert_used, C = c->n_embd, Fe = c->n_ff_expert, Fs = c->n_ff_shared;
    const bool gate_row = osc_moe_has_gate_row(c), gelu = c->act == OSCAR_ACT_GELU_TANH;
    const int32_t NR = E + (gate_row ? 1 : 0), n = T * K, rb = (T + 127) / 128;
    const size_t es = wtype == CUDA_R_32F ? sizeof(float) : sizeof(osc_bf16);
    const float one = 1.0f, zero = 0.0f;
    enum oscar_status st = OSCAR_OK;
    if (ev) OSCAR_CUDA_TRY(cudaEventRecord(ev[0], s));
    // router logits in fp32 (the CPU routes on fp32 rows and weights)
    OSCAR_CUBLAS_TRY(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, NR, T, C, &one, w->router, CUDA_R_32F, C, xr,
                                  CUDA_R_32F, C, &zero, k->logit, CUDA_R_32F, NR, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
    if (c->expert_gating == OSCAR_GATING_SIGMOID) {
        const int32_t G = c->n_expert_group > 1 ? c->n_expert_group : 1;
        const float scale = c->expert_scale != 0.0f ? c->expert_scale : 1.0f;
        k_route_sigmoid<<<rb, 128, 0, s>>>(k->logit, NR, w->exp_bias, k->choice, k->top_e, k->top_w, T, E, K, G,
                                           c->n_group_used, c->expert_norm_topk, scale);
    } else {
        k_route_softmax<<<rb, 128, 0, s>>>(k->logit, NR, k->choice, k->top_e, k->top_w, T, E, K, c->expert_norm_topk);
    }
    OSCAR_CUDA_TRY(cudaGetLastError());
    k_count<<<E, SORT_THREADS, 0, s>>>(k->top_e, n, k->cnt);
    k_scatter<<<E, SORT_THREADS, 0, s>>>(k->top_e, n, k->cnt, k->row_of);
    if ((C * es) % 16 == 0)
        k_gather16<<<n, ROW_THREADS, 0, s>>>((uint4 *) k->xg, (const uint4 *) xn, k->row_of, K, (int32_t) (C * es / 16));
    else if (wtype == CUDA_R_32F)
        k_gather<<<n, ROW_THREADS, 0, s>>>((float *) k->xg, (const float *) xn, k->row_of, K, C);
    else
        k_gather<<<n, ROW_THREADS, 0, s>>>((osc_bf16 *) k->xg, (const osc_bf16 *) xn, k->row_of, K, C);
    OSCAR_CUDA_TRY(cudaGetLastError());
    if (ev) OSCAR_CUDA_TRY(cudaEventRecord(ev[1], s));
    OSCAR_CUDA_TRY(cudaMemcpyAsync(k->h_cnt, k->cnt, (size_t) E * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
    OSCAR_CUDA_TRY(cudaStreamSynchronize(s));
    {
        const size_t gu_e = (size_t) 2 * Fe * C, dn_e = (size_t) C * Fe;
        int32_t r0 = 0, routed = 0;
        for (int32_t e = 0; e < E; e++) { // gate/up of each non-empty expert over its (padded) rows
            const int32_t m = pad_rows(k->h_cnt[e]);
            if (m > 0)
                OSCAR_CUBLAS_TRY(gemm_rows(blas, wtype, k->gu + (size_t) r0 * 2 * Fe,
                                           (const char *) k->xg + (size_t) r0 * C * es,
                                           (const char *) w->exp_gu + e * gu_e * es, m, 2 * Fe, C));
            r0 += m, routed += k->h_cnt[e];
        }
        if (routed != n) {
            st = osc_error(OSCAR_ERR_NUMERIC, "forward-cuda: %d of %d expert entries routed (non-finite router "
                           "logits?)", routed, n);
            goto out;
        }
        OSCAR_CUDA_TRY(act(wtype, k->h, k->gu, r0, Fe, gelu, s));
        r0 = 0;
        for (int32_t e = 0; e < E; e++) {
            const int32_t m = pad_rows(k->h_cnt[e]);
            if (m > 0)
                OSCAR_CUBLAS_TRY(gemm_rows(blas, wtype, k->ye + (size_t) r0 * C, (const char *) k->h + (size_t) r0 * Fe * es,
                                           (const char *) w->exp_down + e * dn_e * es, m, C, Fe));
            r0 += m;
        }
    }
    if (Fs > 0) { // the shared expert over every row; its output lands in gu [T, C]
        OSCAR_CUBLAS_TRY(gemm_rows(blas, wtype, k->gu, xn, w->sh_gu, T, 2 * Fs, C));
        OSCAR_CUDA_TRY(act(wtype, k->h, k->gu, T, Fs, gelu, s));
        OSCAR_CUBLAS_TRY(gemm_rows(blas, wtype, k->gu, k->h, w->sh_down, T, C, Fs));
    }
    if (ev) OSCAR_CUDA_TRY(cudaEventRecord(ev[2], s));
    k_combine<<<T, ROW_THREADS, 0, s>>>(x, k->ye, k->row_of, k->top_w, Fs > 0 ? k->gu : NULL, k->logit, NR,
                                        gate_row ? E : -1, K, C);
    OSCAR_CUDA_TRY(cudaGetLastError());
    if (ev) OSCAR_CUDA_TRY(cudaEventRecord(ev[3], s));
out:
    return st;
}
