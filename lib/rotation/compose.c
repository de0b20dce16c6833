// compose.c - the nine compositions of U, H and P_br (method.md §5).
//
// Factors are multiplied in the order the table names them, in fp64.
// It refuses non-power-of-two D for anything that involves H or P.
//
// H, P_br and the products come from the shared primitives in
// lib/rotation/hadamard.c and permute.c / apply.c.
//
// D = head_dim.
#include "rotation/fit.h"
#include "rotation/rotation.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char * const comp_names[OSCAR_COMP_COUNT] = {
    "plain", "pbr", "br", "br_h128", "r_h", "h_pbr", "h_r_pbr", "h_pbr_r", "r_h_pbr",
};

const char * oscar_composition_name(enum oscar_composition c) {
    return (unsigned) c < OSCAR_COMP_COUNT ? comp_names[c] : "unknown";
}

enum oscar_status oscar_composition_parse(const char * name, enum oscar_composition * out) {
    for (int i = 0; i < OSCAR_COMP_COUNT; i++) {
        if (strcmp(name, comp_names[i]) == 0) {
            *out = (enum oscar_composition) i;
            return OSCAR_OK;
        }
    }
    return osc_error(OSCAR_ERR_INVALID, "unknown composition '%s' (plain, pbr, br, br_h128, r_h, h_pbr, "
                     "h_r_pbr, h_pbr_r, r_h_pbr)", name);
}

static bool is_pow2(int32_t n) { return n > 0 && (n & (n - 1)) == 0; }

// The shared primitive (lib/rotation/permute.c) with the fit's argument order.
enum oscar_status oscar_fit_pbr_perm(int32_t D, const double * evals, int32_t * perm, int32_t * n_ties) {
    if (!is_pow2(D)) return osc_error(OSCAR_ERR_INVALID, "P_br: head_dim %d is not a power of two", (int) D);
    return oscar_pbr_perm(evals, D, perm, n_ties);
}

// c = a · b (D×D, fp64)
static void mm(int32_t D, const double * a, const double * b, double * c) {
    oscar_matmul_f64(a, b, D, c);
}

// c = a · P: (a·P)[:, j] = a[:, perm[j]]
static void mul_p(int32_t D, const double * a, const int32_t * perm, double * c) {
    for (size_t i = 0; i < (size_t) D; i++) {
        for (size_t j = 0; j < (size_t) D; j++) c[i * (size_t) D + j] = a[i * (size_t) D + (size_t) perm[j]];
    }
}

enum oscar_status oscar_fit_compose(enum oscar_composition c, int32_t D, const double * u, const double * evals,
                                    double * r, int32_t * n_ties) {
    enum oscar_status st = OSCAR_OK;
    const size_t dd = (size_t) D * (size_t) D;
    if (n_ties) *n_ties = 0;
    if ((unsigned) c >= OSCAR_COMP_COUNT) return osc_error(OSCAR_ERR_INVALID, "compose: bad composition %d", (int) c);
    if (c == OSCAR_COMP_PLAIN) {
        memcpy(r, u, dd * sizeof *r);
        return OSCAR_OK;
    }
    if (!is_pow2(D)) {
        return osc_error(OSCAR_ERR_INVALID, "compose: %s needs a power-of-two head_dim, got %d",
                         oscar_composition_name(c), (int) D);
    }
    double * h = malloc(dd * sizeof *h), * t = malloc(dd * sizeof *t), * id = calloc(dd, sizeof *id);
    int32_t * perm = malloc((size_t) D * sizeof *perm);
    if (!h || !t || !id || !perm) {
        st = osc_error(OSCAR_ERR_NOMEM, "compose: out of memory");
        goto out;
    }
    st = oscar_hadamard_matrix(D, h);
    if (st != OSCAR_OK) goto out;
    for (size_t i = 0; i < (size_t) D; i++) id[i * (size_t) D + i] = 1.0;
    st = oscar_fit_pbr_perm(D, evals, perm, n_ties);
    if (st != OSCAR_OK) goto out;
    switch (c) {
    case OSCAR_COMP_PBR:     mul_p(D, id, perm, r); break;
    case OSCAR_COMP_BR:      mul_p(D, u, perm, r); break;
    case OSCAR_COMP_BR_H128: mul_p(D, u, perm, t); mm(D, t, h, r); break;
    case OSCAR_COMP_R_H:     mm(D, u, h, r); break;
    case OSCAR_COMP_H_PBR:   mul_p(D, h, perm, r); break;
    case OSCAR_COMP_H_R_PBR: mm(D, h, u, t); mul_p(D, t, perm, r); break;
    case OSCAR_COMP_H_PBR_R: mul_p(D, h, perm, t); mm(D, t, u, r); break;
    case OSCAR_COMP_R_H_PBR: mm(D, u, h, t); mul_p(D, t, perm, r); break;
    case OSCAR_COMP_PLAIN:   break; // handled above
    }
out:
    free(h); free(t); free(id); free(perm);
    return st;
}
