// test-model.c - model loader (GGUF q/k un-permutation vs the HF original),
// SHA-256, safetensors writer/reader round trip and bad input, HF config parsing.
//
// Fixture tests/fixtures/model/ (tests/oracle/model_oracle.py): one tiny llama
// stored as an HF directory and as a llama.cpp-converted GGUF whose q/k rows
// are permuted per head. Both loads must give bit-identical fp32 weights
// (all tensors are F32, so no rounding is involved).
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
#include <sys/stat.h>
#include <unistd.h>

#include "formats/gguf-writer.h"
#include "formats/hf-config.h"
#include "formats/safetensors.h"
#include "model/load-internal.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/sha256.h"
#include "oscar.h"
#include "util/fs.h"

#define TEST_TMPDIR_NAME "model"
#include "test-tmpdir.h"

static void test_sha256(void ** state) {
    (void) state;
    char h[65];
    osc_sha256_hex("", 0, h);
    assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    osc_sha256_hex("abc", 3, h);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char * m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; // 56 bytes: 2 padding blocks
    osc_sha256_hex(m, strlen(m), h);
    assert_string_equal(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void assert_same(const float * a, const float * b, int64_t n, const char * what) {
    if (memcmp(a, b, (size_t) n * sizeof *a) != 0) fail_msg("%s differs between GGUF and HF loads", what);
}

static void test_gguf_vs_hf(void ** state) {
    (void) state;
    struct oscar_model *g = NULL, *h = NULL;
    assert_int_equal(oscar_model_load("tests/fixtures/model/tiny-llama.gguf", &g), OSCAR_OK);
    assert_int_equal(oscar_model_load("tests/fixtures/model/hf", &h), OSCAR_OK);
    const struct oscar_model_config *a = &g->config, *b = &h->config;
    assert_int_equal(a->arch, OSCAR_ARCH_LLAMA);
    assert_int_equal(b->arch, OSCAR_ARCH_LLAMA);
    assert_int_equal(a->n_layer, 2);
    assert_int_equal(a->n_embd, b->n_embd);
    assert_int_equal(a->n_head, 4);
    assert_int_equal(a->n_head_kv, 2);
    assert_int_equal(a->head_dim, 4);
    assert_int_equal(b->head_dim, 4);
    assert_int_equal(a->n_ff, b->n_ff);
    assert_int_equal(a->n_vocab, 40);
    assert_int_equal(b->n_vocab, 40);
    assert_int_equal(a->n_ctx_train, 512);
    assert_int_equal(b->n_ctx_train, 512);
    assert_true(a->rope_theta == 50000.0f && b->rope_theta == 50000.0f);
    assert_true(a->rms_eps == 1e-5f && b->rms_eps == 1e-5f);
    assert_false(a->tied_embeddings);
    assert_false(b->tied_embeddings);
    assert_string_equal(a->name, "tiny-llama");
    assert_string_equal(b->name, "tiny-llama");
    assert_int_equal(strlen(g->source_sha256), 64);
    assert_int_equal(strlen(h->source_sha256), 64);
    int64_t C = a->n_embd, q = a->n_head * a->head_dim, kv = a->n_head_kv * a->head_dim;
    assert_same(g->tok_embd, h->tok_embd, a->n_vocab * C, "tok_embd");
    assert_same(g->output, h->output, a->n_vocab * C, "output");
    assert_same(g->output_norm, h->output_norm, C, "output_norm");
    for (int i = 0; i < a->n_layer; i++) {
        const struct oscar_layer_weights *x = &g->layers[i], *y = &h->layers[i];
        assert_same(x->wq, y->wq, q * C, "wq (un-permuted)");
        assert_same(x->wk, y->wk, kv * C, "wk (un-permuted)");
        assert_same(x->wv, y->wv, kv * C, "wv");
        assert_same(x->wo, y->wo, C * q, "wo");
        assert_same(x->attn_norm, y->attn_norm, C, "attn_norm");
        assert_same(x->ffn_norm, y->ffn_norm, C, "ffn_norm");
        assert_same(x->w_gate, y->w_gate, a->n_ff * C, "w_gate");
        assert_same(x->w_up, y->w_up, a->n_ff * C, "w_up");
        assert_same(x->w_down, y->w_down, a->n_ff * C, "w_down");
        assert_null(x->bq);
        assert_null(x->q_norm);
    }
    oscar_model_free(g);
    oscar_model_free(h);
}

static void test_random_model(void ** state) {
    (void) state;
    struct oscar_model_config c = {.arch = OSCAR_ARCH_QWEN3, .n_layer = 2, .n_embd = 32, .n_head = 4,
                                   .n_head_kv = 2, .head_dim = 16, .n_ff = 48, .n_vocab = 64, .n_ctx_train = 128,
                                   .rope_theta = 1e6f, .rms_eps = 1e-6f, .qk_norm = true, .tied_embeddings = true};
    struct oscar_model *m = NULL, *m2 = NULL;
    assert_int_equal(oscar_model_init_random(&c, 42, &m), OSCAR_OK);
    assert_int_equal(oscar_model_init_random(&c, 42, &m2), OSCAR_OK);
    assert_ptr_equal(m->output, m->tok_embd);
    assert_non_null(m->layers[1].q_norm);
    assert_true(m->layers[1].q_norm[3] == 1.0f);
    assert_memory_equal(m->layers[1].wk, m2->layers[1].wk, 2 * 16 * 32 * sizeof(float));
    double s2 = 0;
    int64_t n = (int64_t) c.n_vocab * c.n_embd;
    for (int64_t i = 0; i < n; i++) s2 += (double) m->tok_embd[i] * (double) m->tok_embd[i];
    double sd = sqrt(s2 / (double) n);
    // 2048 normal samples: the sample sd is within 0.02 * (1 +- 5/sqrt(2*2048)) with overwhelming probability
    assert_true(fabs(sd - 0.02) < 0.02 * 5 / sqrt(2.0 * (double) n));
    oscar_model_free(m);
    oscar_model_free(m2);
    c.n_head = 3; // not a multiple of n_head_kv
    assert_int_equal(oscar_model_init_random(&c, 1, &m), OSCAR_ERR_FORMAT);
    assert_null(m);
}

static void test_safetensors_roundtrip(void ** state) {
    (void) state;
    char * path = osc_path_join(tmpdir, "rt.safetensors");
    float a[6] = {1, -2, 3.5f, 4, 5, 6};
    int32_t b[3] = {7, -8, 9};
    uint8_t c[5] = {1, 2, 3, 4, 5};
    float s = 0.25f;
    int64_t sa[2] = {2, 3}, sb[1] = {3}, sc[1] = {5};
    struct osc_st_write_tensor t[] = {
        {"layers.0.k_rotation", OSC_ST_F32, 2, sa, a}, {"ids", OSC_ST_I32, 1, sb, b},
        {"bytes", OSC_ST_U8, 1, sc, c}, {"clip", OSC_ST_F32, 0, NULL, &s},
    };
    const char * meta[] = {"format", "pt", "oscar.format_version", "1"};
    assert_int_equal(osc_safetensors_write(path, t, 4, meta, 2), OSCAR_OK);
    struct osc_mapped_file mf;
    assert_int_equal(osc_map_file(path, &mf), OSCAR_OK);
    uint64_t hl;
    memcpy(&hl, mf.data, 8);
    assert_int_equal(hl % 8, 0);
    osc_unmap_file(&mf);
    struct osc_safetensors * st = NULL;
    assert_int_equal(osc_safetensors_open(path, &st), OSCAR_OK);
    assert_int_equal(osc_safetensors_n_tensors(st), 4);
    const struct osc_st_tensor * x = osc_safetensors_find(st, "layers.0.k_rotation");
    assert_non_null(x);
    assert_int_equal(x->n_dims, 2);
    assert_int_equal(x->shape[1], 3);
    float y[6];
    assert_int_equal(osc_st_to_f32(x, y), OSCAR_OK);
    assert_memory_equal(y, a, sizeof a);
    x = osc_safetensors_find(st, "ids");
    assert_memory_equal(x->data, b, sizeof b);
    assert_int_equal(osc_st_to_f32(x, y), OSCAR_ERR_UNSUPPORTED);
    x = osc_safetensors_find(st, "clip");
    assert_int_equal(x->n_dims, 0);
    assert_int_equal(x->n_elements, 1);
    assert_string_equal(osc_safetensors_metadata(st, "format"), "pt");
    assert_string_equal(osc_safetensors_metadata(st, "oscar.format_version"), "1");
    assert_null(osc_safetensors_metadata(st, "nope"));
    osc_safetensors_close(st);
    // duplicate names are refused, nothing is written
    struct osc_st_write_tensor d[] = {{"a", OSC_ST_F32, 1, sb, a}, {"a", OSC_ST_F32, 1, sb, a}};
    char * p2 = osc_path_join(tmpdir, "dup.safetensors");
    assert_int_equal(osc_safetensors_write(p2, d, 2, NULL, 0), OSCAR_ERR_INVALID);
    assert_int_equal(access(p2, F_OK), -1);
    free(p2);
    free(path);
}

static enum oscar_status open_bytes(const void * data, size_t n) {
    char * path = osc_path_join(tmpdir, "bad.safetensors");
    FILE * f = fopen(path, "wb");
    if (n) fwrite(data, 1, n, f);
    fclose(f);
    struct osc_safetensors * st = NULL;
    enum oscar_status s = osc_safetensors_open(path, &st);
    if (s == OSCAR_OK) {
        for (int64_t i = 0; i < osc_safetensors_n_tensors(st); i++) {
            const struct osc_st_tensor * t = osc_safetensors_tensor(st, i);
            volatile uint8_t sum = 0;
            for (size_t k = 0; k < t->nbytes; k++) sum ^= ((const uint8_t *) t->data)[k];
        }
        osc_safetensors_close(st);
    } else {
        assert_true(s == OSCAR_ERR_FORMAT || s == OSCAR_ERR_UNSUPPORTED);
        if (!strstr(oscar_last_error(), path)) fail_msg("message lacks the file: %s", oscar_last_error());
    }
    free(path);
    return s;
}

static enum oscar_status open_header(const char * json, size_t buf_bytes) {
    uint8_t b[1024] = {0};
    uint64_t n = strlen(json);
    memcpy(b, &n, 8);
    memcpy(b + 8, json, n);
    return open_bytes(b, 8 + n + buf_bytes);
}

static void test_safetensors_bad(void ** state) {
    (void) state;
    const char * ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    assert_int_equal(open_header(ok, 8), OSCAR_OK);
    assert_int_equal(open_header(ok, 7), OSCAR_ERR_FORMAT);  // past the end
    assert_int_equal(open_header(ok, 9), OSCAR_ERR_FORMAT);  // trailing byte
    assert_int_equal(open_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8),
                     OSCAR_ERR_FORMAT);
    assert_non_null(strstr(oscar_last_error(), "'a'"));
    assert_int_equal(open_header("{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8),
                     OSCAR_ERR_UNSUPPORTED);
    assert_int_equal(open_header("{\"a\":{\"dtype\":\"Q9\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8),
                     OSCAR_ERR_FORMAT);
    assert_int_equal(open_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                                 "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6),
                     OSCAR_ERR_FORMAT); // overlap
    assert_int_equal(open_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}", 4),
                     OSCAR_ERR_FORMAT); // hole
    assert_int_equal(open_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[4611686018427387904,4],"
                                 "\"data_offsets\":[0,0]}}", 0), OSCAR_ERR_FORMAT); // overflow
    assert_int_equal(open_header("{\"a\":1,\"a\":2}", 0), OSCAR_ERR_FORMAT);          // duplicate keys
    assert_int_equal(open_header("{\"__metadata__\":{\"k\":1}}", 0), OSCAR_ERR_FORMAT);
    assert_int_equal(open_header("[1]", 0), OSCAR_ERR_FORMAT);
    assert_int_equal(open_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,2,3,4,5,6,7,8,9],\"data_offsets\":[0,0]}}", 0),
                     OSCAR_ERR_FORMAT);
    uint8_t huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
    assert_int_equal(open_bytes(huge, 16), OSCAR_ERR_FORMAT);
    // every truncation of a valid file and random byte flips
    uint8_t b[256] = {0};
    uint64_t n = strlen(ok);
    memcpy(b, &n, 8);
    memcpy(b + 8, ok, n);
    size_t total = 8 + n + 8;
    for (size_t k = 0; k < total; k++) assert_int_not_equal(open_bytes(b, k), OSCAR_OK);
    unsigned seed = (unsigned) time(NULL);
    printf("safetensors flip seed %u\n", seed);
    srand(seed);
    for (int it = 0; it < 500; it++) {
        uint8_t c[256];
        memcpy(c, b, total);
        c[(size_t) rand() % total] = (uint8_t) rand();
        open_bytes(c, total);
    }
}

