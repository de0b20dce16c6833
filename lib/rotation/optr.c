// optr.c - OptR for one layer (see optr.h): checks, the (head, sequence)
// items with their exact attention, the Adam loop of each phase with held-out
// early stopping and the keep-or-revert rule. The losses are optr-loss.c's,
// the exponential map optr-expm.c's. Work is split into items whose results
// are reduced in sequence order, so the thread count changes no bit.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "rotation/optr-internal.h"
#include "util/blas.h"
#include "util/log.h"

struct oscar_optr_params oscar_optr_default_params(int32_t head_dim, int32_t group_size) {
    struct oscar_optr_params p;
    memset(&p, 0, sizeof(p));
    p.steps = 80, p.lr = 0.02, p.lambda = 1.0, p.eval_every = 20, p.qwin = 64, p.sink = 64, p.recent = 256;
    p.k_quant = oscar_int2_default_params(head_dim);
    p.k_quant.group_size = group_size;
    p.k_quant.clip_algo = OSCAR_CLIP_SORT;
    p.v_quant = p.k_quant;
    p.k_quant.clip_ratio = 0.96, p.v_quant.clip_ratio = 0.92;
    p.center = true;
    return p;
}

void oscar_optr_key_block_add(double * blocks, int64_t row0, const float * k, int64_t n_rows, size_t hd) {
    for (int64_t t = 0; t < n_rows; t++) {
        double * blk = blocks + (size_t) ((row0 + t) / OSCAR_OPTR_KEY_BLOCK) * hd;
        for (size_t i = 0; i < hd; i++) blk[i] += (double) k[(size_t) t * hd + i];
    }
}

void oscar_optr_key_mean_of_blocks(const double * blocks, int64_t n_rows, size_t hd, float * out) {
    const int64_t nb = (n_rows + OSCAR_OPTR_KEY_BLOCK - 1) / OSCAR_OPTR_KEY_BLOCK;
    for (size_t i = 0; i < hd; i++) {
        double sum = 0.0;
        for (int64_t b = 0; b < nb; b++) sum += blocks[(size_t) b * hd + i];
        out[i] = n_rows > 0 ? (float) (sum / (double) n_rows) : 0.0f;
    }
}

void oscar_optr_key_mean(const struct oscar_optr_rows * rows, int32_t n_head_kv, int32_t head_dim, float * out) {
    const size_t HD = (size_t) n_head_kv * head_dim;
    const int64_t T = rows->seq_start[rows->n_seq], nb = (T + OSCAR_OPTR_KEY_BLOCK - 1) / OSCAR_OPTR_KEY_BLOCK;
    double * blocks = calloc((size_t) (nb > 0 ? nb : 1) * HD, sizeof(double));
    if (!blocks) { memset(out, 0, HD * sizeof(float)); return; }
    oscar_optr_key_block_add(blocks, 0, rows->k, T, HD);
    oscar_optr_key_mean_of_blocks(blocks, T, HD, out);
    free(blocks);
}

// ---- checks ----------------------------------------------------------------------------------
static enum oscar_status check_rows(const struct oscar_optr_layer * in, const struct oscar_optr_rows * r,
                                    const char * name) {
    if (r->n_seq < 1 || !r->seq_start || !r->q || !r->k || !r->v)
        return osc_error(OSCAR_ERR_INVALID, "optr: layer %d: the %s rows are missing (%d sequences)", (int) in->layer,
                         name, (int) r->n_seq);
    if (r->seq_start[0] != 0)
        return osc_error(OSCAR_ERR_INVALID, "optr: layer %d: %s seq_start[0] = %d, expected 0", (int) in->layer, name,
                         (int) r->seq_start[0]);
    for (int32_t s = 0; s < r->n_seq; s++)
        if (r->seq_start[s + 1] <= r->seq_start[s])
            return osc_error(OSCAR_ERR_INVALID, "optr: layer %d: %s sequence %d is empty or reversed (%d..%d)",
                             (int) in->layer, name, (int) s, (int) r->seq_start[s], (int) r->seq_start[s + 1]);
    return OSCAR_OK;
}

