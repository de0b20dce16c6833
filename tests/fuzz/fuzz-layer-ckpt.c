// fuzz-layer-ckpt.c - libFuzzer target for the layer-major pass's checkpoint
// reader (osc_layer_ckpt_load, lib/calibrate/layer-ckpt.c, format v7).
//
// Each input is a checkpoint file handed to a resume exactly as
// oscar-calibrate --resume makes it: oscar_calib_capture with p.resume over a
// tiny random model (2 layers, 4 heads, 2 KV heads, head_dim 8) and a fixed
// plan (4 sequences of 16 tokens, batches of 2, 1 held-out sequence), built
// once. The reader must refuse the file with an error status or resume from
// it and finish the pass; any crash, leak or undefined behaviour is a finding.
// Two contexts, chosen by the input's own header field `finish` (offset
// 1032): without a finisher (every layer's held-out rows in the file) and
// with one (the finished layers' results in the file).
//
// The fuzzer cannot forge CRC-32s, so before the reader sees it the target
// rewrites, in a copy, the header's states_crc and results_crc over the
// bytes where this model and plan put them, then header_crc (taken with that
// field zero): mutations then reach the field checks behind the CRCs. An
// input whose header word `reserved` (offset 1580) is not zero is passed as
// it is, so the CRC refusals stay in the fuzzed paths too (such a header is
// refused by check_padding even with good CRCs, so nothing is lost).
//
// Seeds (tests/fuzz/corpus/fuzz-layer-ckpt/plain.ckpt, finish.ckpt) are the
// checkpoints this pass leaves after layer 0; remake them with
//     OSCAR_FUZZ_LCK_SEEDS=tests/fuzz/corpus/fuzz-layer-ckpt build-fuzz/fuzz-layer-ckpt -runs=0
// reg-nan-state.ckpt is a finding of this target, kept by hand: plain.ckpt with NaN hidden states
// (the reader now refuses them, naming the file; the pass used to fail in lib/stats on layer 1).
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "calibrate/calibrate.h"
#include "util/log.h"

#include "fuzz-common.h"

int LLVMFuzzerInitialize(int * argc, char *** argv);
int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size);

// The header layout of layer-ckpt.c (its _Static_asserts pin the size and the CRC's place).
enum {
    HDR = 1584, OFF_STATS_SIZE = 112, OFF_FINISH = 1032,
    OFF_RESULTS_SIZE = 1048, OFF_RESULTS_CRC = 1056, OFF_STATES_CRC = 1060, OFF_HEADER_CRC = 1576,
    OFF_RESERVED = 1580,
};
enum { L = 2, N_HEAD = 4, N_HEAD_KV = 2, HEAD_DIM = 8, N_TOK = 256, VOCAB = 32 };

static struct oscar_model * model;
static int32_t toks[N_TOK];
static struct oscar_calib_corpus corpus;
static struct oscar_calib_params params[2];   // [finish]
static struct oscar_calib_plan plan;

// One pass; fin selects the finisher. Frees what it made.
static enum oscar_status pass(bool fin) {
    struct oscar_stats * s = NULL;
    struct oscar_calib_heldout held;
    struct oscar_calib_timing t = {0};
    struct oscar_calib_finisher f = {0};
    enum oscar_status st = oscar_calib_capture(&(struct oscar_calib_engine){.m = model}, &plan, &params[fin],
                                               fin ? &f : NULL, &s, &held, &t);
    if (st == OSCAR_OK) oscar_calib_heldout_free(&held);
    if (fin) oscar_calib_finish_free(&f);
    oscar_stats_free(s);
    return st;
}

static void die(const char * what) {
    fprintf(stderr, "fuzz-layer-ckpt: %s: %s\n", what, oscar_last_error());
    exit(1);
}

// Runs both passes with checkpoints into dir (their last one, after layer 0, stays there).
static void write_seeds(const char * dir) {
    static char path[2][600];
    for (int fin = 0; fin < 2; fin++) {
        snprintf(path[fin], sizeof path[fin], "%s/%s", dir, fin ? "finish.ckpt" : "plain.ckpt");
        params[fin].checkpoint_path = path[fin];
        params[fin].checkpoint_every = 1;
        params[fin].resume = false;
        if (pass(fin) != OSCAR_OK) die(path[fin]);
        params[fin].resume = true;     // and it must resume
        params[fin].checkpoint_every = 0;
        if (pass(fin) != OSCAR_OK) die(path[fin]);
        fprintf(stderr, "fuzz-layer-ckpt: wrote %s\n", path[fin]);
    }
    exit(0);
}

