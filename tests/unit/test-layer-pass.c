// test-layer-pass.c - the layer-major calibration pass (oscar_calib_capture)
// equals two whole forward passes bit for bit: the accumulator state (every
// fp64 sum, counters, staged rows) and the held-out rows; and it gives the
// same bytes on a model whose layers it reads one at a time (oscar_model_open_random)
// as on the loaded model, W_O of the held-out rows included. The reference here
// is built from the public pieces only (oscar_forward_run + a capture hook +
// oscar_stats_add, pass 1 then pass 2), as oscar-calibrate computed it before.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "calibrate/calibrate.h"

enum { L = 3, N_SEQ = 7, N_HELD = 3, SEQ = 40, LAST = 23 };

struct ref_ctx {
    struct oscar_stats * s;
    struct oscar_calib_heldout * h; // held-out mode when set
    int64_t row0;
};

static enum oscar_status ref_hook(void * user, const struct oscar_capture_layer * cap) {
    struct ref_ctx * r = user;
    const struct oscar_model_config * c = cap->config;
    const size_t T = (size_t) cap->n_tokens, qr = (size_t) c->n_head * c->head_dim,
                 kr = (size_t) c->n_head_kv * c->head_dim;
    if (r->h) {
        memcpy(r->h->q[cap->layer] + (size_t) r->row0 * qr, cap->q, T * qr * sizeof(float));
        memcpy(r->h->k[cap->layer] + (size_t) r->row0 * kr, cap->k, T * kr * sizeof(float));
        memcpy(r->h->v[cap->layer] + (size_t) r->row0 * kr, cap->v, T * kr * sizeof(float));
        return OSCAR_OK;
    }
    struct oscar_stats_chunk ch = {.layer = cap->layer, .n_tokens = cap->n_tokens, .n_seq = cap->n_seq,
                                   .seq_start = cap->seq_start, .q = cap->q, .k = cap->k, .v = cap->v};
    return oscar_stats_add(r->s, &ch);
}

// Sequences [0, n) of `starts` through the whole model, p->batch at a time.
static void ref_batches(struct oscar_forward * f, struct ref_ctx * r, const int32_t * tokens, const int32_t * starts,
                        int32_t n, int32_t batch) {
    for (int32_t s0 = 0; s0 < n; s0 += batch) {
        int32_t s1 = s0 + batch < n ? s0 + batch : n, sb[16];
        for (int32_t s = s0; s <= s1; s++) sb[s - s0] = starts[s] - starts[s0];
        struct oscar_batch b = {.n_seq = s1 - s0, .seq_start = sb, .tokens = tokens + starts[s0], .pos = NULL};
        r->row0 = starts[s0] - starts[0];
        assert_int_equal(oscar_forward_run(f, &b, NULL), OSCAR_OK);
    }
}

static uint8_t * state_bytes(const struct oscar_stats * s, size_t * n) {
    *n = oscar_stats_checkpoint_size(s);
    uint8_t * b = malloc(*n);
    assert_int_equal(oscar_stats_save(s, b, *n), OSCAR_OK);
    return b;
}

// The same pass over the same model opened layer by layer: same state bytes, held-out rows and W_O,
// and no layer left resident.
static void check_streamed(const struct oscar_model_config * cfg, const struct oscar_model * loaded,
                           const struct oscar_calib_plan * plan, const struct oscar_calib_params * p,
                           const struct oscar_stats * want, const struct oscar_calib_heldout * want_held) {
    struct oscar_model * m = NULL;
    assert_int_equal(oscar_model_open_random(cfg, 7, &m), OSCAR_OK);
    assert_true(oscar_model_streamed(m));
    struct oscar_calib_timing t = {0};
    struct oscar_stats * got = NULL;
    struct oscar_calib_heldout held;
    assert_int_equal(oscar_calib_capture(&(struct oscar_calib_engine){.m = m}, plan, p, NULL, &got, &held, &t), OSCAR_OK);
    size_t n_got, n_want;
    uint8_t * a = state_bytes(got, &n_got), * b = state_bytes(want, &n_want);
    assert_int_equal(n_got, n_want);
    assert_memory_equal(a, b, n_want);
    const size_t T = (size_t) held.n_rows, qr = (size_t) cfg->n_head * cfg->head_dim,
                 kr = (size_t) cfg->n_head_kv * cfg->head_dim;
    assert_int_equal(held.n_rows, want_held->n_rows);
    for (int l = 0; l < L; l++) {
        assert_false(oscar_model_layer_resident(m, l));
        assert_memory_equal(held.q[l], want_held->q[l], T * qr * sizeof(float));
        assert_memory_equal(held.k[l], want_held->k[l], T * kr * sizeof(float));
        assert_memory_equal(held.v[l], want_held->v[l], T * kr * sizeof(float));
        assert_memory_equal(held.wo[l], loaded->layers[l].wo, (size_t) cfg->n_embd * qr * sizeof(float));
    }
    free(a), free(b);
    oscar_stats_free(got);
    oscar_calib_heldout_free(&held);
    oscar_model_free(m);
}