enum oscar_status osc_optr_check(const struct oscar_optr_layer * in, const struct oscar_optr_params * p) {
    const int32_t D = in->head_dim;
    if (in->n_head_kv_layer < 0 || (in->n_head_kv_layer > 0 && in->n_head_kv_layer < in->n_head_kv))
        return osc_error(OSCAR_ERR_INVALID, "optr: layer %d: %d KV heads refined of a layer of %d", (int) in->layer,
                         (int) in->n_head_kv, (int) in->n_head_kv_layer);
    if (in->n_head < 1 || in->n_head_kv < 1 || in->n_head % in->n_head_kv)
        return osc_error(OSCAR_ERR_INVALID, "optr: layer %d: %d query heads are not a multiple of %d KV heads",
                         (int) in->layer, (int) in->n_head, (int) in->n_head_kv);
    if (!(in->attn_scale >= 0.0f) || isinf(in->attn_scale))
        return osc_error(OSCAR_ERR_INVALID, "optr: layer %d: score scale %g", (int) in->layer, (double) in->attn_scale);
    if (D < 4 || D > 4096 || D % 4 || in->n_embd < 1)
        return osc_error(OSCAR_ERR_INVALID, "optr: layer %d: head_dim %d (need a multiple of 4 in [4, 4096]) or "
                         "n_embd %d", (int) in->layer, (int) D, (int) in->n_embd);
    if (!in->wo || !in->k_rot_base || !in->v_rot_base)
        return osc_error(OSCAR_ERR_INVALID, "optr: layer %d: W_O or a base rotation is missing", (int) in->layer);
    if (p->steps < 1 || !(p->lr > 0.0) || !(p->lambda >= 0.0) || p->eval_every < 1 || p->qwin < 1 ||
        p->qwin > 4096 || p->sink < 0 || p->recent < 0 || p->max_train_seq < 0 || !(p->margin_k >= 0.0) ||
        !(p->margin_v >= 0.0))
        return osc_error(OSCAR_ERR_INVALID, "optr: steps %d, lr %g, lambda %g, eval_every %d, qwin %d (1..4096), sink "
                         "%d, recent %d, max_train_seq %d, margins %g/%g: out of range", (int) p->steps, p->lr,
                         p->lambda, (int) p->eval_every, (int) p->qwin, (int) p->sink, (int) p->recent,
                         (int) p->max_train_seq, p->margin_k, p->margin_v);
    const struct oscar_int2_params * qs[2] = {&p->k_quant, &p->v_quant};
    for (int i = 0; i < 2; i++) {
        enum oscar_status st = oscar_int2_params_check(qs[i]);
        if (st != OSCAR_OK) return osc_error_prefix(st, "optr: layer %d: %s quantizer", (int) in->layer, i ? "V" : "K");
        if (qs[i]->head_dim != D || qs[i]->scheme != OSCAR_INT2_ASYM)
            return osc_error(OSCAR_ERR_INVALID, "optr: layer %d: the %s quantizer has head_dim %d (rows have %d) or a "
                             "scheme other than ASYM (the straight-through gradient is derived for ASYM)",
                             (int) in->layer, i ? "V" : "K", (int) qs[i]->head_dim, (int) D);
    }
    enum oscar_status st = check_rows(in, &in->train, "training");
    return st != OSCAR_OK ? st : check_rows(in, &in->held, "held-out");
}

// ---- prepared state ------------------------------------------------------------------------------
struct set_items {
    int32_t n_seq;                   // usable sequences
    struct osc_optr_item * it;       // [Hkv, n_seq]
};

struct osc_optr_state {
    struct oscar_optr_layer in;
    struct oscar_optr_params p;
    int32_t Hkv, g, D, nt;
    float * gram;                    // [Hq, D, D]
    struct osc_optr_head hk, hv;     // per-head constants (gram pointer set per head)
    struct set_items sets[2];        // train, held
    struct osc_optr_scratch * scr;   // [nt]
    double * dr_items;               // [Hkv, n_train, D, D]
    double * loss_items;             // [Hkv, max n]
};

static void item_free(struct osc_optr_item * it) {
    free(it->kc); free(it->v); free(it->q); free(it->p);
    free(it->plogp); free(it->pv); free(it->phat);
    free(it->lin.c); free(it->lin.clampv); free(it->lin.clipped); free(it->lin.imax); free(it->lin.imin);
    free(it->lin.scale);
}

void osc_optr_state_free(struct osc_optr_state * st) {
    if (!st) return;
    for (int k = 0; k < 2; k++) {
        for (int32_t i = 0; st->sets[k].it && i < st->Hkv * st->sets[k].n_seq; i++) item_free(&st->sets[k].it[i]);
        free(st->sets[k].it);
    }
    for (int32_t t = 0; st->scr && t < st->nt; t++) osc_optr_scratch_free(&st->scr[t]);
    free(st->scr); free(st->gram); free(st->dr_items); free(st->loss_items);
    free(st);
}

