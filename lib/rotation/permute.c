// permute.c - bit reversal and the P_br permutation built from eigenvalues
// (method.md §5): s = argsort by descending lambda (ties: ascending index),
// perm[bitrev(i)] = s[i], P = I[:, perm], (x . P)[j] = x[perm[j]].
// Refuses non-power-of-two sizes and NaN eigenvalues.
#include "rotation/rotation.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint32_t oscar_bitrev(uint32_t i, int32_t log2n) {
    uint32_t r = 0;
    for (int32_t b = 0; b < log2n; b++) r |= ((i >> b) & 1u) << (log2n - 1 - b);
    return r;
}

struct eig_entry {
    double  lambda;
    int32_t index;
};

static int cmp_desc(const void * a, const void * b) {
    const struct eig_entry * x = a, * y = b;
    if (x->lambda != y->lambda) return x->lambda > y->lambda ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

enum oscar_status oscar_pbr_perm(const double * lambda, int32_t D, int32_t * perm, int32_t * n_ties) {
    if (!oscar_is_pow2(D)) return osc_error(OSCAR_ERR_INVALID, "P_br: size %d is not a power of two", D);
    for (int32_t i = 0; i < D; i++) {
        if (isnan(lambda[i])) return osc_error(OSCAR_ERR_NUMERIC, "P_br: eigenvalue %d is NaN", i);
    }
    struct eig_entry * s = malloc((size_t) D * sizeof *s);
    if (!s) return osc_error(OSCAR_ERR_NOMEM, "P_br: %d entries", D);
    for (int32_t i = 0; i < D; i++) s[i] = (struct eig_entry) { lambda[i], i };
    qsort(s, (size_t) D, sizeof *s, cmp_desc);
    int32_t ties = 0, lg = oscar_log2i(D);
    for (int32_t i = 0; i < D; i++) {
        perm[oscar_bitrev((uint32_t) i, lg)] = s[i].index;
        if (i > 0 && s[i].lambda == s[i - 1].lambda) ties++;
    }
    free(s);
    if (n_ties) *n_ties = ties;
    return OSCAR_OK;
}

void oscar_perm_matrix(const int32_t * perm, int32_t D, double * P) {
    memset(P, 0, (size_t) D * (size_t) D * sizeof *P);
    for (int32_t j = 0; j < D; j++) P[(int64_t) perm[j] * D + j] = 1.0;
}

void oscar_perm_apply_rows(const int32_t * perm, int32_t D, const float * x, int64_t n_rows, float * y) {
    for (int64_t r = 0; r < n_rows; r++) {
        for (int32_t j = 0; j < D; j++) y[r * D + j] = x[r * D + perm[j]];
    }
}
