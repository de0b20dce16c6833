// test-tokenizer.c - BPE merge order, pre-tokenizer splits, added/special
// tokens, NFC, invalid UTF-8, decode, corrupt tokenizer.json, SHA-256 and the
// corpus reader. Expected ids are derived in the comments from the tiny
// synthetic vocabulary below; the real tokenizers are checked id-for-id
// against HF in tests/integration/test-tokenizer-oracle.sh.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "oscar.h"
#include "tokenizer/corpus.h"
#include "util/sha256.h"
#include "tokenizer/tokenizer.h"
#include "util/fs.h"

// Byte-level strings: "Ġ" = space, "Ċ" = '\n', "Ã©" = bytes C3 A9 (é).
#define VOCAB                                                                                            \
    "\"h\":0,\"e\":1,\"l\":2,\"o\":3,\"\\u0120\":4,\"1\":5,\"2\":6,\"3\":7,\"he\":8,\"ll\":9,\"hell\":10,"    \
    "\"hello\":11,\"\\u0120h\":12,\"12\":13,\"'\":14,\"s\":15,\"a\":16,\"\\u010a\":17,\"\\u00c3\":18,"         \
    "\"\\u00a9\":19,\"\\u00c3\\u00a9\":22,\"'s\":23,\"a'\":24,\"S\":25,\"b\":26,\"\\u0120\\u0120\":27,"       \
    "\"\\u010a\\u010a\":28,\"aa\":29"
// ranks: 0 h e, 1 l l, 2 he ll, 3 hell o, 4 Ġ h, 5 1 2, 6 Ã ©, 7 a ', 8 ' s, 9 Ġ Ġ, 10 Ċ Ċ, 11 a a
#define MERGES                                                                                           \
    "[\"h e\",\"l l\",\"he ll\",\"hell o\",\"\\u0120 h\",[\"1\",\"2\"],[\"\\u00c3\",\"\\u00a9\"],\"a '\","  \
    "\"' s\",\"\\u0120 \\u0120\",\"\\u010a \\u010a\",\"a a\"]"
#define ADDED                                                                                            \
    "[{\"id\":20,\"content\":\"<|eos|>\",\"special\":true,\"normalized\":false},"                         \
    "{\"id\":21,\"content\":\"<x>\",\"special\":false,\"normalized\":false}]"
#define PRE                                                                                              \
    "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},"           \
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}]}"

static const char tiny_json[] = "{\"normalizer\":{\"type\":\"NFC\"},\"pre_tokenizer\":" PRE
                                ",\"added_tokens\":" ADDED ",\"model\":{\"type\":\"BPE\",\"vocab\":{" VOCAB
                                "},\"merges\":" MERGES "}}";
static const char tiny_cfg[] = "{\"eos_token\":\"<|eos|>\",\"bos_token\":null,\"add_bos_token\":false}";

static struct oscar_tokenizer * tiny(void) {
    struct oscar_tokenizer * tok = NULL;
    enum oscar_status st = oscar_tokenizer_from_json("tiny.json", tiny_json, strlen(tiny_json), tiny_cfg,
                                                     strlen(tiny_cfg), &tok);
    if (st != OSCAR_OK) print_error("%s\n", oscar_last_error());
    assert_int_equal(st, OSCAR_OK);
    return tok;
}

// Encodes text and compares with want[0..n).
static void expect(struct oscar_tokenizer * tok, const char * text, size_t len, bool special, const int32_t * want,
                   size_t n) {
    int32_t * ids = NULL;
    size_t    got = 0;
    assert_int_equal(oscar_tokenizer_encode(tok, text, len, special, &ids, &got), OSCAR_OK);
    if (got != n || (n && memcmp(ids, want, n * sizeof *ids) != 0)) {
        print_error("text '%.*s': got", (int) len, text);
        for (size_t i = 0; i < got; i++) print_error(" %d", (int) ids[i]);
        print_error("\n");
    }
    assert_int_equal(got, n);
    if (n) assert_memory_equal(ids, want, n * sizeof *ids);
    free(ids);
}
#define EXPECT(tok, text, special, ...)                                                       \
    do {                                                                                      \
        const int32_t w_[] = { __VA_ARGS__ };                                                 \
        expect(tok, text, sizeof(text) - 1, special, w_, sizeof w_ / sizeof w_[0]);           \
    } while (0)

