// optr-loss.cu - OptR's loss kernels on the GPU (contract in optr-loss.cuh). The per-element
// steps are optr-loss.c's with named IEEE roundings; sums are fp64 in a fixed order.
#include "kernels/block-sum.cuh"
#include "kernels/cuda-common.cuh"
#include "kernels/optr-loss.cuh"

#define RT 256   // threads of a row kernel

// fp32 max over the block (exact whatever the order); every thread gets it.
static __device__ float block_max_f32(float v, float * red) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = -INFINITY;
    for (int i = 0; i < (int) (blockDim.x >> 5); i++) r = fmaxf(r, red[i]);
    return r;
}

static __global__ void __launch_bounds__(RT) softmax_rows_kernel(float * s, const float * __restrict__ p, long long item,
                                                           int rows, int nq, int L, int lo, double * rowval) {
    __shared__ double red[RT / 32];
    __shared__ float redf[RT / 32];
    const int r = blockIdx.x, b = blockIdx.y, nk = lo + r % nq + 1;
    float * row = s + b * item + (long long) r * L;
    const float * prow = p ? p + b * item + (long long) r * L : NULL;
    float mx = -INFINITY;
    for (int t = threadIdx.x; t < nk; t += RT) mx = fmaxf(mx, row[t]);
    mx = block_max_f32(mx, redf);
    double sum = 0.0;
    for (int t = threadIdx.x; t < nk; t += RT) sum = __dadd_rn(sum, (double) expf(__fsub_rn(row[t], mx)));
    sum = block_reduce(sum, red, false);
    const float inv = __double2float_rn(__ddiv_rn(1.0, sum));
    const double lse = __dadd_rn((double) mx, log(sum));
    double acc = 0.0;
    for (int t = threadIdx.x; t < L; t += RT) {
        if (t >= nk) {
            row[t] = 0.0f;
            continue;
        }
        const float x = row[t], e = __fmul_rn(expf(__fsub_rn(x, mx)), inv);
        acc = __dadd_rn(acc, __dmul_rn((double) (prow ? prow[t] : e), __dsub_rn((double) x, lse)));
        row[t] = e;
    }
    acc = block_reduce(acc, red, false);
    if (threadIdx.x == 0) rowval[(long long) b * rows + r] = acc;
}

static __global__ void __launch_bounds__(RT) dscore_rows_kernel(float * ds, const float * __restrict__ ph,
                                                          const float * __restrict__ p, long long item, int nq, int L,
                                                          int lo, int q0, int q1, double wj) {
    __shared__ double red[RT / 32];
    const int r = blockIdx.x, nk = lo + r % nq + 1;
    const long long off = blockIdx.y * item + (long long) r * L;
    float * dr = ds + off;
    const float * hr = ph + off, * pr = p + off;
    double dot = 0.0;
    for (int t = threadIdx.x; t < nk; t += RT) dot = __dadd_rn(dot, __dmul_rn((double) hr[t], (double) dr[t]));
    dot = block_reduce(dot, red, false);   // every read of dr above is done before the writes below
    const double nqd = (double) nq;
    for (int t = q0 + threadIdx.x; t < q1; t += RT) {
        if (t >= nk) {
            dr[t] = 0.0f;
            continue;
        }
        const double h = (double) hr[t];
        const double v = __dadd_rn(__ddiv_rn(__dsub_rn(h, (double) pr[t]), nqd), __dmul_rn(h, __dsub_rn((double) dr[t], dot)));
        dr[t] = __double2float_rn(__dmul_rn(wj, v));
    }
}

static __global__ void sum_runs_kernel(const double * x, int per, long long n_out, double * out) {
    const long long o = (long long) blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= n_out) return;
    double s = 0.0;
    for (int i = 0; i < per; i++) s = __dadd_rn(s, x[o * per + i]);
    out[o] = s;
}

static __global__ void __launch_bounds__(RT) dot_slices_kernel(const float * __restrict__ a, const float * __restrict__ b,
                                                         long long len, double * out) {
    __shared__ double red[RT / 32];
    const long long o = blockIdx.x;
    double s = 0.0;
    for (long long i = threadIdx.x; i < len; i += RT)
        s = __dadd_rn(s, __dmul_rn((double) a[o * len + i], (double) b[o * len + i]));
    s = block_reduce(s, red, false);
    if (threadIdx.x == 0) out[o] = s;
}

static __global__ void item_loss_kernel(const double * plogp, const double * cross, const double * quad, int n, int g, int nq,
                                 double wo, double wj, double w, double lambda, int quad_only, double * loss) {
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n) return;
    double total = 0.0;
    for (int j = 0; j < g; j++) {
        const int k = b * g + j;
        if (quad_only) {
            total = __dadd_rn(total, __dmul_rn(__dmul_rn(wj, wo), quad[k]));
            continue;
        }
        const double kl = __ddiv_rn(__dsub_rn(plogp[k], cross[k]), (double) nq), o = __dmul_rn(quad[k], wo);
        total = __dadd_rn(total, __dmul_rn(wj, __dadd_rn(kl, __dmul_rn(lambda, o))));
    }
    loss[b] = __dmul_rn(w, total);
}

static __global__ void head_loss_kernel(const double * item, int n_seq, int Hkv, double * out) {
    const int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= Hkv) return;
    double s = 0.0;
    for (int q = 0; q < n_seq; q++) s = __dadd_rn(s, item[(long long) q * Hkv + h]);
    out[h] = s;
}

