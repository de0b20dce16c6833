// test-forward.c - CPU forward pass against transformers (tiny random-init Llama/Qwen2/Qwen3, Llama 3.x and YaRN
// RoPE scaling, Mistral sliding window, Phi-3, Gemma 3, MoE (Qwen2/3, Mixtral, GLM-4) fixtures; GGUF variants
// against the same fixtures), capture hooks,
// attention override, batching, sliding-window attention at its boundary, perplexity convention.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/gguf-writer.h"
#include "formats/gguf.h"
#include "model/model.h"
#include "util/fs.h"
#include "forward-fixture.h"
#define TEST_TMPDIR_NAME "forward"
#include "test-tmpdir.h"

// Tolerance against transformers: 1e-4 relative L2 (the acceptance bar). Both sides compute
// in fp32 with different summation orders; for K <= 192-term dot products the expected relative
// rounding difference is about sqrt(K) * 2^-24 ~ 1e-6 per projection, growing to ~1e-5 over three
// layers, an order of magnitude inside the bar.
#define ORACLE_TOL 1e-4

struct fixture {
    struct oscar_model * model;
    int32_t  T, n_seq;
    int32_t * tokens, * seq_start, * pos;
    float *   logits; // [T, V]
    char      dir[256];
};

static void fixture_free(struct fixture * fx) {
    oscar_model_free(fx->model);
    free(fx->tokens);
    free(fx->seq_start);
    free(fx->pos);
    free(fx->logits);
}

// The tiny fixtures hold 3 sequences (make_model_fixtures.py: lens 40, 24, 33, T = 97; the MoE ones
// 32, 17, 24, T = 73): T is read from seq_start.
// model: "" for tests/fixtures/models/<name>, else a file or directory of the same weights.
static void fixture_load_model(struct fixture * fx, const char * name, const char * model) {
    char mdir[256];
    memset(fx, 0, sizeof *fx);
    snprintf(mdir, sizeof mdir, model[0] ? "%s" : "tests/fixtures/models/%s", model[0] ? model : name);
    snprintf(fx->dir, sizeof fx->dir, "tests/fixtures/forward/%s", name);
    if (oscar_model_load(mdir, &fx->model) != OSCAR_OK) fprintf(stderr, "%s: %s\n", mdir, oscar_last_error());
    assert_non_null(fx->model);
    fx->n_seq = 3;
    const size_t V = (size_t)fx->model->config.n_vocab;
    fx->seq_start = fx_read(fx->dir, "seq_start.i32", (size_t)(fx->n_seq + 1) * 4);
    assert_non_null(fx->seq_start);
    fx->T = fx->seq_start[fx->n_seq];
    assert_true(fx->T > 0 && fx->T <= 4096);
    fx->tokens    = fx_read(fx->dir, "tokens.i32", (size_t)fx->T * 4);
    fx->pos       = fx_read(fx->dir, "pos.i32", (size_t)fx->T * 4);
    fx->logits    = fx_read(fx->dir, "logits.f32", (size_t)fx->T * V * 4);
    assert_non_null(fx->tokens);
    assert_non_null(fx->seq_start);
    assert_non_null(fx->pos);
    assert_non_null(fx->logits);
    assert_int_equal(fx->seq_start[fx->n_seq], fx->T);
}

static void fixture_load(struct fixture * fx, const char * name) { fixture_load_model(fx, name, ""); }

static struct oscar_forward * make_forward(const struct oscar_model * m, int32_t max_tokens,
                                           const struct oscar_capture_hook * hook,
                                           const struct oscar_attention_override * att) {
    struct oscar_forward_params p = oscar_forward_default_params();
    p.max_tokens = max_tokens;
    p.hook       = hook;
    p.attention  = att;
    struct oscar_forward * f = NULL;
    enum oscar_status st = oscar_forward_init(m, &p, &f);
    if (st != OSCAR_OK) fprintf(stderr, "forward_init: %s\n", oscar_last_error());
    assert_int_equal(st, OSCAR_OK);
    return f;
}

static void check_oracle_model(const char * name, const char * model) {
    struct fixture fx;
    fixture_load_model(&fx, name, model);
    const struct oscar_model_config * c = &fx.model->config;
    struct fx_capture cap = {.n_layers = 3, .layers = {0, 1, c->n_layer - 1}};
    struct oscar_capture_hook hook = {fx_capture_want, fx_capture_on_layer, &cap, false};
    struct oscar_forward * f = make_forward(fx.model, fx.T, &hook, NULL);
    float * logits = malloc((size_t)fx.T * (size_t)c->n_vocab * sizeof(float));
    struct oscar_batch b = {fx.n_seq, fx.seq_start, fx.tokens, NULL};
    assert_int_equal(oscar_forward_run(f, &b, logits), OSCAR_OK);
    double e = fx_rel_l2(logits, fx.logits, (size_t)fx.T * (size_t)c->n_vocab);
    printf("%s%s%s: logits rel-L2 %.3e\n", name, model[0] ? " from " : "", model, e);
    assert_true(e <= ORACLE_TOL);
    const size_t nq = (size_t)fx.T * (size_t)c->n_head * (size_t)c->head_dim;
    const size_t nkv = (size_t)fx.T * (size_t)c->n_head_kv * (size_t)c->head_dim;
    for (int32_t i = 0; i < cap.n_layers; i++) {
        char qn[32], kn[32], vn[32];
        snprintf(qn, sizeof qn, "q%d.f32", cap.layers[i]);
        snprintf(kn, sizeof kn, "k%d.f32", cap.layers[i]);
        snprintf(vn, sizeof vn, "v%d.f32", cap.layers[i]);
        float * q = fx_read(fx.dir, qn, nq * 4), * k = fx_read(fx.dir, kn, nkv * 4), * v = fx_read(fx.dir, vn, nkv * 4);
        assert_non_null(q);
        assert_non_null(k);
        assert_non_null(v);
        assert_non_null(cap.q[i]);
        double eq = fx_rel_l2(cap.q[i], q, nq), ek = fx_rel_l2(cap.k[i], k, nkv), ev = fx_rel_l2(cap.v[i], v, nkv);
        printf("%s: layer %d q %.3e k %.3e v %.3e\n", name, cap.layers[i], eq, ek, ev);
        assert_true(eq <= ORACLE_TOL && ek <= ORACLE_TOL && ev <= ORACLE_TOL);
        free(q);
        free(k);
        free(v);
    }
    fx_capture_free(&cap);
    free(logits);
    oscar_forward_free(f);
    fixture_free(&fx);
}

static void check_oracle(const char * name) { check_oracle_model(name, ""); }

static void test_oracle_llama(void ** state) { (void)state; check_oracle("tiny-llama"); }
static void test_oracle_qwen2(void ** state) { (void)state; check_oracle("tiny-qwen2"); }
static void test_oracle_qwen3(void ** state) { (void)state; check_oracle("tiny-qwen3"); }