static void test_merge_order(void ** state) {
    (void) state;
    struct oscar_tokenizer * tok = tiny();
    EXPECT(tok, "hello", true, 11);
    // " hello": pairs (Ġ,h)=4 and (h,e)=0: h e wins, then ll, hell, hello;
    // Ġ never merges with "hello"
    EXPECT(tok, "hello hello", true, 11, 4, 11);
    EXPECT(tok, "he", true, 8);
    assert_int_equal(oscar_tokenizer_n_vocab(tok), 30);
    assert_int_equal(oscar_tokenizer_eos(tok), 20);
    assert_int_equal(oscar_tokenizer_bos(tok), -1);
    oscar_tokenizer_free(tok);
}

static void test_digits_individual(void ** state) {
    (void) state;
    struct oscar_tokenizer * tok = tiny();
    EXPECT(tok, "123", true, 5, 6, 7); // the "1 2" merge cannot apply across digit pieces
    oscar_tokenizer_free(tok);
}

static void test_special_and_added(void ** state) {
    (void) state;
    struct oscar_tokenizer * tok = tiny();
    EXPECT(tok, "he<|eos|>lo", true, 8, 20, 2, 3);
    // as text: pieces "he" "<|" "eos" "|>" "lo"; '<' '|' '>' have no token and vanish
    EXPECT(tok, "he<|eos|>lo", false, 8, 1, 3, 15, 2, 3);
    EXPECT(tok, "a<x>a", true, 16, 21, 16);
    EXPECT(tok, "a<x>a", false, 16, 21, 16); // non-special added tokens always match
    EXPECT(tok, "<|eos|><|eos|>", true, 20, 20);
    assert_true(oscar_tokenizer_is_special(tok, 20));
    assert_false(oscar_tokenizer_is_special(tok, 21));
    oscar_tokenizer_free(tok);
}

static void test_empty_and_invalid_utf8(void ** state) {
    (void) state;
    struct oscar_tokenizer * tok = tiny();
    int32_t * ids = (int32_t *) 1;
    size_t    n = 7;
    assert_int_equal(oscar_tokenizer_encode(tok, "", 0, true, &ids, &n), OSCAR_OK);
    assert_int_equal(n, 0);
    assert_null(ids);
    const char * bad[] = { "\xff", "ab\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "he\x80" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(oscar_tokenizer_encode(tok, bad[i], strlen(bad[i]), true, &ids, &n), OSCAR_ERR_INVALID);
        assert_non_null(strstr(oscar_last_error(), "not valid UTF-8"));
        assert_int_equal(n, 0);
    }
    assert_non_null(strstr(oscar_last_error(), "offset 2"));
    oscar_tokenizer_free(tok);
}

static void test_nfc(void ** state) {
    (void) state;
    struct oscar_tokenizer * tok = tiny();
    EXPECT(tok, "\xc3\xa9", true, 22);  // precomposed é: Ã © merge
    EXPECT(tok, "e\xcc\x81", true, 22); // e + U+0301 composes to é under NFC
    oscar_tokenizer_free(tok);
}

static void test_whitespace_contractions_newlines(void ** state) {
    (void) state;
    struct oscar_tokenizer * tok = tiny();
    // "a  b": \s+(?!\S) takes one space, " b" is its own piece -> Ġ, Ġ, b
    // (one whitespace piece would give the ĠĠ merge 27 instead)
    EXPECT(tok, "a  b", true, 16, 4, 4, 26);
    // "a's": GPT-2 splits "'s" off, so "a '" (rank 7) cannot win over "' s"
    EXPECT(tok, "a's", true, 16, 23);
    // GPT-2 contractions are case-sensitive: "'S" is punctuation + letter
    EXPECT(tok, "a'S", true, 16, 14, 25);
    // "a\n\nb": \s+(?!\S) backs off to one "\n", then \s+ takes the other
    EXPECT(tok, "a\n\nb", true, 16, 17, 17, 26);
    oscar_tokenizer_free(tok);
}

