// eval-device.c - gate / clip-search layer errors on a backend (contract in
// eval-device.h). The "cpu" branch is lib/verify itself; the device branch
// translates a struct oscar_kv_transform into the backend's per-layer method
// description and refuses what the device does not implement.
#include "verify/eval-device.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"

struct oscar_eval_dev {
    const struct oscar_backend_i * be;   // NULL: the lib/verify reference
    struct oscar_backend_eval * dev;
    struct oscar_eval_shape shape;
    int32_t n_threads;
    struct oscar_layer_input in;         // the current layer
    bool uploaded;                       // in is on the device with tiers below
    struct oscar_tiering tiers;
    uint8_t * int2_row;                  // [max_tokens]
    double * clip_k, * clip_v;           // [max_cand, Hkv]
    float * cpu_buf;                     // cpu candidates: k_hp, v_hp, k_q[G], v_q[G]
    double t_upload, t_out_rel, t_cand;  // seconds spent, for the debug log
};

const char * oscar_eval_dev_backend(const struct oscar_eval_dev * ev) { return ev->be ? ev->be->name : "cpu"; }

void oscar_eval_dev_free(struct oscar_eval_dev * ev) {
    if (!ev) return;
    osc_debug("layer eval (%s): uploads %.2f s, out_rel %.2f s, candidates %.2f s", oscar_eval_dev_backend(ev),
              ev->t_upload, ev->t_out_rel, ev->t_cand);
    if (ev->dev) ev->be->eval_free(ev->dev);
    free(ev->int2_row); free(ev->clip_k); free(ev->clip_v); free(ev->cpu_buf);
    free(ev);
}

enum oscar_status oscar_eval_dev_open(const char * backend, const struct oscar_eval_shape * shape, int32_t n_threads,
                                      struct oscar_eval_dev ** out) {
    *out = NULL;
    const struct oscar_backend_i * be = NULL;
    enum oscar_status st = oscar_backend_get(backend, &be);
    if (st != OSCAR_OK) return st;
    struct oscar_eval_dev * ev = calloc(1, sizeof *ev);
    if (!ev) return osc_error(OSCAR_ERR_NOMEM, "layer eval: out of memory");
    ev->shape = *shape, ev->n_threads = n_threads;
    if (strcmp(be->name, "cpu") != 0) {
        size_t nc = (size_t) (shape->max_cand > 0 ? shape->max_cand : 1) * (size_t) shape->n_head_kv;
        ev->be = be;
        ev->int2_row = malloc((size_t) shape->max_tokens + 1);
        ev->clip_k = malloc(nc * sizeof(double)), ev->clip_v = malloc(nc * sizeof(double));
        if (!ev->be->eval_open)
            st = osc_error(OSCAR_ERR_UNSUPPORTED, "layer eval: backend '%s' cannot evaluate layers", be->name);
        else if (!ev->int2_row || !ev->clip_k || !ev->clip_v)
            st = osc_error(OSCAR_ERR_NOMEM, "layer eval: out of memory");
        else
            st = be->eval_open(shape, &ev->dev);
    }
    if (st != OSCAR_OK) {
        oscar_eval_dev_free(ev);
        return st;
    }
    *out = ev;
    return OSCAR_OK;
}

enum oscar_status oscar_eval_dev_layer(struct oscar_eval_dev * ev, const struct oscar_layer_input * in) {
    if (in->n_head != ev->shape.n_head || in->n_head_kv != ev->shape.n_head_kv || in->head_dim != ev->shape.head_dim ||
        in->n_embd != ev->shape.n_embd || !in->wo || in->attn_scale != ev->shape.attn_scale)
        return osc_error(OSCAR_ERR_INVALID, "layer eval: layer %d does not fit the evaluator's shape or score scale "
                         "(or has no W_O)", in->layer);
    if (in->n_tokens < 0 || in->n_tokens > ev->shape.max_tokens || in->n_seq < 0 || !in->seq_start ||
        in->seq_start[0] != 0 || in->seq_start[in->n_seq] != in->n_tokens)
        return osc_error(OSCAR_ERR_INVALID, "layer eval: layer %d has %d tokens in %d sequences (evaluator: up to %d)",
                         in->layer, in->n_tokens, in->n_seq, ev->shape.max_tokens);
    ev->in = *in;
    ev->uploaded = false;
    return OSCAR_OK;
}

