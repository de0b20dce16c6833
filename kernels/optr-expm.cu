// optr-expm.cu - R = R_base·expm(A − Aᵀ), its gradient and Adam on the GPU (contract in
// optr-expm.cuh). Mirrors lib/rotation/optr-expm.c: T_k = Z·T_{k−1}/k, U_k = (Z·U_{k−1} +
// H'·T_{k−1})/k, E = Σ T_k, L = Σ U_k, then per squaring L ← E·L + L·E and E ← E². Heads
// whose own count s_h of squarings is reached keep their E and L (masked updates), so every
// head follows its CPU steps. U and T sit side by side ([D, 2D] row-major) so Z·U and Z·T are
// one product.
#include "kernels/cublas-check.cuh"
#include "kernels/cuda-common.cuh"
#include "kernels/optr-expm.cuh"

#include <stdlib.h>

enum { N_TERMS = 14, MAX_SQUARINGS = 60 };

struct osc_optr_expm_ws {
    cublasHandle_t blas;
    cudaStream_t stream;
    int32_t n, D;
    double * X, * Hs, * Z, * UT, * ZUT, * tmp, * tmp2, * E, * Lo, * dE, * R64;   // [n, D, D] ([n, D, 2D]: UT, ZUT)
    double * f;                 // device [n] 2^-s_h
    int32_t * s, * h_s;         // device / page-locked host [n] squarings per head
};

// ---- kernels (one thread per element of the n heads' D x D matrices unless said) ------------

static __global__ void xpose_skew_kernel(const double * A, int D, long long n_elem, double * X, int transpose) {
    const long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_elem) return;
    const long long dd = (long long) D * D, h = i / dd, r = i % dd / D, c = i % D;
    const double * a = A + h * dd;
    const double x = a[r * D + c], y = a[c * D + r];   // (A − Aᵀ)[r][c] = x − y, its transpose y − x
    X[i] = transpose ? __dsub_rn(y, x) : __dsub_rn(x, y);
}

static __global__ void anti_kernel(const double * G, int D, long long n_elem, double * gA) {
    const long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_elem) return;
    const long long dd = (long long) D * D, h = i / dd, r = i % dd / D, c = i % D;
    gA[i] = __dsub_rn(G[h * dd + r * D + c], G[h * dd + c * D + r]);
}

// Block per head, thread per column: the largest column sum of |X| (each sum in row order), then
// the squarings that bring it to <= 1/4 (optr-expm.c n_squarings).
static __global__ void squarings_kernel(const double * X, int D, int32_t * s_out, double * f_out) {
    extern __shared__ double col[];
    const double * x = X + (long long) blockIdx.x * D * D;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        double c = 0.0;
        for (int i = 0; i < D; i++) c = __dadd_rn(c, fabs(x[(long long) i * D + j]));
        col[j] = c;
    }
    __syncthreads();
    if (threadIdx.x) return;
    double norm = 0.0;
    for (int j = 0; j < D; j++) norm = col[j] > norm ? col[j] : norm;
    int s = 0;
    while (norm > 0.25 && s < MAX_SQUARINGS) norm *= 0.5, s++;
    s_out[blockIdx.x] = s;
    f_out[blockIdx.x] = ldexp(1.0, -s);
}

// Z = X·f, H' = H·f, [U | T] = [0 | I], E = I, L = 0.
static __global__ void init_kernel(const double * X, const double * H, const double * f, int D, long long n_elem, double * Z,
                            double * Hs, double * UT, double * E, double * Lo) {
    const long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_elem) return;
    const long long dd = (long long) D * D, h = i / dd, r = i % dd / D, c = i % D;
    const double one = r == c ? 1.0 : 0.0;
    Z[i] = __dmul_rn(X[i], f[h]);
    UT[h * 2 * dd + r * 2 * D + c] = 0.0;
    UT[h * 2 * dd + r * 2 * D + D + c] = one;
    E[i] = one;
    if (H) Hs[i] = __dmul_rn(H[i], f[h]), Lo[i] = 0.0;
}

// Term k: U = (Z·U + H'·T)/k, L += U (with H), T = Z·T/k, E += T.
static __global__ void term_kernel(double * UT, const double * ZUT, const double * HT, int D, long long n_elem, int k,
                            double * E, double * Lo) {
    const long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_elem) return;
    const long long dd = (long long) D * D, h = i / dd, r = i % dd / D, c = i % D, u = h * 2 * dd + r * 2 * D + c;
    const double kd = (double) k;
    if (HT) {
        const double nu = __ddiv_rn(__dadd_rn(ZUT[u], HT[i]), kd);
        UT[u] = nu;
        Lo[i] = __dadd_rn(Lo[i], nu);
    }
    const double t = __ddiv_rn(ZUT[u + D], kd);
    UT[u + D] = t;
    E[i] = __dadd_rn(E[i], t);
}

