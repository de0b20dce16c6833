// test-base-model.c - lib/calibrate/base-model: the base model's Hub id from a
// Hub spec, from the HF cache layout (as given and through the real path of a
// relative one), from huggingface.co URLs (and what is not a model repo), from
// GGUF metadata (which key wins, titles that are not ids), the licence from a
// GGUF and from a model directory's README.md, and the order of the rules.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calibrate/base-model.h"
#include "formats/gguf-writer.h"
#include "util/fs.h"

#define TEST_TMPDIR_NAME "base-model"
#include "test-tmpdir.h"

static void ok(enum oscar_status st) {
    if (st != OSCAR_OK) fail_msg("%s", oscar_last_error());
}

// want NULL: no id expected.
static void expect_id(int (*fn)(const char *, char *, size_t), const char * in, const char * want) {
    char id[OSCAR_BASE_MODEL_ID_MAX] = "";
    int  got = fn(in, id, sizeof id);
    if (!want && got) fail_msg("'%s' gave id '%s', expected none", in, id);
    if (want && (!got || strcmp(id, want))) fail_msg("'%s' gave %s'%s', expected '%s'", in, got ? "" : "none ", id, want);
}

static void test_from_spec(void ** state) {
    (void) state;
    expect_id(oscar_base_model_id_from_spec, "HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct");
    expect_id(oscar_base_model_id_from_spec, "a/b@main:sub/model.gguf", "a/b");
    expect_id(oscar_base_model_id_from_spec, "a/b:model.gguf", "a/b");
    const char * none[] = {"gpt2", "a/b/c", "a b/c", "a/b--c", "a/b@", "/abs/path.gguf", "models/x.gguf/"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) expect_id(oscar_base_model_id_from_spec, none[i], NULL);
}

static void test_from_cache_path(void ** state) {
    (void) state;
    int (*f)(const char *, char *, size_t) = oscar_base_model_id_from_cache_path;
    expect_id(f, "/root/.cache/huggingface/hub/models--HuggingFaceTB--SmolLM2-135M-Instruct/snapshots/0123abcd/model.gguf",
              "HuggingFaceTB/SmolLM2-135M-Instruct");
    expect_id(f, "hub/models--my-org--my.model_v2/snapshots/c0ffee", "my-org/my.model_v2");
    expect_id(f, "models--a--b/snapshots/c/sub/dir/", "a/b");
    // the innermost snapshot wins (a cache inside a snapshot)
    expect_id(f, "/x/models--a--b/snapshots/c/models--d--e/snapshots/f/m.gguf", "d/e");
    const char * none[] = {
        "/root/.cache/huggingface/hub/models--a--b/blobs/0123",  // not a snapshot
        "/hub/models--a--b/snapshots/",                          // no commit
        "/hub/models--a--b/snapshots//x",                        // empty commit
        "/hub/datasets--a--b/snapshots/c/x.parquet",             // a dataset
        "/hub/xmodels--a--b/snapshots/c/x",                      // not a component of its own
        "/hub/models--ab/snapshots/c/x",                         // no owner
        "/hub/models--a--b--c/snapshots/c/x",                    // "--" cannot be in a name
        "/home/me/model.gguf",
    };
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) expect_id(f, none[i], NULL);
}

static void test_from_url(void ** state) {
    (void) state;
    int (*f)(const char *, char *, size_t) = oscar_base_model_id_from_url;
    expect_id(f, "https://huggingface.co/HuggingFaceTB/SmolLM2-135M", "HuggingFaceTB/SmolLM2-135M");
    expect_id(f, "http://www.huggingface.co/a/b/tree/main", "a/b");
    expect_id(f, "HTTPS://HuggingFace.co/a/b.git", "a/b");
    expect_id(f, "https://huggingface.co/a/b?library=x", "a/b");
    expect_id(f, "https://huggingface.co/a/b#readme", "a/b");
    expect_id(f, "https://huggingface.co/a/b/resolve/main/m.gguf", "a/b");
    const char * none[] = {
        "https://huggingface.co/datasets/a/b", "https://huggingface.co/spaces/a/b",
        "https://huggingface.co/papers/2605.17757", "https://huggingface.co/docs/hub/index",
        "https://huggingface.co/a", "https://huggingface.co/a?x=/b", "https://huggingface.co/",
        "huggingface.co/a/b",                      // no scheme
        "a/b",                                     // a bare id is not a URL
        "https://github.com/a/b", "https://huggingface.co.evil.example/a/b", "ftp://huggingface.co/a/b",
        "https://huggingface.co/a--b/c", "https://huggingface.co/a/b..c", "https://huggingface.co/a/.git",
    };
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) expect_id(f, none[i], NULL);
}

