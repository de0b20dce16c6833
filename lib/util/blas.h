// blas.h - OpenBLAS with the work partition owned by oscar, so that results
// do not depend on the thread count. OpenBLAS is pinned to one thread: its own
// threading splits a call by the thread count, and on some CPUs (AMD Zen) the
// edge tiles of such a split take micro-kernels that round differently. Here
// a product is cut into tiles whose shape depends only on the matrix sizes;
// OpenMP threads take whole tiles, and each tile is one single-threaded BLAS
// call. Every other BLAS or LAPACK call in oscar runs inside work items that
// one thread owns, after osc_blas_init().
//
// Row-major throughout. nt <= 0 means omp_get_max_threads().
#ifndef OSCAR_UTIL_BLAS_H
#define OSCAR_UTIL_BLAS_H

#include <cblas.h>

// Pins OpenBLAS to one thread (cheap when it already is).
void osc_blas_init(void);

// OpenBLAS picks its kernels by CPU model when it is loaded. The 0.3.21 of Debian 12 does not
// know recent Xeons (Sapphire / Emerald Rapids under KVM: family 6 model 207) and falls back to
// its SSE3 "Prescott" kernels, 3-4x slower than the AVX2 ones on the same core. It reads
// OPENBLAS_CORETYPE only at load, so when it runs a pre-AVX2 kernel set on a CPU with AVX2 and
// FMA, and the variable is unset, this sets it from the CPU's features (SkylakeX with AVX-512,
// else Haswell) and runs the program again (execv of /proc/self/exe with argv). Returns
// otherwise (also if the exec fails). Call first thing in main, before any thread starts.
void osc_blas_select_kernels(char ** argv);

// The column width of a product's tiles. Column j of C depends only on column j of op(B) and on
// the tile holding it, so a product over columns [lo, hi) of a wider one, lo a multiple of
// OSC_GEMM_TILE_N and hi a multiple of it or the last column, gives those columns the same bits
// as the whole product (a data-parallel clip search computes its candidates' columns alone).
#define OSC_GEMM_TILE_N 512

// C[M, N] = alpha · op(A) · op(B) + beta · C
void osc_sgemm(int nt, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float * A,
               int lda, const float * B, int ldb, float beta, float * C, int ldc);
void osc_dgemm(int nt, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, double alpha, const double * A,
               int lda, const double * B, int ldb, double beta, double * C, int ldc);

#endif
