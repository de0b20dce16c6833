// paged-cache.c - the paged, tiered KV cache of one layer (kv-cache.h):
// BF16 sink pages, INT2 pages, a BF16 recent ring; placement and demotion by
// the policy functions of demotion.c. Pools are allocated once at init; no
// allocation happens per token. Refuses shapes it cannot hold (pool or block
// table exhausted -> OSCAR_ERR_NOMEM / OSCAR_ERR_INVALID, never an abort).
//
// Ranges: Hkv = n_head_kv, D = head_dim, ps = page_size, N_Q = n_flush.
#include "attention/kv-cache.h"
#include "quant/quant-internal.h"

#include <stdlib.h>
#include <string.h>

struct oscar_kv_cache_params oscar_kv_cache_default_params(int32_t n_head_kv, int32_t head_dim) {
    struct oscar_kv_cache_params p = {
        .n_head_kv = n_head_kv, .head_dim = head_dim, .page_size = 8, .n_sink = 64, .n_recent = 256,
        .n_flush = 8, .n_seq_max = 1, .max_seq_len = 32768, .n_hp_pages = 0, .n_int2_pages = 0,
        .k_quant = oscar_int2_default_params(head_dim), .v_quant = oscar_int2_default_params(head_dim),
        .demote_clip_algo = OSCAR_CLIP_FLUSH, .k_mean_rot = NULL,
    };
    p.k_quant.clip_ratio = 0.96;
    p.v_quant.clip_ratio = 0.92;
    return p;
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static size_t hp_row_elems(const struct oscar_kv_cache * c) {
    return (size_t) c->p.n_head_kv * (size_t) c->p.head_dim;
}

static enum oscar_status check_params(const struct oscar_kv_cache_params * p) {
    if (p->n_head_kv < 1 || p->head_dim < 4 || p->page_size < 1 || p->n_sink < 0 || p->n_recent < 1 ||
        p->n_flush < 1 || p->n_flush > 4096 || p->n_seq_max < 1 || p->max_seq_len < 1)
        return osc_error(OSCAR_ERR_INVALID,
                         "kv cache: bad params (Hkv %d, D %d, page %d, P %d, R %d, N_Q %d, seqs %d, len %lld)",
                         p->n_head_kv, p->head_dim, p->page_size, p->n_sink, p->n_recent, p->n_flush,
                         p->n_seq_max, (long long) p->max_seq_len);
    if (p->k_quant.head_dim != p->head_dim || p->v_quant.head_dim != p->head_dim)
        return osc_error(OSCAR_ERR_INVALID, "kv cache: quantizer head_dim differs from %d", p->head_dim);
    if (p->k_quant.meta_dtype != p->v_quant.meta_dtype)
        return osc_error(OSCAR_ERR_INVALID, "kv cache: K and V metadata dtypes must match");
    enum oscar_status st = oscar_int2_params_check(&p->k_quant);
    if (st == OSCAR_OK) st = oscar_int2_params_check(&p->v_quant);
    return st;
}

enum oscar_status oscar_kv_cache_init(const struct oscar_kv_cache_params * p, struct oscar_kv_cache ** out) {
    enum oscar_status st = check_params(p);
    if (st != OSCAR_OK) return st;
    struct oscar_kv_cache * c = calloc(1, sizeof *c);
    if (!c) return osc_error(OSCAR_ERR_NOMEM, "kv cache");
    c->p          = *p;
    c->n_groups_k = oscar_int2_n_groups(&p->k_quant);
    c->n_groups_v = oscar_int2_n_groups(&p->v_quant);
    int64_t ps    = p->page_size;
    c->ring_slots = cdiv(p->n_recent + p->n_flush - 1, ps) * ps;
    int64_t sink_pg = cdiv(p->n_sink, ps), ring_pg = c->ring_slots / ps, int2_pg = cdiv(p->max_seq_len, ps);
    if (c->p.n_hp_pages <= 0) c->p.n_hp_pages = (sink_pg + ring_pg) * p->n_seq_max;
    if (c->p.n_int2_pages <= 0) c->p.n_int2_pages = int2_pg * p->n_seq_max;
    int64_t Shp = c->p.n_hp_pages * ps, Sq = c->p.n_int2_pages * ps, Hkv = p->n_head_kv, D = p->head_dim;
    size_t mk = oscar_int2_meta_bytes(&p->k_quant), mv = oscar_int2_meta_bytes(&p->v_quant);
    c->hp_k     = malloc((size_t) (Shp * Hkv * D) * sizeof(uint16_t));
    c->hp_v     = malloc((size_t) (Shp * Hkv * D) * sizeof(uint16_t));
    c->q_k      = malloc((size_t) (Sq * Hkv * D / 4));
    c->q_v      = malloc((size_t) (Sq * Hkv * D / 4));
    c->q_k_meta = malloc((size_t) (Sq * Hkv) * mk);
    c->q_v_meta = malloc((size_t) (Sq * Hkv) * mv);
    c->hp_free  = malloc((size_t) c->p.n_hp_pages * sizeof(int32_t));
    c->q_free   = malloc((size_t) c->p.n_int2_pages * sizeof(int32_t));
    c->seqs     = calloc((size_t) p->n_seq_max, sizeof *c->seqs);
    int64_t stage = (ps > p->n_flush ? ps : p->n_flush);
    c->scratch  = malloc((size_t) (stage * Hkv * D) * sizeof(float) * 2);
    if (p->k_mean_rot) c->mu_rot = malloc((size_t) (Hkv * D) * sizeof(float));
    bool ok = c->hp_k && c->hp_v && c->q_k && c->q_v && c->q_k_meta && c->q_v_meta && c->hp_free &&
              c->q_free && c->seqs && c->scratch && (!p->k_mean_rot || c->mu_rot);
    for (int32_t s = 0; ok && s < p->n_seq_max; s++) {
        struct oscar_kv_seq * q = &c->seqs[s];
        q->sink_pages   = malloc((size_t) (sink_pg > 0 ? sink_pg : 1) * sizeof(int32_t));
        q->int2_pages   = malloc((size_t) int2_pg * sizeof(int32_t));
        q->recent_pages = malloc((size_t) ring_pg * sizeof(int32_t));
        q->is_hp        = malloc((size_t) p->max_seq_len);
        ok = q->sink_pages && q->int2_pages && q->recent_pages && q->is_hp;
    }
    if (!ok) {
        oscar_kv_cache_free(c);
        return osc_error(OSCAR_ERR_NOMEM, "kv cache: pools of %lld HP + %lld INT2 pages", (long long) Shp / ps,
                         (long long) Sq / ps);
    }
    if (p->k_mean_rot) {
        memcpy(c->mu_rot, p->k_mean_rot, (size_t) (Hkv * D) * sizeof(float));
        c->p.k_mean_rot = c->mu_rot;
    }
    for (int64_t i = 0; i < c->p.n_hp_pages; i++) c->hp_free[i] = (int32_t) (c->p.n_hp_pages - 1 - i);
    for (int64_t i = 0; i < c->p.n_int2_pages; i++) c->q_free[i] = (int32_t) (c->p.n_int2_pages - 1 - i);
    c->n_hp_free = c->p.n_hp_pages;
    c->n_q_free  = c->p.n_int2_pages;
    for (int32_t s = 0; s < p->n_seq_max; s++) {
        for (int64_t i = 0; i < ring_pg; i++) c->seqs[s].recent_pages[i] = -1;
    }
    *out = c;
    return OSCAR_OK;
}

void oscar_kv_cache_free(struct oscar_kv_cache * c) {
    if (!c) return;
    for (int32_t s = 0; c->seqs && s < c->p.n_seq_max; s++) {
        free(c->seqs[s].sink_pages);
        free(c->seqs[s].int2_pages);
        free(c->seqs[s].recent_pages);
        free(c->seqs[s].is_hp);
    }
    free(c->seqs);
    free(c->hp_k), free(c->hp_v), free(c->q_k), free(c->q_v), free(c->q_k_meta), free(c->q_v_meta);
    free(c->hp_free), free(c->q_free), free(c->scratch), free(c->mu_rot);
    free(c);
}

void oscar_kv_cache_seq_reset(struct oscar_kv_cache * c, int32_t seq) {
    struct oscar_kv_seq * q = &c->seqs[seq];
    for (int32_t i = 0; i < q->n_sink_pages; i++) c->hp_free[c->n_hp_free++] = q->sink_pages[i];
    for (int32_t i = 0; i < q->n_int2_pages; i++) c->q_free[c->n_q_free++] = q->int2_pages[i];
    for (int64_t i = 0; i < c->ring_slots / c->p.page_size; i++) {
        if (q->recent_pages[i] >= 0) c->hp_free[c->n_hp_free++] = q->recent_pages[i];
        q->recent_pages[i] = -1;
    }
    q->len = q->n_sink = q->n_int2 = q->n_recent = 0;
    q->n_sink_pages = q->n_int2_pages = q->n_recent_pages = 0;
    q->counter      = 0;
    q->prefill_done = false;
}

// ---- slots ------------------------------------------------------------------------

static enum oscar_status take_page(int32_t * stack, int64_t * n, const char * pool, int32_t * page) {
    if (*n == 0) return osc_error(OSCAR_ERR_NOMEM, "kv cache: %s page pool exhausted", pool);
    *page = stack[--*n];
    return OSCAR_OK;
}

int64_t oscar_kv_cache_slot(const struct oscar_kv_cache * c, int32_t seq, int64_t pos, enum oscar_kv_tier * tier) {
    const struct oscar_kv_seq * q = &c->seqs[seq];
    int64_t ps = c->p.page_size;
    if (pos < q->n_sink) {
        if (tier) *tier = OSCAR_TIER_SINK;
        return (int64_t) q->sink_pages[pos / ps] * ps + pos % ps;
    }
    if (pos < q->n_sink + q->n_int2) {
        int64_t j = pos - q->n_sink;
        if (tier) *tier = OSCAR_TIER_INT2;
        return (int64_t) q->int2_pages[j / ps] * ps + j % ps;
    }
    int64_t r = pos % c->ring_slots;
    if (tier) *tier = OSCAR_TIER_RECENT;
    return (int64_t) q->recent_pages[r / ps] * ps + r % ps;
}

// Prepares one token's rows for storage: K centred (if configured), both bf16-rounded.
static void prepare_rows(const struct oscar_kv_cache * c, const float * k, const float * v, float * kb, float * vb) {
    size_t n = hp_row_elems(c);
    for (size_t i = 0; i < n; i++) {
        kb[i] = oscar_bf16_round(c->mu_rot ? k[i] - c->mu_rot[i] : k[i]);
        vb[i] = oscar_bf16_round(v[i]);
    }
}

static void store_hp(struct oscar_kv_cache * c, int64_t slot, const float * kb, const float * vb) {
    size_t n = hp_row_elems(c);
    for (size_t i = 0; i < n; i++) {
        c->hp_k[(size_t) slot * n + i] = oscar_f32_to_bf16(kb[i]);
        c->hp_v[(size_t) slot * n + i] = oscar_f32_to_bf16(vb[i]);
    }
}

static enum oscar_status append_sink(struct oscar_kv_cache * c, int32_t seq, const float * kb, const float * vb) {
    struct oscar_kv_seq * q = &c->seqs[seq];
    int64_t ps = c->p.page_size, j = q->n_sink;
    if (j % ps == 0) {
        enum oscar_status st = take_page(c->hp_free, &c->n_hp_free, "HP", &q->sink_pages[q->n_sink_pages]);
        if (st != OSCAR_OK) return st;
        q->n_sink_pages++;
    }
    store_hp(c, (int64_t) q->sink_pages[j / ps] * ps + j % ps, kb, vb);
    q->is_hp[q->len] = 1;
    q->n_sink++;
    q->len++;
    return OSCAR_OK;
}

// Appends one INT2 token (rows kb/vb already prepared) at the end of the INT2 tier.
static enum oscar_status append_int2(struct oscar_kv_cache * c, int32_t seq, const float * kb, const float * vb,
                                     const struct oscar_int2_params * pk, const struct oscar_int2_params * pv) {
    struct oscar_kv_seq * q = &c->seqs[seq];
    int64_t ps = c->p.page_size, j = q->n_int2, Hkv = c->p.n_head_kv, D = c->p.head_dim;
    if (j >= (int64_t) cdiv(c->p.max_seq_len, ps) * ps)
        return osc_error(OSCAR_ERR_INVALID, "kv cache: sequence %d longer than %lld", seq, (long long) c->p.max_seq_len);
    if (j % ps == 0) {
        enum oscar_status st = take_page(c->q_free, &c->n_q_free, "INT2", &q->int2_pages[q->n_int2_pages]);
        if (st != OSCAR_OK) return st;
        q->n_int2_pages++;
    }
    int64_t slot = (int64_t) q->int2_pages[j / ps] * ps + j % ps;
    size_t mk = oscar_int2_meta_bytes(pk), mv = oscar_int2_meta_bytes(pv);
    enum oscar_status st = oscar_int2_quantize_rows(pk, kb, Hkv, c->q_k + slot * Hkv * D / 4,
                                                    (uint8_t *) c->q_k_meta + (size_t) (slot * Hkv) * mk, &c->stats_k);
    if (st == OSCAR_OK)
        st = oscar_int2_quantize_rows(pv, vb, Hkv, c->q_v + slot * Hkv * D / 4,
                                      (uint8_t *) c->q_v_meta + (size_t) (slot * Hkv) * mv, &c->stats_v);
    if (st != OSCAR_OK) return osc_error_prefix(st, "kv cache: sequence %d INT2 row %lld", seq, (long long) j);
    q->n_int2++;
    return OSCAR_OK;
}

static enum oscar_status append_recent(struct oscar_kv_cache * c, int32_t seq, const float * kb, const float * vb) {
    struct oscar_kv_seq * q = &c->seqs[seq];
    int64_t ps = c->p.page_size, r = q->len % c->ring_slots;
    if (q->n_recent >= c->ring_slots)
        return osc_error(OSCAR_ERR_INVALID, "kv cache: sequence %d recent ring full (%lld slots)", seq,
                         (long long) c->ring_slots);
    if (q->recent_pages[r / ps] < 0) {
        enum oscar_status st = take_page(c->hp_free, &c->n_hp_free, "HP", &q->recent_pages[r / ps]);
        if (st != OSCAR_OK) return st;
        q->n_recent_pages++;
    }
    store_hp(c, (int64_t) q->recent_pages[r / ps] * ps + r % ps, kb, vb);
    q->is_hp[q->len] = 1;
    q->n_recent++;
    q->len++;
    return OSCAR_OK;
}

// ---- prefill / decode ----------------------------------------------------------------

enum oscar_status oscar_kv_cache_prefill(struct oscar_kv_cache * c, int32_t seq, const float * k, const float * v,
                                         int64_t n, bool is_final_chunk) {
    if (seq < 0 || seq >= c->p.n_seq_max) return osc_error(OSCAR_ERR_INVALID, "kv cache: no sequence %d", seq);
    struct oscar_kv_seq * q = &c->seqs[seq];
    if (q->prefill_done)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "kv cache: sequence %d: extend after the final chunk", seq);
    if (n < 0 || q->len + n > c->p.max_seq_len)
        return osc_error(OSCAR_ERR_INVALID, "kv cache: sequence %d: %lld + %lld tokens exceed %lld", seq,
                         (long long) q->len, (long long) n, (long long) c->p.max_seq_len);
    enum oscar_status st = oscar_quant_check_finite("kv cache prefill K", k, n * c->p.n_head_kv, c->p.head_dim);
    if (st == OSCAR_OK) st = oscar_quant_check_finite("kv cache prefill V", v, n * c->p.n_head_kv, c->p.head_dim);
    if (st != OSCAR_OK) return st;
    struct oscar_tier_layout l;
    int64_t pre = q->len;
    oscar_kv_extend_layout(pre, pre + n, c->p.n_sink, c->p.n_recent, is_final_chunk, &l);
    size_t row = hp_row_elems(c);
    float * kb = c->scratch, * vb = c->scratch + row;
    for (int64_t pos = pre; pos < pre + n && st == OSCAR_OK; pos++) {
        prepare_rows(c, k + (size_t) (pos - pre) * row, v + (size_t) (pos - pre) * row, kb, vb);
        if (pos < l.hp_prefix_end) {
            st = append_sink(c, seq, kb, vb);
        } else if (pos < l.quant_end) {
            q->is_hp[pos] = 0;
            st = append_int2(c, seq, kb, vb, &c->p.k_quant, &c->p.v_quant);
            if (st == OSCAR_OK) q->len++;
        } else {
            st = append_recent(c, seq, kb, vb);
        }
    }
    if (st == OSCAR_OK && is_final_chunk) {
        q->counter      = oscar_kv_flush_counter_init(c->p.n_recent, c->p.n_flush, l.hp_recent_end - l.hp_recent_begin);
        q->prefill_done = true;
    }
    return st;
}

