// apply.c - applying D x D rotations to batches of row vectors with OpenBLAS
// (x . R or x . R^T), plus orthogonality checks and fp64 products used for
// compositions. Row-major everywhere. Refuses nothing (shapes are the caller's).
#include "rotation/rotation.h"

#include "util/blas.h"
#include <math.h>

void oscar_rotation_apply_rows(const float * R, int32_t D, const float * x, int64_t n_rows,
                               float * y, bool transpose) {
    if (n_rows <= 0) return;
    // y [n, D] = x [n, D] . op(R) [D, D]
    osc_sgemm(0, CblasNoTrans, transpose ? CblasTrans : CblasNoTrans, (int) n_rows, D, D,
                1.0f, x, D, R, D, 0.0f, y, D);
}

void oscar_rotation_apply_rows_f64(const double * R, int32_t D, const double * x, int64_t n_rows,
                                   double * y, bool transpose) {
    if (n_rows <= 0) return;
    osc_dgemm(0, CblasNoTrans, transpose ? CblasTrans : CblasNoTrans, (int) n_rows, D, D,
                1.0, x, D, R, D, 0.0, y, D);
}

void oscar_matmul_f64(const double * A, const double * B, int32_t D, double * C) {
    osc_dgemm(1, CblasNoTrans, CblasNoTrans, D, D, D, 1.0, A, D, B, D, 0.0, C, D);
}

double oscar_rotation_orth_error(const double * R, int32_t D) {
    // Plain loops (fp64, fixed order) so the result is deterministic across BLAS builds.
    double worst = 0.0;
    for (int32_t i = 0; i < D; i++) {
        for (int32_t j = 0; j < D; j++) {
            double s = 0.0;
            for (int32_t k = 0; k < D; k++) s += R[(int64_t) i * D + k] * R[(int64_t) j * D + k];
            double e = fabs(s - (i == j ? 1.0 : 0.0));
            if (e > worst) worst = e;
        }
    }
    return worst;
}