// Logits of the fixture's tokens under `c` (a copy of the model's config with one feature switched off):
// rel-L2 against the oracle. Shows the feature is what brings the pass within tolerance: with it the
// error is ~3e-7; without, well above 10x the tolerance (random-init models have flat logits, so a
// changed RoPE moves them by ~5e-3 relative, a removed window by ~0.3).
static double oracle_err_with(const struct fixture * fx, const struct oscar_model_config * c) {
    struct oscar_model m = *fx->model;
    m.config = *c;
    struct oscar_forward * f = make_forward(&m, fx->T, NULL, NULL);
    const size_t n = (size_t)fx->T * (size_t)c->n_vocab;
    float * lg = malloc(n * sizeof(float));
    struct oscar_batch b = {fx->n_seq, fx->seq_start, fx->tokens, NULL};
    assert_int_equal(oscar_forward_run(f, &b, lg), OSCAR_OK);
    double e = fx_rel_l2(lg, fx->logits, n);
    free(lg);
    oscar_forward_free(f);
    return e;
}

// Llama 3.x RoPE scaling (factor 8, original context 32: six of eight frequencies divided by 8, one smoothed).
static void test_oracle_llama3(void ** state) {
    (void)state;
    check_oracle("tiny-llama3");
    struct fixture fx;
    fixture_load(&fx, "tiny-llama3");
    struct oscar_model_config c = fx.model->config;
    assert_int_equal(c.rope_scaling, OSCAR_ROPE_LLAMA3);
    c.rope_scaling = OSCAR_ROPE_DEFAULT;
    double e = oracle_err_with(&fx, &c);
    printf("tiny-llama3 without the scaling: logits rel-L2 %.3e\n", e);
    assert_true(e > 10 * ORACLE_TOL);
    fixture_free(&fx);
}

// The same weights converted as llama.cpp does: rope_freqs.weight carries the scaling.
static void test_oracle_llama3_gguf(void ** state) {
    (void)state;
    check_oracle_model("tiny-llama3", "tests/fixtures/models/tiny-llama3.gguf");
    struct fixture fx;
    fixture_load_model(&fx, "tiny-llama3", "tests/fixtures/models/tiny-llama3.gguf");
    assert_true(fx.model->config.has_rope_freqs && fx.model->rope_freqs);
    assert_int_equal(fx.model->config.rope_scaling, OSCAR_ROPE_DEFAULT);
    // divisors 1 (highest frequency, wavelength 6.3 < 32/4), 8 for the six lowest, one in between
    assert_true(fx.model->rope_freqs[0] == 1.0f && fx.model->rope_freqs[7] == 8.0f);
    assert_true(fx.model->rope_freqs[1] > 1.0f && fx.model->rope_freqs[1] < 8.0f);
    fixture_free(&fx);
}

// Mistral, sliding_window 16 in every layer (all three sequences are longer).
static void test_oracle_mistral(void ** state) {
    (void)state;
    check_oracle("tiny-mistral");
    check_oracle_model("tiny-mistral", "tests/fixtures/models/tiny-mistral.gguf");
    struct fixture fx;
    fixture_load(&fx, "tiny-mistral");
    struct oscar_model_config c = fx.model->config;
    assert_int_equal(c.sliding_window, 16);
    c.sliding_window = 0;
    double e = oracle_err_with(&fx, &c);
    printf("tiny-mistral without the window: logits rel-L2 %.3e\n", e);
    assert_true(e > 10 * ORACLE_TOL);
    fixture_free(&fx);
}

// Gemma 3 (transformers 5 keys): 4 layers [sliding, sliding, full, sliding], window 8 (every sequence is
// longer), head_dim 32 != hidden / heads, query_pre_attn_scalar 24, local base 1e4 unscaled, global 1e6 with
// linear factor 4, (1 + w) norms, sandwich norms, GELU-tanh, sqrt(C)-scaled tied embedding. Each feature
// switched off alone moves the logits far outside the tolerance.
static void test_oracle_gemma3(void ** state) {
    (void)state;
    check_oracle("tiny-gemma3");
    struct fixture fx;
    fixture_load(&fx, "tiny-gemma3");
    const struct oscar_model_config c = fx.model->config;
    assert_int_equal(c.arch, OSCAR_ARCH_GEMMA3);
    assert_int_equal(c.head_dim, 32);
    assert_int_equal(c.sliding_window, 8);
    assert_true(oscar_layer_sliding(&c, 0) && oscar_layer_sliding(&c, 1) && !oscar_layer_sliding(&c, 2) &&
                oscar_layer_sliding(&c, 3));
    assert_true(fabsf(oscar_attn_scale(&c) - 1.0f / sqrtf(24.0f)) < 1e-7f);
    struct { const char * what; struct oscar_model_config c; } off[7];
    for (int i = 0; i < 7; i++) off[i].c = c;
    off[0].what = "without the (1 + w) offset", off[0].c.norm_offset = 0.0f;
    off[1].what = "without the window", off[1].c.sliding_window = 0;
    off[2].what = "without the embedding scale", off[2].c.embed_scale = false;
    off[3].what = "with the scale 1/sqrt(head_dim)", off[3].c.attn_scale = 0.0f;
    off[4].what = "with the global RoPE in every layer", off[4].c.rope_theta_swa = 0.0f;
    off[5].what = "without the linear scaling", off[5].c.rope_scaling = OSCAR_ROPE_DEFAULT;
    off[6].what = "with SwiGLU", off[6].c.act = OSCAR_ACT_SILU;
    for (int i = 0; i < 7; i++) {
        double e = oracle_err_with(&fx, &off[i].c);
        printf("tiny-gemma3 %s: logits rel-L2 %.3e\n", off[i].what, e);
        assert_true(e > 10 * ORACLE_TOL);
    }
    fixture_free(&fx);
}

// The Hub's keys (rope_theta, rope_local_base_freq, rope_scaling, sliding_window_pattern 6), bf16 weights; the
// same weights as llama.cpp's converter writes them (norms + 1, pattern and local base fixed by llama.cpp) and
// in the Gemma3ForConditionalGeneration layout (language_model.model.*, vision tensors skipped).
static void test_oracle_gemma3_hub(void ** state) {
    (void)state;
    check_oracle("tiny-gemma3-hub");
    check_oracle_model("tiny-gemma3-hub", "tests/fixtures/models/tiny-gemma3-hub.gguf");
    check_oracle_model("tiny-gemma3-hub", "tests/fixtures/models/tiny-gemma3-mm");
    struct fixture fx;
    fixture_load_model(&fx, "tiny-gemma3-hub", "tests/fixtures/models/tiny-gemma3-hub.gguf");
    struct oscar_model_config c = fx.model->config;
    assert_true(c.norm_offset == 0.0f && c.tied_embeddings && c.swa_pattern == 6);
    for (int32_t l = 0; l < c.n_layer; l++) assert_int_equal(oscar_layer_sliding(&c, l), l != 5);
    assert_true(c.rope_theta == 1e6f && c.rope_theta_swa == 1e4f && c.rope_factor == 8.0f);
    c.norm_offset = 1.0f; // the converter's + 1 counted twice
    double e = oracle_err_with(&fx, &c);
    printf("tiny-gemma3-hub.gguf with the offset added again: logits rel-L2 %.3e\n", e);
    assert_true(e > 10 * ORACLE_TOL);
    c = fx.model->config;
    c.post_norms = false; // the sandwich norms' weights are there but unused
    e = oracle_err_with(&fx, &c);
    printf("tiny-gemma3-hub.gguf without the sandwich norms: logits rel-L2 %.3e\n", e);
    assert_true(e > 10 * ORACLE_TOL);
    fixture_free(&fx);
}