// Squaring j of heads with j < s_h: E = E², and L = E·L + L·E first (with the derivative).
static __global__ void square_kernel(const double * EE, const double * EL, const double * LE, const int32_t * s, int j, int D,
                              long long n_elem, double * E, double * Lo) {
    const long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_elem || j >= s[i / ((long long) D * D)]) return;
    if (Lo) Lo[i] = __dadd_rn(EL[i], LE[i]);
    E[i] = EE[i];
}

static __global__ void to_f32_kernel(const double * x, long long n, float * y) {
    const long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __double2float_rn(x[i]);
}

// optr.c run_phase's update, the same IEEE steps.
static __global__ void adam_kernel(double * A, double * m, double * v, const double * gA, long long n, double heads, double lr,
                            double bc1, double bc2) {
    const long long e = (long long) blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    const double gr = __ddiv_rn(gA[e], heads);
    const double mn = __dadd_rn(__dmul_rn(b1, m[e]), __dmul_rn(1.0 - b1, gr));
    const double vn = __dadd_rn(__dmul_rn(b2, v[e]), __dmul_rn(__dmul_rn(1.0 - b2, gr), gr));
    const double den = __dadd_rn(__ddiv_rn(__dsqrt_rn(vn), __dsqrt_rn(bc2)), eps);
    m[e] = mn, v[e] = vn;
    A[e] = __dsub_rn(A[e], __ddiv_rn(__dmul_rn(__ddiv_rn(lr, bc1), mn), den));
}

// ---- host --------------------------------------------------------------------------------

static unsigned blocks(long long n) { return (unsigned) ((n + 255) / 256); }

// Row-major C_b [M, N] = op(A_b)·op(B_b) for the n heads (strides in doubles).
static cublasStatus_t dgemm(struct osc_optr_expm_ws * w, bool ta, bool tb, int M, int N, int K, const double * A,
                            int lda, long long sa, const double * B, int ldb, long long sb, double * C, int ldc,
                            long long sc) {
    const double one = 1.0, zero = 0.0;
    return cublasDgemmStridedBatched(w->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                                     &one, B, ldb, sb, A, lda, sa, &zero, C, ldc, sc, w->n);
}

void osc_optr_expm_free(struct osc_optr_expm_ws * w) {
    if (!w) return;
    cudaFree(w->X), cudaFree(w->f), cudaFree(w->s), cudaFreeHost(w->h_s);
    free(w);
}

enum oscar_status osc_optr_expm_open(cublasHandle_t blas, cudaStream_t stream, int32_t n, int32_t D,
                                     struct osc_optr_expm_ws ** out) {
    *out = NULL;
    struct osc_optr_expm_ws * w = (struct osc_optr_expm_ws *) calloc(1, sizeof *w);
    if (!w) return osc_error(OSCAR_ERR_NOMEM, "cuda optr: out of host memory");
    enum oscar_status st = OSCAR_OK;
    const size_t dd = (size_t) n * D * D;
    w->blas = blas, w->stream = stream, w->n = n, w->D = D;
    OSCAR_CUDA_TRY(cudaMalloc((void **) &w->X, 13 * dd * sizeof(double)));
    OSCAR_CUDA_TRY(cudaMalloc((void **) &w->f, (size_t) n * sizeof(double)));
    OSCAR_CUDA_TRY(cudaMalloc((void **) &w->s, (size_t) n * sizeof(int32_t)));
    OSCAR_CUDA_TRY(cudaMallocHost((void **) &w->h_s, (size_t) n * sizeof(int32_t)));
    w->Hs = w->X + dd, w->Z = w->Hs + dd, w->UT = w->Z + dd, w->ZUT = w->UT + 2 * dd, w->tmp = w->ZUT + 2 * dd;
    w->tmp2 = w->tmp + dd, w->E = w->tmp2 + dd, w->Lo = w->E + dd, w->dE = w->Lo + dd, w->R64 = w->dE + dd;
    *out = w;
    return OSCAR_OK;
out:
    osc_optr_expm_free(w);
    return st;
}

