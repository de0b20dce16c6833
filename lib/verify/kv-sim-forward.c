// kv-sim-forward.c - struct oscar_kv_transform -> struct oscar_fwd_kvsim (contract in
// kv-sim-forward.h).
#include "verify/kv-sim-forward.h"

#include <stdlib.h>
#include <string.h>

static void tier_range(const void * user, int64_t t, int64_t len, int64_t * lo, int64_t * hi) {
    oscar_tier_int2_range(user, t, len, lo, hi);
}

static bool tier_from_prefill(const void * user, int64_t p, int64_t len) {
    return oscar_tier_from_prefill(user, p, len);
}

static enum oscar_eval_rot eval_rot(enum oscar_kv_rot r) {
    return r == OSCAR_ROT_MATRIX ? OSCAR_EVAL_ROT_MATRIX : r == OSCAR_ROT_HADAMARD ? OSCAR_EVAL_ROT_HADAMARD
                                                                                : OSCAR_EVAL_ROT_IDENTITY;
}

// Clip ratios per layer the device is given: the transform's per-head ones, else one.
static int32_t n_clip(const struct oscar_kv_transform * tf) {
    return tf->rots.k_clip && tf->rots.n_clip > 1 ? tf->n_head_kv : 1;
}

// Side K or V: its rotations and its clips, [L, Nc] into clip (the transform's per-layer ratios
// or its one ratio).
static struct oscar_fwd_kvsim_side side_of(const struct oscar_kv_transform * tf, bool is_k, double * clip) {
    const int32_t nc = n_clip(tf);
    const float * arr = is_k ? tf->rots.k_clip : tf->rots.v_clip;
    for (int32_t l = 0; l < tf->n_layer; l++)
        for (int32_t h = 0; h < nc; h++)
            clip[(size_t) l * (size_t) nc + (size_t) h] =
                !arr ? (is_k ? tf->k_clip : tf->v_clip)
                     : (double) *(is_k ? oscar_rotations_k_clip(&tf->rots, l, h) : oscar_rotations_v_clip(&tf->rots, l, h));
    const bool mat = tf->rot == OSCAR_ROT_MATRIX;   // the device reads the flat [L, n_rot, D, D] stack
    return (struct oscar_fwd_kvsim_side){
        .rot = eval_rot(tf->rot), .rot_mat = mat ? (is_k ? tf->rots.k : tf->rots.v) : NULL,
        .n_rot = mat ? tf->rots.n_rot : 1, .clip = clip, .n_clip = nc,
        .engine_hadamard = is_k ? tf->k_engine_hadamard : tf->v_engine_hadamard};
}

static enum oscar_fwd_kvq fwd_quant(const struct oscar_kv_transform * tf, bool * ok) {
    *ok = true;
    switch (tf->quant) {
    case OSCAR_KVQ_INT2: *ok = !tf->int2.bf16_dequant; return OSCAR_FWD_KVQ_INT2;
    case OSCAR_KVQ_INT4_BDH: return OSCAR_FWD_KVQ_INT4_BDH;
    case OSCAR_KVQ_KIVI: return OSCAR_FWD_KVQ_KIVI;
    case OSCAR_KVQ_OMNI: return OSCAR_FWD_KVQ_OMNI;
    case OSCAR_KVQ_Q2_0: return OSCAR_FWD_KVQ_Q2_0;
    case OSCAR_KVQ_IDENTITY:
    case OSCAR_KVQ_BF16: break;
    }
    *ok = false;
    return OSCAR_FWD_KVQ_INT2;
}

enum oscar_status oscar_kv_fwd_sim_init(const struct oscar_kv_transform * tf, struct oscar_kv_fwd_sim * out) {
    memset(out, 0, sizeof *out);
    enum oscar_status st = oscar_kv_transform_check(tf);
    if (st != OSCAR_OK) return st;
    bool ok;
    const enum oscar_fwd_kvq q = fwd_quant(tf, &ok);
    const bool blocks = q == OSCAR_FWD_KVQ_KIVI || q == OSCAR_FWD_KVQ_OMNI;   // block-aligned tier rule
    if (!ok || (tf->tiers.block > 1 && !blocks))
        return osc_error(OSCAR_ERR_UNSUPPORTED, "device cache simulation: method '%s' (a quantizer or tiering the "
                         "device transform does not have)", tf->name);
    const int32_t D = tf->head_dim;
    if (D != 32 && D != 64 && D != 128 && D != 256)   // the device row transform's sizes (eval-transform.cuh)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "device cache simulation: head_dim %d (32, 64, 128, 256)", D);
    const int32_t nc = n_clip(tf);
    out->clip = malloc(2 * sizeof(double) * (size_t) tf->n_layer * (size_t) nc);
    if (!out->clip) return osc_error(OSCAR_ERR_NOMEM, "device cache simulation: clips");
    struct oscar_fwd_kvsim * d = &out->desc;
    d->quant = q, d->int2 = tf->int2, d->demote_clip_algo = tf->demote_clip_algo, d->hp_bf16 = tf->hp_bf16;
    d->int4_order = tf->int4_order, d->kivi = tf->kivi, d->k_mean = tf->k_mean;
    d->k = side_of(tf, true, out->clip);
    d->v = side_of(tf, false, out->clip + (size_t) tf->n_layer * nc);
    d->int2_range = tier_range, d->from_prefill = tier_from_prefill, d->user = &tf->tiers;
    return OSCAR_OK;
}

void oscar_kv_fwd_sim_free(struct oscar_kv_fwd_sim * s) {
    if (!s) return;
    free(s->clip);
    memset(s, 0, sizeof *s);
}