// The other Gemma3ForConditionalGeneration layout, model.language_model.* (as transformers 5 saves the class):
// tiny-gemma3-mm with its tensor names rewritten in place (both prefixes are 21 bytes: offsets unchanged).
static void test_oracle_gemma3_mm_v5(void ** state) {
    (void)state;
    char * data = NULL, * cfg = NULL;
    size_t n = 0, n_cfg = 0;
    assert_int_equal(osc_read_file("tests/fixtures/models/tiny-gemma3-mm/model.safetensors", 16u << 20, &data, &n),
                     OSCAR_OK);
    assert_int_equal(osc_read_file("tests/fixtures/models/tiny-gemma3-mm/config.json", 1u << 20, &cfg, &n_cfg),
                     OSCAR_OK);
    uint64_t hl;
    memcpy(&hl, data, 8);
    assert_true(hl + 8 <= n);
    const char * from = "language_model.model.", * to = "model.language_model.";
    assert_int_equal(strlen(from), strlen(to));
    int renamed = 0;
    for (char * p = data + 8; (p = memmem(p, (size_t)(data + 8 + hl - p), from, strlen(from))) != NULL; renamed++)
        memcpy(p, to, strlen(to));
    assert_true(renamed >= 2 + 13 * 6); // embedding, final norm, 13 tensors per layer
    char dir[300], path[340];
    snprintf(dir, sizeof dir, "%s/mm-v5", tmpdir);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(osc_write_file_atomic(path, data, n), OSCAR_OK);
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(osc_write_file_atomic(path, cfg, n_cfg), OSCAR_OK);
    free(data);
    free(cfg);
    check_oracle_model("tiny-gemma3-hub", dir);
}

// Phi-3: fused projections split at load, partial rotary (8 of 16 dims), sliding_window 20.
static void test_oracle_phi3(void ** state) {
    (void)state;
    check_oracle("tiny-phi3");
    struct fixture fx;
    fixture_load(&fx, "tiny-phi3");
    struct oscar_model_config c = fx.model->config;
    assert_int_equal(c.arch, OSCAR_ARCH_PHI3);
    assert_int_equal(c.rope_dim, 8);
    assert_int_equal(c.sliding_window, 20);
    c.rope_dim = 0;
    double e = oracle_err_with(&fx, &c);
    printf("tiny-phi3 rotating all dims: logits rel-L2 %.3e\n", e);
    assert_true(e > 10 * ORACLE_TOL);
    fixture_free(&fx);
}

// The same weights as llama.cpp's converter writes Phi-3 (make_yarn_phi3_fixtures.py): fused attn_qkv, ffn_up =
// gate | up, partial rotary from phi3.rope.dimension_count, the window from phi3.attention.sliding_window.
// Control: the file with each ffn_up's gate and up halves swapped must miss the fixture.
static void test_oracle_phi3_gguf(void ** state) {
    (void)state;
    const char * gguf = "tests/fixtures/models/tiny-phi3.gguf";
    check_oracle_model("tiny-phi3", gguf);
    struct fixture fx;
    fixture_load_model(&fx, "tiny-phi3", gguf);
    const struct oscar_model_config c = fx.model->config;
    assert_int_equal(c.arch, OSCAR_ARCH_PHI3);
    assert_true(c.rope_dim == 8 && c.sliding_window == 20 && c.head_dim == 16 && !c.tied_embeddings);
    fixture_free(&fx);
    struct osc_gguf * g = NULL;
    struct osc_gguf_writer * w = NULL;
    assert_int_equal(osc_gguf_open(gguf, &g), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_new(32, &w), OSCAR_OK);
    assert_int_equal(osc_gguf_copy_kvs(w, g), OSCAR_OK);
    int swapped = 0;
    char * up[8] = {0}; // the swapped copies, alive until the write
    for (int64_t i = 0; i < osc_gguf_n_tensors(g); i++) {
        const struct osc_gguf_tensor * t = osc_gguf_tensor(g, i);
        const size_t n = strlen(t->name);
        const void * data = t->data;
        if (n > 14 && strcmp(t->name + n - 14, ".ffn_up.weight") == 0) { // [2F rows of ne0]: swap the halves
            assert_int_equal(t->type, OSC_GGML_F32);
            assert_true(swapped < 8);
            const size_t half = t->nbytes / 2;
            char * x = up[swapped++] = malloc(t->nbytes);
            assert_non_null(x);
            memcpy(x, (const char *)t->data + half, half);
            memcpy(x + half, t->data, half);
            data = x;
        }
        assert_int_equal(osc_gguf_writer_tensor(w, t->name, t->type, t->n_dims, t->ne, data, t->nbytes), OSCAR_OK);
    }
    assert_int_equal(swapped, c.n_layer);
    char * path = osc_path_join(tmpdir, "phi3-swapped.gguf");
    assert_int_equal(osc_gguf_writer_write(w, path), OSCAR_OK);
    osc_gguf_writer_free(w);
    for (int j = 0; j < swapped; j++) free(up[j]);
    osc_gguf_close(g);
    fixture_load_model(&fx, "tiny-phi3", path);
    double e = oracle_err_with(&fx, &fx.model->config);
    printf("tiny-phi3.gguf with ffn_up's gate / up halves swapped: logits rel-L2 %.3e\n", e);
    assert_true(e > 10 * ORACLE_TOL);
    fixture_free(&fx);
    free(path);
}

// The dense fixtures' GGUF variants (make_gguf_variants.py): tiny-llama (llama: q/k rows permuted to ggml's
// pairs, tied), tiny-qwen2 (q/k/v biases, untied), tiny-qwen3 (q/k norms, head_dim 48 != 128 / 4, tied). Each file
// must match the transformers fixture; a copy with the feature the converter encodes undone must miss it.
enum gguf_edit { EDIT_UNPERMUTE, EDIT_ZERO, EDIT_ONES };

