// stats.c - life cycle of the streaming accumulators: allocation, staging of
// incoming rows into fixed blocks, passes, and finalised matrices.
//
// It never reduces rows itself (stats-block.c does, one full block at a time)
// and never reads files (checkpoint.c serialises the state).
//
// L = n_layer, Hq, Hkv, D, g = Hq/Hkv, B = OSCAR_STATS_BLOCK, T = tokens.
#include "stats/stats-internal.h"
#include "util/cli.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define ATT_QBLOCK 64 // query rows per attention-mass block (attn-mass.c)

struct oscar_stats_params oscar_stats_default_params(void) {
    struct oscar_stats_params p;
    memset(&p, 0, sizeof p);
    p.kinds = OSCAR_STATS_QQT | OSCAR_STATS_SST;
    return p;
}

static enum oscar_status check_params(const struct oscar_stats_params * p) {
    if (p->n_layer < 1 || p->n_layer > 4096 || p->n_head_kv < 1 || p->n_head_kv > 1024 || p->n_head < 1 ||
        p->n_head > 8192 || p->head_dim < 1 || p->head_dim > 1024) {
        return osc_error(OSCAR_ERR_INVALID, "stats: bad shape (layers %d, heads %d/%d, head_dim %d)",
                         (int) p->n_layer, (int) p->n_head, (int) p->n_head_kv, (int) p->head_dim);
    }
    if (!(p->attn_scale >= 0.0f) || isinf(p->attn_scale)) {
        return osc_error(OSCAR_ERR_INVALID, "stats: score scale %g is not a finite value >= 0", (double) p->attn_scale);
    }
    if (p->n_head % p->n_head_kv != 0) {
        return osc_error(OSCAR_ERR_INVALID, "stats: n_head %d is not a multiple of n_head_kv %d",
                         (int) p->n_head, (int) p->n_head_kv);
    }
    const uint32_t all = OSCAR_STATS_KTK | OSCAR_STATS_VTV | OSCAR_STATS_QQT | OSCAR_STATS_SST | OSCAR_STATS_VATT;
    if (p->kinds == 0 || (p->kinds & ~all)) {
        return osc_error(OSCAR_ERR_INVALID, "stats: bad kind set 0x%x", (unsigned) p->kinds);
    }
    if ((p->kinds & OSCAR_STATS_SST) && !(p->kinds & OSCAR_STATS_QQT)) {
        return osc_error(OSCAR_ERR_INVALID, "stats: sst needs qqt (its weights use the final A_h)");
    }
    if (p->n_threads < 0 || p->n_threads > OSC_MAX_THREADS || p->max_tokens < 0) {
        return osc_error(OSCAR_ERR_INVALID, "stats: n_threads %d (0 .. %d) or max_tokens %d out of range",
                         (int) p->n_threads, OSC_MAX_THREADS, (int) p->max_tokens);
    }
    return OSCAR_OK;
}

static void * zalloc(size_t n, size_t size, bool want, bool * fail) {
    if (!want) return NULL;
    void * p = calloc(n ? n : 1, size);
    if (!p) *fail = true;
    return p;
}

enum oscar_status osc_stats_alloc(const struct oscar_stats_params * p, struct oscar_stats ** out) {
    *out = NULL;
    enum oscar_status st = check_params(p);
    if (st != OSCAR_OK) return st;
    struct oscar_stats * s = calloc(1, sizeof *s);
    if (!s) return osc_error(OSCAR_ERR_NOMEM, "stats: out of memory");
    s->p = *p;
    s->g = p->n_head / p->n_head_kv;
    s->dd = (size_t) p->head_dim * (size_t) p->head_dim;
    s->n_threads = p->n_threads > 0 ? p->n_threads : omp_get_max_threads();
    s->max_tokens = p->max_tokens > 0 ? p->max_tokens : 4096;
    s->p.max_tokens = s->max_tokens;
    s->p.n_threads = p->n_threads;