// The flush kernel's parameters: the configured quantizer with the demotion clip
// algorithm, uniform codes (the flush kernel has no Lloyd-Max, method.md §10).
static struct oscar_int2_params demote_params(const struct oscar_int2_params * p, enum oscar_clip_algo algo) {
    struct oscar_int2_params d = *p;
    d.clip_algo = algo;
    if (d.scheme == OSCAR_INT2_LLOYD_MAX) d.scheme = OSCAR_INT2_ASYM;
    return d;
}

static enum oscar_status demote(struct oscar_kv_cache * c, int32_t seq, const int64_t * fp, int32_t n) {
    struct oscar_kv_seq * q = &c->seqs[seq];
    struct oscar_int2_params pk = demote_params(&c->p.k_quant, c->p.demote_clip_algo);
    struct oscar_int2_params pv = demote_params(&c->p.v_quant, c->p.demote_clip_algo);
    size_t row = hp_row_elems(c);
    float * kb = c->scratch, * vb = c->scratch + row;
    for (int32_t j = 0; j < n; j++) {
        // Tiers stay contiguous: the plan demotes exactly the oldest recent positions.
        if (fp[j] != q->n_sink + q->n_int2 || q->n_recent == 0)
            return osc_error(OSCAR_ERR_UNSUPPORTED, "kv cache: sequence %d: demotion of position %lld is not the "
                             "oldest recent token", seq, (long long) fp[j]);
        int64_t slot = oscar_kv_cache_slot(c, seq, fp[j], NULL);
        for (size_t i = 0; i < row; i++) {
            kb[i] = oscar_bf16_to_f32(c->hp_k[(size_t) slot * row + i]);
            vb[i] = oscar_bf16_to_f32(c->hp_v[(size_t) slot * row + i]);
        }
        q->n_recent--;   // the position leaves the ring before the INT2 tier grows
        enum oscar_status st = append_int2(c, seq, kb, vb, &pk, &pv);
        if (st != OSCAR_OK) return st;
        q->is_hp[fp[j]] = 0;
    }
    return OSCAR_OK;
}

