// signs.c - the sign of each eigenvector, a free choice of eigh (method.md §3,
// §22 item 7): a canonical rule that does not depend on what LAPACK returned,
// and sign vectors applied to U before the composition (the sign search of
// lib/calibrate/signs.c flips them).
//
// D = head_dim; u [D, D] row-major, eigenvectors in the columns.
#include "rotation/fit.h"

#include <math.h>

void oscar_fit_canonical_signs(int32_t D, double * u) {
    const size_t n = (size_t) D;
    for (size_t j = 0; j < n; j++) {
        size_t best = 0;   // strictly larger wins: ties go to the lowest row index
        for (size_t i = 1; i < n; i++)
            if (fabs(u[i * n + j]) > fabs(u[best * n + j])) best = i;
        if (u[best * n + j] < 0.0)
            for (size_t i = 0; i < n; i++) u[i * n + j] = -u[i * n + j];
    }
}

void oscar_fit_apply_signs(int32_t D, const double * u, const int8_t * sign, double * out) {
    const size_t n = (size_t) D;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) out[i * n + j] = sign[j] < 0 ? -u[i * n + j] : u[i * n + j];
}

bool oscar_composition_uses_u(enum oscar_composition c) {
    return c != OSCAR_COMP_PBR && c != OSCAR_COMP_H_PBR;
}
