// kv-transform.c - the tiering rule (method.md §11) and the per-row KV
// transforms of every method (rotate, bf16, quantize, dequantize, rotate back).
//
// Pure CPU reference; refuses sequences that do not start at position 0 and
// head dims above OSCAR_MAX_HEAD_DIM. See metrics.h for the definitions.
#include "verify/metrics.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rotation/rotation.h"

// ---- tiering ---------------------------------------------------------------------------
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

void oscar_tier_int2_range(const struct oscar_tiering * tr, int64_t t, int64_t len, int64_t * lo, int64_t * hi) {
    int64_t P = tr->n_sink, R = tr->n_recent, NQ = tr->n_flush > 0 ? tr->n_flush : 1;
    int64_t l = 0, h = 0;
    switch (tr->mode) {
    case OSCAR_TIERS_NONE:
        l = 0, h = len;
        break;
    case OSCAR_TIERS_STATIC: {
        int64_t H = min64(max64(len - P, 0), R);
        l = min64(len, P), h = len - H;
        break;
    }
    case OSCAR_TIERS_DECODE: {
        int64_t S0 = min64(tr->prompt_len > 0 ? tr->prompt_len : P, len);
        if (t < S0) break;                           // prefill: the chunk attends to itself in bf16
        int64_t H0 = min64(max64(S0 - P, 0), R);
        l = min64(S0, P), h = S0 - H0;               // prefill INT2 middle
        int64_t c0 = max64(0, R + NQ - 1 - H0);
        if (R > 0 && t >= S0 + c0) {
            int64_t F = S0 + c0 + ((t - S0 - c0) / NQ) * NQ;   // last flush step <= t
            h = F - R + 1;
        }
        break;
    }
    case OSCAR_TIERS_RING:                           // sinks and the ring of R latest stay HP
        l = min64(P, len), h = t - R + 1;
        break;
    }
    if (h < l) h = l;
    if (tr->block > 1) h = l + ((h - l) / tr->block) * tr->block;
    *lo = l, *hi = h;
}

bool oscar_tier_is_int2(const struct oscar_tiering * tr, int64_t p, int64_t t, int64_t len) {
    int64_t lo, hi;
    oscar_tier_int2_range(tr, t, len, &lo, &hi);
    return p >= lo && p < hi;
}

bool oscar_tier_from_prefill(const struct oscar_tiering * tr, int64_t p, int64_t len) {
    if (tr->mode != OSCAR_TIERS_DECODE) return true;
    int64_t S0 = min64(tr->prompt_len > 0 ? tr->prompt_len : tr->n_sink, len);
    int64_t H0 = min64(max64(S0 - tr->n_sink, 0), tr->n_recent);
    return p < S0 - H0;
}

// ---- rotation helpers ----------------------------------------------------------------
static const float * rot_matrix(const struct oscar_kv_transform * tf, bool is_k, int32_t layer, int32_t h) {
    return is_k ? oscar_rotations_k(&tf->rots, layer, h) : oscar_rotations_v(&tf->rots, layer, h);
}

// n rows [n, D] of KV head h, rotated (or rotated back: inverse); each row's bits do not depend on n.
static void rotate(const struct oscar_kv_transform * tf, bool is_k, int32_t layer, int32_t h, int64_t n,
                   const float * x, float * y, bool inverse) {
    int32_t D = tf->head_dim;
    switch (tf->rot) {
    case OSCAR_ROT_IDENTITY:
        memcpy(y, x, sizeof(float) * (size_t) n * D);
        break;
    case OSCAR_ROT_HADAMARD:   // H = Hᵀ
        memcpy(y, x, sizeof(float) * (size_t) n * D);
        for (int64_t r = 0; r < n; r++) oscar_fwht_f32(y + (size_t) r * D, D);
        break;
    case OSCAR_ROT_MATRIX: {
        const int32_t b = is_k ? tf->k_engine_hadamard : tf->v_engine_hadamard;
        const float * R = rot_matrix(tf, is_k, layer, h);
        if (!b) {
            oscar_kv_rotate_rows(R, D, n, x, (size_t) D, y, (size_t) D, inverse);
        } else if (!inverse) {   // x·R, then the engine's diag(H_b) (self-inverse)
            oscar_kv_rotate_rows(R, D, n, x, (size_t) D, y, (size_t) D, false);
            oscar_fwht_block_rows(y, n, D, b);
        } else {                 // diag(H_b) first, then Rᵀ; row by row (same bits as in a block)
            float t[OSCAR_MAX_HEAD_DIM];
            for (int64_t r = 0; r < n; r++) {
                memcpy(t, x + (size_t) r * D, sizeof(float) * (size_t) D);
                oscar_fwht_block_rows(t, 1, D, b);
                oscar_kv_rotate_rows(R, D, 1, t, (size_t) D, y + (size_t) r * D, (size_t) D, true);
            }
        }
        break;
    }
    }
}

