// rotation.h - rotation primitives: Sylvester Hadamard, FWHT, bit-reversal
// permutation, block-diagonal Hadamard, applying D x D rotations to rows.
//
// Orientation (method.md §0.3): rotations act on ROW vectors, x_rot = x . R,
// inverse x = x_rot . R^T. Matrices are row-major [D, D]: R[i*D + j].
// Eigen-decomposition and compositions (U.H.P, ...) live in other files of
// this module; this header holds the data-independent building blocks.
//
// Usage:
//   double H[128*128]; oscar_hadamard_matrix(128, H);      // H = H^T = H^-1
//   int32_t perm[128]; oscar_pbr_perm(lambda, 128, perm, &n_ties);
//   oscar_rotation_apply_rows(R, 128, k, T * Hkv, k_rot, false);   // k_rot = k . R
#ifndef OSCAR_ROTATION_H
#define OSCAR_ROTATION_H

#include <stdbool.h>
#include <stdint.h>

#include "util/error.h"

bool oscar_is_pow2(int64_t n);
// log2 of a power of two n >= 1 (programmer error otherwise).
int32_t oscar_log2i(int64_t n);

// ---- Hadamard (method.md §4) --------------------------------------------------
// H[i][j] = (-1)^popcount(i & j) / sqrt(n), natural (Sylvester) order, built in fp64.
// n must be a power of two (OSCAR_ERR_INVALID otherwise). H [n, n].
enum oscar_status oscar_hadamard_matrix(int32_t n, double * H);
enum oscar_status oscar_hadamard_matrix_f32(int32_t n, float * H);   // fp64 built, cast

// In-place normalized fast Walsh-Hadamard transform: log2(n) butterfly stages
// (s = 0, 1, ...; elements i and i ^ 2^s -> (lower + upper, lower - upper)),
// then one overall factor 1/sqrt(n). Equals x . H. n a power of two.
void oscar_fwht_f32(float * x, int32_t n);
void oscar_fwht_f64(double * x, int32_t n);
// Block-diagonal Hadamard diag(H_b, ..., H_b) applied to every row of x [n_rows, D]
// in place (b a power of two dividing D). Self-inverse.
enum oscar_status oscar_fwht_block_rows(float * x, int64_t n_rows, int32_t D, int32_t b);
// The dense block-diagonal matrix diag(H_b, ...) [D, D] in fp64.
enum oscar_status oscar_block_hadamard_matrix(int32_t D, int32_t b, double * M);

// ---- bit-reversal permutation (method.md §5) ---------------------------------
// Reverses the low log2n bits of i.
uint32_t oscar_bitrev(uint32_t i, int32_t log2n);
// P_br from eigenvalues (any order, e.g. eigh ascending): s = argsort by descending
// lambda, ties by ascending index; perm[bitrev(i)] = s[i]. Then (x . P)[j] = x[perm[j]].
// n_ties (may be NULL) receives the number of adjacent equal eigenvalues in s.
// D must be a power of two.
enum oscar_status oscar_pbr_perm(const double * lambda, int32_t D, int32_t * perm,
                                 int32_t * n_ties);
// P = I[:, perm] as a dense [D, D] matrix: P[perm[j]][j] = 1.
void oscar_perm_matrix(const int32_t * perm, int32_t D, double * P);
// y[j] = x[perm[j]] for each row of x [n_rows, D] (y = x . P); x and y must not alias.
void oscar_perm_apply_rows(const int32_t * perm, int32_t D, const float * x,
                           int64_t n_rows, float * y);

// ---- applying rotations --------------------------------------------------------
// y [n, D] = x [n, D] . R (transpose = false) or x . R^T (transpose = true),
// through util/blas (fp32 / fp64). x and y must not alias.
void oscar_rotation_apply_rows(const float * R, int32_t D, const float * x, int64_t n_rows,
                               float * y, bool transpose);
void oscar_rotation_apply_rows_f64(const double * R, int32_t D, const double * x,
                                   int64_t n_rows, double * y, bool transpose);
// max |R . R^T - I| over all entries (orthogonality check), fp64.
double oscar_rotation_orth_error(const double * R, int32_t D);
// C [D, D] = A [D, D] . B [D, D] in fp64 (compositions such as U.H.P).
void oscar_matmul_f64(const double * A, const double * B, int32_t D, double * C);

#endif
