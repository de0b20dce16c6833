// layer-eval.cu - the layer evaluator of the calibration gate and clip search on the
// GPU (contract in layer-eval.cuh). Per sequence and query head j (KV head h):
//   Z = Q_j . Kᵀ                    the exact keys (fp32 GEMM)
//   A = causal softmax(Z / √D)      fp64 max / sum / exp per row, stored fp32 (a sliding
//                                   layer's window only)
//   O_b = A . Vb_b                  (fp32 GEMM, one per value variant b: a variant's bits do
//                                   not depend on the others evaluated with it)
// then ‖O_b . W_Oᵀ‖² as fp64 sums of squares. Gate: a method's own keys and values
// against the exact output (made once per layer). Clip search: values [V̂_c − V] under
// the exact A (attention is linear in V); the keys' logit sums Σ (q·(k̂_c − k))² and the
// per-KV-head output energies are fp64 quadratic forms (eval-quad.cuh), except in a
// sliding layer, whose logit sums come from the masked score matrices of the variants.
// Every sum of squares has a fixed grid and a fixed reduction order, so results are
// deterministic.
extern "C" {
#include "backend/backend.h"
#include "quant/quant.h"
}
#include "kernels/block-sum.cuh"
#include "kernels/cublas-check.cuh"
#include "kernels/cuda-common.cuh"
#include "kernels/eval-quad.cuh"
#include "kernels/eval-transform.cuh"
#include "kernels/layer-eval.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EV_THREADS 256
#define EV_PARTS   264   // blocks of one sum of squares (fixed, so the reduction order is too)
#define FULL       0xffffffffu

struct oscar_backend_eval {
    struct oscar_eval_shape s;
    cublasHandle_t blas;
    cudaStream_t stream;
    int32_t T, n_seq, * seq_start;   // the current layer (host copy of the boundaries)
    int32_t window;                  // its sliding window (0 = full causal): softmax and logit sums take only it
    float * q, * k, * v, * wo;       // device [T, Hq, D], [T, Hkv, D] x2, [C, Hq*D]
    uint8_t * int2_row;              // device [T]
    float * kb, * vb;                // device [max_cand + 1][T, Hkv, D]: 0 the exact rows, then variants
    float * z;                       // device [max_cand + 1][max_len, max_len] scores / weights
    float * ob;                      // device [max_cand + 1][T, Hq, D]: 0 the exact output, then variants
    float * y;                       // device [T, C]
    float * rot;                     // device [2 (K, V)][2 (R, Rᵀ)][Hkv, D, D]
    float * mu;                      // device [Hkv, D]: the key mean of the current method, if it has one
    float * h_rot;                   // host staging [2][Hkv, D, D]
    int32_t * clip_idx, * h_clip;    // device / host [max_cand, Hkv]
    double * part;                   // device [max_cand + 1][EV_PARTS]
    double * acc, * h_acc;           // [n_acc] fp64 accumulators
    int32_t n_acc;
    struct osc_quad quad;            // the fp64 quadratic forms
    // made once per layer, on first use
    bool o_ready;                    // ob[0] holds the exact attention output, o_den ‖o.W_Oᵀ‖²
    double o_den;
    bool kq_ready;                   // full attention: the query suffix sums and k_den below
    double * k_den;                  // host [Hkv] the exact keys' logit sums
    bool wo_ready;                   // the per-head W_O Grams
};

// ---- kernels -------------------------------------------------------------------------------