enum oscar_status oscar_kv_cache_decode_append(struct oscar_kv_cache * c, int32_t seq, const float * k,
                                               const float * v, int32_t * n_demoted) {
    if (seq < 0 || seq >= c->p.n_seq_max) return osc_error(OSCAR_ERR_INVALID, "kv cache: no sequence %d", seq);
    struct oscar_kv_seq * q = &c->seqs[seq];
    if (!q->prefill_done)
        return osc_error(OSCAR_ERR_INVALID, "kv cache: sequence %d: decode before a final prefill chunk", seq);
    if (q->len >= c->p.max_seq_len)
        return osc_error(OSCAR_ERR_INVALID, "kv cache: sequence %d is full (%lld)", seq, (long long) q->len);
    enum oscar_status st = oscar_quant_check_finite("kv cache decode K", k, c->p.n_head_kv, c->p.head_dim);
    if (st == OSCAR_OK) st = oscar_quant_check_finite("kv cache decode V", v, c->p.n_head_kv, c->p.head_dim);
    if (st != OSCAR_OK) return st;
    int64_t fp[4096];
    int32_t n = oscar_kv_decode_plan(&q->counter, q->len, c->p.n_recent, c->p.n_flush, 0, q->is_hp, fp);
    st = demote(c, seq, fp, n);
    if (st != OSCAR_OK) return st;
    size_t row = hp_row_elems(c);
    float * kb = c->scratch, * vb = c->scratch + row;
    prepare_rows(c, k, v, kb, vb);
    st = append_recent(c, seq, kb, vb);
    if (n_demoted) *n_demoted = n;
    return st;
}