// ---- device branch ---------------------------------------------------------------------------

static bool same_tiers(const struct oscar_tiering * a, const struct oscar_tiering * b) {
    return a->mode == b->mode && a->n_sink == b->n_sink && a->n_recent == b->n_recent && a->n_flush == b->n_flush &&
           a->prompt_len == b->prompt_len && a->block == b->block;
}

static enum oscar_status check_device_tf(const struct oscar_eval_dev * ev, const struct oscar_kv_transform * tf) {
    enum oscar_status st = oscar_kv_transform_check(tf);
    if (st != OSCAR_OK) return st;
    if (tf->quant != OSCAR_KVQ_INT2 || tf->int2.scheme == OSCAR_INT2_LLOYD_MAX || tf->int2.bf16_dequant ||
        tf->tiers.mode == OSCAR_TIERS_DECODE || tf->tiers.block > 1)
        return osc_error(OSCAR_ERR_UNSUPPORTED,
                         "layer eval (%s): method '%s' needs INT2 ASYM/SYM, no bf16 dequantization and a "
                         "query-independent tiering (NONE or STATIC)", ev->be->name, tf->name);
    if (tf->n_head_kv != ev->shape.n_head_kv || tf->head_dim != ev->shape.head_dim || ev->in.layer >= tf->n_layer)
        return osc_error(OSCAR_ERR_INVALID, "layer eval: method '%s' does not fit layer %d", tf->name, ev->in.layer);
    return OSCAR_OK;
}

// The layer's rows on the device, with the INT2 flag of every row under tf's tiering.
static enum oscar_status upload(struct oscar_eval_dev * ev, const struct oscar_tiering * tr) {
    if (ev->uploaded && same_tiers(&ev->tiers, tr)) return OSCAR_OK;
    const struct oscar_layer_input * in = &ev->in;
    for (int32_t s = 0; s < in->n_seq; s++) {
        int64_t b = in->seq_start[s], len = in->seq_start[s + 1] - b, lo, hi;
        oscar_tier_int2_range(tr, len - 1, len, &lo, &hi);   // query-independent: the last query's set
        for (int64_t p = 0; p < len; p++) ev->int2_row[b + p] = p >= lo && p < hi;
    }
    struct oscar_eval_layer el = {.n_tokens = in->n_tokens, .n_seq = in->n_seq, .seq_start = in->seq_start,
                                  .int2_row = ev->int2_row, .q = in->q, .k = in->k, .v = in->v, .wo = in->wo,
                                  .window = in->window};
    double t0 = osc_now();
    enum oscar_status st = ev->be->eval_layer(ev->dev, &el);
    ev->t_upload += osc_now() - t0;
    if (st != OSCAR_OK) return st;
    ev->tiers = *tr, ev->uploaded = true;
    return OSCAR_OK;
}

// tf's K or V description for the current layer; clip[c * Hkv + h] filled by the caller.
static struct oscar_eval_kv method_kv(const struct oscar_eval_dev * ev, const struct oscar_kv_transform * tf, bool is_k,
                                      const double * clip) {
    const bool mat = tf->rot == OSCAR_ROT_MATRIX;
    struct oscar_eval_kv kv = {.rot = mat                             ? OSCAR_EVAL_ROT_MATRIX
                                      : tf->rot == OSCAR_ROT_HADAMARD ? OSCAR_EVAL_ROT_HADAMARD
                                                                      : OSCAR_EVAL_ROT_IDENTITY,
                               .rot_mat = NULL, .n_rot = mat ? tf->rots.n_rot : 1, .clip = clip,
                               .n_clip = tf->n_head_kv};
    // the layer's block of n_rot matrices (the device reads [n_rot, D, D])
    const int32_t l = ev->in.layer;
    if (mat) kv.rot_mat = is_k ? oscar_rotations_k(&tf->rots, l, 0) : oscar_rotations_v(&tf->rots, l, 0);
    if (is_k) kv.mu = oscar_kv_transform_k_mean(tf, l, 0);
    return kv;
}

