// tiered.c - the fused attention OSCAR serves, as a readable CPU reference
// (method.md §12-13): every tier (BF16 sink, INT2 middle, BF16 recent) is cut
// into splits; each split is an online-softmax partial (o_s = acc/l,
// lse_s = m + ln l, fp32, natural exp) and the partials are merged by
// log-sum-exp. Works in the rotated space; never rotates.
//
// g = query heads per KV head, BLK = 32 keys per inner block (dequantized into
// a small stack buffer: the INT2 tier is read straight from the packed pool).
#include "attention/attention.h"
#include "attention/kv-cache.h"
#include "quant/quant-internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BLK   32
#define MAX_G 128
#define MAX_D 1024

struct oscar_attn_tiered_opts oscar_attn_tiered_default_opts(void) {
    struct oscar_attn_tiered_opts o = { .n_splits_hp = 8, .n_splits_int2 = 8, .min_block_kv = 32 };
    return o;
}

// ---- online softmax state for g rows ---------------------------------------------

struct partial {
    int32_t g, D;
    float   m[MAX_G], l[MAX_G];
    float * acc;   // [g, D]
};

static void partial_begin(struct partial * p, int32_t g, int32_t D, float * acc) {
    p->g = g, p->D = D, p->acc = acc;
    for (int32_t i = 0; i < g; i++) p->m[i] = -INFINITY, p->l[i] = 0.0f;
    memset(acc, 0, (size_t) g * (size_t) D * sizeof(float));
}

// Folds n <= BLK keys into the state. q [g, D]; k/v rows at stride; valid[t] == 0 skips key t.
static void partial_update(struct partial * p, const float * q, const float * k, int64_t ks, const float * v,
                           int64_t vs, int32_t n, const uint8_t * valid) {
    int32_t D = p->D;
    float scale = (float) (1.0 / sqrt((double) D));
    for (int32_t i = 0; i < p->g; i++) {
        float s[BLK], bm = -INFINITY;
        for (int32_t t = 0; t < n; t++) {
            s[t] = -INFINITY;
            if (valid && !valid[t]) continue;
            float dot = 0.0f;
            for (int32_t d = 0; d < D; d++) dot += q[i * D + d] * k[t * ks + d];
            s[t] = dot * scale;
            bm   = fmaxf(bm, s[t]);
        }
        if (bm == -INFINITY) continue;
        float mn = fmaxf(p->m[i], bm), alpha = expf(p->m[i] - mn);
        float * acc = p->acc + (int64_t) i * D;
        for (int32_t d = 0; d < D; d++) acc[d] *= alpha;
        p->l[i] *= alpha;
        for (int32_t t = 0; t < n; t++) {
            if (s[t] == -INFINITY) continue;
            float e = expf(s[t] - mn);
            p->l[i] += e;
            for (int32_t d = 0; d < D; d++) acc[d] += e * v[t * vs + d];
        }
        p->m[i] = mn;
    }
}

static void partial_end(const struct partial * p, float * o, int64_t o_stride, float * lse, int64_t lse_stride) {
    for (int32_t i = 0; i < p->g; i++) {
        bool empty = p->l[i] == 0.0f;
        for (int32_t d = 0; d < p->D; d++) o[i * o_stride + d] = empty ? 0.0f : p->acc[(int64_t) i * p->D + d] / p->l[i];
        lse[i * lse_stride] = empty ? -INFINITY : p->m[i] + logf(p->l[i]);
    }
}

void oscar_attn_partial_rows(int32_t g, int32_t D, const float * q, const float * k, int64_t k_stride,
                             const float * v, int64_t v_stride, int64_t n, const int64_t * key_pos, int64_t mask_pos,
                             float * o, float * lse) {
    OSCAR_ASSERT(g <= MAX_G);
    struct partial p;
    float * acc = malloc((size_t) g * (size_t) D * sizeof(float));
    OSCAR_ASSERT(acc);
    partial_begin(&p, g, D, acc);
    uint8_t valid[BLK];
    for (int64_t t0 = 0; t0 < n; t0 += BLK) {
        int32_t nb = (int32_t) (n - t0 < BLK ? n - t0 : BLK);
        if (mask_pos >= 0) {
            for (int32_t t = 0; t < nb; t++) valid[t] = key_pos[t0 + t] <= mask_pos;
        }
        partial_update(&p, q, k + t0 * k_stride, k_stride, v + t0 * v_stride, v_stride, nb, mask_pos >= 0 ? valid : NULL);
    }
    partial_end(&p, o, D, lse, 1);
    free(acc);
}

