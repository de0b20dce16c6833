// stats-oracle.h - C side of tests/oracle/stats_oracle.py (header-only, for
// tests/unit/test-stats-oracle.c and tests/tools/stats-oracle-check.c).
//
// Regenerates the oracle's synthetic Q/K/V bit for bit (counter splitmix64,
// dyadic values: z @ M is exact in fp64, one rounding to fp32), runs them
// through lib/stats (in the oracle's chunks, both passes) and lib/rotation/fit,
// and compares with the container the oracle wrote.
//
// Tolerances (derivations):
//  - matrices: max|C - N| <= 1e-10 · max|N|. Both sides sum at most
//    n = T·g <= 1280 products exactly formed in fp64 (fp32·fp32 is exact), in
//    different orders: |error| <= n·eps·Σ|terms| ~ 1280 · 1.1e-16 · (Σ|terms|/|Σ|)
//    ~ 1e-13 for these well-conditioned sums; 1e-10 leaves 1000x margin.
//  - eigenvalues: |λ_C - λ_N| <= 1e-10 · λ_max (Weyl: |Δλ| <= ||ΔΣ||₂, plus
//    the O(D·eps·λ_max) backward error of each eigensolver).
//  - eigenvectors: after aligning each column's sign with the oracle's,
//    |u_C - u_N|_max <= tol_j = (||ΔΣ||_F + 2·16·D·eps·λ_max) / gap_j
//    (Davis-Kahan sin θ bound with each solver's backward error, 16·D·eps·||Σ||
//    a generous dsyevd constant), gap_j = distance of λ_j to its neighbours.
//  - compositions from the aligned U: each R column mixes eigenvectors with
//    coefficients of magnitude <= 1 summing in squares to 1, so
//    |ΔR|_max <= √D · max_j tol_j.
// The expected side of the compositions uses the oracle's canonical U, so this
// checks our composition code, not LAPACK's sign choice (method.md §22 item 7).
#ifndef OSCAR_TESTS_STATS_ORACLE_H
#define OSCAR_TESTS_STATS_ORACLE_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rotation/fit.h"
#include "stats/stats.h"
#include "util/fs.h"

