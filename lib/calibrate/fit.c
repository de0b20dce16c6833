// fit.c - one layer's rotations from a finished layer of the accumulator (eigh +
// composition per layer or per KV head, lib/rotation/fit; canonical eigenvector
// signs). Refuses nothing beyond what oscar_fit_stats refuses; records the worst
// orthogonality error and, for the sign search, keeps the fp64 basis.
//
// With --refine optr the arrays are per KV head from the start (OptR refines
// each head): a layer-grouped fit fills head 0 and oscar_calib_fit_spread_heads
// copies it into the other heads once the sign search (which works on the
// layer's one rotation) is done.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/calibrate.h"
#include "calibrate/finish-split.h"
#include "util/log.h"

void oscar_calib_fit_free(struct oscar_calib_fit * f) {
    oscar_rotations_free(&f->rot);
    free(f->k_u); free(f->v_u); free(f->k_lam); free(f->v_lam);
    free(f->err_layer); free(f->err_head);
    memset(f, 0, sizeof(*f));
}

int32_t oscar_calib_fit_n_fitted(const struct oscar_calib_params * p, int32_t n_head_kv) {
    return p->grouping == OSCAR_GROUP_HEAD || p->grouping == OSCAR_GROUP_AUTO ? n_head_kv : 1;
}

enum oscar_status oscar_calib_fit_alloc(const struct oscar_calib_params * p, int32_t n_layer, int32_t n_head_kv,
                                        int32_t head_dim, struct oscar_calib_fit * f) {
    memset(f, 0, sizeof(*f));
    const int32_t R = p->refine_optr ? n_head_kv : oscar_calib_fit_n_fitted(p, n_head_kv);
    const bool autog = p->grouping == OSCAR_GROUP_AUTO;   // the per-layer choice (grouping.c)
    enum oscar_status st = oscar_rotations_alloc(&f->rot, n_layer, n_head_kv, head_dim, R, R,
                                                 p->refine_optr && p->optr_center, autog);
    if (st != OSCAR_OK) return st;
    const size_t L = (size_t) n_layer, D = (size_t) head_dim;
    const size_t LF = L * (size_t) oscar_calib_fit_n_fitted(p, n_head_kv);   // the basis: what is fitted
    bool ok = true;
    if (p->sign_search) {   // the basis the search recomposes from
        f->k_u = malloc(LF * D * D * sizeof(double)), f->v_u = malloc(LF * D * D * sizeof(double));
        f->k_lam = malloc(LF * D * sizeof(double)), f->v_lam = malloc(LF * D * sizeof(double));
        ok = ok && f->k_u && f->v_u && f->k_lam && f->v_lam;
    }
    if (autog) {
        f->err_layer = calloc(L, sizeof(double)), f->err_head = calloc(L, sizeof(double));
        ok = ok && f->err_layer && f->err_head;
    }
    if (!ok) {
        oscar_calib_fit_free(f);
        return osc_error(OSCAR_ERR_NOMEM, "fit: out of memory (%d layers)", (int) n_layer);
    }
    return OSCAR_OK;
}

int32_t oscar_calib_fit_jobs(const struct oscar_calib_params * p, int32_t n_head_kv) {
    return p->grouping == OSCAR_GROUP_AUTO ? 2 + 2 * n_head_kv : 2 * oscar_calib_fit_n_fitted(p, n_head_kv);
}

void oscar_calib_fit_job(const struct oscar_calib_params * p, int32_t n_head_kv, int32_t i, bool * is_v,
                         int32_t * head) {
    if (p->grouping == OSCAR_GROUP_AUTO) {   // K, V of the layer's rotation, then of each head
        *is_v = i % 2 == 1, *head = i < 2 ? -1 : (i - 2) / 2;
        return;
    }
    const int32_t NF = oscar_calib_fit_n_fitted(p, n_head_kv);
    *is_v = i >= NF, *head = NF > 1 ? i % NF : -1;
}

// An item: its report, then rot [D, D] and eig [D] (fp32), then with the basis u [D, D] and lam [D]
// (fp64). The header and the fp32 part are multiples of 8 bytes: every array is aligned in place.
struct item_head {
    double  orth_err, eig_min, eig_max;
    int32_t n_ties, pad;
};

static size_t item_bytes(int32_t D, bool basis) {
    const size_t d = (size_t) D, f32 = (d * d + d) * sizeof(float);
    return sizeof(struct item_head) + f32 + (basis ? (d * d + d) * sizeof(double) : 0);
}

static float * item_rot(unsigned char * it) { return (float *) (void *) (it + sizeof(struct item_head)); }
static double * item_u(unsigned char * it, int32_t D) {
    return (double *) (void *) (it + sizeof(struct item_head) + ((size_t) D * D + (size_t) D) * sizeof(float));
}