// tests' tmpdir/<out>: `src` with every f32 tensor whose name ends in one of `suffixes` edited; returns the path.
static char * gguf_edited_copy(const char * src, const char * out, const char * const * suffixes, int n_suffixes,
                               enum gguf_edit edit, int32_t D, int * n_edited) {
    struct osc_gguf * g = NULL;
    struct osc_gguf_writer * w = NULL;
    assert_int_equal(osc_gguf_open(src, &g), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_new(32, &w), OSCAR_OK);
    assert_int_equal(osc_gguf_copy_kvs(w, g), OSCAR_OK);
    float * edited[64] = {0}; // alive until the write
    int n = 0;
    for (int64_t i = 0; i < osc_gguf_n_tensors(g); i++) {
        const struct osc_gguf_tensor * t = osc_gguf_tensor(g, i);
        const size_t len = strlen(t->name);
        bool hit = false;
        for (int j = 0; j < n_suffixes; j++) {
            const size_t sl = strlen(suffixes[j]);
            hit = hit || (len > sl && strcmp(t->name + len - sl, suffixes[j]) == 0);
        }
        const void * data = t->data;
        if (hit) {
            assert_int_equal(t->type, OSC_GGML_F32);
            assert_true(n < 64);
            float * x = edited[n++] = malloc(t->nbytes);
            assert_non_null(x);
            const float * a = t->data;
            const int64_t cols = t->ne[0], rows = t->n_elements / t->ne[0];
            for (int64_t e = 0; e < t->n_elements; e++) x[e] = edit == EDIT_ZERO ? 0.0f : edit == EDIT_ONES ? 1.0f : a[e];
            if (edit == EDIT_UNPERMUTE) { // ggml's row 2i + j of each head back to HF's row j * D/2 + i
                assert_true(rows % D == 0);
                for (int64_t r = 0; r < rows; r++) {
                    const int64_t h = r / D, k = r % D, hf = h * D + (k % 2) * (D / 2) + k / 2;
                    memcpy(x + hf * cols, a + r * cols, (size_t)cols * sizeof(float));
                }
            }
            data = x;
        }
        assert_int_equal(osc_gguf_writer_tensor(w, t->name, t->type, t->n_dims, t->ne, data, t->nbytes), OSCAR_OK);
    }
    char * path = osc_path_join(tmpdir, out);
    assert_int_equal(osc_gguf_writer_write(w, path), OSCAR_OK);
    osc_gguf_writer_free(w);
    for (int j = 0; j < n; j++) free(edited[j]);
    osc_gguf_close(g);
    *n_edited = n;
    return path;
}

static void check_dense_gguf(const char * name, enum oscar_arch arch, int32_t D, bool tied, const char * const * suffixes,
                             int n_suffixes, enum gguf_edit edit, const char * what) {
    char gguf[256], out[64];
    snprintf(gguf, sizeof gguf, "tests/fixtures/models/%s.gguf", name);
    snprintf(out, sizeof out, "%s-control.gguf", name);
    check_oracle_model(name, gguf);
    struct fixture fx;
    fixture_load_model(&fx, name, gguf);
    const struct oscar_model_config c = fx.model->config;
    assert_int_equal(c.arch, arch);
    assert_true(c.head_dim == D && c.tied_embeddings == tied);
    assert_true(c.qkv_bias == (arch == OSCAR_ARCH_QWEN2) && c.qk_norm == (arch == OSCAR_ARCH_QWEN3));
    fixture_free(&fx);
    int n = 0;
    char * path = gguf_edited_copy(gguf, out, suffixes, n_suffixes, edit, D, &n);
    assert_int_equal(n, n_suffixes * c.n_layer);
    fixture_load_model(&fx, name, path);
    double e = oracle_err_with(&fx, &fx.model->config);
    printf("%s.gguf %s: logits rel-L2 %.3e\n", name, what, e);
    assert_true(e > 10 * ORACLE_TOL);
    fixture_free(&fx);
    free(path);
}

static void test_oracle_llama_gguf(void ** state) {
    (void)state;
    const char * qk[] = {".attn_q.weight", ".attn_k.weight"};
    check_dense_gguf("tiny-llama", OSCAR_ARCH_LLAMA, 32, true, qk, 2, EDIT_UNPERMUTE, "with q/k left in HF row order");
}

static void test_oracle_qwen2_gguf(void ** state) {
    (void)state;
    const char * bias[] = {".attn_q.bias", ".attn_k.bias", ".attn_v.bias"};
    check_dense_gguf("tiny-qwen2", OSCAR_ARCH_QWEN2, 16, false, bias, 3, EDIT_ZERO, "with the q/k/v biases zeroed");
}

static void test_oracle_qwen3_gguf(void ** state) {
    (void)state;
    const char * norms[] = {".attn_q_norm.weight", ".attn_k_norm.weight"};
    check_dense_gguf("tiny-qwen3", OSCAR_ARCH_QWEN3, 48, true, norms, 2, EDIT_ONES, "with unit q/k norm weights");
}

// YaRN (make_yarn_phi3_fixtures.py): qwen3, head_dim 32, rope_theta 1e4, factor 4 over an original context of 64,
// beta 32 / 1 (dims 0..5 of 16 on the ramp), cos/sin x (0.1 ln 4 + 1); sequences of 100, 40, 80 tokens. From
// config.json (transformers 5's rope_parameters) and from the GGUF (rope.scaling.type yarn, factor,
// original_context_length). Controls: without the attention factor, as linear scaling (same factor and attention
// factor), unscaled: each must miss.
static void test_oracle_qwen3_yarn(void ** state) {
    (void)state;
    const char * files[] = {"", "tests/fixtures/models/tiny-qwen3-yarn.gguf"};
    for (int i = 0; i < 2; i++) {
        check_oracle_model("tiny-qwen3-yarn", files[i]);
        struct fixture fx;
        fixture_load_model(&fx, "tiny-qwen3-yarn", files[i]);
        const struct oscar_model_config c = fx.model->config;
        assert_int_equal(c.arch, OSCAR_ARCH_QWEN3);
        assert_int_equal(c.rope_scaling, OSCAR_ROPE_YARN);
        assert_true(c.rope_factor == 4.0f && c.rope_orig_ctx == 64 && c.head_dim == 32 && !c.rope_no_truncate);
        assert_true(fabsf(c.rope_attn_factor - (float)(0.1 * log(4.0) + 1.0)) < 1e-7f);
        const char * name = i ? "tiny-qwen3-yarn.gguf" : "tiny-qwen3-yarn";
        struct { const char * what; struct oscar_model_config c; } off[3] = {{"without the attention factor", c},
                                                                              {"as linear scaling", c},
                                                                              {"unscaled", c}};
        off[0].c.rope_attn_factor = 1.0f;
        off[1].c.rope_scaling = OSCAR_ROPE_LINEAR;
        off[2].c.rope_scaling = OSCAR_ROPE_DEFAULT, off[2].c.rope_attn_factor = 0.0f;
        for (int j = 0; j < 3; j++) {
            double e = oracle_err_with(&fx, &off[j].c);
            printf("%s %s: logits rel-L2 %.3e\n", name, off[j].what, e);
            assert_true(e > 10 * ORACLE_TOL);
        }
        fixture_free(&fx);
    }
}

// ---- hooks -------------------------------------------------------------------------------------

struct hook_log {
    int32_t n_calls;
    int32_t layers[16];
    const struct fixture * fx;
    float * resid_last; // copy of resid_out of the last layer
};

static bool want_0_2(void * user, int32_t layer) { (void)user; return layer == 0 || layer == 2; }