// ---- generator (mirrors Gen in stats_oracle.py) ------------------------------------
static uint64_t so_mix64(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
struct so_gen { uint64_t seed, i; };
static uint64_t so_draw(struct so_gen * g) { g->i++; return so_mix64(g->seed + g->i * 0x9E3779B97F4A7C15ull); }
static double so_z(struct so_gen * g) { return (double) ((int64_t) (so_draw(g) >> 40) - (1 << 23)) / (double) (1 << 23); }
static double so_m(struct so_gen * g) { return (double) ((int64_t) (so_draw(g) >> 56) - 128) / 1024.0; }

// x [L][T][H][D] for q, k, v in the oracle's order.
static void so_gen_inputs(uint64_t seed, int L, int T, int Hq, int Hkv, int D, float * q, float * k, float * v) {
    struct so_gen g = {seed, 0};
    double * M = malloc(sizeof(double) * (size_t) D * D), * z = malloc(sizeof(double) * (size_t) T * D);
    for (int l = 0; l < L; l++) {
        float * xs[3] = {q + (size_t) l * T * Hq * D, k + (size_t) l * T * Hkv * D, v + (size_t) l * T * Hkv * D};
        const int Hs[3] = {Hq, Hkv, Hkv};
        for (int x = 0; x < 3; x++) {
            for (int h = 0; h < Hs[x]; h++) {
                for (int i = 0; i < D * D; i++) M[i] = so_m(&g);
                for (int i = 0; i < T * D; i++) z[i] = so_z(&g);
                for (int t = 0; t < T; t++) {
                    for (int b = 0; b < D; b++) {
                        double acc = 0.0; // exact: dyadic with < 53 significant bits
                        for (int a = 0; a < D; a++) acc += z[(size_t) t * D + a] * M[(size_t) a * D + b];
                        xs[x][((size_t) t * Hs[x] + h) * D + b] = (float) acc;
                    }
                }
            }
        }
    }
    free(M);
    free(z);
}

// ---- container reader --------------------------------------------------------------
struct so_array { char name[64]; uint32_t dtype, ndim; uint64_t dims[4]; size_t n; const void * data; };
struct so_fix { struct osc_mapped_file f; uint32_t count; struct so_array a[128]; };

static int so_open(const char * path, struct so_fix * fx) {
    memset(fx, 0, sizeof *fx);
    if (osc_map_file(path, &fx->f) != OSCAR_OK) return -1;
    const uint8_t * p = fx->f.data, * end = p + fx->f.size;
    if (fx->f.size < 12 || memcmp(p, "OSCFIX1", 8) != 0) return -1;
    memcpy(&fx->count, p + 8, 4);
    p += 12;
    if (fx->count > 128) return -1;
    for (uint32_t i = 0; i < fx->count; i++) {
        struct so_array * a = &fx->a[i];
        uint32_t nl;
        if (end - p < 4) return -1;
        memcpy(&nl, p, 4); p += 4;
        if (nl >= sizeof a->name || end - p < (ptrdiff_t) nl + 8) return -1;
        memcpy(a->name, p, nl); p += nl;
        memcpy(&a->dtype, p, 4); memcpy(&a->ndim, p + 4, 4); p += 8;
        if (a->ndim > 4 || end - p < (ptrdiff_t) (8 * a->ndim)) return -1;
        a->n = 1;
        for (uint32_t d = 0; d < a->ndim; d++) { memcpy(&a->dims[d], p, 8); p += 8; a->n *= a->dims[d]; }
        const size_t bytes = a->n * (a->dtype == 1 ? 8 : 4);
        if ((size_t) (end - p) < bytes) return -1;
        a->data = p; p += bytes;
    }
    return 0;
}
static const struct so_array * so_get(const struct so_fix * fx, const char * name) {
    for (uint32_t i = 0; i < fx->count; i++) if (strcmp(fx->a[i].name, name) == 0) return &fx->a[i];
    return NULL;
}
static double so_f64(const struct so_array * a, size_t i) { double x; memcpy(&x, (const uint8_t *) a->data + 8 * i, 8); return x; }
static int32_t so_i32(const struct so_array * a, size_t i) { int32_t x; memcpy(&x, (const uint8_t *) a->data + 4 * i, 4); return x; }

// ---- run + compare -------------------------------------------------------------------
struct so_result { int n_checks, n_fail; double worst_mat, worst_eig, worst_u, worst_comp; };

static void so_note(struct so_result * r, int ok, const char * what, double err, double tol) {
    r->n_checks++;
    if (!ok) {
        r->n_fail++;
        fprintf(stderr, "stats-oracle: FAIL %s: error %.3e > tolerance %.3e\n", what, err, tol);
    }
}

// Feeds the case through oscar_stats with the oracle's chunking (pass 1 and 2).
static struct oscar_stats * so_accumulate(const struct so_fix * fx, int n_threads, enum oscar_status * st) {
    const struct so_array * pa = so_get(fx, "params"), * sl = so_get(fx, "seq_lens"), * cn = so_get(fx, "chunk_nseq");
    const int L = so_i32(pa, 0), Hq = so_i32(pa, 1), Hkv = so_i32(pa, 2), D = so_i32(pa, 3);
    int T = 0;
    for (size_t i = 0; i < sl->n; i++) T += so_i32(sl, i);
    float * q = malloc(sizeof(float) * (size_t) L * T * Hq * D), * k = malloc(sizeof(float) * (size_t) L * T * Hkv * D);
    float * v = malloc(sizeof(float) * (size_t) L * T * Hkv * D);
    so_gen_inputs((uint64_t) so_i32(pa, 4), L, T, Hq, Hkv, D, q, k, v);
    struct oscar_stats_params p = oscar_stats_default_params();
    p.n_layer = L; p.n_head = Hq; p.n_head_kv = Hkv; p.head_dim = D; p.n_threads = n_threads; p.max_tokens = T;
    p.kinds = OSCAR_STATS_KTK | OSCAR_STATS_VTV | OSCAR_STATS_QQT | OSCAR_STATS_SST | OSCAR_STATS_VATT;
    struct oscar_stats * s = NULL;
    *st = oscar_stats_init(&p, &s);
    for (int pass = 0; pass < 2 && *st == OSCAR_OK; pass++) {
        int t0 = 0, seq = 0;
        for (size_t c = 0; c < cn->n && *st == OSCAR_OK; c++) {
            int32_t starts[64] = {0};
            const int ns = so_i32(cn, c);
            for (int i = 0; i < ns; i++) starts[i + 1] = starts[i] + so_i32(sl, (size_t) (seq + i));
            for (int l = 0; l < L && *st == OSCAR_OK; l++) {
                struct oscar_stats_chunk ch = {
                    .layer = l, .n_tokens = starts[ns], .n_seq = ns, .seq_start = starts,
                    .q = q + ((size_t) l * T + t0) * Hq * D, .k = k + ((size_t) l * T + t0) * Hkv * D,
                    .v = v + ((size_t) l * T + t0) * Hkv * D};
                *st = oscar_stats_add(s, &ch);
            }
            t0 += starts[ns];
            seq += ns;
        }
        if (*st == OSCAR_OK) *st = oscar_stats_end_pass(s);
    }
    free(q); free(k); free(v);
    if (*st != OSCAR_OK) { oscar_stats_free(s); s = NULL; }
    return s;
}

static double so_maxabs_diff(const double * a, const struct so_array * b, size_t off, size_t n, double * bmax) {
    double e = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double y = so_f64(b, off + i);
        e = fmax(e, fabs(a[i] - y));
        m = fmax(m, fabs(y));
    }
    *bmax = m;
    return e;
}