void oscar_calib_fit_items_free(struct oscar_calib_fit_items * it) {
    free(it->buf);
    memset(it, 0, sizeof *it);
}

void oscar_calib_fit_item_get(const struct oscar_calib_fit_items * it, int32_t i, float * rot, float * eig, double * u,
                              double * lam, struct oscar_fit_report * rep) {
    unsigned char * x = it->buf + (size_t) i * it->item;
    const size_t D = (size_t) it->head_dim;
    struct item_head h;
    memcpy(&h, x, sizeof h);
    *rep = (struct oscar_fit_report){.orth_err = h.orth_err, .eig_min = h.eig_min, .eig_max = h.eig_max,
                                     .n_ties = h.n_ties};
    memcpy(rot, item_rot(x), D * D * sizeof(float));
    memcpy(eig, item_rot(x) + D * D, D * sizeof(float));
    if (u && it->basis) memcpy(u, item_u(x, it->head_dim), D * D * sizeof(double));
    if (lam && it->basis) memcpy(lam, item_u(x, it->head_dim) + D * D, D * sizeof(double));
}

// Rank 0: the covariances of layer l's n jobs [n, D, D] (serially: the accumulator's scratch is shared).
static enum oscar_status job_sigmas(const struct oscar_stats * s, const struct oscar_calib_params * p, int32_t l,
                                    int32_t Hkv, int32_t n, size_t dd, double * sig) {
    enum oscar_status st = OSCAR_OK;
    for (int32_t i = 0; i < n && st == OSCAR_OK; i++) {
        bool is_v;
        int32_t head;
        oscar_calib_fit_job(p, Hkv, i, &is_v, &head);
        st = oscar_stats_sigma(s, is_v ? p->v_objective : p->k_objective, l, head, sig + (size_t) i * dd);
    }
    return st;
}

// Jobs [j0, j1) of layer l fitted in parallel into items mine [j1 - j0, item].
static enum oscar_status fit_share(const struct oscar_calib_params * p, int32_t l, int32_t Hkv, int32_t D, bool basis,
                                   int64_t j0, int64_t j1, const double * sig, size_t item, unsigned char * mine) {
    const size_t dd = (size_t) D * (size_t) D;
    const int32_t nt = p->n_threads > 0 ? p->n_threads : omp_get_max_threads(), n = (int32_t) (j1 - j0);
    int32_t first_bad = -1;
    enum oscar_status bad = OSCAR_OK;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int32_t i = 0; i < n; i++) {
        unsigned char * it = mine + (size_t) i * item;
        float * rot = item_rot(it);
        double * u = basis ? item_u(it, D) : NULL;
        struct oscar_fit_report rep;
        enum oscar_status e = oscar_fit_rotation_basis(D, sig + (size_t) i * dd, p->composition, rot, rot + dd, &rep,
                                                       u, u ? u + dd : NULL);
        const struct item_head h = {.orth_err = rep.orth_err, .eig_min = rep.eig_min, .eig_max = rep.eig_max,
                                    .n_ties = rep.n_ties};
        memcpy(it, &h, sizeof h);
        if (e != OSCAR_OK) {
#pragma omp critical
            if (first_bad < 0 || i < first_bad) first_bad = i, bad = e;
        }
    }
    if (first_bad < 0) return OSCAR_OK;
    bool is_v;
    int32_t head;
    oscar_calib_fit_job(p, Hkv, (int32_t) j0 + first_bad, &is_v, &head);
    char who[32] = "the layer's rotation";
    if (head >= 0) snprintf(who, sizeof who, "KV head %d", (int) head);
    return osc_error(bad, "fit: layer %d: the %s fit of %s failed", (int) l, is_v ? "V" : "K", who);
}