static int32_t min_len(const struct oscar_optr_params * p) { return p->sink + p->recent + 8; }

void osc_optr_item_geom(const struct oscar_optr_params * p, int32_t L, struct osc_optr_geom * g) {
    g->L = L;
    g->lo = L - p->qwin > 1 ? L - p->qwin : 1;
    g->nq = L - g->lo;
    g->q0 = p->sink < L ? p->sink : L;
    g->q1 = L - p->recent > g->q0 ? L - p->recent : g->q0;
}

#define MAX_SET_SEQ OSC_OPTR_MAX_SET_SEQ

int32_t osc_optr_pick_sequences(const struct oscar_optr_params * p, const int32_t * seq_start, int32_t n_seq,
                                int32_t max_seq, int32_t * idx) {
    int32_t n = 0;
    for (int32_t s = 0; s < n_seq && n < MAX_SET_SEQ && (max_seq == 0 || n < max_seq); s++)
        if (seq_start[s + 1] - seq_start[s] >= min_len(p)) {
            if (idx) idx[n] = s;
            n++;
        }
    return n;
}

int32_t oscar_optr_train_sequences(const struct oscar_optr_params * p, const int32_t * seq_start, int32_t n_seq,
                                   int32_t * idx) {
    return osc_optr_pick_sequences(p, seq_start, n_seq, p->max_train_seq, idx);
}

// Allocates one item's arrays and fills the rows (centred keys, values, queries).
static bool item_alloc(struct osc_optr_state * st, const struct oscar_optr_rows * r, int32_t s, int32_t h,
                       const float * k_mean, struct osc_optr_item * it) {
    const int32_t D = st->D, Hq = st->in.n_head, Hkv = st->Hkv, g = st->g;
    const int32_t r0 = r->seq_start[s], L = r->seq_start[s + 1] - r0;
    const int32_t ng = D / (st->p.k_quant.group_size > 0 ? st->p.k_quant.group_size : D);
    const int32_t ngv = D / (st->p.v_quant.group_size > 0 ? st->p.v_quant.group_size : D);
    const int32_t ngm = ng > ngv ? ng : ngv;
    memset(it, 0, sizeof(*it));
    struct osc_optr_geom gm;
    osc_optr_item_geom(&st->p, L, &gm);
    it->L = L, it->lo = gm.lo, it->nq = gm.nq, it->q0 = gm.q0, it->q1 = gm.q1;
    const size_t LD = (size_t) L * D, nr = (size_t) (it->q1 - it->q0);
    float * kc = malloc(LD * sizeof(float)), * v = malloc(LD * sizeof(float));
    float * q = malloc((size_t) g * it->nq * D * sizeof(float));
    it->kc = kc, it->v = v, it->q = q;
    it->p = malloc((size_t) g * it->nq * L * sizeof(float));
    it->pv = malloc((size_t) g * it->nq * D * sizeof(float));
    it->phat = malloc((size_t) g * it->nq * L * sizeof(float));
    it->plogp = calloc((size_t) g, sizeof(double));
    it->lin.c = malloc((nr * D + 1) * sizeof(float));
    it->lin.clampv = malloc((nr + 1) * sizeof(float));
    it->lin.clipped = malloc(nr * D + 1);
    it->lin.imax = malloc((nr * ngm + 1) * sizeof(int16_t));
    it->lin.imin = malloc((nr * ngm + 1) * sizeof(int16_t));
    it->lin.scale = malloc((nr * ngm + 1) * sizeof(float));
    if (!kc || !v || !q || !it->p || !it->pv || !it->phat || !it->plogp || !it->lin.c || !it->lin.clampv ||
        !it->lin.clipped || !it->lin.imax || !it->lin.imin || !it->lin.scale)
        return false;
    for (int32_t t = 0; t < L; t++) {
        const size_t src = ((size_t) (r0 + t) * Hkv + h) * D;
        for (int32_t d = 0; d < D; d++) {
            kc[(size_t) t * D + d] = r->k[src + d] - (k_mean ? k_mean[(size_t) h * D + d] : 0.0f);
            v[(size_t) t * D + d] = r->v[src + d];
        }
    }
    for (int32_t j = 0; j < g; j++)
        for (int32_t i = 0; i < it->nq; i++)
            memcpy(q + ((size_t) j * it->nq + i) * D, r->q + ((size_t) (r0 + it->lo + i) * Hq + h * g + j) * D,
                   (size_t) D * sizeof(float));
    return true;
}