static const char * const so_kind_names[5] = {"ktk", "vtv", "qqt", "sst", "vatt"};
static const enum oscar_stats_kind so_kinds[5] = {OSCAR_STATS_KTK, OSCAR_STATS_VTV, OSCAR_STATS_QQT,
                                                   OSCAR_STATS_SST, OSCAR_STATS_VATT};

// Eigen + composition checks of one layer matrix.
static void so_check_fit(const struct so_fix * fx, int kind, int l, int D, const double * sig, double dsig_f,
                         struct so_result * r) {
    char nm[96];
    const size_t dd = (size_t) D * D;
    double * ev = malloc(sizeof(double) * D), * u = malloc(sizeof(double) * dd), * R = malloc(sizeof(double) * dd);
    double * tol = malloc(sizeof(double) * D);
    if (oscar_fit_eigh(D, sig, ev, u) != OSCAR_OK) { so_note(r, 0, "eigh", 1, 0); goto out; }
    snprintf(nm, sizeof nm, "%s.eig", so_kind_names[kind]);
    const struct so_array * e = so_get(fx, nm);
    const double lmax = fmax(fabs(ev[0]), fabs(ev[D - 1]));
    double err = 0.0;
    for (int i = 0; i < D; i++) err = fmax(err, fabs(ev[i] - so_f64(e, (size_t) l * D + i)));
    snprintf(nm, sizeof nm, "%s layer %d eigenvalues", so_kind_names[kind], l);
    so_note(r, err <= 1e-10 * lmax, nm, err, 1e-10 * lmax);
    r->worst_eig = fmax(r->worst_eig, err / lmax);
    snprintf(nm, sizeof nm, "%s.U", so_kind_names[kind]);
    const struct so_array * U = so_get(fx, nm);
    if (!U) goto out;
    double tmax = 0.0;
    for (int j = 0; j < D; j++) {
        double gap = INFINITY, dot = 0.0;
        if (j > 0) gap = fmin(gap, ev[j] - ev[j - 1]);
        if (j < D - 1) gap = fmin(gap, ev[j + 1] - ev[j]);
        tol[j] = (dsig_f + 2.0 * 16.0 * D * DBL_EPSILON * lmax) / gap;
        tmax = fmax(tmax, tol[j]);
        for (int i = 0; i < D; i++) dot += u[(size_t) i * D + j] * so_f64(U, (size_t) l * dd + (size_t) i * D + j);
        const double sgn = dot < 0 ? -1.0 : 1.0;
        double ue = 0.0;
        for (int i = 0; i < D; i++) {
            u[(size_t) i * D + j] *= sgn;
            ue = fmax(ue, fabs(u[(size_t) i * D + j] - so_f64(U, (size_t) l * dd + (size_t) i * D + j)));
        }
        snprintf(nm, sizeof nm, "%s layer %d eigenvector %d", so_kind_names[kind], l, j);
        so_note(r, ue <= tol[j], nm, ue, tol[j]);
        r->worst_u = fmax(r->worst_u, ue);
    }
    for (int c = 0; c < OSCAR_COMP_COUNT; c++) {
        snprintf(nm, sizeof nm, "%s.comp.%s", so_kind_names[kind], oscar_composition_name((enum oscar_composition) c));
        const struct so_array * ca = so_get(fx, nm);
        if (!ca) continue;
        if (oscar_fit_compose((enum oscar_composition) c, D, u, ev, R, NULL) != OSCAR_OK) { so_note(r, 0, nm, 1, 0); continue; }
        double bmax;
        const double ce = so_maxabs_diff(R, ca, (size_t) l * dd, dd, &bmax), ctol = sqrt((double) D) * tmax;
        snprintf(nm, sizeof nm, "%s layer %d composition %s", so_kind_names[kind], l,
                 oscar_composition_name((enum oscar_composition) c));
        so_note(r, ce <= ctol, nm, ce, ctol);
        r->worst_comp = fmax(r->worst_comp, ce);
    }
out:
    free(ev); free(u); free(R); free(tol);
}