    const size_t L = (size_t) p->n_layer, H = (size_t) p->n_head_kv, D = (size_t) p->head_dim;
    const size_t B = OSCAR_STATS_BLOCK, g = (size_t) s->g;
    const size_t mats = L * H * s->dd;
    const uint32_t k = p->kinds;
    bool fail = false;
    s->ktk = zalloc(mats, sizeof(double), k & OSCAR_STATS_KTK, &fail);
    s->vtv = zalloc(mats, sizeof(double), k & OSCAR_STATS_VTV, &fail);
    s->qqt = zalloc(mats, sizeof(double), k & OSCAR_STATS_QQT, &fail);
    s->sst = zalloc(mats, sizeof(double), k & OSCAR_STATS_SST, &fail);
    s->vatt = zalloc(mats, sizeof(double), k & OSCAR_STATS_VATT, &fail);
    s->sst_wsum = zalloc(L * H, sizeof(double), true, &fail);
    s->vatt_wsum = zalloc(L * H, sizeof(double), true, &fail);
    s->sst_nneg = zalloc(L * H, sizeof(int64_t), true, &fail);
    s->n_tok1 = zalloc(L, sizeof(int64_t), true, &fail);
    s->n_tok2 = zalloc(L, sizeof(int64_t), true, &fail);
    s->n_pend = zalloc(L, sizeof(int32_t), true, &fail);
    s->phase = zalloc(L, sizeof(int32_t), true, &fail);
    s->st_q = zalloc(L * B * (size_t) p->n_head * D, sizeof(float), osc_stats_has_q(s), &fail);
    s->st_k = zalloc(L * B * H * D, sizeof(float), osc_stats_has_k(s), &fail);
    s->st_v = zalloc(L * B * H * D, sizeof(float), osc_stats_has_v(s), &fail);
    s->st_w = zalloc(L * B * H, sizeof(double), osc_stats_has_w(s), &fail);
    // per thread: gather G [B*g, D], Y [B, D], P [D, D], w [B]
    s->scr_per_thread = B * (g > 1 ? g : 1) * D + B * D + s->dd + B;
    s->scr = zalloc((size_t) s->n_threads * s->scr_per_thread, sizeof(double), true, &fail);
    if (osc_stats_has_w(s)) {
        const size_t T = (size_t) s->max_tokens;
        // per thread: K_h [T, D], Q block [QB, D], logits [QB, T], column energy [T]
        s->att_per_thread = T * D + ATT_QBLOCK * D + ATT_QBLOCK * T + T;
        s->att_scr = zalloc((size_t) s->n_threads * s->att_per_thread, sizeof(double), true, &fail);
        s->wchunk = zalloc(T * H, sizeof(double), true, &fail);
    }
    for (size_t l = 0; !fail && l < L; l++) s->phase[l] = 1;
    if (fail) {
        oscar_stats_free(s);
        return osc_error(OSCAR_ERR_NOMEM, "stats: out of memory for %d layers x %d KV heads x %dx%d accumulators",
                         (int) p->n_layer, (int) p->n_head_kv, (int) p->head_dim, (int) p->head_dim);
    }
    *out = s;
    return OSCAR_OK;
}

enum oscar_status oscar_stats_init(const struct oscar_stats_params * p, struct oscar_stats ** out) {
    return osc_stats_alloc(p, out);
}

void oscar_stats_free(struct oscar_stats * s) {
    if (!s) return;
    free(s->ktk); free(s->vtv); free(s->qqt); free(s->sst); free(s->vatt);
    free(s->sst_wsum); free(s->vatt_wsum); free(s->sst_nneg);
    free(s->n_tok1); free(s->n_tok2); free(s->n_pend); free(s->phase);
    free(s->st_q); free(s->st_k); free(s->st_v); free(s->st_w);
    free(s->scr); free(s->att_scr); free(s->wchunk);
    free(s->parts); free(s->n_tok1_own);
    free(s);
}

struct oscar_stats_params oscar_stats_get_params(const struct oscar_stats * s) { return s->p; }
int32_t oscar_stats_phase(const struct oscar_stats * s) {
    int32_t ph = 3;
    for (int32_t l = 0; l < s->p.n_layer; l++) ph = s->phase[l] < ph ? s->phase[l] : ph;
    return ph;
}

int32_t oscar_stats_layer_phase(const struct oscar_stats * s, int32_t layer) {
    OSCAR_ASSERT(layer >= 0 && layer < s->p.n_layer);
    return s->phase[layer];
}

// ---- adding rows ---------------------------------------------------------------

static enum oscar_status check_finite(const float * x, int32_t T, int32_t H, int32_t D, const char * name,
                                      int32_t layer) {
    const size_t row = (size_t) H * (size_t) D;
    for (int32_t t = 0; t < T; t++) {
        const float * r = x + (size_t) t * row;
        for (size_t i = 0; i < row; i++) {
            if (!isfinite(r[i])) {
                return osc_error(OSCAR_ERR_NUMERIC, "stats: layer %d: non-finite %s at token %d, head %d, dim %d",
                                 (int) layer, name, (int) t, (int) (i / (size_t) D), (int) (i % (size_t) D));
            }
        }
    }
    return OSCAR_OK;
}