static enum oscar_status log_layer(void * user, const struct oscar_capture_layer * cap) {
    struct hook_log * h = user;
    const struct oscar_model_config * c = &h->fx->model->config;
    if (h->n_calls < 16) h->layers[h->n_calls] = cap->layer;
    h->n_calls++;
    // shapes and batch description as documented in model.h
    if (cap->n_tokens != h->fx->T || cap->n_seq != h->fx->n_seq || cap->config != c) return OSCAR_ERR_INVALID;
    if (!cap->q || !cap->k || !cap->v || !cap->attn_out || !cap->resid_out) return OSCAR_ERR_INVALID;
    if (cap->wo != h->fx->model->layers[cap->layer].wo) return OSCAR_ERR_INVALID;
    for (int32_t s = 0; s <= cap->n_seq; s++)
        if (cap->seq_start[s] != h->fx->seq_start[s]) return OSCAR_ERR_INVALID;
    for (int32_t t = 0; t < cap->n_tokens; t++)
        if (cap->pos[t] != h->fx->pos[t]) return OSCAR_ERR_INVALID;
    if (cap->layer == c->n_layer - 1)
        memcpy(h->resid_last, cap->resid_out, (size_t)cap->n_tokens * (size_t)c->n_embd * sizeof(float));
    return OSCAR_OK;
}

// Qwen3-MoE: 8 experts, top-2 renormalised (norm_topk_prob), q/k norms; every layer sparse. The
// GGUF variant (llama.cpp's stacked ffn_*_exps, qwen3moe keys) against the same fixture.
static void test_oracle_qwen3_moe(void ** state) {
    (void)state;
    check_oracle("tiny-qwen3-moe");
    check_oracle_model("tiny-qwen3-moe", "tests/fixtures/models/tiny-qwen3-moe.gguf");
    struct fixture fx;
    fixture_load(&fx, "tiny-qwen3-moe");
    struct oscar_model_config c = fx.model->config;
    assert_int_equal(c.arch, OSCAR_ARCH_QWEN3_MOE);
    assert_true(c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_expert == 16 && c.expert_norm_topk && c.qk_norm);
    for (int32_t l = 0; l < c.n_layer; l++) assert_true(oscar_layer_is_moe(&c, l));
    c.expert_norm_topk = false;
    double e = oracle_err_with(&fx, &c);
    printf("tiny-qwen3-moe without norm_topk_prob: logits rel-L2 %.3e\n", e);
    assert_true(e > 10 * ORACLE_TOL);
    c.expert_norm_topk = true, c.n_expert_used = 1; // top-1: the routing itself matters
    e = oracle_err_with(&fx, &c);
    printf("tiny-qwen3-moe with top-1: logits rel-L2 %.3e\n", e);
    assert_true(e > 10 * ORACLE_TOL);
    fixture_free(&fx);
}

// Qwen2-MoE: 4 experts, top-2 not renormalised, the shared expert scaled by sigmoid(shared_expert_gate x),
// q/k/v bias, untied head.
static void test_oracle_qwen2_moe(void ** state) {
    (void)state;
    check_oracle("tiny-qwen2-moe");
    check_oracle_model("tiny-qwen2-moe", "tests/fixtures/models/tiny-qwen2-moe.gguf");
    struct fixture fx;
    fixture_load(&fx, "tiny-qwen2-moe");
    struct oscar_model_config c = fx.model->config;
    assert_int_equal(c.arch, OSCAR_ARCH_QWEN2_MOE);
    assert_true(c.n_expert == 4 && c.n_expert_used == 2 && c.n_ff_shared == 32 && !c.expert_norm_topk && c.qkv_bias);
    c.expert_norm_topk = true;
    double e = oracle_err_with(&fx, &c);
    printf("tiny-qwen2-moe with norm_topk_prob: logits rel-L2 %.3e\n", e);
    assert_true(e > 10 * ORACLE_TOL);
    // the shared expert's output dropped (its down projection zeroed in the loaded weights)
    for (int32_t l = 0; l < c.n_layer; l++)
        memset(fx.model->layers[l].sh_down, 0, sizeof(float) * (size_t)c.n_embd * (size_t)c.n_ff_shared);
    e = oracle_err_with(&fx, &fx.model->config);
    printf("tiny-qwen2-moe without the shared expert: logits rel-L2 %.3e\n", e);
    assert_true(e > 10 * ORACLE_TOL);
    fixture_free(&fx);
}

// Mixtral: Llama attention with sliding_window 16, block_sparse_moe with 4 experts (w1/w3/w2) of
// intermediate_size, top-2 always renormalised; its GGUF is llama + llama.expert_count, q/k permuted.
static void test_oracle_mixtral(void ** state) {
    (void)state;
    check_oracle("tiny-mixtral");
    check_oracle_model("tiny-mixtral", "tests/fixtures/models/tiny-mixtral.gguf");
    struct fixture fx;
    fixture_load_model(&fx, "tiny-mixtral", "tests/fixtures/models/tiny-mixtral.gguf");
    struct oscar_model_config c = fx.model->config;
    assert_int_equal(c.arch, OSCAR_ARCH_MIXTRAL);
    assert_true(c.n_expert == 4 && c.n_expert_used == 2 && c.n_ff_expert == 16 && c.expert_norm_topk);
    assert_int_equal(c.sliding_window, 16);
    c.expert_norm_topk = false;
    double e = oracle_err_with(&fx, &c);
    printf("tiny-mixtral without renormalising the top-k: logits rel-L2 %.3e\n", e);
    assert_true(e > 10 * ORACLE_TOL);
    fixture_free(&fx);
}

