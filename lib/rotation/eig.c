// eig.c - symmetric eigendecomposition for the rotation fit (method.md §3).
//
// fp64 LAPACKE_dsyevd on the symmetrised input: eigenvalues ascending,
// eigenvectors in the columns of U, with LAPACK's signs (the fits make them
// canonical afterwards: signs.c); refuses non-finite input.
//
// D = head_dim.
#include "rotation/fit.h"
#include "util/blas.h"

#include <lapacke.h>
#include <math.h>
#include <stdlib.h>

enum oscar_status oscar_fit_eigh(int32_t D, const double * sigma, double * evals, double * u) {
    if (D < 1 || D > 4096) return osc_error(OSCAR_ERR_INVALID, "eigh: bad dimension %d", (int) D);
    const size_t n = (size_t) D;
    for (size_t i = 0; i < n * n; i++) {
        if (!isfinite(sigma[i])) {
            return osc_error(OSCAR_ERR_NUMERIC, "eigh: non-finite covariance entry (%zu, %zu)", i / n, i % n);
        }
    }
    // (Σ + Σᵀ)/2 into u; dsyevd overwrites it with the eigenvectors
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n; j++) u[i * n + j] = 0.5 * (sigma[i * n + j] + sigma[j * n + i]);
    }
    osc_blas_init(); // dsyevd's inner BLAS blocking must not depend on the thread count
    lapack_int info = LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'U', (lapack_int) D, u, (lapack_int) D, evals);
    if (info != 0) {
        return osc_error(OSCAR_ERR_NUMERIC, "eigh: LAPACKE_dsyevd failed (info %d) on a %dx%d matrix", (int) info,
                         (int) D, (int) D);
    }
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(evals[i])) return osc_error(OSCAR_ERR_NUMERIC, "eigh: non-finite eigenvalue %zu", i);
    }
    return OSCAR_OK;
}