static enum oscar_status check_chunk(const struct oscar_stats * s, const struct oscar_stats_chunk * c) {
    const struct oscar_stats_params * p = &s->p;
    if (c->layer < 0 || c->layer >= p->n_layer || c->n_tokens < 0) {
        return osc_error(OSCAR_ERR_INVALID, "stats: bad chunk (layer %d of %d, %d tokens)", (int) c->layer,
                         (int) p->n_layer, (int) c->n_tokens);
    }
    const int32_t phase = s->phase[c->layer];
    if (phase == 3) return osc_error(OSCAR_ERR_INVALID, "stats: layer %d: add after the last pass ended", (int) c->layer);
    const bool p1 = phase == 1;
    const bool need_q = p1 && (osc_stats_has_q(s) || osc_stats_has_w(s));
    const bool need_k = (p1 && (p->kinds & (OSCAR_STATS_KTK | OSCAR_STATS_VATT))) || !p1;
    const bool need_v = (p1 && (p->kinds & (OSCAR_STATS_VTV | OSCAR_STATS_VATT))) || !p1;
    if ((need_q && !c->q) || (need_k && !c->k) || (need_v && !c->v)) {
        return osc_error(OSCAR_ERR_INVALID, "stats: layer %d: chunk lacks q, k or v needed in pass %d",
                         (int) c->layer, (int) phase);
    }
    enum oscar_status st = OSCAR_OK;
    if (need_q) st = check_finite(c->q, c->n_tokens, p->n_head, p->head_dim, "q", c->layer);
    if (st == OSCAR_OK && need_k) st = check_finite(c->k, c->n_tokens, p->n_head_kv, p->head_dim, "k", c->layer);
    if (st == OSCAR_OK && need_v) st = check_finite(c->v, c->n_tokens, p->n_head_kv, p->head_dim, "v", c->layer);
    if (st != OSCAR_OK || !(p1 && osc_stats_has_w(s))) return st;
    if (c->n_tokens > s->max_tokens) {
        return osc_error(OSCAR_ERR_INVALID, "stats: layer %d: chunk of %d tokens exceeds max_tokens %d",
                         (int) c->layer, (int) c->n_tokens, (int) s->max_tokens);
    }
    if (c->window < 0)
        return osc_error(OSCAR_ERR_INVALID, "stats: layer %d: window %d < 0", (int) c->layer, (int) c->window);
    if (c->n_seq < 0 || (c->n_seq > 0 && !c->seq_start) || (c->n_seq == 0 && c->n_tokens > 0)) {
        return osc_error(OSCAR_ERR_INVALID, "stats: layer %d: attention-mass weights need sequence boundaries",
                         (int) c->layer);
    }
    if (c->n_seq > 0 && (c->seq_start[0] != 0 || c->seq_start[c->n_seq] != c->n_tokens)) {
        return osc_error(OSCAR_ERR_INVALID, "stats: layer %d: seq_start must run from 0 to %d", (int) c->layer,
                         (int) c->n_tokens);
    }
    for (int32_t i = 0; i < c->n_seq; i++) {
        if (c->seq_start[i + 1] < c->seq_start[i]) {
            return osc_error(OSCAR_ERR_INVALID, "stats: layer %d: seq_start decreases at %d", (int) c->layer, (int) i);
        }
    }
    return OSCAR_OK;
}

// Copies rows [t0, t0 + n) of the chunk into the layer's stage.
static void stage_rows(struct oscar_stats * s, const struct oscar_stats_chunk * c, int32_t t0, int32_t n) {
    const size_t B = OSCAR_STATS_BLOCK, l = (size_t) c->layer, pend = (size_t) s->n_pend[l];
    const size_t qrow = (size_t) s->p.n_head * (size_t) s->p.head_dim;
    const size_t kvrow = (size_t) s->p.n_head_kv * (size_t) s->p.head_dim;
    const size_t H = (size_t) s->p.n_head_kv;
    const int32_t phase = s->phase[l];
    if (phase == 1 && osc_stats_has_q(s)) {
        memcpy(s->st_q + (l * B + pend) * qrow, c->q + (size_t) t0 * qrow, (size_t) n * qrow * sizeof(float));
    }
    const bool want_k = phase == 2 || (s->p.kinds & OSCAR_STATS_KTK);
    if (want_k && s->st_k) {
        memcpy(s->st_k + (l * B + pend) * kvrow, c->k + (size_t) t0 * kvrow, (size_t) n * kvrow * sizeof(float));
    }
    const bool want_v = phase == 2 || (s->p.kinds & (OSCAR_STATS_VTV | OSCAR_STATS_VATT));
    if (want_v && s->st_v) {
        memcpy(s->st_v + (l * B + pend) * kvrow, c->v + (size_t) t0 * kvrow, (size_t) n * kvrow * sizeof(float));
    }
    if (phase == 1 && osc_stats_has_w(s)) {
        memcpy(s->st_w + (l * B + pend) * H, s->wchunk + (size_t) t0 * H, (size_t) n * H * sizeof(double));
    }
    s->n_pend[l] += n;
}