// A GGUF holding only the given string keys (key, value, ..., NULL).
static void write_gguf(const char * path, ...) {
    struct osc_gguf_writer * w = NULL;
    ok(osc_gguf_writer_new(32, &w));
    ok(osc_gguf_writer_kv_cstr(w, "general.architecture", "llama"));
    va_list ap;
    va_start(ap, path);
    for (const char * k; (k = va_arg(ap, const char *)) != NULL;) ok(osc_gguf_writer_kv_cstr(w, k, va_arg(ap, const char *)));
    va_end(ap);
    ok(osc_gguf_writer_write(w, path));
    osc_gguf_writer_free(w);
}

static void expect_gguf(const char * name, const char * want_id, const char * want_from, const char * want_license) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    struct oscar_base_model b = {0};
    ok(oscar_base_model_from_gguf(p, &b));
    if (strcmp(b.id, want_id ? want_id : "")) fail_msg("%s: id '%s', expected '%s'", name, b.id, want_id ? want_id : "");
    if (want_from && strcmp(b.id_from, want_from)) fail_msg("%s: id from '%s', expected '%s'", name, b.id_from, want_from);
    assert_string_equal(b.license, want_license ? want_license : "");
}

static void test_from_gguf(void ** state) {
    (void) state;
    char p[512];
#define G(name, ...) (snprintf(p, sizeof p, "%s/%s", tmpdir, name), write_gguf(p, __VA_ARGS__, NULL))
    // the default SmolLM2 GGUF's keys: names, no source, a licence
    G("smollm2.gguf", "general.name", "Smollm2 135M 8k Lc100K Mix1 Ep2", "general.organization", "HuggingFaceTB",
      "general.license", "apache-2.0");
    expect_gguf("smollm2.gguf", NULL, NULL, "apache-2.0");
    // the source the GGUF was converted from beats the model it derives from
    G("source.gguf", "general.base_model.0.repo_url", "https://huggingface.co/HuggingFaceTB/SmolLM2-135M",
      "general.source.url", "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct");
    expect_gguf("source.gguf", "HuggingFaceTB/SmolLM2-135M-Instruct", "GGUF general.source.url", NULL);
    G("repo.gguf", "general.source.huggingface.repository", "Qwen/Qwen3-8B", "general.source.url",
      "https://huggingface.co/other/model");
    expect_gguf("repo.gguf", "Qwen/Qwen3-8B", "GGUF general.source.huggingface.repository", NULL);
    // a paper page or another host is not a model repo; the base model's repo_url then serves
    G("paper.gguf", "general.source.url", "https://huggingface.co/papers/2605.17757", "general.source.repo_url",
      "https://github.com/org/model", "general.base_model.0.repo_url", "https://huggingface.co/meta-llama/Llama-3.2-1B");
    expect_gguf("paper.gguf", "meta-llama/Llama-3.2-1B", "GGUF general.base_model.0.repo_url", NULL);
    // organization + name: only when they are an id as written (llama.cpp writes titles)
    G("org.gguf", "general.base_model.0.organization", "HuggingFaceTB", "general.base_model.0.name", "SmolLM2-135M");
    expect_gguf("org.gguf", "HuggingFaceTB/SmolLM2-135M", "GGUF general.base_model.0.organization and .name", NULL);
    G("title.gguf", "general.base_model.0.organization", "Huggingfacetb", "general.base_model.0.name", "Smollm2 135M",
      "general.license", "mit");
    expect_gguf("title.gguf", NULL, NULL, "mit");
    // a bare id is accepted only from the key that holds ids
    G("bare.gguf", "general.source.url", "example.com/page");
    expect_gguf("bare.gguf", NULL, NULL, NULL);
#undef G
}