static __global__ void grad_reduce_kernel(const float * __restrict__ dr, int n_seq, int Hkv, int dd, double w, double * dR) {
    const long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long) Hkv * dd) return;
    const long long h = i / dd, e = i % dd;
    double s = 0.0;
    for (int q = 0; q < n_seq; q++) s = __dadd_rn(s, __dmul_rn(w, (double) dr[((long long) q * Hkv + h) * dd + e]));
    dR[i] = s;
}

static __global__ void replicate_kernel(float * dst, const float * __restrict__ src, long long n, long long unit, int mod) {
    for (long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long) gridDim.x * blockDim.x)
        dst[i] = src[(i / unit % mod) * unit + i % unit];
}

static __global__ void sub_items_kernel(float * a, long long sa, const float * __restrict__ x, long long sb, long long len) {
    const long long b = blockIdx.y;
    for (long long e = (long long) blockIdx.x * blockDim.x + threadIdx.x; e < len; e += (long long) gridDim.x * blockDim.x)
        a[b * sa + e] = __fsub_rn(a[b * sa + e], x[b * sb + e]);
}

static __global__ void heads_major_kernel(float * dst, const float * __restrict__ src, int R, int H, int D,
                                   const float * __restrict__ mean) {
    const long long n = (long long) R * H * D;
    for (long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long) gridDim.x * blockDim.x) {
        const long long d = i % D, t = i / D % R, h = i / ((long long) D * R);   // i indexes dst [H, R, D]
        const float x = src[(t * H + h) * D + d];
        dst[i] = mean ? __fsub_rn(x, mean[h * D + d]) : x;
    }
}

static unsigned grid_for(long long n, int threads) {
    const long long b = (n + threads - 1) / threads;
    return (unsigned) (b < 1 ? 1 : b > 65535 * 16 ? 65535 * 16 : b);
}

enum oscar_status osc_optr_softmax_rows(float * s, const float * p, int64_t item, int32_t n, int32_t rows, int32_t nq,
                                        int32_t L, int32_t lo, double * rowval, cudaStream_t stream) {
    if (n <= 0 || rows <= 0) return OSCAR_OK;
    softmax_rows_kernel<<<dim3((unsigned) rows, (unsigned) n), RT, 0, stream>>>(s, p, item, rows, nq, L, lo, rowval);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

enum oscar_status osc_optr_dscore_rows(float * ds, const float * ph, const float * p, int64_t item, int32_t n,
                                       int32_t rows, int32_t nq, int32_t L, int32_t lo, int32_t q0, int32_t q1,
                                       double wj, cudaStream_t stream) {
    if (n <= 0 || rows <= 0) return OSCAR_OK;
    dscore_rows_kernel<<<dim3((unsigned) rows, (unsigned) n), RT, 0, stream>>>(ds, ph, p, item, nq, L, lo, q0, q1, wj);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

enum oscar_status osc_optr_sum_runs(const double * x, int32_t per, int64_t n_out, double * out, cudaStream_t stream) {
    if (n_out <= 0) return OSCAR_OK;
    sum_runs_kernel<<<grid_for(n_out, 128), 128, 0, stream>>>(x, per, n_out, out);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

enum oscar_status osc_optr_dot_slices(const float * a, const float * b, int64_t len, int64_t n_slices, double * out,
                                      cudaStream_t stream) {
    if (n_slices <= 0) return OSCAR_OK;
    dot_slices_kernel<<<(unsigned) n_slices, RT, 0, stream>>>(a, b, len, out);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

enum oscar_status osc_optr_item_loss(const double * plogp, const double * cross, const double * quad, int32_t n,
                                     int32_t g, int32_t nq, double wo, double wj, double w, double lambda,
                                     int quad_only, double * loss, cudaStream_t stream) {
    if (n <= 0) return OSCAR_OK;
    item_loss_kernel<<<grid_for(n, 128), 128, 0, stream>>>(plogp, cross, quad, n, g, nq, wo, wj, w, lambda, quad_only,
                                                           loss);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

enum oscar_status osc_optr_head_loss(const double * item, int32_t n_seq, int32_t Hkv, double * out,
                                     cudaStream_t stream) {
    head_loss_kernel<<<grid_for(Hkv, 64), 64, 0, stream>>>(item, n_seq, Hkv, out);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

enum oscar_status osc_optr_grad_reduce(const float * dr, int32_t n_seq, int32_t Hkv, int32_t dd, double w, double * dR,
                                       cudaStream_t stream) {
    grad_reduce_kernel<<<grid_for((long long) Hkv * dd, 256), 256, 0, stream>>>(dr, n_seq, Hkv, dd, w, dR);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

enum oscar_status osc_optr_replicate(float * dst, const float * src, int64_t n_units, int64_t unit, int32_t mod,
                                     cudaStream_t stream) {
    const long long n = (long long) n_units * unit;
    if (n <= 0) return OSCAR_OK;
    replicate_kernel<<<grid_for(n, 256), 256, 0, stream>>>(dst, src, n, unit, mod);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

enum oscar_status osc_optr_sub_items(float * a, int64_t sa, const float * x, int64_t sb, int64_t len, int32_t n,
                                     cudaStream_t stream) {
    if (n <= 0 || len <= 0) return OSCAR_OK;
    const unsigned gx = grid_for(len, 256) < 1024 ? grid_for(len, 256) : 1024;
    sub_items_kernel<<<dim3(gx, (unsigned) n), 256, 0, stream>>>(a, sa, x, sb, len);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

enum oscar_status osc_optr_heads_major(float * dst, const float * src, int32_t R, int32_t H, int32_t D,
                                       const float * mean, cudaStream_t stream) {
    const long long n = (long long) R * H * D;
    if (n <= 0) return OSCAR_OK;
    heads_major_kernel<<<grid_for(n, 256), 256, 0, stream>>>(dst, src, R, H, D, mean);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}
