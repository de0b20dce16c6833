// fit.h - rotation fit: eigendecomposition of a covariance and the nine
// compositions of method.md §5, per layer or per KV head.
//
// Conventions (method.md §0.3, §3): row vectors, x_rot = x·R. Matrices are
// row-major [D, D]. eigh: fp64 LAPACKE_dsyevd on the symmetrised matrix,
// eigenvalues ascending, eigenvectors in the COLUMNS of U (U[i*D + j] is
// component i of eigenvector j), Σ = U·diag(λ)·Uᵀ. oscar_fit_eigh returns
// LAPACK's signs; the fits (oscar_fit_rotation, oscar_fit_stats) make them
// canonical first (oscar_fit_canonical_signs), so R does not depend on the
// LAPACK build (method.md §22 item 7; the reference keeps MKL's signs).
// P_br: s = argsort of λ descending, ties by ascending index; perm[bitrev(i)] = s[i];
// P = I[:, perm], so (x·P)[j] = x[perm[j]]. H: normalised Sylvester Hadamard.
//
// Usage:
//   double sigma[D*D]; oscar_stats_sigma(st, OSCAR_STATS_QQT, l, -1, sigma);
//   float R[D*D], eig[D]; struct oscar_fit_report rep;
//   oscar_fit_rotation(D, sigma, OSCAR_COMP_R_H_PBR, R, eig, &rep);
#ifndef OSCAR_ROTATION_FIT_H
#define OSCAR_ROTATION_FIT_H

#include <stdbool.h>
#include <stdint.h>

#include "stats/stats.h"
#include "util/error.h"

// Append-only.
enum oscar_composition {
    OSCAR_COMP_PLAIN = 0, // U
    OSCAR_COMP_PBR,       // P
    OSCAR_COMP_BR,        // U·P
    OSCAR_COMP_BR_H128,   // U·P·H
    OSCAR_COMP_R_H,       // U·H
    OSCAR_COMP_H_PBR,     // H·P
    OSCAR_COMP_H_R_PBR,   // H·U·P
    OSCAR_COMP_H_PBR_R,   // H·P·U
    OSCAR_COMP_R_H_PBR,   // U·H·P  (the validated reference recipe)
};
#define OSCAR_COMP_COUNT 9

// "plain", "pbr", ..., "r_h_pbr" (the reference --composition names). Never NULL.
const char * oscar_composition_name(enum oscar_composition c);
// Parses a name; OSCAR_ERR_INVALID (message lists the valid names) otherwise.
enum oscar_status oscar_composition_parse(const char * name, enum oscar_composition * out);

// eigh of sigma [D, D] (read only; symmetrised internally): evals [D]
// ascending, u [D, D] eigenvectors in columns. Non-finite input or a LAPACK
// failure gives OSCAR_ERR_NUMERIC. D in 1..4096.
enum oscar_status oscar_fit_eigh(int32_t D, const double * sigma, double * evals, double * u);

// Canonical signs (signs.c): every column of u [D, D] is negated where needed so
// that its largest-magnitude component is positive (exact ties: the lowest row
// index decides). Idempotent, and the same for any input signs.
void oscar_fit_canonical_signs(int32_t D, double * u);
// out = u · diag(sign): column j negated where sign[j] < 0 (exact). out must not alias u.
void oscar_fit_apply_signs(int32_t D, const double * u, const int8_t * sign, double * out);
// Whether composition c contains U at all (pbr and h_pbr do not: signs change nothing).
bool oscar_composition_uses_u(enum oscar_composition c);

// The bit-reversal permutation from eigenvalues in any order (see above).
// n_ties (may be NULL) gets the number of exactly equal adjacent eigenvalues
// in the sorted order. D must be a power of two (OSCAR_ERR_INVALID otherwise).
enum oscar_status oscar_fit_pbr_perm(int32_t D, const double * evals, int32_t * perm, int32_t * n_ties);