enum oscar_status oscar_calib_fit_items(struct osc_dp * dp, const struct oscar_stats * s,
                                        const struct oscar_calib_params * p, int32_t l, int32_t n_head_kv,
                                        int32_t head_dim, struct oscar_calib_fit_items * out) {
    const int32_t n = oscar_calib_fit_jobs(p, n_head_kv), D = head_dim;
    const size_t dd = (size_t) D * (size_t) D;
    *out = (struct oscar_calib_fit_items){.n = n, .head_dim = D, .basis = p->sign_search, .item = item_bytes(D, p->sign_search)};
    int64_t j0, j1;
    osc_dp_share(dp, dp->rank, n, &j0, &j1);
    const bool root = dp->rank == 0;
    double * sig = root ? malloc((size_t) n * dd * sizeof(double)) : NULL;
    double * mine_sig = malloc((size_t) (j1 - j0) * dd * sizeof(double) + 1);
    unsigned char * mine = malloc((size_t) (j1 - j0) * out->item + 1);
    if (root) out->buf = malloc((size_t) n * out->item);
    enum oscar_status st = (root && (!sig || !out->buf)) || !mine_sig || !mine
                               ? osc_error(OSCAR_ERR_NOMEM, "fit: layer %d: out of memory", (int) l)
                               : OSCAR_OK;
    if (st == OSCAR_OK && root) st = job_sigmas(s, p, l, n_head_kv, n, dd, sig);
    if (st == OSCAR_OK) st = osc_calib_scatter_shares(dp, OSC_SPLIT_FIT, n, dd * sizeof(double), sig, mine_sig);
    if (st == OSCAR_OK) st = fit_share(p, l, n_head_kv, D, out->basis, j0, j1, mine_sig, out->item, mine);
    if (st == OSCAR_OK) st = osc_calib_gather_shares(dp, OSC_SPLIT_FIT, n, out->item, mine, out->buf);
    free(sig), free(mine_sig), free(mine);
    if (st != OSCAR_OK) oscar_calib_fit_items_free(out);
    return st;
}

enum oscar_status oscar_calib_fit_layer(struct osc_dp * dp, const struct oscar_stats * s,
                                        const struct oscar_calib_params * p, int32_t l, struct oscar_calib_fit * f,
                                        struct oscar_calib_timing * t) {
    const struct oscar_stats_params sp = oscar_stats_get_params(s);
    const int32_t NF = oscar_calib_fit_n_fitted(p, sp.n_head_kv);
    struct oscar_rotations * r = &f->rot;
    if (p->grouping == OSCAR_GROUP_AUTO)
        return osc_error(OSCAR_ERR_INVALID, "fit: grouping auto is chosen per layer by grouping.c, not fitted here");
    if (l < 0 || l >= r->n_layer || r->head_dim != sp.head_dim || sp.n_layer != r->n_layer)
        return osc_error(OSCAR_ERR_INVALID, "fit: layer %d does not fit the result (%d layers, head_dim %d)", (int) l,
                         (int) r->n_layer, (int) r->head_dim);
    double t0 = osc_now();
    const size_t D = (size_t) r->head_dim, dd = D * D, B = (size_t) l * NF;
    struct oscar_calib_fit_items it;
    enum oscar_status st = oscar_calib_fit_items(dp, s, p, l, sp.n_head_kv, r->head_dim, &it);
    for (int32_t i = 0; st == OSCAR_OK && i < it.n; i++) {   // K heads 0 .. NF-1, then V
        const bool is_v = i >= NF;
        const int32_t h = i % NF;
        double * u = is_v ? f->v_u : f->k_u, * lam = is_v ? f->v_lam : f->k_lam;
        struct oscar_fit_report rep;
        oscar_calib_fit_item_get(&it, i, is_v ? oscar_rotations_v(r, l, h) : oscar_rotations_k(r, l, h),
                                 is_v ? oscar_rotations_v_eig(r, l, h) : oscar_rotations_k_eig(r, l, h),
                                 u ? u + (B + (size_t) h) * dd : NULL, lam ? lam + (B + (size_t) h) * D : NULL, &rep);
        if (rep.orth_err > f->orth_err_max) f->orth_err_max = rep.orth_err;
        if (rep.n_ties > 0 && p->composition != OSCAR_COMP_PLAIN)
            osc_warn("fit: layer %d head %d: %d exactly tied eigenvalues; P_br uses the tie-break", (int) l,
                     (int) (NF > 1 ? h : -1), (int) rep.n_ties);
    }
    oscar_calib_fit_items_free(&it);
    if (t) t->eigh += osc_now() - t0;
    return st;
}

void oscar_calib_fit_spread_heads(const struct oscar_calib_params * p, int32_t n_head_kv, int32_t l,
                                  struct oscar_calib_fit * f) {
    struct oscar_rotations * r = &f->rot;
    if (r->n_rot == oscar_calib_fit_n_fitted(p, n_head_kv)) return;
    const size_t D = (size_t) r->head_dim;
    for (int32_t h = 1; h < r->n_rot; h++) {
        memcpy(oscar_rotations_k(r, l, h), oscar_rotations_k(r, l, 0), D * D * sizeof(float));
        memcpy(oscar_rotations_v(r, l, h), oscar_rotations_v(r, l, 0), D * D * sizeof(float));
        memcpy(oscar_rotations_k_eig(r, l, h), oscar_rotations_k_eig(r, l, 0), D * sizeof(float));
        memcpy(oscar_rotations_v_eig(r, l, h), oscar_rotations_v_eig(r, l, 0), D * sizeof(float));
    }
}
