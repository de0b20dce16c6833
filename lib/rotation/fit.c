// fit.c - from a covariance to a stored rotation: eigh, canonical signs,
// composition, fp32 cast, orthogonality report; per layer or per KV head of an
// accumulator.
//
// Refuses unfinished accumulators and non-power-of-two head_dim for the
// compositions that need H or P (messages name the layer and head).
//
// L = n_layer, Hkv, D = head_dim.
#include "rotation/fit.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

// max |RRᵀ − I|. Each entry sums k = 0 .. D-1 in order in fp64 (the plain loop's bits); the
// Gram is symmetric (a·b = b·a exactly), so only j >= i is summed, eight entries side by side
// from a transposed fp64 copy: independent sums the compiler can keep in vector registers.
double oscar_fit_orth_error_f32(int32_t D, const float * r) {
    enum { W = 8 };
    const size_t n = (size_t) D, nw = (n + W - 1) / W * W;
    double * t = calloc(n * nw, sizeof *t);   // t[k·nw + j] = r[j][k], zero past D
    double worst = 0.0;
    if (!t) {   // the same sums, one at a time
        for (size_t i = 0; i < n; i++)
            for (size_t j = i; j < n; j++) {
                double acc = 0.0;
                for (size_t k = 0; k < n; k++) acc += (double) r[i * n + k] * (double) r[j * n + k];
                const double e = fabs(acc - (i == j ? 1.0 : 0.0));
                worst = e > worst ? e : worst;
            }
        return worst;
    }
    for (size_t j = 0; j < n; j++)
        for (size_t k = 0; k < n; k++) t[k * nw + j] = (double) r[j * n + k];
    for (size_t i = 0; i < n; i++) {
        for (size_t j0 = i / W * W; j0 < n; j0 += W) {
            double acc[W] = {0};
            for (size_t k = 0; k < n; k++) {
                const double a = (double) r[i * n + k], * b = t + k * nw + j0;
                for (int u = 0; u < W; u++) acc[u] += a * b[u];
            }
            for (size_t u = 0; u < W && j0 + u < n; u++) {
                if (j0 + u < i) continue;
                const double e = fabs(acc[u] - (i == j0 + u ? 1.0 : 0.0));
                worst = e > worst ? e : worst;
            }
        }
    }
    free(t);
    return worst;
}

// Same as oscar_fit_rotation with caller-provided fp64 scratch [2, D, D] + [D];
// u_out / lam_out (may be NULL) get the canonical basis.
static enum oscar_status fit_one(int32_t D, const double * sigma, enum oscar_composition c, float * r_out,
                                 float * eig_out, struct oscar_fit_report * rep, double * scr, double * u_out,
                                 double * lam_out) {
    const size_t dd = (size_t) D * (size_t) D;
    double * u = scr, * r = u + dd, * ev = r + dd;
    enum oscar_status st = oscar_fit_eigh(D, sigma, ev, u);
    if (st != OSCAR_OK) return st;
    oscar_fit_canonical_signs(D, u);
    if (u_out) memcpy(u_out, u, dd * sizeof *u);
    if (lam_out) memcpy(lam_out, ev, (size_t) D * sizeof *ev);
    int32_t ties = 0;
    st = oscar_fit_compose(c, D, u, ev, r, &ties);
    if (st != OSCAR_OK) return st;
    for (size_t i = 0; i < dd; i++) r_out[i] = (float) r[i];
    for (int32_t i = 0; i < D; i++) eig_out[i] = (float) ev[i];
    if (rep) {
        rep->orth_err = oscar_fit_orth_error_f32(D, r_out);
        rep->eig_min = ev[0];
        rep->eig_max = ev[D - 1];
        rep->n_ties = ties;
    }
    return OSCAR_OK;
}

