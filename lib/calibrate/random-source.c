// random-source.c - what --random-init calibrates on: named model shapes and a
// synthetic token stream (benchmarks: no weights file, tokenizer or corpus).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/random-source.h"
#include "util/log.h"
#include "util/sha256.h"

enum oscar_status oscar_calib_random_config(const char * name, struct oscar_model_config * c) {
    memset(c, 0, sizeof *c);
    if (name && !strcmp(name, "qwen3-8b")) {
        c->arch = OSCAR_ARCH_QWEN3, c->n_layer = 36, c->n_embd = 4096, c->n_head = 32, c->n_head_kv = 8;
        c->head_dim = 128, c->n_ff = 12288, c->n_vocab = 151936, c->n_ctx_train = 40960;
        c->rope_theta = 1000000.0f, c->rms_eps = 1e-6f, c->qk_norm = true;
    } else if (name && !strcmp(name, "llama3-70b")) { // larger than one device in bf16 (141 GB)
        c->arch = OSCAR_ARCH_LLAMA, c->n_layer = 80, c->n_embd = 8192, c->n_head = 64, c->n_head_kv = 8;
        c->head_dim = 128, c->n_ff = 28672, c->n_vocab = 128256, c->n_ctx_train = 131072;
        c->rope_theta = 500000.0f, c->rms_eps = 1e-5f;
    } else if (name && !strcmp(name, "smollm2-135m")) {
        c->arch = OSCAR_ARCH_LLAMA, c->n_layer = 30, c->n_embd = 576, c->n_head = 9, c->n_head_kv = 3;
        c->head_dim = 64, c->n_ff = 1536, c->n_vocab = 49152, c->n_ctx_train = 8192;
        c->rope_theta = 100000.0f, c->rms_eps = 1e-5f, c->tied_embeddings = true;
    } else if (name && !strcmp(name, "qwen3-30b-a3b")) { // mixture of experts: 128 experts, top-8
        c->arch = OSCAR_ARCH_QWEN3_MOE, c->n_layer = 48, c->n_embd = 2048, c->n_head = 32, c->n_head_kv = 4;
        c->head_dim = 128, c->n_ff = 6144, c->n_vocab = 151936, c->n_ctx_train = 40960;
        c->rope_theta = 1000000.0f, c->rms_eps = 1e-6f, c->qk_norm = true;
        c->n_expert = 128, c->n_expert_used = 8, c->n_ff_expert = 768, c->expert_norm_topk = true, c->moe_step = 1;
    } else if (name && !strcmp(name, "glm-4.7")) { // GLM-4.7 (358B): 160 sigmoid-routed experts top-8, 1 shared expert,
        // 3 dense layers, partial rotary 64 of 128, q/k/v bias and q/k norms; larger than one device in bf16
        c->arch = OSCAR_ARCH_GLM4_MOE, c->n_layer = 92, c->n_embd = 5120, c->n_head = 96, c->n_head_kv = 8;
        c->head_dim = 128, c->rope_dim = 64, c->n_ff = 12288, c->n_vocab = 151552, c->n_ctx_train = 202752;
        c->rope_theta = 1000000.0f, c->rms_eps = 1e-5f, c->qkv_bias = true, c->qk_norm = true;
        c->n_expert = 160, c->n_expert_used = 8, c->n_ff_expert = 1536, c->n_ff_shared = 1536;
        c->expert_norm_topk = true, c->moe_step = 1, c->expert_gating = OSCAR_GATING_SIGMOID, c->expert_bias = true;
        c->shared_ungated = true, c->n_expert_group = 1, c->n_group_used = 1, c->expert_scale = 2.5f;
        c->n_dense_layers = 3, c->dense_layers[0] = 0, c->dense_layers[1] = 1, c->dense_layers[2] = 2;
    } else if (name && !strcmp(name, "tiny-qwen3-moe")) { // tests: tests/fixtures/models/tiny-qwen3-moe's shape
        c->arch = OSCAR_ARCH_QWEN3_MOE, c->n_layer = 3, c->n_embd = 64, c->n_head = 4, c->n_head_kv = 2;
        c->head_dim = 16, c->n_ff = 96, c->n_vocab = 128, c->n_ctx_train = 256;
        c->rope_theta = 1000000.0f, c->rms_eps = 1e-6f, c->qk_norm = true, c->tied_embeddings = true;
        c->n_expert = 8, c->n_expert_used = 2, c->n_ff_expert = 16, c->expert_norm_topk = true, c->moe_step = 1;
    } else if (name && !strcmp(name, "tiny-gemma3")) { // tests: tests/fixtures/models/tiny-gemma3-hub's shape, window 64,
        // and tiny-gemma3's query_pre_attn_scalar 24 (not head_dim: the score scale every consumer must carry)
        c->arch = OSCAR_ARCH_GEMMA3, c->n_layer = 6, c->n_embd = 64, c->n_head = 4, c->n_head_kv = 1;
        c->head_dim = 32, c->n_ff = 128, c->n_vocab = 320, c->n_ctx_train = 512;
        c->rope_theta = 1000000.0f, c->rope_scaling = OSCAR_ROPE_LINEAR, c->rope_factor = 8.0f;
        c->rope_theta_swa = 10000.0f, c->sliding_window = 64, c->swa_pattern = 6, c->rms_eps = 1e-6f;
        c->qk_norm = true, c->post_norms = true, c->embed_scale = true, c->tied_embeddings = true;
        c->norm_offset = 1.0f, c->act = OSCAR_ACT_GELU_TANH, c->attn_scale = (float) (1.0 / sqrt(24.0));
    } else if (name && !strcmp(name, "tiny-glm4-moe")) { // tests: tests/fixtures/models/tiny-glm4-moe's shape
        // 8 sigmoid-routed experts in 2 groups (1 competes), top-2, one ungated shared expert, layer 0 dense,
        // q/k/v bias, q/k norms, partial rotary (16 of 32 dims)
        c->arch = OSCAR_ARCH_GLM4_MOE, c->n_layer = 4, c->n_embd = 64, c->n_head = 4, c->n_head_kv = 2;
        c->head_dim = 32, c->rope_dim = 16, c->n_ff = 96, c->n_vocab = 160, c->n_ctx_train = 256;
        c->rope_theta = 10000.0f, c->rms_eps = 1e-5f, c->qkv_bias = true, c->qk_norm = true;
        c->n_expert = 8, c->n_expert_used = 2, c->n_ff_expert = 24, c->n_ff_shared = 24, c->expert_norm_topk = true;
        c->moe_step = 1, c->expert_gating = OSCAR_GATING_SIGMOID, c->expert_bias = true, c->shared_ungated = true;
        c->n_expert_group = 2, c->n_group_used = 1, c->expert_scale = 2.5f;
        c->n_dense_layers = 1, c->dense_layers[0] = 0;
    } else {
        return osc_error(OSCAR_ERR_INVALID, "random-init: unknown shape '%s' (qwen3-8b, llama3-70b, smollm2-135m, "
                         "qwen3-30b-a3b, glm-4.7, tiny-qwen3-moe, tiny-gemma3, tiny-glm4-moe)", name ? name : "(null)");
    }
    snprintf(c->name, sizeof c->name, "%s shape (random init)", name);
    return OSCAR_OK;
}

enum oscar_status oscar_calib_synthetic_corpus(int64_t n, int32_t n_vocab, uint64_t seed,
                                               struct oscar_calib_corpus * out) {
    memset(out, 0, sizeof *out);
    if (n <= 0 || n_vocab <= 0) return osc_error(OSCAR_ERR_INVALID, "synthetic corpus: %lld tokens, vocab %d",
                                                 (long long) n, (int) n_vocab);
    out->tokens = malloc((size_t) n * sizeof(int32_t));
    if (!out->tokens) return osc_error(OSCAR_ERR_NOMEM, "synthetic corpus: out of memory (%lld tokens)", (long long) n);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        out->tokens[i] = (int32_t) (x % (uint64_t) n_vocab);
    }
    out->n = n;
    out->n_docs = 1;
    osc_sha256_hex(out->tokens, (size_t) n * sizeof(int32_t), out->sha256);
    snprintf(out->name, sizeof out->name, "synthetic:%llu", (unsigned long long) seed);
    return OSCAR_OK;
}
