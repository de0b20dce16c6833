// kv-sim-device.c - metrics.h's simulated quantized-cache attention through a
// compute backend (contract in kv-sim-device.h). Builds, per layer call, a
// host struct oscar_kv_cache whose "sequences" are the query positions of the
// window (sharing pages), lets the backend write the INT2 rows and run one
// batched decode. Refuses what the device kernels do not implement; never
// falls back silently to another path.
#include "verify/kv-sim-device.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "quant/quant.h"
#include "rotation/rotation.h"

#define SIM_PAGE 8

struct oscar_kv_sim_dev {
    const struct oscar_backend_i * be;
    struct oscar_kv_transform tf;
    int32_t n_head, max_tokens;
};

// Per-call host buffers (one allocation set per layer call).
struct sim_bufs {
    struct oscar_kv_cache c;
    int64_t * base, * ibase, * lo, * hi;   // [n_seq]: HP / INT2 slot bases, INT2 range of the last query
    int32_t * pages;                       // HP page ids: [n_seq][ring / ps]
    int32_t * ipages;                      // INT2 page ids: [n_seq][n_int2_pages]
    uint16_t * xb;                         // [T, D] bf16 rows for the write path
    int64_t * xdst;                        // [T] destination pool row (slot * Hkv + h)
    uint8_t * codes;                       // [T, D/4]
    uint8_t * meta;                        // [T, 8]
    float * qr, * orot;                    // [T, Hq, D]
};

static const float * rot_matrix(const struct oscar_kv_transform * tf, bool is_k, int32_t layer, int32_t h) {
    const float * base = is_k ? tf->k_rotation : tf->v_rotation;
    size_t DD = (size_t) tf->head_dim * tf->head_dim, nr = tf->rot_per_head ? (size_t) tf->n_head_kv : 1;
    return base + ((size_t) layer * nr + (tf->rot_per_head ? (size_t) h : 0)) * DD;
}

// y = x.R (inverse: x.R^T), the same arithmetic as the CPU sim's rotation.
static void rotate(const struct oscar_kv_transform * tf, bool is_k, int32_t layer, int32_t h, const float * x,
                   float * y, bool inverse) {
    int32_t D = tf->head_dim;
    if (tf->rot == OSCAR_ROT_MATRIX) {
        oscar_kv_rotate_row(rot_matrix(tf, is_k, layer, h), D, x, y, inverse);
        return;
    }
    memcpy(y, x, sizeof(float) * (size_t) D);
    if (tf->rot == OSCAR_ROT_HADAMARD) oscar_fwht_f32(y, D);   // normalized, H = H^T
}

static double clip_ratio(const struct oscar_kv_transform * tf, bool is_k, int32_t layer, int32_t h) {
    const float * arr = is_k ? tf->k_clip_layer : tf->v_clip_layer;
    if (!arr) return is_k ? tf->k_clip : tf->v_clip;
    int32_t nc = tf->clip_per_head ? tf->n_head_kv : 1;
    return arr[(size_t) layer * nc + (tf->clip_per_head ? h : 0)];
}

enum oscar_status oscar_kv_sim_dev_init(const char * backend, const struct oscar_kv_transform * tf,
                                        const struct oscar_model_config * cfg, int32_t max_tokens,
                                        struct oscar_kv_sim_dev ** out) {
    const struct oscar_backend_i * be = NULL;
    *out = NULL;
    enum oscar_status st = oscar_kv_transform_check(tf);
    if (st != OSCAR_OK) return st;
    if (cfg->n_layer != tf->n_layer || cfg->n_head_kv != tf->n_head_kv || cfg->head_dim != tf->head_dim)
        return osc_error(OSCAR_ERR_INVALID, "kv sim (%s): transform '%s' does not fit model %s", backend, tf->name,
                         cfg->name);
    int32_t G = tf->int2.group_size > 0 ? tf->int2.group_size : tf->head_dim;
    if (tf->quant != OSCAR_KVQ_INT2 || tf->int2.scheme != OSCAR_INT2_ASYM || G != tf->head_dim ||
        tf->int2.meta_dtype == OSCAR_META_F16 || tf->int2.bf16_dequant || !tf->hp_bf16 || tf->tiers.block > 1)
        return osc_error(OSCAR_ERR_UNSUPPORTED,
                         "kv sim (%s): transform '%s' needs INT2 ASYM, G = D, fp32/bf16 metadata, bf16 HP tiers "
                         "and per-token quantizers", backend, tf->name);
    st = oscar_backend_get(backend, &be);
    if (st != OSCAR_OK) return st;
    if (be->kv_supports && (st = be->kv_supports(tf->head_dim, cfg->n_head, tf->n_head_kv, G)) != OSCAR_OK)
        return osc_error_prefix(st, "kv sim (%s), transform '%s'", backend, tf->name);
    struct oscar_kv_sim_dev * s = calloc(1, sizeof *s);
    if (!s) return osc_error(OSCAR_ERR_NOMEM, "kv sim (%s)", backend);
    s->be = be, s->tf = *tf, s->n_head = cfg->n_head, s->max_tokens = max_tokens;
    s->tf.int2.group_size = G;
    *out = s;
    return OSCAR_OK;
}