int LLVMFuzzerInitialize(int * argc, char *** argv) {
    (void) argc, (void) argv;
    oscar_log_set_level(OSCAR_LOG_NONE);
    struct oscar_model_config cfg = {.arch = OSCAR_ARCH_LLAMA, .n_layer = L, .n_embd = N_HEAD * HEAD_DIM,
                                     .n_head = N_HEAD, .n_head_kv = N_HEAD_KV, .head_dim = HEAD_DIM, .n_ff = 32,
                                     .n_vocab = VOCAB, .n_ctx_train = 64, .rope_theta = 10000.0f, .rms_eps = 1e-5f};
    snprintf(cfg.name, sizeof cfg.name, "fuzz-layer-ckpt");
    if (oscar_model_init_random(&cfg, 7, &model) != OSCAR_OK) die("random model");
    snprintf(model->source_sha256, sizeof model->source_sha256, "%064d", 13);
    for (int i = 0; i < N_TOK; i++) toks[i] = (i * 37 + 11) % VOCAB;
    corpus.tokens = toks, corpus.n = N_TOK, corpus.tokenizer_hash = 0x1234;
    snprintf(corpus.sha256, sizeof corpus.sha256, "%064d", 1);
    snprintf(corpus.name, sizeof corpus.name, "fuzz.txt");
    for (int fin = 0; fin < 2; fin++) {
        struct oscar_calib_params * p = &params[fin];
        *p = oscar_calib_default_params();
        p->n_tokens = 64, p->seq_len = 16, p->batch = 2, p->n_heldout = 1, p->n_threads = 1;
        p->sink = 4, p->recent = 4;   // an INT2 middle in the 16-token held-out sequence
        if (oscar_calib_parse_grid("1.00:0.90:0.05", p) != OSCAR_OK) die("grid");
        p->resume = true;
    }
    if (oscar_calib_plan_make(&corpus, &params[0], &plan) != OSCAR_OK) die("plan");
    const char * seeds = getenv("OSCAR_FUZZ_LCK_SEEDS");
    if (seeds && *seeds) write_seeds(seeds);
    return 0;
}

static uint64_t get64(const uint8_t * b, size_t at) {
    uint64_t v;
    memcpy(&v, b + at, sizeof v);
    return v;
}

static void put32(uint8_t * b, size_t at, uint32_t v) { memcpy(b + at, &v, sizeof v); }

static uint32_t crc(const uint8_t * b, size_t n) { return (uint32_t) crc32_z(crc32_z(0, NULL, 0), b, n); }

// The CRCs made right where the header's sizes fit the file (else the reader refuses it by size anyway).
static void reseal(uint8_t * b, size_t size) {
    const uint64_t stats = get64(b, OFF_STATS_SIZE), res = get64(b, OFF_RESULTS_SIZE);
    if (stats <= size - HDR && res <= size - HDR - stats) {
        put32(b, OFF_RESULTS_CRC, crc(b + size - res, res));
        put32(b, OFF_STATES_CRC, crc(b + HDR + stats, size - HDR - stats - res));
    }
    put32(b, OFF_HEADER_CRC, 0);
    put32(b, OFF_HEADER_CRC, crc(b, HDR));
}

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    uint8_t * b = malloc(size ? size : 1);
    if (!b) return 0;
    if (size) memcpy(b, data, size);
    uint32_t reserved = 1;
    if (size >= HDR) memcpy(&reserved, b + OFF_RESERVED, sizeof reserved);
    if (reserved == 0) reseal(b, size);
    const bool fin = size > OFF_FINISH && (b[OFF_FINISH] & 1);
    const char * path = fuzz_write_file("run.ckpt", b, size);
    free(b);
    if (!path) return 0;
    params[fin].checkpoint_path = path;   // read only: checkpoint_every 0 writes none
    // any status: OK, or a refusal (the reader's; or the pass's, e.g. OSCAR_ERR_NUMERIC when finite but
    // huge restored hidden states overflow in layer 1)
    (void) pass(fin);
    return 0;
}