static double clip_ratio(const struct oscar_kv_transform * tf, bool is_k, int32_t layer, int32_t h) {
    if (!(is_k ? tf->rots.k_clip : tf->rots.v_clip)) return is_k ? tf->k_clip : tf->v_clip;
    return is_k ? *oscar_rotations_k_clip(&tf->rots, layer, h) : *oscar_rotations_v_clip(&tf->rots, layer, h);
}

// ---- presets -------------------------------------------------------------------------------
enum oscar_status oscar_kv_transform_check(const struct oscar_kv_transform * tf) {
    int32_t D = tf->head_dim;
    if (tf->n_layer < 1 || tf->n_head_kv < 1 || D < 4 || D > OSCAR_MAX_HEAD_DIM || D % 4)
        return osc_error(OSCAR_ERR_INVALID, "kv transform '%s': bad shape L %d Hkv %d D %d", tf->name, tf->n_layer,
                         tf->n_head_kv, D);
    if (tf->rot == OSCAR_ROT_HADAMARD && !oscar_is_pow2(D))
        return osc_error(OSCAR_ERR_INVALID, "kv transform '%s': Hadamard needs a power-of-two head_dim, got %d",
                         tf->name, D);
    if (tf->rot == OSCAR_ROT_MATRIX && (!tf->rots.k || !tf->rots.v))
        return osc_error(OSCAR_ERR_INVALID, "kv transform '%s': rotation matrices missing (need --rotations)",
                         tf->name);
    if (tf->quant == OSCAR_KVQ_INT2) {
        struct oscar_int2_params p = tf->int2;
        p.clip_ratio = 0;
        enum oscar_status st = oscar_int2_params_check(&p);
        if (st != OSCAR_OK) return st;
    }
    if (tf->quant == OSCAR_KVQ_INT4_BDH && (!oscar_is_pow2(tf->int4_order) || D % tf->int4_order))
        return osc_error(OSCAR_ERR_INVALID, "kv transform '%s': INT4 Hadamard order %d must divide D %d", tf->name,
                         tf->int4_order, D);
    if ((tf->quant == OSCAR_KVQ_KIVI || tf->quant == OSCAR_KVQ_OMNI) &&
        (tf->kivi.k_block_tokens < 4 || tf->kivi.k_block_tokens % 4 || D % tf->kivi.v_group_size))
        return osc_error(OSCAR_ERR_INVALID, "kv transform '%s': bad KIVI block %d / group %d", tf->name,
                         tf->kivi.k_block_tokens, tf->kivi.v_group_size);
    if (tf->quant == OSCAR_KVQ_Q2_0 && (D % OSCAR_Q2_0_BLOCK || (D % OSCAR_Q2_0_GROUP && tf->n_head_kv * D >= OSCAR_Q2_0_GROUP)))
        // The fork quantizes a token's whole row (n_head_kv * D) in 128-element groups and
        // dequantizes per head: only these shapes make its groups coincide with heads.
        return osc_error(OSCAR_ERR_INVALID,
                         "kv transform '%s': head_dim %d with %d KV heads: the llama.cpp fork's Q2_0 groups "
                         "cross heads (it needs head_dim %% 32 == 0 and 128 | head_dim or n_head_kv*head_dim < 128)",
                         tf->name, D, tf->n_head_kv);
    const bool by_head = tf->rots.n_rot > 1 || (tf->rots.k_clip && tf->rots.n_clip > 1) || tf->k_mean;
    if (tf->rot == OSCAR_ROT_MATRIX && (tf->rots.n_layer < tf->n_layer || tf->rots.head_dim != D ||
                                        (by_head && tf->rots.n_head_kv != tf->n_head_kv)))
        return osc_error(OSCAR_ERR_INVALID, "kv transform '%s': rotations of %d layers, %d KV heads, head_dim %d for "
                         "a model of %d, %d, %d", tf->name, (int) tf->rots.n_layer, (int) tf->rots.n_head_kv,
                         (int) tf->rots.head_dim, (int) tf->n_layer, (int) tf->n_head_kv, (int) D);
    if (tf->quant == OSCAR_KVQ_Q2_0 && tf->rot == OSCAR_ROT_MATRIX && tf->rots.n_rot > 1)
        return osc_error(OSCAR_ERR_INVALID, "kv transform '%s': the llama.cpp fork takes one rotation per layer "
                         "(blk.N.attn_k_rot), not per KV head", tf->name);
    if (tf->tiers.n_sink < 0 || tf->tiers.n_recent < 0 || tf->tiers.n_flush < 1)
        return osc_error(OSCAR_ERR_INVALID, "kv transform '%s': bad tiering sink %lld recent %lld flush %d", tf->name,
                         (long long) tf->tiers.n_sink, (long long) tf->tiers.n_recent, tf->tiers.n_flush);
    return OSCAR_OK;
}