void oscar_attn_merge(int32_t n_splits, int64_t n_rows, int32_t D, const float * o_parts, const float * lse_parts,
                      float * out, float * lse_out) {
    for (int64_t r = 0; r < n_rows; r++) {
        float e_max = -INFINITY, e_sum = 0.0f;
        float * o = out + r * D;
        memset(o, 0, (size_t) D * sizeof(float));
        for (int32_t s = 0; s < n_splits; s++) {
            float lse = lse_parts[(int64_t) s * n_rows + r];
            if (lse == -INFINITY) continue;
            const float * os = o_parts + ((int64_t) s * n_rows + r) * D;
            float n = fmaxf(e_max, lse), a = expf(e_max - n), b = expf(lse - n);
            for (int32_t d = 0; d < D; d++) o[d] = o[d] * a + b * os[d];
            e_sum = e_sum * a + b;
            e_max = n;
        }
        // every split empty: zeros; a NaN split (say, a NaN dequantized row) stays NaN, never a silent 0
        const float none = isnan(e_sum) ? NAN : 0.0f;
        for (int32_t d = 0; d < D; d++) o[d] = e_sum > 0.0f ? o[d] / e_sum : none;
        if (lse_out) lse_out[r] = e_sum > 0.0f ? e_max + logf(e_sum) : isnan(e_sum) ? NAN : -INFINITY;
    }
}

// ---- tier readers ---------------------------------------------------------------------

// Loads keys/values of KV head h for positions [p0, p0 + n) (n <= BLK, one tier) into kb/vb [n, D].
static void load_block(const struct oscar_kv_cache * c, int32_t seq, int32_t h, int64_t p0, int32_t n, float * kb,
                       float * vb) {
    int64_t Hkv = c->p.n_head_kv, D = c->p.head_dim;
    size_t  mk = oscar_int2_meta_bytes(&c->p.k_quant), mv = oscar_int2_meta_bytes(&c->p.v_quant);
    for (int32_t t = 0; t < n; t++) {
        enum oscar_kv_tier tier;
        int64_t slot = oscar_kv_cache_slot(c, seq, p0 + t, &tier);
        int64_t r    = slot * Hkv + h;
        if (tier == OSCAR_TIER_INT2) {
            osc_int2_dequant_row(&c->p.k_quant, c->q_k + r * D / 4, (const uint8_t *) c->q_k_meta + (size_t) r * mk, kb + t * D);
            osc_int2_dequant_row(&c->p.v_quant, c->q_v + r * D / 4, (const uint8_t *) c->q_v_meta + (size_t) r * mv, vb + t * D);
        } else {
            for (int64_t d = 0; d < D; d++) {
                kb[t * D + d] = oscar_bf16_to_f32(c->hp_k[r * D + d]);
                vb[t * D + d] = oscar_bf16_to_f32(c->hp_v[r * D + d]);
            }
        }
    }
}

// Split geometry of one tier run: length ceil(ceil(n / splits) / blk) * blk.
static int64_t split_len(int64_t n, int32_t splits, int32_t blk) {
    int64_t per = (n + splits - 1) / splits;
    return (per + blk - 1) / blk * blk;
}

// Split sp of a tier run [begin, begin + len) cut into pieces of sl rows: [*a, *b).
// False once sp is past the last non-empty piece (or past nsp pieces).
static bool split_range(int64_t begin, int64_t len, int32_t nsp, int64_t sl, int32_t sp, int64_t * a, int64_t * b) {
    if (sp >= nsp || sl <= 0 || (int64_t) sp * sl >= len) return false;
    *a = begin + sp * sl;
    *b = begin + len < *a + sl ? begin + len : *a + sl;
    return true;
}

