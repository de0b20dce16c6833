// partials.c - block partials for data-parallel passes (stats-partials.h):
// kept in order instead of added, replayed in global order by one process,
// and a layer's pass-1 sums exported to / imported by the others.
//
// The replay repeats the single-process arithmetic exactly: the accumulator
// starts at 0 and each block adds its DSYRK/DGEMM result element by element
// (a part holds that result added into 0, which is exact), and the weight
// sums add the per-token weights one at a time in token order.
#include "stats/stats-internal.h"

#include <stdlib.h>
#include <string.h>

// The kinds of a pass in the order flush lists them, and the weighted one (0: none).
static int32_t pass_kinds(const struct oscar_stats * s, int32_t pass, uint32_t kinds[4], uint32_t * weighted) {
    const uint32_t k = s->p.kinds;
    int32_t n = 0;
    *weighted = 0;
    if (pass == 2) {
        kinds[n++] = OSCAR_STATS_SST;
        *weighted = OSCAR_STATS_SST;
        return n;
    }
    const uint32_t order[] = {OSCAR_STATS_KTK, OSCAR_STATS_VTV, OSCAR_STATS_QQT, OSCAR_STATS_VATT};
    for (int i = 0; i < 4; i++)
        if (k & order[i]) kinds[n++] = order[i];
    if (k & OSCAR_STATS_VATT) *weighted = OSCAR_STATS_VATT;
    return n;
}

static double * kind_acc(const struct oscar_stats * s, uint32_t kind) {
    switch (kind) {
    case OSCAR_STATS_KTK: return s->ktk;
    case OSCAR_STATS_VTV: return s->vtv;
    case OSCAR_STATS_QQT: return s->qqt;
    case OSCAR_STATS_VATT: return s->vatt;
    default: return s->sst;
    }
}

size_t oscar_stats_part_doubles(const struct oscar_stats * s, int32_t pass) {
    uint32_t kinds[4], w;
    const size_t nk = (size_t) pass_kinds(s, pass, kinds, &w), H = (size_t) s->p.n_head_kv;
    return 1 + nk * H * s->dd + (w ? H * OSCAR_STATS_BLOCK : 0) + (pass == 2 ? H : 0);
}

enum oscar_status oscar_stats_keep_partials(struct oscar_stats * s, oscar_stats_layer_hook hook, void * user) {
    for (int32_t l = 0; l < s->p.n_layer; l++) // finished layers (a resumed accumulator) stay as they are
        if (s->phase[l] != 3 && (s->n_tok1[l] || s->n_pend[l] || s->phase[l] != 1))
            return osc_error(OSCAR_ERR_INVALID, "stats: partials must be kept from the start (layer %d has tokens)",
                             (int) l);
    s->keep_parts = true, s->layer_hook = hook, s->hook_user = user;
    return OSCAR_OK;
}

double * osc_stats_new_part(struct oscar_stats * s, int32_t l) {
    const size_t n = oscar_stats_part_doubles(s, s->phase[l]);
    if (s->n_parts && s->parts_layer != l) s->parts_lost = true; // one layer at a time: a caller's bug
    // capacity in doubles: one buffer serves both passes of every layer, and their parts differ
    // in size (pass 1's kinds against SST with its counters)
    if ((s->n_parts + 1) * n > s->cap_parts_doubles) {
        const size_t parts = 2 * (s->n_parts + 1) > 16 ? 2 * (s->n_parts + 1) : 16;
        const size_t cap = parts * n;
        double * p = realloc(s->parts, cap * sizeof(double));
        if (!p) {
            s->parts_lost = true;
            return NULL;
        }
        s->parts = p, s->cap_parts_doubles = cap;
    }
    double * part = s->parts + s->n_parts++ * n;
    memset(part, 0, n * sizeof(double));
    part[0] = (double) s->n_pend[l];
    s->parts_layer = l;
    return part;
}

void osc_stats_part_target(const struct oscar_stats * s, double * part, int32_t phase, int32_t ki, int32_t h,
                           double ** acc, double ** wlog, double ** nneg) {
    uint32_t kinds[4], w;
    const size_t nk = (size_t) pass_kinds(s, phase, kinds, &w), H = (size_t) s->p.n_head_kv;
    double * tail = part + 1 + nk * H * s->dd;
    *acc = part + 1 + ((size_t) ki * H + (size_t) h) * s->dd;
    *wlog = kinds[ki] == w ? tail + (size_t) h * OSCAR_STATS_BLOCK : NULL;
    *nneg = phase == 2 ? tail + H * OSCAR_STATS_BLOCK + (size_t) h : NULL;
}