// The matrices of rots (a view without its clips and key mean), or none: kv_transform_check refuses that.
static void matrices(struct oscar_kv_transform * t, const struct oscar_rotations * rots) {
    if (!rots) return;
    t->rots = *rots;
    t->rots.k_clip = t->rots.v_clip = t->rots.k_mean = NULL;
}

enum oscar_status oscar_kv_transform_preset_rot(const char * name, int32_t n_layer, int32_t n_head_kv,
                                            int32_t head_dim, int32_t group_size,
                                            enum oscar_quant_meta_dtype meta_dtype,
                                            const struct oscar_tiering * tiers, const struct oscar_rotations * rots,
                                            struct oscar_kv_transform * out) {
    struct oscar_kv_transform t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", name);
    t.n_layer = n_layer, t.n_head_kv = n_head_kv, t.head_dim = head_dim;
    t.int2 = oscar_int2_default_params(head_dim);
    t.int2.group_size = group_size > 0 ? group_size : head_dim;
    t.int2.meta_dtype = meta_dtype;
    t.int2.clip_algo = OSCAR_CLIP_SORT;
    t.demote_clip_algo = OSCAR_CLIP_FLUSH;
    t.int4_order = head_dim < 128 ? head_dim : 128;
    t.kivi = oscar_kivi_default_params(head_dim);
    t.hp_bf16 = true;
    t.tiers = *tiers;
    t.tiers.block = 1;
    if (!strcmp(name, "bf16")) {
        t.quant = OSCAR_KVQ_IDENTITY, t.hp_bf16 = false;
    } else if (!strcmp(name, "naive")) {
        t.quant = OSCAR_KVQ_INT2, t.int2.scheme = OSCAR_INT2_SYM;
    } else if (!strcmp(name, "hadamard")) {
        t.quant = OSCAR_KVQ_INT2, t.rot = OSCAR_ROT_HADAMARD;
    } else if (!strcmp(name, "oscar") || !strcmp(name, "oscar-searched") || !strcmp(name, "oscar-lm")) {
        t.quant = OSCAR_KVQ_INT2, t.rot = OSCAR_ROT_MATRIX;
        matrices(&t, rots);
        t.k_clip = 0.96, t.v_clip = 0.92;
        if (!strcmp(name, "oscar-searched")) {
            if (!rots || !rots->k_clip || !rots->v_clip)
                return osc_error(OSCAR_ERR_INVALID, "method oscar-searched: the artifact has no clip tensors");
            t.rots.k_clip = rots->k_clip, t.rots.v_clip = rots->v_clip;
        }
        if (!strcmp(name, "oscar-lm")) t.int2.scheme = OSCAR_INT2_LLOYD_MAX, t.int2.group_size = head_dim;
    } else if (!strcmp(name, "int4-bdh")) {
        t.quant = OSCAR_KVQ_INT4_BDH;
    } else if (!strcmp(name, "kivi")) {
        t.quant = OSCAR_KVQ_KIVI, t.tiers.block = t.kivi.k_block_tokens;
        t.kivi.meta_dtype = meta_dtype == OSCAR_META_F32 ? OSCAR_META_F16 : meta_dtype;
    } else if (!strcmp(name, "q2_0") || !strcmp(name, "q2_0-attn-rot")) {
        // The fork's README recipe: LLAMA_KV_NO_HADAMARD=1 (the rotation is in-graph),
        // LLAMA_KV_CLIP_RATIO (one ratio for K and V; oscar-verify sets the artifact's), HP buffer in
        // F16; "q2_0" as the export's recipe serves it (LLAMA_ATTN_ROT_DISABLE=1), "q2_0-attn-rot" with
        // the attention rotation the fork's upstream applies to quantized caches when that is unset
        // (src/llama-kv-cache.cpp build_input_k_rot / _v_rot: K and Q by H_b, b the largest power of
        // two >= 64 dividing head_dim, V by H_64 blocks, after the model's own rotation).
        t.quant = OSCAR_KVQ_Q2_0, t.rot = OSCAR_ROT_MATRIX, t.hp_bf16 = false;
        matrices(&t, rots);
        t.k_clip = t.v_clip = 0.96;
        t.tiers.mode = OSCAR_TIERS_RING, t.tiers.n_flush = 1;
        if (!strcmp(name, "q2_0-attn-rot") && head_dim % 64 == 0) {
            int32_t b = 64;
            while (head_dim % (2 * b) == 0) b *= 2;
            t.k_engine_hadamard = b, t.v_engine_hadamard = 64;
        }
    } else if (!strcmp(name, "oscar-omni")) {   // OScaR: the release stores bf162 meta (f16 on request)
        t.quant = OSCAR_KVQ_OMNI, t.rot = OSCAR_ROT_HADAMARD, t.tiers.block = t.kivi.k_block_tokens;
        t.kivi.meta_dtype = meta_dtype == OSCAR_META_F16 ? OSCAR_META_F16 : OSCAR_META_BF16;
    } else {
        return osc_error(OSCAR_ERR_INVALID,
                         "unknown method '%s' (bf16, naive, hadamard, oscar, oscar-searched, oscar-lm, int4-bdh, kivi, "
                         "q2_0, q2_0-attn-rot, oscar-omni)",
                         name);
    }
    enum oscar_status st = oscar_kv_transform_check(&t);
    if (st == OSCAR_OK) *out = t;
    return st;
}

