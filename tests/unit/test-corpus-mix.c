// test-corpus-mix.c - --corpus PATH@SHARE parsing and the mix loader
// (lib/calibrate/corpus-mix.c): which tokens of which source land where,
// checked against each source tokenized on its own; the refusals.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calibrate/calibrate.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

static void test_parse(void ** state) {
    (void) state;
    struct oscar_calib_source s;
    assert_int_equal(oscar_calib_source_parse("a/b.txt", &s), OSCAR_OK);
    assert_true(s.share == 0.0 && s.path_len == 0);
    assert_int_equal(oscar_calib_source_parse("a/b.txt@0.25", &s), OSCAR_OK);
    assert_true(s.share == 0.25 && s.path_len == 7);
    assert_int_equal(oscar_calib_source_parse("x@1e-2", &s), OSCAR_OK);
    assert_true(s.share == 0.01 && s.path_len == 1);
    // '@' inside a path that is not followed by a number stays part of the path
    assert_int_equal(oscar_calib_source_parse("mail@host/x.txt", &s), OSCAR_OK);
    assert_true(s.share == 0.0 && s.path_len == 0);
    assert_int_equal(oscar_calib_source_parse("v@2.txt", &s), OSCAR_OK); // "2.txt" is not a number
    assert_true(s.share == 0.0);
    // a path ending in @NUMBER takes an explicit share after it
    assert_int_equal(oscar_calib_source_parse("f@3@1", &s), OSCAR_OK);
    assert_true(s.share == 1.0 && s.path_len == 3);
    const char * bad[] = {"x@0", "x@-1", "x@1e999", "x@.", "x@1.2.3", "@0.5", "x@+-1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(oscar_calib_source_parse(bad[i], &s), OSCAR_ERR_INVALID);
        assert_non_null(strstr(oscar_last_error(), bad[i])); // the message names the argument
    }
}

static struct oscar_tokenizer * smollm2(void) {
    const char * cache = getenv("OSCAR_CACHE");
    char p[4096];
    snprintf(p, sizeof p, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", cache ? cache : "");
    if (!cache || access(p, R_OK) != 0)
        snprintf(p, sizeof p, "%s/.cache/oscar/models/SmolLM2-135M-Instruct.Q4_1.gguf", getenv("HOME"));
    struct oscar_tokenizer * tok = NULL;
    if (access(p, R_OK) != 0 || oscar_tokenizer_load(p, &tok) != OSCAR_OK) return NULL;
    return tok;
}

// Text files with distinct, repetitive prose (paragraphs, so the tokenizer's documents split).
static void write_text(const char * path, const char * word, int n_par) {
    FILE * f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < n_par; i++) fprintf(f, "The %s number %d went %s over the hill.\n\n", word, i, word);
    fclose(f);
}

struct fixture {
    struct oscar_tokenizer * tok;
    char dir[64], a[128], b[128], c[128], tiny[128];
};

static int setup(void ** state) {
    struct fixture * fx = calloc(1, sizeof *fx);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/test-corpus-mix.XXXXXX");
    if (!mkdtemp(fx->dir)) return -1;
    snprintf(fx->a, sizeof fx->a, "%s/a.txt", fx->dir);
    snprintf(fx->b, sizeof fx->b, "%s/b.txt", fx->dir);
    snprintf(fx->c, sizeof fx->c, "%s/c.txt", fx->dir);
    snprintf(fx->tiny, sizeof fx->tiny, "%s/tiny.txt", fx->dir);
    write_text(fx->a, "apple", 400);
    write_text(fx->b, "zebra", 400);
    write_text(fx->c, "cloud", 400);
    write_text(fx->tiny, "tiny", 2);
    fx->tok = smollm2();
    *state = fx;
    return 0;
}

static int teardown(void ** state) {
    struct fixture * fx = *state;
    const char * f[] = {fx->a, fx->b, fx->c, fx->tiny};
    for (int i = 0; i < 4; i++) remove(f[i]);
    rmdir(fx->dir);
    oscar_tokenizer_free(fx->tok);
    free(fx);
    return 0;
}

static struct oscar_calib_params params(int64_t tokens, int32_t seq_len, int32_t heldout) {
    struct oscar_calib_params p = oscar_calib_default_params();
    p.n_tokens = tokens, p.seq_len = seq_len, p.n_heldout = heldout;
    return p;
}

// dst[0..n) == src[0..n): the mix copied this stretch of that source
static void same(const int32_t * dst, const int32_t * src, int64_t n) {
    for (int64_t i = 0; i < n; i++) assert_int_equal(dst[i], src[i]);
}

