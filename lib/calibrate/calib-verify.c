// calib-verify.c - calibrate's bridge to lib/verify (see calib-verify.h).
#include "calibrate/calib-verify.h"

struct oscar_tiering osc_calib_tiering(const struct oscar_calib_params * p) {
    struct oscar_tiering t = {.mode = OSCAR_TIERS_STATIC, .n_sink = p->sink, .n_recent = p->recent, .n_flush = 8,
                              .prompt_len = 0, .block = 1};
    return t;
}

struct oscar_layer_input osc_calib_layer_input(const struct oscar_calib_heldout * h, int32_t layer) {
    struct oscar_layer_input in = {
        .layer = layer, .n_tokens = (int32_t) h->n_rows, .n_seq = h->n_seq, .seq_start = h->seq_start,
        .q = h->q[layer], .k = h->k[layer], .v = h->v[layer], .wo = h->wo[layer],
        .n_head = h->n_head, .n_head_kv = h->n_head_kv, .head_dim = h->head_dim, .n_embd = h->n_embd,
        .attn_scale = h->attn_scale, .window = h->window ? h->window[layer] : 0,
    };
    return in;
}

enum oscar_status osc_calib_transform(const char * preset, const struct oscar_calib_params * p,
                                      const struct oscar_rotations * r, struct oscar_kv_transform * out) {
    struct oscar_tiering tr = osc_calib_tiering(p);
    enum oscar_status st = oscar_kv_transform_preset_rot(preset, r->n_layer, r->n_head_kv, r->head_dim, p->group_size,
                                                     p->scale_dtype, &tr, r, out);
    // OptR's key centering goes with the rotations, as the artifact serves it
    if (st == OSCAR_OK && out->rot == OSCAR_ROT_MATRIX) out->k_mean = r->k_mean;
    return st;
}

enum oscar_status osc_calib_eval_open(const struct oscar_calib_heldout * h, const struct oscar_calib_params * p,
                                      int32_t max_cand, struct oscar_eval_dev ** out) {
    int32_t max_len = 1;
    for (int32_t s = 0; s < h->n_seq; s++)
        if (h->seq_start[s + 1] - h->seq_start[s] > max_len) max_len = h->seq_start[s + 1] - h->seq_start[s];
    struct oscar_eval_shape shape = {.n_head = h->n_head, .n_head_kv = h->n_head_kv, .head_dim = h->head_dim,
                                     .n_embd = h->n_embd, .max_tokens = h->n_rows > max_len ? (int32_t) h->n_rows : max_len,
                                     .max_len = max_len, .max_cand = max_cand, .attn_scale = h->attn_scale};
    return oscar_eval_dev_open(p->eval_device, &shape, p->n_threads, out);
}