// Row t of batch blockIdx.y: softmax over the keys t sees, f <= p <= t (f = t - window + 1 in a
// sliding layer, else 0), of z·scale (fp64); zeros elsewhere.
__global__ void softmax_kernel(float * z, int n, long long zs, double scale, int window) {
    __shared__ double red[EV_THREADS / 32];
    const int t = blockIdx.x, f = window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;
    float * row = z + blockIdx.y * zs + (long long) t * n;
    double m = -INFINITY, s = 0.0;
    for (int p = f + threadIdx.x; p <= t; p += blockDim.x) m = fmax(m, (double) row[p] * scale);
    m = block_reduce(m, red, true);
    for (int p = f + threadIdx.x; p <= t; p += blockDim.x) s += exp((double) row[p] * scale - m);
    const double lz = m + log(block_reduce(s, red, false));
    for (int p = threadIdx.x; p < n; p += blockDim.x)
        row[p] = p >= f && p <= t ? (float) exp((double) row[p] * scale - lz) : 0.0f;
}

// part[b, block] = Σ x² over batch b's elements (i = t·n + p with p <= t only, if n_mask; and
// t - p < window too when window > 0).
__global__ void sumsq_kernel(const float * z, long long n_elem, long long zs, int n_mask, int window, double * part) {
    __shared__ double red[EV_THREADS / 32];
    const float * zb = z + blockIdx.y * zs;
    double s = 0.0;
    for (long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x; i < n_elem;
         i += (long long) gridDim.x * blockDim.x) {
        if (n_mask && (i % n_mask > i / n_mask || (window > 0 && i / n_mask - i % n_mask >= window))) continue;
        const double v = zb[i];
        s += v * v;
    }
    s = block_reduce(s, red, false);
    if (threadIdx.x == 0) part[blockIdx.y * gridDim.x + blockIdx.x] = s;
}

__global__ void add_parts_kernel(const double * part, int n_part, int nb, double * acc, int acc_stride) {
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= nb) return;
    double s = 0.0;
    for (int i = 0; i < n_part; i++) s += part[(long long) b * n_part + i];
    acc[(long long) b * acc_stride] += s;
}

__global__ void sub_kernel(float * a, const float * b, long long n) {
    for (long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long) gridDim.x * blockDim.x)
        a[i] = __fsub_rn(a[i], b[i]);
}

// ---- host helpers --------------------------------------------------------------------------

