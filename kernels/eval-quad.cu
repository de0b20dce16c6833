// eval-quad.cu - the layer evaluator's fp64 quadratic-form sums (contract in eval-quad.cuh).
#include "kernels/block-sum.cuh"
#include "kernels/cublas-check.cuh"
#include "kernels/cuda-common.cuh"
#include "kernels/eval-quad.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define B         OSC_QUAD_BLOCK
#define Q_THREADS 256
#define Q_PARTS   264   // blocks of one row-dot sum (fixed, so the reduction order is too)

// ---- kernels -------------------------------------------------------------------------------

// out[r] (row_len values, fp64) = x[src[r]], or zeros for a padding row (src -1).
__global__ void pad_rows_kernel(const float * x, const int32_t * src, long long n_rows, int row_len, double * out) {
    const long long n = n_rows * row_len;
    for (long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long) gridDim.x * blockDim.x) {
        const int32_t s = src[i / row_len];
        out[i] = s < 0 ? 0.0 : (double) x[(long long) s * row_len + i % row_len];
    }
}

__global__ void to_f64_kernel(const float * x, long long n, double * out) {
    for (long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long) gridDim.x * blockDim.x)
        out[i] = (double) x[i];
}

// Each block's Σ q·qᵀ becomes the sum over the LATER blocks of its sequence (exclusive suffix,
// added from the last block down). One thread per (sequence, KV head, matrix element).
__global__ void suffix_kernel(double * sfx, const int32_t * blk_start, int n_seq, int Hkv, int DD) {
    const long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long) n_seq * Hkv * DD) return;
    const int s = (int) (i / ((long long) Hkv * DD)), h = (int) (i / DD % Hkv), e = (int) (i % DD);
    double run = 0.0;
    for (int b = blk_start[s + 1] - 1; b >= blk_start[s]; b--) {
        double * m = sfx + ((long long) b * Hkv + h) * DD + e;
        const double own = *m;
        *m = run;
        run += own;
    }
}

// part[h, block] = Σ f[h][r][d] · x[r·x_ld + h·x_boff + d] over r < rows, d < width (batch h = blockIdx.y).
__global__ void rowdot_kernel(const double * f, long long f_bstride, const double * x, int x_ld, int x_boff,
                              long long rows, int width, double * part) {
    __shared__ double red[Q_THREADS / 32];
    const int h = blockIdx.y;
    const double * fh = f + h * f_bstride, * xh = x + (long long) h * x_boff;
    double s = 0.0;
    for (long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x; i < rows * width;
         i += (long long) gridDim.x * blockDim.x)
        s += fh[i] * xh[i / width * x_ld + i % width];
    s = block_reduce(s, red, false);
    if (threadIdx.x == 0) part[h * gridDim.x + blockIdx.x] = s;
}

// The queries inside a key's own block: part[h, blk] = Σ_{p <= t in blk} Σ_{j in h} (q_tj · e_p)².
// Both blocks of rows in shared memory (stride D + 1 against bank conflicts); thread i takes the
// pairs i, i + blockDim, ... of the block's lower triangle.
__global__ void inblock_kernel(const double * qd, const double * ed, int Hq, int Hkv, int D, double * part) {
    extern __shared__ double sm[];
    __shared__ double red[Q_THREADS / 32];
    const int blk = blockIdx.x, h = blockIdx.y, g = Hq / Hkv, ld = D + 1, n_pair = B * (B + 1) / 2;
    double * se = sm, * sq = sm + B * ld;
    for (int i = threadIdx.x; i < B * D; i += blockDim.x)
        se[i / D * ld + i % D] = ed[(((long long) blk * B + i / D) * Hkv + h) * D + i % D];
    double acc = 0.0;
    for (int jj = 0; jj < g; jj++) {
        __syncthreads();   // the previous head's rows are no longer read
        for (int i = threadIdx.x; i < B * D; i += blockDim.x)
            sq[i / D * ld + i % D] = qd[(((long long) blk * B + i / D) * Hq + h * g + jj) * D + i % D];
        __syncthreads();
        for (int pr = threadIdx.x; pr < n_pair; pr += blockDim.x) {
            int t = (int) ((sqrt(8.0 * pr + 1.0) - 1.0) * 0.5);   // pair pr = t(t+1)/2 + p, p <= t
            while ((t + 1) * (t + 2) / 2 <= pr) t++;
            while (t * (t + 1) / 2 > pr) t--;
            const int p = pr - t * (t + 1) / 2;
            const double * a = sq + t * ld, * b = se + p * ld;
            double dot = 0.0;
            for (int d = 0; d < D; d++) dot = fma(a[d], b[d], dot);
            acc = fma(dot, dot, acc);
        }
    }
    acc = block_reduce(acc, red, false);
    if (threadIdx.x == 0) part[h * gridDim.x + blk] = acc;
}