// GLM-4.x MoE (make_glm4moe_fixtures.py): head_dim 32 != hidden / heads, RoPE on the first 16 dims, q/k norms,
// q/k/v bias, layer 0 dense, layers 1-3 with 8 sigmoid-scored experts chosen with e_score_correction_bias in
// 2 groups of which 1 competes, top-2 renormalised then times 2.5, plus one ungated shared expert. Both files
// (config.json + safetensors, its GGUF) against the same fixture; each feature switched off must miss it.
static void test_oracle_glm4_moe(void ** state) {
    (void)state;
    check_oracle("tiny-glm4-moe");
    check_oracle_model("tiny-glm4-moe", "tests/fixtures/models/tiny-glm4-moe.gguf");
    const char * files[] = {"", "tests/fixtures/models/tiny-glm4-moe.gguf"};
    for (int i = 0; i < 2; i++) {
        struct fixture fx;
        fixture_load_model(&fx, "tiny-glm4-moe", files[i]);
        struct oscar_model_config c = fx.model->config, c2;
        assert_int_equal(c.arch, OSCAR_ARCH_GLM4_MOE);
        assert_true(c.n_layer == 4 && c.head_dim == 32 && c.rope_dim == 16 && c.qk_norm && c.qkv_bias);
        assert_true(c.n_expert == 8 && c.n_expert_used == 2 && c.n_ff_expert == 24 && c.n_ff_shared == 24);
        assert_true(c.expert_gating == OSCAR_GATING_SIGMOID && c.expert_bias && c.shared_ungated);
        assert_true(c.n_expert_group == 2 && c.n_group_used == 1 && c.expert_norm_topk && c.expert_scale == 2.5f);
        assert_true(!oscar_layer_is_moe(&c, 0) && oscar_layer_is_moe(&c, 1) && oscar_layer_is_moe(&c, 3));
        const char * name = i ? "tiny-glm4-moe.gguf" : "tiny-glm4-moe";
        double e;
        c2 = c, c2.n_expert_group = 1;
        e = oracle_err_with(&fx, &c2);
        printf("%s without the expert groups: logits rel-L2 %.3e\n", name, e);
        assert_true(e > 10 * ORACLE_TOL);
        c2 = c, c2.expert_scale = 0.0f;
        e = oracle_err_with(&fx, &c2);
        printf("%s without the routed scaling: logits rel-L2 %.3e\n", name, e);
        assert_true(e > 10 * ORACLE_TOL);
        c2 = c, c2.expert_norm_topk = false;
        e = oracle_err_with(&fx, &c2);
        printf("%s without norm_topk_prob: logits rel-L2 %.3e\n", name, e);
        assert_true(e > 10 * ORACLE_TOL);
        c2 = c, c2.rope_dim = 0;
        e = oracle_err_with(&fx, &c2);
        printf("%s rotating all dims: logits rel-L2 %.3e\n", name, e);
        assert_true(e > 10 * ORACLE_TOL);
        // the correction bias zeroed in the loaded weights (it only chooses, so the routing changes), then put back
        float bias[4][8];
        for (int32_t l = 1; l < c.n_layer; l++) {
            memcpy(bias[l], fx.model->layers[l].exp_bias, sizeof bias[l]);
            memset(fx.model->layers[l].exp_bias, 0, sizeof bias[l]);
        }
        e = oracle_err_with(&fx, &c);
        printf("%s without the correction bias: logits rel-L2 %.3e\n", name, e);
        assert_true(e > 10 * ORACLE_TOL);
        for (int32_t l = 1; l < c.n_layer; l++) memcpy(fx.model->layers[l].exp_bias, bias[l], sizeof bias[l]);
        assert_true(oracle_err_with(&fx, &c) <= ORACLE_TOL);
        // the shared expert's output dropped
        for (int32_t l = 1; l < c.n_layer; l++)
            memset(fx.model->layers[l].sh_down, 0, sizeof(float) * (size_t)c.n_embd * (size_t)c.n_ff_shared);
        e = oracle_err_with(&fx, &c);
        printf("%s without the shared expert: logits rel-L2 %.3e\n", name, e);
        assert_true(e > 10 * ORACLE_TOL);
        fixture_free(&fx);
    }
}

static void test_hook_layers_and_shapes(void ** state) {
    (void)state;
    struct fixture fx;
    fixture_load(&fx, "tiny-qwen3");
    const struct oscar_model_config * c = &fx.model->config;
    const size_t TC = (size_t)fx.T * (size_t)c->n_embd;
    struct hook_log log = {.fx = &fx, .resid_last = malloc(TC * sizeof(float))};
    struct oscar_capture_hook hook = {want_0_2, log_layer, &log, false};
    struct oscar_forward * f = make_forward(fx.model, 128, &hook, NULL);
    struct oscar_batch b = {fx.n_seq, fx.seq_start, fx.tokens, NULL};
    assert_int_equal(oscar_forward_run(f, &b, NULL), OSCAR_OK);
    assert_int_equal(log.n_calls, 2);
    assert_int_equal(log.layers[0], 0);
    assert_int_equal(log.layers[1], 2);
    // want == NULL: every layer; resid_out of the last layer, RMS-normed, is the final hidden state
    hook.want   = NULL;
    log.n_calls = 0;
    assert_int_equal(oscar_forward_run(f, &b, NULL), OSCAR_OK);
    assert_int_equal(log.n_calls, c->n_layer);
    for (int32_t l = 0; l < c->n_layer; l++) assert_int_equal(log.layers[l], l);
    int32_t T = 0;
    const float * hid = oscar_forward_hidden(f, &T);
    assert_int_equal(T, fx.T);
    float * ref = malloc(TC * sizeof(float));
    for (int32_t t = 0; t < fx.T; t++) {
        const float * x = log.resid_last + (size_t)t * c->n_embd;
        double ss = 0;
        for (int32_t i = 0; i < c->n_embd; i++) ss += (double)x[i] * (double)x[i];
        double r = 1.0 / sqrt(ss / c->n_embd + (double)c->rms_eps);
        for (int32_t i = 0; i < c->n_embd; i++)
            ref[(size_t)t * c->n_embd + i] = (float)((double)fx.model->output_norm[i] * ((double)x[i] * r));
    }
    // same formula in double vs fp32: a few ulps per element
    assert_true(fx_rel_l2(hid, ref, TC) < 1e-6);
    free(ref);
    free(log.resid_last);
    oscar_forward_free(f);
    fixture_free(&fx);
}

static enum oscar_status hook_noop(void * user, const struct oscar_capture_layer * cap) {
    (void)user;
    (void)cap;
    return OSCAR_OK;
}

static enum oscar_status hook_fail(void * user, const struct oscar_capture_layer * cap) {
    (void)user;
    (void)cap;
    return osc_error(OSCAR_ERR_IO, "disk full");
}

static enum oscar_status attention_zero(void * user, int32_t layer, const struct oscar_capture_layer * in,
                                        float * out) {
    (void)layer;
    int32_t * calls = user;
    (*calls)++;
    memset(out, 0, (size_t)in->n_tokens * (size_t)in->config->n_head * (size_t)in->config->head_dim * sizeof(float));
    return OSCAR_OK;
}

// Hook present or absent, built-in attention or the same attention as an override: identical logits.
static void test_hook_and_override_identical(void ** state) {
    (void)state;
    struct fixture fx;
    fixture_load(&fx, "tiny-llama");
    const size_t n = (size_t)fx.T * (size_t)fx.model->config.n_vocab;
    float * a = malloc(n * sizeof(float)), * b2 = malloc(n * sizeof(float));
    struct oscar_batch b = {fx.n_seq, fx.seq_start, fx.tokens, NULL};

    struct oscar_forward * f = make_forward(fx.model, fx.T, NULL, NULL);
    assert_int_equal(oscar_forward_run(f, &b, a), OSCAR_OK);
    oscar_forward_free(f);

    struct oscar_capture_hook hook = {NULL, hook_noop, NULL, false};
    f = make_forward(fx.model, fx.T, &hook, NULL);
    assert_int_equal(oscar_forward_run(f, &b, b2), OSCAR_OK);
    assert_memory_equal(a, b2, n * sizeof(float));
    oscar_forward_free(f);

    struct oscar_attention_override exact = {oscar_attention_causal, NULL};
    f = make_forward(fx.model, fx.T, NULL, &exact);
    assert_int_equal(oscar_forward_run(f, &b, b2), OSCAR_OK);
    assert_memory_equal(a, b2, n * sizeof(float));
    oscar_forward_free(f);

    // the override really replaces attention: zero attention changes the logits, called once per layer
    int32_t calls = 0;
    struct oscar_attention_override zero = {attention_zero, &calls};
    f = make_forward(fx.model, fx.T, NULL, &zero);
    assert_int_equal(oscar_forward_run(f, &b, b2), OSCAR_OK);
    assert_int_equal(calls, fx.model->config.n_layer);
    assert_true(fx_rel_l2(b2, a, n) > 1e-2);
    oscar_forward_free(f);

    // a failing hook stops the run with its status
    hook.on_layer = hook_fail;
    f = make_forward(fx.model, fx.T, &hook, NULL);
    assert_int_equal(oscar_forward_run(f, &b, b2), OSCAR_ERR_IO);
    assert_non_null(strstr(oscar_last_error(), "disk full"));
    oscar_forward_free(f);
    free(a);
    free(b2);
    fixture_free(&fx);
}