static void test_long_word_and_decode(void ** state) {
    (void) state;
    struct oscar_tokenizer * tok = tiny();
    size_t len = 200001;
    char * s = malloc(len);
    memset(s, 'a', len);
    int32_t * ids;
    size_t    n;
    assert_int_equal(oscar_tokenizer_encode(tok, s, len, true, &ids, &n), OSCAR_OK);
    // leftmost-first "a a" merges: 100000 "aa" then the odd 'a'
    assert_int_equal(n, 100001);
    assert_int_equal(ids[0], 29);
    assert_int_equal(ids[99999], 29);
    assert_int_equal(ids[100000], 16);
    char * text;
    size_t tlen;
    assert_int_equal(oscar_tokenizer_decode(tok, ids, n, false, &text, &tlen), OSCAR_OK);
    assert_int_equal(tlen, len);
    assert_memory_equal(text, s, len);
    free(text);
    free(ids);
    free(s);
    const int32_t some[] = { 11, 4, 11, 20, 22 };
    assert_int_equal(oscar_tokenizer_decode(tok, some, 5, false, &text, &tlen), OSCAR_OK);
    assert_string_equal(text, "hello hello<|eos|>\xc3\xa9");
    free(text);
    assert_int_equal(oscar_tokenizer_decode(tok, some, 5, true, &text, &tlen), OSCAR_OK);
    assert_string_equal(text, "hello hello\xc3\xa9");
    free(text);
    const int32_t bad[] = { 11, 30 };
    assert_int_equal(oscar_tokenizer_decode(tok, bad, 2, false, &text, &tlen), OSCAR_ERR_INVALID);
    const int32_t hole[] = { 23, 21, 19, 18 }; // ids present; decode gives their bytes
    assert_int_equal(oscar_tokenizer_decode(tok, hole, 4, false, &text, &tlen), OSCAR_OK);
    assert_memory_equal(text, "'s<x>\xa9\xc3", 7);
    free(text);
    oscar_tokenizer_free(tok);
}

static void test_hash(void ** state) {
    (void) state;
    struct oscar_tokenizer * a = tiny(), * b = tiny(), * c = NULL;
    assert_true(oscar_tokenizer_hash_fnv1a64(a) == oscar_tokenizer_hash_fnv1a64(b));
    char * swapped = strdup(tiny_json);
    char * p = strstr(swapped, "\"h e\",\"l l\"");
    memcpy(p, "\"l l\",\"h e\"", 11); // swap merge ranks 0 and 1
    assert_int_equal(oscar_tokenizer_from_json("s.json", swapped, strlen(swapped), NULL, 0, &c), OSCAR_OK);
    assert_true(oscar_tokenizer_hash_fnv1a64(a) != oscar_tokenizer_hash_fnv1a64(c));
    free(swapped);
    oscar_tokenizer_free(a);
    oscar_tokenizer_free(b);
    oscar_tokenizer_free(c);
}

// Regression (found by fuzz-tokenizer-json): ids with no token between the
// vocabulary and an added token must hash and decode safely.
static void test_id_holes(void ** state) {
    (void) state;
    static const char j[] = "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"added_tokens\":[{\"id\":6,"
                            "\"content\":\"<s>\",\"special\":true}],\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}";
    struct oscar_tokenizer * tok;
    assert_int_equal(oscar_tokenizer_from_json("holes.json", j, sizeof j - 1, NULL, 0, &tok), OSCAR_OK);
    assert_int_equal(oscar_tokenizer_n_vocab(tok), 7);
    EXPECT(tok, "a<s>a", true, 0, 6, 0);
    const int32_t hole[] = { 0, 3 };
    char * text;
    size_t len;
    assert_int_equal(oscar_tokenizer_decode(tok, hole, 2, false, &text, &len), OSCAR_ERR_INVALID);
    oscar_tokenizer_free(tok);
}