// acc[b] += Σ part[b, 0 .. n_part) in order, b < nb.
__global__ void sum_parts_kernel(const double * part, int n_part, int nb, double * acc) {
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= nb) return;
    double s = 0.0;
    for (int i = 0; i < n_part; i++) s += part[(long long) b * n_part + i];
    acc[b] += s;
}

// ---- host ----------------------------------------------------------------------------------

static cublasStatus_t dgemm(const struct osc_quad * x, cublasOperation_t tb, int m, int n, int k, const double * A,
                            int lda, long long sa, const double * Bm, int ldb, long long sb, double beta, double * C,
                            int ldc, long long sc, int batch) {
    const double one = 1.0;
    return cublasDgemmStridedBatched(x->blas, CUBLAS_OP_N, tb, m, n, k, &one, A, lda, sa, Bm, ldb, sb, &beta, C, ldc,
                                     sc, batch);
}

static size_t inblock_smem(int D) { return 2 * (size_t) B * (size_t) (D + 1) * sizeof(double); }

template <typename T> static cudaError_t dalloc(T ** p, size_t n) { return cudaMalloc((void **) p, (n ? n : 1) * sizeof(T)); }

void osc_quad_free(struct osc_quad * x) {
    void * dev[] = {x->blk_start, x->pad_src, x->qd, x->ed, x->sfx, x->fk, x->wod, x->gram, x->od, x->fo, x->part};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cudaFree(dev[i]);
    memset(x, 0, sizeof *x);
}

enum oscar_status osc_quad_open(struct osc_quad * x, cublasHandle_t blas, cudaStream_t stream, int32_t Hq,
                                int32_t Hkv, int32_t D, int32_t C, int32_t max_tokens) {
    memset(x, 0, sizeof *x);
    x->blas = blas, x->stream = stream, x->Hq = Hq, x->Hkv = Hkv, x->D = D, x->C = C, x->cap_t = max_tokens;
    const size_t K = (size_t) Hq * D, gD = K / (size_t) Hkv;
    enum oscar_status st = OSCAR_OK;
    OSCAR_CUDA_TRY(cudaFuncSetAttribute(inblock_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int) inblock_smem(D)));
    OSCAR_CUDA_TRY(dalloc(&x->wod, (size_t) C * K));
    OSCAR_CUDA_TRY(dalloc(&x->gram, (size_t) Hkv * gD * gD));
    OSCAR_CUDA_TRY(dalloc(&x->od, (size_t) max_tokens * K));
    OSCAR_CUDA_TRY(dalloc(&x->fo, (size_t) max_tokens * K));
    x->n_part = Q_PARTS;
    OSCAR_CUDA_TRY(dalloc(&x->part, (size_t) Hkv * Q_PARTS));
out:
    if (st != OSCAR_OK) osc_quad_free(x);
    return st;
}

// Room for n_blk blocks of padded rows (the previous layer's contents are not kept).
static enum oscar_status reserve_blocks(struct osc_quad * x, int32_t n_blk, int32_t n_seq) {
    if (n_blk <= x->cap_blk && n_seq <= x->cap_seq) return OSCAR_OK;
    void * old[] = {x->blk_start, x->pad_src, x->qd, x->ed, x->sfx, x->fk, x->part};
    for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) cudaFree(old[i]);
    x->blk_start = x->pad_src = NULL, x->qd = x->ed = x->sfx = x->fk = x->part = NULL, x->cap_blk = x->cap_seq = 0;
    const size_t rows = (size_t) n_blk * B, DD = (size_t) x->D * x->D, Hkv = (size_t) x->Hkv;
    x->n_part = n_blk > Q_PARTS ? n_blk : Q_PARTS;
    OSCAR_CUDA_CHECK(dalloc(&x->blk_start, (size_t) n_seq + 1));
    OSCAR_CUDA_CHECK(dalloc(&x->pad_src, rows));
    OSCAR_CUDA_CHECK(dalloc(&x->qd, rows * (size_t) x->Hq * x->D));
    OSCAR_CUDA_CHECK(dalloc(&x->ed, rows * Hkv * x->D));
    OSCAR_CUDA_CHECK(dalloc(&x->sfx, (size_t) n_blk * Hkv * DD));
    OSCAR_CUDA_CHECK(dalloc(&x->fk, Hkv * rows * x->D));
    OSCAR_CUDA_CHECK(dalloc(&x->part, Hkv * (size_t) x->n_part));
    x->cap_blk = n_blk, x->cap_seq = n_seq;
    return OSCAR_OK;
}