enum oscar_status oscar_fit_rotation_basis(int32_t D, const double * sigma, enum oscar_composition c, float * r_out,
                                           float * eig_out, struct oscar_fit_report * rep, double * u_out,
                                           double * lam_out) {
    if (D < 1 || D > 4096) return osc_error(OSCAR_ERR_INVALID, "fit: bad dimension %d", (int) D);
    double * scr = malloc((2 * (size_t) D * (size_t) D + (size_t) D) * sizeof *scr);
    if (!scr) return osc_error(OSCAR_ERR_NOMEM, "fit: out of memory");
    struct oscar_fit_report local;
    enum oscar_status st = fit_one(D, sigma, c, r_out, eig_out, rep ? rep : &local, scr, u_out, lam_out);
    free(scr);
    return st;
}

enum oscar_status oscar_fit_rotation(int32_t D, const double * sigma, enum oscar_composition c, float * r_out,
                                     float * eig_out, struct oscar_fit_report * rep) {
    struct oscar_fit_report local;
    enum oscar_status st = oscar_fit_rotation_basis(D, sigma, c, r_out, eig_out, rep ? rep : &local, NULL, NULL);
    if (st == OSCAR_OK && (rep ? rep : &local)->n_ties > 0 && c != OSCAR_COMP_PLAIN) {
        osc_warn("fit: %d exactly tied eigenvalues; P_br uses the tie-break (descending λ, ascending index)",
                 (int) (rep ? rep : &local)->n_ties);
    }
    return st;
}

enum oscar_status oscar_fit_hadamard(int32_t D, float * r_out, float * eig_out) {
    if (D < 1 || D > 4096 || (D & (D - 1)) != 0) {
        return osc_error(OSCAR_ERR_INVALID, "hadamard: head_dim %d is not a power of two", (int) D);
    }
    const size_t dd = (size_t) D * (size_t) D;
    double * u = calloc(dd, sizeof *u), * r = malloc(dd * sizeof *r), * ev = malloc((size_t) D * sizeof *ev);
    enum oscar_status st = OSCAR_OK;
    if (!u || !r || !ev) {
        st = osc_error(OSCAR_ERR_NOMEM, "hadamard: out of memory");
        goto out;
    }
    for (int32_t i = 0; i < D; i++) {
        u[(size_t) i * D + i] = 1.0;
        ev[i] = 1.0;
    }
    st = oscar_fit_compose(OSCAR_COMP_R_H, D, u, ev, r, NULL); // I·H
    if (st != OSCAR_OK) goto out;
    for (size_t i = 0; i < dd; i++) r_out[i] = (float) r[i];
    for (int32_t i = 0; i < D; i++) eig_out[i] = 1.0f;
out:
    free(u); free(r); free(ev);
    return st;
}

enum oscar_status oscar_fit_stats(const struct oscar_stats * s, enum oscar_stats_kind kind,
                                  enum oscar_rotation_grouping grouping, enum oscar_composition c,
                                  float * r_out, float * eig_out, struct oscar_fit_report * rep) {
    return oscar_fit_stats_basis(s, kind, grouping, c, r_out, eig_out, rep, NULL, NULL);
}

