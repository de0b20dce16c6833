// test-calibrate.c - lib/calibrate: checkpoints refuse what they were not made
// of (issue 18 item 1), and the tier check of the gate.
//
// A run of oscar_calib_capture with checkpoints leaves its last checkpoint
// (between layers 0 and 1) behind (the command removes it after the artifact is written), so a resume
// with another model, corpus, tokenizer or capture dtype can be tried on it
// directly. Before the fix a checkpoint of one shape was loaded for a model of
// another and the smaller rows of that model were read as the larger ones
// (heap overflow in lib/stats under ASan).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "calibrate/calibrate.h"
#include "util/log.h"

#define TEST_TMPDIR_NAME "calib"
#include "test-tmpdir.h"

enum { N_TOK = 1024, VOCAB = 64 };
static int32_t toks[N_TOK];

static struct oscar_model * model(int32_t n_layer, int32_t head_dim) {
    struct oscar_model_config cfg = {.arch = OSCAR_ARCH_LLAMA, .n_layer = n_layer, .n_embd = 4 * head_dim,
                                     .n_head = 4, .n_head_kv = 2, .head_dim = head_dim, .n_ff = 96,
                                     .n_vocab = VOCAB, .n_ctx_train = 256, .rope_theta = 10000.0f, .rms_eps = 1e-5f};
    snprintf(cfg.name, sizeof cfg.name, "random-L%d-D%d", (int) n_layer, (int) head_dim);
    struct oscar_model * m = NULL;
    assert_int_equal(oscar_model_init_random(&cfg, 7, &m), OSCAR_OK);
    snprintf(m->source_sha256, sizeof m->source_sha256, "%064d", (int) (n_layer * 100 + head_dim));
    return m;
}

struct fixture {
    struct oscar_calib_corpus corpus;
    struct oscar_calib_params p;
    struct oscar_calib_plan plan;
    char ckpt[320];
};

// 8 sequences of 32 tokens in batches of 2, a checkpoint every 64 tokens.
static void fixture_init(struct fixture * f) {
    for (int i = 0; i < N_TOK; i++) toks[i] = (i * 37 + 11) % VOCAB;
    memset(f, 0, sizeof *f);
    f->corpus.tokens = toks;
    f->corpus.n = N_TOK;
    f->corpus.tokenizer_hash = 0x1234;
    snprintf(f->corpus.sha256, sizeof f->corpus.sha256, "%064d", 1);
    snprintf(f->corpus.name, sizeof f->corpus.name, "first.txt");
    f->p = oscar_calib_default_params();
    f->p.n_tokens = 256, f->p.seq_len = 32, f->p.batch = 2, f->p.n_heldout = 1, f->p.n_threads = 1;
    snprintf(f->ckpt, sizeof f->ckpt, "%s/run.ckpt", tmpdir);
    f->p.checkpoint_every = 64;
    f->p.checkpoint_path = f->ckpt;
    assert_int_equal(oscar_calib_plan_make(&f->corpus, &f->p, &f->plan), OSCAR_OK);
}

// Runs the capture pass with m; returns the status and frees what it made.
static enum oscar_status accumulate(struct oscar_model * m, struct fixture * f) {
    struct oscar_stats * s = NULL;
    struct oscar_calib_heldout held;
    struct oscar_calib_timing t = {0};
    enum oscar_status st = oscar_calib_capture(&(struct oscar_calib_engine){.m = m}, &f->plan, &f->p, NULL, &s, &held, &t);
    if (st == OSCAR_OK) {
        assert_non_null(s);
        oscar_calib_heldout_free(&held);
    } else {
        assert_null(s);
    }
    oscar_stats_free(s);
    return st;
}

static void expect_refused(struct oscar_model * m, struct fixture * f, const char * what) {
    assert_int_equal(accumulate(m, f), OSCAR_ERR_INVALID);
    const char * msg = oscar_last_error();
    if (!strstr(msg, what) || !strstr(msg, f->ckpt)) fail_msg("message lacks '%s' or the checkpoint: %s", what, msg);
}

static void test_resume_refuses_other_sources(void ** state) {
    (void) state;
    struct fixture f;
    fixture_init(&f);
    struct oscar_model * a = model(2, 16), * b = model(2, 8), * c = model(3, 16), * a2 = model(2, 16);
    assert_int_equal(accumulate(a, &f), OSCAR_OK); // leaves its last checkpoint
    f.p.resume = true;

    expect_refused(b, &f, "head_dim 16");   // other shape: never reads b's rows as a's
    expect_refused(c, &f, "3 layers");
    snprintf(a2->source_sha256, sizeof a2->source_sha256, "%064d", 9);
    expect_refused(a2, &f, "sha256");        // same shape, other model file
    snprintf(f.corpus.sha256, sizeof f.corpus.sha256, "%064d", 2);
    snprintf(f.corpus.name, sizeof f.corpus.name, "second.txt");
    expect_refused(a, &f, "second.txt");     // other corpus, named with the checkpoint's
    assert_non_null(strstr(oscar_last_error(), "first.txt"));
    snprintf(f.corpus.sha256, sizeof f.corpus.sha256, "%064d", 1);
    f.corpus.tokenizer_hash = 0x99;
    expect_refused(a, &f, "tokenizer");
    f.corpus.tokenizer_hash = 0x1234;
    f.p.capture_bf16 = true;
    expect_refused(a, &f, "capture");
    f.p.capture_bf16 = false;

    assert_int_equal(accumulate(a, &f), OSCAR_OK); // the matching resume still works
    oscar_model_free(a), oscar_model_free(b), oscar_model_free(c), oscar_model_free(a2);
    oscar_calib_plan_free(&f.plan);
}