enum oscar_status oscar_kv_cache_gather(const struct oscar_kv_cache * c, int32_t seq, float * k, float * v,
                                        uint8_t * tier) {
    if (seq < 0 || seq >= c->p.n_seq_max) return osc_error(OSCAR_ERR_INVALID, "kv cache: no sequence %d", seq);
    const struct oscar_kv_seq * q = &c->seqs[seq];
    int64_t Hkv = c->p.n_head_kv, D = c->p.head_dim;
    size_t row = hp_row_elems(c), mk = oscar_int2_meta_bytes(&c->p.k_quant), mv = oscar_int2_meta_bytes(&c->p.v_quant);
    for (int64_t pos = 0; pos < q->len; pos++) {
        enum oscar_kv_tier t;
        int64_t slot = oscar_kv_cache_slot(c, seq, pos, &t);
        if (tier) tier[pos] = (uint8_t) t;
        float * ko = k + (size_t) pos * row, * vo = v + (size_t) pos * row;
        if (t != OSCAR_TIER_INT2) {
            for (size_t i = 0; i < row; i++) {
                ko[i] = oscar_bf16_to_f32(c->hp_k[(size_t) slot * row + i]);
                vo[i] = oscar_bf16_to_f32(c->hp_v[(size_t) slot * row + i]);
            }
            continue;
        }
        for (int64_t h = 0; h < Hkv; h++) {
            int64_t r = slot * Hkv + h;
            osc_int2_dequant_row(&c->p.k_quant, c->q_k + r * D / 4, (const uint8_t *) c->q_k_meta + (size_t) r * mk,
                                 ko + h * D);
            osc_int2_dequant_row(&c->p.v_quant, c->q_v + r * D / 4, (const uint8_t *) c->q_v_meta + (size_t) r * mv,
                                 vo + h * D);
        }
    }
    return OSCAR_OK;
}

int64_t oscar_kv_cache_bytes_read(const struct oscar_kv_cache * c, int32_t seq) {
    const struct oscar_kv_seq * q = &c->seqs[seq];
    int64_t Hkv = c->p.n_head_kv, D = c->p.head_dim;
    int64_t hp  = (q->n_sink + q->n_recent) * Hkv * D * 2 * 2;
    int64_t i2  = q->n_int2 * Hkv *
                 ((D / 4) * 2 + (int64_t) (oscar_int2_meta_bytes(&c->p.k_quant) + oscar_int2_meta_bytes(&c->p.v_quant)));
    return hp + i2;
}