// Runs every check of one container; returns the number of failures (-1: setup error).
static int so_check_file(const char * path, int n_threads, struct so_result * r) {
    memset(r, 0, sizeof *r);
    struct so_fix * fx = malloc(sizeof *fx);
    if (so_open(path, fx) != 0) { fprintf(stderr, "stats-oracle: cannot read %s\n", path); free(fx); return -1; }
    enum oscar_status st;
    struct oscar_stats * s = so_accumulate(fx, n_threads, &st);
    if (!s) { fprintf(stderr, "stats-oracle: %s\n", oscar_last_error()); osc_unmap_file(&fx->f); free(fx); return -1; }
    const struct so_array * pa = so_get(fx, "params");
    const int L = so_i32(pa, 0), Hkv = so_i32(pa, 2), D = so_i32(pa, 3);
    const size_t dd = (size_t) D * D;
    double * sig = malloc(sizeof(double) * dd);
    char nm[96];
    for (int kind = 0; kind < 5; kind++) {
        for (int l = 0; l < L; l++) {
            for (int h = -1; h < Hkv; h++) {
                snprintf(nm, sizeof nm, "%s.%s", so_kind_names[kind], h < 0 ? "layer" : "head");
                const struct so_array * a = so_get(fx, nm);
                if (!a) continue;
                oscar_stats_sigma(s, so_kinds[kind], l, h, sig);
                const size_t off = h < 0 ? (size_t) l * dd : ((size_t) l * Hkv + (size_t) h) * dd;
                double bmax, ef = 0.0;
                const double e = so_maxabs_diff(sig, a, off, dd, &bmax);
                snprintf(nm, sizeof nm, "%s layer %d head %d matrix", so_kind_names[kind], l, h);
                so_note(r, e <= 1e-10 * bmax, nm, e, 1e-10 * bmax);
                r->worst_mat = fmax(r->worst_mat, e / bmax);
                if (h >= 0) continue;
                for (size_t i = 0; i < dd; i++) ef += (sig[i] - so_f64(a, off + i)) * (sig[i] - so_f64(a, off + i));
                so_check_fit(fx, kind, l, D, sig, sqrt(ef), r);
            }
        }
    }
    free(sig);
    oscar_stats_free(s);
    osc_unmap_file(&fx->f);
    free(fx);
    return r->n_fail;
}

#endif