enum oscar_status osc_quad_queries(struct osc_quad * x, const float * q, int32_t T, int32_t n_seq,
                                   const int32_t * seq_start) {
    if (n_seq < 0 || seq_start[0] != 0 || seq_start[n_seq] != T)
        return osc_error(OSCAR_ERR_INVALID, "layer eval: %d sequences do not cover %d rows", n_seq, T);
    int32_t * blk = (int32_t *) malloc(((size_t) n_seq + 1) * sizeof(int32_t));
    if (!blk) return osc_error(OSCAR_ERR_NOMEM, "layer eval: out of host memory");
    blk[0] = 0;
    for (int32_t s = 0; s < n_seq; s++) blk[s + 1] = blk[s] + (seq_start[s + 1] - seq_start[s] + B - 1) / B;
    const int32_t n_blk = blk[n_seq];
    int32_t * src = (int32_t *) malloc(((size_t) n_blk * B + 1) * sizeof(int32_t));
    enum oscar_status st = src ? reserve_blocks(x, n_blk, n_seq) : osc_error(OSCAR_ERR_NOMEM, "layer eval: out of host memory");
    if (st == OSCAR_OK) {
        for (int32_t s = 0; s < n_seq; s++)
            for (int32_t r = 0; r < (blk[s + 1] - blk[s]) * B; r++)
                src[(size_t) blk[s] * B + r] = seq_start[s] + r < seq_start[s + 1] ? seq_start[s] + r : -1;
        x->n_blk = n_blk;
        // pageable sources: the copies have read them when these calls return
        cudaError_t ce = cudaMemcpyAsync(x->blk_start, blk, ((size_t) n_seq + 1) * sizeof(int32_t),
                                         cudaMemcpyHostToDevice, x->stream);
        if (ce == cudaSuccess)
            ce = cudaMemcpyAsync(x->pad_src, src, (size_t) n_blk * B * sizeof(int32_t), cudaMemcpyHostToDevice, x->stream);
        if (ce != cudaSuccess) st = osc_cuda_error(ce, "cudaMemcpyAsync(block layout)", __func__, __FILE__, __LINE__);
    }
    free(blk), free(src);
    if (st != OSCAR_OK || n_blk == 0) return st;
    const int Hq = x->Hq, D = x->D, g = Hq / x->Hkv;
    const long long DD = (long long) D * D;
    pad_rows_kernel<<<1024, Q_THREADS, 0, x->stream>>>(q, x->pad_src, (long long) n_blk * B, Hq * D, x->qd);
    OSCAR_CUDA_CHECK_LAUNCH();
    // each block's Σ_j q·qᵀ (column-major: its rows of head j are a D × B matrix, ld Hq·D)
    for (int h = 0; h < x->Hkv; h++)
        for (int jj = 0; jj < g; jj++) {
            const double * X = x->qd + (long long) (h * g + jj) * D;
            OSCAR_CUBLAS_CHECK(dgemm(x, CUBLAS_OP_T, D, D, B, X, Hq * D, (long long) B * Hq * D, X, Hq * D,
                                     (long long) B * Hq * D, jj ? 1.0 : 0.0, x->sfx + h * DD, D, x->Hkv * DD, n_blk));
        }
    const long long n = (long long) n_seq * x->Hkv * DD;
    suffix_kernel<<<(unsigned) ((n + 255) / 256), 256, 0, x->stream>>>(x->sfx, x->blk_start, n_seq, x->Hkv, (int) DD);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

enum oscar_status osc_quad_logit_sums(struct osc_quad * x, const float * e, double * acc) {
    const int Hkv = x->Hkv, D = x->D, n_blk = x->n_blk;
    if (n_blk == 0) return OSCAR_OK;
    const long long rows = (long long) n_blk * B, DD = (long long) D * D, fks = (long long) x->cap_blk * B * D;
    pad_rows_kernel<<<1024, Q_THREADS, 0, x->stream>>>(e, x->pad_src, rows, Hkv * D, x->ed);
    OSCAR_CUDA_CHECK_LAUNCH();
    // the queries after each key's block: fk row p = S_blk(p) · e_p (S symmetric)
    for (int h = 0; h < Hkv; h++)
        OSCAR_CUBLAS_CHECK(dgemm(x, CUBLAS_OP_N, D, B, D, x->sfx + h * DD, D, Hkv * DD, x->ed + (long long) h * D,
                                 Hkv * D, (long long) B * Hkv * D, 0.0, x->fk + h * fks, D, (long long) B * D, n_blk));
    rowdot_kernel<<<dim3(Q_PARTS, (unsigned) Hkv), Q_THREADS, 0, x->stream>>>(x->fk, fks, x->ed, Hkv * D, D, rows, D,
                                                                             x->part);
    OSCAR_CUDA_CHECK_LAUNCH();
    sum_parts_kernel<<<(unsigned) ((Hkv + 127) / 128), 128, 0, x->stream>>>(x->part, Q_PARTS, Hkv, acc);
    OSCAR_CUDA_CHECK_LAUNCH();
    // the queries inside it
    inblock_kernel<<<dim3((unsigned) n_blk, (unsigned) Hkv), Q_THREADS, inblock_smem(D), x->stream>>>(x->qd, x->ed,
                                                                                                   x->Hq, Hkv, D, x->part);
    OSCAR_CUDA_CHECK_LAUNCH();
    sum_parts_kernel<<<(unsigned) ((Hkv + 127) / 128), 128, 0, x->stream>>>(x->part, n_blk, Hkv, acc);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

enum oscar_status osc_quad_wo(struct osc_quad * x, const float * wo) {
    const int K = x->Hq * x->D, gD = K / x->Hkv;
    to_f64_kernel<<<1024, Q_THREADS, 0, x->stream>>>(wo, (long long) x->C * K, x->wod);
    OSCAR_CUDA_CHECK_LAUNCH();
    // W_O row-major [C, K] is column-major K × C; head h's columns are its rows h·gD .. (a gD × C matrix)
    OSCAR_CUBLAS_CHECK(dgemm(x, CUBLAS_OP_T, gD, gD, x->C, x->wod, K, gD, x->wod, K, gD, 0.0, x->gram, gD,
                             (long long) gD * gD, x->Hkv));
    return OSCAR_OK;
}

enum oscar_status osc_quad_head_energies(struct osc_quad * x, const float * o, int32_t T, double * acc) {
    const int K = x->Hq * x->D, gD = K / x->Hkv, Hkv = x->Hkv;
    if (T < 0 || T > x->cap_t) return osc_error(OSCAR_ERR_INVALID, "layer eval: %d rows (room for %d)", T, x->cap_t);
    if (T == 0) return OSCAR_OK;
    const long long fos = (long long) x->cap_t * gD;
    to_f64_kernel<<<1024, Q_THREADS, 0, x->stream>>>(o, (long long) T * K, x->od);
    OSCAR_CUDA_CHECK_LAUNCH();
    // fo[h] row t = G_h · o_th (column-major: G_h [gD, gD] times the gD × T slice of o, ld K)
    OSCAR_CUBLAS_CHECK(dgemm(x, CUBLAS_OP_N, gD, T, gD, x->gram, gD, (long long) gD * gD, x->od, K, gD, 0.0, x->fo, gD,
                             fos, Hkv));
    rowdot_kernel<<<dim3(Q_PARTS, (unsigned) Hkv), Q_THREADS, 0, x->stream>>>(x->fo, fos, x->od, K, gD, T, gD, x->part);
    OSCAR_CUDA_CHECK_LAUNCH();
    sum_parts_kernel<<<(unsigned) ((Hkv + 127) / 128), 128, 0, x->stream>>>(x->part, Q_PARTS, Hkv, acc);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}