// The exact attention of an item: P, Σ P log P and P·V per query head.
static void item_exact(struct osc_optr_state * st, struct osc_optr_item * it, struct osc_optr_scratch * s) {
    const int32_t D = st->D, L = it->L, nq = it->nq;
    const float sc = st->hk.sc;
    for (int32_t j = 0; j < st->g; j++) {
        float * P = it->p + (size_t) j * nq * L;
        osc_sgemm(1, CblasNoTrans, CblasTrans, nq, L, D, sc, it->q + (size_t) j * nq * D, D, it->kc, D, 0.0f, s->s, L);
        double plogp = 0.0;
        for (int32_t i = 0; i < nq; i++) {
            const int32_t n = it->lo + i + 1;
            const float * sr = s->s + (size_t) i * L;
            float * pr = P + (size_t) i * L;
            float mx = sr[0];
            for (int32_t t = 1; t < n; t++) mx = sr[t] > mx ? sr[t] : mx;
            double sum = 0.0;
            for (int32_t t = 0; t < n; t++) sum += (double) (pr[t] = expf(sr[t] - mx));
            const double lse = (double) mx + log(sum);
            const float inv = (float) (1.0 / sum);
            for (int32_t t = 0; t < n; t++) {
                pr[t] *= inv;
                plogp += (double) pr[t] * ((double) sr[t] - lse);
            }
            for (int32_t t = n; t < L; t++) pr[t] = 0.0f;
        }
        it->plogp[j] = plogp;
        osc_sgemm(1, CblasNoTrans, CblasNoTrans, nq, D, L, 1.0f, P, L, it->v, D, 0.0f,
                  it->pv + (size_t) j * nq * D, D);
    }
}

static enum oscar_status prepare_set(struct osc_optr_state * st, int k, const struct oscar_optr_rows * r,
                                     const float * k_mean, int32_t max_seq) {
    struct set_items * si = &st->sets[k];
    int32_t idx[MAX_SET_SEQ];
    const int32_t n = osc_optr_pick_sequences(&st->p, r->seq_start, r->n_seq, max_seq, idx);
    if (n == 0)
        return osc_error(OSCAR_ERR_INVALID, "optr: layer %d: no %s sequence has the %d rows OptR needs (sink %d + "
                         "recent %d + 8)", (int) st->in.layer, k ? "held-out" : "training", (int) min_len(&st->p),
                         (int) st->p.sink, (int) st->p.recent);
    si->n_seq = n;
    si->it = calloc((size_t) st->Hkv * n, sizeof(*si->it));
    if (!si->it) return osc_error(OSCAR_ERR_NOMEM, "optr: out of memory");
    for (int32_t h = 0; h < st->Hkv; h++)
        for (int32_t i = 0; i < n; i++)
            if (!item_alloc(st, r, idx[i], h, k_mean, &si->it[(size_t) h * n + i]))
                return osc_error(OSCAR_ERR_NOMEM, "optr: layer %d: out of memory for the rows", (int) st->in.layer);
    const int32_t NI = st->Hkv * n;
    #pragma omp parallel for schedule(static) num_threads(st->nt)
    for (int32_t i = 0; i < NI; i++) item_exact(st, &si->it[i], &st->scr[omp_get_thread_num()]);
    return OSCAR_OK;
}

// Whether x [n] is all finite: fixed chunks in parallel (the answer does not depend on the threads).
static bool finite_rows(const float * x, size_t n, int32_t nt) {
    const size_t chunk = (size_t) 1 << 20, n_chunk = (n + chunk - 1) / chunk;
    int bad = 0;
    #pragma omp parallel for schedule(static) num_threads(nt) reduction(| : bad)
    for (size_t c = 0; c < n_chunk; c++) {
        const size_t end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
        for (size_t i = c * chunk; i < end; i++) bad |= !isfinite(x[i]);
    }
    return !bad;
}

enum oscar_status osc_optr_check_finite(const struct oscar_optr_layer * in, int32_t n_threads) {
    const struct oscar_optr_rows * sets[2] = {&in->train, &in->held};
    const int32_t nt = n_threads > 0 ? n_threads : omp_get_max_threads();
    for (int k = 0; k < 2; k++) {
        const size_t T = (size_t) sets[k]->seq_start[sets[k]->n_seq];
        if (!finite_rows(sets[k]->q, T * in->n_head * in->head_dim, nt) ||
            !finite_rows(sets[k]->k, T * in->n_head_kv * in->head_dim, nt) ||
            !finite_rows(sets[k]->v, T * in->n_head_kv * in->head_dim, nt))
            return osc_error(OSCAR_ERR_NUMERIC, "optr: layer %d: the %s rows hold a NaN or Inf", (int) in->layer,
                             k ? "held-out" : "training");
    }
    return OSCAR_OK;
}