enum oscar_status osc_stats_parts_status(const struct oscar_stats * s, int32_t l) {
    if (!s->parts_lost) return OSCAR_OK;
    return osc_error(OSCAR_ERR_NOMEM, "stats: layer %d: out of memory keeping %zu block partials (or layers "
                     "interleaved)", (int) l, s->n_parts);
}

void osc_stats_parts_clear(struct oscar_stats * s) { s->n_parts = 0, s->parts_lost = false; }

const double * oscar_stats_layer_parts(const struct oscar_stats * s, int32_t layer, size_t * n_parts) {
    *n_parts = s->n_parts && s->parts_layer == layer ? s->n_parts : 0;
    return s->parts;
}

enum oscar_status oscar_stats_replay_parts(struct oscar_stats * s, int32_t layer, const double * parts,
                                           size_t n_parts) {
    if (layer < 0 || layer >= s->p.n_layer || s->phase[layer] == 3)
        return osc_error(OSCAR_ERR_INVALID, "stats: replay into layer %d (of %d) outside a pass", (int) layer,
                         (int) s->p.n_layer);
    const int32_t pass = s->phase[layer];
    uint32_t kinds[4], w;
    const size_t nk = (size_t) pass_kinds(s, pass, kinds, &w), H = (size_t) s->p.n_head_kv, dd = s->dd;
    const size_t psz = oscar_stats_part_doubles(s, pass), lh = (size_t) layer * H;
    for (size_t i = 0; i < n_parts; i++) {
        const double n = parts[i * psz];
        if (!(n >= 1 && n <= OSCAR_STATS_BLOCK) || n != (double) (int32_t) n)
            return osc_error(OSCAR_ERR_INVALID, "stats: layer %d: part %zu has %g rows (1 .. %d)", (int) layer, i, n,
                             OSCAR_STATS_BLOCK);
    }
    if (pass == 1) { // pass 2 checks this process's own tokens against its own pass 1
        if (!s->n_tok1_own && !(s->n_tok1_own = calloc((size_t) s->p.n_layer, sizeof(int64_t))))
            return osc_error(OSCAR_ERR_NOMEM, "stats: out of memory");
        s->n_tok1_own[layer] = s->n_tok1[layer];
    }
    double * wsum = w == OSCAR_STATS_VATT ? s->vatt_wsum + lh : w == OSCAR_STATS_SST ? s->sst_wsum + lh : NULL;
    int64_t * ntok = pass == 1 ? &s->n_tok1[layer] : &s->n_tok2[layer];
    for (size_t k = 0; k < nk; k++) memset(kind_acc(s, kinds[k]) + lh * dd, 0, H * dd * sizeof(double));
    if (wsum) memset(wsum, 0, H * sizeof(double));
    if (pass == 2) memset(s->sst_nneg + lh, 0, H * sizeof(int64_t));
    *ntok = 0;
    for (size_t i = 0; i < n_parts; i++) {
        const double * part = parts + i * psz;
        const int32_t n = (int32_t) part[0];
        for (size_t k = 0; k < nk; k++) {
            double * acc = kind_acc(s, kinds[k]) + lh * dd;
            const double * src = part + 1 + k * H * dd;
            for (size_t e = 0; e < H * dd; e++) acc[e] += src[e];
        }
        const double * tail = part + 1 + nk * H * dd;
        for (size_t h = 0; wsum && h < H; h++)
            for (int32_t t = 0; t < n; t++) wsum[h] += tail[h * OSCAR_STATS_BLOCK + (size_t) t];
        for (size_t h = 0; pass == 2 && h < H; h++) s->sst_nneg[lh + h] += (int64_t) tail[H * OSCAR_STATS_BLOCK + h];
        *ntok += n;
    }
    return OSCAR_OK;
}