// Column-major C_b = op(A_b) . op(B_b), fp32 in and out, fp32 accumulation (no TF32).
static cublasStatus_t gemm(struct oscar_backend_eval * e, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                           int k, const float * A, int lda, long long sa, const float * B, int ldb, long long sb,
                           float * C, int ldc, long long sc, int batch) {
    const float one = 1.0f, zero = 0.0f;
    return cublasGemmStridedBatchedEx(e->blas, ta, tb, m, n, k, &one, A, CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb, sb,
                                      &zero, C, CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

// acc[b * acc_stride] += Σ squares of batch b < nb (z + b·zs, n_elem each; causal mask if n_mask).
static enum oscar_status sumsq(struct oscar_backend_eval * e, const float * z, long long n_elem, long long zs, int nb,
                               int n_mask, double * acc, int acc_stride) {
    sumsq_kernel<<<dim3(EV_PARTS, (unsigned) nb), EV_THREADS, 0, e->stream>>>(z, n_elem, zs, n_mask, n_mask ? e->window : 0,
                                                                             e->part);
    OSCAR_CUDA_CHECK_LAUNCH();
    add_parts_kernel<<<(unsigned) ((nb + 127) / 128), 128, 0, e->stream>>>(e->part, EV_PARTS, nb, acc, acc_stride);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

// *acc += ‖O[:, c0 : c0+nc] . W_O[:, c0 : c0+nc]ᵀ‖² (O [T, Hq·D], W_O [C, Hq·D], row-major).
static enum oscar_status wo_energy(struct oscar_backend_eval * e, const float * O, int c0, int nc, double * acc) {
    const int K = e->s.n_head * e->s.head_dim, C = e->s.n_embd;
    OSCAR_CUBLAS_CHECK(gemm(e, CUBLAS_OP_T, CUBLAS_OP_N, C, e->T, nc, e->wo + c0, K, 0, O + c0, K, 0, e->y, C, 0, 1));
    return sumsq(e, e->y, (long long) e->T * C, 0, 1, 0, acc, 1);
}

// Attention over every sequence and query head with the weights of the keys K (one variant;
// [T, Hkv, D]): ob[b] = A·V_b for the n_v value variants V_b = V + b·(T·Hkv·D), into ob + b·(T·Hq·D).
// A sliding layer's logit sums, when k_acc (device) is given: the scores of n_z key variants
// K_b = K + b·(T·Hkv·D) (the first gives A), k_acc[b·Hkv + h] += Σ_{visible (t,p)} Z_b[t][p]².
static enum oscar_status attend(struct oscar_backend_eval * e, const float * K, int n_z, const float * V, float * ob,
                                int n_v, double * k_acc) {
    const int Hq = e->s.n_head, Hkv = e->s.n_head_kv, D = e->s.head_dim, g = Hq / Hkv;
    const long long kvs = (long long) e->T * Hkv * D, obs = (long long) e->T * Hq * D;
    // lib/attention's oscar_attn_score_scale (a C header): the shape's scale, or 1/sqrt(D) with the old bits
    const double scale = e->s.attn_scale > 0.0f ? (double) e->s.attn_scale : 1.0 / sqrt((double) D);
    for (int s = 0; s < e->n_seq; s++) {
        const int b0 = e->seq_start[s], n = e->seq_start[s + 1] - b0;
        const long long zs = (long long) n * n;
        if (n == 0) continue;
        for (int j = 0; j < Hq; j++) {
            const int h = j / g;
            const float * Kb = K + ((long long) b0 * Hkv + h) * D, * Vb = V + ((long long) b0 * Hkv + h) * D;
            const float * Q = e->q + ((long long) b0 * Hq + j) * D;
            // one GEMM per variant: a variant's bits do not depend on how many are evaluated with it
            // (a clip grid split over ranks gives the one-process numbers)
            for (int b = 0; b < n_z; b++)
                OSCAR_CUBLAS_CHECK(gemm(e, CUBLAS_OP_T, CUBLAS_OP_N, n, n, D, Kb + b * kvs, Hkv * D, 0, Q, Hq * D, 0,
                                        e->z + b * zs, n, 0, 1));
            if (k_acc) {
                enum oscar_status st = sumsq(e, e->z, zs, zs, n_z, n, k_acc + h, Hkv);
                if (st != OSCAR_OK) return st;
            }
            softmax_kernel<<<dim3((unsigned) n, 1), EV_THREADS, 0, e->stream>>>(e->z, n, zs, scale, e->window);
            OSCAR_CUDA_CHECK_LAUNCH();
            for (int b = 0; b < n_v; b++)
                OSCAR_CUBLAS_CHECK(gemm(e, CUBLAS_OP_N, CUBLAS_OP_N, D, n, n, Vb + b * kvs, Hkv * D, 0, e->z, n, 0,
                                        ob + b * obs + ((long long) b0 * Hq + j) * D, Hq * D, 0, 1));
        }
    }
    return OSCAR_OK;
}

static enum oscar_status check_method(const struct oscar_backend_eval * e, const struct oscar_eval_method * m) {
    const int D = e->s.head_dim, G = m->int2.group_size > 0 ? m->int2.group_size : D;
    if (m->int2.scheme == OSCAR_INT2_LLOYD_MAX || m->int2.bf16_dequant)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda layer eval: Lloyd-Max and bf16 dequantization are CPU-only");
    if (G <= 0 || D % G)
        return osc_error(OSCAR_ERR_INVALID, "cuda layer eval: group size %d does not divide head_dim %d", G, D);
    const struct oscar_eval_kv * kv[2] = {&m->k, &m->v};
    for (int i = 0; i < 2; i++)
        if ((kv[i]->rot == OSCAR_EVAL_ROT_MATRIX && (!kv[i]->rot_mat || (kv[i]->n_rot != 1 && kv[i]->n_rot != e->s.n_head_kv))) ||
            !kv[i]->clip || (kv[i]->n_clip != 1 && kv[i]->n_clip != e->s.n_head_kv))
            return osc_error(OSCAR_ERR_INVALID, "cuda layer eval: %s rotation / clip arrays missing or mis-shaped",
                             i ? "V" : "K");
    if (m->v.mu) return osc_error(OSCAR_ERR_INVALID, "cuda layer eval: a mean is subtracted from keys only");
    return OSCAR_OK;
}

// out [n_cand][T, Hkv, D] = the method's K (is_k) or V rows (value, or value − x if diff).
static enum oscar_status transform(struct oscar_backend_eval * e, const struct oscar_eval_method * m, bool is_k,
                                   int n_cand, bool diff, float * out) {
    const struct oscar_eval_kv * kv = is_k ? &m->k : &m->v;
    const int D = e->s.head_dim, Hkv = e->s.n_head_kv;
    const size_t DD = (size_t) D * D;
    struct osc_eval_transform a;
    memset(&a, 0, sizeof a);
    a.head_dim = D, a.n_head_kv = Hkv, a.n_rot = kv->n_rot, a.rot = kv->rot;
    a.had_scale = (float) (1.0 / sqrt((double) D));
    if (kv->rot == OSCAR_EVAL_ROT_MATRIX) {
        float * R = e->rot + (is_k ? 0 : 2) * Hkv * DD, * hR = e->h_rot, * hT = e->h_rot + Hkv * DD;
        for (int r = 0; r < kv->n_rot; r++)
            for (int i = 0; i < D; i++)
                for (int j = 0; j < D; j++) {
                    hR[r * DD + (size_t) i * D + j] = kv->rot_mat[r * DD + (size_t) i * D + j];
                    hT[r * DD + (size_t) j * D + i] = kv->rot_mat[r * DD + (size_t) i * D + j];
                }
        OSCAR_CUDA_CHECK(cudaMemcpyAsync(R, hR, kv->n_rot * DD * sizeof(float), cudaMemcpyHostToDevice, e->stream));
        OSCAR_CUDA_CHECK(cudaMemcpyAsync(R + Hkv * DD, hT, kv->n_rot * DD * sizeof(float), cudaMemcpyHostToDevice, e->stream));
        a.R = R, a.Rt = R + Hkv * DD;
    }
    for (int c = 0; c < n_cand; c++)
        for (int h = 0; h < Hkv; h++) {
            const double ratio = kv->clip[c * kv->n_clip + (kv->n_clip > 1 ? h : 0)];
            e->h_clip[c * Hkv + h] = m->int2.scheme == OSCAR_INT2_SYM ? -1 : oscar_clip_index(ratio, D);
        }
    int32_t * clip = e->clip_idx + (is_k ? 0 : e->s.max_cand * Hkv);
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(clip, e->h_clip, (size_t) n_cand * Hkv * sizeof(int32_t), cudaMemcpyHostToDevice, e->stream));
    if (kv->mu) {
        OSCAR_CUDA_CHECK(cudaMemcpyAsync(e->mu, kv->mu, (size_t) Hkv * D * sizeof(float), cudaMemcpyHostToDevice, e->stream));
        a.mu = e->mu;
    }
    const enum oscar_clip_algo ca = m->int2.clip_algo;
    a.x = is_k ? e->k : e->v, a.int2_row = e->int2_row, a.clip_idx = clip, a.n_cand = n_cand;
    a.sym = m->int2.scheme == OSCAR_INT2_SYM;
    a.bisect = ca == OSCAR_CLIP_BISECT || (ca == OSCAR_CLIP_FLUSH && D >= 64);   // oscar_clip_tau's rule
    a.hp_bf16 = m->hp_bf16, a.meta_dtype = (int32_t) m->int2.meta_dtype;
    a.group_size = m->int2.group_size > 0 ? m->int2.group_size : D;
    a.diff = diff, a.out = out, a.out_stride = (int64_t) e->T * Hkv * D, a.n_rows = (int64_t) e->T * Hkv;
    return osc_cuda_eval_transform(&a, e->stream);
}

// kb[0] = K, kb[1 ..] = the method's candidates (likewise V).
static enum oscar_status variants(struct oscar_backend_eval * e, const struct oscar_eval_method * m, int n_cand,
                                  bool diff) {
    const size_t kvs = (size_t) e->T * e->s.n_head_kv * e->s.head_dim;
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(e->kb, e->k, kvs * sizeof(float), cudaMemcpyDeviceToDevice, e->stream));
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(e->vb, e->v, kvs * sizeof(float), cudaMemcpyDeviceToDevice, e->stream));
    if (n_cand == 0) return OSCAR_OK;
    enum oscar_status st = transform(e, m, true, n_cand, diff, e->kb + kvs);
    return st == OSCAR_OK ? transform(e, m, false, n_cand, diff, e->vb + kvs) : st;
}

