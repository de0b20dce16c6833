// fit.c - rotations from a finished accumulator (eigh + composition per layer
// or per KV head, lib/rotation/fit; canonical eigenvector signs). Refuses nothing
// beyond what oscar_fit_stats refuses; records the worst orthogonality error and,
// for the sign search, keeps the fp64 basis.
#include <stdlib.h>
#include <string.h>

#include "calibrate/calibrate.h"
#include "util/log.h"

void oscar_calib_fit_free(struct oscar_calib_fit * f) {
    free(f->k_rot);
    free(f->v_rot);
    free(f->k_eig);
    free(f->v_eig);
    free(f->k_mean);
    free(f->k_u); free(f->v_u); free(f->k_lam); free(f->v_lam);
    memset(f, 0, sizeof(*f));
}

enum oscar_status oscar_calib_fit_rotations(const struct oscar_stats * s, const struct oscar_calib_params * p,
                                            struct oscar_calib_fit * f, struct oscar_calib_timing * t) {
    struct oscar_stats_params sp = oscar_stats_get_params(s);
    double t0 = osc_now();
    memset(f, 0, sizeof(*f));
    f->n_layer = sp.n_layer;
    f->n_rot = p->grouping == OSCAR_GROUP_HEAD ? sp.n_head_kv : 1;
    f->head_dim = sp.head_dim;
    size_t LR = (size_t) f->n_layer * (size_t) f->n_rot, D = (size_t) sp.head_dim;
    f->k_rot = malloc(LR * D * D * sizeof(float));
    f->v_rot = malloc(LR * D * D * sizeof(float));
    f->k_eig = malloc(LR * D * sizeof(float));
    f->v_eig = malloc(LR * D * sizeof(float));
    struct oscar_fit_report * rep = calloc(LR, sizeof(*rep));
    enum oscar_status st = OSCAR_ERR_NOMEM;
    if (p->sign_search) {   // the basis the search recomposes from
        f->k_u = malloc(LR * D * D * sizeof(double)), f->v_u = malloc(LR * D * D * sizeof(double));
        f->k_lam = malloc(LR * D * sizeof(double)), f->v_lam = malloc(LR * D * sizeof(double));
    }
    if (!f->k_rot || !f->v_rot || !f->k_eig || !f->v_eig || !rep ||
        (p->sign_search && (!f->k_u || !f->v_u || !f->k_lam || !f->v_lam))) {
        st = osc_error(OSCAR_ERR_NOMEM, "fit: out of memory");
        goto out;
    }
    if ((st = oscar_fit_stats_basis(s, p->k_objective, p->grouping, p->composition, f->k_rot, f->k_eig, rep, f->k_u,
                                    f->k_lam)) != OSCAR_OK)
        goto out;
    for (size_t i = 0; i < LR; i++)
        if (rep[i].orth_err > f->orth_err_max) f->orth_err_max = rep[i].orth_err;
    if ((st = oscar_fit_stats_basis(s, p->v_objective, p->grouping, p->composition, f->v_rot, f->v_eig, rep, f->v_u,
                                    f->v_lam)) != OSCAR_OK)
        goto out;
    for (size_t i = 0; i < LR; i++)
        if (rep[i].orth_err > f->orth_err_max) f->orth_err_max = rep[i].orth_err;
    st = OSCAR_OK;
out:
    free(rep);
    if (st != OSCAR_OK) oscar_calib_fit_free(f);
    if (t) t->eigh += osc_now() - t0;
    return st;
}