// The layer checkpoint's header is LAYER_HDR bytes, its CRC-32 (taken with the field zero) at LAYER_HDR_CRC.
enum { LAYER_HDR = 1584, LAYER_HDR_CRC = 1576 };
static void reseal_header(uint8_t * hd, size_t h) {
    assert_int_equal(h, (size_t) LAYER_HDR);
    memset(hd + LAYER_HDR_CRC, 0, 4);
    uint32_t c = (uint32_t) crc32(crc32(0, NULL, 0), hd, LAYER_HDR);
    memcpy(hd + LAYER_HDR_CRC, &c, 4);
}

static size_t read_all(const char * path, uint8_t * buf, size_t cap) {
    FILE * fp = fopen(path, "rb");
    assert_non_null(fp);
    size_t n = fread(buf, 1, cap, fp);
    fclose(fp);
    assert_true(n > LAYER_HDR && n < cap);
    return n;
}

static void write_all(const char * path, const uint8_t * buf, size_t n) {
    FILE * fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, n, fp), n);
    fclose(fp);
}

// One flipped bit in the header, the statistics, the hidden states or the held-out rows is refused naming
// the file and the part (issue 13: the header and the hidden states had no CRC before version 6).
static void test_resume_refuses_a_flipped_byte(void ** state) {
    (void) state;
    struct fixture f;
    fixture_init(&f);
    struct oscar_model * a = model(2, 16);
    assert_int_equal(accumulate(a, &f), OSCAR_OK);
    static uint8_t good[1 << 20], bad[1 << 20];
    const size_t n = read_all(f.ckpt, good, sizeof good);
    uint8_t * stats = memmem(good, n, "OSCSTATS", 8);
    assert_non_null(stats);
    assert_int_equal((size_t) (stats - good), (size_t) LAYER_HDR);
    uint64_t stats_size;
    memcpy(&stats_size, stats + 48, 8);
    stats_size += 96;
    const size_t x_at = LAYER_HDR + stats_size;
    assert_true(x_at < n);
    const struct { size_t at; const char * what; } flips[] = {
        {12, "header fails its CRC"},                      // next_layer
        {LAYER_HDR - 600, "header fails its CRC"},         // the NUL padding of the corpus name
        {LAYER_HDR + 200, "payload checksum mismatch"},    // the statistics (lib/stats: its own CRC)
        {x_at + 3, "hidden states fail their CRC"},        // the first hidden state
        {n - 1, "hidden states fail their CRC"},           // the last held-out row (every layer's: no finisher)
    };
    f.p.resume = true;
    for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
        memcpy(bad, good, n);
        bad[flips[i].at] ^= 0x10;
        write_all(f.ckpt, bad, n);
        assert_int_equal(accumulate(a, &f), OSCAR_ERR_FORMAT);
        const char * msg = oscar_last_error();
        if (!strstr(msg, flips[i].what) || !strstr(msg, f.ckpt))
            fail_msg("byte %zu: message lacks '%s' or the checkpoint: %s", flips[i].at, flips[i].what, msg);
    }
    memcpy(bad, good, n);
    bad[8] = 5;   // version 5 (no header CRC) is refused by name
    write_all(f.ckpt, bad, n);
    assert_int_equal(accumulate(a, &f), OSCAR_ERR_UNSUPPORTED);
    assert_non_null(strstr(oscar_last_error(), "checkpoint version 5"));
    write_all(f.ckpt, good, n);
    assert_int_equal(accumulate(a, &f), OSCAR_OK);   // the intact file still resumes
    oscar_model_free(a);
    oscar_calib_plan_free(&f.plan);
}

