// sim-compare.h - shared by tests/unit/test-kv-sim-device.c (backend "cpu")
// and tests/gpu/test-verify-sim.c (backend "cuda"): one layer of random
// q/k/v through metrics.h's CPU kv sim and through kv-sim-device, returning
// the max relative error over all query rows (||a - b|| / ||b|| per row).
#include <math.h>
#include <stdlib.h>

#include "verify/kv-sim-device.h"
#include "xorshift-normal.h"


// Two sequences of lengths len0, len1; Hq = 4 Hkv; D = 128; tiers mode.
static enum oscar_status sim_compare(const char * backend, uint64_t seed, enum oscar_tier_mode mode, int32_t len0,
                                     int32_t len1, int32_t Hkv, double * max_rel) {
    enum { D = 128 };
    int32_t Hq = 4 * Hkv, T = len0 + len1, seq_start[3] = { 0, len0, len0 + len1 };
    struct oscar_model_config cfg = {.n_layer = 1, .n_embd = Hq * D, .n_head = Hq, .n_head_kv = Hkv, .head_dim = D};
    struct oscar_tiering tiers = {.mode = mode, .n_sink = 4, .n_recent = 16, .n_flush = 8, .prompt_len = len0 / 2,
                                  .block = 1};
    struct oscar_kv_transform tf;
    struct oscar_kv_sim * cs = NULL;
    struct oscar_kv_sim_dev * ds = NULL;
    float * q = malloc(sizeof(float) * (size_t) T * Hq * D), * k = malloc(sizeof(float) * (size_t) T * Hkv * D);
    float * v = malloc(sizeof(float) * (size_t) T * Hkv * D), * o0 = malloc(sizeof(float) * (size_t) T * Hq * D);
    float * o1 = malloc(sizeof(float) * (size_t) T * Hq * D);
    int32_t * pos = malloc(sizeof(int32_t) * (size_t) T);
    xn_state = seed * 2654435761u + 1;
    for (int64_t i = 0; i < (int64_t) T * Hq * D; i++) q[i] = 2.0f * (float) xn_normal();
    for (int64_t i = 0; i < (int64_t) T * Hkv * D; i++) k[i] = (float) xn_normal() * ((i % D) % 17 == 3 ? 4.0f : 1.0f);
    for (int64_t i = 0; i < (int64_t) T * Hkv * D; i++) v[i] = (float) xn_normal();
    for (int32_t i = 0; i < T; i++) pos[i] = i < len0 ? i : i - len0;
    enum oscar_status st = oscar_kv_transform_preset("hadamard", 1, Hkv, D, 0, OSCAR_META_F32, &tiers, false, NULL,
                                                     NULL, false, NULL, NULL, &tf);
    if (st == OSCAR_OK) tf.k_clip = 0.95, tf.v_clip = 0.9;
    if (st == OSCAR_OK) st = oscar_kv_sim_init(&tf, &cfg, T, 1, &cs);
    if (st == OSCAR_OK) st = oscar_kv_sim_dev_init(backend, &tf, &cfg, T, &ds);
    struct oscar_capture_layer in;
    memset(&in, 0, sizeof in);
    in.layer = 0, in.n_tokens = T, in.n_seq = 2, in.seq_start = seq_start, in.pos = pos, in.q = q, in.k = k, in.v = v;
    in.config = &cfg;
    struct oscar_attention_override a = cs ? oscar_kv_sim_override(cs) : (struct oscar_attention_override) {0};
    struct oscar_attention_override b = ds ? oscar_kv_sim_dev_override(ds) : (struct oscar_attention_override) {0};
    if (st == OSCAR_OK) st = a.attend(a.user, 0, &in, o0);
    if (st == OSCAR_OK) st = b.attend(b.user, 0, &in, o1);
    *max_rel = 0.0;
    for (int64_t r = 0; st == OSCAR_OK && r < (int64_t) T * Hq; r++) {
        double e = 0.0, n = 0.0;
        for (int32_t d = 0; d < D; d++) {
            double x = o1[r * D + d], y = o0[r * D + d];
            e += (x - y) * (x - y), n += y * y;
        }
        double rel = sqrt(e / (n > 0 ? n : 1e-300));
        if (!(rel <= *max_rel)) *max_rel = rel;   // NaN propagates
    }
    oscar_kv_sim_free(cs);
    oscar_kv_sim_dev_free(ds);
    free(q), free(k), free(v), free(o0), free(o1), free(pos);
    return st;
}