// r [D, D] = the composition of u [D, D] (columns = eigenvectors) and evals [D].
// Compositions using H or P need D a power of two. r must not alias u.
enum oscar_status oscar_fit_compose(enum oscar_composition c, int32_t D, const double * u, const double * evals,
                                    double * r, int32_t * n_ties);

struct oscar_fit_report {
    double  orth_err;  // max |R·Rᵀ − I| of the fp32 R, computed in fp64
    double  eig_min;   // smallest / largest eigenvalue (fp64)
    double  eig_max;
    int32_t n_ties;    // exact eigenvalue ties (they make P_br depend on the tie-break)
};

// Full fit of one matrix: eigh, canonical signs, compose, cast. r_out [D, D] fp32, eig_out [D]
// fp32 ascending (eigh order, not permuted). Warns on ties.
enum oscar_status oscar_fit_rotation(int32_t D, const double * sigma, enum oscar_composition c, float * r_out,
                                     float * eig_out, struct oscar_fit_report * rep);

// The same without the tie warning (the caller reports ties), also keeping the fp64 basis R was
// composed from (u_out [D, D] canonical eigenvectors, lam_out [D]; NULL: not kept), as
// oscar_fit_stats_basis keeps it: the fits of a calibration split over processes.
enum oscar_status oscar_fit_rotation_basis(int32_t D, const double * sigma, enum oscar_composition c, float * r_out,
                                           float * eig_out, struct oscar_fit_report * rep, double * u_out,
                                           double * lam_out);

// max |R·Rᵀ − I| of an fp32 matrix, accumulated in fp64.
double oscar_fit_orth_error_f32(int32_t D, const float * r);

// The data-free "hadamard" objective: r [D, D] = H (fp32), eigenvalues all 1.
enum oscar_status oscar_fit_hadamard(int32_t D, float * r_out, float * eig_out);

enum oscar_rotation_grouping {
    OSCAR_GROUP_LAYER = 0, // one R per layer (reference "source_grouping": "layer")
    OSCAR_GROUP_HEAD  = 1, // one R per (layer, KV head) ("kv_head")
    OSCAR_GROUP_AUTO  = 2, // oscar-calibrate only: LAYER or HEAD per layer by held-out error
                           // (lib/calibrate/grouping.c); the fits here never take it
};

// Fits every layer (and KV head) of one estimator of a finished accumulator.
// r_out: [L, D, D] (layer) or [L, Hkv, D, D] (head); eig_out: [L, D] or
// [L, Hkv, D]; rep (may be NULL): [L] or [L, Hkv]. Layers are fitted in
// parallel (n_threads as in the accumulator); results do not depend on it.
enum oscar_status oscar_fit_stats(const struct oscar_stats * s, enum oscar_stats_kind kind,
                                  enum oscar_rotation_grouping grouping, enum oscar_composition c,
                                  float * r_out, float * eig_out, struct oscar_fit_report * rep);
// The same, also keeping the fp64 basis each R was composed from (NULL: not kept):
// u_out [L·n_rot, D, D] the canonical eigenvectors, lam_out [L·n_rot, D] the fp64
// eigenvalues, so that R can be recomposed with other signs bit for bit.
enum oscar_status oscar_fit_stats_basis(const struct oscar_stats * s, enum oscar_stats_kind kind,
                                        enum oscar_rotation_grouping grouping, enum oscar_composition c,
                                        float * r_out, float * eig_out, struct oscar_fit_report * rep,
                                        double * u_out, double * lam_out);
// The same for layer `layer` alone (its layer-major pass ended, later layers may still be
// accumulating): outputs are that layer's slices, [n_rot, D, D], [n_rot, D], [n_rot].
enum oscar_status oscar_fit_stats_layer_basis(const struct oscar_stats * s, enum oscar_stats_kind kind,
                                              enum oscar_rotation_grouping grouping, enum oscar_composition c,
                                              int32_t layer, float * r_out, float * eig_out,
                                              struct oscar_fit_report * rep, double * u_out, double * lam_out);

#endif