static enum oscar_status parse_cfg(const char * json) {
    struct oscar_model_config c;
    return osc_hf_config_parse(json, strlen(json), "cfg.json", &c);
}

static void test_hf_config(void ** state) {
    (void) state;
    struct oscar_model_config c;
    const char * q3 = "{\"architectures\":[\"Qwen3ForCausalLM\"],\"model_type\":\"qwen3\",\"hidden_size\":64,"
                      "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,"
                      "\"intermediate_size\":96,\"vocab_size\":100,\"rope_theta\":1000000,\"rms_norm_eps\":1e-6,"
                      "\"tie_word_embeddings\":true,\"max_position_embeddings\":40960,\"sliding_window\":4096,"
                      "\"use_sliding_window\":false,\"rope_scaling\":null}";
    assert_int_equal(osc_hf_config_parse(q3, strlen(q3), "q3.json", &c), OSCAR_OK);
    assert_int_equal(c.arch, OSCAR_ARCH_QWEN3);
    assert_int_equal(c.head_dim, 32);
    assert_int_equal(c.n_head_kv, 2);
    assert_true(c.qk_norm && !c.qkv_bias && c.tied_embeddings);
    assert_true(c.rope_theta == 1e6f);
    assert_int_equal(c.n_ctx_train, 40960);
    const char * l = "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":2,"
                     "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":100}";
    assert_int_equal(osc_hf_config_parse(l, strlen(l), "l.json", &c), OSCAR_OK);
    assert_int_equal(c.n_head_kv, 4);  // default = heads
    assert_int_equal(c.head_dim, 16);  // default = hidden / heads
    assert_false(c.tied_embeddings);
    assert_int_equal(parse_cfg("{\"model_type\":\"gemma3\"}"), OSCAR_ERR_FORMAT); // the text model is in text_config
    assert_non_null(strstr(oscar_last_error(), "cfg.json"));
    assert_non_null(strstr(oscar_last_error(), "text_config"));
    assert_int_equal(parse_cfg("{\"model_type\":\"llama\",\"architectures\":[\"Qwen2ForCausalLM\"]}"),
                     OSCAR_ERR_UNSUPPORTED);
    assert_int_equal(parse_cfg("{\"model_type\":\"llama\",\"hidden_size\":64}"), OSCAR_ERR_FORMAT);
    assert_non_null(strstr(oscar_last_error(), "num_hidden_layers"));
    assert_int_equal(parse_cfg("{\"model_type\":\"llama\",\"hidden_size\":-64,\"num_hidden_layers\":2,"
                               "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":100}"),
                     OSCAR_ERR_FORMAT);
    assert_int_equal(parse_cfg("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":2,"
                               "\"num_attention_heads\":4,\"num_key_value_heads\":3,\"intermediate_size\":96,"
                               "\"vocab_size\":100}"), OSCAR_ERR_FORMAT);
    assert_int_equal(parse_cfg("{\"model_type\":"), OSCAR_ERR_FORMAT);
    assert_int_equal(parse_cfg("[]"), OSCAR_ERR_FORMAT);
}

// Every tensor of layer l of a and b is the same bytes.
static void assert_same_layer(const struct oscar_model_config * c, const struct oscar_layer_weights * a,
                              const struct oscar_layer_weights * b) {
    const int64_t C = c->n_embd, q = (int64_t) c->n_head * c->head_dim, kv = (int64_t) c->n_head_kv * c->head_dim;
    assert_same(a->attn_norm, b->attn_norm, C, "attn_norm");
    assert_same(a->wq, b->wq, q * C, "wq");
    assert_same(a->wk, b->wk, kv * C, "wk");
    assert_same(a->wv, b->wv, kv * C, "wv");
    assert_same(a->wo, b->wo, C * q, "wo");
    assert_same(a->ffn_norm, b->ffn_norm, C, "ffn_norm");
    assert_same(a->w_gate, b->w_gate, c->n_ff * C, "w_gate");
    assert_same(a->w_up, b->w_up, c->n_ff * C, "w_up");
    assert_same(a->w_down, b->w_down, C * c->n_ff, "w_down");
    if (c->qk_norm) {
        assert_same(a->q_norm, b->q_norm, c->head_dim, "q_norm");
        assert_same(a->k_norm, b->k_norm, c->head_dim, "k_norm");
    }
}

// oscar_model_open reads layers only when asked, in any order, by prefetch or
// not, and gives the bytes oscar_model_load gives; a released layer is gone
// (the forward pass says so) and can be read again.
static void check_on_demand(struct oscar_model * loaded, struct oscar_model * opened) {
    const struct oscar_model_config * c = &loaded->config;
    assert_true(oscar_model_streamed(opened));
    assert_false(oscar_model_streamed(loaded));
    assert_string_equal(opened->source_sha256, loaded->source_sha256);
    assert_same(opened->tok_embd, loaded->tok_embd, (int64_t) c->n_vocab * c->n_embd, "tok_embd");
    assert_same(opened->output, loaded->output, (int64_t) c->n_vocab * c->n_embd, "output");
    for (int32_t l = 0; l < c->n_layer; l++) assert_false(oscar_model_layer_resident(opened, l));
    assert_null(opened->layers[0].wq);
    const int32_t last = c->n_layer - 1;
    assert_int_equal(oscar_model_layer_acquire(opened, last), OSCAR_OK);   // out of order
    assert_same_layer(c, &opened->layers[last], &loaded->layers[last]);
    oscar_model_layer_prefetch(opened, 0);                                 // read on the prefetch thread
    assert_int_equal(oscar_model_layer_acquire(opened, 0), OSCAR_OK);
    assert_same_layer(c, &opened->layers[0], &loaded->layers[0]);
    oscar_model_layer_release(opened, last);
    assert_false(oscar_model_layer_resident(opened, last));
    assert_null(opened->layers[last].wo);
    // the forward pass refuses a layer that is not there
    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.n_threads = 1, fp.max_tokens = 4;
    struct oscar_forward * f = NULL;
    assert_int_equal(oscar_forward_init(opened, &fp, &f), OSCAR_OK);
    const int32_t tok[2] = {1, 2}, starts[2] = {0, 2};
    const struct oscar_batch b = {.n_seq = 1, .seq_start = starts, .tokens = tok};
    assert_int_equal(oscar_forward_begin(f, &b), OSCAR_OK);
    oscar_forward_embed(f);
    assert_int_equal(oscar_forward_layer(f, 0), OSCAR_OK);
    if (last > 0) {
        assert_int_equal(oscar_forward_layer(f, last), OSCAR_ERR_INVALID);
        assert_non_null(strstr(oscar_last_error(), "not resident"));
    }
    oscar_forward_free(f);
    assert_int_equal(oscar_model_layer_acquire(opened, last), OSCAR_OK);   // read again
    assert_same_layer(c, &opened->layers[last], &loaded->layers[last]);
    assert_int_equal(oscar_model_layer_acquire(opened, c->n_layer), OSCAR_ERR_INVALID);
    oscar_model_layer_prefetch(opened, 0);                                 // resident: nothing to do
    oscar_model_layer_release(loaded, 0);                                  // a loaded model keeps its layers
    assert_true(oscar_model_layer_resident(loaded, 0));
    oscar_model_layer_release(opened, last);
    oscar_model_layer_prefetch(opened, last);
    oscar_model_layer_release(opened, last);                               // released while its read is pending
    assert_false(oscar_model_layer_resident(opened, last));
    oscar_model_layer_prefetch(opened, last);                              // freed while its read is pending
    oscar_model_free(loaded);
    oscar_model_free(opened);
}