enum oscar_status oscar_kv_transform_preset(const char * name, int32_t n_layer, int32_t n_head_kv,
                                                 int32_t head_dim, int32_t group_size,
                                                 enum oscar_quant_meta_dtype meta_dtype,
                                                 const struct oscar_tiering * tiers, bool rot_per_head,
                                                 const float * k_rot, const float * v_rot, bool clip_per_head,
                                                 const float * k_clip, const float * v_clip,
                                                 struct oscar_kv_transform * out) {
    const struct oscar_rotations r = oscar_rotations_view(n_layer, n_head_kv, head_dim, rot_per_head ? n_head_kv : 1,
                                                          k_rot, v_rot, clip_per_head ? n_head_kv : 1, k_clip, v_clip,
                                                          NULL);
    return oscar_kv_transform_preset_rot(name, n_layer, n_head_kv, head_dim, group_size, meta_dtype, tiers,
                                     k_rot || v_rot || k_clip || v_clip ? &r : NULL, out);
}

const float * oscar_kv_transform_k_mean(const struct oscar_kv_transform * tf, int32_t layer, int32_t h) {
    if (!tf->k_mean) return NULL;
    const struct oscar_rotations r = oscar_rotations_view(tf->n_layer, tf->n_head_kv, tf->head_dim, 1, NULL, NULL, 1,
                                                          NULL, NULL, tf->k_mean);
    return oscar_rotations_k_mean(&r, layer, h);
}

double oscar_kv_transform_bpe(const struct oscar_kv_transform * tf, int64_t ctx) {
    int64_t P = tf->tiers.mode == OSCAR_TIERS_NONE ? 0 : tf->tiers.n_sink;
    int64_t R = tf->tiers.mode == OSCAR_TIERS_NONE ? 0 : tf->tiers.n_recent;
    int32_t D = tf->head_dim;
    switch (tf->quant) {
    case OSCAR_KVQ_IDENTITY:
    case OSCAR_KVQ_BF16: return 16.0;
    case OSCAR_KVQ_INT2: {
        struct oscar_int2_params q = tf->int2;
        q.head_dim = D;   // group size 0 means the transform's head_dim
        return oscar_int2_bpe(&q, P, R, ctx);
    }
    case OSCAR_KVQ_INT4_BDH:
        return oscar_bpe(4, 2 * 8 * (int32_t) oscar_meta_dtype_size(tf->int2.meta_dtype), D, P, R, ctx, 16);
    case OSCAR_KVQ_Q2_0:   // 12 bytes per 32 elements; HP rows fp16
        return oscar_bpe(2, 32, OSCAR_Q2_0_BLOCK, P, R, ctx, 16);
    case OSCAR_KVQ_KIVI: {
        // K: one (scale, bias) per channel per B tokens; V: per Gv group. Mean of K and V.
        double mb = 2.0 * 8.0 * (double) oscar_meta_dtype_size(tf->kivi.meta_dtype);
        double bk = 2.0 + mb / tf->kivi.k_block_tokens, bv = 2.0 + mb / tf->kivi.v_group_size;
        double b = 0.5 * (bk + bv);
        double share = ctx > 0 ? (double) (P + R) / (double) ctx : 1.0;
        if (share > 1.0) share = 1.0;
        return b + share * (16.0 - b);
    }
    case OSCAR_KVQ_OMNI: {
        // As KIVI, plus one fp32 norm per token for all KV heads: 32 bits per Hkv·D K elements.
        double mb = 2.0 * 8.0 * (double) oscar_meta_dtype_size(tf->kivi.meta_dtype);
        double b = 0.5 * (2.0 + mb / tf->kivi.k_block_tokens + 2.0 + mb / tf->kivi.v_group_size);
        double share = ctx > 0 ? (double) (P + R) / (double) ctx : 1.0;
        if (share > 1.0) share = 1.0;
        return b + share * (16.0 - b) + 0.5 * 32.0 / ((double) tf->n_head_kv * D);
    }
    }
    return 16.0;
}