static enum oscar_status fetch_acc(struct oscar_backend_eval * e, int n) {
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(e->h_acc, e->acc, (size_t) n * sizeof(double), cudaMemcpyDeviceToHost, e->stream));
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(e->stream));
    return OSCAR_OK;
}

// ---- entry points ------------------------------------------------------------------------

extern "C" void osc_cuda_eval_free(struct oscar_backend_eval * e) {
    if (!e) return;
    void * dev[] = {e->q, e->k, e->v, e->wo, e->int2_row, e->kb, e->vb, e->z, e->ob, e->y, e->rot, e->mu, e->clip_idx,
                    e->part, e->acc};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cudaFree(dev[i]);
    osc_quad_free(&e->quad);
    if (e->blas) cublasDestroy(e->blas);
    if (e->stream) cudaStreamDestroy(e->stream);
    free(e->seq_start); free(e->h_rot); free(e->h_clip); free(e->h_acc); free(e->k_den);
    free(e);
}

template <typename T> static cudaError_t dmalloc(T ** p, size_t n) { return cudaMalloc((void **) p, (n ? n : 1) * sizeof(T)); }

extern "C" enum oscar_status osc_cuda_eval_open(const struct oscar_eval_shape * s, struct oscar_backend_eval ** out) {
    *out = NULL;
    const int D = s->head_dim;
    if (D != 32 && D != 64 && D != 128 && D != 256)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda layer eval: head_dim %d (built for 32, 64, 128, 256)", D);
    if (s->n_head_kv < 1 || s->n_head % s->n_head_kv || s->n_embd < 1 || s->max_tokens < 1 || s->max_len < 1 ||
        s->max_len > s->max_tokens || s->max_cand < 1)
        return osc_error(OSCAR_ERR_INVALID, "cuda layer eval: bad shape (Hq %d, Hkv %d, C %d, T %d, len %d, cand %d)",
                         s->n_head, s->n_head_kv, s->n_embd, s->max_tokens, s->max_len, s->max_cand);
    struct oscar_backend_eval * e = (struct oscar_backend_eval *) calloc(1, sizeof *e);
    if (!e) return osc_error(OSCAR_ERR_NOMEM, "cuda layer eval: out of host memory");
    e->s = *s;
    const size_t T = (size_t) s->max_tokens, Hq = (size_t) s->n_head, Hkv = (size_t) s->n_head_kv, C = (size_t) s->n_embd;
    const size_t nb = (size_t) s->max_cand + 1, L = (size_t) s->max_len, DD = (size_t) D * D;
    e->n_acc = (int32_t) (nb * (2 * Hkv + 1) + Hkv + 1);   // candidates' sums, then k_den and o_den's
    enum oscar_status st = OSCAR_OK;
    e->h_rot = (float *) malloc(2 * Hkv * DD * sizeof(float));
    e->h_clip = (int32_t *) malloc((size_t) s->max_cand * Hkv * sizeof(int32_t));
    e->h_acc = (double *) malloc((size_t) e->n_acc * sizeof(double));
    e->k_den = (double *) malloc(Hkv * sizeof(double));
    if (!e->h_rot || !e->h_clip || !e->h_acc || !e->k_den) {
        st = osc_error(OSCAR_ERR_NOMEM, "cuda layer eval: out of host memory");
        goto out;
    }
    OSCAR_CUDA_TRY(cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking));
    if (cublasCreate(&e->blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(e->blas, e->stream) != CUBLAS_STATUS_SUCCESS) {
        st = osc_error(OSCAR_ERR_UNSUPPORTED, "cuda layer eval: cuBLAS initialisation failed");
        goto out;
    }
    OSCAR_CUDA_TRY(dmalloc(&e->q, T * Hq * D));
    OSCAR_CUDA_TRY(dmalloc(&e->k, T * Hkv * D));
    OSCAR_CUDA_TRY(dmalloc(&e->v, T * Hkv * D));
    OSCAR_CUDA_TRY(dmalloc(&e->wo, C * Hq * D));
    OSCAR_CUDA_TRY(dmalloc(&e->int2_row, T));
    OSCAR_CUDA_TRY(dmalloc(&e->kb, nb * T * Hkv * D));
    OSCAR_CUDA_TRY(dmalloc(&e->vb, nb * T * Hkv * D));
    OSCAR_CUDA_TRY(dmalloc(&e->z, nb * L * L));
    OSCAR_CUDA_TRY(dmalloc(&e->ob, nb * T * Hq * D));
    OSCAR_CUDA_TRY(dmalloc(&e->y, T * C));
    OSCAR_CUDA_TRY(dmalloc(&e->rot, 4 * Hkv * DD));
    OSCAR_CUDA_TRY(dmalloc(&e->mu, Hkv * D));
    OSCAR_CUDA_TRY(dmalloc(&e->clip_idx, 2 * (size_t) s->max_cand * Hkv));
    OSCAR_CUDA_TRY(dmalloc(&e->part, nb * EV_PARTS));
    OSCAR_CUDA_TRY(dmalloc(&e->acc, (size_t) e->n_acc));
    st = osc_quad_open(&e->quad, e->blas, e->stream, s->n_head, s->n_head_kv, D, s->n_embd, s->max_tokens);
out:
    if (st != OSCAR_OK) {
        osc_cuda_eval_free(e);
        return st;
    }
    *out = e;
    return OSCAR_OK;
}

