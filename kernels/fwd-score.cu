// fwd-score.cu - next-token scoring of LM-head rows (contract in fwd-score.cuh).
#include "kernels/fwd-score.cuh"

#include <math.h>

enum { SCORE_THREADS = 512 };

// Block-wide reductions in a fixed tree order (shared memory; every thread gets the result).
static __device__ double block_sum(double v, double * sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = SCORE_THREADS / 2; w > 0; w >>= 1) {
        if ((int) threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    const double r = sh[0];
    __syncthreads();
    return r;
}

// max of x and its first index.
static __device__ void block_argmax(float v, int32_t j, float * shv, int32_t * shj, float * mx, int32_t * top) {
    shv[threadIdx.x] = v, shj[threadIdx.x] = j;
    __syncthreads();
    for (int w = SCORE_THREADS / 2; w > 0; w >>= 1) {
        if ((int) threadIdx.x < w) {
            const float a = shv[threadIdx.x], c = shv[threadIdx.x + w];
            const int32_t ja = shj[threadIdx.x], jc = shj[threadIdx.x + w];
            if (c > a || (c == a && jc < ja)) shv[threadIdx.x] = c, shj[threadIdx.x] = jc;
        }
        __syncthreads();
    }
    *mx = shv[0], *top = shj[0];
    __syncthreads();
}

// lse of row x, its argmax and whether it is finite.
static __device__ double row_lse(const float * x, int32_t V, double * shd, float * shv, int32_t * shj,
                                 int32_t * top, bool * finite) {
    float m = -INFINITY;
    int32_t j0 = V, bad = 0;
    for (int32_t j = threadIdx.x; j < V; j += SCORE_THREADS) {
        const float v = x[j];
        bad |= !isfinite(v);
        if (v > m || j0 == V) m = v, j0 = j;
    }
    float mx;
    block_argmax(m, j0, shv, shj, &mx, top);
    *finite = block_sum((double) bad, shd) == 0.0;
    double z = 0;
    for (int32_t j = threadIdx.x; j < V; j += SCORE_THREADS) z += exp((double) x[j] - (double) mx);
    return (double) mx + log(block_sum(z, shd));
}

__global__ void __launch_bounds__(SCORE_THREADS) k_score(const float * l, const float * b, const int32_t * next,
                                                         int32_t V, struct oscar_fwd_score * out) {
    __shared__ double shd[SCORE_THREADS];
    __shared__ float shv[SCORE_THREADS];
    __shared__ int32_t shj[SCORE_THREADS];
    const size_t row = blockIdx.x;
    const float * lr = l + row * V;
    const int32_t y = next[row];
    int32_t top_l = 0, top_b = 0;
    bool fin_l = true, fin_b = true;
    const double lse_l = row_lse(lr, V, shd, shv, shj, &top_l, &fin_l);
    struct oscar_fwd_score r = {};
    r.nll = lse_l - (double) lr[y];
    if (b) {
        const float * br = b + row * V;
        const double lse_b = row_lse(br, V, shd, shv, shj, &top_b, &fin_b);
        const double dl = lse_l - lse_b;
        double kl = 0;
        for (int32_t j = threadIdx.x; j < V; j += SCORE_THREADS)
            kl += exp((double) br[j] - lse_b) * (((double) br[j] - (double) lr[j]) + dl);
        r.kl = block_sum(kl, shd);
        r.nll_ref = lse_b - (double) br[y];
        r.dp = exp(-r.nll) - exp(-r.nll_ref);
        r.same_top = top_l == top_b;
    }
    r.finite = fin_l && fin_b;
    if (threadIdx.x == 0) out[row] = r;
}

cudaError_t osc_fwd_score_rows(const float * l, const float * b, const int32_t * next, int32_t n, int32_t V,
                               struct oscar_fwd_score * out, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    k_score<<<(unsigned) n, SCORE_THREADS, 0, s>>>(l, b, next, V, out);
    return cudaGetLastError();
}