// ---- blocks of rows ---------------------------------------------------------------------
enum { ROW_BLOCK = 64 };   // rows of one KV head per call of block_transform (one task of a layer)
#define ROW_SCRATCH(n, D) (4 * (size_t) (n) * (size_t) (D))

// INT2-tier value yq [D] of the rotated row y [D] (xc: the same row unrotated and centred), or, for
// OScaR V, the unrotated value straight into qv (*done).
static enum oscar_status quantize_row(const struct oscar_kv_transform * tf, bool is_k, int32_t layer, int32_t h,
                                      bool prefill_path, const float * xc, const float * y, float * yq, float * qv,
                                      bool * done, struct oscar_quant_stats * st) {
    int32_t D = tf->head_dim;
    uint8_t codes[OSCAR_MAX_HEAD_DIM / 2];
    float meta[2 * OSCAR_MAX_HEAD_DIM];
    enum oscar_status s = OSCAR_OK;
    *done = false;
    switch (tf->quant) {
    case OSCAR_KVQ_IDENTITY:
    case OSCAR_KVQ_BF16:
        memcpy(yq, y, sizeof(float) * (size_t) D);
        break;
    case OSCAR_KVQ_INT2: {
        struct oscar_int2_params p = tf->int2;
        p.clip_ratio = p.scheme == OSCAR_INT2_SYM ? 0.0 : clip_ratio(tf, is_k, layer, h);
        if (!prefill_path) p.clip_algo = tf->demote_clip_algo;
        if (!prefill_path && p.scheme == OSCAR_INT2_LLOYD_MAX) p.scheme = OSCAR_INT2_ASYM;   // §10: flush is uniform
        s = oscar_int2_quantize_rows(&p, y, 1, codes, meta, st);
        if (s == OSCAR_OK) s = oscar_int2_dequantize_rows(&p, codes, meta, 1, yq);
        break;
    }
    case OSCAR_KVQ_INT4_BDH: {
        // The quantizer rotates raw rows itself; dequantize with unrotate gives the row back.
        struct oscar_int4_bdh_params p = {.head_dim = D, .hadamard_order = tf->int4_order,
                                          .meta_dtype = tf->int2.meta_dtype};
        s = oscar_int4_bdh_quantize_rows(&p, y, 1, codes, meta, st);
        if (s == OSCAR_OK) s = oscar_int4_bdh_dequantize_rows(&p, codes, meta, 1, true, yq);
        break;
    }
    case OSCAR_KVQ_Q2_0: {   // one head's row is one fork row here (kv_transform_check's shapes)
        struct oscar_q2_0_params p = {.hadamard = false, .clip_ratio = (float) clip_ratio(tf, is_k, layer, h)};
        s = oscar_q2_0_quantize_row(&p, y, D, codes, st);
        if (s == OSCAR_OK) s = oscar_q2_0_dequantize_row(&p, codes, D, yq);
        break;
    }
    case OSCAR_KVQ_OMNI: {   // V rows only; the quantizer rotates the raw row itself and rotates back
        struct oscar_omni_params p = {.n_head_kv = tf->n_head_kv, .kivi = tf->kivi};
        s = oscar_omni_quantize_v_rows(&p, xc, 1, codes, meta, st);
        if (s == OSCAR_OK) oscar_omni_dequantize_v_rows(&p, codes, meta, 1, true, qv);
        *done = true;
        break;
    }
    case OSCAR_KVQ_KIVI:   // V rows only (K blocks are handled by the caller)
        s = oscar_kivi_quantize_v_rows(&tf->kivi, y, 1, codes, meta, st);
        if (s == OSCAR_OK) oscar_kivi_dequantize_v_rows(&tf->kivi, codes, meta, 1, yq);
        break;
    }
    return s;
}