enum oscar_status osc_optr_prepare(const struct oscar_optr_layer * in, const struct oscar_optr_params * p,
                                   const float * k_mean, struct osc_optr_state ** out) {
    *out = NULL;
    enum oscar_status rc = osc_optr_check(in, p);
    if (rc != OSCAR_OK || (rc = osc_optr_check_finite(in, p->n_threads)) != OSCAR_OK) return rc;
    const struct oscar_optr_rows * sets[2] = {&in->train, &in->held};
    struct osc_optr_state * st = calloc(1, sizeof(*st));
    if (!st) return osc_error(OSCAR_ERR_NOMEM, "optr: out of memory");
    st->in = *in, st->p = *p;
    st->Hkv = in->n_head_kv, st->g = in->n_head / in->n_head_kv, st->D = in->head_dim;
    st->nt = p->n_threads > 0 ? p->n_threads : omp_get_max_threads();
    const int32_t D = st->D, Hq = in->n_head, C = in->n_embd;
    // Gram matrices Γ_j = W_jᵀ·W_j, fp64 sums over c in order
    st->gram = malloc((size_t) Hq * D * D * sizeof(float));
    int32_t Lmax = 1;
    for (int k = 0; k < 2; k++)
        for (int32_t s = 0; s < sets[k]->n_seq; s++) {
            int32_t L = sets[k]->seq_start[s + 1] - sets[k]->seq_start[s];
            Lmax = L > Lmax ? L : Lmax;
        }
    st->scr = calloc((size_t) st->nt, sizeof(*st->scr));
    if (!st->gram || !st->scr) goto nomem;
    for (int32_t t = 0; t < st->nt; t++)
        if (!osc_optr_scratch_init(&st->scr[t], Lmax, p->qwin, D, D)) goto nomem;
    #pragma omp parallel for schedule(static) num_threads(st->nt)
    for (int32_t j = 0; j < Hq; j++)
        for (int32_t a = 0; a < D; a++)
            for (int32_t b = 0; b < D; b++) {
                double sum = 0.0;
                for (int32_t c = 0; c < C; c++)
                    sum += (double) in->wo[(size_t) c * Hq * D + (size_t) j * D + a] *
                           (double) in->wo[(size_t) c * Hq * D + (size_t) j * D + b];
                st->gram[((size_t) j * D + a) * D + b] = (float) sum;
            }
    const float sc = in->attn_scale > 0.0f ? in->attn_scale : 1.0f / sqrtf((float) D);
    st->hk = (struct osc_optr_head){.D = D, .g = st->g, .C = C, .sc = sc, .lambda = p->lambda, .quant = &st->p.k_quant};
    st->hv = st->hk;
    st->hv.quant = &st->p.v_quant;
    if ((rc = prepare_set(st, 0, &in->train, k_mean, p->max_train_seq)) != OSCAR_OK ||
        (rc = prepare_set(st, 1, &in->held, k_mean, 0)) != OSCAR_OK) {
        osc_optr_state_free(st);
        return rc;
    }
    int32_t nmax = st->sets[0].n_seq > st->sets[1].n_seq ? st->sets[0].n_seq : st->sets[1].n_seq;
    st->dr_items = malloc((size_t) st->Hkv * st->sets[0].n_seq * D * D * sizeof(double));
    st->loss_items = malloc((size_t) st->Hkv * nmax * sizeof(double));
    if (!st->dr_items || !st->loss_items) goto nomem;
    *out = st;
    return OSCAR_OK;
nomem:
    osc_optr_state_free(st);
    return osc_error(OSCAR_ERR_NOMEM, "optr: layer %d: out of memory", (int) in->layer);
}