extern "C" enum oscar_status osc_cuda_eval_layer(struct oscar_backend_eval * e, const struct oscar_eval_layer * in) {
    const int32_t T = in->n_tokens;
    if (T < 0 || T > e->s.max_tokens || in->n_seq < 0 || in->seq_start[0] != 0 || in->seq_start[in->n_seq] != T)
        return osc_error(OSCAR_ERR_INVALID, "cuda layer eval: %d tokens in %d sequences (workspace: %d tokens)", T,
                         in->n_seq, e->s.max_tokens);
    for (int32_t s = 0; s < in->n_seq; s++)
        if (in->seq_start[s + 1] < in->seq_start[s] || in->seq_start[s + 1] - in->seq_start[s] > e->s.max_len)
            return osc_error(OSCAR_ERR_INVALID, "cuda layer eval: sequence %d longer than the workspace's %d tokens",
                             s, e->s.max_len);
    int32_t * ss = (int32_t *) realloc(e->seq_start, (size_t) (in->n_seq + 1) * sizeof(int32_t));
    if (!ss) return osc_error(OSCAR_ERR_NOMEM, "cuda layer eval: out of host memory");
    memcpy(ss, in->seq_start, (size_t) (in->n_seq + 1) * sizeof(int32_t));
    if (in->window < 0) return osc_error(OSCAR_ERR_INVALID, "cuda layer eval: window %d < 0", in->window);
    e->seq_start = ss, e->n_seq = in->n_seq, e->T = T, e->window = in->window;
    e->o_ready = e->kq_ready = e->wo_ready = false;   // made again from these rows on first use
    const size_t D = (size_t) e->s.head_dim, qn = (size_t) T * e->s.n_head * D, kn = (size_t) T * e->s.n_head_kv * D;
    const cudaMemcpyKind h2d = cudaMemcpyHostToDevice;
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(e->q, in->q, qn * sizeof(float), h2d, e->stream));
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(e->k, in->k, kn * sizeof(float), h2d, e->stream));
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(e->v, in->v, kn * sizeof(float), h2d, e->stream));
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(e->wo, in->wo, (size_t) e->s.n_embd * e->s.n_head * D * sizeof(float), h2d, e->stream));
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(e->int2_row, in->int2_row, (size_t) T, h2d, e->stream));
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(e->stream));   // the caller may free its rows now
    return OSCAR_OK;
}