enum oscar_status oscar_attn_tiered_decode(const struct oscar_kv_cache * c, int32_t seq, const float * q,
                                           int32_t n_head, const struct oscar_attn_tiered_opts * opts, float * out) {
    int32_t Hkv = c->p.n_head_kv, D = c->p.head_dim;
    if (seq < 0 || seq >= c->p.n_seq_max) return osc_error(OSCAR_ERR_INVALID, "tiered decode: no sequence %d", seq);
    if (n_head < Hkv || n_head % Hkv != 0 || n_head / Hkv > MAX_G || D > MAX_D)
        return osc_error(OSCAR_ERR_INVALID, "tiered decode: Hq %d vs Hkv %d, D %d", n_head, Hkv, D);
    if (opts->n_splits_hp < 1 || opts->n_splits_int2 < 1 || opts->min_block_kv < 1)
        return osc_error(OSCAR_ERR_INVALID, "tiered decode: split counts must be >= 1");
    const struct oscar_kv_seq * s = &c->seqs[seq];
    int32_t g = n_head / Hkv;
    // Tier runs in position order: sink, INT2, recent.
    int64_t begin[3] = { 0, s->n_sink, s->n_sink + s->n_int2 }, len[3] = { s->n_sink, s->n_int2, s->n_recent };
    int32_t nsp[3] = { opts->n_splits_hp, opts->n_splits_int2, opts->n_splits_hp };
    int32_t S = nsp[0] + nsp[1] + nsp[2];
    float * o_parts = malloc((size_t) S * (size_t) n_head * (size_t) D * sizeof(float));
    float * lse     = malloc((size_t) S * (size_t) n_head * sizeof(float));
    float * buf     = malloc((size_t) (2 * BLK + g) * (size_t) D * sizeof(float));
    if (!o_parts || !lse || !buf) {
        free(o_parts), free(lse), free(buf);
        return osc_error(OSCAR_ERR_NOMEM, "tiered decode: %d splits", S);
    }
    float * kb = buf, * vb = buf + BLK * D, * acc = buf + 2 * BLK * D;
    for (int64_t i = 0; i < (int64_t) S * n_head; i++) lse[i] = -INFINITY;   // empty splits stay -inf
    memset(o_parts, 0, (size_t) S * (size_t) n_head * (size_t) D * sizeof(float));
    int32_t s0 = 0;
    for (int tier = 0; tier < 3; tier++) {
        int64_t sl = split_len(len[tier], nsp[tier], opts->min_block_kv);
        int64_t a, b;
        for (int32_t sp = 0; split_range(begin[tier], len[tier], nsp[tier], sl, sp, &a, &b); sp++) {
            for (int32_t h = 0; h < Hkv; h++) {
                struct partial p;
                partial_begin(&p, g, D, acc);
                for (int64_t t0 = a; t0 < b; t0 += BLK) {
                    int32_t nb = (int32_t) (b - t0 < BLK ? b - t0 : BLK);
                    load_block(c, seq, h, t0, nb, kb, vb);
                    partial_update(&p, q + (int64_t) h * g * D, kb, D, vb, D, nb, NULL);
                }
                int64_t row0 = (int64_t) (s0 + sp) * n_head + h * g;
                partial_end(&p, o_parts + row0 * D, D, lse + row0, 1);
            }
        }
        s0 += nsp[tier];
    }
    oscar_attn_merge(S, n_head, D, o_parts, lse, out, NULL);
    free(o_parts), free(lse), free(buf);
    return OSCAR_OK;
}