static void test_layers_on_demand(void ** state) {
    (void) state;
    const char * files[] = {"tests/fixtures/model/tiny-llama.gguf", "tests/fixtures/model/hf",
                            "tests/fixtures/models/tiny-qwen3"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        struct oscar_model * a = NULL, * b = NULL;
        assert_int_equal(oscar_model_load(files[i], &a), OSCAR_OK);
        assert_int_equal(oscar_model_open(files[i], &b), OSCAR_OK);
        check_on_demand(a, b);
    }
    struct oscar_model_config c = {.arch = OSCAR_ARCH_QWEN2, .n_layer = 3, .n_embd = 32, .n_head = 4,
                                   .n_head_kv = 2, .head_dim = 8, .n_ff = 40, .n_vocab = 50, .n_ctx_train = 128,
                                   .rope_theta = 1e4f, .rms_eps = 1e-6f, .qkv_bias = true};
    struct oscar_model * a = NULL, * b = NULL;
    assert_int_equal(oscar_model_init_random(&c, 9, &a), OSCAR_OK);
    assert_int_equal(oscar_model_open_random(&c, 9, &b), OSCAR_OK);
    for (int32_t l = 0; l < c.n_layer; l++) { // biases too (assert_same_layer skips them)
        assert_int_equal(oscar_model_layer_acquire(b, l), OSCAR_OK);
        assert_same(a->layers[l].bq, b->layers[l].bq, 32, "bq");
        assert_same(a->layers[l].bv, b->layers[l].bv, 16, "bv");
        oscar_model_layer_release(b, l);
    }
    check_on_demand(a, b);
    struct oscar_model * m = NULL;
    assert_int_equal(oscar_model_open("/nonexistent/model.gguf", &m), OSCAR_ERR_NOT_FOUND);
    assert_null(m);
    // without the LM head (an untied model): same embedding and layers, no output read, no logits
    struct oscar_model * full = NULL, * nohead = NULL;
    assert_int_equal(oscar_model_load("tests/fixtures/models/tiny-qwen2", &full), OSCAR_OK);
    assert_int_equal(oscar_model_open_no_head("tests/fixtures/models/tiny-qwen2", &nohead), OSCAR_OK);
    assert_false(full->config.tied_embeddings);
    assert_non_null(full->output);
    assert_null(nohead->output);
    assert_same(full->tok_embd, nohead->tok_embd, (size_t) full->config.n_vocab * full->config.n_embd, "embedding");
    for (int32_t l = 0; l < nohead->config.n_layer; l++) assert_int_equal(oscar_model_layer_acquire(nohead, l), OSCAR_OK);
    struct oscar_forward_params fp = oscar_forward_default_params();
    struct oscar_forward * f = NULL;
    const int32_t tok[3] = {1, 2, 3}, starts[2] = {0, 3};
    const struct oscar_batch bt = {1, starts, tok, NULL};
    float * logits = malloc(3 * sizeof(float) * (size_t) nohead->config.n_vocab);
    assert_int_equal(oscar_forward_init(nohead, &fp, &f), OSCAR_OK);
    assert_int_equal(oscar_forward_run(f, &bt, NULL), OSCAR_OK);
    assert_int_equal(oscar_forward_run(f, &bt, logits), OSCAR_ERR_INVALID);
    oscar_forward_free(f);
    free(logits);
    // lazily (a device upload): neither [V, C] tensor read; copies of them and of every layer
    // read on demand are the loaded model's bits, and the model stays as it was
    struct oscar_model * lazy = NULL;
    assert_int_equal(oscar_model_open_lazy("tests/fixtures/models/tiny-qwen2", &lazy), OSCAR_OK);
    assert_null(lazy->tok_embd);
    assert_null(lazy->output);
    const size_t VC = (size_t) full->config.n_vocab * full->config.n_embd;
    float * copy = NULL;
    assert_int_equal(oscar_model_read_vocab(lazy, false, &copy), OSCAR_OK);
    assert_same(full->tok_embd, copy, (int64_t) VC, "embedding copy");
    free(copy);
    assert_int_equal(oscar_model_read_vocab(lazy, true, &copy), OSCAR_OK);
    assert_same(full->output, copy, (int64_t) VC, "LM head copy");
    free(copy);
    for (int32_t l = 0; l < lazy->config.n_layer; l++) {
        float * block = NULL;
        struct oscar_layer_weights w;
        assert_int_equal(oscar_model_read_layer(lazy, l, &block, &w), OSCAR_OK);
        assert_false(oscar_model_layer_resident(lazy, l));
        assert_same_layer(&full->config, &full->layers[l], &w);
        free(block);
    }
    assert_int_equal(oscar_model_read_layer(lazy, lazy->config.n_layer, &copy, &(struct oscar_layer_weights){0}),
                     OSCAR_ERR_INVALID);
    assert_int_equal(oscar_forward_init(lazy, &fp, &f), OSCAR_ERR_INVALID); // the host forward needs the embedding
    assert_null(f);
    // the safetensors reader converts a tensor in slices of rows (pages dropped after each): slices
    // of 4 KiB (many per tensor, some of one row) give the same model as whole tensors
    struct oscar_model * sliced = NULL;
    osc_st_set_slice_bytes(4096);
    assert_int_equal(oscar_model_load("tests/fixtures/models/tiny-qwen2", &sliced), OSCAR_OK);
    osc_st_set_slice_bytes(0);
    assert_same(full->tok_embd, sliced->tok_embd, (int64_t) VC, "sliced embedding");
    assert_same(full->output, sliced->output, (int64_t) VC, "sliced LM head");
    for (int32_t l = 0; l < full->config.n_layer; l++) assert_same_layer(&full->config, &full->layers[l], &sliced->layers[l]);
    oscar_model_free(sliced);
    // a loaded model's file is closed: its resident embedding is copied
    assert_int_equal(oscar_model_read_vocab(full, false, &copy), OSCAR_OK);
    assert_same(full->tok_embd, copy, (int64_t) VC, "resident embedding copy");
    free(copy);
    oscar_model_free(lazy);
    oscar_model_free(full), oscar_model_free(nohead);
}

// A llama-shaped config body (64 hidden, 4 heads of 16, `layers` layers) with extra fields.
static enum oscar_status parse_with(const char * type, int layers, const char * extra,
                                    struct oscar_model_config * c) {
    char json[2048];
    snprintf(json, sizeof json, "{\"model_type\":\"%s\",\"hidden_size\":64,\"num_hidden_layers\":%d,"
             "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":100,"
             "\"max_position_embeddings\":1024%s%s}", type, layers, extra[0] ? "," : "", extra);
    memset(c, 0xff, sizeof *c);
    return osc_hf_config_parse(json, strlen(json), "cfg.json", c);
}

// The error names the file and each of the given strings.
static void assert_error_names(const char * a, const char * b) {
    const char * e = oscar_last_error();
    if (!strstr(e, "cfg.json") || !strstr(e, a) || (b && !strstr(e, b))) fprintf(stderr, "error: %s\n", e);
    assert_non_null(strstr(e, "cfg.json"));
    assert_non_null(strstr(e, a));
    if (b) assert_non_null(strstr(e, b));
}