// Layers [l0, l1) of the accumulator; outputs indexed from layer l0.
static enum oscar_status fit_layers(const struct oscar_stats * s, enum oscar_stats_kind kind,
                                    enum oscar_rotation_grouping grouping, enum oscar_composition c, int32_t l0,
                                    int32_t l1, float * r_out, float * eig_out, struct oscar_fit_report * rep,
                                    double * u_out, double * lam_out) {
    const struct oscar_stats_params p = oscar_stats_get_params(s);
    const int32_t D = p.head_dim, per = grouping == OSCAR_GROUP_HEAD ? p.n_head_kv : 1;
    if (l0 < 0 || l1 > p.n_layer || l0 >= l1)
        return osc_error(OSCAR_ERR_INVALID, "fit: layers %d..%d outside the accumulator's %d", (int) l0, (int) l1 - 1,
                         (int) p.n_layer);
    const int32_t n_fit = (l1 - l0) * per;
    const size_t dd = (size_t) D * (size_t) D;
    // validate once (sigma fails on unfinished passes / missing kinds) before fanning out
    double * probe = malloc(dd * sizeof *probe);
    if (!probe) return osc_error(OSCAR_ERR_NOMEM, "fit: out of memory");
    enum oscar_status st = oscar_stats_sigma(s, kind, l0, per > 1 ? 0 : -1, probe);
    free(probe);
    if (st != OSCAR_OK) return st;
    const int32_t nt = p.n_threads > 0 ? p.n_threads : omp_get_max_threads();
    const size_t per_thread = 3 * dd + (size_t) D;
    double * scr = malloc((size_t) nt * per_thread * sizeof *scr);
    if (!scr) return osc_error(OSCAR_ERR_NOMEM, "fit: out of memory");
    int32_t first_bad = -1;
    enum oscar_status bad = OSCAR_OK;
    // oscar_stats_sigma uses the accumulator's scratch: compute the matrices
    // serially, then fit in parallel (each fit owns its outputs)
    double * sig = malloc((size_t) n_fit * dd * sizeof *sig);
    if (!sig) {
        free(scr);
        return osc_error(OSCAR_ERR_NOMEM, "fit: out of memory for %d matrices", (int) n_fit);
    }
    for (int32_t i = 0; i < n_fit && st == OSCAR_OK; i++) {
        st = oscar_stats_sigma(s, kind, l0 + i / per, per > 1 ? i % per : -1, sig + (size_t) i * dd);
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int32_t i = 0; i < (st == OSCAR_OK ? n_fit : 0); i++) {
        double * ts = scr + (size_t) omp_get_thread_num() * per_thread;
        struct oscar_fit_report local;
        enum oscar_status e = fit_one(D, sig + (size_t) i * dd, c, r_out + (size_t) i * dd,
                                      eig_out + (size_t) i * (size_t) D, rep ? &rep[i] : &local, ts + dd,
                                      u_out ? u_out + (size_t) i * dd : NULL,
                                      lam_out ? lam_out + (size_t) i * (size_t) D : NULL);
        if (e != OSCAR_OK) {
#pragma omp critical
            if (first_bad < 0 || i < first_bad) {
                first_bad = i;
                bad = e;
            }
        }
    }
    free(sig);
    free(scr);
    if (st != OSCAR_OK) return st;
    if (first_bad >= 0) {
        return osc_error(bad, "fit: layer %d%s%d failed", (int) (l0 + first_bad / per), per > 1 ? ", KV head " : "",
                         per > 1 ? (int) (first_bad % per) : 0);
    }
    for (int32_t i = 0; rep && i < n_fit; i++) {
        if (rep[i].n_ties > 0 && c != OSCAR_COMP_PLAIN) {
            osc_warn("fit: layer %d head %d: %d exactly tied eigenvalues; P_br uses the tie-break", (int) (l0 + i / per),
                     (int) (per > 1 ? i % per : -1), (int) rep[i].n_ties);
        }
    }
    return OSCAR_OK;
}

enum oscar_status oscar_fit_stats_basis(const struct oscar_stats * s, enum oscar_stats_kind kind,
                                        enum oscar_rotation_grouping grouping, enum oscar_composition c,
                                        float * r_out, float * eig_out, struct oscar_fit_report * rep,
                                        double * u_out, double * lam_out) {
    return fit_layers(s, kind, grouping, c, 0, oscar_stats_get_params(s).n_layer, r_out, eig_out, rep, u_out, lam_out);
}

enum oscar_status oscar_fit_stats_layer_basis(const struct oscar_stats * s, enum oscar_stats_kind kind,
                                              enum oscar_rotation_grouping grouping, enum oscar_composition c,
                                              int32_t layer, float * r_out, float * eig_out,
                                              struct oscar_fit_report * rep, double * u_out, double * lam_out) {
    return fit_layers(s, kind, grouping, c, layer, layer + 1, r_out, eig_out, rep, u_out, lam_out);
}