// A NaN hidden state or held-out value under good CRCs (a forged file) is refused by the reader,
// naming the file and the part; before, the pass ran layer 1 on it and failed in lib/stats
// ("non-finite q", naming no checkpoint). Found by tests/fuzz/fuzz-layer-ckpt.c.
static void test_resume_refuses_a_non_finite_state(void ** state) {
    (void) state;
    struct fixture f;
    fixture_init(&f);
    struct oscar_model * a = model(2, 16);
    assert_int_equal(accumulate(a, &f), OSCAR_OK);
    static uint8_t good[1 << 20], bad[1 << 20];
    const size_t n = read_all(f.ckpt, good, sizeof good);
    uint64_t stats_size, results_size;
    memcpy(&stats_size, good + 112, 8);
    memcpy(&results_size, good + 1048, 8);
    assert_int_equal(results_size, 0);   // no finisher: the states and held-out rows run to the end
    const size_t x_at = LAYER_HDR + stats_size;
    const struct { size_t at; const char * what; } nans[] = {
        {x_at + 4, "hidden state value 1 is not finite"},
        {n - 4, "held-out row"},
    };
    f.p.resume = true;
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        memcpy(bad, good, n);
        const float v = nanf("");
        memcpy(bad + nans[i].at, &v, 4);
        const uint32_t c = (uint32_t) crc32(crc32(0, NULL, 0), bad + x_at, (uInt) (n - x_at));
        memcpy(bad + 1060, &c, 4);   // states_crc
        reseal_header(bad, LAYER_HDR);
        write_all(f.ckpt, bad, n);
        assert_int_equal(accumulate(a, &f), OSCAR_ERR_FORMAT);
        const char * msg = oscar_last_error();
        if (!strstr(msg, nans[i].what) || !strstr(msg, f.ckpt))
            fail_msg("NaN at %zu: message lacks '%s' or the checkpoint: %s", nans[i].at, nans[i].what, msg);
    }
    write_all(f.ckpt, good, n);
    assert_int_equal(accumulate(a, &f), OSCAR_OK);
    oscar_model_free(a);
    oscar_calib_plan_free(&f.plan);
}

// A checkpoint whose statistics disagree with its own header (a forged or damaged
// header) is refused before the statistics are used.
static void test_resume_checks_the_statistics_shape(void ** state) {
    (void) state;
    struct fixture f;
    fixture_init(&f);
    struct oscar_model * a = model(2, 16), * b = model(2, 8);
    char ckb[340];
    snprintf(ckb, sizeof ckb, "%s/b.ckpt", tmpdir);
    f.p.checkpoint_path = ckb;
    assert_int_equal(accumulate(b, &f), OSCAR_OK);
    f.p.checkpoint_path = f.ckpt;
    assert_int_equal(accumulate(a, &f), OSCAR_OK);
    // a's checkpoint with b's statistics in place of its own (and their size in a's header)
    FILE * fa = fopen(f.ckpt, "rb"), * fb = fopen(ckb, "rb");
    assert_non_null(fa), assert_non_null(fb);
    static uint8_t ha[1 << 20], hb[1 << 20], out[1 << 21];
    size_t na = fread(ha, 1, sizeof ha, fa), nb = fread(hb, 1, sizeof hb, fb);
    fclose(fa), fclose(fb);
    assert_true(na > 1000 && nb > 1000 && na < sizeof ha && nb < sizeof hb);
    // the header is the part before the lib/stats magic; lib/stats' own header
    // (stats.h) gives its size: 96 bytes + the u64 payload size at offset 48
    uint8_t * sa = memmem(ha, na, "OSCSTATS", 8), * sb = memmem(hb, nb, "OSCSTATS", 8);
    assert_non_null(sa), assert_non_null(sb);
    size_t h = (size_t) (sa - ha);
    assert_int_equal(h, (size_t) (sb - hb));
    uint64_t size_a, size_b;
    memcpy(&size_a, sa + 48, 8), memcpy(&size_b, sb + 48, 8);
    size_a += 96, size_b += 96;
    assert_true(h + size_a <= na && h + size_b <= nb && size_a != size_b);
    uint8_t * field = memmem(ha, h, &size_a, 8); // the header's stats size
    assert_non_null(field);
    memcpy(field, &size_b, 8);
    reseal_header(ha, h); // a forged header, not a damaged one: its CRC matches
    size_t n = 0;
    memcpy(out, ha, h), n += h;
    memcpy(out + n, sb, size_b), n += size_b;
    memcpy(out + n, sa + size_a, na - h - size_a), n += na - h - size_a; // a's hidden states and held-out rows
    FILE * fo = fopen(f.ckpt, "wb");
    assert_non_null(fo);
    assert_int_equal(fwrite(out, 1, n, fo), n);
    fclose(fo);
    f.p.resume = true;
    assert_int_equal(accumulate(a, &f), OSCAR_ERR_FORMAT);
    assert_non_null(strstr(oscar_last_error(), "head_dim 8"));
    oscar_model_free(a), oscar_model_free(b);
    oscar_calib_plan_free(&f.plan);
}

static void test_tiers(void ** state) {
    (void) state;
    struct oscar_calib_params p = oscar_calib_default_params();
    p.seq_len = 320, p.sink = 64, p.recent = 256;
    assert_int_equal(oscar_calib_check_tiers(&p), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "--seq-len 320 <= --sink 64 + --recent 256"));
    p.seq_len = 321;
    assert_int_equal(oscar_calib_check_tiers(&p), OSCAR_OK);
}

int main(void) {
    oscar_log_set_level(OSCAR_LOG_ERROR); // no progress lines
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_refuses_other_sources),
        cmocka_unit_test(test_resume_checks_the_statistics_shape),
        cmocka_unit_test(test_resume_refuses_a_flipped_byte),
        cmocka_unit_test(test_resume_refuses_a_non_finite_state),
        cmocka_unit_test(test_tiers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