// The layer's exact output (ob[0]) and its energy, once per layer: every method and candidate
// is measured against the same bits whatever ran before.
static enum oscar_status exact_output(struct oscar_backend_eval * e) {
    if (e->o_ready) return OSCAR_OK;
    const int K = e->s.n_head * e->s.head_dim;
    double * acc = e->acc + e->n_acc - 1;
    enum oscar_status st;
    OSCAR_CUDA_CHECK(cudaMemsetAsync(acc, 0, sizeof(double), e->stream));
    if ((st = attend(e, e->k, 1, e->v, e->ob, 1, NULL)) != OSCAR_OK || (st = wo_energy(e, e->ob, 0, K, acc)) != OSCAR_OK)
        return st;
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(&e->o_den, acc, sizeof(double), cudaMemcpyDeviceToHost, e->stream));
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(e->stream));
    e->o_ready = true;
    return OSCAR_OK;
}

// A full-attention layer's query suffix sums and the exact keys' logit sums, once per layer.
static enum oscar_status key_sums_setup(struct oscar_backend_eval * e) {
    if (e->kq_ready) return OSCAR_OK;
    const int Hkv = e->s.n_head_kv;
    double * acc = e->acc + e->n_acc - 1 - Hkv;
    enum oscar_status st = osc_quad_queries(&e->quad, e->q, e->T, e->n_seq, e->seq_start);
    if (st != OSCAR_OK) return st;
    OSCAR_CUDA_CHECK(cudaMemsetAsync(acc, 0, (size_t) Hkv * sizeof(double), e->stream));
    if ((st = osc_quad_logit_sums(&e->quad, e->k, acc)) != OSCAR_OK) return st;
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(e->k_den, acc, (size_t) Hkv * sizeof(double), cudaMemcpyDeviceToHost, e->stream));
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(e->stream));
    e->kq_ready = true;
    return OSCAR_OK;
}