enum oscar_status oscar_attn_tiered_prefill(const struct oscar_kv_cache * c, int32_t seq, const float * q, int64_t n_q,
                                            int32_t n_head, const float * k, const float * v,
                                            const struct oscar_attn_tiered_opts * opts, float * out) {
    int32_t Hkv = c->p.n_head_kv, D = c->p.head_dim;
    if (seq < 0 || seq >= c->p.n_seq_max) return osc_error(OSCAR_ERR_INVALID, "tiered prefill: no sequence %d", seq);
    if (n_head < Hkv || n_head % Hkv != 0 || n_head / Hkv > MAX_G)
        return osc_error(OSCAR_ERR_INVALID, "tiered prefill: Hq %d vs Hkv %d", n_head, Hkv);
    if (opts->n_splits_hp < 1 || opts->n_splits_int2 < 1 || opts->min_block_kv < 1)
        return osc_error(OSCAR_ERR_INVALID, "tiered prefill: split counts must be >= 1");
    const struct oscar_kv_seq * s = &c->seqs[seq];
    int32_t g = n_head / Hkv;
    int64_t L0 = s->len, row = (int64_t) Hkv * D;
    // 1. The cached prefix, dequantized (fp32) in position order; 2. the chunk's own rows,
    //    centred and bf16-rounded like the HP tier.
    float * kc = malloc((size_t) ((L0 + n_q) * row) * sizeof(float));
    float * vc = malloc((size_t) ((L0 + n_q) * row) * sizeof(float));
    int64_t * pos = malloc((size_t) (n_q > 0 ? n_q : 1) * sizeof(int64_t));
    int32_t S = 2 * opts->n_splits_hp + opts->n_splits_int2 + 1;
    float * o_parts = malloc((size_t) S * (size_t) g * (size_t) D * sizeof(float));
    float * lse     = malloc((size_t) S * (size_t) g * sizeof(float));
    enum oscar_status st = OSCAR_OK;
    if (!kc || !vc || !pos || !o_parts || !lse) {
        st = osc_error(OSCAR_ERR_NOMEM, "tiered prefill: %lld rows", (long long) (L0 + n_q));
        goto out;
    }
    st = oscar_kv_cache_gather(c, seq, kc, vc, NULL);
    if (st != OSCAR_OK) goto out;
    for (int64_t i = 0; i < n_q * row; i++) {
        kc[L0 * row + i] = oscar_bf16_round(c->mu_rot ? k[i] - c->mu_rot[i % row] : k[i]);
        vc[L0 * row + i] = oscar_bf16_round(v[i]);
    }
    for (int64_t i = 0; i < n_q; i++) pos[i] = L0 + i;
    int64_t begin[3] = { 0, s->n_sink, s->n_sink + s->n_int2 }, len[3] = { s->n_sink, s->n_int2, s->n_recent };
    int32_t nsp[3] = { opts->n_splits_hp, opts->n_splits_int2, opts->n_splits_hp };
    for (int64_t i = 0; i < n_q; i++) {
        for (int32_t h = 0; h < Hkv; h++) {
            const float * qh = q + (i * n_head + (int64_t) h * g) * D;
            for (int64_t j = 0; j < (int64_t) S * g; j++) lse[j] = -INFINITY;
            int32_t s0 = 0;
            for (int tier = 0; tier < 3; tier++) {
                int64_t sl = split_len(len[tier], nsp[tier], opts->min_block_kv);
                int64_t a, b;
                for (int32_t sp = 0; split_range(begin[tier], len[tier], nsp[tier], sl, sp, &a, &b); sp++) {
                    oscar_attn_partial_rows(g, D, qh, kc + a * row + h * D, row, vc + a * row + h * D, row, b - a,
                                            NULL, -1, o_parts + (int64_t) (s0 + sp) * g * D, lse + (s0 + sp) * g);
                }
                s0 += nsp[tier];
            }
            // The chunk itself, causally: keys L0 .. L0 + i.
            oscar_attn_partial_rows(g, D, qh, kc + L0 * row + h * D, row, vc + L0 * row + h * D, row, n_q, pos, L0 + i,
                                    o_parts + (int64_t) s0 * g * D, lse + s0 * g);
            oscar_attn_merge(S, g, D, o_parts, lse, out + (i * n_head + (int64_t) h * g) * D, NULL);
        }
    }
out:
    free(kc), free(vc), free(pos), free(o_parts), free(lse);
    return st;
}