// A batch of three sequences gives the logits of the three sequences run one by one.
static void test_batched_equals_single(void ** state) {
    (void)state;
    struct fixture fx;
    fixture_load(&fx, "tiny-qwen2");
    const int32_t V = fx.model->config.n_vocab;
    float * all = malloc((size_t)fx.T * V * sizeof(float)), * one = malloc((size_t)fx.T * V * sizeof(float));
    struct oscar_forward * f = make_forward(fx.model, fx.T, NULL, NULL);
    struct oscar_batch b = {fx.n_seq, fx.seq_start, fx.tokens, NULL};
    assert_int_equal(oscar_forward_run(f, &b, all), OSCAR_OK);
    for (int32_t s = 0; s < fx.n_seq; s++) {
        int32_t s0 = fx.seq_start[s], n = fx.seq_start[s + 1] - s0, ss[2] = {0, n};
        struct oscar_batch bs = {1, ss, fx.tokens + s0, fx.pos + s0};
        assert_int_equal(oscar_forward_run(f, &bs, one), OSCAR_OK);
        // Per token the computation is the same; only sgemm's blocking over T may change the summation
        // order: fp32 reassociation of <= 192-term sums, ~1e-6 relative per layer, three layers.
        double e = fx_rel_l2(one, all + (size_t)s0 * V, (size_t)n * V);
        printf("sequence %d: batched vs single rel-L2 %.3e\n", s, e);
        assert_true(e <= 1e-5);
    }
    free(all);
    free(one);
    oscar_forward_free(f);
    fixture_free(&fx);
}

// ---- attention against a double-precision reference ---------------------------------------------

static uint64_t rng_state;
static float urand(void) { // xorshift64*, uniform in [-1, 1)
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void test_attention_reference(void ** state) {
    (void)state;
    uint64_t seed = 0x5eed1234u;
    rng_state = seed;
    printf("attention reference seed %llu\n", (unsigned long long)seed);
    struct oscar_model_config c = {.n_head = 6, .n_head_kv = 2, .head_dim = 40};
    int32_t seq[3] = {0, 150, 213}, pos[213];
    const int32_t T = 213, D = 40;
    for (int32_t t = 0; t < T; t++) pos[t] = t < 150 ? t : t - 150 + 7; // 2nd sequence fed from position 7
    float * q = malloc(sizeof(float) * T * 6 * D), * k = malloc(sizeof(float) * T * 2 * D);
    float * v = malloc(sizeof(float) * T * 2 * D), * out = malloc(sizeof(float) * T * 6 * D);
    for (int32_t i = 0; i < T * 6 * D; i++) q[i] = 3.0f * urand(); // scores up to ~|3*3*40|/sqrt(40): peaked
    for (int32_t i = 0; i < T * 2 * D; i++) k[i] = urand(), v[i] = urand();
    struct oscar_capture_layer in = {.n_tokens = T, .n_seq = 2, .seq_start = seq, .pos = pos,
                                     .q = q, .k = k, .v = v, .config = &c};
    int32_t nt = 2;
    assert_int_equal(oscar_attention_causal(&nt, 0, &in, out), OSCAR_OK);
    double num = 0, den = 0, w[213];
    for (int32_t s = 0; s < 2; s++)
        for (int32_t i = seq[s]; i < seq[s + 1]; i++)
            for (int32_t h = 0; h < 6; h++) {
                int32_t kh = h / 3;
                double mx = -INFINITY, sum = 0;
                for (int32_t j = seq[s]; j <= i; j++) {
                    double d = 0;
                    for (int32_t e = 0; e < D; e++) d += (double)q[(i * 6 + h) * D + e] * (double)k[(j * 2 + kh) * D + e];
                    w[j] = d / sqrt(D);
                    mx = w[j] > mx ? w[j] : mx;
                }
                for (int32_t j = seq[s]; j <= i; j++) sum += (w[j] = exp(w[j] - mx));
                for (int32_t e = 0; e < D; e++) {
                    double o = 0;
                    for (int32_t j = seq[s]; j <= i; j++) o += w[j] / sum * (double)v[(j * 2 + kh) * D + e];
                    double d = (double)out[(i * 6 + h) * D + e] - o;
                    num += d * d;
                    den += o * o;
                }
            }
    // fp32 scores carry relative error <= D * 2^-24 ~ 2.4e-6 of |q||k| (<= ~60 here, i.e. <= 1.5e-4
    // absolute in the exponent, typically sqrt(D)*2^-24*|q||k| ~ 2e-5); exp turns that into the same
    // relative error of each weight, so the output's relative L2 error is ~2e-5 at most: bound 1e-4.
    double e = sqrt(num / den);
    printf("attention vs double reference: rel-L2 %.3e\n", e);
    assert_true(e < 1e-4);
    free(q);
    free(k);
    free(v);
    free(out);
}

// ---- validation --------------------------------------------------------------------------------

static void test_bad_batches(void ** state) {
    (void)state;
    struct fixture fx;
    fixture_load(&fx, "tiny-llama");
    struct oscar_forward * f = make_forward(fx.model, 50, NULL, NULL);
    struct oscar_batch b = {fx.n_seq, fx.seq_start, fx.tokens, NULL}; // 97 > 50 tokens
    assert_int_equal(oscar_forward_run(f, &b, NULL), OSCAR_ERR_INVALID);
    int32_t ss[2] = {0, 4}, bad_tok[4] = {1, 2, fx.model->config.n_vocab, 3};
    struct oscar_batch b2 = {1, ss, bad_tok, NULL};
    assert_int_equal(oscar_forward_run(f, &b2, NULL), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "vocabulary"));
    int32_t ss_bad[3] = {0, 3, 3}, tok[3] = {1, 2, 3};
    struct oscar_batch b3 = {2, ss_bad, tok, NULL};
    assert_int_equal(oscar_forward_run(f, &b3, NULL), OSCAR_ERR_INVALID);
    oscar_forward_free(f);
    struct oscar_model broken = *fx.model;
    broken.output = NULL; // no LM head (oscar_model_open_no_head): runs without logits only
    struct oscar_forward_params p = oscar_forward_default_params();
    assert_int_equal(oscar_forward_init(&broken, &p, &f), OSCAR_OK);
    float * lg = malloc(sizeof(float) * 3 * (size_t) broken.config.n_vocab);
    int32_t ss1[2] = {0, 3};
    struct oscar_batch b1 = {1, ss1, tok, NULL};
    assert_int_equal(oscar_forward_run(f, &b1, NULL), OSCAR_OK);
    assert_int_equal(oscar_forward_run(f, &b1, lg), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "LM head"));
    free(lg);
    oscar_forward_free(f);
    f = NULL;
    broken.tok_embd = NULL;
    assert_int_equal(oscar_forward_init(&broken, &p, &f), OSCAR_ERR_INVALID);
    assert_null(f);
    fixture_free(&fx);
}