extern "C" enum oscar_status osc_cuda_eval_out_err(struct oscar_backend_eval * e, const struct oscar_eval_method * m,
                                                   double * num, double * den) {
    enum oscar_status st = check_method(e, m);
    if (st != OSCAR_OK) return st;
    const long long obs = (long long) e->T * e->s.n_head * e->s.head_dim;
    const int K = e->s.n_head * e->s.head_dim;
    const long long kvs = (long long) e->T * e->s.n_head_kv * e->s.head_dim;
    if ((st = exact_output(e)) != OSCAR_OK) return st;
    OSCAR_CUDA_CHECK(cudaMemsetAsync(e->acc, 0, sizeof(double), e->stream));
    if ((st = variants(e, m, 1, false)) != OSCAR_OK) return st;
    if ((st = attend(e, e->kb + kvs, 1, e->vb + kvs, e->ob + obs, 1, NULL)) != OSCAR_OK) return st;
    sub_kernel<<<1024, EV_THREADS, 0, e->stream>>>(e->ob + obs, e->ob, obs);   // ô − o
    OSCAR_CUDA_CHECK_LAUNCH();
    if ((st = wo_energy(e, e->ob + obs, 0, K, e->acc)) != OSCAR_OK || (st = fetch_acc(e, 1)) != OSCAR_OK) return st;
    *den = e->o_den, *num = e->h_acc[0];
    return OSCAR_OK;
}

