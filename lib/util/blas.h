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

// C[M, N] = alpha · op(A) · op(B) + beta · C
void osc_sgemm(int nt, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float * A,
               int lda, const float * B, int ldb, float beta, float * C, int ldc);
void osc_dgemm(int nt, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, double alpha, const double * A,
               int lda, const double * B, int ldb, double beta, double * C, int ldc);

#endif