// E = expm(X) for every head, and Lo = L(X, H) when H is given (expm_frechet of optr-expm.c).
static enum oscar_status expm_core(struct osc_optr_expm_ws * w, const double * X, const double * H, double * E,
                                   double * Lo) {
    const int D = w->D;
    const long long dd = (long long) D * D, ne = (long long) w->n * dd;
    squarings_kernel<<<(unsigned) w->n, D < 256 ? D : 256, (size_t) D * sizeof(double), w->stream>>>(X, D, w->s, w->f);
    OSCAR_CUDA_CHECK_LAUNCH();
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(w->h_s, w->s, (size_t) w->n * sizeof(int32_t), cudaMemcpyDeviceToHost, w->stream));
    init_kernel<<<blocks(ne), 256, 0, w->stream>>>(X, H, w->f, D, ne, w->Z, w->Hs, w->UT, E, Lo);
    OSCAR_CUDA_CHECK_LAUNCH();
    for (int k = 1; k <= N_TERMS; k++) {
        if (H) {
            OSCAR_CUBLAS_CHECK(dgemm(w, false, false, D, 2 * D, D, w->Z, D, dd, w->UT, 2 * D, 2 * dd, w->ZUT, 2 * D, 2 * dd));
            OSCAR_CUBLAS_CHECK(dgemm(w, false, false, D, D, D, w->Hs, D, dd, w->UT + D, 2 * D, 2 * dd, w->tmp2, D, dd));
        } else {
            OSCAR_CUBLAS_CHECK(dgemm(w, false, false, D, D, D, w->Z, D, dd, w->UT + D, 2 * D, 2 * dd, w->ZUT + D, 2 * D,
                                     2 * dd));
        }
        term_kernel<<<blocks(ne), 256, 0, w->stream>>>(w->UT, w->ZUT, H ? w->tmp2 : NULL, D, ne, k, E, Lo);
        OSCAR_CUDA_CHECK_LAUNCH();
    }
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(w->stream));   // the squaring counts (copied above)
    int s_max = 0;
    for (int32_t h = 0; h < w->n; h++) s_max = w->h_s[h] > s_max ? w->h_s[h] : s_max;
    for (int j = 0; j < s_max; j++) {
        if (H) {
            OSCAR_CUBLAS_CHECK(dgemm(w, false, false, D, D, D, E, D, dd, Lo, D, dd, w->ZUT, D, dd));
            OSCAR_CUBLAS_CHECK(dgemm(w, false, false, D, D, D, Lo, D, dd, E, D, dd, w->tmp2, D, dd));
        }
        OSCAR_CUBLAS_CHECK(dgemm(w, false, false, D, D, D, E, D, dd, E, D, dd, w->tmp, D, dd));
        square_kernel<<<blocks(ne), 256, 0, w->stream>>>(w->tmp, w->ZUT, w->tmp2, w->s, j, D, ne, E, H ? Lo : NULL);
        OSCAR_CUDA_CHECK_LAUNCH();
    }
    return OSCAR_OK;
}

enum oscar_status osc_optr_expm_rotation(struct osc_optr_expm_ws * w, const double * Rb, const double * A, float * R) {
    const int D = w->D;
    const long long dd = (long long) D * D, ne = (long long) w->n * dd;
    xpose_skew_kernel<<<blocks(ne), 256, 0, w->stream>>>(A, D, ne, w->X, 0);
    OSCAR_CUDA_CHECK_LAUNCH();
    enum oscar_status st = expm_core(w, w->X, NULL, w->E, NULL);
    if (st != OSCAR_OK) return st;
    OSCAR_CUBLAS_CHECK(dgemm(w, false, false, D, D, D, Rb, D, dd, w->E, D, dd, w->R64, D, dd));
    to_f32_kernel<<<blocks(ne), 256, 0, w->stream>>>(w->R64, ne, R);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

enum oscar_status osc_optr_expm_grad_a(struct osc_optr_expm_ws * w, const double * Rb, const double * A,
                                       const double * dR, double * gA) {
    const int D = w->D;
    const long long dd = (long long) D * D, ne = (long long) w->n * dd;
    // R = Rb·E: dE = Rbᵀ·dR; the gradient of <dE, expm(S)> wrt S is L(Sᵀ, dE); S = A − Aᵀ: dA = dS − dSᵀ
    OSCAR_CUBLAS_CHECK(dgemm(w, true, false, D, D, D, Rb, D, dd, dR, D, dd, w->dE, D, dd));
    xpose_skew_kernel<<<blocks(ne), 256, 0, w->stream>>>(A, D, ne, w->X, 1);
    OSCAR_CUDA_CHECK_LAUNCH();
    enum oscar_status st = expm_core(w, w->X, w->dE, w->E, w->R64);   // R64 holds dS here
    if (st != OSCAR_OK) return st;
    anti_kernel<<<blocks(ne), 256, 0, w->stream>>>(w->R64, D, ne, gA);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}

enum oscar_status osc_optr_dev_adam(double * A, double * m, double * v, const double * gA, int64_t n_elem, double n_heads,
                                    double lr, double bc1, double bc2, cudaStream_t stream) {
    adam_kernel<<<blocks(n_elem), 256, 0, stream>>>(A, m, v, gA, n_elem, n_heads, lr, bc1, bc2);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}
