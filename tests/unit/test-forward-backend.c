// test-forward-backend.c - the device seam of the forward pass without a GPU:
// oscar_fwd on "cpu" is lib/model/forward.c bit for bit (logits, capture into
// lib/stats), "cuda" fails cleanly (UNSUPPORTED, a message naming CUDA) when no
// device or no CUDA build is there, unknown devices are refused, and
// oscar_stats_add_sums (the door through which device sums enter lib/stats)
// reproduces what oscar_stats_add accumulates, also layer by layer; the CPU's
// layer-major pass (oscar_fwd_rows_init ...) gives the whole passes' sums bit
// for bit and refuses misuse. The GPU itself is tested by
// tests/gpu/gpu-forward-check.sh.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/forward-backend.h"
#include "stats/stats-sums.h"

static uint64_t rng_state;
static double rnd_unif(void) {
    uint64_t x = rng_state;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    rng_state = x;
    return (double) (x >> 11) * (1.0 / 9007199254740992.0);
}
static float rnd_normal(void) {
    double u = rnd_unif() + 1e-300, v = rnd_unif();
    return (float) (sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

#define T_TOK 37
static const int32_t seq_start[3] = {0, 20, T_TOK};

static struct oscar_model * load_tiny(void) {
    struct oscar_model * m = NULL;
    if (oscar_model_load("tests/fixtures/models/tiny-qwen3", &m) != OSCAR_OK) fprintf(stderr, "%s\n", oscar_last_error());
    assert_non_null(m);
    return m;
}

static void make_tokens(int32_t * tok, int32_t V) {
    for (int32_t t = 0; t < T_TOK; t++) tok[t] = (int32_t) ((t * 131 + 7) % V);
}

static void test_cpu_logits_identical(void ** state) {
    (void) state;
    struct oscar_model * m = load_tiny();
    const size_t V = (size_t) m->config.n_vocab;
    int32_t tok[T_TOK];
    make_tokens(tok, (int32_t) V);
    const struct oscar_batch b = {2, seq_start, tok, NULL};
    float * a = malloc(T_TOK * V * sizeof(float)), * r = malloc(T_TOK * V * sizeof(float));
    assert_non_null(a);
    assert_non_null(r);
    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.n_threads = 1;
    fp.max_tokens = 64;
    struct oscar_forward * fw = NULL;
    assert_int_equal(oscar_forward_init(m, &fp, &fw), OSCAR_OK);
    assert_int_equal(oscar_forward_run(fw, &b, r), OSCAR_OK);
    oscar_forward_free(fw);
    struct oscar_fwd_params p = oscar_fwd_default_params();
    p.n_threads = 1;
    p.max_tokens = 64;
    struct oscar_fwd * f = NULL;
    assert_int_equal(oscar_fwd_init(m, &p, &f), OSCAR_OK);
    assert_int_equal(oscar_fwd_run(f, &b, a), OSCAR_OK);
    assert_memory_equal(a, r, T_TOK * V * sizeof(float));
    struct oscar_fwd_info info;
    oscar_fwd_info(f, &info);
    assert_string_equal(info.device, "cpu");
    assert_true(info.weight_bytes > 0);
    assert_int_equal(oscar_fwd_end_pass(f), OSCAR_ERR_INVALID); // no stats accumulator
    oscar_fwd_free(f);
    free(a), free(r);
    oscar_model_free(m);
}

// An attention override that is not the model's: each query row takes its own token's V row
// (GQA-mapped), so its logits differ from the exact pass.
static enum oscar_status own_value(void * user, int32_t layer, const struct oscar_capture_layer * in, float * out) {
    (void) user, (void) layer;
    const struct oscar_model_config * c = in->config;
    const int32_t D = c->head_dim, g = c->n_head / c->n_head_kv;
    for (int32_t t = 0; t < in->n_tokens; t++)
        for (int32_t h = 0; h < c->n_head; h++)
            memcpy(out + ((size_t) t * c->n_head + h) * D, in->v + ((size_t) t * c->n_head_kv + h / g) * D,
                   sizeof(float) * (size_t) D);
    return OSCAR_OK;
}

// oscar_fwd_set_attention on the cpu: a pass switched to an override gives the bits of a pass
// made with it, switched back the exact bits; a device simulation and device scoring are
// refused by name, both attentions at once is invalid.
// Counts the layers a hook sees and sums their residual streams (to compare two passes' hooks).
struct hook_count { int32_t layers; double resid_sum; };
static enum oscar_status count_layer(void * user, const struct oscar_capture_layer * cl) {
    struct hook_count * h = user;
    h->layers++;
    for (int64_t i = 0; i < (int64_t) cl->n_tokens * cl->config->n_embd; i++) h->resid_sum += (double) cl->resid_out[i];
    return OSCAR_OK;
}

static void test_cpu_set_attention(void ** state) {
    (void) state;
    struct oscar_model * m = load_tiny();
    const size_t V = (size_t) m->config.n_vocab;
    int32_t tok[T_TOK];
    make_tokens(tok, (int32_t) V);
    const struct oscar_batch b = {2, seq_start, tok, NULL};
    float * exact = malloc(T_TOK * V * sizeof(float)), * fresh = malloc(T_TOK * V * sizeof(float));
    float * got = malloc(T_TOK * V * sizeof(float));
    struct oscar_attention_override ov = {.attend = own_value, .user = NULL};
    struct oscar_fwd_params p = oscar_fwd_default_params();
    p.n_threads = 1, p.max_tokens = 64;
    struct oscar_fwd * f = NULL, * g = NULL;
    assert_int_equal(oscar_fwd_init(m, &p, &f), OSCAR_OK);
    assert_int_equal(oscar_fwd_run(f, &b, exact), OSCAR_OK);
    p.attention = &ov;
    assert_int_equal(oscar_fwd_init(m, &p, &g), OSCAR_OK);
    assert_int_equal(oscar_fwd_run(g, &b, fresh), OSCAR_OK);
    assert_memory_not_equal(fresh, exact, T_TOK * V * sizeof(float));
    assert_int_equal(oscar_fwd_set_attention(f, NULL, &ov), OSCAR_OK);
    assert_int_equal(oscar_fwd_run(f, &b, got), OSCAR_OK);
    assert_memory_equal(got, fresh, T_TOK * V * sizeof(float));
    assert_int_equal(oscar_fwd_set_attention(f, NULL, NULL), OSCAR_OK);
    assert_int_equal(oscar_fwd_run(f, &b, got), OSCAR_OK);
    assert_memory_equal(got, exact, T_TOK * V * sizeof(float));
    // a hook set on the resident pass sees what a fresh pass's hook sees, and the logits keep their bits
    struct hook_count hc = {0}, hc_fresh = {0};
    struct oscar_capture_hook hk = {.on_layer = count_layer, .user = &hc};
    assert_int_equal(oscar_fwd_set_hook(f, &hk), OSCAR_OK);
    assert_int_equal(oscar_fwd_run(f, &b, got), OSCAR_OK);
    assert_memory_equal(got, exact, T_TOK * V * sizeof(float));
    assert_int_equal(oscar_fwd_set_hook(f, NULL), OSCAR_OK);
    assert_int_equal(oscar_fwd_run(f, &b, got), OSCAR_OK);
    p.attention = NULL, p.hook = &(struct oscar_capture_hook){.on_layer = count_layer, .user = &hc_fresh};
    struct oscar_fwd * h = NULL;
    assert_int_equal(oscar_fwd_init(m, &p, &h), OSCAR_OK);
    assert_int_equal(oscar_fwd_run(h, &b, NULL), OSCAR_OK);
    oscar_fwd_free(h);
    assert_int_equal(hc.layers, m->config.n_layer);   // one run with the hook, none after it was unset
    assert_int_equal(hc.layers, hc_fresh.layers);
    assert_true(hc.resid_sum == hc_fresh.resid_sum);
    struct oscar_fwd_kvsim ks;
    memset(&ks, 0, sizeof ks);
    assert_int_equal(oscar_fwd_set_attention(f, &ks, NULL), OSCAR_ERR_UNSUPPORTED);
    assert_int_equal(oscar_fwd_set_attention(f, &ks, &ov), OSCAR_ERR_INVALID);
    assert_int_equal(oscar_fwd_ref_init(f, 16), OSCAR_ERR_UNSUPPORTED);
    struct oscar_fwd_score sc[T_TOK];
    assert_int_equal(oscar_fwd_run_scored(f, &b, 0, 4, tok + 1, -1, false, sc), OSCAR_ERR_UNSUPPORTED);
    oscar_fwd_free(f);
    oscar_fwd_free(g);
    free(exact), free(fresh), free(got);
    oscar_model_free(m);
}

// Capture through oscar_fwd (params.stats) equals feeding oscar_stats_add from a hook.
struct hook_ctx { struct oscar_stats * s; };
static enum oscar_status feed(void * user, const struct oscar_capture_layer * cap) {
    struct hook_ctx * h = user;
    const struct oscar_stats_chunk c = {cap->layer, cap->n_tokens, cap->n_seq, cap->seq_start, cap->q, cap->k, cap->v, 0};
    return oscar_stats_add(h->s, &c);
}

static struct oscar_stats * new_stats(const struct oscar_model_config * c) {
    struct oscar_stats_params sp = oscar_stats_default_params();
    sp.n_layer = c->n_layer, sp.n_head = c->n_head, sp.n_head_kv = c->n_head_kv, sp.head_dim = c->head_dim;
    sp.kinds = OSCAR_STATS_KTK | OSCAR_STATS_VTV | OSCAR_STATS_QQT | OSCAR_STATS_SST;
    sp.n_threads = 1;
    struct oscar_stats * s = NULL;
    assert_int_equal(oscar_stats_init(&sp, &s), OSCAR_OK);
    return s;
}

static void test_cpu_capture_identical(void ** state) {
    (void) state;
    struct oscar_model * m = load_tiny();
    const struct oscar_model_config * c = &m->config;
    int32_t tok[T_TOK];
    make_tokens(tok, c->n_vocab);
    const struct oscar_batch b = {2, seq_start, tok, NULL};
    struct oscar_stats * s_ref = new_stats(c), * s_fwd = new_stats(c);
    // reference: the plain forward pass with a hook
    struct hook_ctx hc = {s_ref};
    struct oscar_capture_hook hk = {NULL, feed, &hc, false};
    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.n_threads = 1, fp.max_tokens = 64, fp.hook = &hk;
    struct oscar_forward * fw = NULL;
    assert_int_equal(oscar_forward_init(m, &fp, &fw), OSCAR_OK);
    for (int pass = 0; pass < 2; pass++) {
        assert_int_equal(oscar_forward_run(fw, &b, NULL), OSCAR_OK);
        assert_int_equal(oscar_stats_end_pass(s_ref), OSCAR_OK);
    }
    oscar_forward_free(fw);
    struct oscar_fwd_params p = oscar_fwd_default_params();
    p.n_threads = 1, p.max_tokens = 64, p.stats = s_fwd;
    struct oscar_fwd * f = NULL;
    assert_int_equal(oscar_fwd_init(m, &p, &f), OSCAR_OK);
    for (int pass = 0; pass < 2; pass++) {
        assert_int_equal(oscar_fwd_run(f, &b, NULL), OSCAR_OK);
        assert_int_equal(oscar_fwd_end_pass(f), OSCAR_OK);
    }
    assert_int_equal(oscar_stats_phase(s_fwd), 3);
    oscar_fwd_free(f);
    const size_t DD = (size_t) c->head_dim * (size_t) c->head_dim;
    double * x = malloc(DD * sizeof(double)), * y = malloc(DD * sizeof(double));
    const enum oscar_stats_kind kinds[4] = {OSCAR_STATS_KTK, OSCAR_STATS_VTV, OSCAR_STATS_QQT, OSCAR_STATS_SST};
    for (int32_t l = 0; l < c->n_layer; l++) {
        for (int i = 0; i < 4; i++) {
            assert_int_equal(oscar_stats_sigma(s_ref, kinds[i], l, -1, x), OSCAR_OK);
            assert_int_equal(oscar_stats_sigma(s_fwd, kinds[i], l, -1, y), OSCAR_OK);
            assert_memory_equal(x, y, DD * sizeof(double));
        }
    }
    free(x), free(y);
    oscar_stats_free(s_ref), oscar_stats_free(s_fwd);
    oscar_model_free(m);
}

// The layer-major pass on the CPU backend: the same sums as two whole passes, bit for bit.
static void test_cpu_layered_equals_whole(void ** state) {
    (void) state;
    struct oscar_model * m = load_tiny();
    const struct oscar_model_config * c = &m->config;
    int32_t tok[T_TOK];
    make_tokens(tok, c->n_vocab);
    const struct oscar_batch b = {2, seq_start, tok, NULL};
    struct oscar_stats * s_whole = new_stats(c), * s_layer = new_stats(c);
    struct oscar_fwd_params p = oscar_fwd_default_params();
    p.n_threads = 1, p.max_tokens = 64, p.stats = s_whole;
    struct oscar_fwd * f = NULL;
    assert_int_equal(oscar_fwd_init(m, &p, &f), OSCAR_OK);
    assert_int_equal(oscar_fwd_rows_init(f, T_TOK, T_TOK), OSCAR_ERR_INVALID); // not a layer-major pass
    for (int pass = 0; pass < 2; pass++) {
        assert_int_equal(oscar_fwd_run(f, &b, NULL), OSCAR_OK);
        assert_int_equal(oscar_fwd_end_pass(f), OSCAR_OK);
    }
    oscar_fwd_free(f);
    p.stats = s_layer, p.layered = true;
    assert_int_equal(oscar_fwd_init(m, &p, &f), OSCAR_OK);
    assert_int_equal(oscar_fwd_layer_run(f, 0, &b, 0, true), OSCAR_ERR_INVALID); // before rows_init
    assert_int_equal(oscar_fwd_run(f, &b, NULL), OSCAR_ERR_INVALID);             // whole passes refused
    assert_int_equal(oscar_fwd_rows_init(f, T_TOK, T_TOK + 1), OSCAR_ERR_INVALID); // more kept than rows
    assert_int_equal(oscar_fwd_rows_init(f, T_TOK, T_TOK), OSCAR_OK);
    assert_int_equal(oscar_fwd_layer_set(f, 0, &m->layers[1]), OSCAR_ERR_INVALID); // not layer 0's weights
    assert_int_equal(oscar_fwd_layer_run(f, 0, &b, 1, true), OSCAR_ERR_INVALID);   // rows past the end
    for (int32_t l = 0; l < c->n_layer; l++) {
        assert_int_equal(oscar_fwd_layer_set(f, l, &m->layers[l]), OSCAR_OK);
        assert_int_equal(oscar_fwd_layer_run(f, l, &b, 0, true), OSCAR_OK);
        assert_int_equal(oscar_fwd_layer_end(f, l), OSCAR_OK);
    }
    assert_int_equal(oscar_stats_phase(s_layer), 3);
    oscar_fwd_free(f);
    const size_t DD = (size_t) c->head_dim * (size_t) c->head_dim;
    double * x = malloc(DD * sizeof(double)), * y = malloc(DD * sizeof(double));
    const enum oscar_stats_kind kinds[4] = {OSCAR_STATS_KTK, OSCAR_STATS_VTV, OSCAR_STATS_QQT, OSCAR_STATS_SST};
    for (int32_t l = 0; l < c->n_layer; l++)
        for (int i = 0; i < 4; i++) {
            assert_int_equal(oscar_stats_sigma(s_whole, kinds[i], l, -1, x), OSCAR_OK);
            assert_int_equal(oscar_stats_sigma(s_layer, kinds[i], l, -1, y), OSCAR_OK);
            assert_memory_equal(x, y, DD * sizeof(double));
        }
    free(x), free(y);
    oscar_stats_free(s_whole), oscar_stats_free(s_layer);
    oscar_model_free(m);
}

// Gemma 3 on the backends: tiny-gemma3 (query_pre_attn_scalar 24, head_dim 32) runs its two passes
// with an accumulator made for its score scale and refuses one made for head_dim^-1/2 (the
// attention mass would be another softmax); tiny-gemma3-hub (32 = head_dim) runs its two passes;
// cuda runs Gemma's layer (tests/gpu/test-forward-gpu compares it with the cpu pass) or, without a
// device, fails naming CUDA.
static void test_gemma3_backends(void ** state) {
    (void) state;
    struct oscar_model * m = NULL;
    assert_int_equal(oscar_model_load("tests/fixtures/models/tiny-gemma3", &m), OSCAR_OK);
    assert_true(oscar_attn_scale_param(&m->config) == (float) (1.0 / sqrt(24.0)));
    struct oscar_stats * s = new_stats(&m->config);
    struct oscar_fwd_params p = oscar_fwd_default_params();
    p.n_threads = 1, p.max_tokens = 64, p.stats = s;
    struct oscar_fwd * f = NULL;
    assert_int_equal(oscar_fwd_init(m, &p, &f), OSCAR_ERR_INVALID);
    printf("tiny-gemma3 with default-scale stats: %s\n", oscar_last_error());
    assert_non_null(strstr(oscar_last_error(), "score scale"));
    assert_null(f);
    oscar_stats_free(s);
    struct oscar_stats_params sp = oscar_stats_get_params(s = new_stats(&m->config));
    oscar_stats_free(s);
    sp.attn_scale = oscar_attn_scale_param(&m->config), sp.kinds |= OSCAR_STATS_VATT;
    assert_int_equal(oscar_stats_init(&sp, &s), OSCAR_OK);
    p.stats = s;
    assert_int_equal(oscar_fwd_init(m, &p, &f), OSCAR_OK);
    {
        int32_t tk[T_TOK];
        make_tokens(tk, m->config.n_vocab);
        const int32_t win_seq[3] = {0, 8, 16}; // within the window of 8
        const struct oscar_batch wb = {2, win_seq, tk, NULL};
        for (int pass = 0; pass < 2; pass++) {
            assert_int_equal(oscar_fwd_run(f, &wb, NULL), OSCAR_OK);
            assert_int_equal(oscar_fwd_end_pass(f), OSCAR_OK);
        }
        assert_int_equal(oscar_stats_phase(s), 3);
    }
    oscar_fwd_free(f);
    f = NULL;
    oscar_stats_free(s);
    oscar_model_free(m);

    assert_int_equal(oscar_model_load("tests/fixtures/models/tiny-gemma3-hub", &m), OSCAR_OK);
    s = new_stats(&m->config);
    p.stats = s;
    assert_int_equal(oscar_fwd_init(m, &p, &f), OSCAR_OK);
    int32_t tok[T_TOK];
    make_tokens(tok, m->config.n_vocab);
    const int32_t short_seq[3] = {0, 12, 24}; // within the window of 12: what the statistics assume
    const struct oscar_batch b = {2, short_seq, tok, NULL};
    for (int pass = 0; pass < 2; pass++) {
        assert_int_equal(oscar_fwd_run(f, &b, NULL), OSCAR_OK);
        assert_int_equal(oscar_fwd_end_pass(f), OSCAR_OK);
    }
    assert_int_equal(oscar_stats_phase(s), 3);
    oscar_fwd_free(f);
    oscar_stats_free(s);
    p = oscar_fwd_default_params();
    p.device = "cuda", p.max_tokens = 64;
    const enum oscar_status st = oscar_fwd_init(m, &p, &f);
    if (st == OSCAR_OK) { // a GPU: the layer runs
        printf("tiny-gemma3-hub on cuda: running one batch\n");
        assert_int_equal(oscar_fwd_run(f, &b, NULL), OSCAR_OK);
        oscar_fwd_free(f);
    } else {
        printf("tiny-gemma3-hub on cuda: %s\n", oscar_last_error());
        assert_int_equal(st, OSCAR_ERR_UNSUPPORTED);
        assert_non_null(strstr(oscar_last_error(), "CUDA"));
        assert_null(f);
    }
    oscar_model_free(m);
}

static void test_cuda_unavailable_or_ok(void ** state) {
    (void) state;
    struct oscar_model * m = load_tiny();
    struct oscar_fwd_params p = oscar_fwd_default_params();
    p.device = "cuda";
    p.max_tokens = 64;
    struct oscar_fwd * f = NULL;
    enum oscar_status st = oscar_fwd_init(m, &p, &f);
    if (st == OSCAR_OK) { // a CUDA build on a GPU machine: it must at least run a batch
        printf("cuda device present: running one batch\n");
        int32_t tok[T_TOK];
        make_tokens(tok, m->config.n_vocab);
        const struct oscar_batch b = {2, seq_start, tok, NULL};
        assert_int_equal(oscar_fwd_run(f, &b, NULL), OSCAR_OK);
        oscar_fwd_free(f);
    } else {
        printf("cuda: %s\n", oscar_last_error());
        assert_int_equal(st, OSCAR_ERR_UNSUPPORTED);
        assert_null(f);
        assert_non_null(strstr(oscar_last_error(), "CUDA"));
        // random-init on the device fails the same way, without touching host memory for 8B weights
        struct oscar_model_config big = m->config;
        big.n_layer = 36, big.n_embd = 4096, big.n_ff = 12288, big.n_vocab = 151936;
        assert_int_equal(oscar_fwd_init_random(&big, 1, &p, &f), OSCAR_ERR_UNSUPPORTED);
        assert_null(f);
    }
    p.device = "tpu";
    assert_int_equal(oscar_fwd_init(m, &p, &f), OSCAR_ERR_INVALID);
    assert_null(f);
    oscar_model_free(m);
}

// Random rows through oscar_stats_add vs. their sums (computed here in double) through
// oscar_stats_add_sums. Both reduce exactly-representable fp32 inputs in fp64, in a
// different order: the difference is fp64 rounding, ~n * 2^-53 relative (n = 300 rows
// -> ~3e-14); 1e-12 allows for the sum of magnitudes exceeding the result.
// Two empty accumulators of one shape and kind set, and random q [N, HQ, D], k/v [N, HKV, D]
// (v scaled by vscale) from rnd_normal.
static void stats_pair(int32_t L, int32_t HQ, int32_t HKV, int32_t D, uint32_t kinds, struct oscar_stats ** a,
                       struct oscar_stats ** b) {
    struct oscar_stats_params sp = oscar_stats_default_params();
    sp.n_layer = L, sp.n_head = HQ, sp.n_head_kv = HKV, sp.head_dim = D, sp.n_threads = 1;
    sp.kinds = kinds;
    assert_int_equal(oscar_stats_init(&sp, a), OSCAR_OK);
    assert_int_equal(oscar_stats_init(&sp, b), OSCAR_OK);
}

static void random_qkv(int32_t N, int32_t HQ, int32_t HKV, int32_t D, float vscale, float ** q, float ** k,
                       float ** v) {
    *q = malloc(sizeof(float) * (size_t) N * HQ * D), *k = malloc(sizeof(float) * (size_t) N * HKV * D);
    *v = malloc(sizeof(float) * (size_t) N * HKV * D);
    assert_true(*q && *k && *v);
    for (size_t i = 0; i < (size_t) N * HQ * D; i++) (*q)[i] = rnd_normal();
    for (size_t i = 0; i < (size_t) N * HKV * D; i++) (*k)[i] = rnd_normal(), (*v)[i] = rnd_normal() * vscale;
}

static void test_add_sums(void ** state) {
    (void) state;
    uint64_t seed = (uint64_t) time(NULL);
    printf("seed %llu\n", (unsigned long long) seed);
    rng_state = seed | 1;
    enum { L = 2, HQ = 4, HKV = 2, D = 8, N = 300, G = HQ / HKV };
    struct oscar_stats * a = NULL, * b = NULL;
    stats_pair(L, HQ, HKV, D, OSCAR_STATS_KTK | OSCAR_STATS_VTV | OSCAR_STATS_QQT | OSCAR_STATS_SST, &a, &b);
    float * q, * k, * v;
    random_qkv(N, HQ, HKV, D, 2.0f, &q, &k, &v);
    const size_t M = (size_t) L * HKV * D * D;
    double * ktk = calloc(M, sizeof(double)), * vtv = calloc(M, sizeof(double)), * qqt = calloc(M, sizeof(double));
    double * sst = calloc(M, sizeof(double)), * wsum = calloc(L * HKV, sizeof(double));
    int64_t nneg[L * HKV] = {0};
    for (int32_t l = 0; l < L; l++) {
        const struct oscar_stats_chunk c = {l, N, 0, NULL, q, k, v, 0};
        assert_int_equal(oscar_stats_add(a, &c), OSCAR_OK);
        for (int32_t h = 0; h < HKV; h++)
            for (int32_t t = 0; t < N; t++)
                for (int32_t i = 0; i < D; i++)
                    for (int32_t j = 0; j < D; j++) {
                        const size_t o = (((size_t) l * HKV + h) * D + i) * D + j;
                        const float * kr = k + ((size_t) t * HKV + h) * D, * vr = v + ((size_t) t * HKV + h) * D;
                        ktk[o] += (double) kr[i] * (double) kr[j];
                        vtv[o] += (double) vr[i] * (double) vr[j];
                        for (int32_t g = 0; g < G; g++) {
                            const float * qr = q + ((size_t) t * HQ + h * G + g) * D;
                            qqt[o] += (double) qr[i] * (double) qr[j];
                        }
                    }
    }
    struct oscar_stats_sums x = {0};
    x.pass = 2; // wrong pass: refused, nothing changes
    assert_int_equal(oscar_stats_add_sums(b, &x), OSCAR_ERR_INVALID);
    x.pass = 1, x.n_tokens = N, x.ktk = ktk, x.vtv = vtv; // qqt missing: refused
    assert_int_equal(oscar_stats_add_sums(b, &x), OSCAR_ERR_INVALID);
    x.qqt = qqt;
    assert_int_equal(oscar_stats_add_sums(b, &x), OSCAR_OK);
    assert_int_equal(oscar_stats_end_pass(a), OSCAR_OK);
    assert_int_equal(oscar_stats_end_pass(b), OSCAR_OK);
    // pass 2: w = k A_h kᵀ with the finalised A_h of b
    double A[D * D];
    for (int32_t l = 0; l < L; l++) {
        const struct oscar_stats_chunk c = {l, N, 0, NULL, q, k, v, 0};
        assert_int_equal(oscar_stats_add(a, &c), OSCAR_OK);
        for (int32_t h = 0; h < HKV; h++) {
            assert_int_equal(oscar_stats_sigma(b, OSCAR_STATS_QQT, l, h, A), OSCAR_OK);
            for (int32_t t = 0; t < N; t++) {
                const float * kr = k + ((size_t) t * HKV + h) * D, * vr = v + ((size_t) t * HKV + h) * D;
                double w = 0.0;
                for (int32_t i = 0; i < D; i++)
                    for (int32_t j = 0; j < D; j++) w += (double) kr[i] * A[i * D + j] * (double) kr[j];
                if (w < 0.0) w = 0.0, nneg[l * HKV + h]++;
                wsum[l * HKV + h] += w;
                for (int32_t i = 0; i < D; i++)
                    for (int32_t j = 0; j < D; j++)
                        sst[(((size_t) l * HKV + h) * D + i) * D + j] += w * (double) vr[i] * (double) vr[j];
            }
        }
    }
    struct oscar_stats_sums y = {0};
    y.pass = 2, y.n_tokens = N, y.sst = sst, y.sst_wsum = wsum, y.sst_nneg = nneg;
    assert_int_equal(oscar_stats_add_sums(b, &y), OSCAR_OK);
    assert_int_equal(oscar_stats_end_pass(a), OSCAR_OK);
    assert_int_equal(oscar_stats_end_pass(b), OSCAR_OK);
    // the same sums one layer at a time (the CUDA layer-major pass): bit for bit what b holds
    struct oscar_stats * by_layer = NULL, * unused = NULL;
    stats_pair(L, HQ, HKV, D, OSCAR_STATS_KTK | OSCAR_STATS_VTV | OSCAR_STATS_QQT | OSCAR_STATS_SST, &by_layer, &unused);
    const size_t HDD = (size_t) HKV * D * D;
    for (int32_t l = 0; l < L; l++) {
        struct oscar_stats_sums xl = {.pass = 1, .n_tokens = N, .ktk = ktk + l * HDD, .vtv = vtv + l * HDD,
                                      .qqt = qqt + l * HDD};
        struct oscar_stats_sums yl = {.pass = 2, .n_tokens = N, .sst = sst + l * HDD, .sst_wsum = wsum + l * HKV,
                                      .sst_nneg = nneg + l * HKV};
        assert_int_equal(oscar_stats_add_layer_sums(by_layer, L, &xl), OSCAR_ERR_INVALID);  // no such layer
        assert_int_equal(oscar_stats_add_layer_sums(by_layer, l, &yl), OSCAR_ERR_INVALID);  // layer still in pass 1
        assert_int_equal(oscar_stats_add_layer_sums(by_layer, l, &xl), OSCAR_OK);
        assert_int_equal(oscar_stats_end_layer_pass(by_layer, l), OSCAR_OK);
        assert_int_equal(oscar_stats_add_layer_sums(by_layer, l, &yl), OSCAR_OK);
        assert_int_equal(oscar_stats_end_layer_pass(by_layer, l), OSCAR_OK);
    }
    for (int32_t l = 0; l < L; l++) {
        const enum oscar_stats_kind all[4] = {OSCAR_STATS_KTK, OSCAR_STATS_VTV, OSCAR_STATS_QQT, OSCAR_STATS_SST};
        double sbb[D * D], se[D * D];
        for (int i = 0; i < 4; i++) {
            assert_int_equal(oscar_stats_sigma(b, all[i], l, -1, sbb), OSCAR_OK);
            assert_int_equal(oscar_stats_sigma(by_layer, all[i], l, -1, se), OSCAR_OK);
            assert_memory_equal(sbb, se, sizeof sbb);
        }
    }
    oscar_stats_free(by_layer), oscar_stats_free(unused);
    double sa[D * D], sb[D * D];
    const enum oscar_stats_kind kinds[4] = {OSCAR_STATS_KTK, OSCAR_STATS_VTV, OSCAR_STATS_QQT, OSCAR_STATS_SST};
    for (int32_t l = 0; l < L; l++) {
        for (int i = 0; i < 4; i++) {
            assert_int_equal(oscar_stats_sigma(a, kinds[i], l, -1, sa), OSCAR_OK);
            assert_int_equal(oscar_stats_sigma(b, kinds[i], l, -1, sb), OSCAR_OK);
            double num = 0.0, den = 0.0;
            for (int32_t e = 0; e < D * D; e++) num += (sa[e] - sb[e]) * (sa[e] - sb[e]), den += sa[e] * sa[e];
            assert_true(den > 0.0);
            if (sqrt(num / den) > 1e-12) fail_msg("layer %d kind %d: rel %.3g", l, i, sqrt(num / den));
        }
        struct oscar_stats_layer_info ia, ib;
        assert_int_equal(oscar_stats_layer_info(a, l, &ia), OSCAR_OK);
        assert_int_equal(oscar_stats_layer_info(b, l, &ib), OSCAR_OK);
        assert_int_equal(ia.n_tokens_pass2, ib.n_tokens_pass2);
        assert_true(fabs(ia.sst_weight_sum - ib.sst_weight_sum) <= 1e-12 * ia.sst_weight_sum);
    }
    free(q), free(k), free(v), free(ktk), free(vtv), free(qqt), free(sst), free(wsum);
    oscar_stats_free(a), oscar_stats_free(b);
}

// VATT through external sums (the CUDA capture's path): attention-mass weights computed here
// independently, w_{h,t} = Σ_{j∈J(h)} Σ_{i>=t} softmax_i(q_{i,j}·k/√D)_t² per sequence, and
// Σ_t w v vᵀ, Σ_t w handed to oscar_stats_add_sums; the finalised VATT matrix must equal the
// one lib/stats computes from the rows (fp64 on both sides: 1e-12).
static void test_add_sums_vatt(void ** state) {
    (void) state;
    enum { L = 1, HQ = 4, HKV = 2, D = 8, N = 90, G = HQ / HKV };
    const int32_t ss[3] = {0, 50, N};   // two sequences
    rng_state = 0x9E3779B97F4A7C15ull;  // fixed draws: the check does not depend on them
    struct oscar_stats * a = NULL, * b = NULL;
    stats_pair(L, HQ, HKV, D, OSCAR_STATS_VATT, &a, &b);
    float * q, * k, * v;
    random_qkv(N, HQ, HKV, D, 1.0f, &q, &k, &v);
    const struct oscar_stats_chunk c = {0, N, 2, ss, q, k, v, 0};
    assert_int_equal(oscar_stats_add(a, &c), OSCAR_OK);
    double vatt[HKV * D * D] = {0}, wsum[HKV] = {0}, w[N], lg[N];
    for (int32_t h = 0; h < HKV; h++) {
        for (int32_t t = 0; t < N; t++) w[t] = 0.0;
        for (int32_t s = 0; s < 2; s++)
            for (int32_t g = 0; g < G; g++)
                for (int32_t i = ss[s]; i < ss[s + 1]; i++) {
                    const float * qi = q + ((size_t) i * HQ + h * G + g) * D;
                    double m = -INFINITY, z = 0.0;
                    for (int32_t t = ss[s]; t <= i; t++) {
                        const float * kt = k + ((size_t) t * HKV + h) * D;
                        double x = 0.0;
                        for (int32_t d = 0; d < D; d++) x += (double) qi[d] * (double) kt[d];
                        lg[t] = x / sqrt((double) D), m = fmax(m, lg[t]);
                    }
                    for (int32_t t = ss[s]; t <= i; t++) z += exp(lg[t] - m);
                    for (int32_t t = ss[s]; t <= i; t++) w[t] += exp(2.0 * (lg[t] - m)) / (z * z);
                }
        for (int32_t t = 0; t < N; t++) {
            const float * vt = v + ((size_t) t * HKV + h) * D;
            wsum[h] += w[t];
            for (int32_t i = 0; i < D; i++)
                for (int32_t j = 0; j < D; j++) vatt[((size_t) h * D + i) * D + j] += w[t] * (double) vt[i] * (double) vt[j];
        }
    }
    struct oscar_stats_sums x = {0};
    x.pass = 1, x.n_tokens = N, x.vatt = vatt;   // weight sums missing: refused
    assert_int_equal(oscar_stats_add_sums(b, &x), OSCAR_ERR_INVALID);
    x.vatt_wsum = wsum;
    assert_int_equal(oscar_stats_add_sums(b, &x), OSCAR_OK);
    assert_int_equal(oscar_stats_end_pass(a), OSCAR_OK);
    assert_int_equal(oscar_stats_end_pass(b), OSCAR_OK);
    double sa[D * D], sb[D * D];
    for (int32_t h = -1; h < HKV; h++) {
        assert_int_equal(oscar_stats_sigma(a, OSCAR_STATS_VATT, 0, h, sa), OSCAR_OK);
        assert_int_equal(oscar_stats_sigma(b, OSCAR_STATS_VATT, 0, h, sb), OSCAR_OK);
        double num = 0.0, den = 0.0;
        for (int32_t e = 0; e < D * D; e++) num += (sa[e] - sb[e]) * (sa[e] - sb[e]), den += sa[e] * sa[e];
        assert_true(den > 0.0);
        if (sqrt(num / den) > 1e-12) fail_msg("head %d: rel %.3g", h, sqrt(num / den));
    }
    free(q), free(k), free(v);
    oscar_stats_free(a), oscar_stats_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_logits_identical),
        cmocka_unit_test(test_cpu_set_attention),
        cmocka_unit_test(test_cpu_capture_identical),
        cmocka_unit_test(test_cuda_unavailable_or_ok),
        cmocka_unit_test(test_gemma3_backends),
        cmocka_unit_test(test_add_sums),
        cmocka_unit_test(test_cpu_layered_equals_whole),
        cmocka_unit_test(test_add_sums_vatt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