static void test_layout(void ** state) {
    struct fixture * fx = *state;
    if (!fx->tok) skip();
    struct oscar_calib_corpus a, b, c, m;
    assert_int_equal(oscar_calib_corpus_load(fx->tok, fx->a, NULL, 0, &a), OSCAR_OK);
    assert_int_equal(oscar_calib_corpus_load(fx->tok, fx->b, NULL, 0, &b), OSCAR_OK);
    assert_int_equal(oscar_calib_corpus_load(fx->tok, fx->c, NULL, 0, &c), OSCAR_OK);
    assert_true(a.tokens[1] != b.tokens[1] && b.tokens[1] != c.tokens[1]); // "apple" / "zebra" / "cloud": told apart below
    // shares 3:1 (normalised 0.75/0.25) of 250 tokens in sequences of 64: 4 sequences,
    // A 3 (192 tokens), B 1 (the short last one: 58); held-out 2 sequences: 1.5/0.5 ->
    // the tie goes to the earlier source: A 2, B 0.
    char sa[160], sb[160];
    snprintf(sa, sizeof sa, "%s@3", fx->a);
    snprintf(sb, sizeof sb, "%s@1", fx->b);
    struct oscar_calib_source src[2];
    assert_int_equal(oscar_calib_source_parse(sa, &src[0]), OSCAR_OK);
    assert_int_equal(oscar_calib_source_parse(sb, &src[1]), OSCAR_OK);
    struct oscar_calib_params p = params(250, 64, 2);
    assert_int_equal(oscar_calib_corpus_load_mix(fx->tok, src, 2, NULL, &p, &m), OSCAR_OK);
    assert_int_equal(m.n, 192 + 58 + 128);
    same(m.tokens, a.tokens, 192);            // A's calibration part
    same(m.tokens + 192, b.tokens, 58);       // B's (the short last sequence)
    same(m.tokens + 250, a.tokens + 192, 128); // A's held-out: right after its calibration tokens
    assert_string_equal(m.name, "a.txt@0.75+b.txt@0.25");
    assert_non_null(strstr(m.sources, "\"name\":\"a.txt\",\"share\":0.75"));
    assert_non_null(strstr(m.sources, a.sha256));
    assert_non_null(strstr(m.sources, "\"tokens\":58,\"heldout_tokens\":0"));
    // the plan cuts it as any corpus: 250 calibration tokens, held-out from 250
    struct oscar_calib_plan plan;
    assert_int_equal(oscar_calib_plan_make(&m, &p, &plan), OSCAR_OK);
    assert_int_equal(plan.n_tokens, 250);
    assert_int_equal(plan.n_seq, 4);
    assert_int_equal(plan.heldout_start[0], 250);
    oscar_calib_plan_free(&plan);
    char sha_31[65];
    memcpy(sha_31, m.sha256, sizeof sha_31);
    oscar_calib_corpus_free(&m);

    // other shares: another identity (a resume or replay on it is refused)
    src[0].share = 1.0;
    assert_int_equal(oscar_calib_corpus_load_mix(fx->tok, src, 2, NULL, &p, &m), OSCAR_OK);
    assert_string_not_equal(m.sha256, sha_31);
    same(m.tokens, a.tokens, 128);
    same(m.tokens + 128, b.tokens, 122);
    same(m.tokens + 250, a.tokens + 128, 64);
    same(m.tokens + 314, b.tokens + 122, 64);
    oscar_calib_corpus_free(&m);

    // no shares: equal; three sources of 3 sequences + 3 held-out: one each, in order
    struct oscar_calib_source s3[3] = {{.path = fx->a}, {.path = fx->b}, {.path = fx->c}};
    p = params(192, 64, 3);
    assert_int_equal(oscar_calib_corpus_load_mix(fx->tok, s3, 3, NULL, &p, &m), OSCAR_OK);
    same(m.tokens, a.tokens, 64);
    same(m.tokens + 64, b.tokens, 64);
    same(m.tokens + 128, c.tokens, 64);
    same(m.tokens + 192, a.tokens + 64, 64);
    same(m.tokens + 256, b.tokens + 64, 64);
    same(m.tokens + 320, c.tokens + 64, 64);
    oscar_calib_corpus_free(&m);
    oscar_calib_corpus_free(&a), oscar_calib_corpus_free(&b), oscar_calib_corpus_free(&c);
}

static void expect_refusal(struct fixture * fx, struct oscar_calib_source * src, int32_t n,
                           const struct oscar_calib_params * p, const char * needle) {
    struct oscar_calib_corpus m;
    assert_int_equal(oscar_calib_corpus_load_mix(fx->tok, src, n, NULL, p, &m), OSCAR_ERR_INVALID);
    if (!strstr(oscar_last_error(), needle)) fail_msg("'%s' does not name '%s'", oscar_last_error(), needle);
    assert_null(m.tokens);
    assert_null(m.sources);
}

static void test_refusals(void ** state) {
    struct fixture * fx = *state;
    if (!fx->tok) skip();
    struct oscar_calib_params p = params(256, 64, 2);
    char missing[160];
    snprintf(missing, sizeof missing, "%s/nope.txt", fx->dir);
    struct oscar_calib_source s[2] = {{.path = fx->a}, {.path = missing}};
    struct oscar_calib_corpus m;
    assert_int_not_equal(oscar_calib_corpus_load_mix(fx->tok, s, 2, NULL, &p, &m), OSCAR_OK);
    assert_non_null(strstr(oscar_last_error(), "nope.txt"));
    s[1].path = fx->tiny; // far fewer tokens than its half of the budget
    expect_refusal(fx, s, 2, &p, "tiny.txt");
    s[1].path = fx->a;
    expect_refusal(fx, s, 2, &p, "given twice");
    s[1] = (struct oscar_calib_source){.path = fx->b, .share = 0.5};
    expect_refusal(fx, s, 2, &p, "every source or to none");
    s[0].share = 0.5;
    p.allow_short = true;
    expect_refusal(fx, s, 2, &p, "--allow-short");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test_setup_teardown(test_layout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