static void check_case(enum oscar_stats_kind kobj, enum oscar_stats_kind vobj, int32_t batch, int32_t threads) {
    struct oscar_model_config cfg = {.arch = OSCAR_ARCH_QWEN3, .n_layer = L, .n_embd = 64, .n_head = 4,
                                     .n_head_kv = 2, .head_dim = 16, .n_ff = 96, .n_vocab = 97,
                                     .n_ctx_train = 512, .rope_theta = 10000.0f, .rms_eps = 1e-6f, .qk_norm = true};
    struct oscar_model * m = NULL;
    assert_int_equal(oscar_model_init_random(&cfg, 7, &m), OSCAR_OK);
    // token stream: N_SEQ calibration sequences (the last one LAST long), then N_HELD held-out ones
    int32_t seq_start[N_SEQ + 1], held_start[N_HELD + 1], tokens[(N_SEQ + N_HELD) * SEQ];
    for (int i = 0; i <= N_SEQ; i++) seq_start[i] = i < N_SEQ ? i * SEQ : (N_SEQ - 1) * SEQ + LAST;
    for (int i = 0; i <= N_HELD; i++) held_start[i] = seq_start[N_SEQ] + i * SEQ;
    uint64_t x = 12345;
    for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tokens[i] = (int32_t) ((x >> 33) % 97);
    }
    struct oscar_calib_plan plan = {.n_seq = N_SEQ, .seq_start = seq_start, .n_heldout = N_HELD,
                                    .heldout_start = held_start, .tokens = tokens, .n_tokens = seq_start[N_SEQ]};
    struct oscar_calib_params p = oscar_calib_default_params();
    p.seq_len = SEQ, p.batch = batch, p.n_threads = threads, p.k_objective = kobj, p.v_objective = vobj;

    struct oscar_calib_timing t = {0};
    struct oscar_stats * got = NULL;
    struct oscar_calib_heldout held;
    assert_int_equal(oscar_calib_capture(&(struct oscar_calib_engine){.m = m}, &plan, &p, NULL, &got, &held, &t), OSCAR_OK);
    assert_int_equal(oscar_stats_phase(got), 3);
    check_streamed(&cfg, m, &plan, &p, got, &held);

    // the reference: held-out rows, pass 1, pass 2 through whole-model runs
    struct oscar_stats_params sp = oscar_stats_default_params();
    sp.n_layer = L, sp.n_head = cfg.n_head, sp.n_head_kv = cfg.n_head_kv, sp.head_dim = cfg.head_dim;
    sp.kinds = kobj | vobj | (vobj == OSCAR_STATS_SST ? OSCAR_STATS_QQT : 0);
    sp.n_threads = threads, sp.max_tokens = batch * SEQ;
    struct oscar_stats * ref = NULL;
    assert_int_equal(oscar_stats_init(&sp, &ref), OSCAR_OK);
    struct ref_ctx rc = {.s = ref};
    struct oscar_capture_hook hook = {.on_layer = ref_hook, .user = &rc};
    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.n_threads = threads, fp.max_tokens = batch * SEQ, fp.hook = &hook;
    struct oscar_forward * f = NULL;
    assert_int_equal(oscar_forward_init(m, &fp, &f), OSCAR_OK);
    ref_batches(f, &rc, tokens, seq_start, N_SEQ, batch);
    assert_int_equal(oscar_stats_end_pass(ref), OSCAR_OK);
    if (oscar_stats_phase(ref) == 2) {
        ref_batches(f, &rc, tokens, seq_start, N_SEQ, batch);
        assert_int_equal(oscar_stats_end_pass(ref), OSCAR_OK);
    }
    size_t n_got, n_ref;
    uint8_t * a = state_bytes(got, &n_got), * b = state_bytes(ref, &n_ref);
    assert_int_equal(n_got, n_ref);
    assert_memory_equal(a, b, n_ref);

    struct oscar_calib_heldout rh = held; // same shapes: reuse its buffers for the reference rows
    const size_t T = (size_t) held.n_rows, qr = (size_t) cfg.n_head * cfg.head_dim,
                 kr = (size_t) cfg.n_head_kv * cfg.head_dim;
    assert_int_equal(held.n_rows, N_HELD * SEQ);
    float * keep = malloc(L * T * (qr + 2 * kr) * sizeof(float));
    for (int l = 0; l < L; l++) {
        float * o = keep + (size_t) l * T * (qr + 2 * kr);
        memcpy(o, held.q[l], T * qr * sizeof(float));
        memcpy(o + T * qr, held.k[l], T * kr * sizeof(float));
        memcpy(o + T * (qr + kr), held.v[l], T * kr * sizeof(float));
    }
    rc.h = &rh;
    ref_batches(f, &rc, tokens, held_start, N_HELD, batch);
    for (int l = 0; l < L; l++) {
        const float * o = keep + (size_t) l * T * (qr + 2 * kr);
        assert_memory_equal(o, rh.q[l], T * qr * sizeof(float));
        assert_memory_equal(o + T * qr, rh.k[l], T * kr * sizeof(float));
        assert_memory_equal(o + T * (qr + kr), rh.v[l], T * kr * sizeof(float));
    }
    free(keep), free(a), free(b);
    oscar_forward_free(f);
    oscar_stats_free(ref);
    oscar_stats_free(got);
    oscar_calib_heldout_free(&held);
    oscar_model_free(m);
}