static struct oscar_eval_method method(const struct oscar_eval_dev * ev, const struct oscar_kv_transform * tf) {
    struct oscar_eval_method m = {.int2 = tf->int2, .hp_bf16 = tf->hp_bf16};
    m.k = method_kv(ev, tf, true, ev->clip_k);
    m.v = method_kv(ev, tf, false, ev->clip_v);
    return m;
}

// The clip ratio lib/verify uses for (layer, head) of K or V.
static double tf_clip(const struct oscar_kv_transform * tf, bool is_k, int32_t layer, int32_t h) {
    if (!(is_k ? tf->rots.k_clip : tf->rots.v_clip)) return is_k ? tf->k_clip : tf->v_clip;
    return is_k ? *oscar_rotations_k_clip(&tf->rots, layer, h) : *oscar_rotations_v_clip(&tf->rots, layer, h);
}

// ---- entry points ------------------------------------------------------------------------------

enum oscar_status oscar_eval_dev_out_rel(struct oscar_eval_dev * ev, const struct oscar_kv_transform * tf,
                                         double * out_rel) {
    *out_rel = 0.0;
    double t0 = osc_now();
    if (!ev->be) {
        struct oscar_layer_metrics m;
        enum oscar_status st = oscar_verify_layer_metrics(tf, &ev->in, ev->n_threads, &m);
        *out_rel = m.out_rel;
        ev->t_out_rel += osc_now() - t0;
        return st;
    }
    enum oscar_status st = check_device_tf(ev, tf);
    if (st != OSCAR_OK || (st = upload(ev, &tf->tiers)) != OSCAR_OK) return st;
    t0 = osc_now();
    for (int32_t h = 0; h < tf->n_head_kv; h++) {
        ev->clip_k[h] = tf_clip(tf, true, ev->in.layer, h);
        ev->clip_v[h] = tf_clip(tf, false, ev->in.layer, h);
    }
    struct oscar_eval_method m = method(ev, tf);
    double num = 0.0, den = 0.0;
    st = ev->be->eval_out_err(ev->dev, &m, &num, &den);
    ev->t_out_rel += osc_now() - t0;
    if (st != OSCAR_OK) return st;
    *out_rel = den > 0.0 ? num / den : 0.0;   // oscar_layer_metrics_finish's ratio
    return OSCAR_OK;
}

enum oscar_status oscar_eval_dev_out_rel_methods(struct oscar_eval_dev * ev, const struct oscar_kv_transform * tf,
                                                 int32_t n, double * out_rel) {
    if (n < 1 || n > OSCAR_METRICS_MAX_CACHES)
        return osc_error(OSCAR_ERR_INVALID, "layer eval: %d methods (1 to %d)", n, OSCAR_METRICS_MAX_CACHES);
    if (ev->be) { // the device computes each method's errors on its own
        enum oscar_status st = OSCAR_OK;
        for (int32_t i = 0; i < n && st == OSCAR_OK; i++) st = oscar_eval_dev_out_rel(ev, &tf[i], &out_rel[i]);
        return st;
    }
    double t0 = osc_now();
    struct oscar_layer_metrics m[OSCAR_METRICS_MAX_CACHES];
    enum oscar_status st = oscar_verify_layer_metrics_methods(tf, n, &ev->in, ev->n_threads, m);
    for (int32_t i = 0; i < n; i++) out_rel[i] = st == OSCAR_OK ? m[i].out_rel : 0.0;
    ev->t_out_rel += osc_now() - t0;
    return st;
}