// n <= ROW_BLOCK rows of KV head h, row r at x + r·rs: hp + r·rs gets its HP value and, if want[r],
// q + r·rs its INT2-tier value (written by the prefill path if pre[r], else by demotion), both
// unrotated. Rotations go n rows at a time (oscar_kv_rotate_rows), the rest row by row, so every
// row gets the same bits as alone (oscar_kv_transform_row is n = 1). scr: ROW_SCRATCH(n, D) floats.
static enum oscar_status block_transform(const struct oscar_kv_transform * tf, bool is_k, int32_t layer, int32_t h,
                                         int32_t n, const bool * pre, const bool * want, const float * x, size_t rs,
                                         float * hp, float * q, struct oscar_quant_stats * st, float * scr) {
    const int32_t D = tf->head_dim;
    const size_t  Dz = (size_t) D;
    const size_t  nD = (size_t) n * Dz;
    float * xc = scr, * y = xc + nD, * t = y + nD, * yq = t + nD;
    int32_t idx[ROW_BLOCK], m = 0;
    const float * mu = is_k ? oscar_kv_transform_k_mean(tf, layer, h) : NULL;
    if (tf->quant == OSCAR_KVQ_OMNI && is_k)
        return osc_error(OSCAR_ERR_INVALID, "kv transform '%s': K rows go per token (oscar_kv_transform_omni_*)",
                         tf->name);
    if (tf->quant == OSCAR_KVQ_IDENTITY) {
        for (int32_t r = 0; r < n; r++) {
            memcpy(hp + r * rs, x + r * rs, sizeof(float) * Dz);
            if (want[r]) memcpy(q + r * rs, x + r * rs, sizeof(float) * Dz);
        }
        return OSCAR_OK;
    }
    for (int32_t r = 0; r < n; r++)
        for (int32_t d = 0; d < D; d++) xc[r * Dz + d] = mu ? x[r * rs + d] - mu[d] : x[r * rs + d];
    rotate(tf, is_k, layer, h, n, xc, y, false);
    if (tf->hp_bf16 || tf->quant == OSCAR_KVQ_BF16) oscar_bf16_round_array(y, nD);
    if (tf->quant == OSCAR_KVQ_Q2_0) {   // the fork's HP buffer is F16; Q2_0 quantizes the fp32 row
        for (size_t i = 0; i < nD; i++) t[i] = oscar_f16_to_f32(oscar_f32_to_f16(y[i]));
        rotate(tf, is_k, layer, h, n, t, yq, true);
    } else {
        rotate(tf, is_k, layer, h, n, y, yq, true);
    }
    for (int32_t r = 0; r < n; r++)
        for (int32_t d = 0; d < D; d++) hp[r * rs + d] = mu ? yq[r * Dz + d] + mu[d] : yq[r * Dz + d];
    // the wanted rows' INT2-tier values, gathered into t to be rotated back together
    for (int32_t r = 0; r < n; r++) {
        if (!want[r]) continue;
        bool done = false;
        enum oscar_status s = quantize_row(tf, is_k, layer, h, pre[r], xc + r * Dz, y + r * Dz, t + m * Dz,
                                           q + r * rs, &done, st);
        if (s != OSCAR_OK) return s;
        if (!done) idx[m++] = r;
    }
    rotate(tf, is_k, layer, h, m, t, yq, true);
    for (int32_t i = 0; i < m; i++)
        for (int32_t d = 0; d < D; d++) q[idx[i] * rs + d] = mu ? yq[i * Dz + d] + mu[d] : yq[i * Dz + d];
    return OSCAR_OK;
}