static void test_equals_two_passes(void ** state) {
    (void) state;
    check_case(OSCAR_STATS_QQT, OSCAR_STATS_SST, 2, 2);   // the default objectives
    check_case(OSCAR_STATS_QQT, OSCAR_STATS_SST, 3, 1);
    check_case(OSCAR_STATS_KTK, OSCAR_STATS_VTV, 4, 2);   // one pass only
    check_case(OSCAR_STATS_QQT, OSCAR_STATS_VATT, 2, 2);  // attention-mass weights from q/k in pass 1
}

// A sliding-window model: calibration with sequences inside the window runs (attention is then exactly
// full causal), and with longer ones too: the held-out rows carry each layer's window for the gate.
static void test_sliding_window(void ** state) {
    (void) state;
    struct oscar_model_config cfg = {.arch = OSCAR_ARCH_LLAMA, .n_layer = 2, .n_embd = 32, .n_head = 2,
                                     .n_head_kv = 1, .head_dim = 16, .n_ff = 48, .n_vocab = 97, .n_ctx_train = 512,
                                     .rope_theta = 10000.0f, .rms_eps = 1e-6f, .sliding_window = SEQ};
    struct oscar_model * m = NULL;
    assert_int_equal(oscar_model_init_random(&cfg, 3, &m), OSCAR_OK);
    int32_t seq_start[3] = {0, SEQ, 2 * SEQ}, held_start[2] = {2 * SEQ, 3 * SEQ}, tokens[3 * SEQ];
    for (int i = 0; i < 3 * SEQ; i++) tokens[i] = (i * 31) % 97;
    struct oscar_calib_plan plan = {.n_seq = 2, .seq_start = seq_start, .n_heldout = 1, .heldout_start = held_start,
                                    .tokens = tokens, .n_tokens = 2 * SEQ};
    struct oscar_calib_params p = oscar_calib_default_params();
    p.seq_len = SEQ, p.batch = 1, p.n_threads = 1;
    struct oscar_calib_timing t = {0};
    struct oscar_stats * got = NULL;
    struct oscar_calib_heldout held;
    assert_int_equal(oscar_calib_capture(&(struct oscar_calib_engine){.m = m}, &plan, &p, NULL, &got, &held, &t), OSCAR_OK); // seq_len == window
    oscar_stats_free(got);
    oscar_calib_heldout_free(&held);
    m->config.sliding_window = SEQ - 1;
    assert_int_equal(oscar_calib_capture(&(struct oscar_calib_engine){.m = m}, &plan, &p, NULL, &got, &held, &t), OSCAR_OK);
    assert_non_null(got);
    assert_non_null(held.window);
    for (int32_t l = 0; l < cfg.n_layer; l++) assert_int_equal(held.window[l], SEQ - 1);
    oscar_stats_free(got);
    oscar_calib_heldout_free(&held);
    oscar_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equals_two_passes),
        cmocka_unit_test(test_sliding_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
