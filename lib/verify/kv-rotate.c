// kv-rotate.c - KV rows times a D x D rotation: y[j] = Σ_i x[i]·R[i][j] (or
// R[j][i] transposed), the sum over i ascending in fp64, rounded once to fp32.
//
// oscar_kv_rotate_row is the definition, one row in scalar code (the CUDA eval
// kernel reproduces it too). oscar_kv_rotate_rows gives every row the same
// bits with eight rows in vector lanes: each lane runs the same sequence of
// fp64 adds, so a row's result does not depend on how many rows share the call
// (the one-pass simulation rotates a layer's rows in blocks, the token-by-token
// oracle one row at a time; they must agree bitwise). Not a BLAS GEMM: sgemm
// sums in fp32 and in an order that can depend on M, which would change every
// perplexity the verify tables report. A float times a float is exact in fp64,
// so a fused multiply-add rounds like the separate multiply and add.
#include "verify/metrics.h"

#include <string.h>

#if defined(__GNUC__)
#define ROT_INLINE static inline __attribute__((always_inline))
#else
#define ROT_INLINE static inline
#endif

void oscar_kv_rotate_row(const float * R, int32_t D, const float * x, float * y, bool transpose) {
    for (int32_t j = 0; j < D; j++) {
        double s = 0.0;
        if (transpose)
            for (int32_t i = 0; i < D; i++) s += (double) x[i] * (double) R[(size_t) j * D + i];
        else
            for (int32_t i = 0; i < D; i++) s += (double) x[i] * (double) R[(size_t) i * D + j];
        y[j] = (float) s;
    }
}

typedef double v4d __attribute__((vector_size(32)));
enum { RB = 8, JB = 4 };   // rows per block (two vectors of lanes), output columns per pass

// Rows [0, nr) of x (nr <= RB): the columns j0 .. j0 + nj of y. R[i][j] is R[i·ri + j·rj].
ROT_INLINE void rotate_cols(const v4d (*xt)[2], const float * R, size_t ri, size_t rj, int32_t D, int32_t j0,
                            int32_t nj, int32_t nr, float * y, size_t ys) {
    v4d a[JB][2] = {{{0}}};
    for (int32_t i = 0; i < D; i++) {
        const float * rc = R + (size_t) i * ri + (size_t) j0 * rj;
        for (int32_t c = 0; c < JB; c++) {
            const v4d w = (v4d){0} + (double) rc[(size_t) (c < nj ? c : 0) * rj];
            a[c][0] += xt[i][0] * w;
            a[c][1] += xt[i][1] * w;
        }
    }
    for (int32_t c = 0; c < nj; c++)
        for (int32_t r = 0; r < nr; r++) y[(size_t) r * ys + (size_t) (j0 + c)] = (float) a[c][r / 4][r % 4];
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v3", "default"))) // AVX2 where the CPU has it
#endif
void oscar_kv_rotate_rows(const float * R, int32_t D, int64_t n, const float * x, size_t xs, float * y, size_t ys,
                          bool transpose) {
    const size_t ri = transpose ? 1 : (size_t) D, rj = transpose ? (size_t) D : 1;
    v4d xt[OSCAR_MAX_HEAD_DIM][2];   // a block of rows, transposed: xt[i] lanes = x[r][i]
    for (int64_t r0 = 0; r0 < n; r0 += RB) {
        const int32_t nr = (int32_t) (n - r0 < RB ? n - r0 : RB);
        for (int32_t i = 0; i < D; i++)
            for (int32_t r = 0; r < RB; r++)
                xt[i][r / 4][r % 4] = r < nr ? (double) x[(size_t) (r0 + r) * xs + (size_t) i] : 0.0;
        for (int32_t j0 = 0; j0 < D; j0 += JB)
            rotate_cols((const v4d (*)[2]) xt, R, ri, rj, D, j0, D - j0 < JB ? D - j0 : JB, nr,
                        y + (size_t) r0 * ys, ys);
    }
}