// Candidates [c0, c1) of the n_cand (all of them: 0, n_cand); rows of k_num / v_num at their index.
static enum oscar_status cpu_candidates(struct oscar_eval_dev * ev, struct oscar_kv_transform * tf, int32_t n_cand,
                                        int32_t c0, int32_t c1, const double * ratios, bool v_per_head,
                                        double * k_num, double * k_den, double * v_num, double * v_den) {
    const struct oscar_layer_input * in = &ev->in;
    size_t n = (size_t) in->n_tokens * (size_t) in->n_head_kv * (size_t) in->head_dim + 1;
    float * buf = realloc(ev->cpu_buf, n * (2 + 2 * (size_t) (c1 - c0)) * sizeof(float));
    const float * kq[OSCAR_EVAL_MAX_CAND], * vq[OSCAR_EVAL_MAX_CAND];
    if (!buf) return osc_error(OSCAR_ERR_NOMEM, "clip search: %d candidates x %d held-out rows", (int) (c1 - c0),
                               (int) in->n_tokens);
    ev->cpu_buf = buf;
    float * k_hp = buf, * v_hp = buf + n;
    for (int32_t c = c0; c < c1; c++) {
        float * kc = buf + (2 + 2 * (size_t) (c - c0)) * n, * vc = kc + n;
        tf->k_clip = tf->v_clip = ratios[c];
        enum oscar_status st = oscar_kv_transform_layer(tf, in->layer, in->n_tokens, in->n_seq, in->seq_start, in->k,
                                                        in->v, k_hp, v_hp, kc, vc, ev->n_threads, NULL);
        if (st != OSCAR_OK) return st;
        kq[c] = kc, vq[c] = vc;
    }
    return oscar_verify_candidate_errors_part(in, &tf->tiers, n_cand, c0, c1, k_hp, v_hp, kq, vq, v_per_head,
                                              ev->n_threads, k_num, k_den, v_num, v_den);
}

// The device's sums for n candidates (ratios[0 .. n)); n = 0: k_den and v_den alone. Each
// candidate's bits do not depend on the others evaluated with it (layer-eval.cu), so a part of
// a grid gives the whole grid's numbers in its rows.
static enum oscar_status device_candidates(struct oscar_eval_dev * ev, struct oscar_kv_transform * t, int32_t n,
                                           const double * ratios, bool v_per_head, double * k_num, double * k_den,
                                           double * v_num, double * v_den) {
    enum oscar_status st;
    if ((st = check_device_tf(ev, t)) != OSCAR_OK || (st = upload(ev, &t->tiers)) != OSCAR_OK) return st;
    if (t->tiers.mode == OSCAR_TIERS_DECODE)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "candidate errors: the DECODE tiering is query-dependent");
    for (int32_t c = 0; c < n; c++)
        for (int32_t h = 0; h < t->n_head_kv; h++)
            ev->clip_k[(size_t) c * (size_t) t->n_head_kv + (size_t) h] = ratios[c],
            ev->clip_v[(size_t) c * (size_t) t->n_head_kv + (size_t) h] = ratios[c];
    struct oscar_eval_method m = method(ev, t);
    return ev->be->eval_candidates(ev->dev, &m, n, v_per_head, k_num, k_den, v_num, v_den);
}

enum oscar_status oscar_eval_dev_candidates(struct oscar_eval_dev * ev, const struct oscar_kv_transform * tf,
                                            int32_t n_cand, const double * ratios, bool v_per_head, double * k_num,
                                            double * k_den, double * v_num, double * v_den) {
    if (n_cand < 1 || n_cand > ev->shape.max_cand || n_cand > OSCAR_EVAL_MAX_CAND)
        return osc_error(OSCAR_ERR_INVALID, "layer eval: %d clip candidates (at most %d)", (int) n_cand,
                         (int) ev->shape.max_cand);
    if (tf->rots.k_clip || tf->rots.v_clip)
        return osc_error(OSCAR_ERR_INVALID, "layer eval: method '%s' carries its own clips; candidates set them",
                         tf->name);
    struct oscar_kv_transform t = *tf;
    double t0 = osc_now(), u0 = ev->t_upload;
    enum oscar_status st = ev->be ? device_candidates(ev, &t, n_cand, ratios, v_per_head, k_num, k_den, v_num, v_den)
                                  : cpu_candidates(ev, &t, n_cand, 0, n_cand, ratios, v_per_head, k_num, k_den, v_num,
                                                   v_den);
    ev->t_cand += osc_now() - t0 - (ev->t_upload - u0);   // the rows' upload is counted apart
    return st;
}