void oscar_kv_sim_dev_free(struct oscar_kv_sim_dev * s) { free(s); }

static void bufs_free(struct sim_bufs * b) {
    free(b->c.hp_k), free(b->c.hp_v), free(b->c.q_k), free(b->c.q_v), free(b->c.q_k_meta), free(b->c.q_v_meta);
    free(b->c.seqs);
    free(b->base), free(b->ibase), free(b->lo), free(b->hi), free(b->pages), free(b->ipages);
    free(b->xb), free(b->xdst), free(b->codes), free(b->meta), free(b->qr), free(b->orot);
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Sequence layout, tier ranges and the shared block tables.
static enum oscar_status plan(const struct oscar_kv_sim_dev * s, const struct oscar_capture_layer * in,
                              struct sim_bufs * b) {
    int32_t n_seq = in->n_seq, T = in->n_tokens, Hkv = s->tf.n_head_kv, D = s->tf.head_dim, ps = SIM_PAGE;
    const int32_t * ss = in->seq_start;
    b->base = calloc((size_t) n_seq, sizeof(int64_t)), b->ibase = calloc((size_t) n_seq, sizeof(int64_t));
    b->lo = calloc((size_t) n_seq, sizeof(int64_t)), b->hi = calloc((size_t) n_seq, sizeof(int64_t));
    if (!b->base || !b->ibase || !b->lo || !b->hi) return osc_error(OSCAR_ERR_NOMEM, "kv sim: plan");
    int64_t nhp = 0, nq = 0, ring = ps;
    for (int32_t q = 0; q < n_seq; q++) {
        int64_t len = ss[q + 1] - ss[q];
        if (in->pos[ss[q]] != 0)
            return osc_error(OSCAR_ERR_UNSUPPORTED, "kv sim: sequence %d starts at position %d; feed whole sequences",
                             q, in->pos[ss[q]]);
        oscar_tier_int2_range(&s->tf.tiers, len - 1, len, &b->lo[q], &b->hi[q]);
        if (b->hi[q] < b->lo[q]) b->hi[q] = b->lo[q];
        for (int64_t t = 0; t < len; t++) {
            int64_t lo, hi;
            oscar_tier_int2_range(&s->tf.tiers, t, len, &lo, &hi);
            if (hi > t + 1) hi = t + 1;
            if (hi > lo && (lo != b->lo[q] || hi > b->hi[q]))
                return osc_error(OSCAR_ERR_UNSUPPORTED,
                                 "kv sim: tiering gives query %lld of sequence %d the INT2 range [%lld, %lld), not "
                                 "inside [%lld, %lld)", (long long) t, q, (long long) lo, (long long) hi,
                                 (long long) b->lo[q], (long long) b->hi[q]);
        }
        b->base[q] = nhp, b->ibase[q] = nq;
        nhp += round_up(len, ps), nq += round_up(b->hi[q] - b->lo[q], ps);
        if (round_up(len, ps) > ring) ring = round_up(len, ps);
    }
    if (nq == 0) nq = ps;
    struct oscar_kv_cache * c = &b->c;
    c->p = oscar_kv_cache_default_params(Hkv, D);
    c->p.page_size = ps, c->p.n_seq_max = T, c->p.max_seq_len = ring;
    c->p.n_hp_pages = nhp / ps, c->p.n_int2_pages = nq / ps;
    c->p.k_quant = c->p.v_quant = s->tf.int2;
    c->p.k_quant.head_dim = c->p.v_quant.head_dim = D;
    c->p.demote_clip_algo = s->tf.demote_clip_algo;
    c->p.k_mean_rot = NULL;
    c->n_groups_k = c->n_groups_v = 1;
    c->ring_slots = ring;
    size_t mb = oscar_int2_meta_bytes(&c->p.k_quant);
    c->hp_k = calloc((size_t) nhp * Hkv * D, 2), c->hp_v = calloc((size_t) nhp * Hkv * D, 2);
    c->q_k = calloc((size_t) nq * Hkv * D / 4, 1), c->q_v = calloc((size_t) nq * Hkv * D / 4, 1);
    c->q_k_meta = calloc((size_t) nq * Hkv, mb), c->q_v_meta = calloc((size_t) nq * Hkv, mb);
    c->seqs = calloc((size_t) T, sizeof *c->seqs);
    int64_t np = ring / ps, nip = nq / ps;
    b->pages = malloc((size_t) n_seq * np * sizeof(int32_t));
    b->ipages = malloc((size_t) n_seq * nip * sizeof(int32_t));
    if (!c->hp_k || !c->hp_v || !c->q_k || !c->q_v || !c->q_k_meta || !c->q_v_meta || !c->seqs || !b->pages ||
        !b->ipages)
        return osc_error(OSCAR_ERR_NOMEM, "kv sim: pools for %d tokens", T);
    for (int32_t q = 0; q < n_seq; q++) {
        int32_t * hp = b->pages + (size_t) q * np, * ip = b->ipages + (size_t) q * nip;
        int64_t last = (b->base[q] + round_up(ss[q + 1] - ss[q], ps)) / ps - 1;
        for (int64_t k = 0; k < np; k++) {
            int64_t pg = b->base[q] / ps + k;
            hp[k] = (int32_t) (pg <= last ? pg : last);   // ring pages past the sequence are never read
        }
        for (int64_t k = 0; k < nip; k++) ip[k] = (int32_t) (b->ibase[q] / ps + k < nip ? b->ibase[q] / ps + k : 0);
        int64_t len = ss[q + 1] - ss[q];
        for (int64_t t = 0; t < len; t++) {
            struct oscar_kv_seq * e = &c->seqs[ss[q] + t];
            int64_t lo, hi;
            oscar_tier_int2_range(&s->tf.tiers, t, len, &lo, &hi);
            if (hi > t + 1) hi = t + 1;
            e->len = t + 1;
            if (hi > lo) e->n_sink = lo, e->n_int2 = hi - lo;
            e->n_recent = e->len - e->n_sink - e->n_int2;
            e->prefill_done = true;
            e->sink_pages = hp, e->recent_pages = hp, e->int2_pages = ip;
            e->n_sink_pages = (int32_t) ((e->n_sink + ps - 1) / ps);
            e->n_int2_pages = (int32_t) ((e->n_int2 + ps - 1) / ps);
            e->n_recent_pages = (int32_t) np;
        }
    }
    b->xb = malloc((size_t) T * D * 2), b->xdst = malloc((size_t) T * sizeof(int64_t));
    b->codes = malloc((size_t) T * D / 4), b->meta = malloc((size_t) T * 8);
    b->qr = malloc((size_t) T * s->n_head * D * sizeof(float));
    b->orot = malloc((size_t) T * s->n_head * D * sizeof(float));
    if (!b->xb || !b->xdst || !b->codes || !b->meta || !b->qr || !b->orot)
        return osc_error(OSCAR_ERR_NOMEM, "kv sim: row buffers for %d tokens", T);
    return OSCAR_OK;
}

// Rotates + bf16-rounds every row of KV head h (K or V) into the HP pool, then
// writes the INT2-capable rows through the backend, one call per clip path.
static enum oscar_status write_head(const struct oscar_kv_sim_dev * s, int32_t layer, int32_t h, bool is_k,
                                    const struct oscar_capture_layer * in, struct sim_bufs * b) {
    const struct oscar_kv_transform * tf = &s->tf;
    int32_t Hkv = tf->n_head_kv, D = tf->head_dim;
    struct oscar_kv_cache * c = &b->c;
    const float * src = is_k ? in->k : in->v;
    const float * mu = (is_k && tf->k_mean) ? tf->k_mean + ((size_t) layer * Hkv + h) * D : NULL;
    uint16_t * hp = is_k ? c->hp_k : c->hp_v;
    uint8_t * qc = is_k ? c->q_k : c->q_v, * qm = is_k ? c->q_k_meta : c->q_v_meta;
    size_t mb = oscar_int2_meta_bytes(&c->p.k_quant);
    float xc[OSCAR_MAX_HEAD_DIM], y[OSCAR_MAX_HEAD_DIM];
    for (int path = 0; path < 2; path++) {   // 0: prefill rows, 1: demoted rows
        int64_t n = 0;
        for (int32_t q = 0; q < in->n_seq; q++) {
            int64_t len = in->seq_start[q + 1] - in->seq_start[q];
            for (int64_t p = 0; p < len; p++) {
                const float * x = src + ((size_t) (in->seq_start[q] + p) * Hkv + h) * D;
                for (int32_t d = 0; d < D; d++) xc[d] = mu ? x[d] - mu[d] : x[d];
                rotate(tf, is_k, layer, h, xc, y, false);
                uint16_t * row = hp + ((size_t) (b->base[q] + p) * Hkv + h) * D;
                for (int32_t d = 0; d < D; d++) row[d] = oscar_f32_to_bf16(y[d]);
                bool want = p >= b->lo[q] && p < b->hi[q];
                bool pre = oscar_tier_from_prefill(&tf->tiers, p, len);
                if (!want || pre != (path == 0)) continue;
                memcpy(b->xb + (size_t) n * D, row, (size_t) D * 2);
                b->xdst[n++] = (b->ibase[q] + p - b->lo[q]) * Hkv + h;
            }
        }
        if (n == 0) continue;
        struct oscar_int2_params p = tf->int2;
        p.head_dim = D;
        p.clip_ratio = clip_ratio(tf, is_k, layer, h);
        if (path == 1) p.clip_algo = tf->demote_clip_algo;
        enum oscar_status st = s->be->int2_rotate_quantize(&p, NULL, b->xb, n, b->codes, b->meta);
        if (st != OSCAR_OK) return st;
        for (int64_t r = 0; r < n; r++) {
            memcpy(qc + (size_t) b->xdst[r] * (D / 4), b->codes + (size_t) r * (D / 4), (size_t) D / 4);
            memcpy(qm + (size_t) b->xdst[r] * mb, b->meta + (size_t) r * mb, mb);
        }
    }
    return OSCAR_OK;
}

static enum oscar_status sim_dev_attend(void * user, int32_t layer, const struct oscar_capture_layer * in,
                                        float * out) {
    struct oscar_kv_sim_dev * s = user;
    const struct oscar_kv_transform * tf = &s->tf;
    int32_t T = in->n_tokens, Hq = s->n_head, Hkv = tf->n_head_kv, D = tf->head_dim, g = Hq / Hkv;
    struct sim_bufs b;
    struct oscar_backend_kv * kv = NULL;
    memset(&b, 0, sizeof b);
    enum oscar_status st = OSCAR_OK;
    if (T > s->max_tokens) {
        st = osc_error(OSCAR_ERR_INVALID, "kv sim: batch of %d tokens > %d", T, s->max_tokens);
        goto out;
    }
    st = plan(s, in, &b);
    for (int32_t h = 0; h < Hkv && st == OSCAR_OK; h++) {
        st = write_head(s, layer, h, true, in, &b);
        if (st == OSCAR_OK) st = write_head(s, layer, h, false, in, &b);
    }
    if (st != OSCAR_OK) goto out;
    for (int64_t r = 0; r < (int64_t) T * Hq; r++)
        rotate(tf, true, layer, (int32_t) (r % Hq) / g, in->q + (size_t) r * D, b.qr + (size_t) r * D, false);
    st = s->be->kv_upload(&b.c, &kv);
    if (st == OSCAR_OK) st = s->be->decode_attention(kv, T, b.qr, Hq, NULL, b.orot);
    if (st != OSCAR_OK) goto out;
    for (int64_t r = 0; r < (int64_t) T * Hq; r++)
        rotate(tf, false, layer, (int32_t) (r % Hq) / g, b.orot + (size_t) r * D, out + (size_t) r * D, true);
out:
    if (kv) s->be->kv_free(kv);
    bufs_free(&b);
    return st;
}

struct oscar_attention_override oscar_kv_sim_dev_override(struct oscar_kv_sim_dev * s) {
    struct oscar_attention_override o = {.attend = sim_dev_attend, .user = s};
    return o;
}