// Regression (issue 18, item 12): a Split pre-tokenizer with a String
// pattern (literal text, as HF escapes it) failed to compile: PCRE2_LITERAL
// does not combine with PCRE2_UCP.
static void test_split_string(void ** state) {
    (void) state;
    static const char fmt[] = "{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
                              "\"pattern\":{\"String\":\"%s\"},\"behavior\":\"Isolated\",\"invert\":false},"
                              "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}]},"
                              "\"model\":{\"type\":\"BPE\",\"vocab\":{" VOCAB "},\"merges\":" MERGES "}}";
    char j[4096];
    struct oscar_tokenizer * tok = NULL;
    snprintf(j, sizeof j, fmt, "l+"); // as a regex it would cut "ll" out of "hello"
    enum oscar_status st = oscar_tokenizer_from_json("split.json", j, strlen(j), NULL, 0, &tok);
    if (st != OSCAR_OK) print_error("%s\n", oscar_last_error());
    assert_int_equal(st, OSCAR_OK);
    EXPECT(tok, "hello", true, 11);
    oscar_tokenizer_free(tok);
    snprintf(j, sizeof j, fmt, "ll"); // "he" "ll" "o"
    assert_int_equal(oscar_tokenizer_from_json("split.json", j, strlen(j), NULL, 0, &tok), OSCAR_OK);
    EXPECT(tok, "hello", true, 8, 9, 3);
    oscar_tokenizer_free(tok);
}

// Regression (issue 18, item 7): with no single-byte tokens every byte is
// dropped; a repeated word then hit the word cache with no ids (UBSan:
// memcpy from NULL in tok-encode.c).
static void test_no_byte_tokens(void ** state) {
    (void) state;
    static const char j[] = "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"added_tokens\":[{\"id\":0,"
                            "\"content\":\"<s>\",\"special\":true}],\"model\":{\"vocab\":{},\"merges\":[]}}";
    struct oscar_tokenizer * tok = NULL;
    assert_int_equal(oscar_tokenizer_from_json("empty.json", j, sizeof j - 1, NULL, 0, &tok), OSCAR_OK);
    int32_t * ids = NULL;
    size_t    n = 7;
    assert_int_equal(oscar_tokenizer_encode(tok, "hi hi hi", 8, true, &ids, &n), OSCAR_OK);
    assert_int_equal(n, 0);
    assert_null(ids);
    EXPECT(tok, "hi<s> hi", true, 0);
    oscar_tokenizer_free(tok);
}