// ---- losses over a set ---------------------------------------------------------------------------
enum oscar_status osc_optr_set_loss(struct osc_optr_state * st, int phase, bool held, const float * R, bool frozen,
                                    double * loss, double * dR) {
    struct set_items * si = &st->sets[held ? 1 : 0];
    const int32_t n = si->n_seq, NI = st->Hkv * n, D = st->D;
    const size_t DD = (size_t) D * D;
    if (dR && held) return osc_error(OSCAR_ERR_INVALID, "optr: no gradient on the held-out set");
    enum oscar_status rc = OSCAR_OK;
    if (dR) memset(st->dr_items, 0, (size_t) NI * DD * sizeof(double));
    #pragma omp parallel for schedule(dynamic, 1) num_threads(st->nt)
    for (int32_t i = 0; i < NI; i++) {
        const int32_t h = i / n;
        struct osc_optr_head hd = phase ? st->hv : st->hk;
        hd.gram = st->gram + (size_t) h * st->g * DD;
        struct osc_optr_scratch * s = &st->scr[omp_get_thread_num()];
        double * dri = dR ? st->dr_items + (size_t) i * DD : NULL;
        enum oscar_status e = phase ? osc_optr_loss_v(&hd, &si->it[i], R + (size_t) h * DD, 1.0 / n, frozen, dri, s,
                                                      &st->loss_items[i])
                                    : osc_optr_loss_k(&hd, &si->it[i], R + (size_t) h * DD, 1.0 / n, frozen, false,
                                                      dri, s, &st->loss_items[i]);
        if (e != OSCAR_OK) {
            #pragma omp critical
            rc = e;
        }
    }
    if (rc != OSCAR_OK) return rc;
    for (int32_t h = 0; h < st->Hkv; h++) {   // fixed-order reductions over the sequences
        double l = 0.0;
        for (int32_t s = 0; s < n; s++) l += st->loss_items[(size_t) h * n + s];
        loss[h] = l;
        if (!dR) continue;
        double * d = dR + (size_t) h * DD;
        memset(d, 0, DD * sizeof(double));
        for (int32_t s = 0; s < n; s++) {
            const double * di = st->dr_items + ((size_t) h * n + s) * DD;
            for (size_t e = 0; e < DD; e++) d[e] += di[e];
        }
    }
    return OSCAR_OK;
}

enum oscar_status osc_optr_set_phat(struct osc_optr_state * st, const float * R_k) {
    enum oscar_status rc = OSCAR_OK;
    const size_t DD = (size_t) st->D * st->D;
    for (int k = 0; k < 2 && rc == OSCAR_OK; k++) {
        struct set_items * si = &st->sets[k];
        const int32_t n = si->n_seq, NI = st->Hkv * n;
        #pragma omp parallel for schedule(dynamic, 1) num_threads(st->nt)
        for (int32_t i = 0; i < NI; i++) {
            struct osc_optr_head hd = st->hk;
            hd.gram = st->gram + (size_t) (i / n) * st->g * DD;
            double l;
            enum oscar_status e = osc_optr_loss_k(&hd, &si->it[i], R_k + (size_t) (i / n) * DD, 1.0, false, true,
                                                  NULL, &st->scr[omp_get_thread_num()], &l);
            if (e != OSCAR_OK) {
                #pragma omp critical
                rc = e;
            }
        }
    }
    return rc;
}

// ---- the exponential map -----------------------------------------------------------------------------
void osc_optr_rotation(const float * R_base, const double * A, int32_t D, float * R, double * work) {
    const size_t DD = (size_t) D * D;
    double * S = work, * E = S + DD, * Rb = E + DD, * ex = Rb + DD;   // ex: 3·D² more (expm work is 4·D²)
    for (int32_t i = 0; i < D; i++)
        for (int32_t j = 0; j < D; j++) S[(size_t) i * D + j] = A[(size_t) i * D + j] - A[(size_t) j * D + i];
    osc_optr_expm(S, D, E, ex);
    for (size_t i = 0; i < DD; i++) Rb[i] = (double) R_base[i];
    osc_dgemm(1, CblasNoTrans, CblasNoTrans, D, D, D, 1.0, Rb, D, E, D, 0.0, S, D);
    for (size_t i = 0; i < DD; i++) R[i] = (float) S[i];
}

void osc_optr_grad_a(const float * R_base, const double * A, const double * dR, int32_t D, double * gA,
                     double * work) {
    const size_t DD = (size_t) D * D;
    double * S = work, * dE = S + DD, * E = dE + DD, * ex = E + DD;   // ex: 10·D²
    for (int32_t i = 0; i < D; i++)
        for (int32_t j = 0; j < D; j++) S[(size_t) i * D + j] = A[(size_t) i * D + j] - A[(size_t) j * D + i];
    // R = R_base·E: dE = R_baseᵀ·dR
    for (int32_t a = 0; a < D; a++)
        for (int32_t b = 0; b < D; b++) {
            double sum = 0.0;
            for (int32_t i = 0; i < D; i++) sum += (double) R_base[(size_t) i * D + a] * dR[(size_t) i * D + b];
            dE[(size_t) a * D + b] = sum;
        }
    osc_optr_expm_grad(S, dE, D, E, gA, ex);   // gA holds dS for now
    for (int32_t i = 0; i < D; i++)            // S = A − Aᵀ: dA = dS − dSᵀ
        for (int32_t j = i; j < D; j++) {
            double a = gA[(size_t) i * D + j], b = gA[(size_t) j * D + i];
            gA[(size_t) i * D + j] = a - b;
            gA[(size_t) j * D + i] = b - a;
        }
}

