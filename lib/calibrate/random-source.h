// random-source.h - random-init model shapes and a synthetic token stream for
// benchmarks (oscar-calibrate --random-init): no weights file, tokenizer or corpus.
// The weights themselves come from oscar_model_open_random (host, layer by layer) or
// from the CUDA backend (oscar_fwd_init_random, made on the device); see
// struct oscar_calib_engine.
#ifndef OSCAR_CALIBRATE_RANDOM_SOURCE_H
#define OSCAR_CALIBRATE_RANDOM_SOURCE_H

#include "calibrate/calibrate.h"

// Shapes for --random-init: "qwen3-8b" (36 layers, 4096, 32/8 heads of 128, ff 12288,
// vocab 151936, q/k-norm, theta 1e6), "llama3-70b" (80 layers, 8192, 64/8 heads of 128,
// ff 28672, vocab 128256, theta 5e5: 141 GB in bf16, more than one H200) and
// "smollm2-135m", "qwen3-30b-a3b" (MoE), "glm-4.7" (MoE, 92 layers, 160 experts: ~716 GB in bf16),
// "tiny-qwen3-moe" (MoE, for tests). Unknown name: OSCAR_ERR_INVALID.
enum oscar_status oscar_calib_random_config(const char * name, struct oscar_model_config * out);

// A synthetic corpus of n tokens uniform in [0, n_vocab) from seed (xorshift64); sha256 of
// the token bytes, name "synthetic:<seed>". Free with oscar_calib_corpus_free.
enum oscar_status oscar_calib_synthetic_corpus(int64_t n, int32_t n_vocab, uint64_t seed,
                                               struct oscar_calib_corpus * out);

#endif