static void test_corrupt_json(void ** state) {
    (void) state;
    static const struct { const char * json; enum oscar_status st; const char * msg; } cases[] = {
        { "{", OSCAR_ERR_FORMAT, "invalid JSON" },
        { "[]", OSCAR_ERR_FORMAT, "top level" },
        { "{}", OSCAR_ERR_FORMAT, "\"model\" is missing" },
        { "{\"model\":{\"vocab\":[],\"merges\":[]}}", OSCAR_ERR_FORMAT, "model.vocab" },
        { "{\"model\":{\"vocab\":{\"a\":\"x\"},\"merges\":[]}}", OSCAR_ERR_FORMAT, "not a token id" },
        { "{\"model\":{\"vocab\":{\"a\":-1},\"merges\":[]}}", OSCAR_ERR_FORMAT, "not a token id" },
        { "{\"model\":{\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}", OSCAR_ERR_FORMAT, "appears twice" },
        // a 50-byte file must not size per-id tables for 2^30 ids (found by fuzz-tokenizer-json)
        { "{\"model\":{\"vocab\":{\"a\":1073741823},\"merges\":[]}}", OSCAR_ERR_FORMAT, "below 65537" },
        { "{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"added_tokens\":[{\"id\":65538,\"content\":\"x\"}]}",
          OSCAR_ERR_FORMAT, "below 65538" },
        { "{\"model\":{\"vocab\":{\"a\":0},\"merges\":[\"a zz\"]}}", OSCAR_ERR_FORMAT, "unknown token 'zz'" },
        { "{\"model\":{\"vocab\":{\"a\":0},\"merges\":[\"a a\"]}}", OSCAR_ERR_FORMAT, "missing from the vocabulary" },
        { "{\"model\":{\"vocab\":{\"a\":0},\"merges\":[[\"a\"]]}}", OSCAR_ERR_FORMAT, "model.merges[0]" },
        { "{\"model\":{\"vocab\":{\"a\":0},\"merges\":7}}", OSCAR_ERR_FORMAT, "model.merges" },
        { "{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"added_tokens\":[{\"id\":\"1\",\"content\":\"x\"}]}",
          OSCAR_ERR_FORMAT, "added_tokens[0]" },
        { "{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Split\",\"behavior\":"
          "\"Isolated\",\"pattern\":{\"Regex\":\"(\"}}}", OSCAR_ERR_FORMAT, "does not compile" },
        { "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", OSCAR_ERR_UNSUPPORTED, "WordPiece" },
        { "{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}", OSCAR_ERR_UNSUPPORTED, "ByteLevel" },
        { "{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"normalizer\":{\"type\":\"Lowercase\"}}",
          OSCAR_ERR_UNSUPPORTED, "Lowercase" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct oscar_tokenizer * tok = (struct oscar_tokenizer *) 1;
        enum oscar_status st = oscar_tokenizer_from_json("bad.json", cases[i].json, strlen(cases[i].json), NULL, 0,
                                                         &tok);
        if (st != cases[i].st || !strstr(oscar_last_error(), cases[i].msg)) {
            print_error("case %zu: status %d, message '%s'\n", i, (int) st, oscar_last_error());
        }
        assert_int_equal(st, cases[i].st);
        assert_null(tok);
        assert_non_null(strstr(oscar_last_error(), "bad.json"));
        assert_non_null(strstr(oscar_last_error(), cases[i].msg));
    }
}

static void test_sha256(void ** state) {
    (void) state;
    static const struct { const char * in; const char * hex; } v[] = { // FIPS 180-4 examples
        { "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
        { "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
        { "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
    };
    uint8_t d[32];
    char    hex[65];
    for (size_t i = 0; i < 3; i++) {
        struct osc_sha256 s;
        osc_sha256_init(&s);
        osc_sha256_update(&s, v[i].in, strlen(v[i].in));
        osc_sha256_final(&s, d);
        osc_sha256_digest_hex(d, hex);
        assert_string_equal(hex, v[i].hex);
    }
    struct osc_sha256 s; // one million 'a', fed in uneven pieces
    osc_sha256_init(&s);
    char a[997];
    memset(a, 'a', sizeof a);
    size_t left = 1000000;
    while (left) {
        size_t k = left < sizeof a ? left : (left % 7) + 990;
        osc_sha256_update(&s, a, k);
        left -= k;
    }
    osc_sha256_final(&s, d);
    osc_sha256_digest_hex(d, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void write_file(const char * dir, const char * name, const char * text) {
    char * p = osc_path_join(dir, name);
    assert_int_equal(osc_write_file_atomic(p, text, strlen(text)), OSCAR_OK);
    free(p);
}

static void test_corpus(void ** state) {
    (void) state;
    char dir[] = "/tmp/oscar-test-corpus-XXXXXX";
    assert_non_null(mkdtemp(dir));
    write_file(dir, "b.txt", "123");
    write_file(dir, "a.txt", "hello");
    write_file(dir, ".hidden", "he");
    struct oscar_tokenizer *  tok = tiny();
    struct oscar_corpus_opts  o = oscar_corpus_default_opts(tok);
    struct oscar_corpus_stats cs;
    struct oscar_tokens       t = { 0 };
    assert_int_equal(oscar_corpus_tokenize(tok, dir, &o, &t, &cs), OSCAR_OK);
    const int32_t want[] = { 11, 20, 5, 6, 7, 20 }; // a.txt then b.txt, eos after each
    assert_int_equal(t.n, 6);
    assert_memory_equal(t.ids, want, sizeof want);
    assert_int_equal(cs.n_files, 2);
    assert_int_equal(cs.n_docs, 2);
    assert_int_equal(cs.n_bytes, 8);
    assert_int_equal(cs.n_tokens, 6);
    uint8_t           d[32];
    struct osc_sha256 s;
    osc_sha256_init(&s);
    osc_sha256_update(&s, "hello123", 8);
    osc_sha256_final(&s, d);
    assert_memory_equal(cs.sha256, d, 32);
    oscar_tokens_free(&t);

    o.max_tokens = 4; // cut inside b.txt
    assert_int_equal(oscar_corpus_tokenize(tok, dir, &o, &t, &cs), OSCAR_OK);
    assert_int_equal(t.n, 4);
    assert_true(cs.truncated);
    oscar_tokens_free(&t);

    char * jl = osc_path_join(dir, "q.jsonl");
    write_file(dir, "q.jsonl", "{\"question\":\"hello\",\"answer\":\"x\"}\n\n{\"question\":\"a\"}\n");
    o = oscar_corpus_default_opts(tok);
    o.jsonl_field = "question";
    o.separator = -1;
    assert_int_equal(oscar_corpus_tokenize(tok, jl, &o, &t, &cs), OSCAR_OK);
    const int32_t wantj[] = { 11, 16 };
    assert_int_equal(t.n, 2);
    assert_memory_equal(t.ids, wantj, sizeof wantj);
    assert_int_equal(cs.n_docs, 2);
    oscar_tokens_free(&t);
    write_file(dir, "q.jsonl", "{\"question\":\"hello\"}\n{\"question\":3}\n");
    assert_int_equal(oscar_corpus_tokenize(tok, jl, &o, &t, &cs), OSCAR_ERR_FORMAT);
    assert_non_null(strstr(oscar_last_error(), "q.jsonl:2"));
    oscar_tokens_free(&t);
    write_file(dir, "q.jsonl", "{\"question\":\"he\\u0000\xff\"}\n");
    assert_int_equal(oscar_corpus_tokenize(tok, jl, &o, &t, &cs), OSCAR_ERR_FORMAT); // jansson rejects bad UTF-8
    oscar_tokens_free(&t);
    // no field named: a *.jsonl file is JSONL with its "text" field (before, its raw lines were
    // tokenized as text), a record without one is an error naming the line
    o = oscar_corpus_default_opts(tok);
    o.separator = -1;
    write_file(dir, "q.jsonl", "{\"text\":\"hello\",\"meta\":1}\n{\"text\":\"a\"}\n");
    assert_int_equal(oscar_corpus_tokenize(tok, jl, &o, &t, &cs), OSCAR_OK);
    assert_int_equal(t.n, 2);
    assert_memory_equal(t.ids, wantj, sizeof wantj);
    oscar_tokens_free(&t);
    write_file(dir, "q.jsonl", "{\"text\":\"hello\"}\n{\"question\":\"a\"}\n");
    assert_int_equal(oscar_corpus_tokenize(tok, jl, &o, &t, &cs), OSCAR_ERR_FORMAT);
    assert_non_null(strstr(oscar_last_error(), "q.jsonl:2: no string field 'text'"));
    oscar_tokens_free(&t);
    write_file(dir, "bad.txt", "ok\xff");
    char * bt = osc_path_join(dir, "bad.txt");
    o.jsonl_field = NULL;
    assert_int_equal(oscar_corpus_tokenize(tok, bt, &o, &t, &cs), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "bad.txt"));
    oscar_tokens_free(&t);
    free(bt);
    free(jl);
    oscar_tokenizer_free(tok);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

// ---- the real tokenizers, when the files are around (skipped otherwise) -----
// Under $OSCAR_CACHE (default ~/.cache/oscar), where make deps unpacks data/.
static char * cache_path(const char * rel) {
    const char * cache = getenv("OSCAR_CACHE");
    const char * home = getenv("HOME");
    char         buf[4096];
    if (cache) {
        snprintf(buf, sizeof buf, "%s/%s", cache, rel);
    } else {
        snprintf(buf, sizeof buf, "%s/.cache/oscar/%s", home ? home : ".", rel);
    }
    return access(buf, R_OK) == 0 ? strdup(buf) : NULL;
}

static void test_qwen3_contractions(void ** state) {
    (void) state;
    char * p = cache_path("tokenizers/qwen3/tokenizer.json");
    if (!p) skip();
    struct oscar_tokenizer * tok;
    assert_int_equal(oscar_tokenizer_load(p, &tok), OSCAR_OK);
    free(p);
    // Qwen2 regex: (?i:'s|...) is case-insensitive, so "'S" and "'LL" are pieces
    int32_t it = oscar_tokenizer_token_id(tok, "IT", 2), s = oscar_tokenizer_token_id(tok, "'S", 2);
    int32_t we = oscar_tokenizer_token_id(tok, "We", 2), ll = oscar_tokenizer_token_id(tok, "'ll", 3);
    int32_t ap = oscar_tokenizer_token_id(tok, "'", 1), LL = oscar_tokenizer_token_id(tok, "LL", 2);
    assert_true(it >= 0 && s >= 0 && we >= 0 && ll >= 0 && ap >= 0 && LL >= 0);
    EXPECT(tok, "IT'S", true, it, s);
    EXPECT(tok, "We'll", true, we, ll);
    // "'LL" is its own piece but not a token: BPE inside the piece gives ' + LL
    EXPECT(tok, "We'LL", true, we, ap, LL);
    assert_int_equal(oscar_tokenizer_eos(tok), oscar_tokenizer_token_id(tok, "<|im_end|>", 10));
    assert_int_equal(oscar_tokenizer_bos(tok), -1);
    int32_t ims = oscar_tokenizer_token_id(tok, "<|im_start|>", 12);
    int32_t th = oscar_tokenizer_token_id(tok, "<think>", 7);
    assert_int_equal(ims, 151644);
    assert_int_equal(th, 151667);
    EXPECT(tok, "<|im_start|><think>", true, ims, th);
    oscar_tokenizer_free(tok);
}

static void test_smollm2_gguf(void ** state) {
    (void) state;
    const char * cache = getenv("OSCAR_CACHE");
    char         p[4096];
    snprintf(p, sizeof p, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", cache ? cache : "");
    if (!cache || access(p, R_OK) != 0) {
        snprintf(p, sizeof p, "%s/.cache/oscar/models/SmolLM2-135M-Instruct.Q4_1.gguf", getenv("HOME"));
        if (access(p, R_OK) != 0) skip();
    }
    struct oscar_tokenizer * tok;
    assert_int_equal(oscar_tokenizer_load(p, &tok), OSCAR_OK);
    assert_int_equal(oscar_tokenizer_n_vocab(tok), 49152);
    assert_int_equal(oscar_tokenizer_bos(tok), 1);
    assert_int_equal(oscar_tokenizer_eos(tok), 2);
    assert_false(oscar_tokenizer_add_bos(tok));
    assert_true(oscar_tokenizer_is_special(tok, 1));
    // smollm pre-tokenizer: every digit is its own piece
    int32_t d[4];
    for (int i = 0; i < 4; i++) d[i] = oscar_tokenizer_token_id(tok, (const char[]){ (char) ('1' + i) }, 1);
    EXPECT(tok, "1234", true, d[0], d[1], d[2], d[3]);
    const char text[] = "<|im_start|>user\nIt is a truth universally acknowledged, 1813.<|im_end|>";
    int32_t * ids;
    size_t    n;
    assert_int_equal(oscar_tokenizer_encode(tok, text, sizeof text - 1, true, &ids, &n), OSCAR_OK);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[n - 1], 2);
    char * back;
    size_t blen;
    assert_int_equal(oscar_tokenizer_decode(tok, ids, n, false, &back, &blen), OSCAR_OK);
    assert_string_equal(back, text);
    free(back);
    free(ids);
    oscar_tokenizer_free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_order),
        cmocka_unit_test(test_digits_individual),
        cmocka_unit_test(test_special_and_added),
        cmocka_unit_test(test_empty_and_invalid_utf8),
        cmocka_unit_test(test_nfc),
        cmocka_unit_test(test_whitespace_contractions_newlines),
        cmocka_unit_test(test_long_word_and_decode),
        cmocka_unit_test(test_hash),
        cmocka_unit_test(test_id_holes),
        cmocka_unit_test(test_split_string),
        cmocka_unit_test(test_no_byte_tokens),
        cmocka_unit_test(test_corrupt_json),
        cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_corpus),
        cmocka_unit_test(test_qwen3_contractions),
        cmocka_unit_test(test_smollm2_gguf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