// KIVI K of one sequence and KV head: full blocks of B rows from q0 over the
// HP (rotated, bf16) values; rows outside full INT2-capable blocks keep HP.
static enum oscar_status kivi_k_seq(const struct oscar_kv_transform * tf, int32_t h, int64_t hi, int64_t q0,
                                    const float * k_hp, float * k_q, struct oscar_quant_stats * st) {
    int32_t D = tf->head_dim, Hkv = tf->n_head_kv, B = tf->kivi.k_block_tokens;
    size_t rs = (size_t) Hkv * D;
    uint8_t * codes = malloc((size_t) D * B / 4);
    float * meta = malloc(sizeof(float) * 2 * (size_t) D);
    float * blk = malloc(sizeof(float) * (size_t) B * D);
    enum oscar_status s = OSCAR_OK;
    if (!codes || !meta || !blk) {
        s = osc_error(OSCAR_ERR_NOMEM, "kivi: block scratch");
        goto out;
    }
    for (int64_t b0 = q0; b0 + B <= hi; b0 += B) {
        for (int32_t r = 0; r < B; r++) memcpy(blk + (size_t) r * D, k_hp + (size_t) (b0 + r) * rs + (size_t) h * D,
                                               sizeof(float) * (size_t) D);
        s = oscar_kivi_quantize_k_block(&tf->kivi, blk, D, codes, meta, st);
        if (s != OSCAR_OK) goto out;
        oscar_kivi_dequantize_k_block(&tf->kivi, codes, meta, k_q + (size_t) b0 * rs + (size_t) h * D, (int64_t) rs);
    }
out:
    free(codes);
    free(meta);
    free(blk);
    return s;
}

enum oscar_status oscar_kv_transform_row(const struct oscar_kv_transform * tf, bool is_k, int32_t layer, int32_t h,
                                         bool prefill_path, const float * x, float * hp, float * q,
                                         struct oscar_quant_stats * st) {
    float scr[ROW_SCRATCH(1, OSCAR_MAX_HEAD_DIM)], tmp[OSCAR_MAX_HEAD_DIM];
    bool want = q != NULL;
    return block_transform(tf, is_k, layer, h, 1, &prefill_path, &want, x, (size_t) tf->head_dim, hp, q ? q : tmp,
                           st, scr);
}

enum oscar_status oscar_kv_transform_kivi_block(const struct oscar_kv_transform * tf, int32_t h, int64_t b0,
                                                const float * k_hp, float * k_q, struct oscar_quant_stats * st) {
    return kivi_k_seq(tf, h, b0 + tf->kivi.k_block_tokens, b0, k_hp, k_q, st);
}

static void stats_add(struct oscar_quant_stats * d, const struct oscar_quant_stats * s) {
    d->n_rows += s->n_rows, d->n_degenerate += s->n_degenerate, d->n_clipped += s->n_clipped;
}

// Task i of one sequence's rows [b, b + len): rows [p0, p0 + ROW_BLOCK) of KV head h, K or V.
static enum oscar_status layer_task(const struct oscar_kv_transform * tf, int32_t layer, int64_t i, int64_t b,
                                    int64_t len, int64_t lo, int64_t hi, const float * k, const float * v,
                                    float * k_hp, float * v_hp, float * k_q, float * v_q,
                                    struct oscar_quant_stats * st, float * scr) {
    const int32_t Hkv = tf->n_head_kv, D = tf->head_dim;
    const size_t  rs = (size_t) Hkv * D;
    const bool    is_k = i % 2 == 0, omni = tf->quant == OSCAR_KVQ_OMNI;
    const bool    k_blocks = omni || tf->quant == OSCAR_KVQ_KIVI;   // K INT2 values come per block
    const int32_t h = (int32_t) (i / 2 % Hkv);
    const int64_t p0 = i / 2 / Hkv * ROW_BLOCK;
    const int32_t n = (int32_t) (len - p0 < ROW_BLOCK ? len - p0 : ROW_BLOCK);
    if (is_k && omni) return OSCAR_OK;   // K rows go per token (oscar_kv_transform_layer)
    bool want[ROW_BLOCK], pre[ROW_BLOCK];
    for (int32_t r = 0; r < n; r++) {
        int64_t p = p0 + r;
        want[r] = p >= lo && p < hi && !(is_k && k_blocks);
        pre[r] = oscar_tier_from_prefill(&tf->tiers, p, len);
    }
    const size_t o = (size_t) (b + p0) * rs + (size_t) h * D;
    float * hp = (is_k ? k_hp : v_hp) + o, * q = (is_k ? k_q : v_q) + o;
    enum oscar_status s = block_transform(tf, is_k, layer, h, n, pre, want, (is_k ? k : v) + o, rs, hp, q, st, scr);
    for (int32_t r = 0; r < n && s == OSCAR_OK; r++)
        if (!want[r]) memcpy(q + r * rs, hp + r * rs, sizeof(float) * (size_t) D);
    return s;
}