enum oscar_status oscar_stats_add(struct oscar_stats * s, const struct oscar_stats_chunk * c) {
    enum oscar_status st = check_chunk(s, c);
    if (st != OSCAR_OK) return st;
    const bool p1 = s->phase[c->layer] == 1;
    if (p1 && osc_stats_has_w(s)) osc_stats_attn_mass(s, c);
    int32_t t = 0;
    while (t < c->n_tokens) {
        int32_t n = OSCAR_STATS_BLOCK - s->n_pend[c->layer];
        if (n > c->n_tokens - t) n = c->n_tokens - t;
        stage_rows(s, c, t, n);
        t += n;
        if (s->n_pend[c->layer] == OSCAR_STATS_BLOCK) osc_stats_flush_layer(s, c->layer);
    }
    if (p1) s->n_tok1[c->layer] += c->n_tokens;
    else s->n_tok2[c->layer] += c->n_tokens;
    return OSCAR_OK;
}

// Checks that layer l may end its current pass (nothing changes).
static enum oscar_status check_layer_end(const struct oscar_stats * s, int32_t l) {
    if (s->phase[l] == 3) return osc_error(OSCAR_ERR_INVALID, "stats: layer %d: every pass has already ended", (int) l);
    if (s->phase[l] == 1 && s->n_tok1[l] == 0)
        return osc_error(OSCAR_ERR_INVALID, "stats: layer %d saw no tokens in pass 1", (int) l);
    // a data-parallel pass 1 ends with the group's count; this process's pass 2 sees its own tokens
    const int64_t own1 = s->n_tok1_own ? s->n_tok1_own[l] : s->n_tok1[l];
    if (s->phase[l] == 2 && s->n_tok2[l] != own1)
        return osc_error(OSCAR_ERR_INVALID, "stats: layer %d saw %lld tokens in pass 2 but %lld in pass 1", (int) l,
                         (long long) s->n_tok2[l], (long long) own1);
    return OSCAR_OK;
}

// Flushes layer l, hands it to the layer hook (a data-parallel run's exchange), advances its phase.
static enum oscar_status end_layer(struct oscar_stats * s, int32_t l) {
    osc_stats_flush_layer(s, l);
    enum oscar_status st = osc_stats_parts_status(s, l);
    if (st == OSCAR_OK && s->layer_hook) st = s->layer_hook(s->hook_user, s, l, s->phase[l]);
    if (st != OSCAR_OK) return st;
    osc_stats_parts_clear(s);
    s->phase[l] = (s->phase[l] == 1 && (s->p.kinds & OSCAR_STATS_SST)) ? 2 : 3;
    return OSCAR_OK;
}

enum oscar_status oscar_stats_end_layer_pass(struct oscar_stats * s, int32_t layer) {
    if (layer < 0 || layer >= s->p.n_layer)
        return osc_error(OSCAR_ERR_INVALID, "stats: no layer %d of %d", (int) layer, (int) s->p.n_layer);
    enum oscar_status st = check_layer_end(s, layer);
    return st == OSCAR_OK ? end_layer(s, layer) : st;
}

enum oscar_status oscar_stats_end_pass(struct oscar_stats * s) {
    const int32_t phase = oscar_stats_phase(s);
    for (int32_t l = 0; l < s->p.n_layer; l++) {
        if (s->phase[l] != phase)
            return osc_error(OSCAR_ERR_INVALID, "stats: layer %d is in pass %d, others in %d: end layers one by one",
                             (int) l, (int) s->phase[l], (int) phase);
        enum oscar_status st = check_layer_end(s, l);
        if (st != OSCAR_OK) return st;
    }
    for (int32_t l = 0; l < s->p.n_layer; l++) {
        enum oscar_status st = end_layer(s, l);
        if (st != OSCAR_OK) return st;
    }
    return OSCAR_OK;
}