extern "C" enum oscar_status osc_cuda_eval_candidates(struct oscar_backend_eval * e, const struct oscar_eval_method * m,
                                                      int32_t n_cand, bool v_per_head, double * k_num, double * k_den,
                                                      double * v_num, double * v_den) {
    enum oscar_status st = check_method(e, m);
    if (st != OSCAR_OK) return st;
    if (n_cand < 0 || n_cand > e->s.max_cand)   // 0: the references alone (k_den, v_den)
        return osc_error(OSCAR_ERR_INVALID, "cuda layer eval: %d candidates (workspace: %d)", n_cand, e->s.max_cand);
    const int Hkv = e->s.n_head_kv, D = e->s.head_dim, K = e->s.n_head * D, nb = n_cand + 1;
    const long long obs = (long long) e->T * e->s.n_head * D, kvs = (long long) e->T * Hkv * D;
    double * kacc = e->acc, * vacc = e->acc + (size_t) nb * Hkv;   // [nb][Hkv], [nb][Hkv + 1]; 0 the exact rows'
    const int n = nb * (2 * Hkv + 1);
    if ((st = exact_output(e)) != OSCAR_OK) return st;
    if (e->window == 0 && (st = key_sums_setup(e)) != OSCAR_OK) return st;
    if (v_per_head && !e->wo_ready) {
        if ((st = osc_quad_wo(&e->quad, e->wo)) != OSCAR_OK) return st;
        e->wo_ready = true;
    }
    OSCAR_CUDA_CHECK(cudaMemsetAsync(e->acc, 0, (size_t) n * sizeof(double), e->stream));
    if ((st = variants(e, m, n_cand, true)) != OSCAR_OK) return st;
    // keys: the logit sums of each difference k̂_c − k (a sliding layer: from the masked scores below)
    for (int c = 0; c < n_cand && e->window == 0 && st == OSCAR_OK; c++)
        st = osc_quad_logit_sums(&e->quad, e->kb + (1 + c) * kvs, kacc + (size_t) (1 + c) * Hkv);
    // values: A·(v̂_c − v) under the exact weights
    if (st == OSCAR_OK)
        st = attend(e, e->kb, e->window ? nb : 1, e->vb + kvs, e->ob + obs, n_cand, e->window ? kacc : NULL);
    for (int c = 0; c < n_cand && st == OSCAR_OK; c++) {
        const float * O = e->ob + (1 + c) * obs;
        double * vc = vacc + (size_t) (1 + c) * (Hkv + 1);
        st = v_per_head ? osc_quad_head_energies(&e->quad, O, e->T, vc) : wo_energy(e, O, 0, K, vc + Hkv);
    }
    if (st != OSCAR_OK || (st = fetch_acc(e, n)) != OSCAR_OK) return st;
    const double * hk = e->h_acc, * hv = e->h_acc + (size_t) nb * Hkv;
    // (q·e)²·scale² as (q·e)² / scale⁻², scale⁻² = D exactly by default (lib/verify/metrics.c's arithmetic)
    const double sa = e->s.attn_scale, inv_s2 = sa > 0.0 ? 1.0 / (sa * sa) : (double) D;
    for (int h = 0; h < Hkv; h++) k_den[h] = (e->window ? hk[h] : e->k_den[h]) / inv_s2;
    for (int c = 0; c < n_cand; c++)
        for (int h = 0; h < Hkv; h++) k_num[c * Hkv + h] = hk[(size_t) (c + 1) * Hkv + h] / inv_s2;
    *v_den = e->o_den;
    for (int c = 0; c < n_cand; c++)
        for (int x = 0; x <= Hkv; x++) v_num[c * (Hkv + 1) + x] = hv[(size_t) (c + 1) * (Hkv + 1) + x];
    return OSCAR_OK;
}