static void write_text(const char * path, const char * text) { ok(osc_write_file_atomic(path, text, strlen(text))); }

static void test_detect(void ** state) {
    (void) state;
    char snap[512], gguf[600], readme[600], cwd[PATH_MAX];
    snprintf(snap, sizeof snap, "%s/hub/models--o--n/snapshots/c1", tmpdir);
    ok(osc_mkdirs(snap));
    snprintf(gguf, sizeof gguf, "%s/model.gguf", snap);
    write_gguf(gguf, "general.source.url", "https://huggingface.co/elsewhere/model", "general.license", "mit", NULL);
    struct oscar_base_model b;
    // 1. --base-model wins over everything
    ok(oscar_base_model_detect("me/explicit", "o/n:model.gguf", gguf, &b));
    assert_string_equal(b.id, "me/explicit");
    assert_string_equal(b.id_from, "--base-model");
    assert_string_equal(b.license, "mit");
    // 2. --model as a Hub spec
    ok(oscar_base_model_detect(NULL, "spec/owner@main:model.gguf", gguf, &b));
    assert_string_equal(b.id, "spec/owner");
    assert_string_equal(b.id_from, "--model");
    // 3. the cache path beats the GGUF's own source
    ok(oscar_base_model_detect(NULL, gguf, gguf, &b));
    assert_string_equal(b.id, "o/n");
    assert_string_equal(b.id_from, "the HF cache path of --model");
    // ... also for a relative path, through the real path of its directory
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(snap), 0);
    enum oscar_status st = oscar_base_model_detect(NULL, "model.gguf", "model.gguf", &b);
    assert_int_equal(chdir(cwd), 0);
    ok(st);
    assert_string_equal(b.id, "o/n");
    // 4. outside the cache: the GGUF's metadata
    char plain[600];
    snprintf(plain, sizeof plain, "%s/plain.gguf", tmpdir);
    write_gguf(plain, "general.source.url", "https://huggingface.co/elsewhere/model", NULL);
    ok(oscar_base_model_detect(NULL, plain, plain, &b));
    assert_string_equal(b.id, "elsewhere/model");
    assert_string_equal(b.license, "");
    // 5. --random-init: nothing but --base-model
    ok(oscar_base_model_detect(NULL, NULL, NULL, &b));
    assert_string_equal(b.id, "");
    // a model directory: the licence from its README.md front matter
    char dir[512];
    snprintf(dir, sizeof dir, "%s/hfdir", tmpdir);
    ok(osc_mkdirs(dir));
    snprintf(readme, sizeof readme, "%s/README.md", dir);
    write_text(readme, "---\nlanguage:\n- en\nlicense: apache-2.0\ntags: [a,\n  b]\n---\n# model\n");
    ok(oscar_base_model_detect(NULL, dir, dir, &b));
    assert_string_equal(b.id, "");
    assert_string_equal(b.license, "apache-2.0");
    assert_string_equal(b.license_from, "the model's README.md");
    write_text(readme, "# a README without front matter\n");
    ok(oscar_base_model_detect(NULL, dir, dir, &b));
    assert_string_equal(b.license, "");
    write_text(readme, "---\nlicense: [mit\n---\n"); // broken: a warning, no licence, no failure
    ok(oscar_base_model_detect(NULL, dir, dir, &b));
    assert_string_equal(b.license, "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_from_spec), cmocka_unit_test(test_from_cache_path), cmocka_unit_test(test_from_url),
        cmocka_unit_test(test_from_gguf), cmocka_unit_test(test_detect),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