size_t oscar_stats_export_doubles(const struct oscar_stats * s) {
    uint32_t kinds[4], w;
    const size_t nk = (size_t) pass_kinds(s, 1, kinds, &w), H = (size_t) s->p.n_head_kv;
    return nk * H * s->dd + (w ? H : 0) + 1;
}

// Copies layer's pass-1 sums from the accumulator to out (export), or from in into it (import).
// (The accumulator's arrays are reached through s's pointers, writable even from a const s.)
static void pass1_io(const struct oscar_stats * s, int32_t layer, const double * in, double * out) {
    uint32_t kinds[4], w;
    const size_t nk = (size_t) pass_kinds(s, 1, kinds, &w), H = (size_t) s->p.n_head_kv, n = H * s->dd;
    const size_t lh = (size_t) layer * H;
    size_t o = 0;
    for (size_t k = 0; k < nk; k++, o += n) {
        double * acc = kind_acc(s, kinds[k]) + lh * s->dd;
        if (out) memcpy(out + o, acc, n * sizeof(double));
        else memcpy(acc, in + o, n * sizeof(double));
    }
    if (w) {
        if (out) memcpy(out + o, s->vatt_wsum + lh, H * sizeof(double));
        else memcpy(s->vatt_wsum + lh, in + o, H * sizeof(double));
        o += H;
    }
    if (out) out[o] = (double) s->n_tok1[layer];
    else s->n_tok1[layer] = (int64_t) in[o];
}

void oscar_stats_layer_export(const struct oscar_stats * s, int32_t layer, double * out) {
    pass1_io(s, layer, NULL, out);
}

enum oscar_status oscar_stats_layer_import(struct oscar_stats * s, int32_t layer, const double * in) {
    if (layer < 0 || layer >= s->p.n_layer || s->phase[layer] != 1)
        return osc_error(OSCAR_ERR_INVALID, "stats: import into layer %d outside its pass 1", (int) layer);
    if (!s->n_tok1_own && !(s->n_tok1_own = calloc((size_t) s->p.n_layer, sizeof(int64_t))))
        return osc_error(OSCAR_ERR_NOMEM, "stats: out of memory");
    s->n_tok1_own[layer] = s->n_tok1[layer];
    pass1_io(s, layer, in, NULL);
    return OSCAR_OK;
}

size_t oscar_stats_layer_sums_doubles(const struct oscar_stats * s, int32_t pass) {
    const size_t H = (size_t) s->p.n_head_kv;
    return pass == 1 ? oscar_stats_export_doubles(s) : H * s->dd + 2 * H + 1;
}

// Pass 2's layer sums: SST [H, D, D], its weight sums [H], clamp counts [H] and the token count.
static void pass2_io(const struct oscar_stats * s, int32_t layer, const double * in, double * out) {
    const size_t H = (size_t) s->p.n_head_kv, n = H * s->dd, lh = (size_t) layer * H;
    if (out) {
        memcpy(out, s->sst + lh * s->dd, n * sizeof(double));
        memcpy(out + n, s->sst_wsum + lh, H * sizeof(double));
        for (size_t h = 0; h < H; h++) out[n + H + h] = (double) s->sst_nneg[lh + h];
        out[n + 2 * H] = (double) s->n_tok2[layer];
        return;
    }
    memcpy(s->sst + lh * s->dd, in, n * sizeof(double));
    memcpy(s->sst_wsum + lh, in + n, H * sizeof(double));
    for (size_t h = 0; h < H; h++) s->sst_nneg[lh + h] = (int64_t) in[n + H + h];
    s->n_tok2[layer] = (int64_t) in[n + 2 * H];
}

void oscar_stats_layer_sums_get(const struct oscar_stats * s, int32_t layer, double * out) {
    if (s->phase[layer] == 1) pass1_io(s, layer, NULL, out);
    else pass2_io(s, layer, NULL, out);
}

enum oscar_status oscar_stats_layer_sums_set(struct oscar_stats * s, int32_t layer, const double * in) {
    if (layer < 0 || layer >= s->p.n_layer || s->phase[layer] == 3)
        return osc_error(OSCAR_ERR_INVALID, "stats: sums set into layer %d outside a pass", (int) layer);
    if (s->phase[layer] == 1) return oscar_stats_layer_import(s, layer, in);
    pass2_io(s, layer, in, NULL);
    return OSCAR_OK;
}