// qwen2_moe / qwen3_moe config.json: the experts, their defaults, and bad values named.
static void test_hf_config_moe(void ** state) {
    (void) state;
    struct oscar_model_config c;
    assert_int_equal(parse_with("qwen3_moe", 4, "\"num_experts\":16,\"num_experts_per_tok\":4,"
                                "\"moe_intermediate_size\":32,\"norm_topk_prob\":true,\"mlp_only_layers\":[0,2]", &c),
                     OSCAR_OK);
    assert_int_equal(c.arch, OSCAR_ARCH_QWEN3_MOE);
    assert_true(c.n_expert == 16 && c.n_expert_used == 4 && c.n_ff_expert == 32 && c.expert_norm_topk && c.qk_norm);
    assert_true(c.n_ff_shared == 0 && c.moe_step == 1 && c.n_dense_layers == 2);
    assert_true(!oscar_layer_is_moe(&c, 0) && oscar_layer_is_moe(&c, 1) && !oscar_layer_is_moe(&c, 2));
    // transformers 5 writes num_local_experts; qwen2_moe defaults: shared expert 5632, no renormalisation, bias
    assert_int_equal(parse_with("qwen2_moe", 4, "\"num_local_experts\":6,\"decoder_sparse_step\":2", &c), OSCAR_OK);
    assert_true(c.n_expert == 6 && c.n_expert_used == 4 && c.n_ff_expert == 1408 && c.n_ff_shared == 5632);
    assert_true(!c.expert_norm_topk && c.qkv_bias && !c.qk_norm && c.moe_step == 2);
    assert_true(!oscar_layer_is_moe(&c, 0) && oscar_layer_is_moe(&c, 1) && !oscar_layer_is_moe(&c, 2));
    assert_int_equal(parse_with("qwen2_moe", 2, "\"qkv_bias\":false", &c), OSCAR_OK);
    assert_false(c.qkv_bias);
    // refused, naming the field
    assert_int_equal(parse_with("qwen3_moe", 2, "\"num_experts\":4,\"num_experts_per_tok\":5", &c), OSCAR_ERR_FORMAT);
    assert_error_names("num_experts_per_tok", NULL);
    assert_int_equal(parse_with("qwen3_moe", 2, "\"mlp_only_layers\":[2]", &c), OSCAR_ERR_FORMAT);
    assert_error_names("mlp_only_layers[0]", NULL);
    assert_int_equal(parse_with("qwen3_moe", 2, "\"num_experts\":4,\"num_local_experts\":8", &c), OSCAR_ERR_FORMAT);
    assert_error_names("num_local_experts", NULL);
    assert_int_equal(parse_with("qwen3_moe", 2, "\"norm_topk_prob\":1", &c), OSCAR_ERR_FORMAT);
    assert_error_names("norm_topk_prob", NULL);
    assert_int_equal(parse_with("qwen2_moe", 2, "\"use_sliding_window\":true", &c), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("use_sliding_window", "qwen2_moe");
    assert_int_equal(parse_with("qwen3_moe", 2, "\"hidden_act\":\"gelu\"", &c), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("hidden_act", "gelu");
}

// A MoE model with a dense layer (mlp_only_layers) and a shared expert: streamed = loaded (the
// experts are read with their layer; a sparse layer's block holds them), and the forward gives
// the same bytes on 1 and 2 threads and for a sequence alone or in a batch with another.
static void test_moe_streamed_threads(void ** state) {
    (void) state;
    struct oscar_model_config c = {.arch = OSCAR_ARCH_QWEN2_MOE, .n_layer = 3, .n_embd = 32, .n_head = 4,
                                   .n_head_kv = 2, .head_dim = 8, .n_ff = 40, .n_vocab = 50, .n_ctx_train = 128,
                                   .rope_theta = 10000.0f, .rms_eps = 1e-6f, .qkv_bias = true, .n_expert = 6,
                                   .n_expert_used = 2, .n_ff_expert = 12, .n_ff_shared = 20, .moe_step = 1,
                                   .n_dense_layers = 1, .dense_layers = {1}};
    struct oscar_model * a = NULL, * b = NULL;
    assert_int_equal(oscar_model_init_random(&c, 5, &a), OSCAR_OK);
    assert_int_equal(oscar_model_open_random(&c, 5, &b), OSCAR_OK);
    const int64_t C = c.n_embd, E = c.n_expert, EF = E * c.n_ff_expert;
    assert_non_null(a->layers[1].w_gate);
    assert_null(a->layers[1].router);
    assert_null(a->layers[0].w_gate);
    for (int32_t l = 0; l < c.n_layer; l++) {
        assert_false(oscar_model_layer_resident(b, l));
        assert_int_equal(oscar_model_layer_acquire(b, l), OSCAR_OK);
        const struct oscar_layer_weights * x = &a->layers[l], * y = &b->layers[l];
        if (l == 1) {
            assert_same(x->w_down, y->w_down, c.n_ff * C, "w_down");
        } else {
            assert_same(x->router, y->router, E * C, "router");
            assert_same(x->exp_gate, y->exp_gate, EF * C, "exp_gate");
            assert_same(x->exp_down, y->exp_down, EF * C, "exp_down");
            assert_same(x->sh_scale, y->sh_scale, C, "sh_scale");
        }
        oscar_model_layer_release(b, l);
    }
    assert_true(oscar_model_layer_bytes(a) == (int64_t) sizeof(float) *
                (2 * C + (32 + 16 + 16 + 32) * C + 32 + 16 + 16 + E * C + 3 * EF * C + 3 * c.n_ff_shared * C + C));
    int32_t tok[20], ss[3] = {0, 12, 20};
    for (int i = 0; i < 20; i++) tok[i] = (i * 7 + 3) % c.n_vocab;
    float * lg[3];
    for (int r = 0; r < 3; r++) {
        struct oscar_forward_params p = oscar_forward_default_params();
        p.max_tokens = 20, p.n_threads = r == 1 ? 2 : 1;
        struct oscar_forward * f = NULL;
        assert_int_equal(oscar_forward_init(a, &p, &f), OSCAR_OK);
        lg[r] = malloc(20 * (size_t) c.n_vocab * sizeof(float));
        struct oscar_batch bt = {r == 2 ? 1 : 2, ss, tok, NULL};
        assert_int_equal(oscar_forward_run(f, &bt, lg[r]), OSCAR_OK);
        oscar_forward_free(f);
    }
    assert_memory_equal(lg[0], lg[1], 20 * (size_t) c.n_vocab * sizeof(float));
    // the first sequence alone: its rows of the routed GEMMs have other neighbours, the same sums
    double num = 0, den = 0;
    for (size_t i = 0; i < 12 * (size_t) c.n_vocab; i++) {
        const double d = (double) lg[2][i] - (double) lg[0][i];
        num += d * d;
        den += (double) lg[0][i] * (double) lg[0][i];
    }
    assert_true(sqrt(num / den) < 1e-5);
    for (int r = 0; r < 3; r++) free(lg[r]);
    oscar_model_free(a), oscar_model_free(b);
}

static void test_hf_config_rope_window(void ** state) {
    (void) state;
    struct oscar_model_config c;
    // llama3 scaling, transformers 5 spelling (rope_parameters) and the older rope_scaling + rope_theta
    const char * l3 = "\"rope_parameters\":{\"rope_type\":\"llama3\",\"rope_theta\":500000.0,\"factor\":8.0,"
                      "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192}";
    assert_int_equal(parse_with("llama", 2, l3, &c), OSCAR_OK);
    assert_int_equal(c.rope_scaling, OSCAR_ROPE_LLAMA3);
    assert_true(c.rope_theta == 500000.0f && c.rope_factor == 8.0f);
    assert_true(c.rope_low_freq_factor == 1.0f && c.rope_high_freq_factor == 4.0f);
    assert_int_equal(c.rope_orig_ctx, 8192);
    assert_int_equal(c.rope_dim, 0);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(parse_with("llama", 2, "\"rope_theta\":1000.0,\"rope_scaling\":{\"type\":\"llama3\",\"factor\":"
                                "2,\"low_freq_factor\":1,\"high_freq_factor\":2}", &c), OSCAR_OK);
    assert_int_equal(c.rope_scaling, OSCAR_ROPE_LLAMA3);
    assert_true(c.rope_theta == 1000.0f);
    assert_int_equal(c.rope_orig_ctx, 1024); // absent: max_position_embeddings, as transformers
    assert_int_equal(parse_with("llama", 2, "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":4}", &c), OSCAR_OK);
    assert_int_equal(c.rope_scaling, OSCAR_ROPE_LINEAR);
    assert_true(c.rope_factor == 4.0f);
    assert_int_equal(parse_with("llama", 2, "\"rope_scaling\":{\"rope_type\":\"default\"}", &c), OSCAR_OK);
    assert_int_equal(c.rope_scaling, OSCAR_ROPE_DEFAULT);
    // llama3 without its factors, or with high <= low: FORMAT naming the field
    assert_int_equal(parse_with("llama", 2, "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8}", &c),
                     OSCAR_ERR_FORMAT);
    assert_error_names("rope_scaling.low_freq_factor", NULL);
    assert_int_equal(parse_with("llama", 2, "\"rope_parameters\":{\"rope_type\":\"llama3\",\"factor\":8,"
                                "\"low_freq_factor\":4,\"high_freq_factor\":4}", &c), OSCAR_ERR_FORMAT);
    assert_error_names("high_freq_factor", NULL);
    // other RoPE types are refused naming the field and the value
    const char * types[] = {"dynamic", "longrope", "su", "YaRN"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char extra[128];
        snprintf(extra, sizeof extra, "\"rope_scaling\":{\"rope_type\":\"%s\",\"factor\":2}", types[i]);
        assert_int_equal(parse_with("llama", 2, extra, &c), OSCAR_ERR_UNSUPPORTED);
        assert_error_names("rope_scaling.rope_type", types[i]);
        snprintf(extra, sizeof extra, "\"rope_parameters\":{\"rope_type\":\"%s\",\"factor\":2}", types[i]);
        assert_int_equal(parse_with("qwen2", 2, extra, &c), OSCAR_ERR_UNSUPPORTED);
        assert_error_names("rope_parameters.rope_type", types[i]);
    }
    // unknown architectures name the field and the value
    assert_int_equal(parse_with("gemma2", 2, "", &c), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("model_type", "gemma2");
    assert_int_equal(parse_with("phi3", 2, "\"architectures\":[\"Phi3SmallForCausalLM\"]", &c), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("architecture", "Phi3SmallForCausalLM");

    // phi3: partial rotary, default RoPE only, window only when set
    assert_int_equal(parse_with("phi3", 2, "\"partial_rotary_factor\":0.75", &c), OSCAR_OK);
    assert_int_equal(c.arch, OSCAR_ARCH_PHI3);
    assert_int_equal(c.rope_dim, 12);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(parse_with("phi3", 2, "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000.0,"
                                "\"partial_rotary_factor\":0.5},\"sliding_window\":7", &c), OSCAR_OK);
    assert_int_equal(c.rope_dim, 8);
    assert_int_equal(c.sliding_window, 7);
    assert_int_equal(c.swa_first_layer, 0);
    assert_int_equal(parse_with("phi3", 2, "\"partial_rotary_factor\":0.3125", &c), OSCAR_ERR_UNSUPPORTED); // 5 dims: odd
    assert_error_names("partial_rotary_factor", "0.3125");
    assert_int_equal(parse_with("llama", 2, "\"partial_rotary_factor\":0.5", &c), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("partial_rotary_factor", "llama");
    // a factor far above 1 is refused by name before head_dim x factor is cast to int (it overflowed: a fuzzer find)
    assert_int_equal(parse_with("phi3", 2, "\"partial_rotary_factor\":1e300", &c), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("partial_rotary_factor", "1e+300");
    assert_int_equal(parse_with("phi3", 2, "\"rope_scaling\":{\"type\":\"longrope\",\"short_factor\":[1],"
                                "\"long_factor\":[1]}", &c), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("rope_scaling.rope_type", "longrope");

    // mistral: sliding_window everywhere, 4096 when absent (MistralConfig's default), none when null
    assert_int_equal(parse_with("mistral", 2, "\"sliding_window\":16", &c), OSCAR_OK);
    assert_true(c.sliding_window == 16 && c.swa_first_layer == 0);
    assert_int_equal(parse_with("mistral", 2, "", &c), OSCAR_OK);
    assert_int_equal(c.sliding_window, 4096);
    assert_int_equal(parse_with("mistral", 2, "\"sliding_window\":null", &c), OSCAR_OK);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(parse_with("mistral", 2, "\"sliding_window\":-3", &c), OSCAR_ERR_FORMAT);
    assert_error_names("sliding_window", NULL);
    // llama: transformers' LlamaAttention has no window, so the key is ignored
    assert_int_equal(parse_with("llama", 2, "\"sliding_window\":16", &c), OSCAR_OK);
    assert_int_equal(c.sliding_window, 0);
    // qwen2/qwen3: only with use_sliding_window, from max_window_layers or layer_types
    assert_int_equal(parse_with("qwen2", 4, "\"sliding_window\":16,\"use_sliding_window\":false", &c), OSCAR_OK);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(parse_with("qwen2", 4, "\"sliding_window\":16,\"use_sliding_window\":true", &c), OSCAR_OK);
    assert_int_equal(c.sliding_window, 0); // max_window_layers 28 >= 4 layers: none slides
    assert_int_equal(parse_with("qwen2", 4, "\"sliding_window\":16,\"use_sliding_window\":true,"
                                "\"max_window_layers\":1", &c), OSCAR_OK);
    assert_true(c.sliding_window == 16 && c.swa_first_layer == 1);
    assert_int_equal(oscar_layer_window(&c, 0), 0);
    assert_int_equal(oscar_layer_window(&c, 3), 16);
    assert_int_equal(parse_with("qwen3", 3, "\"sliding_window\":8,\"use_sliding_window\":true,\"layer_types\":"
                                "[\"full_attention\",\"sliding_attention\",\"sliding_attention\"]", &c), OSCAR_OK);
    assert_true(c.sliding_window == 8 && c.swa_first_layer == 1);
    assert_int_equal(parse_with("qwen3", 3, "\"sliding_window\":8,\"use_sliding_window\":true,\"layer_types\":"
                                "[\"sliding_attention\",\"full_attention\",\"sliding_attention\"]", &c),
                     OSCAR_ERR_UNSUPPORTED);
    assert_error_names("layer_types[1]", NULL);
    assert_int_equal(parse_with("qwen3", 3, "\"layer_types\":[\"full_attention\",\"chunked_attention\","
                                "\"full_attention\"]", &c), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("layer_types[1]", "chunked_attention");
    assert_int_equal(parse_with("qwen2", 2, "\"use_sliding_window\":false,\"layer_types\":"
                                "[\"full_attention\",\"sliding_attention\"]", &c), OSCAR_ERR_FORMAT);
    assert_error_names("layer_types", "sliding");
    assert_int_equal(parse_with("qwen2", 2, "\"layer_types\":[\"full_attention\"]", &c), OSCAR_ERR_FORMAT);
}

// YaRN from config.json with transformers 5's rules and defaults; bad values refused naming the field.
static void test_hf_config_yarn(void ** state) {
    (void) state;
    struct oscar_model_config c;
    const float mscale4 = (float) (0.1 * log(4.0) + 1.0);
    assert_int_equal(parse_with("qwen3", 2, "\"rope_parameters\":{\"rope_type\":\"yarn\",\"rope_theta\":1e6,\"factor\":4.0,"
                                "\"original_max_position_embeddings\":256}", &c), OSCAR_OK);
    assert_int_equal(c.rope_scaling, OSCAR_ROPE_YARN);
    assert_true(c.rope_theta == 1e6f && c.rope_factor == 4.0f && c.rope_orig_ctx == 256 && !c.rope_no_truncate);
    assert_true(c.rope_beta_fast == 32.0f && c.rope_beta_slow == 1.0f && c.rope_attn_factor == mscale4);
    // the older rope_scaling with "type"; original_max_position_embeddings absent: max_position_embeddings; a
    // top-level one wins over the object's (transformers' standardize_rope_params)
    assert_int_equal(parse_with("qwen2", 2, "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":2}", &c), OSCAR_OK);
    assert_true(c.rope_scaling == OSCAR_ROPE_YARN && c.rope_orig_ctx == 1024 && c.rope_factor == 2.0f);
    assert_int_equal(parse_with("llama", 2, "\"original_max_position_embeddings\":128,\"rope_scaling\":{\"rope_type\":"
                                "\"yarn\",\"factor\":8,\"original_max_position_embeddings\":512}", &c), OSCAR_OK);
    assert_int_equal(c.rope_orig_ctx, 128);
    // the attention factor: given, or mscale / mscale_all_dim, or 0.1 ln(factor) + 1 (1 for factor <= 1)
    assert_int_equal(parse_with("qwen3_moe", 2, "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4,"
                                "\"attention_factor\":0.5,\"beta_fast\":16,\"beta_slow\":2,\"truncate\":false}", &c),
                     OSCAR_OK);
    assert_true(c.rope_attn_factor == 0.5f && c.rope_beta_fast == 16.0f && c.rope_beta_slow == 2.0f);
    assert_true(c.rope_no_truncate);
    assert_int_equal(parse_with("llama", 2, "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":40,\"mscale\":0.5,"
                                "\"mscale_all_dim\":1.0}", &c), OSCAR_OK);
    assert_true(c.rope_attn_factor == (float) ((0.05 * log(40.0) + 1.0) / (0.1 * log(40.0) + 1.0)));
    assert_int_equal(parse_with("llama", 2, "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":40,\"mscale\":0.5,"
                                "\"mscale_all_dim\":0}", &c), OSCAR_OK); // both needed: else the default
    assert_true(c.rope_attn_factor == (float) (0.1 * log(40.0) + 1.0));
    assert_int_equal(parse_with("llama", 2, "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":0.5}", &c), OSCAR_OK);
    assert_true(c.rope_attn_factor == 1.0f);
    // factor null: max_position_embeddings / original_max_position_embeddings
    assert_int_equal(parse_with("qwen2", 2, "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":null,"
                                "\"original_max_position_embeddings\":256}", &c), OSCAR_OK);
    assert_true(c.rope_factor == 4.0f);
    // a missing or bad field is named
    assert_int_equal(parse_with("qwen3", 2, "\"rope_parameters\":{\"rope_type\":\"yarn\"}", &c), OSCAR_ERR_FORMAT);
    assert_error_names("rope_parameters.factor", "required");
    assert_int_equal(parse_with("qwen3", 2, "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":-2}", &c),
                     OSCAR_ERR_FORMAT);
    assert_error_names("rope_scaling.factor", NULL);
    assert_int_equal(parse_with("qwen3", 2, "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2,\"beta_fast\":0}",
                                &c), OSCAR_ERR_FORMAT);
    assert_error_names("rope_scaling.beta_fast", NULL);
    assert_int_equal(parse_with("qwen3", 2, "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2,"
                                "\"attention_factor\":\"x\"}", &c), OSCAR_ERR_FORMAT);
    assert_error_names("rope_scaling.attention_factor", NULL);
    assert_int_equal(parse_with("qwen3", 2, "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2,\"truncate\":1}",
                                &c), OSCAR_ERR_FORMAT);
    assert_error_names("rope_scaling.truncate", NULL);
    assert_int_equal(parse_with("qwen3", 2, "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2,"
                                "\"original_max_position_embeddings\":0}", &c), OSCAR_ERR_FORMAT);
    assert_error_names("original_max_position_embeddings", NULL);
    assert_int_equal(parse_with("phi3", 2, "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2}", &c),
                     OSCAR_ERR_UNSUPPORTED);
    assert_error_names("rope_scaling.rope_type", "phi3");

    // the frequencies (head_dim 16, theta 1e4, factor 4, original 64: range [floor(-0.99), ceil(2.02)] = [0, 3]):
    // frequency 0 kept, 3.. divided by 4, 1 and 2 on the ramp; truncate false moves the ramp
    assert_int_equal(parse_with("llama", 2, "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4,"
                                "\"original_max_position_embeddings\":64}", &c), OSCAR_OK);
    float y[8], d[8], nt[8];
    oscar_rope_inv_freq(&c, NULL, y);
    struct oscar_model_config u = c;
    u.rope_scaling = OSCAR_ROPE_DEFAULT;
    oscar_rope_inv_freq(&u, NULL, d);
    u = c, u.rope_no_truncate = true;
    oscar_rope_inv_freq(&u, NULL, nt);
    assert_true(y[0] == d[0]);
    for (int i = 3; i < 8; i++) assert_true(fabsf(y[i] - d[i] / 4.0f) <= 1e-7f * d[i]);
    for (int i = 1; i < 3; i++) {
        const double e = 1.0 - i / 3.0, want = (double) d[i] / 4.0 * (1.0 - e) + (double) d[i] * e;
        assert_true(fabs((double) y[i] - want) <= 1e-6 * want);
    }
    // the unrounded range is [0, 2.02]: frequencies 1 and 2 are further along the ramp, the others as rounded
    assert_true(nt[0] == y[0] && nt[1] < y[1] && nt[2] < y[2] && nt[3] == y[3]);
    assert_true(oscar_rope_attn_factor_layer(&c, 0) == mscale4);
}

static void test_load_errors(void ** state) {
    (void) state;
    struct oscar_model * m = NULL;
    assert_int_equal(oscar_model_load("/nonexistent/model.gguf", &m), OSCAR_ERR_NOT_FOUND);
    // an HF dir whose config disagrees with the tensors
    char * dir = osc_path_join(tmpdir, "hfbad");
    assert_int_equal(osc_mkdirs(dir), OSCAR_OK);
    char * cfg = osc_path_join(dir, "config.json");
    const char * j = "{\"model_type\":\"llama\",\"hidden_size\":16,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                     "\"num_key_value_heads\":2,\"intermediate_size\":25,\"vocab_size\":40}";
    assert_int_equal(osc_write_file_atomic(cfg, j, strlen(j)), OSCAR_OK);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cp tests/fixtures/model/hf/model.safetensors '%s/'", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(oscar_model_load(dir, &m), OSCAR_ERR_FORMAT);
    assert_non_null(strstr(oscar_last_error(), "mlp.gate_proj.weight"));
    assert_null(m);
    // GGUF whose architecture is unknown: the gguf oracle fixture ("testarch")
    assert_int_equal(oscar_model_load("tests/fixtures/gguf/types.gguf", &m), OSCAR_ERR_UNSUPPORTED);
    assert_non_null(strstr(oscar_last_error(), "testarch"));
    free(cfg);
    free(dir);
}

// A copy of GGUF `src` with the uint32 value of `key` replaced.
static char * gguf_from_with_u32(const char * src, const char * name, const char * key, uint32_t v) {
    char * data = NULL;
    size_t n = 0;
    assert_int_equal(osc_read_file(src, 1 << 20, &data, &n), OSCAR_OK);
    char * k = memmem(data, n, key, strlen(key));
    assert_non_null(k);
    uint32_t type;
    memcpy(&type, k + strlen(key), 4);
    assert_int_equal(type, 4); // GGUF uint32
    memcpy(k + strlen(key) + 4, &v, 4);
    char * path = osc_path_join(tmpdir, name);
    assert_int_equal(osc_write_file_atomic(path, data, n), OSCAR_OK);
    free(data);
    return path;
}

static char * gguf_with_u32(const char * name, const char * key, uint32_t v) {
    return gguf_from_with_u32("tests/fixtures/model/tiny-llama.gguf", name, key, v);
}

#define LLAMA3_GGUF "tests/fixtures/models/tiny-llama3.gguf"

// MoE GGUFs refused naming the key or tensor: more experts per token than experts, a stacked expert
// tensor missing (renamed in a copy of the fixture), and a Mixtral-style llama GGUF loads as mixtral.
static void test_gguf_moe_errors(void ** state) {
    (void) state;
    const char * q3 = "tests/fixtures/models/tiny-qwen3-moe.gguf";
    struct oscar_model * m = NULL;
    char * p = gguf_from_with_u32(q3, "used.gguf", "qwen3moe.expert_used_count", 9);
    assert_int_equal(oscar_model_open(p, &m), OSCAR_ERR_FORMAT);
    assert_non_null(strstr(oscar_last_error(), "qwen3moe.expert_used_count 9"));
    free(p);
    char * data = NULL;
    size_t n = 0;
    assert_int_equal(osc_read_file(q3, 1 << 20, &data, &n), OSCAR_OK);
    char * t = memmem(data, n, "blk.2.ffn_up_exps.weight", 24);
    assert_non_null(t);
    t[16] = 'X'; // blk.2.ffn_up_expX.weight
    p = osc_path_join(tmpdir, "noexps.gguf");
    assert_int_equal(osc_write_file_atomic(p, data, n), OSCAR_OK);
    free(data);
    assert_int_equal(oscar_model_open(p, &m), OSCAR_ERR_NOT_FOUND);
    assert_non_null(strstr(oscar_last_error(), "blk.2.ffn_up_exps.weight"));
    assert_null(m);
    free(p);
    assert_int_equal(oscar_model_open("tests/fixtures/models/tiny-mixtral.gguf", &m), OSCAR_OK);
    assert_int_equal(m->config.arch, OSCAR_ARCH_MIXTRAL);
    assert_int_equal(m->config.n_ff_expert, m->config.n_ff);
    oscar_model_free(m);
}


// Gemma 3: Gemma3TextConfig's defaults, both RoPE spellings, layer patterns, the multimodal config's
// text_config, and the refusals (soft-capping, activation, bidirectional attention, other Gemma families).
static void test_hf_config_gemma3(void ** state) {
    (void) state;
    struct oscar_model_config c;
    assert_int_equal(parse_with("gemma3_text", 12, "", &c), OSCAR_OK);
    assert_int_equal(c.arch, OSCAR_ARCH_GEMMA3);
    assert_int_equal(c.head_dim, 256); // its own default, not hidden / heads
    assert_int_equal(c.n_head_kv, 4);
    assert_int_equal(c.sliding_window, 4096);
    for (int32_t l = 0; l < 12; l++) assert_int_equal(oscar_layer_sliding(&c, l), l != 5 && l != 11);
    assert_true(c.rope_theta == 1e6f && c.rope_theta_swa == 1e4f && c.rope_scaling == OSCAR_ROPE_DEFAULT);
    assert_true(c.attn_scale == 0.0625f && c.rms_eps == 1e-6f); // query_pre_attn_scalar 256
    assert_true(c.tied_embeddings && c.qk_norm && c.post_norms && c.embed_scale && !c.qkv_bias);
    assert_true(c.norm_offset == 1.0f && c.act == OSCAR_ACT_GELU_TANH);
    const char * all = "{\"model_type\":\"gemma3_text\"}";
    assert_int_equal(osc_hf_config_parse(all, strlen(all), "cfg.json", &c), OSCAR_OK);
    assert_true(c.n_vocab == 262208 && c.n_embd == 2304 && c.n_layer == 26 && c.n_head == 8 && c.n_ff == 9216);
    // the Hub's keys, and an explicit untied head
    assert_int_equal(parse_with("gemma3_text", 6, "\"rope_theta\":500000.0,\"rope_local_base_freq\":20000.0,"
                                "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":8.0},\"sliding_window\":512,"
                                "\"sliding_window_pattern\":3,\"query_pre_attn_scalar\":64,"
                                "\"tie_word_embeddings\":false", &c), OSCAR_OK);
    assert_true(c.rope_theta == 5e5f && c.rope_theta_swa == 2e4f && c.rope_scaling == OSCAR_ROPE_LINEAR &&
                c.rope_factor == 8.0f && c.attn_scale == 0.125f && !c.tied_embeddings);
    assert_int_equal(c.swa_pattern, 3);
    assert_int_equal(oscar_model_window(&c), 512);
    // transformers 5: layer_types and rope_parameters per layer type
    const char * v5 = "\"layer_types\":[\"sliding_attention\",\"sliding_attention\",\"full_attention\","
                      "\"sliding_attention\"],\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"linear\","
                      "\"rope_theta\":1000000.0,\"factor\":4.0},\"sliding_attention\":{\"rope_type\":\"default\","
                      "\"rope_theta\":10000.0}}";
    assert_int_equal(parse_with("gemma3_text", 4, v5, &c), OSCAR_OK);
    assert_true(oscar_layer_sliding(&c, 0) && oscar_layer_sliding(&c, 1) && !oscar_layer_sliding(&c, 2) &&
                oscar_layer_sliding(&c, 3));
    assert_true(c.rope_factor == 4.0f && c.rope_theta == 1e6f && c.rope_theta_swa == 1e4f);
    assert_int_equal(parse_with("gemma3_text", 2, "\"layer_types\":[\"full_attention\",\"sliding_attention\"]", &c),
                     OSCAR_ERR_UNSUPPORTED);
    assert_error_names("layer_types", "p-th layer full");
    assert_int_equal(parse_with("gemma3_text", 2, "\"rope_parameters\":{\"full_attention\":{},"
                                "\"sliding_attention\":{\"rope_type\":\"linear\",\"factor\":2}}", &c),
                     OSCAR_ERR_UNSUPPORTED);
    assert_error_names("rope_parameters.sliding_attention.rope_type", "linear");
    assert_int_equal(parse_with("gemma3_text", 2, "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2}", &c),
                     OSCAR_ERR_UNSUPPORTED);
    assert_error_names("rope_scaling.rope_type", "yarn");
    assert_int_equal(parse_with("gemma3_text", 6, "\"sliding_window\":null", &c), OSCAR_ERR_FORMAT);
    assert_error_names("sliding_window", NULL);
    // refused by name
    assert_int_equal(parse_with("gemma3_text", 2, "\"attn_logit_softcapping\":50.0", &c), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("attn_logit_softcapping", "soft-capping");
    assert_int_equal(parse_with("gemma3_text", 2, "\"final_logit_softcapping\":30.0", &c), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("final_logit_softcapping", "soft-capping");
    assert_int_equal(parse_with("gemma3_text", 2, "\"hidden_activation\":\"gelu\"", &c), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("hidden_activation \"gelu\"", "gelu_pytorch_tanh is");
    assert_int_equal(parse_with("gemma3_text", 2, "\"use_bidirectional_attention\":true", &c), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("use_bidirectional_attention", NULL);
    const char * fam[] = {"gemma", "gemma2", "gemma3n"};
    for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
        assert_int_equal(parse_with(fam[i], 2, "", &c), OSCAR_ERR_UNSUPPORTED);
        char want[32];
        snprintf(want, sizeof want, "\"%s\" (Gemma)", fam[i]);
        assert_error_names(want, "only Gemma 3");
    }
    // Gemma3ForConditionalGeneration: the text model is text_config
    const char * mm = "{\"architectures\":[\"Gemma3ForConditionalGeneration\"],\"model_type\":\"gemma3\","
                      "\"text_config\":{\"model_type\":\"gemma3_text\",\"hidden_size\":64,\"num_hidden_layers\":6,"
                      "\"head_dim\":32,\"vocab_size\":320},\"vision_config\":{\"model_type\":\"siglip_vision_model\"}}";
    assert_int_equal(osc_hf_config_parse(mm, strlen(mm), "cfg.json", &c), OSCAR_OK);
    assert_true(c.arch == OSCAR_ARCH_GEMMA3 && c.n_embd == 64 && c.n_layer == 6 && c.head_dim == 32 &&
                c.n_vocab == 320 && c.n_head == 8);
    assert_int_equal(parse_cfg("{\"model_type\":\"gemma3\",\"text_config\":{\"model_type\":\"gemma2\"}}"),
                     OSCAR_ERR_UNSUPPORTED);
    assert_error_names("text_config.model_type", "gemma2");
    assert_int_equal(parse_cfg("{\"model_type\":\"gemma3\",\"architectures\":[\"Gemma3ForCausalLM\"],"
                               "\"text_config\":{}}"), OSCAR_ERR_UNSUPPORTED);
    assert_error_names("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration");
}

static void expect_load_error(const char * path, enum oscar_status want, const char * msg1, const char * msg2);

// A GGUF whose general.architecture is "gemma" (tiny-llama's, 5 letters overwritten in place) is refused
// naming the Gemma family, not read as llama with its keys missing.
static void test_gguf_gemma_refused(void ** state) {
    (void) state;
    char * data = NULL;
    size_t n = 0;
    assert_int_equal(osc_read_file("tests/fixtures/model/tiny-llama.gguf", 1 << 20, &data, &n), OSCAR_OK);
    const char * key = "general.architecture";
    char * k = memmem(data, n, key, strlen(key));
    assert_non_null(k);
    uint32_t type;
    uint64_t len;
    memcpy(&type, k + strlen(key), 4);
    memcpy(&len, k + strlen(key) + 4, 8);
    assert_int_equal(type, 8); // GGUF string
    assert_int_equal(len, 5);
    memcpy(k + strlen(key) + 12, "gemma", 5);
    char * p = osc_path_join(tmpdir, "gemma.gguf");
    assert_int_equal(osc_write_file_atomic(p, data, n), OSCAR_OK);
    free(data);
    expect_load_error(p, OSCAR_ERR_UNSUPPORTED, "GGUF architecture 'gemma' (Gemma)", "only gemma3");
    free(p);
}

// A copy of `src` with a string and/or a float key added (NULL: none), without rope_freqs.weight when
// drop_freqs, with a 1-D tensor `extra` of 4 ones added (NULL: none).
static char * gguf_copy_with(const char * src, const char * name, const char * skey, const char * sval,
                             const char * fkey, float fval, bool drop_freqs, const char * extra) {
    struct osc_gguf * g = NULL;
    struct osc_gguf_writer * w = NULL;
    assert_int_equal(osc_gguf_open(src, &g), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_new(32, &w), OSCAR_OK);
    assert_int_equal(osc_gguf_copy_kvs(w, g), OSCAR_OK);
    if (skey) assert_int_equal(osc_gguf_writer_kv_cstr(w, skey, sval), OSCAR_OK);
    if (fkey) assert_int_equal(osc_gguf_writer_kv_f32(w, fkey, fval), OSCAR_OK);
    for (int64_t i = 0; i < osc_gguf_n_tensors(g); i++) {
        const struct osc_gguf_tensor * t = osc_gguf_tensor(g, i);
        if (drop_freqs && strcmp(t->name, "rope_freqs.weight") == 0) continue;
        assert_int_equal(osc_gguf_writer_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes), OSCAR_OK);
    }
    static const float ones[4] = {1, 1, 1, 1};
    const int64_t ne[1] = {4};
    if (extra) assert_int_equal(osc_gguf_writer_tensor(w, extra, OSC_GGML_F32, 1, ne, ones, sizeof ones), OSCAR_OK);
    char * path = osc_path_join(tmpdir, name);
    assert_int_equal(osc_gguf_writer_write(w, path), OSCAR_OK);
    osc_gguf_writer_free(w);
    osc_gguf_close(g);
    return path;
}

static char * llama3_gguf_with(const char * name, const char * skey, const char * sval, const char * fkey, float fval,
                               bool drop_freqs) {
    return gguf_copy_with(LLAMA3_GGUF, name, skey, sval, fkey, fval, drop_freqs, NULL);
}

// A copy of the tiny-llama3 GGUF whose rope_freqs.weight[3] is 0 (a divisor).
static char * llama3_gguf_bad_freqs(const char * name) {
    struct osc_gguf * g = NULL;
    struct osc_gguf_writer * w = NULL;
    assert_int_equal(osc_gguf_open(LLAMA3_GGUF, &g), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_new(32, &w), OSCAR_OK);
    assert_int_equal(osc_gguf_copy_kvs(w, g), OSCAR_OK);
    float freqs[64];
    for (int64_t i = 0; i < osc_gguf_n_tensors(g); i++) {
        const struct osc_gguf_tensor * t = osc_gguf_tensor(g, i);
        const void * data = t->data;
        if (strcmp(t->name, "rope_freqs.weight") == 0) {
            assert_int_equal(t->type, OSC_GGML_F32);
            assert_true(t->nbytes <= sizeof freqs && t->n_elements > 3);
            memcpy(freqs, t->data, t->nbytes);
            freqs[3] = 0.0f;
            data = freqs;
        }
        assert_int_equal(osc_gguf_writer_tensor(w, t->name, t->type, t->n_dims, t->ne, data, t->nbytes), OSCAR_OK);
    }
    char * path = osc_path_join(tmpdir, name);
    assert_int_equal(osc_gguf_writer_write(w, path), OSCAR_OK);
    osc_gguf_writer_free(w);
    osc_gguf_close(g);
    return path;
}

// GGUF RoPE metadata: rope_freqs.weight is read, linear and yarn scaling applied, anything else refused by name.
static void test_gguf_rope(void ** state) {
    (void) state;
    struct oscar_model * m = NULL;
    assert_int_equal(oscar_model_load(LLAMA3_GGUF, &m), OSCAR_OK);
    assert_true(m->config.has_rope_freqs && m->rope_freqs && m->rope_freqs[7] == 8.0f);
    oscar_model_free(m);
    char * p = llama3_gguf_with("linear.gguf", "llama.rope.scaling.type", "linear", "llama.rope.scaling.factor", 4.0f,
                                true);
    assert_int_equal(oscar_model_load(p, &m), OSCAR_OK);
    assert_int_equal(m->config.rope_scaling, OSCAR_ROPE_LINEAR);
    assert_true(m->config.rope_factor == 4.0f && !m->rope_freqs);
    oscar_model_free(m);
    free(p);
    // yarn over Llama 3's divisors would scale twice; without them it loads (beta 32 / 1, 0.1 ln 4 + 1)
    p = llama3_gguf_with("yarn.gguf", "llama.rope.scaling.type", "yarn", "llama.rope.scaling.factor", 4.0f, false);
    expect_load_error(p, OSCAR_ERR_UNSUPPORTED, "rope_freqs.weight with llama.rope.scaling.type", "yarn");
    free(p);
    p = llama3_gguf_with("yarn2.gguf", "llama.rope.scaling.type", "yarn", "llama.rope.scaling.factor", 4.0f, true);
    assert_int_equal(oscar_model_load(p, &m), OSCAR_OK);
    assert_true(m->config.rope_scaling == OSCAR_ROPE_YARN && m->config.rope_factor == 4.0f && !m->rope_freqs);
    assert_true(m->config.rope_orig_ctx == m->config.n_ctx_train && m->config.rope_beta_fast == 32.0f);
    assert_true(m->config.rope_attn_factor == (float) (0.1 * log(4.0) + 1.0));
    oscar_model_free(m);
    free(p);
    p = llama3_gguf_with("yarn0.gguf", "llama.rope.scaling.type", "yarn", NULL, 0.0f, true);
    expect_load_error(p, OSCAR_ERR_FORMAT, "llama.rope.scaling.factor", "yarn");
    free(p);
    // keys the converter writes from config.json that llama.cpp ignores for these archs (transformers would not):
    // refused by name; the values both agree on load
    const char * yarn = "tests/fixtures/models/tiny-qwen3-yarn.gguf";
    static const struct { const char * key; float v; bool ok; } keys[] = {
        {"qwen3.rope.scaling.yarn_beta_fast", 16.0f, false}, {"qwen3.rope.scaling.yarn_beta_fast", 32.0f, true},
        {"qwen3.rope.scaling.yarn_beta_slow", 2.0f, false}, {"qwen3.rope.scaling.yarn_attn_factor", 1.0f, false},
        {"qwen3.rope.scaling.yarn_attn_factor", 1.13862944f, true}, {"qwen3.rope.scaling.yarn_ext_factor", 0.5f, false},
        {"qwen3.rope.scaling.yarn_log_multiplier", 0.1f, false}, {"qwen3.rope.scaling.attn_factor", 2.0f, false},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        p = gguf_copy_with(yarn, "yarnkey.gguf", NULL, NULL, keys[i].key, keys[i].v, false, NULL);
        if (keys[i].ok) {
            assert_int_equal(oscar_model_load(p, &m), OSCAR_OK);
            oscar_model_free(m);
        } else {
            expect_load_error(p, OSCAR_ERR_UNSUPPORTED, keys[i].key, "is not supported");
        }
        free(p);
    }
    // LongRoPE (Phi-3 128k) factors are refused by name
    p = gguf_copy_with("tests/fixtures/models/tiny-phi3.gguf", "longrope.gguf", NULL, NULL, NULL, 0.0f, false,
                       "rope_factors_long.weight");
    expect_load_error(p, OSCAR_ERR_UNSUPPORTED, "rope_factors_long.weight", "LongRoPE");
    free(p);
    // Llama 3 metadata without its divisors: the scaling cannot be reproduced
    p = llama3_gguf_with("nofreqs.gguf", NULL, NULL, "llama.rope.scaling.factor", 8.0f, true);
    expect_load_error(p, OSCAR_ERR_UNSUPPORTED, "llama.rope.scaling.factor", "rope_freqs.weight");
    free(p);
    p = llama3_gguf_with("l3nofreqs.gguf", "llama.rope.scaling.type", "llama3", NULL, 0.0f, true);
    expect_load_error(p, OSCAR_ERR_UNSUPPORTED, "llama.rope.scaling.type", "llama3");
    free(p);
    p = llama3_gguf_bad_freqs("zerofreq.gguf");
    expect_load_error(p, OSCAR_ERR_FORMAT, "rope_freqs.weight[3]", "positive finite");
    free(p);
    p = gguf_from_with_u32(LLAMA3_GGUF, "partial.gguf", "llama.rope.dimension_count", 8);
    expect_load_error(p, OSCAR_ERR_UNSUPPORTED, "llama.rope.dimension_count = 8", "partial rotary");
    free(p);
    p = gguf_from_with_u32("tests/fixtures/models/tiny-mistral.gguf", "window.gguf", "llama.attention.sliding_window",
                           5);
    assert_int_equal(oscar_model_load(p, &m), OSCAR_OK);
    assert_int_equal(m->config.sliding_window, 5);
    assert_int_equal(oscar_layer_window(&m->config, 0), 5);
    oscar_model_free(m);
    free(p);
}

// An HF directory with the fixture's weights and the given config.json.
static char * hf_with_config(const char * name, const char * config) {
    char * dir = osc_path_join(tmpdir, name);
    assert_int_equal(osc_mkdirs(dir), OSCAR_OK);
    char * cfg = osc_path_join(dir, "config.json");
    assert_int_equal(osc_write_file_atomic(cfg, config, strlen(config)), OSCAR_OK);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cp tests/fixtures/model/hf/model.safetensors '%s/'", dir);
    assert_int_equal(system(cmd), 0);
    free(cfg);
    return dir;
}

static void expect_load_error(const char * path, enum oscar_status want, const char * msg1, const char * msg2) {
    struct oscar_model * m = NULL;
    enum oscar_status st = oscar_model_load(path, &m);
    if (st != want || !strstr(oscar_last_error(), msg1) || !strstr(oscar_last_error(), msg2)) {
        print_error("%s: status %d, message '%s'\n", path, (int) st, oscar_last_error());
    }
    assert_int_equal(st, want);
    assert_null(m);
    assert_non_null(strstr(oscar_last_error(), msg1));
    assert_non_null(strstr(oscar_last_error(), msg2));
}

#define HF_CONFIG(layers) "{\"model_type\":\"llama\",\"hidden_size\":16,\"num_hidden_layers\":" layers "," \
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":24,\"vocab_size\":40}"

// Regression (issue 18, item 8): weights holding more layers than the config
// declares used to load as a truncated model; fewer layers were (and are)
// refused as missing tensors.
static void test_layer_count(void ** state) {
    (void) state;
    char * d1 = hf_with_config("hf-1layer", HF_CONFIG("1"));
    expect_load_error(d1, OSCAR_ERR_FORMAT, "model.layers.1.", "num_hidden_layers is 1");
    char * d3 = hf_with_config("hf-3layers", HF_CONFIG("3"));
    expect_load_error(d3, OSCAR_ERR_NOT_FOUND, "model.layers.2.", "missing");
    char * g1 = gguf_with_u32("1block.gguf", "llama.block_count", 1);
    expect_load_error(g1, OSCAR_ERR_FORMAT, "blk.1.", "llama.block_count is 1");
    char * g3 = gguf_with_u32("3blocks.gguf", "llama.block_count", 3);
    expect_load_error(g3, OSCAR_ERR_NOT_FOUND, "blk.2.", "missing");
    char * g2 = gguf_with_u32("2blocks.gguf", "llama.block_count", 2); // unchanged: loads
    struct oscar_model * m = NULL;
    assert_int_equal(oscar_model_load(g2, &m), OSCAR_OK);
    oscar_model_free(m);
    free(d1);
    free(d3);
    free(g1);
    free(g3);
    free(g2);
}

// Regression (issue 18, item 9): a GGUF whose metadata declares a huge model
// over small tensors used to allocate for the metadata first (here 64 GiB of
// scratch, then 1.6 TB of weights); the tensors are now checked first.
static void test_validate_before_alloc(void ** state) {
    (void) state;
    char * g = gguf_with_u32("wide.gguf", "llama.embedding_length", 1u << 18);
    expect_load_error(g, OSCAR_ERR_FORMAT, "token_embd.weight", "has shape");
    free(g);
}

// Regression (issue 18, item 7): products of config sizes overflowed int64
// (UBSan: signed overflow in load.c) instead of being refused by name.
static void test_config_overflow(void ** state) {
    (void) state;
    struct oscar_model_config c = {.arch = OSCAR_ARCH_LLAMA, .n_layer = 1, .n_embd = 1 << 30, .n_head = 1 << 30,
                                   .n_head_kv = 1, .head_dim = 1 << 30, .n_ff = 1, .n_vocab = 1, .n_ctx_train = 8,
                                   .rope_theta = 1e4f, .rms_eps = 1e-6f};
    struct oscar_model * m = NULL;
    assert_int_equal(oscar_model_init_random(&c, 1, &m), OSCAR_ERR_FORMAT);
    assert_null(m);
    assert_non_null(strstr(oscar_last_error(), "num_attention_heads x head_dim"));
    c.n_head = 2;
    c.head_dim = 2;
    c.n_layer = 100000; // each product fits, the whole slab does not
    c.n_ff = 1 << 20;
    c.n_embd = 1 << 12;
    assert_int_equal(oscar_model_init_random(&c, 1, &m), OSCAR_ERR_FORMAT);
    assert_non_null(strstr(oscar_last_error(), "num_hidden_layers x the size of one layer"));
    char * d = hf_with_config("hf-huge", "{\"model_type\":\"llama\",\"hidden_size\":1073741824,"
                              "\"num_hidden_layers\":1,\"num_attention_heads\":1073741824,\"num_key_value_heads\":1,"
                              "\"head_dim\":1073741824,\"intermediate_size\":1,\"vocab_size\":1}");
    expect_load_error(d, OSCAR_ERR_FORMAT, "config.json", "num_attention_heads x head_dim");
    free(d);
}

// Regression (issue 18, item 17): --model on a FIFO blocked in open().
static void test_fifo_model(void ** state) {
    (void) state;
    char * fifo = osc_path_join(tmpdir, "model.gguf");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(20); // a hang fails the test instead of stalling the suite
    expect_load_error(fifo, OSCAR_ERR_IO, fifo, "not a regular file");
    struct oscar_tokenizer * tok = NULL;
    assert_int_equal(oscar_tokenizer_load(fifo, &tok), OSCAR_ERR_IO);
    assert_null(tok);
    // a model directory whose config.json is a FIFO
    char * dir = osc_path_join(tmpdir, "hf-fifo");
    assert_int_equal(osc_mkdirs(dir), OSCAR_OK);
    char * cfg = osc_path_join(dir, "config.json");
    assert_int_equal(mkfifo(cfg, 0600), 0);
    expect_load_error(dir, OSCAR_ERR_IO, "config.json", "not a regular file");
    alarm(0);
    free(cfg);
    free(dir);
    free(fifo);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_gguf_vs_hf),
        cmocka_unit_test(test_gguf_rope),
        cmocka_unit_test(test_random_model),
        cmocka_unit_test(test_safetensors_roundtrip),
        cmocka_unit_test(test_safetensors_bad),
        cmocka_unit_test(test_hf_config),
        cmocka_unit_test(test_layers_on_demand),
        cmocka_unit_test(test_hf_config_rope_window),
        cmocka_unit_test(test_hf_config_yarn),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_layer_count),
        cmocka_unit_test(test_validate_before_alloc),
        cmocka_unit_test(test_config_overflow),
        cmocka_unit_test(test_hf_config_moe),
        cmocka_unit_test(test_gguf_moe_errors),
        cmocka_unit_test(test_gguf_gemma_refused),
        cmocka_unit_test(test_hf_config_gemma3),
        cmocka_unit_test(test_moe_streamed_threads),
        cmocka_unit_test(test_fifo_model),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
