// optr-rows.c - the training rows of --refine optr in the layer-major pass
// (contract in calibrate.h): as a layer's calibration batches run, this
// process's rows of the leading sequences that hold every OptR training
// sequence are copied (data-parallel: each rank its own; refine.c routes them
// to the ranks refining their heads, optr-route.h), and
// with centring every calibration key is summed in fp64 blocks of rows
// (OSCAR_OPTR_KEY_BLOCK), so the mean is the one oscar_optr_key_mean takes over
// a store's rows, bit for bit, and ranks owning whole blocks give the same bits.
// One layer's rows at a time: the next layer's first batch starts over.
#include <stdlib.h>
#include <string.h>

#include "calibrate/calibrate.h"
#include "rotation/optr.h"

void oscar_calib_optr_rows_free(struct oscar_calib_optr_rows * r) {
    free(r->q), free(r->k), free(r->v), free(r->k_blocks);
    memset(r, 0, sizeof *r);
    r->layer = -1;
}

enum oscar_status oscar_calib_optr_rows_alloc(const struct oscar_calib_params * p, const struct oscar_calib_plan * plan,
                                              int32_t n_head, int32_t n_head_kv, int32_t head_dim, int64_t row_base,
                                              int64_t n_local, struct oscar_calib_optr_rows * r) {
    memset(r, 0, sizeof *r);
    r->layer = -1;
    const int32_t prefix = oscar_calib_optr_train_prefix(p, plan, head_dim);
    if (prefix < 0) return osc_error(OSCAR_ERR_NOMEM, "optr: out of memory");
    if (prefix == 0)
        return osc_error(OSCAR_ERR_INVALID, "--refine optr: no calibration sequence has the %d rows OptR trains on "
                         "(--sink %d + --recent %d + 8): use a longer --seq-len", (int) (p->sink + p->recent + 8),
                         (int) p->sink, (int) p->recent);
    r->n_seq = prefix, r->n_rows = plan->seq_start[prefix];
    r->n_cal_rows = plan->seq_start[plan->n_seq];
    r->row_base = row_base;
    const int64_t end = row_base + n_local < r->n_rows ? row_base + n_local : r->n_rows;   // this process's rows of them
    r->n_local = end > row_base ? end - row_base : 0;
    r->q_row = (size_t) n_head * (size_t) head_dim, r->kv_row = (size_t) n_head_kv * (size_t) head_dim;
    const size_t R = (size_t) r->n_local;
    r->q = malloc(R * r->q_row * sizeof(float) + 1);
    r->k = malloc(R * r->kv_row * sizeof(float) + 1);
    r->v = malloc(R * r->kv_row * sizeof(float) + 1);
    const size_t nb = (size_t) ((r->n_cal_rows + OSCAR_OPTR_KEY_BLOCK - 1) / OSCAR_OPTR_KEY_BLOCK);
    if (p->optr_center) r->k_blocks = malloc((nb > 0 ? nb : 1) * r->kv_row * sizeof(double));
    if (!r->q || !r->k || !r->v || (p->optr_center && !r->k_blocks)) {
        oscar_calib_optr_rows_free(r);
        return osc_error(OSCAR_ERR_NOMEM, "optr: out of memory for %lld training rows", (long long) R);
    }
    return OSCAR_OK;
}

bool oscar_calib_optr_rows_want(const struct oscar_calib_optr_rows * r, int64_t row0) {
    return r->k_blocks || row0 < r->n_local;
}

enum oscar_status oscar_calib_optr_rows_add(struct oscar_calib_optr_rows * r, int32_t l, int64_t row0, int64_t n,
                                            const float * q, const float * k, const float * v) {
    if (r->layer != l) {   // the layer's first batch
        r->layer = l, r->k_summed = 0, r->k_gathered = false;
        const int64_t nb = (r->n_cal_rows + OSCAR_OPTR_KEY_BLOCK - 1) / OSCAR_OPTR_KEY_BLOCK;
        if (r->k_blocks) memset(r->k_blocks, 0, (size_t) nb * r->kv_row * sizeof(double));
    }
    if (row0 != r->k_summed)   // the sums' order is the rows' order
        return osc_error(OSCAR_ERR_INVALID, "optr: layer %d: calibration rows from %lld after %lld: out of order",
                         (int) l, (long long) row0, (long long) r->k_summed);
    if (r->k_blocks) oscar_optr_key_block_add(r->k_blocks, r->row_base + row0, k, n, r->kv_row);
    const int64_t keep = row0 >= r->n_local ? 0 : (row0 + n < r->n_local ? n : r->n_local - row0);
    if (keep > 0) {
        memcpy(r->q + (size_t) row0 * r->q_row, q, (size_t) keep * r->q_row * sizeof(float));
        memcpy(r->k + (size_t) row0 * r->kv_row, k, (size_t) keep * r->kv_row * sizeof(float));
        memcpy(r->v + (size_t) row0 * r->kv_row, v, (size_t) keep * r->kv_row * sizeof(float));
    }
    r->k_summed = row0 + n;
    return OSCAR_OK;
}