// ---- perplexity ------------------------------------------------------------------------------

static double ref_nll(const float * row, int32_t V, int32_t target) {
    double mx = (double)row[0], sum = 0;
    for (int32_t v = 1; v < V; v++) mx = (double)row[v] > mx ? (double)row[v] : mx;
    for (int32_t v = 0; v < V; v++) sum += exp((double)row[v] - mx);
    return log(sum) + mx - (double)row[target];
}

// One window over the first fixture sequence: the NLL equals the one computed from transformers' logits.
static void test_perplexity_oracle(void ** state) {
    (void)state;
    struct fixture fx;
    fixture_load(&fx, "tiny-qwen3");
    const int32_t V = fx.model->config.n_vocab, n = fx.seq_start[1];
    double nll = 0;
    for (int32_t j = 1; j < n; j++) {
        nll += ref_nll(fx.logits + (size_t)(j - 1) * V, V, fx.tokens[j]);
    }
    struct oscar_ppl_params pp = {.n_ctx = n, .stride = n};
    struct oscar_ppl_result r;
    assert_int_equal(oscar_perplexity(fx.model, fx.tokens, n, &pp, &r), OSCAR_OK);
    assert_int_equal(r.n_scored, n - 1);
    // logits within 1e-4 relative L2 of the oracle; the NLL is a smooth function of them with
    // derivative <= 2 per unit logit per token, so |dNLL|/NLL stays well under 1e-4.
    printf("tiny-qwen3 NLL %.6f oracle %.6f\n", r.nll_sum, nll);
    assert_true(fabs(r.nll_sum - nll) <= 1e-4 * nll);
    assert_true(fabs(r.ppl - exp(nll / (n - 1))) <= 1e-4 * r.ppl);
    fixture_free(&fx);
}

// The Hugging Face loop, written as in its docs (trg_len, labels masked to -100, shifted inside the
// loss), against oscar_perplexity for several windowings of the 97-token stream.
static void test_perplexity_windows(void ** state) {
    (void)state;
    struct fixture fx;
    fixture_load(&fx, "tiny-llama");
    const int32_t V = fx.model->config.n_vocab, N = fx.T;
    const int32_t cases[][2] = {{32, 16}, {40, 40}, {30, 7}, {97, 10}, {128, 64}};
    float * lg = malloc((size_t)N * V * sizeof(float));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int32_t n_ctx = cases[c][0], stride = cases[c][1];
        struct oscar_forward * f = make_forward(fx.model, n_ctx, NULL, NULL);
        double nll = 0;
        int64_t scored = 0;
        int32_t prev_end = 0;
        for (int32_t begin = 0; begin < N; begin += stride) {
            int32_t end = begin + n_ctx < N ? begin + n_ctx : N, trg_len = end - prev_end, len = end - begin;
            int32_t ss[2] = {0, len};
            struct oscar_batch b = {1, ss, fx.tokens + begin, NULL};
            assert_int_equal(oscar_forward_run(f, &b, lg), OSCAR_OK);
            for (int32_t i = 0; i + 1 < len; i++) { // label i+1 predicted by logits i (the shift)
                if (i + 1 < len - trg_len) continue; // label masked to -100
                nll += ref_nll(lg + (size_t)i * V, V, fx.tokens[begin + i + 1]);
                scored++;
            }
            prev_end = end;
            if (end == N) break;
        }
        oscar_forward_free(f);
        struct oscar_ppl_params pp = {.n_ctx = n_ctx, .stride = stride};
        struct oscar_ppl_result r;
        assert_int_equal(oscar_perplexity(fx.model, fx.tokens, N, &pp, &r), OSCAR_OK);
        printf("n_ctx %d stride %d: scored %lld, nll %.6f (reference %.6f)\n", n_ctx, stride,
               (long long)r.n_scored, r.nll_sum, nll);
        assert_int_equal(r.n_scored, scored);
        // every token but the first once, except the first token of each window when stride == n_ctx
        const int64_t n_win = n_ctx >= N ? 1 : (N - n_ctx + stride - 1) / stride + 1;
        assert_int_equal(r.n_scored, stride < n_ctx ? N - 1 : N - n_win);
        // same logits up to sgemm summation order (LM head on row chunks vs the full window): ~1e-6 rel.
        assert_true(fabs(r.nll_sum - nll) <= 1e-5 * nll);
    }
    struct oscar_ppl_params bad = {.n_ctx = 10, .stride = 11};
    struct oscar_ppl_result r;
    assert_int_equal(oscar_perplexity(fx.model, fx.tokens, N, &bad, &r), OSCAR_ERR_INVALID);
    free(lg);
    fixture_free(&fx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle_llama),
        cmocka_unit_test(test_oracle_qwen2),
        cmocka_unit_test(test_oracle_qwen3),
        cmocka_unit_test(test_oracle_llama_gguf),
        cmocka_unit_test(test_oracle_qwen2_gguf),
        cmocka_unit_test(test_oracle_qwen3_gguf),
        cmocka_unit_test(test_oracle_llama3),
        cmocka_unit_test(test_oracle_llama3_gguf),
        cmocka_unit_test(test_oracle_mistral),
        cmocka_unit_test(test_oracle_phi3),
        cmocka_unit_test(test_oracle_phi3_gguf),
        cmocka_unit_test(test_oracle_qwen3_yarn),
        cmocka_unit_test(test_oracle_gemma3),
        cmocka_unit_test(test_oracle_gemma3_hub),
        cmocka_unit_test(test_oracle_gemma3_mm_v5),
        cmocka_unit_test(test_oracle_qwen3_moe),
        cmocka_unit_test(test_oracle_qwen2_moe),
        cmocka_unit_test(test_oracle_mixtral),
        cmocka_unit_test(test_oracle_glm4_moe),
        cmocka_unit_test(test_hook_layers_and_shapes),
        cmocka_unit_test(test_hook_and_override_identical),
        cmocka_unit_test(test_batched_equals_single),
        cmocka_unit_test(test_attention_reference),
        cmocka_unit_test(test_bad_batches),
        cmocka_unit_test(test_perplexity_oracle),
        cmocka_unit_test(test_perplexity_windows),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