void osc_optr_adam(double * A, double * m, double * v, const double * g, size_t n, double n_heads, double lr,
                   int32_t step) {
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    const double bc1 = 1.0 - pow(b1, step + 1), bc2 = 1.0 - pow(b2, step + 1);
    for (size_t e = 0; e < n; e++) { // the loss is the mean over heads (as the paper's .mean())
        const double gr = g[e] / n_heads;
        m[e] = b1 * m[e] + (1.0 - b1) * gr;
        v[e] = b2 * v[e] + (1.0 - b2) * gr * gr;
        A[e] -= (lr / bc1) * m[e] / (sqrt(v[e]) / sqrt(bc2) + eps);
    }
}

const struct osc_optr_item * osc_optr_set_item(const struct osc_optr_state * st, bool held, int32_t h, int32_t s) {
    const struct set_items * si = &st->sets[held ? 1 : 0];
    return h < st->Hkv && s < si->n_seq ? &si->it[(size_t) h * si->n_seq + s] : NULL;
}

int32_t osc_optr_set_n_seq(const struct osc_optr_state * st, bool held) { return st->sets[held ? 1 : 0].n_seq; }

// ---- the training loop -------------------------------------------------------------------------------
struct adam {
    double * A, * m, * v;   // [Hkv, D, D]
};

// One phase: trains R_h from base [Hkv, D, D], writes the kept rotations to out_R,
// the trajectories and the kept step per head.
static enum oscar_status run_phase(struct osc_optr_state * st, int phase, const float * base, double margin,
                                   float * out_R, double * train, double * held, int32_t * best_step) {
    const int32_t Hkv = st->Hkv, D = st->D, steps = st->p.steps;
    // the layer's heads, when these are a part of them: every head's step is the one it takes with all
    const double mean_heads = st->in.n_head_kv_layer > 0 ? st->in.n_head_kv_layer : Hkv;
    const size_t DD = (size_t) D * D, HDD = (size_t) Hkv * DD;
    struct adam ad = {calloc(HDD, sizeof(double)), calloc(HDD, sizeof(double)), calloc(HDD, sizeof(double))};
    float * R = malloc(HDD * sizeof(float)), * bestR = malloc(HDD * sizeof(float));
    double * dR = malloc(HDD * sizeof(double)), * gA = malloc(HDD * sizeof(double));
    double * work = malloc((size_t) Hkv * 13 * DD * sizeof(double)), * loss = malloc((size_t) Hkv * sizeof(double));
    double * best = malloc((size_t) Hkv * sizeof(double)), * base_held = malloc((size_t) Hkv * sizeof(double));
    enum oscar_status rc = OSCAR_ERR_NOMEM;
    if (!ad.A || !ad.m || !ad.v || !R || !bestR || !dR || !gA || !work || !loss || !best || !base_held) {
        rc = osc_error(OSCAR_ERR_NOMEM, "optr: out of memory");
        goto out;
    }
    memcpy(R, base, HDD * sizeof(float));
    memcpy(bestR, base, HDD * sizeof(float));
    for (size_t i = 0; i < (size_t) (steps + 1) * Hkv; i++) held[i] = NAN;
    if ((rc = osc_optr_set_loss(st, phase, true, R, false, base_held, NULL)) != OSCAR_OK) goto out;
    for (int32_t h = 0; h < Hkv; h++) held[h] = best[h] = base_held[h], best_step[h] = -1;
    for (int32_t step = 0; step < steps; step++) {
        if ((rc = osc_optr_set_loss(st, phase, false, R, false, loss, dR)) != OSCAR_OK) goto out;
        memcpy(train + (size_t) step * Hkv, loss, (size_t) Hkv * sizeof(double));
        #pragma omp parallel for schedule(static) num_threads(st->nt < Hkv ? st->nt : Hkv)
        for (int32_t h = 0; h < Hkv; h++) {
            double * g = gA + h * DD, * A = ad.A + h * DD, * m = ad.m + h * DD, * v = ad.v + h * DD;
            osc_optr_grad_a(base + h * DD, A, dR + h * DD, D, g, work + h * 13 * DD);
            osc_optr_adam(A, m, v, g, DD, mean_heads, st->p.lr, step);
            osc_optr_rotation(base + h * DD, A, D, R + h * DD, work + h * 13 * DD);
        }
        if (step % st->p.eval_every != 0 && step != steps - 1) continue;
        if ((rc = osc_optr_set_loss(st, phase, true, R, false, loss, NULL)) != OSCAR_OK) goto out;
        for (int32_t h = 0; h < Hkv; h++) {
            held[(size_t) (step + 1) * Hkv + h] = loss[h];
            if (loss[h] < best[h]) {
                best[h] = loss[h], best_step[h] = step;
                memcpy(bestR + h * DD, R + h * DD, DD * sizeof(float));
            }
        }
    }
    for (int32_t h = 0; h < Hkv; h++) {
        const bool keep = best_step[h] >= 0 && best[h] < base_held[h] * (1.0 - margin);
        if (!keep) best_step[h] = -1;
        memcpy(out_R + h * DD, keep ? bestR + h * DD : base + h * DD, DD * sizeof(float));
    }
    rc = OSCAR_OK;
out:
    free(ad.A); free(ad.m); free(ad.v); free(R); free(bestR); free(dR); free(gA); free(work); free(loss);
    free(best); free(base_held);
    return rc;
}

