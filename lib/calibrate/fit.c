// fit.c - one layer's rotations from a finished layer of the accumulator (eigh +
// composition per layer or per KV head, lib/rotation/fit; canonical eigenvector
// signs). Refuses nothing beyond what oscar_fit_stats refuses; records the worst
// orthogonality error and, for the sign search, keeps the fp64 basis.
//
// With --refine optr the arrays are per KV head from the start (OptR refines
// each head): a layer-grouped fit fills head 0 and oscar_calib_fit_spread_heads
// copies it into the other heads once the sign search (which works on the
// layer's one rotation) is done.
#include <stdlib.h>
#include <string.h>

#include "calibrate/calibrate.h"
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

enum oscar_status oscar_calib_fit_layer(const struct oscar_stats * s, const struct oscar_calib_params * p, int32_t l,
                                        struct oscar_calib_fit * f, struct oscar_calib_timing * t) {
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
    struct oscar_fit_report * rep = calloc((size_t) NF, sizeof(*rep));
    enum oscar_status st = rep ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "fit: out of memory");
    for (int kv = 0; kv < 2 && st == OSCAR_OK; kv++) {   // layer l's first NF heads
        float * rot = kv ? oscar_rotations_v(r, l, 0) : oscar_rotations_k(r, l, 0);
        float * eig = kv ? oscar_rotations_v_eig(r, l, 0) : oscar_rotations_k_eig(r, l, 0);
        double * u = kv ? f->v_u : f->k_u, * lam = kv ? f->v_lam : f->k_lam;
        st = oscar_fit_stats_layer_basis(s, kv ? p->v_objective : p->k_objective, p->grouping, p->composition, l,
                                         rot, eig, rep, u ? u + B * dd : NULL, lam ? lam + B * D : NULL);
        for (int32_t i = 0; st == OSCAR_OK && i < NF; i++)
            if (rep[i].orth_err > f->orth_err_max) f->orth_err_max = rep[i].orth_err;
    }
    free(rep);
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