enum oscar_status oscar_eval_dev_candidates_part(struct oscar_eval_dev * ev, const struct oscar_kv_transform * tf,
                                                 int32_t n_cand, int32_t c0, int32_t c1, const double * ratios,
                                                 bool v_per_head, double * k_num, double * k_den, double * v_num,
                                                 double * v_den) {
    if (n_cand < 1 || n_cand > ev->shape.max_cand || n_cand > OSCAR_EVAL_MAX_CAND || c0 < 0 || c1 < c0 || c1 > n_cand)
        return osc_error(OSCAR_ERR_INVALID, "layer eval: clip candidates %d-%d of %d (at most %d)", (int) c0, (int) c1,
                         (int) n_cand, (int) ev->shape.max_cand);
    if (tf->rots.k_clip || tf->rots.v_clip)
        return osc_error(OSCAR_ERR_INVALID, "layer eval: method '%s' carries its own clips; candidates set them",
                         tf->name);
    struct oscar_kv_transform t = *tf;
    double t0 = osc_now(), u0 = ev->t_upload, vd = 0.0;
    const size_t H = (size_t) tf->n_head_kv;
    enum oscar_status st = ev->be ? device_candidates(ev, &t, c1 - c0, ratios + c0, v_per_head, k_num + (size_t) c0 * H,
                                                      k_den, v_num + (size_t) c0 * (H + 1), v_den ? v_den : &vd)
                                  : cpu_candidates(ev, &t, n_cand, c0, c1, ratios, v_per_head, k_num, k_den, v_num, v_den);
    ev->t_cand += osc_now() - t0 - (ev->t_upload - u0);
    return st;
}

enum oscar_status oscar_eval_dev_rotations(struct oscar_eval_dev * ev, const struct oscar_kv_transform * tf,
                                           float * k_rot, float * v_rot, bool v_per_head,
                                           double * k_num, double * k_den, double * v_num, double * v_den) {
    const struct oscar_layer_input * in = &ev->in;
    const int32_t l = in->layer, Hkv = tf->n_head_kv;
    if (tf->rot != OSCAR_ROT_MATRIX || !k_rot || !v_rot)
        return osc_error(OSCAR_ERR_INVALID, "layer eval: method '%s' has no rotation matrices to replace", tf->name);
    if (l < 0 || l >= tf->n_layer)
        return osc_error(OSCAR_ERR_INVALID, "layer eval: method '%s' does not fit layer %d", tf->name, (int) l);
    double t0 = osc_now();
    enum oscar_status st;
    if (!ev->be) {   // a one-layer view of tf: layer l's clips and key mean, the given rotations
        struct oscar_kv_transform t = *tf;
        t.n_layer = 1;
        t.rots = oscar_rotations_layer_view(&tf->rots, l);
        t.rots.k = k_rot, t.rots.v = v_rot;
        t.k_mean = oscar_kv_transform_k_mean(tf, l, 0);
        size_t n = (size_t) in->n_tokens * (size_t) in->n_head_kv * (size_t) in->head_dim + 1;
        float * buf = realloc(ev->cpu_buf, n * 4 * sizeof(float));
        if (!buf) return osc_error(OSCAR_ERR_NOMEM, "layer eval: %d held-out rows", (int) in->n_tokens);
        ev->cpu_buf = buf;
        float * k_hp = buf, * v_hp = buf + n, * kq = buf + 2 * n, * vq = buf + 3 * n;
        st = oscar_kv_transform_layer(&t, 0, in->n_tokens, in->n_seq, in->seq_start, in->k, in->v, k_hp, v_hp, kq, vq,
                                      ev->n_threads, NULL);
        const float * kqs[1] = {kq}, * vqs[1] = {vq};
        if (st == OSCAR_OK)
            st = oscar_verify_candidate_errors(in, &t.tiers, 1, k_hp, v_hp, kqs, vqs, v_per_head, ev->n_threads, k_num,
                                               k_den, v_num, v_den);
        ev->t_cand += osc_now() - t0;
        return st;
    }
    if ((st = check_device_tf(ev, tf)) != OSCAR_OK || (st = upload(ev, &tf->tiers)) != OSCAR_OK) return st;
    t0 = osc_now();
    for (int32_t h = 0; h < Hkv; h++) {
        ev->clip_k[h] = tf_clip(tf, true, l, h);
        ev->clip_v[h] = tf_clip(tf, false, l, h);
    }
    struct oscar_eval_method m = method(ev, tf);
    m.k.rot_mat = k_rot, m.v.rot_mat = v_rot;
    st = ev->be->eval_candidates(ev->dev, &m, 1, v_per_head, k_num, k_den, v_num, v_den);
    ev->t_cand += osc_now() - t0;
    return st;
}