enum oscar_status oscar_kv_transform_layer(const struct oscar_kv_transform * tf, int32_t layer, int32_t n_tokens,
                                           int32_t n_seq, const int32_t * seq_start, const float * k,
                                           const float * v, float * k_hp, float * v_hp, float * k_q, float * v_q,
                                           int32_t n_threads, struct oscar_quant_stats * st) {
    int32_t D = tf->head_dim, Hkv = tf->n_head_kv;
    size_t rs = (size_t) Hkv * D;
    if (layer < 0 || layer >= tf->n_layer)
        return osc_error(OSCAR_ERR_INVALID, "kv transform '%s': layer %d of %d", tf->name, layer, tf->n_layer);
    if (seq_start[0] != 0 || seq_start[n_seq] != n_tokens)
        return osc_error(OSCAR_ERR_INVALID, "kv transform: sequence boundaries do not cover %d tokens", n_tokens);
    const int32_t nt = n_threads > 0 ? n_threads : omp_get_max_threads();
    const int64_t max_tasks = ((int64_t) n_tokens / ROW_BLOCK + n_seq) * Hkv * 2;
    struct oscar_quant_stats stk = {0}, stv = {0};
    struct oscar_quant_stats * tst = calloc((size_t) max_tasks + 1, sizeof *tst);
    enum oscar_status * tstatus = calloc((size_t) max_tasks + 1, sizeof *tstatus);
    float * scr = malloc(sizeof(float) * ROW_SCRATCH(ROW_BLOCK, D) * (size_t) nt);
    char (*msg)[256] = calloc((size_t) max_tasks + 1, sizeof *msg);
    enum oscar_status e = OSCAR_OK;
    if (!tst || !tstatus || !scr || !msg) e = osc_error(OSCAR_ERR_NOMEM, "kv transform: layer %d scratch", layer);
    for (int32_t s = 0; s < n_seq && e == OSCAR_OK; s++) {
        int64_t b = seq_start[s], len = seq_start[s + 1] - b, lo, hi;
        oscar_tier_int2_range(&tf->tiers, len - 1, len, &lo, &hi);   // the largest INT2 set (t = len-1)
        bool omni = tf->quant == OSCAR_KVQ_OMNI;
        for (int64_t p = 0; omni && p < len && e == OSCAR_OK; p++) {   // the omni-token norm spans the heads
            size_t ot = (size_t) (b + p) * rs;
            e = oscar_kv_transform_omni_k_token(tf, k + ot, k_hp + ot);
            memcpy(k_q + ot, k_hp + ot, sizeof(float) * rs);
        }
        if (e != OSCAR_OK) break;
        // One task per ROW_BLOCK rows of one KV head, K or V; each keeps its own stats and status,
        // summed (and the first failure reported) in task order.
        const int64_t n_tasks = (len + ROW_BLOCK - 1) / ROW_BLOCK * Hkv * 2;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (int64_t i = 0; i < n_tasks; i++) {
            tst[i] = (struct oscar_quant_stats){0};
            tstatus[i] = layer_task(tf, layer, i, b, len, lo, hi, k, v, k_hp, v_hp, k_q, v_q, &tst[i],
                                    scr + ROW_SCRATCH(ROW_BLOCK, D) * (size_t) omp_get_thread_num());
            if (tstatus[i] != OSCAR_OK) snprintf(msg[i], sizeof msg[i], "%s", oscar_last_error());
        }
        for (int64_t i = 0; i < n_tasks && e == OSCAR_OK; i++) {
            if (tstatus[i] != OSCAR_OK) e = osc_error(tstatus[i], "%s", msg[i]);
            stats_add(i % 2 == 0 ? &stk : &stv, &tst[i]);
        }
        for (int64_t b0 = lo, B = tf->kivi.k_block_tokens; e == OSCAR_OK && omni && b0 + B <= hi; b0 += B)
            e = oscar_kv_transform_omni_block(tf, b0, k + (size_t) b * rs, k_q + (size_t) b * rs, &stk);
        for (int32_t h = 0; e == OSCAR_OK && h < Hkv && tf->quant == OSCAR_KVQ_KIVI; h++)
            e = kivi_k_seq(tf, h, hi, lo, k_hp + (size_t) b * rs, k_q + (size_t) b * rs, &stk);
    }
    free(tst);
    free(tstatus);
    free(scr);
    free(msg);
    if (e == OSCAR_OK && st) stats_add(&st[0], &stk), stats_add(&st[1], &stv);
    return e;
}