void oscar_optr_result_free(struct oscar_optr_result * r) {
    free(r->k_rot); free(r->v_rot); free(r->k_mean); free(r->k_train); free(r->v_train); free(r->k_held);
    free(r->v_held); free(r->k_best); free(r->v_best);
    memset(r, 0, sizeof(*r));
}

enum oscar_status osc_optr_result_init(const struct oscar_optr_layer * in, const struct oscar_optr_params * p,
                                      struct oscar_optr_result * r) {
    memset(r, 0, sizeof(*r));
    enum oscar_status rc = osc_optr_check(in, p);
    if (rc != OSCAR_OK) return rc;
    const int32_t Hkv = in->n_head_kv, D = in->head_dim, S = p->steps;
    const size_t HDD = (size_t) Hkv * D * D;
    r->n_head_kv = Hkv, r->head_dim = D, r->steps = S;
    r->k_rot = malloc(HDD * sizeof(float)), r->v_rot = malloc(HDD * sizeof(float));
    r->k_mean = calloc((size_t) Hkv * D, sizeof(float));
    r->k_train = malloc((size_t) S * Hkv * sizeof(double)), r->v_train = malloc((size_t) S * Hkv * sizeof(double));
    r->k_held = malloc((size_t) (S + 1) * Hkv * sizeof(double));
    r->v_held = malloc((size_t) (S + 1) * Hkv * sizeof(double));
    r->k_best = malloc((size_t) Hkv * sizeof(int32_t)), r->v_best = malloc((size_t) Hkv * sizeof(int32_t));
    if (!r->k_rot || !r->v_rot || !r->k_mean || !r->k_train || !r->v_train || !r->k_held || !r->v_held ||
        !r->k_best || !r->v_best) {
        oscar_optr_result_free(r);
        return osc_error(OSCAR_ERR_NOMEM, "optr: out of memory");
    }
    if (p->center && in->k_mean) memcpy(r->k_mean, in->k_mean, (size_t) Hkv * D * sizeof(float));
    else if (p->center) oscar_optr_key_mean(&in->train, Hkv, D, r->k_mean);
    return OSCAR_OK;
}

enum oscar_status oscar_optr_refine_layer(const struct oscar_optr_layer * in, const struct oscar_optr_params * p,
                                          struct oscar_optr_result * r) {
    enum oscar_status rc = osc_optr_result_init(in, p, r);
    if (rc != OSCAR_OK) return rc;
    osc_blas_init();
    struct osc_optr_state * st = NULL;
    if ((rc = osc_optr_prepare(in, p, p->center ? r->k_mean : NULL, &st)) != OSCAR_OK) goto out;
    r->n_train_seq = st->sets[0].n_seq, r->n_held_seq = st->sets[1].n_seq;
    if ((rc = run_phase(st, 0, in->k_rot_base, p->margin_k, r->k_rot, r->k_train, r->k_held, r->k_best)) != OSCAR_OK ||
        (rc = osc_optr_set_phat(st, r->k_rot)) != OSCAR_OK ||
        (rc = run_phase(st, 1, in->v_rot_base, p->margin_v, r->v_rot, r->v_train, r->v_held, r->v_best)) != OSCAR_OK)
        goto out;
out:
    osc_optr_state_free(st);
    if (rc != OSCAR_OK) oscar_optr_result_free(r);
    return rc;
}
